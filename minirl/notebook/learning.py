"""Learning curves: a chapter's short live run beside the recorded curve of `benchmarks/learning.py`.

No verl counterpart (verl logs the same metric names to its trackers: `val-core/<data_source>/acc/mean@1`,
`critic/score/mean`). The recorded curve is a small JSON file that `benchmarks/learning.py --curve FILE`
writes (the command that made it is inside); chapter 01 draws its live run (the trainer's `history`) on
top of it. Chapter 10 draws the recorded `benchmarks/async_modes.py` runs with `plot_async_modes`
(`benchmarks/results/async_modes.json`):

    from minirl.notebook.learning import load_recorded_curve, plot_learning_curves, curve_rows
    recorded = load_recorded_curve()                  # benchmarks/results/learning_curve.json
    plot_learning_curves(curve_rows(run.trainer.history), recorded)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

__all__ = ["ASYNC_PANELS", "RECORDED_ASYNC", "RECORDED_CURVE", "VAL_KEY", "curve_rows", "load_recorded_curve",
           "plot_async_modes", "plot_learning_curves"]

VAL_KEY = "val-core/minirl/arithmetic/acc/mean@1"
"""The held-out accuracy the trainer logs (verl's `val-core/<data_source>/<key>/mean@<n>`): greedy, one sample."""

RECORDED_CURVE = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "learning_curve.json"
"""Where the recorded curve lives in the repository (written by `benchmarks/learning.py --curve`)."""

RECORDED_ASYNC = RECORDED_CURVE.parent / "async_modes.json"
"""The recorded trainer-mode comparison (`benchmarks/async_modes.py`'s `summary.json`, with its command)."""


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


ASYNC_PANELS = {"no correction (rollout_is null, decoupled)": ("sync", "separate_async"),
                "token-level IS (rollout_is=token)": ("sync_is", "colocate_async_is", "separate_async_is"),
                "bypass (old = rollout log-probs)": ("sync_bypass", "separate_async_bypass")}
"""The panels of `plot_async_modes`: a title and the run names of `benchmarks/async_modes.py` it draws."""


def plot_async_modes(results: Sequence[dict], equal_wall_time_s: float | None = None,
                     panels: dict[str, Sequence[str]] | None = None) -> Figure:
    """Held-out accuracy against training wall time, one panel per correction, one colour per trainer mode.

    `results` are `benchmarks/async_modes.py`'s runs (`name`, `round`, `val0`, `val`: [(step, train s, acc)]);
    every round is a thin line, and the mean over the rounds at each validation a thick one. The dashed line
    is the equal wall time at which the benchmark compares the modes.
    """
    panels = panels or ASYNC_PANELS
    have = {r["name"] for r in results}
    panels = {t: [n for n in names if n in have] for t, names in panels.items()}
    panels = {t: names for t, names in panels.items() if names}
    colours = {"sync": "#333333", "colocate_async": "#4c72b0", "separate_async": "#c44e52"}
    fig = Figure(figsize=(4.2 * len(panels), 3.6))
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (title, names) in zip(axes, panels.items()):
        for name in names:
            mode = next(m for m in ("separate_async", "colocate_async", "sync") if name.startswith(m))
            runs = [r for r in results if r["name"] == name]
            for r in runs:
                ax.plot([0] + [v[1] for v in r["val"]], [r["val0"]] + [v[2] for v in r["val"]], "-",
                        color=colours[mode], lw=0.6, alpha=0.45)
            k = min(len(r["val"]) for r in runs)
            xs = [0.0] + [sum(r["val"][i][1] for r in runs) / len(runs) for i in range(k)]
            ys = [runs[0]["val0"]] + [sum(r["val"][i][2] for r in runs) / len(runs) for i in range(k)]
            ax.plot(xs, ys, "-", color=colours[mode], lw=2.2, label=f"{name} ({len(runs)} rounds, mean)")
        if equal_wall_time_s is not None:
            ax.axvline(equal_wall_time_s, color="k", ls="--", lw=0.8)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("training wall time (s, validation excluded)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel("held-out greedy accuracy (200 prompts)")
    fig.tight_layout()
    return fig
