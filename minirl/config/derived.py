"""What a config implies, computed from the config alone: which models run, how many ranks, replicas and batches.

Every stage reads these quantities, so they are written once, here, beside the config they come from
(config is a leaf: this module imports nothing of minirl beyond `minirl.utils`, and no torch):

- which models a run needs: `need_critic` (`verl/trainer/ppo/utils.py:96`), `need_reference_policy`
  (`verl/trainer/ppo/utils.py:75`) and `need_teacher_policy` (`verl/trainer/ppo/utils.py:82`), re-exported under verl's names by `minirl.trainer.ppo.utils`;
- the training ranks: `model_parallel_size` (the model-parallel ranks sharing one data chunk: torchtitan's TP,
  megatron's TP x PP x CP) and
  `data_parallel_size` (verl: the engine's `get_data_parallel_size()`);
- where the training workers run: `worker_group_backend` (`trainer.worker_group`), `trainer_uses_ray`;
- the rollout replicas: `rollout_world_size`, `uses_servers` and `num_replicas` (verl:
  `LLMServerManager._initialize_llm_servers`, `verl/workers/rollout/llm_server.py:518`);
- one training step's batch arithmetic: `derived_numbers` (the table of `minirl.config.validate`,
  what `minirl config explain` prints).
"""

from __future__ import annotations

from dataclasses import dataclass

from minirl.utils.config import cfg_get

__all__ = [
    "CRITIC_ESTIMATORS",
    "DerivedNumbers",
    "data_parallel_size",
    "derived_numbers",
    "generation_nice",
    "model_parallel_size",
    "need_critic",
    "need_reference_policy",
    "need_teacher_policy",
    "num_replicas",
    "rollout_world_size",
    "trainer_uses_ray",
    "uses_servers",
    "worker_group_backend",
]

# ------------------------------------------------------------------------------------ which models

CRITIC_ESTIMATORS = ("gae",)
"""Advantage estimators that read `values` (verl: only `AdvantageEstimator.GAE` turns the critic on)."""


def need_critic(config) -> bool:
    """The critic runs when `critic.enable` says so, or (null) when the estimator needs values (gae).

    verl warns when it turns the critic off for a non-GAE estimator; minirl stays quiet (GRPO is its default).
    """
    if config.critic.enable is not None:
        return bool(config.critic.enable)
    return config.algorithm.adv_estimator in CRITIC_ESTIMATORS


def need_reference_policy(config) -> bool:
    """The reference policy runs when a KL option is on: `algorithm.use_kl_in_reward` or `actor.use_kl_loss`."""
    return bool(config.algorithm.get("use_kl_in_reward", False) or config.actor_rollout_ref.actor.use_kl_loss)


def need_teacher_policy(config) -> bool:
    """The distillation teacher runs when `distillation.enabled` (verl: `need_teacher_policy`, `verl/trainer/ppo/utils.py:82`)."""
    distillation = config.get("distillation") if hasattr(config, "get") else getattr(config, "distillation", None)
    return bool(distillation is not None and distillation.get("enabled", False))


# ------------------------------------------------------------------------------------ training ranks


def model_parallel_size(config, role: str = "actor") -> int:
    """Ranks that share one data chunk: `tensor_parallel_size` (torchtitan) or TP x PP x CP (megatron), else 1.

    `role` is `actor` (`actor_rollout_ref.actor`) or `critic`; with `strategy: fsdp2` every rank is
    its own data-parallel rank. verl: world / `get_data_parallel_size()` of the role's engine
    (`MegatronEngine.get_data_parallel_size`, `verl/workers/engine/megatron/transformer_impl.py:757`).
    """
    section = config.critic if role == "critic" else config.actor_rollout_ref.actor
    strategy = section.get("strategy")
    if strategy == "megatron" and section.get("megatron") is not None:
        mg = section.megatron
        return (int(mg.get("tensor_model_parallel_size", 1)) * int(mg.get("pipeline_model_parallel_size", 1))
                * int(mg.get("context_parallel_size", 1)))
    if strategy != "torchtitan" or section.get("torchtitan") is None:
        return 1
    return int(section.torchtitan.tensor_parallel_size)


def data_parallel_size(config, role: str = "actor") -> int:
    """Data-parallel ranks the batch is split over: `trainer.nnodes * trainer.n_gpus_per_node / model_parallel_size`.

    verl: the engine's `get_data_parallel_size()` (world / the model-parallel sizes); the nd-mesh
    dispatch cuts every batch into this many chunks.
    """
    world = int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)
    return max(1, world // max(1, model_parallel_size(config, role)))


# ------------------------------------------------------------------------------------ rollout replicas


def worker_group_backend(config) -> str:
    """`trainer.worker_group` resolved: "inprocess" or "ray" ("auto": ray for several ranks or a Ray address).

    Read by `minirl.trainer.ppo.worker_groups` (where the training workers live) and by the agent loop
    (`rollout.agent.placement=auto` follows it: Ray actors when the trainer's workers are)."""
    choice = str(cfg_get(config.trainer, "worker_group", "auto"))
    if choice not in ("auto", "inprocess", "ray"):
        raise ValueError(f"trainer.worker_group={choice!r}: use auto, inprocess or ray.")
    if choice != "auto":
        return choice
    ranks = int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)
    address = cfg_get(cfg_get(cfg_get(config, "ray_kwargs", {}) or {}, "ray_init", {}) or {}, "address", None)
    return "ray" if ranks > 1 or address else "inprocess"


def trainer_uses_ray(config) -> bool:
    """True when the trainer's workers are Ray actors (`worker_group_backend(config) == "ray"`)."""
    return worker_group_backend(config) == "ray"


def generation_nice(config) -> int:
    """`actor_rollout_ref.rollout.nice` resolved: the niceness of the rollout server and agent-loop worker processes
    (null: 5 in separate_async, where they overlap the trainer, else 0).

    A sub-config that carries no `trainer.v1` (a teacher's server config) counts as not separate_async."""
    value = cfg_get(config.actor_rollout_ref.rollout, "nice", None)
    if value is not None:
        return int(value)
    mode = cfg_get(cfg_get(cfg_get(config, "trainer", None), "v1", None), "trainer_mode", "sync")
    return 5 if str(mode) == "separate_async" else 0


def rollout_world_size(rollout) -> int:
    """Devices per replica: `tensor_model_parallel_size * data_parallel_size * pipeline_model_parallel_size`.

    `rollout` is the `actor_rollout_ref.rollout` section (or the plain dict a rollout server receives);
    the three sizes are keys of its schema (`minirl.config.schema.RolloutConfig`, default 1 each).
    """
    return (int(cfg_get(rollout, "tensor_model_parallel_size", 1)) * int(cfg_get(rollout, "data_parallel_size", 1))
            * int(cfg_get(rollout, "pipeline_model_parallel_size", 1)))


def uses_servers(rollout) -> bool:
    """True for standalone rollout servers (`rollout.nnodes >= 1`), False for the in-controller replica."""
    return int(cfg_get(rollout, "nnodes", 0)) > 0


def num_replicas(rollout, trainer_world_size: int = 1) -> int:
    """verl's replica count: standalone `nnodes * n_gpus_per_node // world`, hybrid `trainer ranks // world`.

    minirl builds one in-controller replica in the hybrid case whatever this returns.
    """
    world = rollout_world_size(rollout)
    if uses_servers(rollout):
        devices = int(cfg_get(rollout, "nnodes", 0)) * int(cfg_get(rollout, "n_gpus_per_node", 1))
    else:
        devices = int(trainer_world_size)
    return devices // world


# ------------------------------------------------------------------------------------ one step's batches


@dataclass
class DerivedNumbers:
    """What one training step does, computed from the config (the table in `minirl.config.validate`)."""

    dp_size: int
    sequences_per_step: int
    sequences_per_rank_per_step: float
    global_mini_batch_sequences: int
    per_rank_mini_batch: float
    micro_batch_size_per_gpu: int
    micro_batches_per_mini_batch: float
    mini_batches_per_step: float
    ppo_epochs: int
    optimizer_steps_per_step: float


def derived_numbers(cfg) -> DerivedNumbers:
    """Compute the batch-size arithmetic of one training step (no checks; see `minirl.config.validate`)."""
    arr = cfg.actor_rollout_ref
    n = int(arr.rollout.n)
    dp = data_parallel_size(cfg)  # the ranks of one model-parallel group share a chunk
    seqs = int(cfg.data.train_batch_size) * n
    mini = int(arr.actor.ppo_mini_batch_size) * n
    micro = int(arr.actor.ppo_micro_batch_size_per_gpu or 0)
    per_rank_mini = mini / dp if dp else float("nan")
    mini_batches = int(cfg.data.train_batch_size) / int(arr.actor.ppo_mini_batch_size)
    return DerivedNumbers(
        dp_size=dp,
        sequences_per_step=seqs,
        sequences_per_rank_per_step=seqs / dp if dp else float("nan"),
        global_mini_batch_sequences=mini,
        per_rank_mini_batch=per_rank_mini,
        micro_batch_size_per_gpu=micro,
        micro_batches_per_mini_batch=per_rank_mini / micro if micro else float("nan"),
        mini_batches_per_step=mini_batches,
        ppo_epochs=int(arr.actor.ppo_epochs),
        optimizer_steps_per_step=mini_batches * int(arr.actor.ppo_epochs),
    )
