"""The SFT warm start's config: the schema of `minirl/config/sft_trainer.yaml` and its checks.

verl's SFT trainer (`SFTTrainer`, `verl/trainer/sft_trainer.py:50`) reads
`verl/trainer/config/sft_trainer_engine.yaml`, a larger file (parquet data with a `messages`
column, dynamic batch sizes, checkpoints, loggers). minirl's SFT (`minirl.trainer.sft_trainer`) only
teaches an embedded task's answer format, so its file has the few keys that run needs, with verl's
names where verl has the key. `minirl.config.load_sft` composes it, merges it into `SFTConfig` (an
unknown key or a wrong type fails there) and calls `validate_sft`, which reports every problem at
once, naming `minirl/config/sft_trainer.yaml`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from minirl.config.registered import registered_names
from minirl.config.unimplemented import unimplemented_problems
from minirl.config.validate import raise_problems
from minirl.config.values import Problems, device_problems, optim_problems


@dataclass
class SFTBuiltinConfig:
    """`data.builtin`: the embedded task the SFT rows come from (minirl only)."""

    n_train: int = 7000
    """Training problems; must hold at least one batch."""
    n_val: int = 500
    """Not read by SFT (see `minirl.config.unimplemented.SFT_UNIMPLEMENTED`)."""
    seed: int = 0
    """Seed of the task generator."""
    digits: int = 2
    """Digits per operand in the arithmetic task (multiply_tool: of the first operand; the second has 2)."""
    tool_fraction: float = 0.5
    """multiply_tool only: share of the rows that show the calculator call (the rest answer directly)."""


@dataclass
class SFTDataConfig:
    """`data`: which task, how many rows per step (verl: `data:` of `sft_trainer_engine.yaml`)."""

    train_files: str = "minirl://arithmetic/train"
    """`minirl://<task>/train`: the SFT rows are built from an embedded task (arithmetic, countdown)."""
    val_files: str = "minirl://arithmetic/val"
    """Not read: validation uses `val_max_samples` held-out problems of the same task."""
    builtin: SFTBuiltinConfig = field(default_factory=SFTBuiltinConfig)
    """The embedded task's sizes."""
    train_batch_size: int = 64
    """Rows per optimizer step."""
    micro_batch_size_per_gpu: int = 64
    """Rows per forward/backward; must divide `train_batch_size`."""
    max_prompt_length: int = 40
    """Prompts are left-padded to this many tokens (a longer one is an error)."""
    max_response_length: int = 12
    """Answer + EOS are right-padded to this many tokens (a longer one is an error)."""
    val_max_samples: int = 200
    """Held-out problems scored greedily at each validation."""


@dataclass
class SFTModelConfig:
    """`model`: the weights to fine-tune."""

    path: str = "minirl://tiny-qwen2"
    """`minirl://tiny-qwen2`, a local directory or a hub id."""


@dataclass
class SFTOptimConfig:
    """`optim`: AdamW and its schedule (verl: `FSDPOptimizerConfig`, `verl/workers/config/optimizer.py:88`)."""

    lr: float = 1e-3
    """Peak learning rate."""
    betas: list = field(default_factory=lambda: [0.9, 0.98])
    """AdamW betas."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    clip_grad: float = 1.0
    """Global gradient-norm clip."""
    lr_scheduler_type: str = "constant"
    """constant | cosine (both after warm-up)."""
    lr_warmup_steps: int = -1
    """Warm-up steps; -1: use the ratio."""
    lr_warmup_steps_ratio: float = 0.0
    """Warm-up as a fraction of the run."""
    total_training_steps: int = -1
    """Filled in from `trainer.total_training_steps` (not to be set)."""


@dataclass
class SFTTrainerConfig:
    """`trainer`: the loop (verl: `trainer:` of `sft_trainer_engine.yaml`)."""

    total_training_steps: int = 2000
    """Most optimizer steps."""
    test_freq: int = 25
    """Validate every this many steps (and at the last)."""
    stop_at_val_score: float | None = 0.2
    """Stop at the first validation accuracy >= this (null: never stop early)."""
    default_local_dir: str = "checkpoints/minirl/sft"
    """Where `sft_history.jsonl` and the saved `hf_model/` go."""
    seed: int = 0
    """Seed of the model init, the batch order and dropout."""
    device: str = "cpu"
    """cpu | cuda."""


@dataclass
class SFTConfig:
    """The whole of `minirl/config/sft_trainer.yaml`."""

    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    model: SFTModelConfig = field(default_factory=SFTModelConfig)
    optim: SFTOptimConfig = field(default_factory=SFTOptimConfig)
    trainer: SFTTrainerConfig = field(default_factory=SFTTrainerConfig)


def _task_problems(p: Problems) -> None:
    files = str(p.cfg.data.train_files)
    task = files.split("://", 1)[1].split("/")[0] if files.startswith("minirl://") else None
    if task not in registered_names("task"):
        p.append(f"data.train_files={files!r}: minirl's SFT builds its rows from an embedded task (verl's SFT reads "
                 "parquet files with a messages column). Fix: data.train_files=minirl://arithmetic/train, "
                 "minirl://countdown/train or minirl://multiply_tool/train.")


def sft_problems(cfg) -> list[str]:
    """Every problem of an SFT config, one line each (the SFT counterpart of `minirl.config.validate`)."""
    p = Problems(cfg)
    p.extend(unimplemented_problems(cfg, "sft_trainer"))
    _task_problems(p)
    d = "data"
    for key, fix in [(f"{d}.train_batch_size", 64), (f"{d}.micro_batch_size_per_gpu", 8), (f"{d}.max_prompt_length", 40),
                     (f"{d}.max_response_length", 12), (f"{d}.val_max_samples", 200), (f"{d}.builtin.digits", 2),
                     ("trainer.total_training_steps", 2000),
                     ("trainer.test_freq", 25)]:
        p.check(key, lambda v: int(v) == v and v >= 1, "must be an integer >= 1", f"{key}={fix}")
    tbs, micro = int(cfg.data.train_batch_size), int(cfg.data.micro_batch_size_per_gpu)
    if tbs >= 1 and micro >= 1 and tbs % micro:
        p.append(f"data.micro_batch_size_per_gpu={micro} does not divide data.train_batch_size={tbs}: the last "
                 f"micro-batch would be ragged. Fix: a divisor of {tbs}, e.g. data.micro_batch_size_per_gpu={tbs}.")
    p.check(f"{d}.builtin.n_train", lambda v: v >= tbs, f"must hold at least one batch of data.train_batch_size={tbs} rows",
            f"{d}.builtin.n_train=7000")
    p.check(f"{d}.builtin.tool_fraction", lambda v: 0 <= v <= 1, "must be a share in [0, 1]",
            f"{d}.builtin.tool_fraction=0.5")
    p.check("trainer.stop_at_val_score", lambda v: 0 <= v <= 1, "must be an accuracy in [0, 1]",
            "trainer.stop_at_val_score=null (never stop early) or e.g. 0.2")
    optim_problems(p, "optim", lr="1e-3 (minirl's SFT default)")
    device_problems(p, "trainer.device")
    return list(p)


def validate_sft(cfg) -> None:
    """Raise one `ConfigError` naming `minirl/config/sft_trainer.yaml` with every problem of `cfg`."""
    raise_problems(sft_problems(cfg), "minirl/config/sft_trainer.yaml")


__all__ = ["SFTConfig", "sft_problems", "validate_sft"]
