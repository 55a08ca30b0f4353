"""`ProcessWorkerGroup`: N workers in N local processes, one rank each, on 127.0.0.1: real ranks without Ray.

The same dispatch / execute / collect path as `RayWorkerGroup` and `InProcessWorkerGroup`, with each
worker in a process of its own started by Python's `multiprocessing` (the `forkserver` start method:
one server process imports torch and minirl's workers once, then forks every worker from it, so a
group starts in about the time of one import). Each worker is built with `RANK`, `WORLD_SIZE`,
`LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR=127.0.0.1` and a free `MASTER_PORT` in its environment,
so a worker that joins `torch.distributed` in its constructor (`ActorRolloutRefWorker` with
`WORLD_SIZE > 1`: gloo on CPU) forms a real process group with its peers. A group call sends
`(method, args, kwargs)` to every worker over a pipe first, then collects the answers, so the ranks
run the call at the same time, as their collectives need.

It is what notebooks use to run 2-4 ranks live on a laptop (lab 05), where starting Ray costs 30-40 s.
verl at the pinned commit has no counterpart: its only group implementation is `RayWorkerGroup`
(`verl/single_controller/ray/base.py:418`). Limits: one machine; the worker class and its constructor
arguments must be importable and picklable (a class defined in a notebook is not: use
`InProcessWorkerGroup` for those); arguments and results travel pickled through a pipe; a script that
starts a group needs Python's `if __name__ == "__main__":` guard, as for any start method but fork.

    group = ProcessWorkerGroup(ResourcePool(process_on_nodes=[2]), ClassWithInitArgs(ActorRolloutRefWorker, cfg))
    try:
        group.init_model(model_path)             # ONE_TO_ALL: both ranks build their FSDP2 shard
        out = group.compute_log_prob(batch)      # nd-mesh dispatch: each rank its chunk, outputs concatenated
    finally:
        group.shutdown()
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from typing import Any

from .worker import get_free_port
from .worker_group import ClassWithInitArgs, ResourcePool, WorkerGroup

__all__ = ["ProcessWorkerGroup", "ProcessWorkerGroupError"]

PRELOAD = ("torch", "transformers", "minirl.workers.engine_workers")
"""Modules the forkserver imports once, before it forks the workers."""


class ProcessWorkerGroupError(RuntimeError):
    """A worker process raised, died, or did not answer in time; the message names its rank and method."""


def _serve(conn, env: dict, cls_with_init: ClassWithInitArgs) -> None:
    """A worker process: build the worker with `env`, then run the calls that arrive until None."""
    os.environ.update(env)
    import torch

    torch.set_num_threads(int(env.get("OMP_NUM_THREADS", "1")))
    try:
        worker = cls_with_init()
    except BaseException:  # noqa: BLE001 - reported to the controller, then this process ends
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ok", None))
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the controller went away
            return
        if message is None:
            conn.send(("ok", None))
            return
        method, args, kwargs = message
        try:
            conn.send(("ok", getattr(worker, method)(*args, **kwargs)))
        except BaseException:  # noqa: BLE001 - the traceback goes to the controller
            conn.send(("error", traceback.format_exc()))


class _Proc:
    """One worker: its process and the controller's end of its pipe."""

    def __init__(self, rank: int, process, conn):
        self.rank, self.process, self.conn = rank, process, conn


class ProcessWorkerGroup(WorkerGroup):
    """A WorkerGroup whose workers are local processes, one rank each.

    Args:
        resource_pool: `ResourcePool(process_on_nodes=[n])` for n workers on this machine.
        cls_with_init: the worker class with its constructor arguments (`ClassWithInitArgs`); both
            must pickle (an importable class).
        timeout_s: the longest a call (or the start) may take before the group names the ranks that
            have not answered (a collective waiting on a dead peer never returns).
        worker_env: more environment for every worker (`OMP_NUM_THREADS` defaults to 1).
    """

    def __init__(self, resource_pool: ResourcePool, cls_with_init, timeout_s: float = 600.0,
                 worker_env: dict[str, str] | None = None) -> None:
        super().__init__(resource_pool)
        if not isinstance(cls_with_init, ClassWithInitArgs):
            cls_with_init = ClassWithInitArgs(cls_with_init)
        if resource_pool.world_size < 1:
            raise ValueError("resource_pool has no processes; use ResourcePool(process_on_nodes=[n]) with n >= 1.")
        if len(resource_pool.store) != 1:
            raise ValueError(f"ProcessWorkerGroup runs on this machine only; process_on_nodes={resource_pool.store} "
                             "lists several nodes. Fix: ResourcePool(process_on_nodes=[n]), or the Ray group.")
        self.cls_with_init, self._worker_cls, self.timeout_s = cls_with_init, cls_with_init.cls, float(timeout_s)
        self._master_addr, self._master_port = "127.0.0.1", str(get_free_port("127.0.0.1"))
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(list(PRELOAD))
        world = resource_pool.world_size
        for rank in range(world):
            env = {"OMP_NUM_THREADS": "1", **(worker_env or {}), "RANK": str(rank), "WORLD_SIZE": str(world),
                   "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": self._master_addr,
                   "MASTER_PORT": self._master_port}
            parent, child = ctx.Pipe()
            process = ctx.Process(target=_serve, args=(child, env, cls_with_init), daemon=True,
                                  name=f"{self._worker_cls.__name__}:{rank}")
            process.start()
            child.close()
            self._workers.append(_Proc(rank, process, parent))
            self._worker_names.append(process.name)
        try:
            self._wait("__init__", list(self._workers))  # every rank built its worker (and joined the group)
        except BaseException:
            self.shutdown()
            raise
        self._bind_worker_method(self._worker_cls)

    def _execute_remote_single_worker(self, worker: _Proc, method_name: str, *args, **kwargs):
        worker.conn.send((method_name, args, kwargs))
        return worker

    def _wait(self, method_name: str, handles):
        """Collect the answer of every started call (rank order); raise naming the first rank that failed."""
        single = not isinstance(handles, list)
        procs = [handles] if single else list(handles)
        results: list[Any] = [None] * len(procs)
        deadline = time.monotonic() + self.timeout_s
        for i, proc in enumerate(procs):
            while not proc.conn.poll(0.05):
                if not proc.process.is_alive():
                    raise ProcessWorkerGroupError(f"{self._describe(proc, method_name)} died (exit code "
                                                  f"{proc.process.exitcode}); its output is above")
                if time.monotonic() > deadline:
                    late = [p.rank for p in procs[i:]]
                    raise ProcessWorkerGroupError(
                        f"{self._describe(proc, method_name)} did not answer within timeout_s={self.timeout_s:g} s "
                        f"(ranks still running: {late}); look for a collective waiting on a peer that failed")
            try:
                status, value = proc.conn.recv()
            except EOFError:
                raise ProcessWorkerGroupError(f"{self._describe(proc, method_name)} closed its pipe (it died)") from None
            if status == "error":
                raise ProcessWorkerGroupError(f"{self._describe(proc, method_name)} raised:\n{value}")
            results[i] = value
        return results[0] if single else results

    def _describe(self, proc: _Proc, method_name: str) -> str:
        return (f"worker rank {proc.rank} of {self.world_size} (class {self._worker_cls.__name__}, pid "
                f"{proc.process.pid}) running '{self._method_prefix}{method_name}'")

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Ask every worker to stop, then end the processes that do not (idempotent)."""
        for proc in self._workers:
            if proc.process.is_alive():
                try:
                    proc.conn.send(None)
                except (BrokenPipeError, OSError):
                    pass
        deadline = time.monotonic() + timeout_s
        for proc in self._workers:
            proc.process.join(max(0.0, deadline - time.monotonic()))
            if proc.process.is_alive():
                proc.process.terminate()
                proc.process.join(1.0)
            proc.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
