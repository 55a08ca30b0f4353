"""`ResourcePool`, `ClassWithInitArgs` and `WorkerGroup`: the controller's handle on N workers.

Mirrors `verl/single_controller/base/worker_group.py`. A `WorkerGroup` owns `world_size` workers
(objects in this process, or Ray actors in other processes) built from one worker class. When it is
created it looks at every method of that class marked with `@register` and adds a *group method*
of the same name to itself, so `wg.compute_log_prob(batch)` on the controller runs:

    args, kwargs = dispatch_fn(wg, batch)          # e.g. pad, then cut the batch into world_size chunks
    handles      = execute_all("compute_log_prob", ...)   # worker i gets chunk i
    outputs      = wait for every worker           # results, in rank order
    result       = collect_fn(wg, outputs)         # e.g. concatenate, then drop the padding rows

(verl builds this per method in `func_generator`, `verl/single_controller/ray/base.py:49`.)
Subclasses supply how one worker is called and how its result is awaited:
`InProcessWorkerGroup` (`inprocess.py`) and `RayWorkerGroup` (`../ray/base.py`).

Simplifications versus verl: no background aliveness thread (`start_worker_aliveness_check`,
`verl/single_controller/base/worker_group.py:166`; the Ray group instead waits with a timeout and
names the dead worker), no fused-worker plumbing, and non-blocking calls return a
`WorkerGroupFuture` for every mode (verl returns raw `ray.ObjectRef`s, or a `DataProtoFuture`,
`verl/protocol.py:1174`, for DataProto modes).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .decorator import (
    MAGIC_ATTR,
    PADDING_SIZE_KEY,
    Dispatch,
    _check_one_entry_per_rank,
    get_predefined_dispatch_fn,
    get_predefined_execute_fn,
)


class ResourcePool:
    """How many worker processes to place on each node (`ResourcePool`, `verl/single_controller/base/worker_group.py:27`).

    `ResourcePool(process_on_nodes=[2])` is two workers on one node; `[4, 4]` is eight workers on
    two nodes. `max_colocate_count` is how many worker groups may share one slot (one per role
    when actor, critic and reference run in the same processes); a Ray slot reserves that many CPUs.
    verl's `ResourcePool` and `RayResourcePool` constructors default it to 10, while verl's V1 trainer
    passes 3 (`ResourcePoolManager`, `verl/single_controller/ray/base.py:185`); minirl defaults to 1.
    """

    def __init__(self, process_on_nodes: list[int] | None = None, max_colocate_count: int = 1, n_gpus_per_node: int = 8):
        process_on_nodes = list(process_on_nodes or [])
        if any(not isinstance(n, int) or n < 1 for n in process_on_nodes):
            raise ValueError(f"process_on_nodes must list a positive process count per node, got {process_on_nodes}.")
        self._store = process_on_nodes
        self.max_colocate_count = max_colocate_count
        self.n_gpus_per_node = n_gpus_per_node

    @property
    def world_size(self) -> int:
        """Total number of workers across all nodes."""
        return sum(self._store)

    @property
    def store(self) -> list[int]:
        """Workers per node, as given."""
        return self._store

    def __call__(self) -> list[int]:
        return self._store

    def local_world_size_list(self) -> list[int]:
        """For each global rank, the number of workers on its node: [2, 1] -> [2, 2, 1]."""
        return [count for count in self._store for _ in range(count)]

    def local_rank_list(self) -> list[int]:
        """For each global rank, its index on its node: [2, 1] -> [0, 1, 0]."""
        return [local_rank for count in self._store for local_rank in range(count)]


class ClassWithInitArgs:
    """A class plus the arguments to build it later, in the worker's process.

    Mirrors `ClassWithInitArgs` (`verl/single_controller/base/worker_group.py:76`): the controller
    cannot construct the worker itself, because the worker must be built where it runs (with its
    own RANK in the environment).
    """

    def __init__(self, cls, *args, **kwargs) -> None:
        self.cls = cls
        self.args = args
        self.kwargs = kwargs

    def __call__(self) -> Any:
        return self.cls(*self.args, **self.kwargs)


class WorkerGroupFuture:
    """The result of a group method registered with `blocking=False`.

    The call has been sent to the workers; `.get()` waits for them (Ray) and returns the
    collected output, exactly what a blocking call would have returned. Passing a future as an
    argument to another group method waits for it first (`materialize_futures=True`).
    """

    def __init__(self, method_name: str, fetch: Callable[[], Any]) -> None:
        self.method_name = method_name
        self._fetch = fetch
        self._done = False
        self._value = None

    def get(self) -> Any:
        """Wait for the workers (first call only) and return the collected output."""
        if not self._done:
            self._value = self._fetch()
            self._done = True
            self._fetch = None
        return self._value

    def __repr__(self) -> str:
        return f"WorkerGroupFuture({self.method_name!r}, done={self._done})"


_DISPATCH_FN_HINT = "make the dispatch_fn return, for every argument, a list with one entry per worker"


def _materialize(value):
    return value.get() if isinstance(value, WorkerGroupFuture) else value


def _remove_padding(output, pad_size: int):
    """Drop the `pad_size` rows a DataProto dispatch appended (verl: in `func_generator`).

    verl also trims a list output by `pad_size`; minirl leaves lists alone, because a list output
    (DP_COMPUTE_METRIC) holds one entry per rank, not one per row.
    """
    if pad_size <= 0:
        return output
    from minirl.protocol import DataProto, unpad_dataproto

    return unpad_dataproto(output, pad_size) if isinstance(output, DataProto) else output


class WorkerGroup:
    """A group of `world_size` workers that the controller calls as one object.

    Mirrors `WorkerGroup` (`verl/single_controller/base/worker_group.py:123`). Subclasses create
    the workers, then call `self._bind_worker_method(worker_cls)`, and implement
    `_execute_remote_single_worker` (start one call on one worker) and `_wait` (turn the started
    calls into results).
    """

    def __init__(self, resource_pool: ResourcePool | None, **kwargs) -> None:
        self._process_dispatch_config = resource_pool() if resource_pool is not None else None
        self._workers: list = []
        self._worker_names: list[str] = []
        # nd-mesh dispatch caches: mesh name -> per-worker dp rank / per-worker collect flag
        self._dispatch_info: dict[str, list[int]] = {}
        self._collect_info: dict[str, list[bool]] = {}
        self._master_addr: str | None = None
        self._master_port: str | None = None
        self.method_names: list[str] = []
        self._worker_cls = None  # the user class behind the workers; set by subclasses
        # prepended to method names when calling a worker: "actor_" in a group spawned from a
        # colocated class (see spawn)
        self._method_prefix = ""

    @property
    def world_size(self) -> int:
        """Number of workers in the group."""
        return len(self._workers)

    @property
    def workers(self) -> list:
        """The worker objects (in-process) or actor handles (Ray), in rank order."""
        return self._workers

    @property
    def master_port(self) -> str | None:
        """MASTER_PORT given to every worker."""
        return self._master_port

    # -- binding ------------------------------------------------------------------------------

    def _bind_worker_method(self, user_defined_cls) -> list[str]:
        """Add a group method for every `@register`-ed method of `user_defined_cls`.

        Mirrors `WorkerGroup._bind_worker_method` (`verl/single_controller/base/worker_group.py:185`).
        Returns the bound method names.
        """
        bound = []
        for method_name in dir(user_defined_cls):
            attrs = getattr(getattr(user_defined_cls, method_name, None), MAGIC_ATTR, None)
            if not isinstance(attrs, dict):
                continue
            if hasattr(type(self), method_name):
                raise ValueError(
                    f"{user_defined_cls.__name__}.{method_name} is @register-ed, but {type(self).__name__} "
                    f"already has an attribute '{method_name}'; rename the worker method."
                )
            setattr(self, method_name, self._make_group_method(method_name, attrs, user_defined_cls))
            bound.append(method_name)
        self.method_names = bound
        return bound

    def _make_group_method(self, method_name: str, attrs: dict, user_defined_cls) -> Callable:
        dispatch_mode = attrs["dispatch_mode"]
        fns = get_predefined_dispatch_fn(dispatch_mode) if isinstance(dispatch_mode, Dispatch) else dispatch_mode
        execute_fn = getattr(self, get_predefined_execute_fn(attrs["execute_mode"])["execute_fn_name"])
        blocking = attrs["blocking"]
        materialize_futures = attrs.get("materialize_futures", True)

        def group_method(*args, **kwargs):
            return self._call(
                method_name, fns["dispatch_fn"], fns["collect_fn"], execute_fn, blocking, materialize_futures, args, kwargs
            )

        group_method.__name__ = method_name
        group_method.__qualname__ = f"{type(self).__name__}.{method_name}"
        group_method.__doc__ = getattr(user_defined_cls, method_name).__doc__
        return group_method

    def _call(self, method_name, dispatch_fn, collect_fn, execute_fn, blocking, materialize_futures, args, kwargs):
        """dispatch -> execute -> (wait) -> collect -> remove padding; the body of every group method."""
        if materialize_futures:
            args = tuple(_materialize(arg) for arg in args)
            kwargs = {key: _materialize(value) for key, value in kwargs.items()}
        args, kwargs = dispatch_fn(self, *args, **kwargs)
        pad_size = kwargs.pop(PADDING_SIZE_KEY, 0)
        handles = execute_fn(method_name, *args, **kwargs)

        def fetch():
            outputs = self._wait(method_name, handles)
            return _remove_padding(collect_fn(self, outputs), pad_size)

        future = WorkerGroupFuture(method_name, fetch)
        return future.get() if blocking else future

    def spawn(self, prefix_set) -> dict[str, WorkerGroup]:
        """One group per role of a colocated worker class, all over the same workers.

        The workers must be built from `create_worker_dict_cls({...})` (or the Ray
        `create_colocated_worker_cls`). `spawn({"actor", "ref"})["actor"].update(batch)` calls
        `actor_update` on every worker. Mirrors `RayWorkerGroup.spawn`
        (`verl/single_controller/ray/base.py:714`).
        """
        role_classes = getattr(self._worker_cls, "role_classes", None)
        if role_classes is None:
            raise TypeError(
                f"spawn needs a group of colocated workers (create_colocated_worker_cls); this group runs "
                f"{getattr(self._worker_cls, '__name__', self._worker_cls)}."
            )
        groups = {}
        for role in prefix_set:
            if role not in role_classes:
                raise KeyError(f"spawn: no role '{role}' in the colocated class; roles are {sorted(role_classes)}.")
            group = copy.copy(self)  # shares the workers; fresh method table and mesh caches below
            for name in self.method_names:
                group.__dict__.pop(name, None)
            group._dispatch_info, group._collect_info = {}, {}
            group._method_prefix = f"{self._method_prefix}{role}_"
            group._bind_worker_method(role_classes[role])
            groups[role] = group
        return groups

    # -- execution ----------------------------------------------------------------------------

    def execute_all(self, method_name: str, *args, **kwargs) -> list:
        """Start `method_name` on every worker; worker `i` gets entry `i` of each argument list.

        Returns one handle per worker (a result in-process, an `ObjectRef` on Ray). Arguments are
        per-rank lists, as every dispatch function produces; verl's `execute_all` also accepts
        plain values and sends them to all workers (`verl/single_controller/ray/base.py:836`).
        """
        _check_one_entry_per_rank(f"execute_all('{method_name}')", self.world_size, args, kwargs, _DISPATCH_FN_HINT)
        return [
            self._execute_remote_single_worker(
                worker,
                self._method_prefix + method_name,
                *(arg[rank] for arg in args),
                **{key: value[rank] for key, value in kwargs.items()},
            )
            for rank, worker in enumerate(self._workers)
        ]

    def execute_rank_zero(self, method_name: str, *args, **kwargs):
        """Start `method_name` on rank 0 only, with entry 0 of each argument list; returns its handle.

        Mirrors `RayWorkerGroup.execute_rank_zero` (`verl/single_controller/ray/base.py:823`).
        """
        _check_one_entry_per_rank(
            f"execute_rank_zero('{method_name}')", self.world_size, args, kwargs, _DISPATCH_FN_HINT
        )
        return self._execute_remote_single_worker(
            self._workers[0],
            self._method_prefix + method_name,
            *(arg[0] for arg in args),
            **{key: value[0] for key, value in kwargs.items()},
        )

    def _execute_remote_single_worker(self, worker, method_name: str, *args, **kwargs):
        """Start one call on one worker and return a handle to its result."""
        raise NotImplementedError

    def _wait(self, method_name: str, handles):
        """Turn the handle(s) from execute_all (a list) or execute_rank_zero (one) into result(s)."""
        raise NotImplementedError
