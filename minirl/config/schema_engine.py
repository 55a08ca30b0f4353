"""The engine-side config groups every role shares: `*.model`, `*.optim`, `*.fsdp_config`, `*.checkpoint`.

The actor, the reference policy and the critic each hold one of these groups, and `minirl.config.schema`
assembles them. verl keeps the same groups in their own files too: `HFModelConfig`
(`verl/workers/config/model.py:71`), `FSDPOptimizerConfig` (`verl/workers/config/optimizer.py:88`),
`FSDPEngineConfig` (`verl/workers/config/engine.py:242`) and `CheckpointConfig`
(`verl/trainer/config/config.py:24`). Keys that minirl accepts but does not implement (offloading,
`fsdp_size`, checkpoint contents, ...) are listed in `minirl.config.unimplemented`.

The engines read typed sections, as verl's do: `EngineModelConfig`, `EngineConfig` and `OptimConfig`
(converted by `minirl.utils.config.omega_conf_to_dataclass`), so their defaults are this file's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelConfig:
    """`*.model`: which weights to load (verl: `HFModelConfig`, `verl/workers/config/model.py`)."""

    path: str = "minirl://tiny-qwen2-sft"
    """`minirl://tiny-qwen2-sft` (the default: the embedded 0.4M-parameter Qwen2 after an SFT warm start on the
    arithmetic task, built and cached on first use, `minirl.trainer.warm_start`), `minirl://tiny-qwen2` (the same
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
    """verl: pipeline stages (`torch.distributed.pipelining`). minirl: 1 only here (`model_engine=megatron` has PP)."""
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
class MegatronEngineConfig:
    """`*.megatron` (only with `model_engine=megatron`): the tp x pp x dp layout of the Megatron-layout engine.

    verl: `McoreEngineConfig` (`verl/workers/config/engine.py:149`), a subset of its keys. The data-parallel
    size is the rest: `trainer.nnodes * trainer.n_gpus_per_node / (tensor_model_parallel_size *
    pipeline_model_parallel_size)`, which must be whole.
    """

    param_offload: bool = False
    """verl: keep the parameters in CPU memory between uses. minirl: False only."""
    grad_offload: bool = False
    """verl: keep the gradients in CPU memory between uses. minirl: False only."""
    optimizer_offload: bool = False
    """verl: keep the optimizer state in CPU memory between uses. minirl: False only."""
    tensor_model_parallel_size: int = 1
    """Ranks that split each decoder layer: column-wise q/k/v/gate/up, row-wise o/down (DTensor). It must divide
    the model's attention heads, KV heads and MLP width."""
    expert_model_parallel_size: int = 1
    """verl: ranks that split a mixture-of-experts layer's experts. minirl: 1 only."""
    pipeline_model_parallel_size: int = 1
    """Pipeline stages: contiguous blocks of decoder layers (at most one stage per layer); each rank's micro-batches
    run through them in the 1F1B order."""
    virtual_pipeline_model_parallel_size: int | None = None
    """verl: model chunks per stage for the interleaved schedule. minirl: null only."""
    context_parallel_size: int = 1
    """verl: ranks that split each sequence along its tokens. minirl: 1 only."""
    sequence_parallel: bool = False
    """verl (default True): split the norms' activations over the TP ranks. minirl: False only."""
    use_distributed_optimizer: bool = False
    """verl (default True): shard the optimizer state over the data-parallel ranks (ZeRO-1). minirl: False only
    (each dp rank keeps the whole AdamW state of its TP/PP shard)."""
    use_dist_checkpointing: bool = False
    """verl: megatron's own checkpoint format. minirl: False only (torch.distributed.checkpoint, the FSDP engine's
    format, so checkpoints move between the engines)."""
    seed: int = 42
    """Seed of model initialisation."""
    dtype: str = "float32"
    """Compute dtype (verl: bfloat16)."""


@dataclass
class CheckpointContentsConfig:
    """`*.checkpoint`: what a checkpoint holds (verl: `CheckpointConfig`)."""

    save_contents: list = field(default_factory=lambda: ["model", "optimizer", "extra"])
    """verl: the parts a checkpoint holds (model, optimizer, extra, hf_model); minirl saves the first three. Not
    implemented by minirl: must stay at its default (see `minirl.config.unimplemented`)."""
    load_contents: list = field(default_factory=lambda: ["model", "optimizer", "extra"])
    """verl: the parts restored on resume; minirl restores all three. Not implemented by minirl: must stay at its
    default (see `minirl.config.unimplemented`)."""


# ------------------------------------------------------------------ what an engine is built from


@dataclass
class EngineModelConfig:
    """An engine's `model_config`: the weights it loads (verl: `HFModelConfig`, `verl/workers/config/model.py:71`).

    `minirl.workers.engine_workers.build_engine` fills it from `*.model` and `*.fsdp_config.model_dtype`;
    tests and notebooks may hand an engine a built module instead of a path.
    """

    path: str | None = None
    """A local Hugging Face model directory (resolved: no `minirl://` here)."""
    module: Any = None
    """An already-built `nn.Module`, which the engine takes over and trains in place (instead of `path`)."""
    dtype: str = "fp32"
    """dtype the parameters are stored in (`fsdp_config.model_dtype`)."""
    enable_gradient_checkpointing: bool = False
    """Recompute activations in backward (`model.enable_gradient_checkpointing`)."""
    trust_remote_code: bool = False
    """Passed to transformers' `from_pretrained` (`model.trust_remote_code`)."""


@dataclass
class EngineConfig:
    """An engine's `engine_config`: how it shards, casts and seeds (verl: `FSDPEngineConfig`,
    `verl/workers/config/engine.py:242`, `TorchtitanEngineConfig`, `verl/workers/config/engine.py:461`, and
    `McoreEngineConfig`, `verl/workers/config/engine.py:149`).

    `build_engine` fills it from `*.fsdp_config` (`dtype` -> `param_dtype`, `seed`, `reshard_after_forward`),
    the role (`forward_only`, `use_prefix_grouper`), the device, and with `model_engine=torchtitan` the
    section's `torchtitan` keys, with `model_engine=megatron` the layout keys of its `megatron` section.
    Defaults equal those of `FSDPConfig`, `TorchtitanEngineConfig` and `MegatronEngineConfig`.
    """

    strategy: str = "fsdp2"
    """fsdp | fsdp2 (`FSDPEngine`), torchtitan (`TorchTitanEngine`) or megatron (`MegatronEngine`)."""
    forward_only: bool = False
    """A reference model: no optimizer, `infer_batch` only."""
    param_dtype: str = "float32"
    """Compute dtype of forward/backward (`fsdp_config.dtype`; verl: bf16 mixed precision on GPU)."""
    seed: int = 42
    """`torch.manual_seed` before the module is built (fresh heads, e.g. the critic's, start the same)."""
    reshard_after_forward: Any = True
    """FSDP2: free the gathered weights after forward (torchtitan: default | always | never)."""
    device: str | None = None
    """cpu | cuda; null: cuda when a GPU is visible, else cpu."""
    use_prefix_grouper: bool = False
    """Run each distinct prompt of a micro-batch once (`actor.use_prefix_grouper`, `minirl.workers.engine.forward_layout`)."""
    tensor_parallel_size: int = 1
    """torchtitan: ranks that split each decoder layer."""
    data_parallel_shard_size: int = -1
    """torchtitan: FSDP2 shard ranks (-1: world / tensor_parallel_size)."""
    data_parallel_replicate_size: int = 1
    """torchtitan: 1 only."""
    pipeline_parallel_size: int = 1
    """torchtitan: 1 only."""
    context_parallel_size: int = 1
    """torchtitan and megatron: 1 only."""
    expert_parallel_size: int = 1
    """torchtitan: 1 only."""
    tensor_model_parallel_size: int = 1
    """megatron: ranks that split each decoder layer."""
    pipeline_model_parallel_size: int = 1
    """megatron: pipeline stages (contiguous blocks of decoder layers, 1F1B schedule)."""
    expert_model_parallel_size: int = 1
    """megatron: 1 only."""
    virtual_pipeline_model_parallel_size: int | None = None
    """megatron: null only (no interleaved schedule)."""
