"""Learning curves: a chapter's short live run beside the recorded curve of `benchmarks/learning.py`.

No verl counterpart (verl logs the same metric names to its trackers: `val-core/<data_source>/acc/mean@1`,
`critic/score/mean`). The recorded curve is a small JSON file that `benchmarks/learning.py --curve FILE`
writes (the command that made it is inside); chapter 01 draws its live run (the trainer's `history`) on
top of it:

    from minirl.notebook.learning import load_recorded_curve, plot_learning_curves, curve_rows
    recorded = load_recorded_curve()                  # benchmarks/results/learning_curve.json
    plot_learning_curves(curve_rows(run.trainer.history), recorded)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

__all__ = ["RECORDED_CURVE", "VAL_KEY", "curve_rows", "load_recorded_curve", "plot_learning_curves"]

VAL_KEY = "val-core/minirl/arithmetic/acc/mean@1"
"""The held-out accuracy the trainer logs (verl's `val-core/<data_source>/<key>/mean@<n>`): greedy, one sample."""

RECORDED_CURVE = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "learning_curve.json"
"""Where the recorded curve lives in the repository (written by `benchmarks/learning.py --curve`)."""


def curve_rows(history: Sequence[dict], val_key: str = VAL_KEY) -> list[dict]:
    """`{"step", "train_score", "val_acc"}` per logged step of a trainer's `history` (val_acc None between evals)."""
    return [{"step": int(r["step"]), "train_score": r.get("critic/score/mean"), "val_acc": r.get(val_key)}
            for r in history]


def load_recorded_curve(path: str | Path | None = None) -> dict:
    """The recorded curve: `{"command", "warm_start", "date", "rows": [{"step", "grpo_s", "train_score", "val_acc"}]}`."""
    p = Path(path) if path is not None else RECORDED_CURVE
    if not p.is_file():
        raise FileNotFoundError(f"no recorded learning curve at {p}. Fix: run `python benchmarks/learning.py "
                                f"--grpo-steps 300 --test-freq 10 --curve {p}` from the repository root.")
    return json.loads(p.read_text())


def _xy(rows: Sequence[dict], key: str):
    pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_learning_curves(live: Sequence[dict], recorded: dict | None = None, title: str = "") -> Figure:
    """Held-out accuracy (left) and the train score (right) against the GRPO step: live in colour, recorded in grey.

    `live` is `curve_rows(history)`; `recorded` is `load_recorded_curve()` (its command in the legend).
    """
    fig = Figure(figsize=(10, 3.4))
    ax_val, ax_train = fig.subplots(1, 2)
    if recorded is not None:
        rec = recorded["rows"]
        x, y = _xy(rec, "val_acc")
        ax_val.plot(x, y, "o-", color="#999999", ms=3, label="recorded (benchmarks/learning.py)")
        x, y = _xy(rec, "train_score")
        ax_train.plot(x, y, "-", color="#bbbbbb", lw=1, label="recorded, per step")
        if len(y) >= 5:
            k = 5
            smooth = [sum(y[i - k + 1:i + 1]) / k for i in range(k - 1, len(y))]
            ax_train.plot(x[k - 1:], smooth, "-", color="#777777", lw=2, label="recorded, mean of 5 steps")
    x, y = _xy(live, "val_acc")
    ax_val.plot(x, y, "o-", color="#c44e52", lw=2, label="this notebook's run")
    x, y = _xy(live, "train_score")
    ax_train.plot(x, y, "o-", color="#c44e52", ms=3, lw=1.5, label="this notebook's run")
    ax_val.set_title("held-out greedy accuracy (200 prompts)", fontsize=9)
    ax_train.set_title("train score: mean reward of the step's samples", fontsize=9)
    for ax in (ax_val, ax_train):
        ax.set_xlabel("GRPO step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax_val.set_ylabel("accuracy")
    ax_train.set_ylabel("critic/score/mean")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
