"""Ray implementation of the single controller: resource pools, actor worker groups, colocation.

Mirrors `verl/single_controller/ray/base.py`. The controller (driver) process owns a
`RayWorkerGroup`; each worker is a Ray actor (its own process) placed on a reserved slot of a
placement group. Group methods work exactly as in the in-process group (same dispatch and
collect code, `../base/`); only two steps differ: a call on one worker is `actor.method.remote(...)`
(returning an `ObjectRef` at once), and waiting turns the refs into results.

Waiting is bounded: `RayWorkerGroup(get_timeout_s=...)` caps every call, and a worker that
dies or raises surfaces as a `WorkerGroupError` naming the rank, class, actor and method. verl
waits with a plain `ray.get` and watches aliveness from a background thread that aborts the
driver (`check_workers_alive`, `verl/single_controller/base/worker_group.py:102`).

Simplifications versus verl: one resource-pool class (no `SubRayResourcePool` /
`split_resource_pool` / `merge_resource_pool`), no detached workers or `from_detached`, no
placement-group sorting by node IP (`sort_placement_group_by_node_ip`,
`verl/single_controller/ray/base.py:70`), no profiler options, no `FusedWorker`.
"""

from __future__ import annotations

import random
import string
import time
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..base.colocated import _unwrap_ray_remote, create_worker_dict_cls
from ..base.worker import get_free_port
from ..base.worker_group import ClassWithInitArgs, ResourcePool, WorkerGroup


class WorkerGroupError(RuntimeError):
    """A worker of a RayWorkerGroup died, raised, or did not answer in time."""


def get_random_string(length: int) -> str:
    """Random letters and digits, used to keep actor names unique (`verl/single_controller/ray/base.py:41`)."""
    return "".join(random.choice(string.ascii_letters + string.digits) for _ in range(length))


@ray.remote(num_cpus=0)
def _node_ip_and_free_port() -> tuple[str, str]:
    """Run on the node of rank 0: its IP and a free port there (`get_master_addr_port`, `verl/single_controller/ray/base.py:91`)."""
    address = ray.util.get_node_ip_address().strip("[]")
    return address, str(get_free_port(""))


class RayResourcePool(ResourcePool):
    """Worker slots reserved as Ray placement groups, one group per node.

    Mirrors `RayResourcePool` (`verl/single_controller/ray/base.py:113`). Each slot is a bundle of
    `{"CPU": max_colocate_count}` plus `{"GPU": 1}` when `use_gpu`; `STRICT_PACK` keeps one
    node's bundles on one node, and the placement group is ready only once Ray has
    `max_colocate_count * world_size` CPUs free (`cpus_needed()`; a GPU per slot as well with
    `use_gpu`), otherwise it waits forever in verl (`ray.get(pg.ready())`) and fails after
    `ready_timeout_s` here. The constructor's defaults differ from what verl's trainer uses:
    `RayResourcePool` defaults to `use_gpu=True, max_colocate_count=10`, but the V1 trainer builds its
    pools through `ResourcePoolManager` (`verl/single_controller/ray/base.py:185`), whose
    `max_colocate_count` default is 3 (always with `use_gpu=True`): three CPUs and one GPU per slot.
    minirl's trainer builds CPU-only pools with one CPU per slot (`max_colocate_count=1`, the default
    here), so its Ray needs `num_cpus >= world_size` (it asks for `max(8, ranks + 2)`).
    """

    def __init__(
        self,
        process_on_nodes: list[int] | None = None,
        use_gpu: bool = False,
        name_prefix: str | None = None,
        max_colocate_count: int = 1,
        ready_timeout_s: float = 120.0,
    ) -> None:
        super().__init__(process_on_nodes, max_colocate_count)
        self.use_gpu = use_gpu
        self.name_prefix = get_random_string(6) if name_prefix is None else name_prefix
        self.ready_timeout_s = ready_timeout_s
        self.pgs: list[PlacementGroup] | None = None

    def bundle(self) -> dict[str, float]:
        """The resources reserved for one worker slot."""
        bundle = {"CPU": self.max_colocate_count}
        if self.use_gpu:
            bundle["GPU"] = 1
        return bundle

    def cpus_needed(self) -> int:
        """Logical CPUs Ray must have free before the placement groups can be ready: one bundle per slot."""
        return int(self.max_colocate_count) * self.world_size

    def get_placement_groups(self, strategy: str = "STRICT_PACK") -> list[PlacementGroup]:
        """Create (first call) and return one ready placement group per node."""
        if self.pgs is not None:
            return self.pgs
        name = f"{self.name_prefix}minirl_group_{'_'.join(map(str, self._store))}:"
        pgs = [
            placement_group([self.bundle() for _ in range(count)], strategy=strategy, name=f"{name}{index}")
            for index, count in enumerate(self._store)
        ]
        ready, _ = ray.wait([pg.ready() for pg in pgs], num_returns=len(pgs), timeout=self.ready_timeout_s)
        if len(ready) < len(pgs):
            for pg in pgs:
                ray.util.remove_placement_group(pg)
            raise WorkerGroupError(
                f"RayResourcePool: could not reserve {self._store} slots of {self.bundle()} within "
                f"{self.ready_timeout_s:.0f} s; Ray has {ray.available_resources()} free. Start Ray with more "
                f"CPUs (init_ray(num_cpus=...); logical CPUs may exceed physical cores), lower "
                f"max_colocate_count, or release older pools (RayResourcePool.remove())."
            )
        self.pgs = pgs
        return pgs

    def remove(self) -> None:
        """Release the reserved slots (kills nothing by itself; actors in them should be gone)."""
        for pg in self.pgs or []:
            ray.util.remove_placement_group(pg)
        self.pgs = None


class RayClassWithInitArgs(ClassWithInitArgs):
    """A `ray.remote` class, its constructor arguments and actor options (`verl/single_controller/ray/base.py:339`)."""

    def __init__(self, cls, *args, **kwargs) -> None:
        super().__init__(cls, *args, **kwargs)
        self._options: dict[str, Any] = {}

    def update_options(self, options: dict) -> None:
        """Merge Ray actor options (runtime_env, name, ...) used by the next `__call__`."""
        self._options.update(options)

    def __call__(self, placement_group, placement_group_bundle_idx: int, use_gpu: bool = False,
                 num_gpus: float = 1, num_cpus: float = 1) -> ray.actor.ActorHandle:
        """Start one actor in bundle `placement_group_bundle_idx` of `placement_group`."""
        options = {
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=placement_group_bundle_idx
            ),
            "num_cpus": num_cpus,
            **self._options,
        }
        if use_gpu:
            options["num_gpus"] = num_gpus
        return self.cls.options(**options).remote(*self.args, **self.kwargs)


class RayWorkerGroup(WorkerGroup):
    """`world_size` Ray actors of one class, called as one object.

    Mirrors `RayWorkerGroup` (`verl/single_controller/ray/base.py:418`).

    Args:
        resource_pool: where the actors go, one per slot.
        ray_cls_with_init: `RayClassWithInitArgs(ray.remote(MyWorker), *args, **kwargs)`; a plain
            class inside is wrapped with `ray.remote` for you.
        name_prefix: prefix of the actor names (random by default).
        get_timeout_s: the longest any group call may wait for its workers (None: forever).
        worker_env: extra environment variables for every worker.

    Every actor is started with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT in its environment: MASTER_PORT is a port that was free on rank 0's node (on a
    single-node cluster, on 127.0.0.1), so the workers can run `torch.distributed.init_process_group`.
    """

    def __init__(
        self,
        resource_pool: RayResourcePool,
        ray_cls_with_init: RayClassWithInitArgs,
        name_prefix: str | None = None,
        get_timeout_s: float | None = 1800.0,
        worker_env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(resource_pool)
        if not hasattr(ray_cls_with_init.cls, "remote"):
            ray_cls_with_init.cls = ray.remote(ray_cls_with_init.cls)
        self.ray_cls_with_init = ray_cls_with_init
        self.resource_pool = resource_pool
        self.name_prefix = get_random_string(6) if name_prefix is None else name_prefix
        self.get_timeout_s = get_timeout_s
        self._worker_cls = _unwrap_ray_remote(ray_cls_with_init.cls)
        self._create_workers(resource_pool, ray_cls_with_init, dict(worker_env or {}))
        self._bind_worker_method(self._worker_cls)

    def _master_addr_port(self, pg: PlacementGroup) -> tuple[str, str]:
        """Rendezvous address for the group: rank 0's node and a free port there."""
        if len([node for node in ray.nodes() if node["Alive"]]) == 1:
            # single machine: loopback, so no traffic between workers ever leaves it
            return "127.0.0.1", str(get_free_port("127.0.0.1"))
        strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=0)
        return ray.get(_node_ip_and_free_port.options(scheduling_strategy=strategy).remote(), timeout=120)

    def _create_workers(self, resource_pool: RayResourcePool, cia: RayClassWithInitArgs, worker_env: dict) -> None:
        """Start one actor per slot, rank by rank (`RayWorkerGroup._init_with_resource_pool`, `verl/single_controller/ray/base.py:538`)."""
        pgs = resource_pool.get_placement_groups()
        self._master_addr, self._master_port = self._master_addr_port(pgs[0])
        protected = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
        if protected & worker_env.keys():
            raise ValueError(f"worker_env may not set {sorted(protected & worker_env.keys())}; the group sets them.")
        rank = 0
        for pg_index, (pg, local_world_size) in enumerate(zip(pgs, resource_pool.store)):
            for local_rank in range(local_world_size):
                env_vars = {
                    **worker_env,
                    "RANK": str(rank),
                    "WORLD_SIZE": str(resource_pool.world_size),
                    "LOCAL_RANK": str(local_rank),
                    "LOCAL_WORLD_SIZE": str(local_world_size),
                    "MASTER_ADDR": self._master_addr,
                    "MASTER_PORT": self._master_port,
                    "WG_PREFIX": self.name_prefix,
                    "WG_BACKEND": "ray",
                }
                name = f"{self.name_prefix}{self._worker_cls.__name__}_{pg_index}:{local_rank}"
                cia.update_options({"runtime_env": {"env_vars": env_vars}, "name": name})
                worker = cia(
                    placement_group=pg,
                    placement_group_bundle_idx=local_rank,
                    use_gpu=resource_pool.use_gpu,
                    num_gpus=1 / resource_pool.max_colocate_count,
                )
                self._workers.append(worker)
                self._worker_names.append(name)
                rank += 1

    def _execute_remote_single_worker(self, worker, method_name: str, *args, **kwargs):
        return getattr(worker, method_name).remote(*args, **kwargs)

    def kill_workers(self) -> None:
        """Kill every actor of the group and release its placement groups (the run is over).

        Groups made by `spawn` share these actors: kill through one of them, once. verl leaves
        this to `ray.shutdown()` at the end of the driver.
        """
        for worker in self._workers:
            ray.kill(worker)
        self.resource_pool.remove()

    def _wait(self, method_name: str, handles):
        """Wait for the refs of one call (all ranks, or rank 0 only); results in rank order.

        Returns as soon as any worker fails, naming it; raises if the whole call takes longer
        than `get_timeout_s`.
        """
        single = not isinstance(handles, list)
        refs = [handles] if single else list(handles)
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        deadline = None if self.get_timeout_s is None else time.monotonic() + self.get_timeout_s
        pending = refs
        while pending:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, pending = ray.wait(pending, num_returns=1, timeout=remaining)
            if not ready:
                late = sorted(rank_of[ref] for ref in pending)
                raise WorkerGroupError(
                    f"{self._describe(late[0], method_name)} did not return within get_timeout_s="
                    f"{self.get_timeout_s} s (ranks still running: {late}). Raise get_timeout_s if the step "
                    f"is legitimately slow; otherwise look for a hang, e.g. a collective waiting on a dead peer."
                )
            for ref in ready:
                results[rank_of[ref]] = self._get_one(ref, rank_of[ref], method_name)
        return results[0] if single else results

    def _get_one(self, ref, rank: int, method_name: str):
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as error:
            raise WorkerGroupError(
                f"{self._describe(rank, method_name)} died (the actor process is gone: crash, os._exit, "
                f"out of memory or ray.kill). Its stdout/stderr are in the Ray session's logs directory "
                f"(worker-*.out/err). Ray says: {type(error).__name__}: {error}"
            ) from error
        except ray.exceptions.RayTaskError as error:
            raise WorkerGroupError(
                f"{self._describe(rank, method_name)} raised {type(error.cause).__name__}: {error.cause}"
            ) from error

    def _describe(self, rank: int, method_name: str) -> str:
        return (
            f"worker rank {rank} of {self.world_size} (class {self._worker_cls.__name__}, actor "
            f"'{self._worker_names[rank]}') running '{self._method_prefix}{method_name}'"
        )


def create_colocated_worker_cls(class_dict: dict[str, ClassWithInitArgs]) -> RayClassWithInitArgs:
    """One Ray actor class hosting several roles; role `key`'s methods appear as `{key}_{method}`.

    `class_dict` maps role names to `RayClassWithInitArgs` (or `ClassWithInitArgs`) of Worker
    subclasses. Build a `RayWorkerGroup` from the result, then `wg.spawn({"actor", "ref"})` for one
    group per role. Mirrors `create_colocated_worker_cls` (`verl/single_controller/ray/base.py:984`).
    """
    return RayClassWithInitArgs(ray.remote(create_worker_dict_cls(class_dict)))
