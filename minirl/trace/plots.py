"""Pictures of a trace and of a step's batch split, for notebooks (matplotlib).

No verl counterpart. Every function returns a `matplotlib.figure.Figure`, built without pyplot, so
a notebook shows it once, as the cell's value (or with `display(fig)` inside a loop), and a script
can `fig.savefig(...)`. The first three read the events of `read_trace` / `query.load`; the last
takes plain numbers (the config's batch-size arithmetic):

    from minirl.trace import plots, query
    ev = query.load("grpo")
    plots.lifecycle_timeline(ev, step=1)         # one bar per stage: when it ran, for how long, what it added
    plots.field_lineage_chart(ev, "advantages")  # one field, one row per step: born, read, changed, removed, alive
    plots.plot_lineage(ev, step=1)               # every field of one step: made here, read there, alive between
    plots.plot_batch_split(32, 16, 4, dp=2)      # 32 sequences -> mini-batches -> ranks -> micro-batches
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from minirl.trace.lineage import field_lineage, lineage
from minirl.trace.query import stage_events, stage_rank, timeline

__all__ = ["field_lineage_chart", "lifecycle_timeline", "plot_batch_split", "plot_lineage"]

_ROLE_COLORS = {"rollout": "#4c72b0", "reward": "#dd8452", "actor": "#c44e52", "ref": "#8172b3",
                "critic": "#55a868", "trainer": "#937860"}
_MARKS = {"added": ("o", "#2a9d8f", "added"), "read": ("v", "#264653", "read"),
          "changed": ("D", "#e9c46a", "changed"), "removed": ("X", "#e76f51", "removed")}


def lifecycle_timeline(events: list[dict], step: int, max_added: int = 4) -> Figure:
    """Gantt chart of one step: a bar per stage (colour = worker role), labelled with the fields it added."""
    rows = timeline(events, step)
    fig = Figure(figsize=(9, 0.5 + 0.45 * len(rows)))
    ax = fig.add_subplot()
    for i, r in enumerate(rows):
        ax.barh(i, max(r["wall_s"], 1e-4), left=r["start_s"], color=_ROLE_COLORS.get(r["role"], "#999999"))
        added = r["added"][:max_added] + (["..."] if len(r["added"]) > max_added else [])
        label = f"+ {', '.join(added)}" if added else ""
        ax.text(r["start_s"] + r["wall_s"], i, f"  {r['wall_s']:.3f}s {label}", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), [f"{r['stage']} ({r['role']})" for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the step's first stage")
    total = max((r["start_s"] + r["wall_s"] for r in rows), default=0.0)
    ax.set_xlim(0, total * 1.6 or 1.0)  # room for the labels
    ax.set_title(f"step {step}: stage timeline")
    fig.tight_layout()
    return fig


def field_lineage_chart(events: list[dict], field: str) -> Figure:
    """One row per step, one column per stage: where `field` is born, read, changed, removed, and alive."""
    lin = lineage(events, field)
    per_step = lin["per_step"]
    stage_cols = sorted({e["stage"] for e in stage_events(events)}, key=stage_rank)
    col = {s: i for i, s in enumerate(stage_cols)}
    fig = Figure(figsize=(1.0 + 1.1 * len(stage_cols), 1.2 + 0.5 * len(per_step)))
    ax = fig.add_subplot()
    seen = set()
    for y, (step, st) in enumerate(sorted(per_step.items())):
        alive = [col[s] for s in st["present"] if s in col]
        if alive:
            ax.plot([min(alive), max(alive)], [y, y], color="#bbbbbb", lw=6, solid_capstyle="round", zorder=1)
        for kind, (marker, color, label) in _MARKS.items():
            xs = [col[s.split(" ")[0]] for s in st[kind] if s.split(" ")[0] in col]
            if xs:
                ax.scatter(xs, [y] * len(xs), marker=marker, color=color, s=70, zorder=2,
                           label=label if kind not in seen else None)
                seen.add(kind)
    ax.set_xticks(range(len(stage_cols)), stage_cols, rotation=30, ha="right")
    ax.set_yticks(range(len(per_step)), [f"step {s}" for s in sorted(per_step)])
    ax.set_ylim(len(per_step) - 0.5, -0.5)
    ax.set_xlim(-0.5, len(stage_cols) - 0.5)
    ax.set_title(f"{field}: {lin['storage']} {lin['shape_symbolic']} {lin['dtype']}, mask {lin['mask']}", fontsize=9)
    if seen:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


_STORAGE_COLORS = {"batch": "tab:blue", "non_tensor_batch": "tab:orange", "meta_info": "tab:green"}


def plot_lineage(events: list[dict], step: int = 1, fields: Sequence[str] | None = None) -> Figure:
    """Every field of one step x its stages: a bar from the stage that made the field to the stage that
    removed it (or the step's end), a filled dot where it was made, an open circle where a stage read it.

    Colour = storage (`batch`, `non_tensor_batch`, `meta_info`). `fields` picks the rows (default:
    tensors, and any field a stage made or read).
    """
    lin = {r["field"]: r for r in field_lineage(events, step)}
    xs = ["dataset"] + [e["stage"] for e in stage_events(events, step) if e["stage"] != "update_weights"]
    names = list(fields) if fields is not None else [f for f, r in lin.items() if r["storage"] == "batch"
                                                      or r["read_by"] or r["made_by"] != "dataset"]
    names = [n for n in names if n in lin and not n.startswith("__")]
    fig = Figure(figsize=(1.1 * len(xs) + 2.5, 0.32 * len(names) + 1.2))
    ax = fig.add_subplot()
    for y, name in enumerate(names):
        r = lin[name]
        x0 = xs.index(r["made_by"]) if r["made_by"] in xs else 0
        readers = [xs.index(s) for s in r["read_by"].split(", ") if s in xs]
        x1 = xs.index(r["removed_by"]) if r["removed_by"] in xs else len(xs) - 1
        c = _STORAGE_COLORS.get(r["storage"], "tab:gray")
        ax.plot([x0, x1], [y, y], color=c, alpha=0.35, lw=5, solid_capstyle="butt")
        ax.plot([x0], [y], "o", color=c, ms=8)
        if readers:
            ax.plot(readers, [y] * len(readers), "o", mfc="white", mec="black", ms=7)
    ax.set_xticks(range(len(xs)), xs, rotation=30, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlim(-0.5, len(xs) - 0.5)
    handles = [Line2D([], [], color=c, lw=5, alpha=0.5, label=k) for k, c in _STORAGE_COLORS.items()]
    handles += [Line2D([], [], marker="o", color="gray", lw=0, label="made here"),
                Line2D([], [], marker="o", mfc="white", mec="black", lw=0, label="read here")]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title(f"field lineage, step {step}")
    fig.tight_layout()
    return fig


def plot_batch_split(sequences: int, mini_batch: int, micro_batch: int, dp: int = 1, epochs: int = 1) -> Figure:
    """One training step's sequences as a strip: colour = mini-batch (one optimizer step each),
    white lines = micro-batches on each rank, rows = data-parallel ranks.

    `sequences` per step, `mini_batch` sequences per optimizer step (all ranks), `micro_batch`
    sequences per forward/backward on one rank, `dp` ranks, `epochs` passes (`ppo_epochs`, in the
    label): the numbers `minirl.config.derived_numbers` computes from a config.
    """
    if sequences % mini_batch or mini_batch % dp or (mini_batch // dp) % micro_batch:
        raise ValueError(f"{sequences} sequences do not split into mini-batches of {mini_batch}, over {dp} ranks, "
                         f"in micro-batches of {micro_batch}: run minirl.config.validate on the config first.")
    cmap = colormaps["tab20"]
    per_rank = mini_batch // dp
    n_mini = sequences // mini_batch
    fig = Figure(figsize=(10, 0.5 * dp + 1.3))
    ax = fig.add_subplot()
    for m in range(n_mini):
        for r in range(dp):
            x = m * per_rank
            ax.barh(r, per_rank, left=x, color=cmap(m % 20), edgecolor="black", height=0.7)
            for k in range(1, per_rank // micro_batch):
                ax.plot([x + k * micro_batch] * 2, [r - 0.35, r + 0.35], color="white", lw=1.2)
    ax.set_yticks(range(dp), [f"rank {r}" for r in range(dp)])
    ax.set_xlabel(f"sequences on each rank (one colour = one mini-batch = one optimizer step; "
                  f"white lines cut micro-batches of {micro_batch}); x{epochs} epoch(s)")
    ax.set_title(f"{sequences} sequences -> {n_mini} mini-batches of {mini_batch} -> "
                 f"{per_rank} per rank -> {per_rank // micro_batch} micro-batches")
    ax.invert_yaxis()
    fig.tight_layout()
    return fig
