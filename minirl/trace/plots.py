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
    plots.process_timeline({"sync": ev_a, "separate_async": ev_b})  # generation, agent loop, training: a row
                                                 # per process (minirl.trace.processes), one panel per run

Two more read per-rank traces (`trace.rank<r>.jsonl`, merged by `read_trace`): `pipeline_schedule_chart`
(a pipeline's forwards and backwards, one row per rank, on the clock) and `micro_batches_by_rank_chart`
(which rows of one global mini-batch each rank ran, as micro-batches, for several layouts side by side).
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from minirl.trace.lineage import field_lineage, lineage
from minirl.trace.processes import process_activity
from minirl.trace.query import stage_events, stage_rank, timeline
from minirl.trace.show import pipeline_schedule, rank_calls, rank_layouts

__all__ = ["field_lineage_chart", "lifecycle_timeline", "micro_batches_by_rank_chart", "pipeline_schedule_chart",
           "plot_batch_split", "plot_lineage", "process_timeline"]

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


def pipeline_schedule_chart(events: list[dict], method: str = "update_actor", call: int = 0) -> Figure:
    """One row per rank: the forwards (F) and backwards (B) its pipeline stage ran, numbered by micro-batch.

    From the `pipeline` note of each rank's `call`-th `method` call (`minirl.trace.show.pipeline_schedule`);
    x is seconds since the first op of any rank, the gaps are the time a stage waited (the bubble while
    the pipeline fills and drains, plus any imbalance between stages), printed per row as `idle`.
    """
    rows = pipeline_schedule(events, method, call)
    if not rows:
        raise ValueError(f"no pipeline schedule in the {method} calls of this trace: was it a pp > 1 run?")
    fig = Figure(figsize=(10, 0.8 + 0.55 * len(rows)))
    ax = fig.add_subplot()
    colors = {"forward": "#4c72b0", "backward": "#dd8452"}
    ranks = sorted(rows)
    for y, rank in enumerate(reversed(ranks)):
        r = rows[rank]
        for o in r["ops"]:
            width = max(o["end_s"] - o["start_s"], 1e-5)
            ax.barh(y, width, left=o["start_s"], color=colors[o["op"]], edgecolor="k", linewidth=0.4)
            ax.text(o["start_s"] + width / 2, y, f"{o['op'][0].upper()}{o['micro_batch']}", ha="center",
                    va="center", fontsize=6, color="white")
        ax.text(r["span_s"] * 1.01, y, f"idle {r['idle']:.0%}", va="center", fontsize=7)
    ax.set_yticks(range(len(ranks)), [f"rank {k} (stage {rows[k]['pp_rank']}"
                                      + (f", tp {rows[k]['tp_rank']}" if rows[k].get("tp_rank") else "") + ")"
                                      for k in reversed(ranks)])
    ax.set_xlim(0, max(r["span_s"] for r in rows.values()) * 1.12)
    ax.set_xlabel(f"seconds since the first op ({method}, {rows[ranks[0]]['num_micro_batches']} micro-batches, "
                  f"{rows[ranks[0]]['pp_size']} stages)")
    ax.legend(handles=[Line2D([0], [0], color=c, lw=6, label=k) for k, c in colors.items()], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title("pipeline schedule, one row per rank (F = forward, B = backward of micro-batch i)")
    fig.tight_layout()
    return fig


def micro_batches_by_rank_chart(layouts: dict[str, list[dict]], method: str = "update_actor", call: int = 0) -> Figure:
    """One panel per layout, one row per rank: the micro-batches that rank ran in its first engine pass.

    A box is a micro-batch, labelled with the rows of the global mini-batch it holds (chunk `dp_rank` of
    `dp` equal chunks, as the nd-mesh dispatch cuts it); its colour is the data-parallel rank, so ranks
    of one colour computed on the same rows. `layouts` maps a layout
    name to its trace events (`read_trace` of a per-rank trace directory).
    """
    fig = Figure(figsize=(4.2 * len(layouts), 0.9 + 0.6 * max(len(rank_calls(e, method, call)) for e in
                                                                layouts.values())))
    axes = fig.subplots(1, len(layouts), squeeze=False)[0]
    palette = colormaps["Pastel1"].colors
    for ax, (name, events) in zip(axes, layouts.items()):
        calls = rank_calls(events, method, call)
        coords = {lay["rank"]: lay["coords"] for lay in rank_layouts(events) if not lay.get("forward_only")}
        ranks = sorted(calls)
        for rank in ranks:
            ev, y = calls[rank], len(ranks) - 1 - rank
            note = next(p for p in ev["passes"] if "sizes" in p)
            dp_rank = ev.get("dp_rank") or 0
            start = dp_rank * sum(note["sizes"])  # the rank's chunk of the global mini-batch
            for i, size in enumerate(note["sizes"]):
                ax.add_patch(Rectangle((i * 1.1, y), 1.0, 0.8, facecolor=palette[dp_rank % len(palette)],
                                       edgecolor="k", linewidth=1.6 if ev.get("collected") else 0.5))
                ax.text(i * 1.1 + 0.5, y + 0.4, f"{start}-{start + size - 1}", ha="center", va="center", fontsize=6)
                start += size
            where = ", ".join(f"{k} {v}" for k, v in coords.get(rank, {}).items() if k != "dp")
            ax.text(-0.15, y + 0.4, f"rank {rank} (dp {dp_rank}{', ' + where if where else ''})", ha="right",
                    va="center", fontsize=7)
        width = max(len(next(p for p in calls[r]["passes"] if "sizes" in p)["sizes"]) for r in ranks)
        ax.set_xlim(-3.2, width * 1.1 + 0.2)
        ax.set_ylim(-0.3, len(ranks))
        first = next(p for p in calls[ranks[0]]["passes"] if "sizes" in p)
        ax.set_title(f"{name}: {len(ranks)} ranks, dp={first['dp_size']}", fontsize=9)
        ax.axis("off")
    fig.suptitle(f"{method}: each rank's micro-batches (labels: rows of the global mini-batch; colour: dp rank; "
                 "bold: its output reaches the controller)", fontsize=8)
    fig.tight_layout()
    return fig


_KIND_COLORS = {"agent_loop": "#dd8452", "training": "#4c72b0"}


def process_timeline(runs: dict[str, list[dict]], paused: Sequence[str] = ("colocate_async",)) -> Figure:
    """One panel per run (`{name: events}`), one row per process and kind of work (`process_activity`), each on
    its own clock (seconds from the run's first rollout submission).

    Generation rows: the engine batches, coloured by the weight version that ran them. Agent-loop rows: the
    sessions' own work (before the first request, after the last answer). Training row: the stages (blue), the
    waits for data or inline generation (light orange, `sample` / sync `rollout`) and the weight syncs (red).
    In the runs named in `paused` the grey windows are the rollout paused: from the end of `sample` (the abort)
    to the end of `update_weights` (the resume).
    """
    panels = {name: process_activity(ev) for name, ev in runs.items()}
    versions = max([int(iv[2]) for rows in panels.values() for r in rows if r["kind"] == "generation"
                    for iv in r["intervals"]] + [0])
    cmap = colormaps["viridis"]
    shades = [cmap(0.9 * v / max(1, versions)) for v in range(versions + 1)]
    height = sum(0.55 * len(rows) + 0.9 for rows in panels.values())
    fig = Figure(figsize=(10, height))
    axes = fig.subplots(len(panels), 1, squeeze=False, gridspec_kw={"height_ratios": [len(r) for r in panels.values()]})
    for ax, (name, rows) in zip(axes[:, 0], panels.items()):
        starts = [e["t_start"] for e in runs[name] if e.get("kind") == "stage" and e["stage"] == "rollout"]
        t0 = min(starts) if starts else min(iv[0] for r in rows for iv in r["intervals"])
        for y, r in enumerate(rows):
            for a, b, tag in r["intervals"]:
                if r["kind"] == "generation":
                    color = shades[int(tag)]
                else:
                    color = _KIND_COLORS[r["kind"]]
                ax.barh(y, max(b - a, 0.002), left=a - t0, height=0.7, color=color, linewidth=0)
            for a, b, _ in r.get("waits", []):
                ax.barh(y, max(b - a, 0.002), left=a - t0, height=0.25, color="#f4c28f", linewidth=0)
            for a, b, _ in r.get("syncs", []):
                ax.barh(y, max(b - a, 0.004), left=a - t0, height=0.7, color="tab:red", linewidth=0)
        if name in paused:
            training = rows[-1]
            ends = sorted(b for a, b, stage in training["waits"] if stage == "sample")
            for end, (_, sync_end, _) in zip(ends, training["syncs"]):
                ax.axvspan(end - t0, sync_end - t0, color="0.9", zorder=0)
        ax.set_yticks(range(len(rows)), [r["label"] for r in rows], fontsize=7)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.set_title(f"{name}: {len({r['pid'] for r in rows})} processes", fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("seconds since the first rollout submission", fontsize=8)
    handles = [Line2D([0], [0], color=shades[v], lw=6) for v in range(versions + 1)]
    handles += [Line2D([0], [0], color=c, lw=6) for c in (_KIND_COLORS["agent_loop"], _KIND_COLORS["training"],
                                                          "#f4c28f", "tab:red")]
    labels = [f"engine batch, weights v{v}" for v in range(versions + 1)]
    labels += ["agent-loop work", "training stages", "waiting for data / inline rollout", "weight sync"]
    fig.legend(handles, labels, fontsize=7, loc="upper right", ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / height))
    return fig
