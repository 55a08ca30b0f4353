"""`minirl trace diff`: what differs between two runs (no verl counterpart).

Config keys, the stages of a training step (and the branch that adds a stage: a critic, a
reference policy ...), the fields, who produces and reads each field, shapes and dtypes, the weight
versions and the stage extras that count things:

    from minirl.trace import diff, query
    d = diff.diff(query.load("grpo"), query.load("ppo_gae"))
    d["stages"]["only_b"]                         # ['values', 'update_critic']
    print(diff.format_diff(d, "grpo", "ppo_gae"))  # the text `minirl trace diff grpo ppo_gae` prints
"""

from __future__ import annotations

from minirl.trace.lineage import lineage
from minirl.trace.query import (
    all_fields,
    field_records,
    is_wall_time,
    run_info,
    stage_events,
    stage_rank,
    steps,
)
from minirl.trace.stages import STAGE_ORDER, describe_stage, stage_info
from minirl.utils.py_functional import flatten_dict

__all__ = ["diff", "format_diff", "version_history"]


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
    ca, cb = flatten_dict(ia.get("config")), flatten_dict(ib.get("config"))
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
        values = [(k, xa[k], xb[k]) for k in ka if k in xb and k in xa and not is_wall_time(k)
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
