"""`minirl trace lineage`: a field's producer, consumers, shape, mask, storage and lifetime (no verl counterpart).

The question chapter 03 asks of every field ("who makes it, who reads it, what shape, what mask,
where it lives, how long") answered from a recorded run instead of from reading code:

    from minirl.trace import lineage, query
    ev = query.load("grpo")
    lin = lineage.lineage(ev, "advantages")      # every step, with the minirl method and verl symbol of each stage
    print(lineage.format_lineage(lin))           # the text `minirl trace lineage grpo advantages` prints
    lineage.field_lineage(ev, step=1)            # one row per field of step 1 (made by, read by, removed by)
"""

from __future__ import annotations

from collections.abc import Sequence

from minirl.trace.query import TraceQueryError, all_fields, field_records, run_info, stage_events
from minirl.trace.stages import describe_stage, stage_info

__all__ = ["field_lineage", "format_lineage", "lineage", "symbolic_shape"]


def _training_first(stages) -> list[str]:
    """Distinct stages, `validate` last (a validation batch is never trained on)."""
    out = list(dict.fromkeys(stages))
    return [s for s in out if s != "validate"] + [s for s in out if s == "validate"]


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


def field_lineage(events: list[dict], step: int = 1, fields: Sequence[str] | None = None) -> list[dict]:
    """One row per field of one step: storage, shape, mask, the stage that made it, the stages that read it.

    Built on `lineage` (the answer `minirl trace lineage RUN FIELD` prints): `made_by` is the stage
    that added the field at `step` (`dataset` when the prompts already carried it), `read_by` the
    stages whose worker call declared they read it, `removed_by` the stage that dropped it,
    `lifetime` the sentence about when it appears and goes. `fields` picks the rows (default: every
    field except `__private__` ones).
    """
    names = list(fields) if fields is not None else [n for n in all_fields(events) if not n.startswith("__")]
    rows = []
    for name in names:
        lin = lineage(events, name)
        at = lin["per_step"].get(step, {})
        made = [s for s in at.get("added", []) if s != "validate"]
        rows.append({"field": name, "storage": lin["storage"], "shape": lin["shape"],
                     "shape (symbolic)": lin["shape_symbolic"], "dtype": lin["dtype"], "mask": lin["mask"],
                     "made_by": made[0] if made else "dataset",
                     "read_by": ", ".join(s for s in at.get("read", []) if s != "validate"),
                     "removed_by": ", ".join(at.get("removed", [])), "lifetime": lin["lifetime"]})
    return rows
