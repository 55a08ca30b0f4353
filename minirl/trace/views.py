"""Reading a trace: per-step tables, field lineage, run-to-run diffs (plain dicts and lists, no pandas).

What `minirl trace show|lineage|diff` print, as a Python API for notebooks:

    from minirl.trace import views
    ev = views.load("traces/grpo")                 # a trace dir, .jsonl, run dir or a name in traces/
    views.show_table(ev, step=1)                   # stages x fields, one step
    views.lineage(ev, "advantages")                # producer, consumers, shape, mask, storage, lifetime
    views.diff(views.load("grpo"), views.load("ppo_gae"))   # stages, branches and fields that differ

Each `format_*` function turns the structure into the text the CLI prints. No verl counterpart: this
is the question chapter 03 asks of every field ("who makes it, who reads it, what shape, what mask,
where it lives, how long") answered from a recorded run instead of from reading code.
"""

from __future__ import annotations

from minirl.trace.schema import read_trace, resolve_run
from minirl.trace.stages import STAGE_ORDER, describe_stage, stage_info

CELL_KEY = "+ added   ~ changed   - removed   r read   . present"


class TraceQueryError(ValueError):
    """A question the trace cannot answer (unknown field or step); the message lists what exists."""


def load(run, run_id: str | None = None, traces_root=None) -> list[dict]:
    """Events of `run`: a trace dir, a `.jsonl` file, a run dir (with `trace/`) or a name in `traces/`."""
    return read_trace(resolve_run(run, traces_root), run_id=run_id)


# ------------------------------------------------------------------------------------------ basics
def run_info(events: list[dict]) -> dict:
    """The (last) `run_start` event, or {} when the trace has none."""
    starts = [e for e in events if e.get("kind") == "run_start" and not e.get("part")]
    return starts[-1] if starts else {}


def stage_events(events: list[dict], step: int | None = None) -> list[dict]:
    """The `stage` events (of one step when `step` is given), in the order they were written."""
    return [e for e in events if e.get("kind") == "stage" and (step is None or e.get("step") == step)]


def steps(events: list[dict]) -> list[int]:
    """The steps that have stage events, ascending."""
    return sorted({e["step"] for e in stage_events(events)})


def field_records(ev: dict) -> dict:
    """`{name: record}` of the fields present after a stage (records are {} at level `stages`)."""
    if "fields" in ev:
        return ev["fields"]
    return {n: {} for n in ev.get("present", [])}


def all_fields(events: list[dict]) -> list[str]:
    """Every field name the trace mentions, in order of first appearance."""
    seen: dict = {}
    for ev in stage_events(events):
        for name in list(field_records(ev)) + ev.get("removed", []) + ev.get("read", []):
            seen.setdefault(name, None)
    return list(seen)


def stage_rank(stage: str) -> int:
    """Position of `stage` in a training step (`STAGE_ORDER`); unknown stages last."""
    return STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER)


def _training_first(stages) -> list[str]:
    """Distinct stages, `validate` last (a validation batch is never trained on)."""
    out = list(dict.fromkeys(stages))
    return [s for s in out if s != "validate"] + [s for s in out if s == "validate"]


def _check_step(events, step):
    if step is not None and step not in steps(events):
        raise TraceQueryError(f"no step {step} in this trace; steps recorded: {steps(events)}")


# ------------------------------------------------------------------------------------------- show
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
    _check_step(events, step)
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


# ---------------------------------------------------------------------------------------- lineage
def _dims(fields: dict) -> dict:
    """Named sizes of this batch: B, response_length, prompt_length (from responses/prompts/input_ids)."""
    dims = {}
    for rec in fields.values():
        if rec.get("storage") == "batch" and rec.get("shape"):
            dims["B"] = rec["shape"][0]
            break
    for key, field in (("response_length", "responses"), ("prompt_length", "prompts")):
        shape = (fields.get(field) or {}).get("shape")
        if shape and len(shape) == 2:
            dims[key] = shape[1]
    return dims


def symbolic_shape(shape, fields: dict) -> str:
    """`[32, 8]` -> `(B, response_length)` using the sizes of the batch the field lives in."""
    if shape is None:
        return "?"
    if not shape:
        return "() (run-level, no batch dimension)"
    d = _dims(fields)
    names = []
    for i, n in enumerate(shape):
        if i == 0 and n == d.get("B"):
            names.append("B")
        elif n == d.get("response_length"):
            names.append("response_length")
        elif n == d.get("prompt_length"):
            names.append("prompt_length")
        elif "prompt_length" in d and "response_length" in d and n == d["prompt_length"] + d["response_length"]:
            names.append("prompt_length + response_length")
        else:
            names.append(str(n))
    return "(" + ", ".join(names) + ")"


def _mask_of(name: str, rec: dict, fields: dict) -> str:
    if name.endswith("mask"):
        return "it is a mask (1 = valid token)"
    if rec.get("summary", {}).get("masked_by"):
        return rec["summary"]["masked_by"]
    shape = rec.get("shape")
    for m in ("response_mask", "attention_mask"):
        if shape and len(shape) == 2 and (fields.get(m) or {}).get("shape") == shape:
            return m
    return "none (one value per sample)" if shape and len(shape) == 1 else "none"


def _stage_ref(stage: str) -> dict:
    info = stage_info(stage)
    return {"stage": stage, "minirl": info.minirl, "calls": info.calls,
            "verl": [f"{n} {w}" for n, w in info.verl], "text": describe_stage(stage)}


def _batch_size_note(info: dict, dims: dict) -> str:
    cfg = info.get("config") or {}
    try:
        tbs = cfg["data"]["train_batch_size"]
        n = cfg["actor_rollout_ref"]["rollout"]["n"]
    except (KeyError, TypeError):
        return ""
    if dims.get("B") == tbs * n:
        return f"B = {dims['B']} = data.train_batch_size {tbs} x actor_rollout_ref.rollout.n {n}"
    return ""


def lineage(events: list[dict], field: str) -> dict:
    """Producer, consumers, shape, mask, storage and lifetime of `field`, from what the run did.

    Returns plain data: `producers`/`consumers`/`changed_by`/`removed_by` (stage references with the
    minirl method and verl symbol), `storage`, `shape`, `shape_symbolic`, `dims`, `dtype`, `device`,
    `mask`, `lifetime` (text), `summaries` (training step -> summary where it was added) and `per_step`:
    `{step: {"added": [stage], "read": [stage], "changed": ["stage (why)"], "removed": [stage],
    "present": [stage]}}` (validation stages included, named `validate`).
    """
    known = all_fields(events)
    if field not in known:
        raise TraceQueryError(f"no field {field!r} in this trace; fields: {', '.join(sorted(known))}")
    per_step: dict = {}
    producers, consumers, changers, removers, born = [], [], [], [], None
    for ev in stage_events(events):
        st = per_step.setdefault(ev["step"], {"added": [], "read": [], "changed": [], "removed": [], "present": []})
        stage = ev["stage"]
        if field in ev.get("added", []):
            st["added"].append(stage)
            producers.append(stage)
            if born is None or (born["stage"] == "validate" and stage != "validate"):
                born = ev
        if field in ev.get("read", []):
            st["read"].append(stage)
            consumers.append(stage)
        if field in ev.get("changed", []):
            st["changed"].append(f"{stage} ({ev.get('changes', {}).get(field, 'values')})")
            changers.append(stage)
        if field in ev.get("removed", []):
            st["removed"].append(stage)
            removers.append(stage)
        if field in field_records(ev):
            st["present"].append(stage)
    per_step = {s: v for s, v in per_step.items() if any(v.values())}
    ref = born or next((e for e in stage_events(events) if field in field_records(e)), None) \
        or next(e for e in stage_events(events) if field in e.get("read", []) + e.get("removed", []))
    fields = field_records(ref)
    rec = fields.get(field) or ref.get("removed_fields", {}).get(field, {})
    dims = _dims(fields)
    out = {"field": field, "run_id": ref.get("run_id"),
           "producers": [_stage_ref(s) for s in _training_first(producers)],
           "consumers": [_stage_ref(s) for s in _training_first(consumers)],
           "changed_by": [_stage_ref(s) for s in _training_first(changers)],
           "removed_by": [_stage_ref(s) for s in _training_first(removers)],
           "storage": rec.get("storage", "?"), "shape": rec.get("shape"),
           "shape_symbolic": symbolic_shape(rec.get("shape"), fields) if rec else "?", "dims": dims,
           "batch_size_note": _batch_size_note(run_info(events), dims),
           "dtype": rec.get("dtype", "?"), "device": rec.get("device", "?"),
           "mask": _mask_of(field, rec, fields) if rec else "?",
           "per_step": per_step,
           "summaries": {e["step"]: e["fields"][field]["summary"] for e in stage_events(events)
                         if field in e.get("added", []) and "summary" in e.get("fields", {}).get(field, {})
                         and e["stage"] != "validate"}}
    out["lifetime"] = _lifetime(field, per_step)
    return out


def _lifetime(field: str, per_step: dict) -> str:
    train = {s: v for s, v in per_step.items()
             if any(not p.startswith("validate") for p in v["present"] + v["read"] + v["removed"])}
    if not train:
        return "validation only: lives in the validation batch for one `validate` stage"
    s0 = min(train)
    v = {k: [x for x in vals if not x.startswith("validate")] for k, vals in train[s0].items()}
    born = v["added"][0] if v["added"] else None
    start = f"added by `{born}`" if born else "already in the batch when the step began"
    reads = v["read"]
    last = f", last read by `{reads[-1]}`" if reads else ", read by no stage"
    if v["removed"]:
        end = f", removed by `{v['removed'][-1]}`"
    else:
        end = ", then dropped with the batch at the end of the step (the next step samples a new batch)"
    span = f"steps {min(train)}-{max(train)}" if len(train) > 1 else f"step {s0}"
    return f"one step at a time ({span}): {start}{last}{end}"


def format_lineage(lin: dict) -> str:
    """The text of `minirl trace lineage`."""
    def refs(items, none="-"):
        return "\n          ".join(r["text"] for r in items) or none

    lines = [f"field     {lin['field']}   (run {lin['run_id']})",
             f"producer  {refs(lin['producers'], 'none traced: it was in the batch the first stage received (the dataloader)')}",
             f"consumers {refs(lin['consumers'])}",
             f"changed   {refs(lin['changed_by'])}",
             f"removed   {refs(lin['removed_by'])}",
             f"storage   {lin['storage']}",
             (f"shape     {lin['shape']} = {lin['shape_symbolic']}"
              + ("   " + lin["batch_size_note"] if lin["batch_size_note"] else "")
              if lin["shape"] is not None else "shape     not recorded (trace.level=stages keeps names only)"),
             f"dtype     {lin['dtype']} on {lin['device']}",
             f"mask      {lin['mask']}",
             f"lifetime  {lin['lifetime']}"]
    for s, summ in lin["summaries"].items():
        if summ:
            lines.append(f"summary   step {s}: " + " ".join(f"{k}={v}" for k, v in summ.items()))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- diff
def _flatten(d, prefix="") -> dict:
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _is_path(v) -> bool:
    return isinstance(v, str) and (v.startswith(("/", "~")) or v == "<path>")


def _stage_sequence(events) -> list[str]:
    """The stages of one training step (the first step >= 1 that has an update), else of all events."""
    for s in steps(events):
        names = [e["stage"] for e in stage_events(events, s)]
        if s >= 1 and "update_actor" in names:
            return [n for n in names if n != "validate"]
    return list(dict.fromkeys(e["stage"] for e in stage_events(events)))


def _first_record(events, stage, field):
    for e in stage_events(events):
        if e["stage"] == stage and field in field_records(e):
            return field_records(e)[field]
    return None


def _roles(lin_items):
    return [r["stage"] for r in lin_items]


def diff(a: list[dict], b: list[dict]) -> dict:
    """What differs between two runs: config keys, stages (and the branch that adds them), fields,
    who produces/reads each field, field shapes/dtypes/devices, weight versions and stage extras."""
    ia, ib = run_info(a), run_info(b)
    ca, cb = _flatten(ia.get("config")), _flatten(ib.get("config"))
    config = [(k, ca.get(k), cb.get(k)) for k in sorted(set(ca) | set(cb))
              if ca.get(k) != cb.get(k) and not (_is_path(ca.get(k)) and _is_path(cb.get(k)))]
    sa, sb = _stage_sequence(a), _stage_sequence(b)
    all_a = {e["stage"] for e in stage_events(a)}
    all_b = {e["stage"] for e in stage_events(b)}
    only_a, only_b = sorted(all_a - all_b, key=stage_rank), sorted(all_b - all_a, key=stage_rank)
    branches = [{"stage": s, "in": side, "runs_when": stage_info(s).runs_when}
                for side, ss in (("a", only_a), ("b", only_b)) for s in ss]
    fa, fb = all_fields(a), all_fields(b)
    fields = {"only_a": [f for f in fa if f not in fb], "only_b": [f for f in fb if f not in fa], "differ": []}
    flow = []
    for f in [f for f in fa if f in fb]:
        la, lb = lineage(a, f), lineage(b, f)
        for key in ("producers", "consumers", "changed_by", "removed_by"):
            if _roles(la[key]) != _roles(lb[key]):
                flow.append({"field": f, "what": key, "a": _roles(la[key]), "b": _roles(lb[key])})
        for stage in [s for s in STAGE_ORDER if s in all_a & all_b]:
            ra, rb = _first_record(a, stage, f), _first_record(b, stage, f)
            if not ra or not rb:
                continue
            for key in ("storage", "shape", "dtype", "device"):
                if ra.get(key) != rb.get(key):
                    fields["differ"].append({"field": f, "stage": stage, "what": key, "a": ra.get(key), "b": rb.get(key)})
            # one stage is enough to show a field's shape/dtype difference
            if any(d["field"] == f for d in fields["differ"]):
                break
    return {"a": _label(ia), "b": _label(ib), "config": config,
            "stages": {"a": sa, "b": sb, "only_a": only_a, "only_b": only_b}, "branches": branches,
            "fields": fields, "flow": flow, "versions": _version_diff(a, b), "extra": _extra_diff(a, b),
            "roles": [{"stage": s, "a": ra, "b": rb} for s in sorted(all_a & all_b, key=stage_rank)
                      if (ra := _stage_roles(a, s)) != (rb := _stage_roles(b, s))]}


def _label(info: dict) -> dict:
    return {k: info.get(k) for k in ("run_id", "adv_estimator", "rollout", "level", "config_fingerprint")}


def _stage_roles(events, stage) -> list:
    return sorted({f"{e.get('role')}:{e.get('rank')}" for e in stage_events(events) if e["stage"] == stage})


def version_history(events: list[dict]) -> list[dict]:
    """Per stage event: step, stage and the weight versions at its start (what chapter 08 tabulates)."""
    return [{"step": e["step"], "stage": e["stage"], **e.get("versions", {})} for e in stage_events(events)]


def _version_diff(a, b) -> dict:
    ma = sorted({k for e in stage_events(a) for k in e.get("versions", {})})
    mb = sorted({k for e in stage_events(b) for k in e.get("versions", {})})
    per_stage = []
    for stage in [s for s in STAGE_ORDER if s in {e["stage"] for e in stage_events(a)} & {e["stage"] for e in stage_events(b)}]:
        va = [(e["step"], e.get("versions", {})) for e in stage_events(a) if e["stage"] == stage]
        vb = [(e["step"], e.get("versions", {})) for e in stage_events(b) if e["stage"] == stage]
        common = sorted(set(ma) & set(mb))
        pa = [(s, {k: v.get(k) for k in common}) for s, v in va]
        pb = [(s, {k: v.get(k) for k in common}) for s, v in vb]
        if pa != pb:
            per_stage.append({"stage": stage, "a": pa, "b": pb})
    pva = [e.get("extra", {}).get("policy_versions") for e in stage_events(a) if e["stage"] == "sample"]
    pvb = [e.get("extra", {}).get("policy_versions") for e in stage_events(b) if e["stage"] == "sample"]
    return {"models_a": ma, "models_b": mb, "models_only_a": [m for m in ma if m not in mb],
            "models_only_b": [m for m in mb if m not in ma], "per_stage": per_stage,
            "sample_policy_versions": {"a": pva, "b": pvb} if pva != pvb else None}


def _is_count(v) -> bool:
    """Ints, strings, bools and lists of them: stage extras that describe structure, not timing."""
    if isinstance(v, list):
        return all(_is_count(x) for x in v)
    return isinstance(v, (int, str, bool)) or v is None


def _first_extra(events, stage) -> dict:
    evs = [e for e in stage_events(events) if e["stage"] == stage]
    trained = [e for e in evs if e["step"] >= 1]
    return (trained or evs)[0].get("extra", {}) if evs else {}


def _extra_diff(a, b) -> list[dict]:
    """Per common stage: extra keys only one run reports, and count-like extras whose values differ
    (first training step), e.g. `mini_batch_size_per_rank` [16] vs [8] on 2 ranks."""
    out = []
    for stage in sorted({e["stage"] for e in stage_events(a)} & {e["stage"] for e in stage_events(b)}, key=stage_rank):
        ka = sorted({k for e in stage_events(a) if e["stage"] == stage for k in e.get("extra", {})})
        kb = sorted({k for e in stage_events(b) if e["stage"] == stage for k in e.get("extra", {})})
        xa, xb = _first_extra(a, stage), _first_extra(b, stage)
        values = [(k, xa[k], xb[k]) for k in ka if k in xb and k in xa and "timing" not in k
                  and _is_count(xa[k]) and _is_count(xb[k]) and xa[k] != xb[k]]
        if ka != kb or values:
            out.append({"stage": stage, "only_a": [k for k in ka if k not in kb],
                        "only_b": [k for k in kb if k not in ka], "values": values})
    return out


def format_diff(d: dict, name_a: str = "A", name_b: str = "B") -> str:
    """The text of `minirl trace diff`."""
    def lab(x):
        return f"adv_estimator={x['adv_estimator']} rollout={x['rollout']} run {x['run_id']}"

    L = [f"A = {name_a}: {lab(d['a'])}", f"B = {name_b}: {lab(d['b'])}", ""]
    L.append("config keys that differ:" if d["config"] else "config: same keys and values (paths aside)")
    L += [f"  {k}: {va!r} -> {vb!r}" for k, va, vb in d["config"][:40]]
    if len(d["config"]) > 40:
        L.append(f"  ... {len(d['config']) - 40} more")
    st = d["stages"]
    L += ["", "stages of one training step:", f"  A: {' -> '.join(st['a'])}", f"  B: {' -> '.join(st['b'])}"]
    for br in d["branches"]:
        L.append(f"  only in {br['in'].upper()}: {describe_stage(br['stage'])}\n      runs when {br['runs_when']}")
    f = d["fields"]
    L += ["", "fields:", f"  only in A: {', '.join(f['only_a']) or '-'}", f"  only in B: {', '.join(f['only_b']) or '-'}"]
    for x in f["differ"]:
        L.append(f"  {x['field']} at {x['stage']}: {x['what']} {x['a']} -> {x['b']}")
    L += ["", "who produces / reads / changes a field that both runs have:"]
    L += [f"  {x['field']}: {x['what']} A={x['a'] or '-'} B={x['b'] or '-'}" for x in d["flow"]] or ["  same"]
    v = d["versions"]
    L += ["", f"weight versions tracked: A={v['models_a']} B={v['models_b']}"]
    for x in v["per_stage"]:
        L.append(f"  {x['stage']}: A={x['a']} B={x['b']}")
    if v["sample_policy_versions"]:
        L.append(f"  policy versions that sampled each step: A={v['sample_policy_versions']['a']} "
                 f"B={v['sample_policy_versions']['b']}")
    if d["extra"]:
        L += ["", "stage extras that differ (first training step):"]
        for x in d["extra"]:
            if x["only_a"] or x["only_b"]:
                L.append(f"  {x['stage']}: keys only in A {x['only_a'] or '-'}; only in B {x['only_b'] or '-'}")
            L += [f"  {x['stage']}: {k} A={va} B={vb}" for k, va, vb in x["values"]]
    if d["roles"]:
        L += ["", "workers that ran a stage:"]
        L += [f"  {x['stage']}: A={x['a']} B={x['b']}" for x in d["roles"]]
    return "\n".join(L)


# --------------------------------------------------------------------------------------- timeline
def timeline(events: list[dict], step: int) -> list[dict]:
    """One step's stages as `{stage, role, start_s, wall_s, added}` with start relative to the step's first stage."""
    _check_step(events, step)
    evs = stage_events(events, step)
    t0 = min(e["t_start"] for e in evs)
    return [{"stage": e["stage"], "role": e.get("role"), "start_s": e["t_start"] - t0, "wall_s": e.get("wall_s", 0.0),
             "added": e.get("added", []), "versions": e.get("versions", {})} for e in evs]
