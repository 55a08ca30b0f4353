"""Is a fresh trace the same run as a reference trace? (the regression oracle of `traces/`).

No verl counterpart. `compare_traces(reference, fresh)` returns a list of differences, one readable
line each (empty = same run). It checks what must be *exactly* equal when the same config runs with
the same seed: the stages in the same order, the same workers, the fields each stage added /
removed / changed / read, every field's storage, shape, dtype and device, the weight versions, the
stage extras that are counts, the config fingerprint, and every rank's worker calls (method,
dispatch, local shapes, micro-batches, parameter shards, collectives). Numbers computed from the model (field
summaries, logged metrics) must agree within `RTOL` / `ATOL`: the same seed and one torch thread
make a re-run on the same machine bit-identical, and a different CPU (another SIMD kernel for a
matmul) moves float32 results by ~1e-6 relative, well inside the tolerance, while a real change
(another token sampled, another loss) moves them by far more. Wall times (stage extras named
`*timing*` or `*_s`), run ids and paths are never compared.
"""

from __future__ import annotations

import math

from minirl.trace.query import is_wall_time, run_info, stage_events

RTOL = 1e-4
ATOL = 1e-5
# wall-clock numbers, different on every run (agent_loop/: per-session timings, verl's names)
_VOLATILE_METRICS = ("timing_s/", "perf/", "agent_loop/")



def _close(a, b, rtol, atol) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= atol + rtol * abs(b) if math.isfinite(a) and math.isfinite(b) else a == b


def _close_tree(a, b, rtol, atol) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):  # wall times inside a stage extra are not compared
        return a.keys() == b.keys() and all(_close_tree(a[k], b[k], rtol, atol) for k in a if not is_wall_time(k))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close_tree(x, y, rtol, atol) for x, y in zip(a, b))
    return _close(a, b, rtol, atol)


def _compare_stage(r: dict, n: dict, where: str, rtol, atol) -> list[str]:
    out = []
    for key in ("role", "rank", "device", "status", "added", "removed", "changed", "read", "versions",
                "versions_after", "present", "changes"):
        if r.get(key) != n.get(key):
            out.append(f"{where}: {key} {r.get(key)} -> {n.get(key)}")
    rx, nx = r.get("extra", {}), n.get("extra", {})
    if set(rx) != set(nx):
        out.append(f"{where}: extra keys {sorted(rx)} -> {sorted(nx)}")
    for k in set(rx) & set(nx):
        if not is_wall_time(k) and not _close_tree(rx[k], nx[k], rtol, atol):
            out.append(f"{where}: extra[{k}] {rx[k]} -> {nx[k]}")
    for group in ("fields", "removed_fields"):
        out += _compare_fields(r.get(group, {}), n.get(group, {}), f"{where}: {group}", rtol, atol)
    return out


def _compare_fields(rf: dict, nf: dict, where: str, rtol, atol) -> list[str]:
    out = []
    if list(rf) != list(nf):
        out.append(f"{where} {sorted(set(rf) ^ set(nf))} are in one trace only (or in another order)")
    for k in [k for k in rf if k in nf]:
        a, b = rf[k], nf[k]
        for key in ("storage", "shape", "dtype", "device"):
            if a.get(key) != b.get(key):
                out.append(f"{where} {k} {key} {a.get(key)} -> {b.get(key)}")
        if ("value" in a or "value" in b) and not _close_tree(a.get("value"), b.get("value"), rtol, atol):
            out.append(f"{where} {k} value {a.get('value')} -> {b.get('value')}")
        if not _close_tree(a.get("summary"), b.get("summary"), rtol, atol):
            out.append(f"{where} {k} summary {a.get('summary')} -> {b.get('summary')}")
    return out


# what a per-rank `worker` event must reproduce exactly (everything but times and ids)
_WORKER_KEYS = ("worker", "role", "method", "world_size", "dispatch", "execute", "collect", "dp_rank", "collected",
                "status", "inputs", "output", "engines", "passes")


def _compare_workers(reference: list[dict], fresh: list[dict]) -> list[str]:
    """Each rank's worker calls, in order: same methods, dispatch, local shapes, micro-batches, collectives."""
    def by_rank(events):
        out: dict[int, list[dict]] = {}
        for e in sorted((e for e in events if e.get("kind") == "worker"), key=lambda e: e.get("t_start", 0.0)):
            out.setdefault(e["rank"], []).append(e)
        return out

    ref, new = by_rank(reference), by_rank(fresh)
    if sorted(ref) != sorted(new):
        return [f"worker ranks {sorted(ref)} -> {sorted(new)}"]
    out = []
    for rank in ref:
        a, b = ref[rank], new[rank]
        if [e["method"] for e in a] != [e["method"] for e in b]:
            out.append(f"rank {rank}: worker calls {[e['method'] for e in a]} -> {[e['method'] for e in b]}")
            continue
        for i, (x, y) in enumerate(zip(a, b)):
            out += [f"rank {rank} call {i} ({x['method']}): {k} {x.get(k)} -> {y.get(k)}"
                    for k in _WORKER_KEYS if x.get(k) != y.get(k)]
    return out


def compare_traces(reference: list[dict], fresh: list[dict], rtol: float = RTOL, atol: float = ATOL,
                   metrics: bool = True) -> list[str]:
    """Differences between two traces of the same config and seed, one line each ([] = the same run)."""
    out = []
    ri, ni = run_info(reference), run_info(fresh)
    for key in ("schema", "level", "config_fingerprint", "adv_estimator", "rollout"):
        if ri.get(key) != ni.get(key):
            out.append(f"run_start: {key} {ri.get(key)} -> {ni.get(key)}")
    rs, ns = stage_events(reference), stage_events(fresh)
    seq_r = [(e["step"], e["stage"]) for e in rs]
    seq_n = [(e["step"], e["stage"]) for e in ns]
    if seq_r != seq_n:
        out.append(f"stage sequence differs: reference {seq_r} vs fresh {seq_n}")
        return out
    for r, n in zip(rs, ns):
        out += _compare_stage(r, n, f"step {r['step']} {r['stage']}", rtol, atol)
    out += _compare_workers(reference, fresh)
    if metrics:
        rm = {e["step"]: e["metrics"] for e in reference if e.get("kind") == "metrics"}
        nm = {e["step"]: e["metrics"] for e in fresh if e.get("kind") == "metrics"}
        if sorted(rm) != sorted(nm):
            out.append(f"metrics steps {sorted(rm)} -> {sorted(nm)}")
        for s in set(rm) & set(nm):
            keys = {k for k in set(rm[s]) | set(nm[s]) if not k.startswith(_VOLATILE_METRICS)}
            for k in sorted(keys):
                if not _close_tree(rm[s].get(k), nm[s].get(k), rtol, atol):
                    out.append(f"step {s} metric {k}: {rm[s].get(k)} -> {nm[s].get(k)}")
    return out
