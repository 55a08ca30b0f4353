"""`minirl trace show`: one step as a table of stages x fields (no verl counterpart).

Each cell says what a stage did to a field (`CELL_KEY`): added it, changed it, removed it, read it,
or merely carried it. `show_table` returns the table as plain data (a notebook renders it as HTML:
`minirl.notebook.stage_field_table`); `format_show` is the text the CLI prints.

`minirl trace show RUN --ranks` prints the other side of each stage instead: what every worker rank
did with its share (`rank_table` / `format_ranks`, from the `worker` events of the part files
`trace.rank<r>.jsonl`, see `minirl.trace.worker_trace`): dispatch and collect, local rows and shapes,
the engine's micro-batches and the collectives that ran, and each rank's mesh coordinates and
parameter shards from `init_model`.

    from minirl.trace import query, show
    ev = query.load("grpo")
    t = show.show_table(ev, step=1)         # {"step", "stages": [...], "fields": [{name, storage, shape, dtype, cells}]}
    print(show.format_show(ev, step=1))
"""

from __future__ import annotations

from minirl.trace.query import check_step, field_records, run_info, stage_events, steps

__all__ = ["CELL_KEY", "cell", "format_ranks", "format_show", "pipeline_schedule", "rank_calls", "rank_layouts",
           "rank_table", "show_table",
           "worker_events"]

CELL_KEY = "+ added   ~ changed   - removed   r read   . present"


def cell(ev: dict, name: str) -> str:
    """One table cell: what stage event `ev` did to field `name` (see `CELL_KEY`)."""
    if name in ev.get("added", []):
        return "+"
    if name in ev.get("changed", []):
        return "~"
    if name in ev.get("removed", []):
        return "-"
    present = name in field_records(ev)
    if name in ev.get("read", []):
        return "r"
    return "." if present else ""


def show_table(events: list[dict], step: int) -> dict:
    """Stages x fields for one step: `{"step", "stages": [...], "fields": [{name, storage, shape, dtype, cells}]}`."""
    check_step(events, step)
    evs = stage_events(events, step)
    stages = [{"stage": e["stage"], "role": e.get("role"), "rank": e.get("rank"), "wall_s": e.get("wall_s"),
               "device": e.get("device"), "versions": e.get("versions", {}), "status": e.get("status", "ok")}
              for e in evs]
    names: dict = {}
    for e in evs:
        for n in list(field_records(e)) + e.get("removed", []) + e.get("read", []):
            names.setdefault(n, None)
    rows = []
    for n in names:
        rec = {}
        for e in evs:
            rec = field_records(e).get(n) or rec
        rows.append({"name": n, "storage": rec.get("storage", "?"), "shape": rec.get("shape"),
                     "dtype": rec.get("dtype", "?"), "cells": [cell(e, n) for e in evs]})
    return {"step": step, "stages": stages, "fields": rows}


_ABBR = {"actor": "a", "rollout": "ro", "ref": "rf", "critic": "c"}


def _versions_str(v: dict) -> str:
    return " ".join(f"{_ABBR[k]}{v[k]}" for k in _ABBR if k in v) or "-"


def format_show(events: list[dict], step: int | None = None) -> str:
    """The text of `minirl trace show`: a header, then one stages x fields table per step."""
    info = run_info(events)
    lines = [(f"run {info.get('run_id', '?')}  adv_estimator={info.get('adv_estimator', '?')}  "
              f"rollout={info.get('rollout', '?')}  level={info.get('level', '?')}  schema={info.get('schema', '?')}  "
              f"config {info.get('config_fingerprint', '?')}"),
             f"cells: {CELL_KEY}   weight versions at stage start: a=actor ro=rollout rf=ref c=critic"]
    for s in ([step] if step is not None else steps(events)):
        t = show_table(events, s)
        heads = [x["stage"] for x in t["stages"]]
        w = [max(len(h), 7) for h in heads]
        left = f"{'field':<22} {'storage':<16} {'shape':<10} {'dtype':<8}"
        lines += ["", f"step {s}", left + " " + " ".join(h.ljust(k) for h, k in zip(heads, w))]
        for r in t["fields"]:
            shape = "x".join(map(str, r["shape"])) if r["shape"] else ("-" if r["shape"] is not None else "?")
            row = f"{r['name'][:22]:<22} {r['storage']:<16} {shape:<10} {r['dtype'][:8]:<8}"
            lines.append(row + " " + " ".join(c.center(k) for c, k in zip(r["cells"], w)))
        pad = " " * len(left)
        lines.append(pad + " " + " ".join(f"{x['role'] or ''}".ljust(k) for x, k in zip(t["stages"], w)) + "  role")
        lines.append(pad + " " + " ".join(f"{x['wall_s']:.3f}".ljust(k) for x, k in zip(t["stages"], w)) + "  wall s")
        lines.append(pad + " " + " ".join(_versions_str(x["versions"]).ljust(k) for x, k in zip(t["stages"], w))
                     + "  versions")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- per rank
def worker_events(events: list[dict]) -> list[dict]:
    """The per-rank `worker` events (one per registered call on a worker), in the order the calls started."""
    return sorted((e for e in events if e.get("kind") == "worker"), key=lambda e: (e.get("t_start", 0.0), e["rank"]))


def _within(ev: dict, stage: dict) -> bool:
    t0 = stage.get("t_start", 0.0)
    return t0 <= ev.get("t_start", -1.0) <= t0 + stage.get("wall_s", 0.0)


def _first_proto(ev: dict) -> dict:
    return next((x for x in ev.get("inputs", []) if x.get("type") == "DataProto"), {})


def _ranks(op: dict) -> str:
    ranks = op.get("group_ranks")
    return "[" + ",".join(map(str, ranks)) + "]" if ranks else str(op.get("group_size"))


def _collectives(note: dict) -> str:
    parts = []
    for phase_name, ops in note.get("collectives", {}).items():
        parts += [f"{phase_name}:{o['op']}@{_ranks(o)}x{o['calls']}" for o in ops]
    return " ".join(parts) or "-"


def rank_table(events: list[dict], step: int) -> list[dict]:
    """One row per worker call of `step`'s stages: which stage, rank, dispatch, local rows, micro-batches.

    A worker call belongs to the stage whose span holds its start (the controller's span opens before
    the dispatch and closes after the collect). `passes` summarises each engine pass:
    `kind: micro-batches x rows (tokens) | collectives`, and with a pipeline `| pp stage s/P: F0 F1 B0 ...`.
    """
    check_step(events, step)
    stages = stage_events(events, step)
    rows = []
    for ev in worker_events(events):
        stage = next((s for s in stages if _within(ev, s)), None)
        if stage is None:
            continue
        proto = _first_proto(ev)
        passes = [f"{n['pass']}: {n.get('micro_batches', '?')} x {n.get('sizes', '?')} "
                  f"(tokens {n.get('tokens', '?')}) | {_collectives(n)}{_pipeline(n)}" for n in ev.get("passes", [])]
        rows.append({"stage": stage["stage"], "rank": ev["rank"], "method": ev["method"], "dispatch": ev.get("dispatch"),
                     "dp_rank": ev.get("dp_rank"), "collected": ev.get("collected"), "rows": proto.get("rows"),
                     "input_ids": proto.get("batch", {}).get("input_ids"), "passes": passes,
                     "wall_s": ev.get("wall_s"), "_order": (stages.index(stage), ev["rank"], ev.get("t_start", 0.0))})
    rows.sort(key=lambda r: r.pop("_order"))
    return rows


def _pipeline(note: dict) -> str:
    """` | pp stage 0/2: F0 F1 B0 ...`: a pipeline stage's schedule, in the order it ran (empty without one)."""
    pipe = note.get("pipeline")
    if not pipe or pipe.get("pp_size", 1) <= 1:
        return ""
    ops = " ".join(f"{o['op'][0].upper()}{o['micro_batch']}" for o in pipe.get("ops", []))
    return f" | pp stage {pipe['pp_rank']}/{pipe['pp_size']}: {ops}"


def rank_calls(events: list[dict], method: str, call: int = 0) -> dict[int, dict]:
    """rank -> that rank's `call`-th call of worker `method` (0: the first), in the order each rank ran them.

    Without the controller's stage spans (a trace of worker calls only, as `minirl.notebook.layouts`
    writes) this is how a rank's share of one call is found.
    """
    per_rank: dict[int, list] = {}
    for ev in worker_events(events):
        if ev["method"] == method:
            per_rank.setdefault(ev["rank"], []).append(ev)
    return {rank: sorted(evs, key=lambda e: e.get("t_start", 0.0))[call] for rank, evs in sorted(per_rank.items())
            if len(evs) > call}


def pipeline_schedule(events: list[dict], method: str = "update_actor", call: int = 0, pass_kind: str = "train"
                      ) -> dict[int, dict]:
    """rank -> its pipeline stage's schedule in one call: ops with start/end in seconds since the first op of any rank.

    Each value: `pp_rank`, `pp_size`, `num_micro_batches`, `ops` (`op`, `micro_batch`, `start_s`, `end_s`),
    `busy_s` (time in forward and backward), `span_s` (first op of any rank to last op of any rank) and
    `idle` (`1 - busy_s / span_s`: this stage's share of the span spent waiting, the measured bubble plus
    any imbalance between stages). Empty when the call ran no pipeline (or one of a single stage).
    """
    notes = {}
    for rank, ev in rank_calls(events, method, call).items():
        note = next((p for p in ev.get("passes", []) if p.get("pass") == pass_kind
                     and p.get("pipeline", {}).get("pp_size", 1) > 1), None)
        if note is not None:
            notes[rank] = note["pipeline"]
    if not notes:
        return {}
    t0 = min(o["t_start"] for n in notes.values() for o in n["ops"])
    t1 = max(o["t_end"] for n in notes.values() for o in n["ops"])
    span = max(t1 - t0, 1e-9)
    return {rank: {"pp_rank": n["pp_rank"], "pp_size": n["pp_size"], "tp_rank": n.get("tp_rank"),
                   "dp_rank": n.get("dp_rank"), "num_micro_batches": n["num_micro_batches"],
                   "ops": [{"op": o["op"], "micro_batch": o["micro_batch"], "start_s": o["t_start"] - t0,
                            "end_s": o["t_end"] - t0} for o in n["ops"]],
                   "busy_s": n["busy_s"], "span_s": span, "idle": 1.0 - n["busy_s"] / span}
            for rank, n in notes.items()}


def rank_layouts(events: list[dict]) -> list[dict]:
    """Every engine each rank built (`init_model`): mesh, coordinates, dp rank, reporting, parameter shards."""
    out = []
    for ev in worker_events(events):
        for layout in ev.get("engines", []):
            out.append({"rank": ev["rank"], "role": ev.get("role"), **layout})
    return sorted(out, key=lambda lay: (lay["rank"], str(lay.get("role")), bool(lay.get("forward_only"))))


def _shape(x) -> str:
    return "x".join(map(str, x)) if x else "-"


def format_ranks(events: list[dict], step: int | None = None) -> str:
    """The text of `minirl trace show RUN --ranks`: each rank's layout, then its share of every stage."""
    evs = worker_events(events)
    if not evs:
        return ("this trace has no per-rank worker events (recorded before they existed, or with trace.level=off); "
                "re-run to get trace.rank<r>.jsonl next to trace.jsonl")
    lines = ["layouts (init_model): rank  role  engine  mesh  coords  dp_rank  reports  q_proj / embed_tokens shards"]
    for lay in rank_layouts(events):
        params = lay.get("params", {})
        q = next((v for k, v in params.items() if k.endswith("layers.0.self_attn.q_proj.weight")), {})
        emb = next((v for k, v in params.items() if k.endswith("embed_tokens.weight")), {})
        mesh = ",".join(f"{k}={v}" for k, v in lay.get("mesh", {}).items()) or "-"
        coords = ",".join(f"{k}={v}" for k, v in lay.get("coords", {}).items()) or "-"
        lines.append(f"  {lay['rank']:<4} {lay.get('role')!s:<18} {lay.get('engine', '?'):<30} {mesh:<18} "
                     f"{coords:<18} {lay.get('dp_rank', '?')!s:<3} {'yes' if lay.get('is_collect') else 'no ':<4} "
                     f"{_shape(q.get('local'))} of {_shape(q.get('global'))} / "
                     f"{_shape(emb.get('local'))} of {_shape(emb.get('global'))}")
    for s in ([step] if step is not None else steps(events)):
        lines += ["", f"step {s}", ("  stage            rank method                  dispatch        dp collect rows "
                                     "input_ids  engine passes")]
        for r in rank_table(events, s):
            collect = "yes" if r["collected"] else "no"
            head = (f"  {r['stage']:<16} {r['rank']:<4} {r['method'][:23]:<23} {str(r['dispatch'])[:15]:<15} "
                    f"{'-' if r['dp_rank'] is None else r['dp_rank']!s:<2} {collect:<7} {r['rows'] or '-'!s:<4} "
                    f"{_shape(r['input_ids']):<10}")
            lines.append(head + ("  " + r["passes"][0] if r["passes"] else ""))
            lines += [" " * len(head) + "  " + p for p in r["passes"][1:]]
    return "\n".join(lines)
