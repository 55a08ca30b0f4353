"""Single controller without Ray: every Dispatch mode, padding, nd-mesh, futures, errors.

Runs on `InProcessWorkerGroup` (workers are objects in this process, run one after another); the
Ray group shares all of this code except how one call reaches one worker.
"""

import os

import pytest
import torch

from minirl.protocol import DataProto
from minirl.single_controller import (
    ClassWithInitArgs,
    Dispatch,
    Execute,
    InProcessWorkerGroup,
    ResourcePool,
    Worker,
    WorkerGroupFuture,
    create_worker_dict_cls,
    make_nd_compute_dataproto_dispatch_fn,
    register,
)
from minirl.single_controller.base.decorator import MAGIC_ATTR


def make_batch(n: int) -> DataProto:
    """Rows 0..n-1 with x = row index, so every output row says where it came from."""
    return DataProto.from_dict({"x": torch.arange(n, dtype=torch.float32)}, meta_info={"temperature": 1.0})


class ToyWorker(Worker):
    """A worker whose methods make the dispatch visible: they report rank and what they received."""

    def __init__(self, scale: float = 2.0):
        super().__init__()
        self.scale = scale
        self.seen: list[list[float]] = []  # x values of every chunk this worker received
        self.calls = 0

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self, tag):
        return (self.rank, self.world_size, tag)

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def add_rank(self, x, offset=0):
        return x + self.rank + offset

    @register(dispatch_mode=Dispatch.DP_COMPUTE)
    def sum_share(self, share):
        return sum(share)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def double(self, data: DataProto) -> DataProto:
        """Scale x; tag each row with the rank that computed it."""
        self.seen.append(data.batch["x"].tolist())
        return DataProto.from_dict({"y": data.batch["x"] * self.scale}, non_tensors={"rank": [self.rank] * len(data)})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def double_async(self, data: DataProto) -> DataProto:
        return self.double(data)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def add_y_and_x(self, data: DataProto, other: DataProto) -> DataProto:
        return DataProto.from_dict({"z": data.batch["y"] + other.batch["x"]})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def metrics(self, data: DataProto) -> dict:
        return {"rank": self.rank, "rows": len(data), "sum_x": float(data.batch["x"].sum())}

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def wrong_output(self, data: DataProto) -> dict:
        return {"rows": len(data)}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def rank_zero_only(self):
        self.calls += 1
        return self.rank

    @register(dispatch_mode={"dispatch_fn": lambda wg, x: ([[x * r for r in range(wg.world_size)]], {}),
                             "collect_fn": lambda wg, outs: sum(outs)})
    def echo(self, value):
        return value

    def not_registered(self):
        return "only callable on a worker"


@pytest.fixture()
def wg():
    return InProcessWorkerGroup(ResourcePool(process_on_nodes=[2]), ClassWithInitArgs(ToyWorker, scale=2.0))


# -- the decorator and the binding ------------------------------------------------------------


def test_register_stores_settings_on_the_function_and_rejects_bad_modes():
    attrs = getattr(ToyWorker.double_async, MAGIC_ATTR)
    assert attrs == {"dispatch_mode": Dispatch.DP_COMPUTE_PROTO, "execute_mode": Execute.ALL,
                     "blocking": False, "materialize_futures": True}
    with pytest.raises(TypeError, match="dispatch_mode must be a Dispatch member"):
        register(dispatch_mode="DP_COMPUTE_PROTO")
    with pytest.raises(TypeError, match="dispatch_mode must be a Dispatch member"):
        register(dispatch_mode={"dispatch_fn": print})  # no collect_fn
    with pytest.raises(TypeError, match="execute_mode must be an Execute member"):
        register(execute_mode="ALL")


def test_group_binds_registered_methods_only(wg):
    assert {"whoami", "double", "metrics", "_query_dispatch_info", "execute_with_func_generator"} <= set(wg.method_names)
    assert not hasattr(wg, "not_registered")
    assert wg.double.__doc__ == ToyWorker.double.__doc__


def test_worker_identity_comes_from_its_own_env_and_the_env_is_restored(wg):
    assert [w.rank for w in wg.workers] == [0, 1]
    assert [w.world_size for w in wg.workers] == [2, 2]
    addr, port = wg.workers[1].get_master_addr_port()
    assert addr == "127.0.0.1" and port == wg.master_port and int(port) > 0
    assert wg.workers[0].get_master_addr_port() == (addr, port)  # one rendezvous point for all ranks
    assert os.environ.get("RANK") is None  # the constructors' env did not leak into the controller


def test_resource_pool_local_ranks_and_multi_node_group():
    pool = ResourcePool(process_on_nodes=[2, 1])
    assert pool.world_size == 3
    assert pool.local_world_size_list() == [2, 2, 1] and pool.local_rank_list() == [0, 1, 0]
    group = InProcessWorkerGroup(pool, ToyWorker)  # a bare class is accepted too
    assert [(w.rank, w.local_rank) for w in group.workers] == [(0, 0), (1, 1), (2, 0)]
    with pytest.raises(ValueError, match="positive process count"):
        ResourcePool(process_on_nodes=[2, 0])


# -- one test per dispatch mode -----------------------------------------------------------------


def test_one_to_all_sends_the_same_value_to_every_rank(wg):
    assert wg.whoami("hello") == [(0, 2, "hello"), (1, 2, "hello")]
    assert wg.whoami(tag=[1, 2, 3]) == [(0, 2, [1, 2, 3]), (1, 2, [1, 2, 3])]  # a list is just a value here


def test_all_to_all_sends_entry_i_to_rank_i(wg):
    assert wg.add_rank([10, 20]) == [10, 21]
    assert wg.add_rank([10, 20], offset=[100, 200]) == [110, 221]


def test_all_to_all_rejects_a_list_of_the_wrong_length(wg):
    with pytest.raises(ValueError, match=r"one entry per worker \(world_size=2\), but positional argument 0 "
                                         r"is a list of length 3.*Dispatch.ONE_TO_ALL"):
        wg.add_rank([1, 2, 3])
    with pytest.raises(ValueError, match="keyword argument 'offset' is an int"):
        wg.add_rank([1, 2], offset=5)


def test_dp_compute_returns_one_output_per_rank(wg):
    assert wg.sum_share([[1, 2], [3, 4, 5]]) == [3, 12]
    with pytest.raises(ValueError, match="Dispatch.DP_COMPUTE expects every argument"):
        wg.sum_share([1, 2, 3, 4])


def test_dp_compute_proto_chunks_by_rank_and_concatenates_in_order(wg):
    out = wg.double(make_batch(4))
    assert out.batch["y"].tolist() == [0.0, 2.0, 4.0, 6.0]
    assert list(out.non_tensor_batch["rank"]) == [0, 0, 1, 1]  # rank 0 got rows 0-1, rank 1 rows 2-3
    assert [w.seen for w in wg.workers] == [[[0.0, 1.0]], [[2.0, 3.0]]]


def test_dp_compute_proto_pads_an_uneven_batch_and_removes_the_padding(wg):
    out = wg.double(make_batch(5))
    # 5 rows + 1 padding row (a copy of row 0) = 3 per rank; the padding row is dropped after concat
    assert [w.seen for w in wg.workers] == [[[0.0, 1.0, 2.0]], [[3.0, 4.0, 0.0]]]
    assert len(out) == 5
    assert out.batch["y"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert list(out.non_tensor_batch["rank"]) == [0, 0, 0, 1, 1]


def test_dp_compute_proto_pads_a_batch_smaller_than_the_group(wg):
    out = wg.double(make_batch(1))
    assert [w.seen for w in wg.workers] == [[[0.0]], [[0.0]]]
    assert out.batch["y"].tolist() == [0.0] and list(out.non_tensor_batch["rank"]) == [0]


def test_dp_compute_proto_chunks_every_argument_alike(wg):
    doubled = wg.double(make_batch(3))
    out = wg.add_y_and_x(doubled, other=make_batch(3))
    assert out.batch["z"].tolist() == [0.0, 3.0, 6.0]  # 2x + x, row by row, across padding


def test_dp_compute_proto_errors_name_the_argument_and_the_fix(wg):
    with pytest.raises(TypeError, match="positional argument 0 is a list.*data.meta_info"):
        wg.double([1, 2])
    with pytest.raises(ValueError, match="first has 4 rows and keyword argument 'other' has 2"):
        wg.add_y_and_x(make_batch(4), other=make_batch(2))
    with pytest.raises(TypeError, match="rank 0 returned a dict.*DP_COMPUTE_METRIC"):
        wg.wrong_output(make_batch(2))


def test_dp_compute_proto_with_func_sends_the_function_to_every_rank(wg):
    def scale_by_rank(worker, data):
        return DataProto.from_dict({"y": data.batch["x"] * (worker.rank + 1)})

    out = wg.execute_with_func_generator(scale_by_rank, make_batch(3))  # padded to 4, padding dropped
    assert out.batch["y"].tolist() == [0.0, 1.0, 4.0]  # rows 0-1 on rank 0 (x1), row 2 on rank 1 (x2)
    with pytest.raises(TypeError, match="expects a function as the first positional argument"):
        wg.execute_with_func_generator(make_batch(2))


def test_dp_compute_metric_chunks_like_proto_but_returns_one_value_per_rank(wg):
    assert wg.metrics(make_batch(4)) == [{"rank": 0, "rows": 2, "sum_x": 1.0}, {"rank": 1, "rows": 2, "sum_x": 5.0}]
    # uneven: the list is not trimmed (one entry per rank), and rank 1's metrics include the padding row
    assert wg.metrics(make_batch(3)) == [{"rank": 0, "rows": 2, "sum_x": 1.0}, {"rank": 1, "rows": 2, "sum_x": 2.0}]


def test_custom_dispatch_mode_as_a_dict(wg):
    assert wg.echo(5) == 0 * 5 + 1 * 5  # rank r gets r*5; collect sums
    with pytest.raises(ValueError, match="execute_all\\('whoami'\\).*make the dispatch_fn return"):
        wg.execute_all("whoami", "not a per-rank list")


# -- execute modes, futures ---------------------------------------------------------------------


def test_execute_rank_zero_runs_on_rank_zero_only(wg):
    assert wg.rank_zero_only() == 0  # one value, not a list
    assert [w.calls for w in wg.workers] == [1, 0]
    assert wg.execute_func_rank_zero(lambda a, b: a * b, 6, b=7) == 42


def test_non_blocking_call_returns_a_future_that_feeds_the_next_call(wg):
    future = wg.double_async(make_batch(3))
    assert isinstance(future, WorkerGroupFuture)
    out = future.get()
    assert out.batch["y"].tolist() == [0.0, 2.0, 4.0] and future.get() is out  # computed once
    # a future passed to another group method is waited for before dispatch (materialize_futures)
    chained = wg.add_y_and_x(wg.double_async(make_batch(3)), other=make_batch(3))
    assert chained.batch["z"].tolist() == [0.0, 3.0, 6.0]


# -- nd-mesh dispatch ---------------------------------------------------------------------------


class MeshWorker(Worker):
    """Four workers on a (dp=2, tp=2) mesh: tp rank 0 of each dp rank reports the result."""

    def __init__(self, dp_of_rank=(0, 0, 1, 1), collect_of_rank=(True, False, True, False)):
        super().__init__()
        self.seen = []
        self._register_dispatch_collect_info("actor", dp_rank=dp_of_rank[self.rank], is_collect=collect_of_rank[self.rank])

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn("actor"))
    def forward(self, data: DataProto) -> DataProto:
        self.seen.append(data.batch["x"].tolist())
        return DataProto.from_dict({"y": data.batch["x"] + 100}, non_tensors={"worker": [self.rank] * len(data)})


def mesh_group(**init_kwargs):
    return InProcessWorkerGroup(ResourcePool(process_on_nodes=[4]), ClassWithInitArgs(MeshWorker, **init_kwargs))


def test_nd_mesh_chunks_by_dp_rank_and_collects_from_flagged_workers_only():
    group = mesh_group()
    out = group.forward(make_batch(4))
    # chunks by dp size (2), not world size (4): both tp ranks of a dp rank see the same rows
    assert [w.seen for w in group.workers] == [[[0.0, 1.0]], [[0.0, 1.0]], [[2.0, 3.0]], [[2.0, 3.0]]]
    assert out.batch["y"].tolist() == [100.0, 101.0, 102.0, 103.0]
    assert list(out.non_tensor_batch["worker"]) == [0, 0, 2, 2]  # workers 1 and 3 were not collected
    assert group._dispatch_info["actor"] == [0, 0, 1, 1]
    assert group._collect_info["actor"] == [True, False, True, False]


def test_nd_mesh_pads_uneven_batches_and_orders_output_by_dp_rank():
    # dp ranks in reverse worker order, and the second tp rank reports: output rows keep input order
    group = mesh_group(dp_of_rank=(1, 1, 0, 0), collect_of_rank=(False, True, False, True))
    out = group.forward(make_batch(3))
    assert [w.seen for w in group.workers] == [[[2.0, 0.0]], [[2.0, 0.0]], [[0.0, 1.0]], [[0.0, 1.0]]]
    assert out.batch["y"].tolist() == [100.0, 101.0, 102.0]
    assert list(out.non_tensor_batch["worker"]) == [3, 3, 1]


def test_nd_mesh_rejects_a_dp_rank_with_two_collectors():
    group = mesh_group(collect_of_rank=(True, True, True, False))
    with pytest.raises(ValueError, match=r"exactly one collect worker per dp rank 0..1.*flagged workers \[0, 1, 2\]"):
        group.forward(make_batch(4))


def test_nd_mesh_unregistered_mesh_is_a_clear_error():
    group = InProcessWorkerGroup(ResourcePool(process_on_nodes=[2]), ToyWorker)
    with pytest.raises(KeyError, match="mesh 'critic' is not registered on rank 0"):
        group._query_dispatch_info("critic")
    group.workers[0]._register_dispatch_collect_info("x", 0, True)
    with pytest.raises(ValueError, match="mesh 'x' is already registered on rank 0"):
        group.workers[0]._register_dispatch_collect_info("x", 0, True)


# -- colocation: two roles in one worker ---------------------------------------------------------


class CounterRole(Worker):
    def __init__(self, start: int):
        super().__init__()
        self.value = start

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def bump(self, by):
        self.value += by
        return (self.rank, self.value)


def test_colocated_class_prefixes_role_methods_and_spawn_removes_the_prefix():
    host_cls = create_worker_dict_cls({"actor": ClassWithInitArgs(CounterRole, start=0),
                                       "ref": ClassWithInitArgs(ToyWorker, scale=3.0)})
    group = InProcessWorkerGroup(ResourcePool(process_on_nodes=[2]), host_cls)
    assert {"actor_bump", "ref_double", "ref_whoami"} <= set(group.method_names)
    assert group.actor_bump(5) == [(0, 5), (1, 5)]
    roles = group.spawn({"actor", "ref"})
    assert roles["actor"].bump(1) == [(0, 6), (1, 6)]  # same workers, same state
    assert roles["ref"].double(make_batch(2)).batch["y"].tolist() == [0.0, 3.0]
    assert not hasattr(roles["actor"], "double") and not hasattr(roles["ref"], "bump")
    assert group.workers[1].worker_dict["ref"].rank == 1  # roles read the host's env
    with pytest.raises(KeyError, match="no role 'critic'.*roles are \\['actor', 'ref'\\]"):
        group.spawn({"critic"})
    with pytest.raises(TypeError, match="colocated role 'x' must be a Worker subclass"):
        create_worker_dict_cls({"x": ClassWithInitArgs(dict)})


def test_a_ray_pool_slot_reserves_max_colocate_count_cpus_and_the_trainer_asks_ray_for_all_of_them():
    """The rule in `RayResourcePool`'s docstring: a slot is `{"CPU": max_colocate_count}` (+ one GPU with
    `use_gpu`), so the placement groups need `max_colocate_count * world_size` CPUs; minirl's trainer
    starts a local Ray with at least that many (plus head room). No Ray is started here."""
    pytest.importorskip("ray")
    from minirl.single_controller.ray import RayResourcePool
    from minirl.trainer.ppo.worker_groups import ray_num_cpus

    minirl_pool = RayResourcePool(process_on_nodes=[2])            # what minirl's trainer builds on CPU
    assert minirl_pool.bundle() == {"CPU": 1} and minirl_pool.cpus_needed() == 2
    verl_v1_like = RayResourcePool(process_on_nodes=[8, 8], use_gpu=True, max_colocate_count=3)  # ResourcePoolManager's 3
    assert verl_v1_like.bundle() == {"CPU": 3, "GPU": 1} and verl_v1_like.cpus_needed() == 48
    for pool in (minirl_pool, verl_v1_like, RayResourcePool(process_on_nodes=[4, 4], max_colocate_count=10)):
        assert ray_num_cpus(pool) >= pool.cpus_needed() + 2   # the pool fits, with head room
    assert ray_num_cpus(minirl_pool) == 8 and ray_num_cpus(minirl_pool, requested=3) == 3  # an explicit value wins
