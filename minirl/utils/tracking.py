"""Where a step's metrics go: the run's history, `metrics.jsonl`, a console line and the trace (verl: `Tracking`).

verl's `Tracking` (`verl/utils/tracking.py:37`) sends every step's metrics to the backends named in
`trainer.logger` (wandb, tensorboard, console, file, ...). minirl implements two, `console` and `file`,
and always keeps the rows in memory (`history`, what notebooks read) and writes them to the trace as a
`metrics` event. `json_row` keeps the metrics file strict JSON: a non-finite number is written as `null`
and the row gets `nonfinite_metrics`, their count (`json.dumps` would otherwise write the invalid tokens
`NaN` / `Infinity`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tqdm.auto import tqdm

__all__ = ["CONSOLE_KEYS", "Tracking", "json_row"]

CONSOLE_KEYS = ("critic/score/mean", "actor/pg_loss", "actor/distillation/loss", "training/filter_groups/evicted_samples",
                "actor/grad_norm", "response_length/mean", "timing_s/step")
"""What the console line shows when the row has it (plus every `val-core/.../acc/mean@1`): the distillation
loss with `distillation.enabled`, the groups DAPO's dynamic sampling evicted with `algorithm.filter_groups`."""


def json_row(row: dict) -> dict:
    """`row` with every non-finite float replaced by None and their number in `nonfinite_metrics` (if any)."""
    out, bad = {}, 0
    for key, value in row.items():
        if isinstance(value, float) and not math.isfinite(value):
            value, bad = None, bad + 1
        out[key] = value
    if bad:
        out["nonfinite_metrics"] = bad
    return out


class Tracking:
    """Writes the numeric part of a step's metrics everywhere `trainer.logger` asks (verl: `Tracking`).

    Args:
        loggers: `trainer.logger` (`console`, `file`; the config check refuses verl's other backends).
        default_local_dir: where `metrics.jsonl` goes (`trainer.default_local_dir`).
        tracer: the run's tracer (its `event("metrics", ...)`); a `NullTracer` when tracing is off.
        history: the list the rows are appended to (the trainer's `history`); a new one if None.
    """

    def __init__(self, loggers, default_local_dir: str, tracer, history: list | None = None) -> None:
        self.loggers = list(loggers)
        self.default_local_dir = Path(default_local_dir)
        self.tracer = tracer
        self.history = [] if history is None else history

    def log(self, data: dict, step: int) -> dict:
        """Write the numbers of `data` as step `step`'s row; returns the row (verl: `Tracking.log`)."""
        row = {"step": step, **{k: v for k, v in data.items() if isinstance(v, (int, float))}}
        self.history.append(row)
        if "file" in self.loggers:
            self.default_local_dir.mkdir(parents=True, exist_ok=True)
            with open(self.default_local_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(json_row(row), allow_nan=False) + "\n")  # NaN -> null
        if "console" in self.loggers:
            keys = [k for k in CONSOLE_KEYS if k in row]
            keys += [k for k in row if k.startswith("val-core/") and k.endswith("/acc/mean@1")]
            tqdm.write(f"step {step}: " + " ".join(f"{k}={row[k]:.4g}" for k in keys))
        self.tracer.event("metrics", step=step, metrics=json_row(row))
        return row
