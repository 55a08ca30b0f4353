"""`InProcessWorkerGroup`: N workers as plain objects in the controller's process.

The same dispatch / execute / collect path as `RayWorkerGroup`, with no Ray: each worker is
constructed with its own `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`
and `MASTER_PORT` set in the environment for the duration of its constructor, and a group call
runs the method on rank 0, then rank 1, ... one after another. It is what the laptop path, the
notebooks and the unit tests use, and what a reader steps through in a debugger to see a batch
being split and gathered.

verl at the pinned commit has no counterpart: its only group implementation is `RayWorkerGroup`
(`verl/single_controller/ray/base.py:418`). Limits: workers share one Python process, so they
cannot each join a `torch.distributed` process group (that is process-global); use one worker,
or the Ray group, for distributed code. A `blocking=False` call has already run when it returns;
its future only holds the result.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

from .worker import get_free_port
from .worker_group import ClassWithInitArgs, ResourcePool, WorkerGroup


@contextmanager
def _temporary_environ(values: dict[str, str]):
    """Set environment variables inside the block and restore the previous values after it."""
    previous = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


class InProcessWorkerGroup(WorkerGroup):
    """A WorkerGroup whose workers live in this process and run one after another.

    Args:
        resource_pool: `ResourcePool(process_on_nodes=[n])` for n workers (several nodes are
            accepted and only change LOCAL_RANK/LOCAL_WORLD_SIZE).
        cls_with_init: the worker class with its constructor arguments (`ClassWithInitArgs`), or
            a bare class constructed with no arguments.
        master_port: MASTER_PORT to give the workers; a free port on 127.0.0.1 by default.
    """

    def __init__(self, resource_pool: ResourcePool, cls_with_init, master_port: int | None = None) -> None:
        super().__init__(resource_pool)
        if not isinstance(cls_with_init, ClassWithInitArgs):
            cls_with_init = ClassWithInitArgs(cls_with_init)
        if resource_pool.world_size < 1:
            raise ValueError("resource_pool has no processes; use ResourcePool(process_on_nodes=[n]) with n >= 1.")
        self.cls_with_init = cls_with_init
        self._worker_cls = cls_with_init.cls
        self._master_addr = "127.0.0.1"
        self._master_port = str(master_port if master_port is not None else get_free_port())
        local_world_sizes = resource_pool.local_world_size_list()
        local_ranks = resource_pool.local_rank_list()
        for rank in range(resource_pool.world_size):
            env = {
                "RANK": str(rank),
                "WORLD_SIZE": str(resource_pool.world_size),
                "LOCAL_RANK": str(local_ranks[rank]),
                "LOCAL_WORLD_SIZE": str(local_world_sizes[rank]),
                "MASTER_ADDR": self._master_addr,
                "MASTER_PORT": self._master_port,
            }
            with _temporary_environ(env):
                self._workers.append(cls_with_init())
            self._worker_names.append(f"{cls_with_init.cls.__name__}:{rank}")
        self._bind_worker_method(cls_with_init.cls)

    def _execute_remote_single_worker(self, worker, method_name: str, *args, **kwargs):
        # Runs now; the "handle" is the result itself.
        return getattr(worker, method_name)(*args, **kwargs)

    def _wait(self, method_name: str, handles):
        return handles
