"""The config schema: one dataclass per group of `ppo_trainer.yaml`, a docstring under every key.

verl declares the same groups as dataclasses too: `ActorConfig` (`verl/workers/config/actor.py:105`),
`RolloutConfig` (`verl/workers/config/rollout.py:145`), `AlgoConfig` (`verl/trainer/config/algorithm.py:620`),
`CriticConfig` (`verl/workers/config/critic.py:45`), and converts YAML into them with
`omega_conf_to_dataclass` (`verl/utils/config.py:23`). minirl keeps only the keys it implements; the
composed YAML is merged into `MinirlConfig`, so a key that does not exist or a value of the wrong type
is an error at load time (see `minirl.config.load`).

Defaults here mirror the YAML; the YAML is what a run reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

# ----------------------------------------------------------------------------------------------- data


@dataclass
class BuiltinTaskConfig:
    """minirl only: sizes of the embedded task generated for `minirl://<task>/<split>` files."""

    n_train: int = 7000
    """Training problems (thousands: a small task is memorised, not learned; 2-digit addition has 7320 distinct)."""
    n_val: int = 500
    """Held-out problems, disjoint from the training ones."""
    seed: int = 0
    """Seed of the task generator."""
    digits: int = 2
    """Digits per operand in the arithmetic task."""


@dataclass
class DataConfig:
    """`data.*`: where prompts come from and how many make a training step (verl: `data:` group)."""

    tokenizer: Optional[str] = None
    """Tokenizer path; null means the model's own (`actor_rollout_ref.model.tokenizer_path` or `.path`)."""
    train_files: Any = "minirl://arithmetic/train"
    """Parquet file(s) in verl's row format, or `minirl://<task>/train` for an embedded task."""
    val_files: Any = "minirl://arithmetic/val"
    """Validation parquet file(s), or `minirl://<task>/val`."""
    train_max_samples: int = -1
    """Use at most this many training rows (-1: all)."""
    val_max_samples: int = 200
    """Use at most this many validation rows (-1: all)."""
    prompt_key: str = "prompt"
    """Row column holding the chat messages of the prompt."""
    reward_fn_key: str = "data_source"
    """Row column that selects the score function."""
    max_prompt_length: int = 40
    """Prompts are left-padded to this many tokens; longer ones follow `truncation`."""
    max_response_length: int = 12
    """Most tokens the rollout may generate per response (`rollout.response_length`)."""
    train_batch_size: int = 32
    """PROMPTS per training step. Each prompt becomes `rollout.n` sequences."""
    val_batch_size: Optional[int] = None
    """Prompts per validation batch (null: the whole validation set at once)."""
    return_raw_chat: bool = True
    """Keep the chat messages so the agent loop applies the chat template itself (verl's default)."""
    shuffle: bool = True
    """Shuffle the training prompts each epoch."""
    seed: Optional[int] = 42
    """Seed of the training sampler."""
    filter_overlong_prompts: bool = False
    """Drop prompts longer than `max_prompt_length` instead of failing."""
    truncation: str = "error"
    """What to do with an over-long prompt: error | left | right."""
    dataloader_num_workers: int = 0
    """Dataloader worker processes (0: in the trainer process)."""
    builtin: BuiltinTaskConfig = field(default_factory=BuiltinTaskConfig)
    """minirl only: the embedded task's sizes."""


# ---------------------------------------------------------------------------------- actor_rollout_ref


@dataclass
class ModelConfig:
    """`*.model`: which weights to load (verl: `HFModelConfig`, `verl/workers/config/model.py`)."""

    path: str = "minirl://tiny-qwen2"
    """`minirl://tiny-qwen2` (built locally), a local directory, or a hub id."""
    tokenizer_path: Optional[str] = None
    """Tokenizer location if not `path`."""
    override_config: dict = field(default_factory=dict)
    """Keys merged into the model's HF config before it is built."""
    enable_gradient_checkpointing: bool = False
    """Recompute activations in backward to save memory."""
    use_remove_padding: bool = False
    """verl packs sequences without padding (flash-attn varlen); minirl always keeps padding."""
    trust_remote_code: bool = False
    """Passed to transformers' `from_pretrained`."""


@dataclass
class OptimConfig:
    """`*.optim`: optimizer and LR schedule (verl: `FSDPOptimizerConfig`, `verl/workers/config/optimizer.py`)."""

    optimizer: str = "AdamW"
    """Optimizer class (minirl: AdamW only)."""
    lr: float = 1e-4
    """Peak learning rate."""
    lr_warmup_steps_ratio: float = 0.0
    """Warm-up length as a fraction of total training steps (used when `lr_warmup_steps` < 0)."""
    lr_warmup_steps: int = -1
    """Warm-up length in steps; -1 means use the ratio."""
    total_training_steps: int = -1
    """Filled in by the trainer from the dataloader length and `trainer.total_training_steps`."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    betas: list = field(default_factory=lambda: [0.9, 0.999])
    """AdamW betas."""
    clip_grad: float = 1.0
    """Global gradient-norm clip."""
    min_lr_ratio: float = 0.0
    """Cosine schedule floor, as a fraction of `lr`."""
    num_cycles: float = 0.5
    """Cosine cycles over the run (0.5: one half-cosine decay)."""
    lr_scheduler_type: str = "constant"
    """constant | cosine (both after warm-up)."""
    override_optimizer_config: Optional[dict] = None
    """Extra AdamW keyword arguments, e.g. `{eps: 1.0e-6}` (verl: same key)."""


@dataclass
class FSDPConfig:
    """`*.fsdp_config`: how the engine shards and casts the model (verl: `FSDPEngineConfig`)."""

    param_offload: bool = False
    """Keep parameters on CPU between uses (a no-op on a CPU-only machine)."""
    optimizer_offload: bool = False
    """Keep optimizer state on CPU between uses."""
    reshard_after_forward: bool = True
    """FSDP2: free the gathered parameters after forward (ZeRO-3) or keep them (ZeRO-2)."""
    fsdp_size: int = -1
    """Ranks per shard group; -1 shards over all data-parallel ranks."""
    model_dtype: str = "fp32"
    """dtype the parameters are stored in."""
    dtype: str = "float32"
    """Compute dtype of forward/backward (mixed precision: bfloat16 on GPU)."""
    seed: int = 42
    """Seed for model initialisation and dropout."""


@dataclass
class CheckpointContentsConfig:
    """`*.checkpoint`: what a checkpoint holds (verl: `CheckpointConfig`)."""

    save_contents: list = field(default_factory=lambda: ["model", "optimizer", "extra"])
    """Parts written at `trainer.save_freq`: model, optimizer, extra (scheduler, RNG)."""
    load_contents: list = field(default_factory=lambda: ["model", "optimizer", "extra"])
    """Parts restored on resume."""


@dataclass
class PolicyLossConfig:
    """`actor.policy_loss`: which policy loss and its knobs (verl: `PolicyLossConfig`)."""

    loss_mode: str = "vanilla"
    """Registered name in `core_algos` (vanilla, gspo, sapo, cispo, gpg, clip_cov, kl_cov, geo_mean)."""
    clip_cov_ratio: float = 0.0002
    """clip_cov: fraction of tokens whose gradient is clipped."""
    clip_cov_lb: float = 1.0
    """clip_cov: lower bound of the covariance window."""
    clip_cov_ub: float = 5.0
    """clip_cov: upper bound of the covariance window."""
    kl_cov_ratio: float = 0.0002
    """kl_cov: fraction of tokens that get the KL penalty."""
    ppo_kl_coef: float = 0.1
    """kl_cov: coefficient of that penalty."""


@dataclass
class ActorConfig:
    """`actor_rollout_ref.actor`: the policy being trained (verl: `ActorConfig`, `verl/workers/config/actor.py:105`)."""

    strategy: str = "fsdp2"
    """Training backend: fsdp / fsdp2 (minirl implements FSDP2 for both)."""
    rollout_n: int = 8
    """Copied from `rollout.n`: sequences per prompt."""
    ppo_mini_batch_size: int = 32
    """PROMPTS per optimizer step; the engine sees `ppo_mini_batch_size * rollout.n` sequences."""
    ppo_micro_batch_size: Optional[int] = None
    """Deprecated in verl; use `ppo_micro_batch_size_per_gpu`."""
    ppo_micro_batch_size_per_gpu: Optional[int] = 64
    """SEQUENCES per forward/backward on one rank; gradients accumulate over micro-batches."""
    use_dynamic_bsz: bool = False
    """verl packs micro-batches by token count; minirl does not (must stay false)."""
    ppo_epochs: int = 1
    """Passes over the batch per training step."""
    shuffle: bool = False
    """Shuffle sequences before splitting into mini-batches."""
    data_loader_seed: int = 42
    """Seed of that shuffle."""
    clip_ratio: float = 0.2
    """PPO clip epsilon (used when low/high are not set)."""
    clip_ratio_low: float = 0.2
    """Lower clip: ratio >= 1 - clip_ratio_low."""
    clip_ratio_high: float = 0.2
    """Upper clip: ratio <= 1 + clip_ratio_high (DAPO's clip-higher raises it)."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound applied to negative advantages."""
    tau_pos: float = 1.0
    """sapo: temperature for positive advantages."""
    tau_neg: float = 1.05
    """sapo: temperature for negative advantages."""
    loss_agg_mode: str = "token-mean"
    """token-mean | token-sum | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm."""
    loss_scale_factor: Optional[float] = None
    """seq-mean-token-sum-norm divisor (null: the response length)."""
    entropy_coeff: float = 0.0
    """Entropy bonus coefficient (0 disables the entropy term)."""
    calculate_entropy: bool = False
    """Compute entropy for metrics even when `entropy_coeff` is 0."""
    use_kl_loss: bool = False
    """Add `kl_loss_coef * KL(actor || ref)` to the policy loss (GRPO's KL)."""
    kl_loss_coef: float = 0.001
    """Coefficient of the KL loss."""
    kl_loss_type: str = "low_var_kl"
    """kl | k1 | abs | mse | k2 | low_var_kl | k3, optionally with a `+` suffix (straight-through)."""
    grad_clip: float = 1.0
    """Global gradient-norm clip (copied into `optim.clip_grad`)."""
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    """Which policy loss."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer and schedule."""
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    """Sharding and dtypes."""
    checkpoint: CheckpointContentsConfig = field(default_factory=CheckpointContentsConfig)
    """Checkpoint contents."""


@dataclass
class RefConfig:
    """`actor_rollout_ref.ref`: the frozen reference policy, used only when a KL option is on."""

    rollout_n: int = 8
    """Copied from `rollout.n`."""
    strategy: str = "fsdp2"
    """Same backend as the actor."""
    log_prob_micro_batch_size: Optional[int] = None
    """Deprecated in verl; use the `_per_gpu` key."""
    log_prob_micro_batch_size_per_gpu: Optional[int] = 64
    """Sequences per forward when computing `ref_log_prob`."""
    log_prob_use_dynamic_bsz: bool = False
    """Token-count micro-batching (not in minirl)."""
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    """Sharding and dtypes."""


@dataclass
class SamplingKwargs:
    """`rollout.val_kwargs`: sampling used for validation (greedy by default)."""

    top_k: int = -1
    """-1: no top-k filtering."""
    top_p: float = 1.0
    """1.0: no nucleus filtering."""
    temperature: float = 0.0
    """0: greedy."""
    n: int = 1
    """Samples per validation prompt."""
    do_sample: bool = False
    """False: greedy."""


@dataclass
class MultiTurnConfig:
    """`rollout.multi_turn`: tool-using multi-turn agent loops (verl: `MultiTurnConfig`)."""

    enable: bool = False
    """Use the tool agent loop."""
    max_assistant_turns: Optional[int] = None
    """Stop a session after this many assistant turns."""
    max_user_turns: Optional[int] = None
    """Stop a session after this many tool/user turns."""
    tool_config_path: Optional[str] = None
    """YAML describing the tools."""
    max_tool_response_length: int = 256
    """Tool outputs are cut to this many tokens."""


@dataclass
class AgentConfig:
    """`rollout.agent`: the agent-loop workers (verl: `AgentLoopConfig`)."""

    num_workers: int = 1
    """AgentLoopWorkers that share the sessions."""
    default_agent_loop: str = "single_turn_agent"
    """Agent loop for rows that do not name one."""


@dataclass
class CheckpointEngineConfig:
    """`rollout.checkpoint_engine`: how weights travel from the actor to the rollout."""

    backend: str = "naive"
    """naive: full tensors streamed in-process (verl also has nccl/nixl/hccl backends)."""


@dataclass
class RolloutConfig:
    """`actor_rollout_ref.rollout`: the inference engine that samples responses (verl: `RolloutConfig`)."""

    name: str = "hf"
    """hf (transformers/torch, runs anywhere) | vllm."""
    mode: str = "async"
    """verl runs rollout replicas as async servers; minirl batches requests in-process."""
    temperature: float = 1.0
    """Sampling temperature; the actor divides logits by the same value when it recomputes log-probs."""
    top_k: int = -1
    """-1: off."""
    top_p: float = 1.0
    """1.0: off."""
    do_sample: bool = True
    """False: greedy."""
    seed: int = 42
    """Sampling seed."""
    prompt_length: int = 40
    """Copied from `data.max_prompt_length`."""
    response_length: int = 12
    """Copied from `data.max_response_length`."""
    dtype: str = "float32"
    """Rollout compute dtype."""
    n: int = 8
    """Responses sampled per prompt (a GRPO group)."""
    gpu_memory_utilization: float = 0.5
    """vLLM: fraction of GPU memory for weights + KV cache."""
    enforce_eager: bool = True
    """vLLM: no CUDA graphs."""
    free_cache_engine: bool = True
    """vLLM: free the KV cache while training (sleep mode; not on CPU)."""
    tensor_model_parallel_size: int = 1
    """vLLM tensor parallel size."""
    max_num_seqs: int = 256
    """Most sequences decoded together."""
    max_model_len: Optional[int] = None
    """vLLM max context (null: prompt_length + response_length)."""
    enable_prefix_caching: bool = True
    """vLLM prefix cache (reset after every weight sync)."""
    log_prob_micro_batch_size: Optional[int] = None
    """Deprecated in verl."""
    log_prob_micro_batch_size_per_gpu: Optional[int] = 64
    """Sequences per forward when the actor recomputes `old_log_probs`."""
    log_prob_use_dynamic_bsz: bool = False
    """Token-count micro-batching (not in minirl)."""
    calculate_log_probs: bool = True
    """Return per-token log-probs of the sampled tokens (`rollout_log_probs`)."""
    engine_kwargs: dict = field(default_factory=lambda: {"vllm": {}})
    """Extra keyword arguments per engine."""
    val_kwargs: SamplingKwargs = field(default_factory=SamplingKwargs)
    """Sampling for validation."""
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    """Multi-turn / tools."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """Agent-loop workers."""
    checkpoint_engine: CheckpointEngineConfig = field(default_factory=CheckpointEngineConfig)
    """Weight transport to the rollout."""


@dataclass
class ActorRolloutRefConfig:
    """`actor_rollout_ref`: actor, rollout and reference in one worker group (the hybrid engine)."""

    hybrid_engine: bool = True
    """Actor and rollout share a worker (and a GPU) and hand weights over in memory."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy's weights."""
    actor: ActorConfig = field(default_factory=ActorConfig)
    """Training."""
    ref: RefConfig = field(default_factory=RefConfig)
    """Reference policy."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Sampling."""


# --------------------------------------------------------------------------------------------- critic


@dataclass
class CriticConfig:
    """`critic`: the value model PPO/GAE needs (verl: `CriticConfig`, `verl/workers/config/critic.py:45`)."""

    enable: Optional[bool] = None
    """null: on exactly when the advantage estimator needs values (gae)."""
    strategy: str = "fsdp2"
    """Training backend."""
    rollout_n: int = 8
    """Copied from `rollout.n`."""
    ppo_mini_batch_size: int = 32
    """Prompts per critic optimizer step."""
    ppo_micro_batch_size: Optional[int] = None
    """Deprecated in verl."""
    ppo_micro_batch_size_per_gpu: Optional[int] = 64
    """Sequences per forward/backward on one rank."""
    forward_micro_batch_size_per_gpu: Optional[int] = 64
    """Sequences per forward when computing values."""
    use_dynamic_bsz: bool = False
    """Not in minirl."""
    ppo_epochs: int = 1
    """Passes per step."""
    shuffle: bool = False
    """Shuffle before mini-batching."""
    data_loader_seed: int = 42
    """Seed of that shuffle."""
    cliprange_value: float = 0.5
    """Value clipping range around the old values."""
    loss_agg_mode: str = "token-mean"
    """How the value loss is aggregated."""
    grad_clip: float = 1.0
    """Global gradient-norm clip."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The critic's initial weights (the policy's, with a value head)."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer."""
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    """Sharding."""
    checkpoint: CheckpointContentsConfig = field(default_factory=CheckpointContentsConfig)
    """Checkpoint contents."""


# --------------------------------------------------------------------------------------------- reward


@dataclass
class CustomRewardFunctionConfig:
    """`reward.custom_reward_function`: a user's score function loaded from a file."""

    path: Optional[str] = None
    """Python file defining the function (null: the built-in scorer chosen by data_source)."""
    name: str = "compute_score"
    """Function name in that file: `fn(data_source, solution_str, ground_truth, extra_info) -> float | dict`."""


@dataclass
class RewardManagerConfig:
    """`reward.reward_manager`: which reward manager turns responses into scores."""

    source: str = "register"
    """register: a manager registered by name."""
    name: str = "naive"
    """naive (one sample at a time) | batch (the whole batch in one call)."""


@dataclass
class RewardConfig:
    """`reward`: how responses are scored (verl: `RewardConfig`)."""

    num_workers: int = 1
    """Reward workers (minirl scores in the trainer process)."""
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    """User score function."""
    reward_manager: RewardManagerConfig = field(default_factory=RewardManagerConfig)
    """Reward manager."""


# ------------------------------------------------------------------------------------------ algorithm


@dataclass
class KLControlConfig:
    """`algorithm.kl_ctrl`: the KL-in-reward coefficient controller."""

    type: str = "fixed"
    """fixed | adaptive."""
    kl_coef: float = 0.001
    """Initial (or fixed) coefficient beta."""
    horizon: int = 10000
    """adaptive: steps over which beta moves toward the target."""
    target_kl: float = 0.1
    """adaptive: the KL the controller aims for."""


@dataclass
class RolloutCorrectionConfig:
    """`algorithm.rollout_correction` (verl: `verl/trainer/config/algorithm/rollout_correction.yaml`).

    minirl implements only `bypass_mode`; verl also has importance-sampling weights and rejection
    sampling (`rollout_is`, `rollout_rs`, thresholds) for correcting rollout/actor mismatch.
    """

    bypass_mode: bool = False
    """True: use the rollout's log-probs as `old_log_probs` instead of recomputing them with the actor
    (saves one forward pass per step; exact only when rollout and actor compute the same numbers, as the
    fp32 hf rollout does)."""


@dataclass
class AlgoConfig:
    """`algorithm`: advantage estimator and KL-in-reward (verl: `AlgoConfig`, `verl/trainer/config/algorithm.py:620`)."""

    gamma: float = 1.0
    """Discount factor (GAE)."""
    lam: float = 1.0
    """GAE lambda."""
    adv_estimator: str = "grpo"
    """gae | grpo | rloo | reinforce_plus_plus | reinforce_plus_plus_baseline | remax | gpg | opo | grpo_passk."""
    norm_adv_by_std_in_grpo: bool = True
    """GRPO divides by the group std (False: Dr. GRPO's mean-only baseline)."""
    use_kl_in_reward: bool = False
    """Subtract beta * KL(old || ref) from the token rewards."""
    kl_penalty: str = "kl"
    """KL estimator for the in-reward penalty."""
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    """Controller of beta."""
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    """How old_log_probs relate to the rollout's log-probs."""


# -------------------------------------------------------------------------------------------- trainer


@dataclass
class TrainerV1Config:
    """`trainer.v1`: which V1 trainer runs the loop."""

    trainer_mode: str = "sync"
    """sync (minirl) | colocate_async | separate_async (verl)."""


@dataclass
class TrainerConfig:
    """`trainer`: the loop around the steps (verl: `trainer:` group)."""

    balance_batch: bool = False
    """Reorder sequences so that ranks get equal token counts."""
    total_epochs: int = 1
    """Passes over the training prompts."""
    total_training_steps: Optional[int] = None
    """Stop after this many steps (null: epochs x batches per epoch)."""
    project_name: str = "minirl"
    """Used in the output directory."""
    experiment_name: str = "arithmetic_grpo"
    """Used in the output directory."""
    logger: list = field(default_factory=lambda: ["console", "file"])
    """console: a line per step; file: metrics.jsonl in default_local_dir."""
    log_val_generations: int = 0
    """Print this many validation generations."""
    nnodes: int = 1
    """Machines."""
    n_gpus_per_node: int = 1
    """Ranks per machine (on a CPU machine each rank is a process)."""
    worker_group: str = "auto"
    """auto | inprocess | ray: where the workers run. ray: one Ray actor per rank (needed for more than one
    rank or a cluster); inprocess: objects in the trainer process, one rank, no Ray start (30-40 s saved);
    auto: ray when nnodes * n_gpus_per_node > 1 or ray_kwargs.ray_init.address is set. verl always uses Ray."""
    save_freq: int = -1
    """Save a checkpoint every this many steps (-1: never)."""
    resume_mode: str = "auto"
    """auto: resume from the latest checkpoint in default_local_dir | disable | resume_path."""
    resume_from_path: Optional[str] = None
    """Checkpoint folder when resume_mode=resume_path."""
    val_before_train: bool = True
    """Validate once before the first step."""
    val_only: bool = False
    """Validate and exit."""
    test_freq: int = 10
    """Validate every this many steps (-1: never)."""
    critic_warmup: int = 0
    """Steps during which only the critic trains."""
    default_local_dir: str = "checkpoints/minirl/arithmetic_grpo"
    """Where checkpoints, metrics and traces go."""
    max_actor_ckpt_to_keep: Optional[int] = None
    """Keep only the newest N checkpoints."""
    max_critic_ckpt_to_keep: Optional[int] = None
    """Same for the critic."""
    device: str = "cpu"
    """cpu | cuda."""
    seed: int = 42
    """Global seed."""
    use_v1: bool = True
    """verl's V1 trainer (PPOTrainer); minirl has only that one."""
    v1: TrainerV1Config = field(default_factory=TrainerV1Config)
    """V1 mode."""


@dataclass
class TraceConfig:
    """`trace`: minirl's instrument (no verl counterpart)."""

    level: str = "fields"
    """off | stages (timings and versions) | fields (plus every field's shape, dtype, device, summary)."""
    dir: str = "checkpoints/minirl/arithmetic_grpo/trace"
    """Where the JSONL trace is written."""


@dataclass
class RayInitConfig:
    """`ray_kwargs.ray_init`: arguments of `ray.init`."""

    num_cpus: Optional[int] = None
    """CPUs Ray may schedule (null: what the placement groups need)."""
    address: Optional[str] = None
    """null: a private local Ray; `auto` or host:port joins a cluster started with `ray start`."""


@dataclass
class RayKwargsConfig:
    """`ray_kwargs`: how the controller starts Ray."""

    ray_init: RayInitConfig = field(default_factory=RayInitConfig)
    """ray.init arguments."""


@dataclass
class MinirlConfig:
    """The whole trainer config, group by group, as in verl's `ppo_trainer.yaml`."""

    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgoConfig = field(default_factory=AlgoConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)
