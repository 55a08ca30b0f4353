"""HTML tables for the chapters and labs: any rows, a step's stages, the tracer's stages x fields table.

No verl counterpart. The rows come from the trace (`minirl.trace`): this module only lays them out
for a notebook (and the static site, which renders a cell's HTML as it is):

    show_table(rows, columns=[...], caption="...")    # any list of dicts
    show_table(stage_rows(run.events, step=1))        # one row per stage of step 1
    stage_field_table(run.events, step=1)             # `minirl trace show`'s fields x stages table
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

__all__ = ["show_table", "stage_field_table", "stage_rows"]


def _cell(v) -> str:
    if isinstance(v, float):
        v = f"{v:.4g}"
    elif isinstance(v, (list, tuple)):
        v = "[" + ", ".join(str(x) for x in v) + "]"
    return html.escape(str(v))


def show_table(rows: Sequence[dict], columns: Sequence[str] | None = None, caption: str | None = None):
    """An HTML table of `rows` (dicts) for a notebook; `columns` picks and orders the keys.

    Returns an `IPython.display.HTML` object: make it the last expression of a cell (or `display` it).
    """
    from IPython.display import HTML

    rows = list(rows)
    if columns is None:
        columns = []
        for r in rows:
            columns += [k for k in r if k not in columns]
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r.get(c, ''))}</td>" for c in columns) + "</tr>" for r in rows)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return HTML(f'<table class="minirl-table">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


def _short(names: Iterable[str], limit: int = 6) -> str:
    names = [n for n in names if not n.startswith("__")]
    return ", ".join(names[:limit]) + (f" (+{len(names) - limit})" if len(names) > limit else "")


def stage_rows(events: list[dict], step: int | None = 1) -> list[dict]:
    """One row per stage: step, stage, role, wall time (ms), the fields it added, and the weight versions."""
    from minirl.trace.query import stage_events

    rows = []
    for e in stage_events(events, step):
        v = e.get("versions") or {}
        rows.append({"step": e["step"], "stage": e["stage"], "role": e.get("role", ""),
                     "wall_ms": round(1000 * float(e.get("wall_s", 0.0)), 1),
                     "added": _short(e.get("added", [])),
                     "actor v": v.get("actor", ""), "rollout v": v.get("rollout", "")})
    return rows


def stage_field_table(events: list[dict], step: int = 1, fields: Sequence[str] | None = None):
    """The tracer's stages x fields table of one step (`minirl trace show`) as HTML.

    Cells: `+` added, `~` changed, `-` removed, `r` read, `.` present (`minirl.trace.show.CELL_KEY`).
    `fields` keeps only those rows (default: every field except `__private__` ones).
    """
    from minirl.trace.show import CELL_KEY
    from minirl.trace.show import show_table as trace_table

    t = trace_table(events, step)
    heads = [s["stage"] for s in t["stages"]]
    rows = []
    for r in t["fields"]:
        if (fields is not None and r["name"] not in fields) or (fields is None and r["name"].startswith("__")):
            continue
        row = {"field": r["name"], "storage": r["storage"], "shape": r["shape"]}
        row.update({h: c for h, c in zip(heads, r["cells"])})
        rows.append(row)
    return show_table(rows, columns=["field", "storage", "shape", *heads],
                      caption=f"step {step}, fields x stages. {CELL_KEY}")
