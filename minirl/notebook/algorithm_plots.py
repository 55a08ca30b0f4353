"""Figures of chapter 13 (algorithm variants) and `benchmarks/algorithms.py`, one function per picture.

- `plot_baselines_on_one_batch`: where each REINFORCE-family estimator's baseline comes from, on one batch;
- `plot_policy_loss_variants`: per-token loss and gradient weight against the importance ratio, every
  policy loss on the same axes;
- `plot_overlong_penalty`: DAPO's length penalty, and a run's responses on it;
- `plot_teacher_signal_on_one_response`: on-policy distillation's per-token signal next to GRPO's one number;
- `plot_accuracy_vs_training_time`: held-out accuracy against training seconds, one line per variant;
- `plot_accuracy_by_family`: the same, one panel per family (estimators, losses, DAPO and OPD), GRPO in each.
"""

from __future__ import annotations

__all__ = ["plot_accuracy_by_family", "plot_accuracy_vs_training_time", "plot_baselines_on_one_batch", "plot_overlong_penalty",
           "plot_policy_loss_variants", "plot_teacher_signal_on_one_response", "policy_loss_curves"]


def _plt():
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy_vs_training_time(results: list[dict], target: float | None = None, path: str | None = None,
                                   ax=None):
    """One line per variant (`results` of `benchmarks/algorithms.py`: `name`, `curve` [(train s, acc)]); the
    teacher's accuracy as a dashed line. Saves to `path` when given; returns the axes."""
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.5))
    for r in results:
        xs, ys = zip(*r["curve"]) if r["curve"] else ((), ())
        style = "-" if r["name"].startswith(("opd/", "grpo", "dapo/recipe")) else ":"
        ax.plot(xs, ys, style, marker=".", label=r["name"], linewidth=2 if style == "-" else 1)
    if target is not None:
        ax.axhline(target, color="k", linestyle="--", linewidth=1, label=f"teacher {target:.2f}")
    ax.set_xlabel("training time (s, validation excluded)")
    ax.set_ylabel("held-out greedy accuracy")
    ax.legend(fontsize=6, ncol=2, loc="lower right")
    if path:
        import os

        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        ax.figure.tight_layout()
        ax.figure.savefig(path, dpi=110)
    return ax


FAMILIES = {"advantage estimators": ("estimator/",), "policy losses": ("loss/",), "DAPO and OPD": ("dapo/", "opd/")}
"""The panels of `plot_accuracy_by_family`: a title and the variant-name prefixes it holds."""


def plot_accuracy_by_family(results: list[dict], target: float | None = None, path: str | None = None):
    """One panel per family of `FAMILIES` that `results` has runs of, each with the GRPO run as a thick black
    line (the run every variant changes one thing of) and the teacher's accuracy dashed. Returns the figure.

    Where `results` merges several benchmark runs (each result's `run`: its index), a panel's baseline is the GRPO
    result of the same run (named `grpo`, or `grpo@<commit>` for another run's)."""
    plt = _plt()
    bases = [r for r in results if r["name"] == "grpo" or r["name"].startswith("grpo@")]
    panels = [(title, [r for r in results if r["name"].startswith(prefixes)]) for title, prefixes in FAMILIES.items()]
    panels = [(title, runs) for title, runs in panels if runs]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2), sharey=True, squeeze=False)
    for ax, (title, runs) in zip(axes[0], panels):
        for r in runs:
            if r["curve"]:
                xs, ys = zip(*r["curve"])
                ax.plot(xs, ys, "-", marker=".", markersize=3, linewidth=1, label=r["name"].split("/", 1)[1])
        base = next((b for b in bases if b.get("run") == runs[0].get("run")), bases[0] if bases else None)
        if base and base["curve"]:
            xs, ys = zip(*base["curve"])
            ax.plot(xs, ys, "-", color="k", linewidth=2.5, label=f"{base['name']} (the baseline)")
        if target is not None:
            ax.axhline(target, color="k", linestyle="--", linewidth=1, label=f"teacher {target:.2f}")
        ax.set_title(title)
        ax.set_xlabel("training time (s, validation excluded)")
        ax.legend(fontsize=6, ncol=2, loc="lower right")
    axes[0][0].set_ylabel("held-out greedy accuracy")
    fig.tight_layout()
    if path:
        import os

        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=110)
    return fig


# ------------------------------------------------------------------------------------- REINFORCE family


def plot_baselines_on_one_batch(R, groups: list[list[int]], baselines: dict[str, list[float]], ax=None):
    """Each response's score $R_i$ (bars, grouped by prompt) and, per estimator, the baseline $b_i$ it was
    compared with (one marker per estimator). `baselines[name][i]` is $b_i$ for response `i`."""
    import numpy as np

    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 3.8))
    order = [i for rows in groups for i in rows]
    x = np.arange(len(order))
    ax.bar(x, [float(R[i]) for i in order], color="lightgrey", label=r"score $R_i$")
    markers = "o^sDvx*P"
    for k, (name, b) in enumerate(baselines.items()):
        ax.scatter(x + (k - len(baselines) / 2) * 0.08, [b[i] for i in order], marker=markers[k % len(markers)],
                   s=28, zorder=3, label=name)
    edge = 0
    for rows in groups[:-1]:
        edge += len(rows)
        ax.axvline(edge - 0.5, color="grey", lw=0.6)
    ax.set_xlabel("response (grouped by prompt, uid)")
    ax.set_ylabel(r"score / baseline $b_i$")
    ax.legend(fontsize=7, ncol=3, loc="upper right")
    ax.set_title("where each estimator's baseline comes from")
    return ax


# ------------------------------------------------------------------------------------- policy losses


def policy_loss_curves(config, ratio, adv: float, names: list[str], p_old: float = 0.5) -> dict:
    """Per-token loss and gradient weight of each registered policy loss against the ratio $\\rho$.

    One token per call (a one-token response, so sequence-level ratios equal the token's), with
    $\\pi_{old}(y)=$ `p_old` and $\\log\\pi_\\theta=\\log(\\rho\\,p_{old})$. The weight is
    $w=-\\frac{1}{A}\\,\\partial\\ell/\\partial\\log\\pi_\\theta$: how hard the token's log-prob is pushed per
    unit of advantage (1 for plain REINFORCE). Returns `{name: (loss, weight)}` as lists.
    """
    import math

    import torch

    from minirl.trainer.ppo import core_algos

    out = {}
    for name in names:
        fn = core_algos.get_policy_loss_fn(name)
        losses, weights = [], []
        for r in ratio:
            lp = torch.tensor([[math.log(float(r) * p_old)]], requires_grad=True)
            loss, _ = fn(old_log_prob=torch.tensor([[math.log(p_old)]]), log_prob=lp,
                         advantages=torch.tensor([[float(adv)]]), response_mask=torch.ones(1, 1),
                         loss_agg_mode="token-mean", config=config)
            loss.backward()
            losses.append(float(loss.detach()))
            weights.append(-float(lp.grad) / float(adv))
        out[name] = (losses, weights)
    return out


def plot_policy_loss_variants(ratio, curves_pos: dict, curves_neg: dict, window: tuple[float, float], axes=None):
    """Gradient weight against the ratio, every loss on the same axes: $A>0$ left, $A<0$ right; the PPO
    clip window shaded. `curves_*` come from `policy_loss_curves`."""
    plt = _plt()
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    styles = ["-", "--", ":", "-."]
    for ax, curves, sign in ((axes[0], curves_pos, "A > 0"), (axes[1], curves_neg, "A < 0")):
        for k, (name, (_, w)) in enumerate(curves.items()):
            ax.plot(ratio, w, styles[k % len(styles)], lw=1.6, label=name)
        ax.axvspan(*window, color="tab:green", alpha=0.1, label="PPO window")
        ax.axvline(1.0, color="k", lw=0.5)
        ax.set_xlabel(r"ratio $\rho=\pi_\theta/\pi_{old}$")
        ax.set_title(sign)
    axes[0].set_ylabel(r"gradient weight $-\frac{1}{A}\partial\ell/\partial\log\pi_\theta$")
    axes[1].legend(fontsize=7, ncol=2, loc="upper right")
    return axes


# ------------------------------------------------------------------------------------------------- DAPO


def plot_overlong_penalty(max_resp_len: int, buffer_len: int, penalty_factor: float, lengths, penalties, ax=None):
    """DAPO's soft overlong penalty against the response length (line), and the run's responses (dots)."""
    import numpy as np

    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.2))
    grid = np.arange(0, max_resp_len + 1)
    expected = max_resp_len - buffer_len
    ax.plot(grid, np.minimum(0.0, -(grid - expected) / buffer_len * penalty_factor), label="penalty")
    ax.scatter(lengths, penalties, s=14, color="tab:red", alpha=0.6, label="this run's responses")
    ax.axvspan(expected, max_resp_len, color="tab:orange", alpha=0.1, label="overlong buffer")
    ax.set_xlabel("response length (tokens)")
    ax.set_ylabel("reward added")
    ax.legend(fontsize=7)
    return ax


# -------------------------------------------------------------------------------------------------- OPD


def plot_teacher_signal_on_one_response(tokens: list[str], student, teacher, grpo_advantage: float, ax=None):
    """One response, token by token: the student's and the teacher's log-prob of each sampled token, the
    per-token distillation reward $\\log\\nu-\\log\\pi_\\theta$ (bars), and GRPO's one advantage for them all."""
    import numpy as np

    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.4))
    x = np.arange(len(tokens))
    reward = np.asarray(teacher) - np.asarray(student)
    ax.bar(x, reward, color="tab:purple", alpha=0.5, label=r"OPD reward $\log\nu-\log\pi_\theta$ (-k1)")
    ax.plot(x, student, "o-", label=r"student $\log\pi_\theta(y_t)$")
    ax.plot(x, teacher, "s-", label=r"teacher $\log\nu(y_t)$")
    ax.axhline(grpo_advantage, color="k", linestyle="--", lw=1, label=f"GRPO advantage (whole response) {grpo_advantage:+.2f}")
    ax.set_xticks(x)
    ax.set_xticklabels(tokens, fontsize=8)
    ax.set_xlabel("sampled token")
    ax.legend(fontsize=7, loc="lower left")
    return ax
