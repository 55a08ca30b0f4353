"""Single controller on Ray: actors, rank environment, DataProto dispatch, colocation, failures.

One Ray start for the whole test session (30-40 s on a small machine): `ray_session` below. Most
tests share one 2-worker group (`toy_group`); starting actors that import torch costs ~20 s here.
"""

import os
import sys
import time

import pytest
import ray
import torch

from minirl.protocol import DataProto
from minirl.single_controller import Dispatch, Worker, register
from minirl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    WorkerGroupError,
    create_colocated_worker_cls,
    init_ray,
    shutdown_ray,
)

pytestmark = pytest.mark.slow

# The worker classes below live in this test module, which Ray's worker processes cannot import
# by name: ship them by value instead.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="session")
def ray_session():
    init_ray(num_cpus=8)  # logical CPUs: enough slots for a few 2-worker pools at once
    yield
    shutdown_ray()


def make_batch(n: int) -> DataProto:
    return DataProto.from_dict({"x": torch.arange(n, dtype=torch.float32)})


class RayToyWorker(Worker):
    def __init__(self, scale: float = 2.0):
        super().__init__()
        self.scale = scale

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self):
        env = {key: os.environ[key] for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        return self.rank, self.world_size, self.get_master_addr_port(), env, os.getpid()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def double(self, data: DataProto) -> DataProto:
        return DataProto.from_dict({"y": data.batch["x"] * self.scale}, non_tensors={"rank": [self.rank] * len(data)})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def double_async(self, data: DataProto) -> DataProto:
        return self.double(data)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail_on(self, rank):
        if self.rank == rank:
            raise ValueError(f"bad input on rank {self.rank}")
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def exit_on(self, rank):
        if self.rank == rank:
            os._exit(1)
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def sleep(self, seconds):
        time.sleep(seconds)
        return self.rank


class CounterRole(Worker):
    def __init__(self, start: int):
        super().__init__()
        self.value = start

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def bump(self, by):
        self.value += by
        return self.rank, self.value, os.getpid()


def _release(pool, group):
    for worker in group.workers:
        ray.kill(worker)
    pool.remove()


@pytest.fixture(scope="module")
def toy_group(ray_session):
    """One 2-worker group shared by the tests below (starting actors costs ~20 s here).

    The last test kills one of its workers, so it runs last (pytest keeps file order).
    """
    pool = RayResourcePool(process_on_nodes=[2])
    group = RayWorkerGroup(pool, RayClassWithInitArgs(RayToyWorker, scale=3.0), get_timeout_s=60)
    yield group
    _release(pool, group)


def test_ray_group_sets_rank_env_and_dispatches_a_dataproto(toy_group):
    group = toy_group
    info = group.whoami()
    assert [rank for rank, *_ in info] == [0, 1] and {size for _, size, *_ in info} == {2}
    assert len({pid for *_, pid in info}) == 2  # two processes
    port = group.master_port
    assert all(addr_port == ("127.0.0.1", port) for _, _, addr_port, _, _ in info)
    assert [env for *_, env, _ in info] == [
        {"RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port} for r in (0, 1)
    ]
    out = group.double(make_batch(5))  # uneven: padded to 6 for 2 workers, padding removed
    assert out.batch["y"].tolist() == [0.0, 3.0, 6.0, 9.0, 12.0]
    assert list(out.non_tensor_batch["rank"]) == [0, 0, 0, 1, 1]
    future = group.double_async(make_batch(2))
    assert future.get().batch["y"].tolist() == [0.0, 3.0]


def test_ray_colocated_class_hosts_two_roles_in_one_actor(ray_session):
    cia = create_colocated_worker_cls({"actor": RayClassWithInitArgs(CounterRole, start=10),
                                       "ref": RayClassWithInitArgs(ray.remote(RayToyWorker), scale=2.0)})
    pool = RayResourcePool(process_on_nodes=[2])
    group = RayWorkerGroup(pool, cia, get_timeout_s=60)
    try:
        roles = group.spawn({"actor", "ref"})
        bumped = roles["actor"].bump(1)
        assert [(rank, value) for rank, value, _ in bumped] == [(0, 11), (1, 11)]
        ref_info = roles["ref"].whoami()
        assert [pid for *_, pid in ref_info] == [pid for *_, pid in bumped]  # same processes
        assert roles["ref"].double(make_batch(3)).batch["y"].tolist() == [0.0, 2.0, 4.0]
        assert [value for _, value, _ in group.actor_bump(1)] == [12, 12]  # prefixed names on the host group
    finally:
        _release(pool, group)


def test_worker_exception_names_rank_class_and_method(toy_group):
    with pytest.raises(WorkerGroupError, match=r"worker rank 1 of 2 \(class RayToyWorker, actor '\w+RayToyWorker_0:1'\) "
                                               r"running 'fail_on' raised ValueError: bad input on rank 1"):
        toy_group.fail_on(1)
    assert toy_group.fail_on(-1) == [0, 1]  # an exception does not kill the worker


def test_hung_call_times_out_with_a_message(toy_group):
    toy_group.get_timeout_s = 1.0
    try:
        start = time.monotonic()
        with pytest.raises(WorkerGroupError, match=r"running 'sleep' did not return within get_timeout_s=1.0 s "
                                                   r"\(ranks still running: \[0, 1\]\)"):
            toy_group.sleep(3).get()
        assert time.monotonic() - start < 10
    finally:
        toy_group.get_timeout_s = 60


def test_worker_killed_mid_step_is_reported_within_bounded_time(toy_group):
    future = toy_group.sleep(120)  # non-blocking: both workers are now busy for two minutes
    time.sleep(4)  # let the previous test's sleep finish, so this call is really running
    start = time.monotonic()
    ray.kill(toy_group.workers[1])
    with pytest.raises(WorkerGroupError, match=r"worker rank 1 of 2 .* running 'sleep' died"):
        future.get()
    assert time.monotonic() - start < 30
