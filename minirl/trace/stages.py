"""What each traced stage is: the minirl method that runs it and the verl code it mirrors.

A stage name in a trace (`advantage`, `update_actor` ...) is a span in the trainer's
`PPOTrainer._step_once`, which follows verl's `PPOTrainer._step_once`
(`verl/trainer/ppo/v1/trainer_base.py:538`) stage for stage. `STAGE_INFO` maps each name to the
minirl method, the verl symbol(s) and the condition under which the stage runs at all (the
"branches" that `minirl trace diff` reports). The lineage view prints these, so a reader can go from
a field in a trace to the code that made it, in minirl and in verl. tests/unit/test_trace.py checks every
verl line against the index of the pinned commit and every minirl method against the trainer.
"""

from __future__ import annotations

from typing import NamedTuple


class StageInfo(NamedTuple):
    """One stage: minirl's method, the verl symbols it mirrors (`path:line` at the pinned commit), when it runs."""

    minirl: str  # method or function in minirl that the span wraps
    calls: str  # the function doing the work inside it (minirl name, usually verl's name too)
    verl: tuple  # ((qualified symbol, "verl/<path>.py:LINE"), ...)
    runs_when: str  # the branch condition; "always" for the core stages
    role: str  # the worker role that runs it


STAGE_INFO: dict[str, StageInfo] = {
    "rollout": StageInfo(
        "PPOTrainer._submit_batch_to_rollout", "AgentLoopManagerTQ.generate_sequences",
        (("PPOTrainer._submit_batch_to_rollout", "verl/trainer/ppo/v1/trainer_base.py:1391"),
         ("AgentLoopWorkerTQ._run_prompt", "verl/trainer/ppo/v1/agent_loop_tq.py:107"),
         ("AgentLoopWorkerTQ._agent_loop_postprocess", "verl/trainer/ppo/v1/agent_loop_tq.py:150")),
        "always: the prompts' rollout.n sessions write their trajectories into the TransferQueue", "rollout"),
    "sample": StageInfo(
        "PPOTrainer._sample", "ReplayBuffer.sample + kv_batch_get_padded",
        (("ReplayBuffer.sample", "verl/trainer/ppo/v1/replay_buffer.py:405"),
         ("PPOTrainer._step_once", "verl/trainer/ppo/v1/trainer_base.py:538")),
        "always", "trainer"),
    "reward": StageInfo(
        "PPOTrainer._compute_reward", "RewardLoopManager.compute_rm_score",
        (("PPOTrainer._compute_reward_colocate", "verl/trainer/ppo/v1/trainer_base.py:1424"),
         ("RewardLoopManager.compute_rm_score", "verl/experimental/reward_loop/reward_loop.py:343")),
        "reward.reward_model.enable=True with enable_resource_pool=False (a reward model colocated with the actor), "
        "as in verl V1; otherwise (rules, custom functions, a reward model with its own pool) every session is "
        "scored in the rollout stage as it ends (AgentLoopWorker._compute_score)", "reward"),
    "balance_batch": StageInfo(
        "PPOTrainer._balance_batch", "get_seqlen_balanced_partitions",
        (("PPOTrainer._balance_batch", "verl/trainer/ppo/v1/trainer_base.py:1503"),
         ("get_seqlen_balanced_partitions", "verl/utils/seqlen_balancing.py:213")),
        "every step, as verl V1's _step_once (minirl: unless trainer.balance_batch=false; verl reads that key "
        "in the legacy trainer only)", "trainer"),
    "old_log_prob": StageInfo(
        "PPOTrainer._compute_old_log_prob", "ActorRolloutRefWorker.compute_log_prob",
        (("PPOTrainer._compute_old_log_prob", "verl/trainer/ppo/v1/trainer_base.py:1529"),
         ("ActorRolloutRefWorker.compute_log_prob", "verl/workers/engine_workers.py:702")),
        "always", "actor"),
    "ref_log_prob": StageInfo(
        "PPOTrainer._compute_ref_log_prob", "ActorRolloutRefWorker.compute_ref_log_prob",
        (("PPOTrainer._compute_ref_log_prob", "verl/trainer/ppo/v1/trainer_base.py:1590"),
         ("ActorRolloutRefWorker.compute_ref_log_prob", "verl/workers/engine_workers.py:695")),
        "a reference policy: actor_rollout_ref.actor.use_kl_loss or algorithm.use_kl_in_reward", "ref"),
    "values": StageInfo(
        "PPOTrainer._compute_values", "CriticWorker.compute_values",
        (("PPOTrainer._compute_values", "verl/trainer/ppo/v1/trainer_base.py:1616"),),
        "a critic: algorithm.adv_estimator=gae (PPO)", "critic"),
    "advantage": StageInfo(
        "PPOTrainer._compute_advantage", "compute_advantage",
        (("PPOTrainer._compute_advantage", "verl/trainer/ppo/v1/trainer_base.py:1638"),
         ("compute_advantage_for_multi_trajectories", "verl/trainer/ppo/v1/utils.py:148"),
         ("compute_advantage", "verl/trainer/ppo/ray_trainer.py:187")),
        "always", "trainer"),
    "update_critic": StageInfo(
        "PPOTrainer._update_critic", "CriticWorker.update_critic",
        (("PPOTrainer._update_critic", "verl/trainer/ppo/v1/trainer_base.py:1699"),),
        "a critic: algorithm.adv_estimator=gae (PPO)", "critic"),
    "update_actor": StageInfo(
        "PPOTrainer._update_actor", "ActorRolloutRefWorker.update_actor",
        (("PPOTrainer._update_actor", "verl/trainer/ppo/v1/trainer_base.py:1722"),
         ("ActorRolloutRefWorker.update_actor", "verl/workers/engine_workers.py:712")),
        "trainer.critic_warmup <= step", "actor"),
    "update_weights": StageInfo(
        "PPOTrainerSync.on_step_end", "CheckpointEngineManager.update_weights",
        (("PPOTrainerSync.on_step_end", "verl/trainer/ppo/v1/trainer_sync.py:35"),
         ("CheckpointEngineManager.update_weights", "verl/checkpoint_engine/base.py:506")),
        "after every actor update (sync mode), and once at start-up", "rollout"),
    "validate": StageInfo(
        "PPOTrainer._validate", "AgentLoopManager.generate_sequences + the stored rm_scores (or compute_rm_score)",
        (("PPOTrainer._validate", "verl/trainer/ppo/v1/trainer_base.py:961"),),
        "trainer.val_before_train (step 0) and every trainer.test_freq steps", "rollout"),
}

STAGE_ORDER = list(STAGE_INFO)


def stage_info(stage: str) -> StageInfo:
    """`STAGE_INFO[stage]`, or a placeholder for a stage minirl does not know (a user's own span)."""
    return STAGE_INFO.get(stage) or StageInfo(f"(user span {stage!r})", "-", (), "user-defined", "-")


def describe_stage(stage: str) -> str:
    """One line: `advantage (PPOTrainer._compute_advantage -> compute_advantage; verl: ...:1638, ...)`."""
    info = stage_info(stage)
    verl = ", ".join(f"{name} {where}" for name, where in info.verl) or "none"
    return f"{stage} (minirl {info.minirl} -> {info.calls}; verl {verl})"
