"""Small helpers for the training engine: config access, dtypes, LR schedules, micro-batching, log-probs.

Mirrors pieces of three verl files:

- the LR schedules of `verl/utils/torch_functional.py`: `get_constant_schedule_with_warmup`
  (`verl/utils/torch_functional.py:768`) and `get_cosine_schedule_with_warmup`
  (`verl/utils/torch_functional.py:712`);
- `logprobs_from_logits` (`verl/utils/torch_functional.py:73`) and `entropy_from_logits`
  (`verl/utils/torch_functional.py:231`), the two formulas every LM-head engine applies to logits;
- `prepare_micro_batches` (`verl/workers/engine/utils.py:92`), which cuts a rank's mini-batch into
  the micro-batches that are run one after another with gradient accumulation.

Simplifications: micro-batches have a fixed number of sequences (verl can also pack them by a token
budget, `use_dynamic_bsz`, and then restores the original order afterwards); log-probs are plain
`log_softmax` + `gather` (verl can use flash-attn's fused cross-entropy or a chunked entropy).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR

__all__ = [
    "aggregate_metrics",
    "cfg_get",
    "entropy_from_logits",
    "get_constant_schedule_with_warmup",
    "get_cosine_schedule_with_warmup",
    "get_device_name",
    "logprobs_from_logits",
    "prepare_micro_batches",
    "to_torch_dtype",
]


# ----------------------------------------------------------------------------- config and devices


def cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    """Read `key` from a config that may be an OmegaConf DictConfig, a plain dict, a dataclass or None.

    Missing keys (and a missing config) give `default`, so optional settings need no schema.
    """
    if cfg is None:
        return default
    if isinstance(cfg, Mapping):  # dict and OmegaConf DictConfig
        return cfg.get(key, default)
    return getattr(cfg, key, default)


def get_device_name() -> str:
    """`"cuda"` when a GPU is visible, else `"cpu"` (verl's `get_device_name`, `verl/utils/device.py:95`)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


_DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
}


def to_torch_dtype(dtype: str | torch.dtype | None, default: torch.dtype | None = None) -> torch.dtype | None:
    """Turn `"bf16"`, `"float32"`, `torch.float16`... into a `torch.dtype` (verl: `PrecisionType`)."""
    if dtype is None:
        return default
    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).lower().removeprefix("torch.")
    if name not in _DTYPES:
        raise ValueError(f"Unknown dtype {dtype!r}: use one of {sorted(_DTYPES)} (or a torch.dtype).")
    return _DTYPES[name]


# ----------------------------------------------------------------------------- learning-rate schedules


def get_constant_schedule_with_warmup(optimizer: torch.optim.Optimizer, num_warmup_steps: int) -> LambdaLR:
    r"""Linear warm-up from 0 to the optimizer's `lr` over `num_warmup_steps`, then constant.

    $$\text{lr}(s) = \text{lr} \cdot \min\left(1, \frac{s}{\max(1, W)}\right)$$

    where $s$ counts `lr_scheduler.step()` calls (0 before the first) and $W$ = `num_warmup_steps`.
    """

    def lr_lambda(step: int) -> float:
        if step < num_warmup_steps:
            return step / max(1.0, num_warmup_steps)
        return 1.0

    return LambdaLR(optimizer, lr_lambda)


def get_cosine_schedule_with_warmup(
    optimizer: torch.optim.Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    min_lr_ratio: float | None = 0.0,
    num_cycles: float = 0.5,
) -> LambdaLR:
    r"""Linear warm-up, then a cosine from the optimizer's `lr` down to `min_lr_ratio * lr`.

    With progress $p = (s - W) / \max(1, T - W)$ after the warm-up ($T$ = `num_training_steps`,
    $c$ = `num_cycles`, $m$ = `min_lr_ratio`):

    $$\text{lr}(s) = \text{lr} \cdot \max\left(m,\; \frac{1+m}{2} + \frac{1-m}{2}\cos(2\pi c\, p)\right)$$

    The default $c = 0.5$ is half a cosine wave: `lr` at the end of the warm-up, `m * lr` at step $T$.
    """
    min_lr_ratio = 0.0 if min_lr_ratio is None else float(min_lr_ratio)
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}.")
    if num_training_steps <= 0:
        raise ValueError(
            f"The cosine LR schedule needs optim.total_training_steps > 0, got {num_training_steps}. "
            "The trainer normally fills it in from the dataset size and the number of epochs."
        )
    amplitude = (1.0 - min_lr_ratio) * 0.5
    midpoint = (1.0 + min_lr_ratio) * 0.5

    def lr_lambda(step: int) -> float:
        if step < num_warmup_steps:
            return step / max(1, num_warmup_steps)
        progress = (step - num_warmup_steps) / max(1, num_training_steps - num_warmup_steps)
        return max(min_lr_ratio, midpoint + amplitude * math.cos(2.0 * math.pi * num_cycles * progress))

    return LambdaLR(optimizer, lr_lambda)


# ----------------------------------------------------------------------------- micro-batches


def prepare_micro_batches(data, micro_batch_size: int) -> list:
    """Cut a rank's mini-batch (a `DataProto`) into micro-batches of `micro_batch_size` sequences.

    The micro-batches are run one after the other; their gradients add up in `param.grad` before
    the single optimizer step (gradient accumulation).
    """
    if micro_batch_size is None:
        raise ValueError(
            "data.meta_info['micro_batch_size'] is missing: set it to the number of sequences per "
            "forward pass on one rank (verl: ppo_micro_batch_size_per_gpu)."
        )
    micro_batch_size = int(micro_batch_size)
    batch_size = len(data)
    if micro_batch_size <= 0 or batch_size % micro_batch_size != 0:
        raise ValueError(
            f"The batch on this rank has {batch_size} sequences, which micro_batch_size={micro_batch_size} "
            "does not divide: choose a micro_batch_size that divides the per-rank batch size "
            "(mini-batch size / data-parallel size)."
        )
    return data.split(micro_batch_size)


# ----------------------------------------------------------------------------- log-probs and entropy


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    r"""$\log \pi(y_t)$ = `log_softmax(logits)[..., labels]`: logits `[..., V]`, labels `[...]` -> `[...]`."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return log_probs.gather(dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    r"""Softmax entropy $H = \log\sum_v e^{z_v} - \sum_v p_v z_v$: logits `[..., V]` -> `[...]`."""
    logits = logits.float()
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


# ----------------------------------------------------------------------------- metrics


def aggregate_metrics(metrics_list: list[dict]) -> dict[str, float]:
    """Average each metric over the micro-batches that reported it (tensors become Python floats).

    verl keeps the per-micro-batch lists (`append_to_dict`, `verl/utils/py_functional.py:187`) and
    reduces them later in the worker; minirl reduces here so `train_batch` returns plain numbers.
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for metrics in metrics_list:
        for key, value in (metrics or {}).items():
            if torch.is_tensor(value):
                value = value.detach().float().mean().item()
            if isinstance(value, (list, tuple)):
                if len(value) == 0:
                    continue
                value = sum(float(v) for v in value) / len(value)
            sums[key] = sums.get(key, 0.0) + float(value)
            counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}
