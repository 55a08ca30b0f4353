"""Weight sync: actor parameters -> rollout replica, with a policy version.

verl: `CheckpointEngineManager.update_weights` (`verl/checkpoint_engine/base.py:506`) streams the
trainer's parameters to every rollout replica through a backend (naive = in-process handover for the
hybrid engine; nccl/nixl/hccl for separate GPUs), then tags the replicas with `global_steps`.
`PPOTrainerSync.on_step_end` (`verl/trainer/ppo/v1/trainer_sync.py:35`) calls it after every actor update.

minirl implements the naive backend: full tensors, by HF name, from the actor engine
(`get_per_tensor_param`, which gathers FSDP shards) into the rollout's own model copy. With several
ranks every rank joins the gather (a collective) but only rank 0 returns the tensors; they travel to
the controller, where the hf rollout lives (through Ray's object store when the workers are Ray
actors), and are copied into the rollout model. verl instead streams buckets from the trainer ranks
straight to rollout servers on other processes or GPUs.
"""

from __future__ import annotations

import time


class CheckpointEngineManager:
    """Moves the actor's weights into the rollout replicas and records the version they carry."""

    def __init__(self, actor_rollout_wg, replicas: list, backend: str = "naive"):
        if backend != "naive":
            raise ValueError(f"rollout.checkpoint_engine.backend={backend!r}: minirl implements only 'naive' "
                             "(verl also has nccl, nixl, hccl, mooncake).")
        self.actor_rollout_wg = actor_rollout_wg
        self.replicas = replicas
        self.last_sync = {}

    def update_weights(self, global_steps: int) -> dict:
        """Push the current actor weights; every replica's `policy_version` becomes `global_steps`."""
        t0 = time.perf_counter()
        per_rank = self.actor_rollout_wg.get_per_tensor_param()  # ONE_TO_ALL: every rank joins the gather
        weights = per_rank[0]  # rank 0's full tensors; the other ranks return []
        t1 = time.perf_counter()
        for replica in self.replicas:
            # wake the weights, load, then the KV cache (verl: ActorRolloutRefWorker.update_weights)
            _run(replica.resume(["weights"]))
            replica.update_weights(iter(weights), version=int(global_steps))
            _run(replica.resume(["kv_cache"]))
        t2 = time.perf_counter()
        n_bytes = sum(t.numel() * t.element_size() for _, t in weights)
        self.last_sync = {"timing_s/update_weights_gather": t1 - t0, "timing_s/update_weights_load": t2 - t1,
                          "perf/update_weights_mb": n_bytes / 2**20, "rollout/policy_version": int(global_steps)}
        return self.last_sync

    def sleep_replicas(self):
        """Free the replicas' weights and KV cache while the actor trains (sleep mode).

        verl: `PPOTrainerSync.on_sample_end` (`verl/trainer/ppo/v1/trainer_sync.py:40`). The hf rollout
        has nothing to free; vLLM sleeps on GPU and reports once that CPU has no sleep mode.
        """
        for replica in self.replicas:
            _run(replica.release())


def _run(coro):
    """Await a rollout's async resume/release from the synchronous trainer (also inside Jupyter's loop)."""
    from minirl.agent_loop.agent_loop import _run_coroutine

    return _run_coroutine(lambda: coro)
