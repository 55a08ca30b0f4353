"""The `distillation:` group: on-policy distillation's switch, teachers and loss.

verl: `DistillationConfig`, `DistillationTeacherModelConfig`, `DistillationLossConfig`
(`verl/workers/config/distillation.py:222`, `:128`, `:32`) with the YAML
`verl/trainer/config/distillation/distillation.yaml`; here `minirl/config/distillation/distillation.yaml`,
composed into the trainer config by the defaults list as in verl (`distillation@distillation: distillation`).
The checks verl makes in those dataclasses' `__post_init__` and in `PPOTrainer._setup` are in
`minirl.config.values` (`_distillation_problems`, run by `value_problems`), each as one line with a fix.

What minirl changes: the pool defaults (`n_gpus_per_node: 1`, `nnodes: 1`; verl: 8 and 0, and 0 fails
once enabled) and the teacher's `inference.name: hf` (verl: the student's rollout name; minirl's
teacher scores prompts with the hf backend only), `inference.tensor_model_parallel_size: 1` (verl: 2).
A null `model_path` means the embedded teacher `minirl://tiny-qwen2-teacher` (verl requires a path).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["DistillationConfig", "DistillationLossConfig", "DistillationTeacherModelConfig", "TeacherInferenceConfig"]


@dataclass
class DistillationLossConfig:
    """`distillation.distillation_loss`: which divergence, and how it joins the policy loss (verl: `DistillationLossConfig`)."""

    loss_mode: str = "k3"
    """k3/low_var_kl, k1/kl, k2/mse, abs (single-sample estimators of KL(student || teacher) on the sampled token) or
    forward_kl_topk (KL(teacher || student) over the teacher's top-k tokens)."""
    topk: int | None = 32
    """k of the top-k losses: the teacher returns its k most likely tokens at every position."""
    use_task_rewards: bool = True
    """True: the PPO/GRPO loss on the task reward plus `distillation_loss_coef` x the distillation loss; False: the
    distillation loss alone (the PPO term, KL loss and entropy bonus included, is dropped)."""
    distillation_loss_coef: float = 1.0
    """Weight of the distillation loss when `use_task_rewards`."""
    loss_max_clamp: float | None = None
    """Clamp each token's divergence to [-c, c] (null: no clamp)."""
    log_prob_min_clamp: float | None = None
    """forward_kl_topk: clamp both sides' log-probs from below before the KL (null: no clamp)."""
    use_policy_gradient: bool = False
    """True: -divergence is a per-token advantage in a PPO loss ("PG OPD"; use k1); False: the divergence is
    back-propagated as a supervised loss ("GKD OPD"; use k3 or forward_kl_topk)."""
    policy_loss_mode: str = "vanilla"
    """The PPO loss of the policy-gradient path (verl implements vanilla only)."""
    clip_ratio: float = 0.2
    """Its clip range (lower and upper default to it)."""
    clip_ratio_low: float = 0.2
    """Its lower clip."""
    clip_ratio_high: float = 0.2
    """Its upper clip."""


@dataclass
class TeacherInferenceConfig:
    """`teacher_models.<name>.inference`: the teacher server's rollout settings (verl: a `RolloutConfig`).

    They override the student's `actor_rollout_ref.rollout` keys for the teacher's server; the server's
    prompt length becomes prompt + response and its response length 1. Keys the hf backend does not read
    must stay at their defaults (see `minirl.config.unimplemented`)."""

    name: str = "hf"
    """The teacher's backend: hf (verl: the student's rollout name, vllm or sglang)."""
    dtype: str = "${oc.select:actor_rollout_ref.rollout.dtype}"
    """Weights' dtype off CPU (CPU always float32); default: the student rollout's."""
    gpu_memory_utilization: float = 0.5
    """vLLM's GPU memory share (read by the vllm backend only)."""
    enforce_eager: bool = True
    """vLLM: no CUDA graphs."""
    cudagraph_capture_sizes: Any = None
    """vLLM's CUDA-graph batch sizes. Not implemented by minirl: must stay at its default."""
    free_cache_engine: bool = True
    """vLLM: free the KV cache between uses."""
    data_parallel_size: int = 1
    """Data-parallel ranks per replica (1 in minirl)."""
    expert_parallel_size: int = 1
    """Expert-parallel ranks per replica. Not implemented by minirl: must stay at its default."""
    tensor_model_parallel_size: int = 1
    """Tensor-parallel ranks per replica (hf: 1)."""
    max_num_batched_tokens: int = 8192
    """vLLM's per-step token budget. Not implemented by minirl: must stay at its default."""
    max_model_len: int | None = None
    """Context limit (null: the model's); must hold the student's prompt + response + 1."""
    max_num_seqs: int = 1024
    """Sequences per engine batch."""
    load_format: str = "auto"
    """vLLM's weight loader. Not implemented by minirl: must stay at its default."""
    engine_kwargs: dict = field(default_factory=dict)
    """Backend-specific keyword arguments."""
    limit_images: Any = None
    """Images per prompt (multimodal). Not implemented by minirl: must stay at its default."""
    enable_chunked_prefill: bool = True
    """vLLM's chunked prefill. Not implemented by minirl: must stay at its default."""
    enable_prefix_caching: bool = True
    """Share repeated prompts' prefill."""
    disable_log_stats: bool = True
    """vLLM's stats logging. Not implemented by minirl: must stay at its default."""
    skip_tokenizer_init: bool = True
    """vLLM: token ids in and out only. Not implemented by minirl: must stay at its default."""
    prompt_length: int = "${oc.select:actor_rollout_ref.rollout.prompt_length}"  # type: ignore[assignment]
    """The student's prompt length (default: `actor_rollout_ref.rollout.prompt_length`)."""
    response_length: int = "${oc.select:actor_rollout_ref.rollout.response_length}"  # type: ignore[assignment]
    """The student's response length (default: `actor_rollout_ref.rollout.response_length`)."""
    temperature: float = "${oc.select:actor_rollout_ref.rollout.temperature}"  # type: ignore[assignment]
    """Ignored with a warning: scoring tokens is one forward pass (verl forces 1.0 too)."""


@dataclass
class DistillationTeacherModelConfig:
    """`distillation.teacher_models.<name>`: one teacher (verl: `DistillationTeacherModelConfig`)."""

    key: str | None = None
    """Routing key: samples whose `teacher_key` column equals it go to this teacher (single teacher: `default`)."""
    model_path: str | None = None
    """The teacher model: a directory, hub id or `minirl://` preset (null: the embedded `minirl://tiny-qwen2-teacher`).
    It must share the student's tokenizer."""
    num_replicas: int | None = 0
    """Server replicas (a single teacher: 0 = the whole pool)."""
    inference: TeacherInferenceConfig = field(default_factory=TeacherInferenceConfig)
    """The teacher server's rollout settings."""


@dataclass
class DistillationConfig:
    """`distillation`: on-policy distillation (verl: `DistillationConfig`, `verl/workers/config/distillation.py:222`)."""

    enabled: bool = False
    """Start the teacher servers, score every training session with them, and train the actor with
    `distillation_ppo_loss` (`minirl.trainer.distillation`)."""
    distillation_loss: DistillationLossConfig = field(default_factory=DistillationLossConfig)
    """The loss."""
    n_gpus_per_node: int = 1
    """Devices per node of the teacher pool (on CPU: server processes). verl's default is 8."""
    nnodes: int = 1
    """Nodes of the teacher pool (minirl: 1, this machine). verl's default is 0."""
    teacher_models: dict[str, DistillationTeacherModelConfig] = field(
        default_factory=lambda: {"teacher_model": DistillationTeacherModelConfig()})
    """The teachers by entry name; one entry (`teacher_model`) is the single teacher. New entries take a leading '+'."""
    teacher_key: str = "data_source"
    """The row column whose value picks the teacher (multi-teacher only)."""
