"""Pictures of a trace for notebooks: a step's stage timeline and a field's lineage (matplotlib).

No verl counterpart. Both functions take the events of `read_trace` / `views.load` and return a
`matplotlib.figure.Figure` (built without pyplot, so a notebook shows it once, as the cell's value,
and a script can `fig.savefig(...)`):

    from minirl.trace import plots, views
    ev = views.load("grpo")
    plots.lifecycle_timeline(ev, step=1)        # one bar per stage: when it ran, for how long, what it added
    plots.field_lineage_chart(ev, "advantages")  # one row per step: born, read, changed, removed, alive
"""

from __future__ import annotations

from matplotlib.figure import Figure

from minirl.trace import views

_ROLE_COLORS = {"rollout": "#4c72b0", "reward": "#dd8452", "actor": "#c44e52", "ref": "#8172b3",
                "critic": "#55a868", "trainer": "#937860"}
_MARKS = {"added": ("o", "#2a9d8f", "added"), "read": ("v", "#264653", "read"),
          "changed": ("D", "#e9c46a", "changed"), "removed": ("X", "#e76f51", "removed")}


def lifecycle_timeline(events: list[dict], step: int, max_added: int = 4) -> Figure:
    """Gantt chart of one step: a bar per stage (colour = worker role), labelled with the fields it added."""
    rows = views.timeline(events, step)
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
    lin = views.lineage(events, field)
    per_step = lin["per_step"]
    stage_cols = sorted({e["stage"] for e in views.stage_events(events)}, key=views.stage_rank)
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
