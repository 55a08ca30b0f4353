"""What a diagnosis is made of: the seven layers, a piece of evidence, a finding, and the verl code to read.

No verl counterpart. The layers are the seed's last completion question ("should a training
anomaly be localised to rollout, reward, advantage, loss, scheduling, backend or weight sync?"):

| layer | what belongs to it | where it lives in verl |
|---|---|---|
| rollout | sessions, responses, the trajectory's model inputs (position ids, masks) | `verl/experimental/agent_loop/`, `verl/trainer/ppo/v1/agent_loop_tq.py` |
| reward | scores: reward functions, parsers, reward models | `verl/experimental/reward_loop/`, `verl/utils/reward_score/` |
| advantage | rewards -> advantages (GRPO groups, GAE, whitening) | `verl/trainer/ppo/core_algos.py` |
| loss | the policy / value / KL loss and the masks it sums over | `verl/workers/utils/losses.py`, `core_algos.py` |
| scheduling | how a batch is cut: mini-batches, micro-batches, ranks, balance | `verl/workers/engine/utils.py`, `verl/workers/config/actor.py` |
| backend | the training engine: forward numerics, optimizer, gradient norm | `verl/workers/engine/fsdp/transformer_impl.py` |
| weight sync | which weights each policy holds: rollout, old, current actor, reference | `verl/checkpoint_engine/`, `verl/trainer/ppo/v1/trainer_sync.py` |
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["LAYERS", "VERL", "Evidence", "Finding", "fmt"]

LAYERS = ("rollout", "reward", "advantage", "loss", "scheduling", "backend", "weight sync")

# The verl code each finding points at: (symbol, `verl/<path>.py:LINE` at the pinned commit; def/class lines).
VERL = {
    "update_weights": ("CheckpointEngineManager.update_weights", "verl/checkpoint_engine/base.py:506"),
    "on_step_end": ("PPOTrainerSync.on_step_end", "verl/trainer/ppo/v1/trainer_sync.py:35"),
    "replay_sample": ("ReplayBuffer.sample", "verl/trainer/ppo/v1/replay_buffer.py:405"),
    "ref_worker": ("ActorRolloutRefWorker.compute_ref_log_prob", "verl/workers/engine_workers.py:695"),
    "ref_stage": ("PPOTrainer._compute_ref_log_prob", "verl/trainer/ppo/v1/trainer_base.py:1590"),
    "init_model": ("ActorRolloutRefWorker.init_model", "verl/workers/engine_workers.py:538"),
    "compute_score": ("AgentLoopWorker._compute_score", "verl/experimental/agent_loop/agent_loop.py:937"),
    "reward_worker": ("RewardLoopWorker.compute_score", "verl/experimental/reward_loop/reward_loop.py:145"),
    "gsm8k_extract": ("extract_solution", "verl/utils/reward_score/gsm8k.py:20"),
    "default_score": ("default_compute_score", "verl/utils/reward_score/__init__.py:19"),
    "grpo": ("compute_grpo_outcome_advantage", "verl/trainer/ppo/core_algos.py:268"),
    "adv_stage": ("PPOTrainer._compute_advantage", "verl/trainer/ppo/v1/trainer_base.py:1638"),
    "dapo_filter": ("ReplayBuffer._dapo_filtered_keys", "verl/trainer/ppo/v1/replay_buffer.py:248"),
    "ppo_loss": ("ppo_loss", "verl/workers/utils/losses.py:57"),
    "agg_loss": ("agg_loss", "verl/trainer/ppo/core_algos.py:1140"),
    "postprocess": ("AgentLoopWorkerTQ._agent_loop_postprocess", "verl/trainer/ppo/v1/agent_loop_tq.py:150"),
    "micro_batches": ("prepare_micro_batches", "verl/workers/engine/utils.py:92"),
    "train_mini_batch": ("TrainingWorker.train_mini_batch", "verl/workers/engine_workers.py:242"),
    "actor_validate": ("ActorConfig.validate", "verl/workers/config/actor.py:224"),
    "optimizer_step": ("FSDPEngine.optimizer_step", "verl/workers/engine/fsdp/transformer_impl.py:764"),
    "optim_config": ("FSDPOptimizerConfig", "verl/workers/config/optimizer.py:88"),
    "update_actor": ("PPOTrainer._update_actor", "verl/trainer/ppo/v1/trainer_base.py:1722"),
    "old_log_prob": ("PPOTrainer._compute_old_log_prob", "verl/trainer/ppo/v1/trainer_base.py:1529"),
    "position_ids": ("AgentLoopWorker._compute_position_ids", "verl/experimental/agent_loop/agent_loop.py:890"),
    "position_from_mask": ("compute_position_id_with_mask", "verl/utils/model.py:240"),
    "debug_metrics": ("calculate_debug_metrics", "verl/utils/debug/metrics.py:63"),
    "step_once": ("PPOTrainer._step_once", "verl/trainer/ppo/v1/trainer_base.py:538"),
}


def fmt(value) -> str:
    """A number as a reader wants it in one line: 4 significant digits, NaN/inf spelled out, lists kept."""
    if value is None:
        return "null (NaN/inf)"
    if isinstance(value, (bool, int)):
        return str(value)
    if isinstance(value, float):
        return str(value) if not math.isfinite(value) else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    return str(value)


@dataclass
class Evidence:
    """One observation: a metric or trace field, at a step, its value, and what a healthy run shows there."""

    name: str
    """A metric key (`critic/score/max`), a trace field (`sample.extra.policy_versions`) or a config key."""
    value: object
    step: int | None
    expected: str
    """What it should be, in words (`> critic/score/min: the responses score differently`)."""
    source: str = "metrics"
    """`metrics` (the logged row), `trace` (a stage event), `workers` (per-rank events) or `config`."""

    def line(self) -> str:
        at = f" at step {self.step}" if self.step is not None else ""
        return f"{self.name} = {fmt(self.value)}{at} [{self.source}]; expected {self.expected}"


@dataclass
class Finding:
    """One diagnosis: the layer that broke, what is wrong, the evidence, the stage, the code to read."""

    layer: str
    """One of `LAYERS`."""
    check: str
    """The check that found it (`stale_rollout_weights`, `nonfinite` ...)."""
    title: str
    """What is wrong, in one sentence."""
    stage: str
    """The trace stage where it shows (`sample`, `update_actor` ...)."""
    steps: list[int]
    evidence: list[Evidence]
    verl: list[tuple[str, str]]
    """The verl code where the same failure would show: (symbol, `verl/<path>.py:LINE`)."""
    minirl: list[str] = field(default_factory=list)
    """The minirl code to read (module or `Class.method`)."""

    def __post_init__(self):
        if self.layer not in LAYERS:
            raise ValueError(f"finding layer {self.layer!r} is not one of {LAYERS}")

    def as_dict(self) -> dict:
        """Plain data (for JSON output and notebook tables)."""
        return {"layer": self.layer, "check": self.check, "title": self.title, "stage": self.stage,
                "steps": self.steps, "evidence": [vars(e) | {"line": e.line()} for e in self.evidence],
                "verl": [f"{sym} {where}" for sym, where in self.verl], "minirl": self.minirl}
