"""The config schema: one dataclass per group of `ppo_trainer.yaml`, a docstring under every key.

verl declares the same groups as dataclasses too: `ActorConfig` (`verl/workers/config/actor.py:105`),
`RolloutConfig` (`verl/workers/config/rollout.py:145`), `AlgoConfig` (`verl/trainer/config/algorithm.py:620`),
`CriticConfig` (`verl/workers/config/critic.py:45`), and converts YAML into them with
`omega_conf_to_dataclass` (`verl/utils/config.py:23`). minirl keeps a subset of verl's keys; the
composed YAML is merged into `MinirlConfig`, so a key that does not exist or a value of the wrong type
is an error at load time (see `minirl.config.load`). The groups every role shares (`model`, `optim`,
`fsdp_config`, `checkpoint`) are in `minirl.config.schema_engine`. A few keys exist only to keep verl's
shape and must stay at their defaults: their docstrings say so, and `minirl.config.unimplemented` lists them.

Defaults here mirror the YAML; the YAML is what a run reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from minirl.config.schema_async import RolloutCorrectionConfig, TrainerV1Config
from minirl.config.schema_distillation import DistillationConfig
from minirl.config.schema_engine import (
    CheckpointContentsConfig,
    FSDPConfig,
    MegatronEngineConfig,
    ModelConfig,
    OptimConfig,
    TorchtitanEngineConfig,
)
from minirl.config.schema_multi_turn import MultiTurnConfig
from minirl.config.schema_reward import CustomRewardFunctionConfig, RewardConfig

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

    tokenizer: str | None = None
    """verl: a tokenizer class or path. Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
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
    val_batch_size: int | None = None
    """verl: validation batch size (deprecated there). Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
    return_raw_chat: bool = True
    """verl: hand the chat messages to the agent loop, which templates them (minirl always does). Not implemented by
    minirl: must stay at its default (see `minirl.config.unimplemented`)."""
    shuffle: bool = True
    """Shuffle the training prompts each epoch."""
    seed: int | None = 42
    """Seed of the training sampler."""
    filter_overlong_prompts: bool = False
    """Drop prompts longer than `max_prompt_length` instead of failing."""
    truncation: str = "error"
    """What to do with an over-long prompt: error | left | right."""
    return_full_prompt: bool = False
    """Also return the templated prompt text as `full_prompts` (for inspection; the rollout uses the ids)."""
    apply_chat_template_kwargs: dict = field(default_factory=dict)
    """Extra keyword arguments for the tokenizer's `apply_chat_template` (e.g. `{enable_thinking: false}`)."""
    dataloader_num_workers: int = 0
    """verl: dataloader worker processes. Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
    builtin: BuiltinTaskConfig = field(default_factory=BuiltinTaskConfig)
    """minirl only: the embedded task's sizes."""


# ---------------------------------------------------------------------------------- actor_rollout_ref


@dataclass
class PolicyLossRolloutCorrectionConfig:
    """`actor.policy_loss.rollout_correction`: what `loss_mode=bypass_mode` computes (verl: `RolloutCorrectionConfig`,
    `verl/trainer/config/algorithm.py:63`, with its dataclass defaults)."""

    loss_type: str = "ppo_clip"
    """ppo_clip: PPO's clipped loss against the rollout's log-probs (the ratio is the IS weight); reinforce:
    -A log pi times the IS weights."""
    rollout_is: str | None = "sequence"
    """IS weight level: token, sequence (the product over the response), or null (none)."""
    rollout_is_threshold: Any = 2.0
    """A number: truncate the weights at it (TIS); a 'lower_upper' string: zero them outside (IcePop)."""
    rollout_is_batch_normalize: bool = False
    """Divide the weights by their mean."""
    rollout_rs: str | None = None
    """Rejection criteria, comma-separated (token_k1, seq_mean_k3, seq_max_k2, ...), or null (none)."""
    rollout_rs_threshold: Any = None
    """One bound per criterion (or one shared); k1 criteria take 'lower_upper' ratio bounds."""


@dataclass
class PolicyLossConfig:
    """`actor.policy_loss`: which policy loss and its knobs (verl: `PolicyLossConfig`)."""

    loss_mode: str = "vanilla"
    """Registered name in `core_algos` (vanilla, dppo_tv, dppo_kl, gspo, sapo, gpg, clip_cov, kl_cov, geo_mean, dro,
    cispo, bypass_mode)."""
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
    dro_beta: float | None = None
    """dro: weight beta of the squared log-ratio penalty; required (> 0) when `loss_mode` is dro."""
    rollout_correction: PolicyLossRolloutCorrectionConfig = field(default_factory=PolicyLossRolloutCorrectionConfig)
    """bypass_mode: importance weights and rejection between the rollout's policy and the actor's."""


@dataclass
class ActorConfig:
    """`actor_rollout_ref.actor`: the policy being trained (verl: `ActorConfig`, `verl/workers/config/actor.py:105`)."""

    strategy: str = "fsdp2"
    """The training engine, set by `model_engine`: fsdp2 (dp), torchtitan or megatron (verl also: fsdp, veomni)."""
    torchtitan: TorchtitanEngineConfig | None = None
    """The torchtitan engine's mesh (present with `model_engine=torchtitan`)."""
    megatron: MegatronEngineConfig | None = None
    """The Megatron-layout engine's tp x pp x dp layout (present with `model_engine=megatron`)."""
    rollout_n: int = 8
    """Copied from `rollout.n` (as in verl); set `rollout.n`. Not implemented by minirl: must stay at its default
    (see `minirl.config.unimplemented`)."""
    ppo_mini_batch_size: int = 32
    """PROMPTS per optimizer step; the engine sees `ppo_mini_batch_size * rollout.n` sequences."""
    ppo_micro_batch_size: int | None = None
    """Deprecated in verl; use `ppo_micro_batch_size_per_gpu`. Not implemented by minirl: must stay at its default
    (see `minirl.config.unimplemented`)."""
    ppo_micro_batch_size_per_gpu: int | None = 64
    """SEQUENCES per forward/backward on one rank; gradients accumulate over micro-batches."""
    use_dynamic_bsz: bool = False
    """verl: micro-batches by token count. Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
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
    loss_scale_factor: float | None = None
    """seq-mean-token-sum-norm divisor (null: the response length)."""
    entropy_coeff: float = 0.0
    """Entropy bonus coefficient (0 disables the entropy term)."""
    calculate_entropy: bool = False
    """Compute entropy for metrics even when `entropy_coeff` is 0."""
    calculate_sum_pi_squared: bool = False
    """Make the old-log-prob forward also return `sum_pi_squared` (sum over the vocabulary of the squared
    next-token probabilities), which `optimal_token_baseline` and `tir_optimal_token_baseline` need."""
    use_prefix_grouper: bool = True
    """Run each distinct prompt of a micro-batch once and continue its `n` responses from a shared KV cache, in the
    actor's log-prob and update forwards (`minirl.workers.engine.forward_layout`): same numbers to float rounding,
    ~3x less work at n=8. verl's default is false (its PrefixGrouper is a separate package on the legacy path).
    The Megatron-layout engine (`model_engine=megatron`) does not apply it."""
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
    """Copied from `rollout.n`. Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
    strategy: str = "fsdp2"
    """Same backend as the actor (follows `actor.strategy`)."""
    torchtitan: TorchtitanEngineConfig | None = None
    """The torchtitan engine's mesh, the actor's by default (present with `model_engine=torchtitan`)."""
    megatron: MegatronEngineConfig | None = None
    """The Megatron-layout engine's layout, the actor's by default (present with `model_engine=megatron`)."""
    log_prob_micro_batch_size: int | None = None
    """Deprecated in verl; use the `_per_gpu` key. Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
    log_prob_micro_batch_size_per_gpu: int | None = 64
    """Sequences per forward when computing `ref_log_prob`."""
    log_prob_use_dynamic_bsz: bool = False
    """verl: token-count micro-batching. Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
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
class AgentConfig:
    """`rollout.agent`: the agent-loop workers (verl: `AgentLoopConfig`; `minirl.agent_loop.worker_process`)."""

    num_workers: int = 1
    """Agent-loop workers that share the sessions, each a process of its own (verl: Ray actors, verl's default
    `rollout.agent.num_workers=8`). minirl's default is 1: on a 2-core machine the trainer, the rollout and one
    agent-loop process already use both cores (more workers only add processes that compete for them), and with
    one worker a sync run is reproducible: the rollout engine sees the same batches in the same order."""
    placement: str = "auto"
    """minirl only: where the workers run. process: OS processes forked from a fork server (started once per
    controller process) | ray: Ray actors (verl's way) | inprocess: objects in the controller, their sessions on
    its event loop (the one-process path a debugger steps through; fault injection uses it) | auto: ray when the
    trainer's workers are Ray actors (`trainer.worker_group`), else process."""
    default_agent_loop: str = "single_turn_agent"
    """Agent loop for rows that do not name one."""


@dataclass
class RolloutServerConfig:
    """`rollout.server`: how long a rollout server may stay silent (verl: `ServerConfig`,
    `verl/workers/config/rollout.py:96`, a dataclass field that verl's YAML leaves out)."""

    timeout: float = 60.0
    """Seconds a rollout server process (`rollout.nnodes=1`) may answer nothing, not even the controller's ping
    every second, before it counts as hung (stopped, deadlocked) and the run stops with one line naming it;
    control calls (status, set_global_steps, ...) must answer within it too. verl: the HTTP request timeout
    to an SGLang server (default 60)."""


@dataclass
class CheckpointEngineConfig:
    """`rollout.checkpoint_engine`: how weights travel from the actor to the rollout (verl: `CheckpointEngineConfig`,
    `verl/workers/config/rollout.py:125`; `minirl.checkpoint_engine`)."""

    backend: str = "naive"
    """naive: full tensors handed over in the controller process (`rollout.nnodes=0`) | nccl: buckets broadcast from
    actor rank 0 to the rollout servers (`rollout.nnodes=1`; gloo on CPU, NCCL on GPU). verl also has nixl, hccl,
    mooncake, kimi, delta_sharded; its sync trainer always uses naive, its separate_async the configured one."""
    update_weights_bucket_megabytes: float = 2048
    """MiB per bucket of a streaming sync: tensors are packed in order into buckets of this size, a larger tensor is
    split over several. verl's is an integer (2048); minirl also takes fractions (0.25) for the tiny model."""
    debug_skip_sync_steps: list = field(default_factory=list)
    """minirl only, debug/test only (lab 06): the weight syncs after these training steps do not happen, so the
    next step samples with stale weights (and the sync-mode version check is off). Never on by default."""
    debug_partial_sync_steps: list = field(default_factory=list)
    """minirl only, debug/test only (lab 06): the syncs after these steps send only the first half of the tensors;
    the rollout still takes the new version. Never on by default."""


@dataclass
class RolloutConfig:
    """`actor_rollout_ref.rollout`: the inference engine that samples responses (verl: `RolloutConfig`)."""

    name: str = "hf"
    """hf (transformers/torch, runs anywhere) | vllm."""
    mode: str = "async"
    """verl runs rollout replicas as async servers (only async); so does minirl with `nnodes=1`, and with `nnodes=0`
    it batches requests in-process. Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
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
    """vLLM tensor parallel size (hf: 1)."""
    nnodes: int = 0
    """0: the rollout lives with the trainer (minirl: in the controller process, the one-process debug mode; verl:
    hybrid replicas in the training workers). 1: standalone rollout servers, one process per replica on 127.0.0.1
    (`minirl.workers.rollout.llm_server`); minirl starts servers on this machine only."""
    n_gpus_per_node: int = 1
    """Devices per rollout node (copied from `trainer.n_gpus_per_node`); with `nnodes=1`, replicas =
    `n_gpus_per_node // (tensor * data * pipeline parallel)`; on CPU each "device" is one server process."""
    nice: int | None = None
    """minirl only: the scheduling niceness (0-19) of the processes that generate: the rollout server processes and
    the agent-loop workers. With more busy processes than cores (3 on a 2-core laptop in separate_async), the OS
    shares the cores evenly and the trainer, the critical path of an overlapped step, runs at 2/3 speed; niced, the
    generation side takes what the trainer leaves (it has slack: it works one batch ahead). null: 5 in
    separate_async, 0 otherwise (in sync and colocate_async generation and training take turns)."""
    data_parallel_size: int = 1
    """Data-parallel ranks inside one replica (verl: vLLM/SGLang DP); minirl's replica is one engine: 1."""
    pipeline_model_parallel_size: int = 1
    """Pipeline stages inside one replica (verl: vLLM/SGLang PP); minirl's replica is one engine: 1."""
    server: RolloutServerConfig = field(default_factory=RolloutServerConfig)
    """Rollout server processes: when a silent one counts as hung."""
    max_num_seqs: int = 256
    """Most sequences decoded together."""
    max_model_len: int | None = None
    """vLLM max context (null: prompt_length + response_length)."""
    enable_prefix_caching: bool = True
    """vLLM prefix cache (reset after every weight sync)."""
    log_prob_micro_batch_size: int | None = None
    """Deprecated in verl. Not implemented by minirl: must stay at its default (see `minirl.config.unimplemented`)."""
    log_prob_micro_batch_size_per_gpu: int | None = 64
    """Sequences per forward when the actor recomputes `old_log_probs`."""
    log_prob_use_dynamic_bsz: bool = False
    """verl: token-count micro-batching. Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
    calculate_log_probs: bool = True
    """Return per-token log-probs of the sampled tokens (`rollout_log_probs`)."""
    engine_kwargs: dict = field(default_factory=lambda: {"vllm": {}})
    """Extra keyword arguments per engine."""
    val_kwargs: SamplingKwargs = field(default_factory=SamplingKwargs)
    """Sampling for validation."""
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    """Multi-turn sessions with tools (`minirl.config.schema_multi_turn`)."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """Agent-loop workers."""
    checkpoint_engine: CheckpointEngineConfig = field(default_factory=CheckpointEngineConfig)
    """Weight transport to the rollout."""


ROLLOUT_DEFAULTS = RolloutConfig()
"""The rollout section's defaults, for rollouts handed a partial section (tests, notebooks): the same values as
the YAML's, so no rollout keeps a fallback of its own."""


@dataclass
class ActorRolloutRefConfig:
    """`actor_rollout_ref`: actor, rollout and reference in one worker group (the hybrid engine)."""

    hybrid_engine: bool = True
    """verl: actor and rollout share the GPUs (minirl: always). Not implemented by minirl: must stay at its default
    (see `minirl.config.unimplemented`)."""
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

    enable: bool | None = None
    """null: on exactly when the advantage estimator needs values (gae)."""
    strategy: str = "fsdp2"
    """Training backend, set by `model_engine`: fsdp2 (dp), torchtitan or megatron."""
    torchtitan: TorchtitanEngineConfig | None = None
    """The critic's own torchtitan mesh (present with `model_engine=torchtitan`; tensor_parallel_size 1 as in verl)."""
    megatron: MegatronEngineConfig | None = None
    """The critic's own Megatron layout (present with `model_engine=megatron`; every size 1 unless set, as in verl)."""
    rollout_n: int = 8
    """Copied from `rollout.n`. Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
    ppo_mini_batch_size: int = 32
    """Prompts per critic optimizer step."""
    ppo_micro_batch_size: int | None = None
    """Deprecated in verl. Not implemented by minirl: must stay at its default (see `minirl.config.unimplemented`)."""
    ppo_micro_batch_size_per_gpu: int | None = 64
    """Sequences per forward/backward on one rank."""
    forward_micro_batch_size_per_gpu: int | None = 64
    """Sequences per forward when computing values."""
    use_dynamic_bsz: bool = False
    """verl: token-count micro-batching. Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
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
class FilterGroupsConfig:
    """`algorithm.filter_groups`: DAPO's dynamic sampling (verl: `FilterGroupsConfig`, `verl/trainer/config/algorithm.py:43`)."""

    enable: bool = False
    """Drop finished groups whose `metric` is the same for all their responses (no reward spread, all-zero GRPO
    advantages) and generate new prompts in their place (sync mode; `minirl.trainer.ppo.replay_buffer`)."""
    metric: str | None = None
    """The `reward_extra_info` key compared: `acc` (what a score function returning a number reports), `score`, ..."""
    max_num_gen_batches: int = 0
    """verl's V1 trainer ignores it (its legacy DAPO trainer stopped after this many generation batches); minirl
    stops with an error after refilling this many train batches in one step (0: one pass over the prompts)."""
    max_inflight_gen_batches: int = 1
    """Refill at most this many train batches of prompts at a time."""


@dataclass
class AlgoConfig:
    """`algorithm`: advantage estimator and KL-in-reward (verl: `AlgoConfig`, `verl/trainer/config/algorithm.py:620`)."""

    gamma: float = 1.0
    """Discount factor (GAE)."""
    lam: float = 1.0
    """GAE lambda."""
    adv_estimator: str = "grpo"
    """gae | grpo | grpo_vectorized | gdpo | rloo | rloo_vectorized | reinforce_plus_plus | reinforce_plus_plus_baseline
    | remax | gpg | opo | grpo_passk | optimal_token_baseline | tir_optimal_token_baseline."""
    norm_adv_by_std_in_grpo: bool = True
    """GRPO divides by the group std (False: Dr. GRPO's mean-only baseline)."""
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    """DAPO's dynamic sampling."""
    use_kl_in_reward: bool = False
    """Subtract beta * KL(old || ref) from the token rewards."""
    kl_penalty: str = "kl"
    """KL estimator for the in-reward penalty."""
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    """Controller of beta."""
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    """How old_log_probs relate to the rollout's log-probs: IS weights, rejection, bypass
    (`minirl.config.schema_async`)."""
    gdpo_reward_keys: list | None = None
    """gdpo: the reward columns (keys of `compute_score`'s dict) normalised within each group one by one."""
    gdpo_reward_weights: list | None = None
    """gdpo: one weight per key for adding the normalised columns (null: all 1)."""


# -------------------------------------------------------------------------------------------- trainer


@dataclass
class TrainerConfig:
    """`trainer`: the loop around the steps (verl: `trainer:` group)."""

    balance_batch: bool = True
    """Reorder the step's sequences so each data-parallel rank's chunk carries about the same workload
    (`PPOTrainer._balance_batch`). verl V1 balances every step and never reads this key (its legacy
    `RayPPOTrainer` and the experimental trainers do); minirl balances unless it is false. On one rank it changes nothing."""
    total_epochs: int = 1
    """Passes over the training prompts."""
    total_training_steps: int | None = None
    """Stop after this many steps (null: epochs x batches per epoch)."""
    project_name: str = "minirl"
    """Used in the output directory."""
    experiment_name: str = "arithmetic_grpo"
    """Used in the output directory."""
    logger: list = field(default_factory=lambda: ["console", "file"])
    """console: a line per step; file: metrics.jsonl in default_local_dir."""
    log_val_generations: int = 0
    """verl: log this many validation generations to the trackers. Not implemented by minirl: must stay at its
    default (see `minirl.config.unimplemented`)."""
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
    resume_from_path: str | None = None
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
    max_actor_ckpt_to_keep: int | None = None
    """Keep only the newest N checkpoints."""
    max_critic_ckpt_to_keep: int | None = None
    """verl: keep the newest N critic checkpoints (minirl: `max_actor_ckpt_to_keep` prunes whole steps). Not
    implemented by minirl: must stay at its default (see `minirl.config.unimplemented`)."""
    device: str = "cpu"
    """cpu | cuda."""
    seed: int = 42
    """Global seed."""
    nonfinite: str = "stop"
    """minirl only: what a NaN/inf in a stage's new float fields, a loss or a grad norm does. stop: end the run with
    one line naming the step, stage and field (exit 2); skip: record and count it and go on (the engine skips every
    optimizer step whose grad norm is not finite, as verl's does). See `minirl.trainer.ppo.finite_checks`."""
    use_v1: bool = True
    """verl's V1 trainer (PPOTrainer); minirl has only that one. Not implemented by minirl: must stay at its default
    (see `minirl.config.unimplemented`)."""
    v1: TrainerV1Config = field(default_factory=TrainerV1Config)
    """Which V1 trainer (sync, colocate_async, separate_async) and the async trainers' settings
    (`minirl.config.schema_async`)."""


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

    num_cpus: int | None = None
    """CPUs Ray may schedule (null: what the placement groups need)."""
    address: str | None = None
    """null: a private local Ray; `auto` or host:port joins a cluster started with `ray start`."""


@dataclass
class RayKwargsConfig:
    """`ray_kwargs`: how the controller starts Ray."""

    ray_init: RayInitConfig = field(default_factory=RayInitConfig)
    """ray.init arguments."""


@dataclass
class MinirlConfig:
    """The whole trainer config, group by group, as in verl's `ppo_trainer.yaml`."""

    model_engine: str = "dp"
    """The Hydra group choice that picks every role's engine files: dp (FSDP2) | torchtitan (TP x FSDP2) | megatron
    (TP x PP x DP)."""
    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgoConfig = field(default_factory=AlgoConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)
    distillation: DistillationConfig = field(default_factory=DistillationConfig)
    """On-policy distillation (`minirl.config.schema_distillation`)."""
