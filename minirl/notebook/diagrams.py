"""Diagrams the chapters draw: how the post-training methods relate, the four roles, the stages PPO adds.

No verl counterpart (verl has no notebooks). Each function returns a `matplotlib.figure.Figure` built
without pyplot (a notebook shows it as the cell's value; a script can `fig.savefig(...)`), and draws
only what it is given or what is fixed by definition (the family tree of the methods):

    from minirl.notebook import diagrams
    diagrams.post_training_map()                        # chapter 00: pretrain -> SFT -> RLHF / RLVR / DPO / OPD
    diagrams.roles_and_fields({"actor": [...], ...})    # chapter 00: who produces which field of the batch
    diagrams.stage_pipelines({"GRPO": [...], "PPO": [...]})  # chapter 09: the stages of two runs, the extra ones marked
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

__all__ = ["post_training_map", "roles_and_fields", "stage_pipelines"]

_BOX = {"sft": "#dfe7f2", "online": "#fde2c8", "offline": "#e2f0d9", "signal": "#f2f2f2", "algo": "#f8d7da"}


def _box(ax, x, y, w, h, text, color, fontsize=8.5, bold=False):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                fc=color, ec="#555555", lw=0.8))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, weight="bold" if bold else "normal", wrap=True)


def _arrow(ax, a, b, text="", color="#555555", style="-|>", offset=(0.0, 0.12)):
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle=style, mutation_scale=11, color=color, lw=1.0,
                                 shrinkA=2, shrinkB=2))
    if text:
        ax.text((a[0] + b[0]) / 2 + offset[0], (a[1] + b[1]) / 2 + offset[1], text, ha="center", va="bottom",
                fontsize=7, color="#333333", style="italic")


def post_training_map() -> Figure:
    """How SFT, DPO, RLHF, RLVR, PPO, GRPO and OPD relate: a family tree of post-training.

    Left to right: a pretrained model is first taught the answer format by SFT (imitation of given
    answers); from there, either offline preference optimisation (DPO: chosen/rejected pairs, no sampling)
    or online RL (sample from the policy, score, update). Online RL is RLHF when the score comes from a
    reward model trained on human preferences, RLVR when it comes from a verifiable rule; PPO and GRPO are
    two ways to turn scores into advantages (a critic vs. a group of samples of the same prompt). OPD
    (on-policy distillation) replaces the score by a teacher's per-token log-probs on the student's samples.
    """
    fig = Figure(figsize=(10, 4.6))
    ax = fig.add_subplot()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 5)
    ax.axis("off")
    _box(ax, 0.8, 2.5, 1.3, 0.8, "pretrained\nLM", _BOX["signal"], bold=True)
    _box(ax, 2.7, 2.5, 1.7, 1.0, "SFT\nimitate given answers\nloss $-\\log\\pi(y^*|x)$", _BOX["sft"])
    _arrow(ax, (1.45, 2.5), (1.85, 2.5))
    # offline branch
    _box(ax, 5.2, 4.35, 2.2, 0.9, "DPO (offline)\npairs $y_w \\succ y_l$, no sampling,\nno reward model, no critic",
         _BOX["offline"])
    _arrow(ax, (3.55, 2.85), (4.1, 4.2), "preference pairs", offset=(-0.35, 0.05))
    # online RL
    _box(ax, 5.2, 2.5, 2.2, 1.0, "online RL\nsample $y\\sim\\pi_\\theta(\\cdot|x)$, score it,\nupdate $\\pi_\\theta$",
         _BOX["online"], bold=False)
    _arrow(ax, (3.55, 2.5), (4.1, 2.5), "policy")
    _box(ax, 5.2, 0.6, 2.2, 0.85, "OPD (on-policy)\nteacher's per-token log-probs\non the student's own samples", _BOX["online"])
    _arrow(ax, (3.55, 2.15), (4.1, 0.75), "student", offset=(-0.3, -0.25))
    # where the score comes from
    _box(ax, 7.65, 3.55, 1.7, 0.75, "RLHF\nscore = reward model\n(learned from humans)", _BOX["signal"], fontsize=7.5)
    _box(ax, 7.65, 2.5, 1.7, 0.75, "RLVR\nscore = a rule\n(is '#### 57' right?)", _BOX["signal"], fontsize=7.5)
    _arrow(ax, (6.3, 2.75), (6.8, 3.45))
    _arrow(ax, (6.3, 2.5), (6.8, 2.5))
    # how the score becomes an advantage
    _box(ax, 9.3, 3.1, 1.2, 0.75, "PPO\ncritic $V$ + GAE", _BOX["algo"], fontsize=7.5)
    _box(ax, 9.3, 1.9, 1.2, 0.75, "GRPO\ngroup of $n$,\nno critic", _BOX["algo"], fontsize=7.5)
    for y in (3.55, 2.5):
        _arrow(ax, (8.5, y), (8.7, 3.1))
        _arrow(ax, (8.5, y), (8.7, 1.9))
    ax.text(9.3, 1.15, "advantage\nestimator", ha="center", fontsize=7, color="#555555")
    ax.text(7.65, 1.7, "reward", ha="center", fontsize=7, color="#555555")
    fig.suptitle("post-training: where each method gets its signal", fontsize=10)
    fig.tight_layout()
    return fig


def roles_and_fields(roles: Mapping[str, Sequence[str]], present: Mapping[str, bool] | None = None,
                     title: str = "the four roles and the batch fields each one produces") -> Figure:
    """One box per role (actor/rollout, reference, critic, reward) with the batch fields it produced.

    `roles` maps a role to the field names it wrote (read from a real batch or trace); `present` greys
    out a role the run did not have (GRPO: no critic). Arrows lead to the trainer's advantage and update.
    """
    present = present or {}
    names = list(roles)
    fig = Figure(figsize=(10, 0.9 + 0.62 * len(names)))
    ax = fig.add_subplot()
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.55, len(names) - 0.45)
    ax.axis("off")
    colors = {"actor": "#f4cccc", "rollout": "#cfe2f3", "reference": "#d9d2e9", "critic": "#d9ead3",
              "reward": "#fce5cd"}
    for i, role in enumerate(names):
        y = len(names) - 1 - i
        on = present.get(role, True)
        key = next((k for k in colors if k in role), "reward")
        _box(ax, 1.6, y, 2.9, 0.72, role, colors[key] if on else "#eeeeee", fontsize=8)
        fields = ", ".join(roles[role]) if roles[role] else "(nothing in this run)"
        ax.text(3.2, y, fields, va="center", fontsize=8, family="monospace", color="#222222" if on else "#999999")
        _arrow(ax, (6.6, y), (8.05, (len(names) - 1) / 2), color="#999999" if not on else "#555555")
    _box(ax, 8.9, (len(names) - 1) / 2, 1.6, 1.1, "trainer\nadvantages\n-> update", "#fff2cc", bold=True)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def stage_pipelines(pipelines: Mapping[str, Sequence[str]], highlight: Sequence[str] = (),
                    title: str = "the stages of one step") -> Figure:
    """One row per run: its stages in order, as boxes; stages named in `highlight` are coloured.

    Built for chapter 09 (GRPO vs PPO from their traces: the stages PPO adds are `values` and
    `update_critic`), but any two or more lists of stage names work.
    """
    rows = list(pipelines.items())
    master = max((list(stages) for _, stages in rows), key=len)  # the longest run sets the columns
    width = len(master)
    fig = Figure(figsize=(max(8.0, 1.25 * width + 1.5), 0.8 + 1.0 * len(rows)))
    ax = fig.add_subplot()
    ax.set_xlim(-1.4, width * 1.25)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.axis("off")
    for r, (name, stages) in enumerate(rows):
        y = len(rows) - 1 - r
        ax.text(-1.3, y, name, va="center", ha="left", fontsize=9, weight="bold")
        prev = None
        for i, s in enumerate(stages):
            col = master.index(s) if s in master else i  # a stage the run lacks leaves a gap in its row
            x = col * 1.25 + 0.55
            _box(ax, x, y, 1.1, 0.55, s.replace("_", "_\n", 1) if len(s) > 10 else s,
                 "#f4b183" if s in highlight else "#dfe7f2", fontsize=7)
            if prev is not None:
                _arrow(ax, (prev + 0.55, y), (x - 0.55, y))
            prev = x
    ax.set_title(title + (f" (coloured: {', '.join(highlight)})" if highlight else ""), fontsize=10)
    fig.tight_layout()
    return fig
