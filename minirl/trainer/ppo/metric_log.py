"""The step's row of metrics: what goes into it, and where it is written.

verl: `PPOTrainer._compute_metrics` (`verl/trainer/ppo/v1/trainer_base.py:1763`) and the `Tracking`
logger of `fit`. `compute_step_metrics` adds the batch's data metrics (`compute_data_metrics`),
`timing_s/<stage>`, the step and epoch, the weight versions, verl's off-policy staleness metrics
(`minirl.trainer.ppo.off_policy.trajectory_version_metrics`) and the last weight sync's numbers.
`log_step` appends the numeric row to `trainer.history`, to `metrics.jsonl` (logger `file`; NaN
written as null), prints a console line (logger `console`) and writes the trace's `metrics` event.
Moved out of `trainer_base` to keep that file small.
"""

from __future__ import annotations

import json
from pathlib import Path

from tqdm.auto import tqdm

from minirl.trainer.ppo import finite_checks
from minirl.trainer.ppo.metric_utils import compute_data_metrics
from minirl.trainer.ppo.off_policy import trajectory_version_metrics

__all__ = ["compute_step_metrics", "log_step"]

CONSOLE_KEYS = ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "response_length/mean", "timing_s/step")
"""What the console line shows (plus every `val-core/.../acc/mean@1`)."""


def compute_step_metrics(trainer, batch, metrics: dict) -> None:
    """Add the step's metrics of `batch` (the trained trajectories) to `metrics`."""
    metrics.update(compute_data_metrics(batch, trainer.use_critic))
    for k, v in trainer.timing_raw.items():
        metrics[f"timing_s/{k}"] = v
    metrics["training/global_step"] = trainer.global_steps
    metrics["training/epoch"] = trainer.loader.epoch
    for k, v in trainer.versions.items():
        metrics[f"version/{k}"] = v
    nt = batch.non_tensor_batch  # verl's step 5: trajectory spans and staleness, in versions
    metrics.update(trajectory_version_metrics(nt["min_global_steps"], nt["max_global_steps"], trainer.global_steps))
    metrics.update(trainer.checkpoint_manager.pop_metrics())  # the last weight sync: bytes, buckets, seconds


def log_step(trainer, metrics: dict, step: int) -> None:
    """Write the numeric part of `metrics` as step `step`'s row."""
    row = {"step": step, **{k: v for k, v in metrics.items() if isinstance(v, (int, float))}}
    trainer.history.append(row)
    loggers = list(trainer.config.trainer.logger)
    if "file" in loggers:
        out = Path(trainer.config.trainer.default_local_dir)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(finite_checks.json_row(row), allow_nan=False) + "\n")  # NaN -> null
    if "console" in loggers:
        keys = [k for k in CONSOLE_KEYS if k in row]
        keys += [k for k in row if k.startswith("val-core/") and k.endswith("/acc/mean@1")]
        tqdm.write(f"step {step}: " + " ".join(f"{k}={row[k]:.4g}" for k in keys))
    trainer.tracer.event("metrics", step=step, metrics=finite_checks.json_row(row))
