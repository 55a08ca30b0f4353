"""`Worker`: the base class of every process-side worker (actor, critic, rollout ... subclass it).

Mirrors `Worker` (`verl/single_controller/base/worker.py:76`). A worker learns who it is from the
environment its WorkerGroup starts it with, the same variables `torchrun` sets:

- `RANK` / `WORLD_SIZE`: its index in the group and the group size;
- `LOCAL_RANK` / `LOCAL_WORLD_SIZE`: the same on its node;
- `MASTER_ADDR` / `MASTER_PORT`: where rank 0 listens, so `torch.distributed.init_process_group`
  can rendezvous (the group picks a free port once and gives it to every worker).

It also keeps, per named device mesh, its data-parallel rank and whether it reports results
("collect" rank), which the nd-mesh dispatch mode queries (see `decorator.py`).
`init_trace` makes the worker's process write one per-rank trace event per registered call
(`minirl.trace.worker_trace`; verl has no such hook).

Simplifications versus verl: no accelerator handling (`_setup_env_cuda_visible_devices`,
`verl/single_controller/base/worker.py:231`); missing variables default to a single worker
(rank 0 of 1) where verl raises `KeyError`; the values are read once into attributes and not
written back into `os.environ` (verl's `_configure_with_store`,
`verl/single_controller/base/worker.py:283`, does), so several workers can live in one process
(`InProcessWorkerGroup`).
"""

from __future__ import annotations

import os
import socket

from .decorator import Dispatch, Execute, register


def get_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on `host` (`WorkerHelper._get_free_port`, `verl/single_controller/base/worker.py:59`)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class Worker:
    """Base class for group workers: rank, world size, rendezvous address, mesh registration.

    Subclasses mark the methods the controller may call with `@register(...)`. Construct it
    through a WorkerGroup, which sets the environment described in the module docstring.
    """

    @classmethod
    def env_keys(cls) -> list[str]:
        """The environment variables a worker reads (`Worker.env_keys`, `verl/single_controller/base/worker.py:169`)."""
        return ["WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"]

    def __init__(self) -> None:
        self._world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self._rank = int(os.environ.get("RANK", "0"))
        self._local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        self._local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self._master_addr = os.environ.get("MASTER_ADDR")
        self._master_port = os.environ.get("MASTER_PORT")
        if not 0 <= self._rank < self._world_size:
            raise ValueError(
                f"RANK={self._rank} is outside 0..WORLD_SIZE-1 (WORLD_SIZE={self._world_size}); the "
                f"WorkerGroup sets both, check any RANK/WORLD_SIZE left in the environment."
            )
        # mesh name -> this worker's dp rank / whether it reports results for that mesh
        self._dispatch_dp_rank: dict[str, int] = {}
        self._collect_dp_rank: dict[str, bool] = {}

    @property
    def rank(self) -> int:
        """This worker's index in its group, 0..world_size-1."""
        return self._rank

    @property
    def world_size(self) -> int:
        """Number of workers in the group."""
        return self._world_size

    @property
    def local_rank(self) -> int:
        """This worker's index among the group's workers on the same node."""
        return self._local_rank

    def get_master_addr_port(self) -> tuple[str | None, str | None]:
        """(MASTER_ADDR, MASTER_PORT) for `torch.distributed` rendezvous (`Worker.get_master_addr_port`, `verl/single_controller/base/worker.py:299`)."""
        return self._master_addr, self._master_port

    def _register_dispatch_collect_info(self, mesh_name: str, dp_rank: int, is_collect: bool) -> None:
        """Record this worker's dp rank in `mesh_name` and whether its output is collected.

        Called by the worker itself after it builds a device mesh, e.g. on a (dp=2, tp=2) mesh
        worker 3 registers `("actor", dp_rank=1, is_collect=False)` because worker 2 (tp rank 0
        of the same dp rank) reports. Mirrors `Worker._register_dispatch_collect_info`
        (`verl/single_controller/base/worker.py:86`).
        """
        if mesh_name in self._dispatch_dp_rank:
            raise ValueError(f"mesh '{mesh_name}' is already registered on rank {self.rank}; register each mesh once.")
        self._dispatch_dp_rank[mesh_name] = int(dp_rank)
        self._collect_dp_rank[mesh_name] = bool(is_collect)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_dispatch_info(self, mesh_name: str) -> int:
        """This worker's dp rank in `mesh_name` (`Worker._query_dispatch_info`, `verl/single_controller/base/worker.py:103`)."""
        if mesh_name not in self._dispatch_dp_rank:
            raise KeyError(
                f"mesh '{mesh_name}' is not registered on rank {self.rank} ({type(self).__name__}); call "
                f"self._register_dispatch_collect_info('{mesh_name}', dp_rank, is_collect) when building the mesh. "
                f"Registered meshes: {sorted(self._dispatch_dp_rank)}."
            )
        return self._dispatch_dp_rank[mesh_name]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_collect_info(self, mesh_name: str) -> bool:
        """Whether this worker reports for `mesh_name` (`Worker._query_collect_info`, `verl/single_controller/base/worker.py:119`)."""
        if mesh_name not in self._collect_dp_rank:
            raise KeyError(f"mesh '{mesh_name}' is not registered on rank {self.rank} ({type(self).__name__}).")
        return self._collect_dp_rank[mesh_name]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_trace(self, trace_dir: str, level: str = "fields", run_id: str | None = None) -> bool:
        """Record this process's worker calls in `<trace_dir>/trace.rank<rank>.jsonl` (minirl only).

        From now on every `@register`-ed call on this process writes one per-rank `worker` event
        (`minirl.trace.worker_trace`); colocated roles share the process, and so the file. Calling it
        again with the same directory and run id changes nothing; level `off` stops recording.
        """
        from minirl.trace.worker_trace import init_worker_tracer

        return init_worker_tracer(trace_dir, level, run_id, self.rank) is not None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def close_trace(self) -> bool:
        """Stop recording worker calls and close this process's part file (minirl only)."""
        from minirl.trace.worker_trace import close_worker_tracer

        close_worker_tracer()
        return True

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO_WITH_FUNC)
    def execute_with_func_generator(self, func, *args, **kwargs):
        """Run `func(self, chunk, ...)` on this worker's chunk of the batch.

        Mirrors `Worker.execute_with_func_generator` (`verl/single_controller/base/worker.py:321`).
        """
        return func(self, *args, **kwargs)

    # verl registers this with Dispatch.ALL_TO_ALL and lets execute_all pass the raw arguments
    # through; minirl's ALL_TO_ALL wants per-rank lists, so it uses ONE_TO_ALL (same effect).
    @register(dispatch_mode=Dispatch.ONE_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def execute_func_rank_zero(self, func, *args, **kwargs):
        """Run `func(*args, **kwargs)` on rank 0 only (`Worker.execute_func_rank_zero`, `verl/single_controller/base/worker.py:336`)."""
        return func(*args, **kwargs)
