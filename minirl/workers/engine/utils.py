"""Small helpers for the training engine: devices, dtypes, LR schedules, micro-batching, shards, RNG, metrics.

Mirrors pieces of two verl files:

- the LR schedules of `verl/utils/torch_functional.py`: `get_constant_schedule_with_warmup`
  (`verl/utils/torch_functional.py:768`) and `get_cosine_schedule_with_warmup`
  (`verl/utils/torch_functional.py:712`);
- `prepare_micro_batches` (`verl/workers/engine/utils.py:92`), which cuts a rank's mini-batch into
  the micro-batches that are run one after another with gradient accumulation.

Simplifications: micro-batches have a fixed number of sequences (verl can also pack them by a token
budget, `use_dynamic_bsz`, and then restores the original order afterwards). Log-probs and entropy
from logits live in `minirl.utils.torch_functional`, config reads in `minirl.utils.config`.
"""

from __future__ import annotations

import math
import random
import warnings
from contextlib import contextmanager

import numpy as np
import torch
from torch.optim.lr_scheduler import LambdaLR

__all__ = [
    "aggregate_metrics",
    "get_constant_schedule_with_warmup",
    "get_cosine_schedule_with_warmup",
    "get_device_name",
    "get_rng_state",
    "parameter_layout",
    "prepare_micro_batches",
    "quiet_single_process_dcp",
    "set_rng_state",
    "to_torch_dtype",
]


# ----------------------------------------------------------------------------- config and devices


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


def parameter_layout(module) -> dict:
    """`{name: {"local", "global", "placements"}}`: the shard of every parameter this rank holds.

    A DTensor parameter (FSDP2 and/or tensor parallel) reports its local shard and its placements
    on the device mesh (`Shard(dim=0)`: rows split over that mesh dimension); a plain one is whole.
    """
    out = {}
    for name, p in module.named_parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        placements = getattr(p, "placements", None)
        out[name] = {"local": list(local.shape), "global": list(p.shape),
                     "placements": "-" if placements is None else ",".join(str(x) for x in placements)}
    return out


# ----------------------------------------------------------------------------- checkpoints


@contextmanager
def quiet_single_process_dcp():
    """Silence DCP's "assuming the intent is to save in a single process" warning: that is our intent."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assuming the intent is to .* in a single process")
        yield


def get_rng_state() -> dict:
    """The CPU (and CUDA), numpy and Python RNG states, for a checkpoint's per-rank extra state."""
    state = {"cpu": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what `get_rng_state` returned."""
    torch.set_rng_state(state["cpu"])
    np.random.set_state(state["numpy"])
    random.setstate(state["random"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


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
