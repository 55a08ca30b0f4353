"""Pictures of a batch over its tokens: per-token signals of one response, masks, groups, ratios.

No verl counterpart (verl has no notebooks). Each function takes plain tensors or lists (cut from a real
`DataProto` by the notebook) and returns a `matplotlib.figure.Figure` built without pyplot:

    from minirl.notebook import token_plots
    token_plots.token_signals(tokens, {"old_log_probs": lp, "values": v, "returns": g, "advantages": a})
    token_plots.masks_image({"attention_mask": am, "response_mask": rm}, boundary=prompt_len)
    token_plots.group_scores(scores, advantages, group_of_row)
    token_plots.ratio_histogram({"before the update": r0, "after one update": r1}, clip=(0.8, 1.2))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

__all__ = ["group_scores", "masks_image", "ratio_histogram", "token_signals"]

_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3"]


def _np(x) -> np.ndarray:
    return np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=float)


def token_signals(tokens: Sequence[str], signals: Mapping[str, Sequence[float]], title: str = "",
                  mask: Sequence[float] | None = None) -> Figure:
    """One panel per signal (bars over the response tokens of one sequence), tokens as x tick labels.

    `signals` maps a name (a batch field: `old_log_probs`, `values`, `returns`, `advantages` ...) to one
    value per token; `mask` (the row of `response_mask`) greys the positions that are not response tokens.
    """
    n = len(tokens)
    fig = Figure(figsize=(max(7.0, 0.55 * n + 2), 1.35 * len(signals) + 0.9))
    axes = fig.subplots(len(signals), 1, sharex=True, squeeze=False)[:, 0]
    off = np.zeros(n, bool) if mask is None else _np(mask)[:n] == 0
    for k, (ax, (name, values)) in enumerate(zip(axes, signals.items())):
        v = _np(values)[:n]
        ax.bar(range(n), v, color=[("#cccccc" if o else _COLORS[k % len(_COLORS)]) for o in off])
        ax.axhline(0, color="#333333", lw=0.6)
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        for i, val in enumerate(v):
            ax.text(i, val, f"{val:.2f}", ha="center", va="bottom" if val >= 0 else "top", fontsize=6)
        lo, hi = min(0.0, v.min()), max(0.0, v.max())
        pad = 0.25 * (hi - lo or 1.0)
        ax.set_ylim(lo - pad, hi + pad)
    labels = [t.replace(" ", "\u2423").replace("\n", "\\n") for t in tokens]  # a space shows as a visible mark
    long = any(len(t) > 3 for t in labels)
    axes[-1].set_xticks(range(n), labels, fontsize=8, family="monospace", rotation=40 if long else 0,
                        ha="right" if long else "center")
    axes[-1].set_xlabel("response token (grey: not a response token: response_mask = 0)" if mask is not None
                        else "response token")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def masks_image(masks: Mapping[str, object], boundary: int | None = None, row_labels: Sequence[str] | None = None,
                title: str = "") -> Figure:
    """Each mask (a `(rows, positions)` 0/1 tensor) as an image, side by side: dark = 1, light = 0.

    `boundary` draws a red line between the prompt and the response columns of a whole-sequence mask
    (`attention_mask`, `position_ids` > 0 ...) whose width is larger than the response's.
    """
    items = [(k, _np(v)) for k, v in masks.items()]
    widths = [max(2, m.shape[1]) for _, m in items]
    rows = items[0][1].shape[0]
    fig = Figure(figsize=(min(14.0, 1.2 + 0.16 * sum(widths) + 0.9 * len(items)), 0.9 + 0.22 * rows))
    axes = fig.subplots(1, len(items), squeeze=False, gridspec_kw={"width_ratios": widths})[0]
    for ax, (name, m) in zip(axes, items):
        ax.imshow(m, aspect="auto", cmap="Blues", vmin=0, vmax=max(1.0, float(m.max())), interpolation="nearest")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("token position", fontsize=8)
        if boundary is not None and m.shape[1] > boundary:
            ax.axvline(boundary - 0.5, color="tab:red", lw=1.2)
        ax.set_yticks(range(rows), row_labels if row_labels is not None else range(rows), fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
    axes[0].set_ylabel("row of the batch", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def group_scores(scores: Sequence[float], advantages: Sequence[float], groups: Sequence[object],
                 title: str = "each response's score and its GRPO advantage, grouped by prompt") -> Figure:
    """Bars of the score (top) and the advantage (bottom) of every response, coloured by prompt group."""
    s, a = _np(scores), _np(advantages)
    labels = list(dict.fromkeys(groups))
    color = {g: _COLORS[i % len(_COLORS)] for i, g in enumerate(labels)}
    order = sorted(range(len(s)), key=lambda i: labels.index(groups[i]))
    fig = Figure(figsize=(max(7.0, 0.28 * len(s) + 2), 3.6))
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    cols = [color[groups[i]] for i in order]
    ax1.bar(range(len(s)), s[order], color=cols)
    ax1.set_ylabel("score $R_i$", fontsize=8)
    ax2.bar(range(len(s)), a[order], color=cols)
    ax2.axhline(0, color="#333333", lw=0.6)
    ax2.set_ylabel("advantage $A_i$", fontsize=8)
    edges = [k for k in range(1, len(order)) if groups[order[k]] != groups[order[k - 1]]]
    for ax in (ax1, ax2):
        for e in edges:
            ax.axvline(e - 0.5, color="#999999", lw=0.6, ls=":")
    ax2.set_xlabel("response (one colour per prompt group: the rollout.n responses sharing a uid)", fontsize=8)
    ax1.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def ratio_histogram(ratios: Mapping[str, object], clip: tuple[float, float] = (0.8, 1.2), bins: int = 40,
                    title: str = "importance ratio per response token") -> Figure:
    """Histograms of the ratio $\\rho=\\pi_\\theta/\\pi_{old}$ over valid tokens, with PPO's clip band shaded."""
    fig = Figure(figsize=(8, 2.8))
    ax = fig.add_subplot()
    values = {k: _np(v).ravel() for k, v in ratios.items()}
    lo = min(clip[0] - 0.1, *(v.min() for v in values.values() if v.size))
    hi = max(clip[1] + 0.1, *(v.max() for v in values.values() if v.size))
    ax.axvspan(clip[0], clip[1], color="#e2f0d9", label=f"clip band [{clip[0]:g}, {clip[1]:g}]")
    for k, (name, v) in enumerate(values.items()):
        ax.hist(v, bins=np.linspace(lo, hi, bins), alpha=0.7, color=_COLORS[k % len(_COLORS)], label=name)
    ax.set_xlabel(r"ratio $\rho = \exp(\log\pi_\theta - \log\pi_{old})$")
    ax.set_ylabel("tokens")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
