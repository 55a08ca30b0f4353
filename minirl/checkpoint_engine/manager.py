"""`CheckpointEngineManager`: every weight sync from the actor workers into the rollout replicas.

The trainer calls `update_weights(global_steps)` after each actor update (`PPOTrainerSync.on_step_end`)
and once at start-up; afterwards every replica holds the actor's weights and stamps version
`global_steps` on what it generates. Two ways, by `actor_rollout_ref.rollout.checkpoint_engine.backend`:

**naive** (the rollout in the controller, `rollout.nnodes=0`): wake the weights, gather the actor's full
tensors (`get_per_tensor_param`, one FSDP all-gather per tensor), copy them into the rollout's model
by name, wake the KV cache. Nothing crosses a process boundary, except the tensors coming back from
Ray workers when the actor runs in Ray.

**nccl** (rollout servers, `rollout.nnodes=1`), a streaming sync in eight phases, each timed:

1. `abort`: every server stops generating (partial outputs go back to their clients, which resend
   the rest after phase 8);
2. `release_kv_cache`: free the KV cache for the sync's buffers (the weights stay);
3. `build_process_group` (first sync only): actor rank 0 + one member per server join a group;
4. `gather`: the actor ranks all-gather every full tensor (in the actor workers);
5. `broadcast`: rank 0 packs them into buckets of `update_weights_bucket_megabytes` and broadcasts
   each (header, then bytes); every server, at the same time, unpacks and
6. `load`s them into its model by name, then resets its KV cache (`kv_cache_reset`);
7. `resume_kv_cache`; 8. `resume_generation`.

What each sync did goes to the trace (`update_weights` stage: `phases`, `buckets`, per-replica
numbers) and to the metrics (`perf/update_weights_bytes`, `perf/update_weights_buckets`,
`timing_s/update_weights_{gather,broadcast,load}` ...).

A debug-only fault switch, for lab 06 (never on by default): the steps listed in
`checkpoint_engine.debug_skip_sync_steps` skip their sync entirely (the rollout keeps the old weights
and the old version), those in `debug_partial_sync_steps` send only the first half of the tensors (the
rollout takes the new version with half-stale weights). Either way the next step's
`training/rollout_actor_logprob_diff_*` shows it.

Mirrors verl's `CheckpointEngineManager` (`verl/checkpoint_engine/base.py:381`): `build_process_group`
(`:423`), `sleep_replicas` (`:468`), `wake_up_replicas` (`:473`), `abort_replicas` (`:478`),
`resume_generation_replicas` (`:483`), `release_kv_cache_replicas` (`:488`), `resume_kv_cache_replicas`
(`:498`), `update_weights` (`:506`). What minirl simplifies: the naive path runs in the controller
(verl: the actor worker loads its colocated rollout in `ActorRolloutRefWorker.update_weights`,
`verl/workers/engine_workers.py:727`); verl's methods are async with `auto_await`, minirl's are
synchronous wrappers; no elastic `add_replicas` / `remove_replicas`; the fault switch is minirl's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from minirl.checkpoint_engine.base import CheckpointEngineRegistry, bucket_size_bytes
from minirl.utils.config import cfg_get
from minirl.utils.py_functional import run_coroutine

__all__ = ["CheckpointEngineManager"]


class CheckpointEngineManager:
    """Moves the actor's weights into the rollout replicas and records what each sync did.

    Args:
        config: the `actor_rollout_ref.rollout.checkpoint_engine` section (`backend`,
            `update_weights_bucket_megabytes`, the `debug_*_sync_steps` lists), or None for naive.
        actor_wg: the actor worker group (`get_per_tensor_param`; for streaming backends also
            `execute_checkpoint_engine` and `update_weights`).
        replicas: `LocalReplica`s (naive) or `RolloutReplica`s (streaming).
    """

    @classmethod
    def for_rollout(cls, config, actor_wg, rollout) -> CheckpointEngineManager:
        """The manager for a trainer's rollout: the servers of an `LLMServerManager`, or the in-controller one.

        `config` is the whole trainer config (reads `actor_rollout_ref.rollout.checkpoint_engine`).
        """
        from minirl.workers.rollout.replica import LocalReplica

        replicas = rollout.get_replicas() if hasattr(rollout, "get_replicas") else [LocalReplica(rollout)]
        return cls(config.actor_rollout_ref.rollout.checkpoint_engine, actor_wg, replicas)

    def __init__(self, config: Any, actor_wg, replicas: list) -> None:
        self.config = config
        self.backend = str(cfg_get(config, "backend", "naive"))
        self.backend_cls = CheckpointEngineRegistry.get(self.backend)
        self.bucket_size = bucket_size_bytes(cfg_get(config, "update_weights_bucket_megabytes", 2048))
        self.skip_sync_steps = {int(s) for s in (cfg_get(config, "debug_skip_sync_steps", None) or [])}
        self.partial_sync_steps = {int(s) for s in (cfg_get(config, "debug_partial_sync_steps", None) or [])}
        self.actor_wg = actor_wg
        self.replicas = list(replicas)
        self._group_built = False
        self.last_sync: dict = {}
        self._pending_metrics: dict = {}
        streaming = self.backend != "naive"
        local = [getattr(r, "in_controller", False) for r in self.replicas]
        if streaming and any(local):
            raise ValueError(f"checkpoint_engine.backend={self.backend} streams to rollout servers, but the rollout "
                             "is in the controller. Fix: actor_rollout_ref.rollout.nnodes=1, or backend=naive.")
        if not streaming and not all(local):
            raise ValueError("checkpoint_engine.backend=naive hands tensors over inside one process; rollout "
                             "servers need backend=nccl.")

    @property
    def debug_faults(self) -> bool:
        """True when a debug fault (skipped or partial sync) is configured: the sync-mode version check is off."""
        return bool(self.skip_sync_steps or self.partial_sync_steps)

    # ------------------------------------------------------------------------------ replica calls
    def _all(self, method: str, *args) -> list:
        async def run():
            return await asyncio.gather(*(getattr(r, method)(*args) for r in self.replicas))

        return run_coroutine(run)

    def sleep_replicas(self) -> list:
        """Free weights and KV cache while the actor trains (verl: `sleep_replicas`); servers keep theirs."""
        return self._all("sleep")

    def wake_up_replicas(self) -> list:
        """Bring weights and KV cache back (verl: `wake_up_replicas`)."""
        return self._all("wake_up")

    def abort_replicas(self) -> list:
        """Abort every in-flight request; partial outputs go back to the clients (verl: `abort_replicas`)."""
        return self._all("abort_all_requests")

    def resume_generation_replicas(self) -> list:
        """Accept requests again after `abort_replicas` (verl: `resume_generation_replicas`)."""
        return self._all("resume_generation")

    def release_kv_cache_replicas(self) -> list:
        """Free only the KV cache before a sync (verl: `release_kv_cache_replicas`)."""
        return self._all("release_kv_cache")

    def resume_kv_cache_replicas(self) -> list:
        """Restore the KV cache after a sync (verl: `resume_kv_cache_replicas`)."""
        return self._all("resume_kv_cache")

    # ------------------------------------------------------------------------------ the sync
    def update_weights(self, global_steps: int) -> dict:
        """Sync the actor's weights into every replica, which then holds version `global_steps`.

        Returns what the trace's `update_weights` stage records: flat numbers (also the step's
        metrics) plus `phases` (name, seconds, details) and, for streaming, `buckets` and `replicas`.
        """
        global_steps = int(global_steps)
        t0 = time.perf_counter()
        if global_steps in self.skip_sync_steps:  # debug fault: nothing moves, the rollout keeps its version
            out = {"phases": [], "perf/update_weights_bytes": 0, "perf/update_weights_mb": 0.0,
                   "perf/update_weights_tensors": 0}
            if self.backend != "naive":
                out["perf/update_weights_buckets"] = 0
        elif self.backend == "naive":
            out = self._update_naive(global_steps, partial=global_steps in self.partial_sync_steps)
        else:
            out = run_coroutine(self._update_streaming(global_steps, global_steps in self.partial_sync_steps))
        out.update({"backend": self.backend, "global_steps": global_steps,
                    "rollout/policy_version": min(int(r.global_steps) for r in self.replicas),
                    "rollout/replicas": len(self.replicas),
                    "timing_s/update_weights_total": time.perf_counter() - t0})
        self.last_sync = out
        self._pending_metrics = {k: v for k, v in out.items() if "/" in k and isinstance(v, (int, float))}
        return out

    def pop_metrics(self) -> dict:
        """The numeric results of the last sync, once (the trainer merges them into the step's metrics)."""
        metrics, self._pending_metrics = self._pending_metrics, {}
        return metrics

    def _update_naive(self, global_steps: int, partial: bool) -> dict:
        phases = []

        def timed(name, fn, **details):
            start, t = time.time(), time.perf_counter()
            result = fn()
            phases.append({"phase": name, "start": start, "s": time.perf_counter() - t, **details})
            return result

        timed("resume_weights", lambda: self._all("wake_up", ["weights"]))
        # ONE_TO_ALL: every rank joins the gather (FSDP all-gathers); rank 0 returns the tensors
        weights = timed("gather", lambda: self.actor_wg.get_per_tensor_param()[0])
        phases[-1].update(tensors=len(weights), bytes=sum(t.numel() * t.element_size() for _, t in weights))
        if partial:
            weights = weights[: (len(weights) + 1) // 2]
        n_bytes = sum(t.numel() * t.element_size() for _, t in weights)
        for replica in self.replicas:
            timed("load", lambda r=replica: r.load_weights(weights, global_steps), replica=replica.replica_rank,
                  tensors=len(weights), bytes=n_bytes)
        timed("resume_kv_cache", lambda: self._all("wake_up", ["kv_cache"]))
        seconds = {p["phase"]: p["s"] for p in phases}
        return {"phases": phases, "perf/update_weights_bytes": n_bytes, "perf/update_weights_mb": n_bytes / 2**20,
                "perf/update_weights_tensors": len(weights), "timing_s/update_weights_gather": seconds["gather"],
                "timing_s/update_weights_load": seconds["load"]}

    async def _build_process_group(self) -> None:
        """Prepare every member, build the topology, join the group (verl: `build_process_group`)."""
        wg, world = self.actor_wg, self.actor_wg.world_size
        # the servers build the receiving side by name in their own processes (a subclass may send with a
        # packing of its own and receive as a registered backend does: CheckpointEngine.receiver_backend)
        engine_args = {"backend": self.backend_cls.receiver_backend or self.backend, "bucket_size": self.bucket_size}
        actor_meta = await asyncio.to_thread(wg.execute_checkpoint_engine, ["prepare"] * world, [{}] * world)
        rollout_meta = await asyncio.gather(*(r.execute_checkpoint_engine("prepare", **engine_args)
                                              for r in self.replicas))
        actor_kw, rollout_kw = self.backend_cls.build_topology(world, len(self.replicas),
                                                               list(actor_meta) + list(rollout_meta))
        actor_per_rank = [{k: v[i] for k, v in actor_kw.items()} for i in range(world)]
        await asyncio.gather(
            asyncio.to_thread(wg.execute_checkpoint_engine, ["init_process_group"] * world, actor_per_rank),
            *(r.execute_checkpoint_engine("init_process_group", kwargs={k: v[i] for k, v in rollout_kw.items()})
              for i, r in enumerate(self.replicas)))
        self._group_built = True

    async def _update_streaming(self, global_steps: int, partial: bool) -> dict:
        phases: list[dict] = []

        async def timed(name, coro, **details):
            start, t = time.time(), time.perf_counter()
            result = await coro
            phases.append({"phase": name, "start": start, "s": time.perf_counter() - t, **details})
            return result

        world = self.actor_wg.world_size
        aborted = await timed("abort", asyncio.gather(*(r.abort_all_requests() for r in self.replicas)))
        phases[-1]["requests"] = sum(a.get("aborted_running", 0) + a.get("aborted_queued", 0) for a in aborted)
        await timed("release_kv_cache", asyncio.gather(*(r.release_kv_cache() for r in self.replicas)))
        if not self._group_built:
            await timed("build_process_group", self._build_process_group(), members=1 + len(self.replicas))
        else:  # buffers are allocated per sync (verl: prepare before every sync)
            await asyncio.gather(asyncio.to_thread(self.actor_wg.execute_checkpoint_engine, ["prepare"] * world,
                                                   [{}] * world),
                                 *(r.execute_checkpoint_engine("prepare") for r in self.replicas))
        t_sync = time.perf_counter()
        sent, *loaded = await asyncio.gather(
            asyncio.to_thread(self.actor_wg.update_weights, global_steps, partial),
            *(r.update_weights(global_steps) for r in self.replicas))
        sync_s = time.perf_counter() - t_sync
        sender = sent[0]
        await asyncio.gather(asyncio.to_thread(self.actor_wg.execute_checkpoint_engine, ["finalize"] * world,
                                               [{}] * world),
                             *(r.execute_checkpoint_engine("finalize") for r in self.replicas))
        broadcast_s = sum(b["broadcast_s"] for b in sender["buckets"])
        load_s = max(r["load_s"] for r in loaded)
        # what the sender (actor rank 0) and the servers measured, on the same wall clock
        phases.append({"phase": "gather", "start": sender["gather_start"], "s": sender["gather_s"],
                       "tensors": sender["gather_tensors"]})
        phases.append({"phase": "broadcast", "start": sender["buckets"][0]["start"], "s": broadcast_s,
                       "buckets": len(sender["buckets"]), "bytes": sender["bytes"], "transport": sender["transport"]})
        phases.append({"phase": "load", "start": min(r["load_start"] for r in loaded), "s": load_s,
                       "per_replica_s": [round(r["load_s"], 6) for r in loaded]})
        phases.append({"phase": "kv_cache_reset", "start": max(r["load_end"] for r in loaded),
                       "s": max(r["kv_cache_reset_s"] for r in loaded)})
        await timed("resume_kv_cache", asyncio.gather(*(r.resume_kv_cache() for r in self.replicas)))
        await timed("resume_generation", asyncio.gather(*(r.resume_generation() for r in self.replicas)))
        return {"phases": phases, "buckets": sender["buckets"], "replicas": loaded, "bucket_size": self.bucket_size,
                "transport": sender["transport"], "sync_s": sync_s,
                "perf/update_weights_bytes": sender["bytes"], "perf/update_weights_mb": sender["bytes"] / 2**20,
                "perf/update_weights_buckets": len(sender["buckets"]), "perf/update_weights_tensors": sender["tensors"],
                "timing_s/update_weights_gather": sender["gather_s"], "timing_s/update_weights_broadcast": broadcast_s,
                "timing_s/update_weights_load": load_s,
                "rollout/aborted_requests": phases[0]["requests"]}

    def shutdown(self) -> None:
        """Drop the actor side's group (the servers drop theirs when they shut down)."""
        if self._group_built and self.backend != "naive":
            world = self.actor_wg.world_size
            with contextlib.suppress(Exception):  # the workers may be gone already
                self.actor_wg.execute_checkpoint_engine(["close"] * world, [{}] * world)
            self._group_built = False
