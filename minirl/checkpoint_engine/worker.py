"""The actor's side of a streaming sync: the checkpoint engine that lives in each training worker.

`ActorRolloutRefWorker.execute_checkpoint_engine` and `ActorRolloutRefWorker.update_weights`
(`minirl.workers.engine_workers`) forward here, so the worker class keeps one line each. Every
training rank holds one engine, built on first use from `actor_rollout_ref.rollout.checkpoint_engine`
(backend, `update_weights_bucket_megabytes`); rank 0 is its master and the only sender.

verl: `ActorRolloutRefWorker.update_weights` (`verl/workers/engine_workers.py:727`) with a non-naive
backend: `get_per_tensor_param` into `checkpoint_engine.send_weights`, which walks the all-gathers and
the buckets together; the group calls come through `execute_checkpoint_engine` (verl has it on the
rollout-side `CheckpointEngineWorker`, `verl/checkpoint_engine/base.py:364`, and on the actor worker).
minirl gathers every tensor first and then sends, so that the trace can time the gather and the
broadcast apart.
"""

from __future__ import annotations

import time
from typing import Any

from minirl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry, bucket_size_bytes
from minirl.utils.config import cfg_get

__all__ = ["execute_checkpoint_engine", "new_engine", "send_actor_weights"]


def new_engine(checkpoint_engine_config: Any, is_master: bool, device: str) -> CheckpointEngine:
    """An engine for `rollout.checkpoint_engine` (`backend`, `update_weights_bucket_megabytes`)."""
    backend = str(cfg_get(checkpoint_engine_config, "backend", "naive"))
    size = bucket_size_bytes(cfg_get(checkpoint_engine_config, "update_weights_bucket_megabytes", 2048))
    return CheckpointEngineRegistry.new(backend, bucket_size=size, is_master=is_master, device=device)


def _engine_of(worker) -> CheckpointEngine:
    engine = getattr(worker, "_checkpoint_engine", None)
    if engine is None:
        engine = new_engine(worker.config.rollout.checkpoint_engine, is_master=worker.rank == 0, device=worker.device)
        worker._checkpoint_engine = engine
    return engine


def execute_checkpoint_engine(worker, method: str, kwargs: dict | None = None):
    """Run `method` (`prepare`, `init_process_group`, `finalize`) of this rank's engine with `kwargs`."""
    if method not in ("prepare", "init_process_group", "finalize", "close"):
        raise ValueError(f"execute_checkpoint_engine: {method!r} is not a group method of the checkpoint engine "
                         "(prepare, init_process_group, finalize, close).")
    return getattr(_engine_of(worker), method)(**(kwargs or {}))


def send_actor_weights(worker, global_steps: int, partial: bool = False) -> dict:
    """Gather the actor's full tensors (every rank: FSDP all-gathers) and send them (rank 0) to the rollout.

    `partial=True` sends only the first half of the tensors: the debug-only fault behind
    `checkpoint_engine.debug_partial_sync_steps` (lab 06). Returns, on rank 0, what the engine did
    plus `gather_start` (wall clock), `gather_s` and `gather_tensors` (how many the gather produced);
    `{}` on the other ranks.
    """
    start, t0 = time.time(), time.perf_counter()
    tensors = list(worker.actor.engine.get_per_tensor_param())
    gather_s, gathered = time.perf_counter() - t0, len(tensors)
    if partial:
        tensors = tensors[: (len(tensors) + 1) // 2]
    stats = _engine_of(worker).send_weights(iter(tensors), global_steps=global_steps)
    if worker.rank != 0:
        return {}
    return {**stats, "gather_start": start, "gather_s": gather_s, "gather_tensors": gathered}
