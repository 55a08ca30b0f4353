"""The engine-side config groups every role shares: `*.model`, `*.optim`, `*.fsdp_config`, `*.checkpoint`.

The actor, the reference policy and the critic each hold one of these groups, and `minirl.config.schema`
assembles them. verl keeps the same groups in their own files too: `HFModelConfig`
(`verl/workers/config/model.py:71`), `FSDPOptimizerConfig` (`verl/workers/config/optimizer.py:88`),
`FSDPEngineConfig` (`verl/workers/config/engine.py:242`) and `CheckpointConfig`
(`verl/trainer/config/config.py:24`). Keys that minirl accepts but does not implement (offloading,
`fsdp_size`, checkpoint contents, ...) are listed in `minirl.config.unimplemented`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelConfig:
    """`*.model`: which weights to load (verl: `HFModelConfig`, `verl/workers/config/model.py`)."""

    path: str = "minirl://tiny-qwen2-sft"
    """`minirl://tiny-qwen2-sft` (the default: the embedded 0.4M-parameter Qwen2 after an SFT warm start on the
    arithmetic task, built and cached on first use, `minirl.models.warm_start`), `minirl://tiny-qwen2` (the same
    model at random init: it scores 0 on the task), a local directory, or a hub id."""
    tokenizer_path: str | None = None
    """Tokenizer location if not `path` (the actor's; the critic uses the actor's tokenizer and must not set its
    own)."""
    override_config: dict = field(default_factory=dict)
    """verl: keys merged into the model's HF config before it is built. Not implemented by minirl: must stay at its
    default (see `minirl.config.unimplemented`)."""
    enable_gradient_checkpointing: bool = False
    """verl: recompute activations in backward to save memory. Not implemented by minirl: must stay at its default
    (see `minirl.config.unimplemented`)."""
    use_remove_padding: bool = False
    """verl: pack sequences without padding (flash-attn varlen). Not implemented by minirl: must stay at its default
    (see `minirl.config.unimplemented`)."""
    trust_remote_code: bool = False
    """verl: passed to transformers' `from_pretrained`. Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""


@dataclass
class OptimConfig:
    """`*.optim`: optimizer and LR schedule (verl: `FSDPOptimizerConfig`, `verl/workers/config/optimizer.py`)."""

    optimizer: str = "AdamW"
    """Optimizer class (minirl: AdamW only). Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
    lr: float = 1e-4
    """Peak learning rate."""
    lr_warmup_steps_ratio: float = 0.0
    """Warm-up length as a fraction of total training steps (used when `lr_warmup_steps` < 0)."""
    lr_warmup_steps: int = -1
    """Warm-up length in steps; -1 means use the ratio."""
    total_training_steps: int = -1
    """Filled in by the trainer from the run's length (as verl does). Not implemented by minirl: must stay at its
    default (see `minirl.config.unimplemented`)."""
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
    override_optimizer_config: dict | None = None
    """Extra AdamW keyword arguments, e.g. `{eps: 1.0e-6}` (verl: same key)."""


@dataclass
class FSDPConfig:
    """`*.fsdp_config`: how the engine shards and casts the model (verl: `FSDPEngineConfig`)."""

    param_offload: bool = False
    """verl: keep parameters on CPU between uses. Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
    optimizer_offload: bool = False
    """verl: keep optimizer state on CPU between uses. Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
    reshard_after_forward: bool = True
    """FSDP2: free the gathered parameters after forward (ZeRO-3) or keep them (ZeRO-2)."""
    fsdp_size: int = -1
    """verl: ranks per shard group (-1: all). Not implemented by minirl: must stay at its default (see
    `minirl.config.unimplemented`)."""
    model_dtype: str = "fp32"
    """dtype the parameters are stored in."""
    dtype: str = "float32"
    """Compute dtype of forward/backward (mixed precision: bfloat16 on GPU)."""
    seed: int = 42
    """Seed for model initialisation and dropout."""


@dataclass
class TorchtitanEngineConfig:
    """`*.torchtitan` (only with `model_engine=torchtitan`): the 2-D device mesh `(dp_shard, tp)` of the engine.

    verl: `TorchtitanEngineConfig` (`verl/workers/config/engine.py:461`), a subset of its keys. The ranks
    (`trainer.nnodes * trainer.n_gpus_per_node`) must equal `data_parallel_shard_size * tensor_parallel_size`.
    """

    data_parallel_shard_size: int = -1
    """FSDP2 shard ranks; -1: `world / tensor_parallel_size` (torchtitan's default; verl's YAML says 1)."""
    data_parallel_replicate_size: int = 1
    """verl: HSDP replicas over which FSDP shards are copied. minirl: 1 only."""
    tensor_parallel_size: int = 1
    """Ranks that split each decoder layer: column-wise q/k/v/gate/up, row-wise o/down (DTensor). It must divide
    the model's attention heads, KV heads and MLP width."""
    pipeline_parallel_size: int = 1
    """verl: pipeline stages (`torch.distributed.pipelining`). minirl: 1 only (chapter 07 puts PP on paper)."""
    context_parallel_size: int = 1
    """verl: ranks that split each sequence. minirl: 1 only."""
    expert_parallel_size: int = 1
    """verl: ranks that split a mixture-of-experts layer's experts. minirl: 1 only."""
    reshard_after_forward: str = "default"
    """FSDP2: free the gathered weights after forward: default (= always here) | always | never."""
    dtype: str = "float32"
    """Compute dtype (verl: bfloat16)."""
    seed: int = 42
    """Seed of model initialisation."""


@dataclass
class CheckpointContentsConfig:
    """`*.checkpoint`: what a checkpoint holds (verl: `CheckpointConfig`)."""

    save_contents: list = field(default_factory=lambda: ["model", "optimizer", "extra"])
    """verl: the parts a checkpoint holds (model, optimizer, extra, hf_model); minirl saves the first three. Not
    implemented by minirl: must stay at its default (see `minirl.config.unimplemented`)."""
    load_contents: list = field(default_factory=lambda: ["model", "optimizer", "extra"])
    """verl: the parts restored on resume; minirl restores all three. Not implemented by minirl: must stay at its
    default (see `minirl.config.unimplemented`)."""
