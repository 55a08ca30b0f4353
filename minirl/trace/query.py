"""Asking a trace the basic questions: which run, which steps, which stages, which fields (no verl counterpart).

The building blocks of the views (`minirl.trace.show`, `minirl.trace.lineage`, `minirl.trace.diff`)
and of the plots. Everything works on the plain event dicts of `read_trace` and returns plain data:

    from minirl.trace import query
    ev = query.load("grpo")                 # a trace dir, .jsonl, run dir or a name in traces/
    query.steps(ev)                         # [0, 1, 2]
    [e["stage"] for e in query.stage_events(ev, step=1)]   # sample, reward, old_log_prob, ...
    query.timeline(ev, step=1)              # when each stage of step 1 started and how long it ran

A question the trace cannot answer (a step or field it does not hold) raises `TraceQueryError`,
whose one-line message lists what the trace does hold.
"""

from __future__ import annotations

from minirl.trace.schema import read_trace, resolve_run
from minirl.trace.stages import STAGE_ORDER

__all__ = ["TraceQueryError", "all_fields", "check_step", "field_records", "is_wall_time", "load", "run_info",
           "stage_events", "stage_rank", "steps", "timeline"]


class TraceQueryError(ValueError):
    """A question the trace cannot answer (unknown field or step); the message lists what exists."""


def load(run, run_id: str | None = None, traces_root=None) -> list[dict]:
    """Events of `run`: a trace dir, a `.jsonl` file, a run dir (with `trace/`) or a name in `traces/`.

    Raises `TraceNotFound` when there is no trace there and `TraceFormatError` when the file is not a
    trace (both from `minirl.trace.schema`, with a one-line message).
    """
    return read_trace(resolve_run(run, traces_root), run_id=run_id)


def run_info(events: list[dict]) -> dict:
    """The (last) `run_start` event, or {} when the trace has none."""
    starts = [e for e in events if e.get("kind") == "run_start" and not e.get("part")]
    return starts[-1] if starts else {}


def stage_events(events, step: int | None = None) -> list[dict]:
    """The `stage` events (of one step when `step` is given), in the order the stages started.

    A stage event is written when its stage ends, and a trace merged from several writers is in the
    order of writing; sorting by `t_start` (stable: events without one keep their place) gives the
    order the stages ran, which is what timelines and tables show.
    """
    out = [e for e in events if e.get("kind") == "stage" and (step is None or e.get("step") == step)]
    return sorted(out, key=lambda e: e.get("t_start", 0.0))


def steps(events: list[dict]) -> list[int]:
    """The steps that have stage events, ascending."""
    return sorted({e["step"] for e in stage_events(events)})


def check_step(events: list[dict], step: int | None) -> None:
    """Raise `TraceQueryError` (listing the recorded steps) unless `step` is None or has stage events."""
    if step is not None and step not in steps(events):
        raise TraceQueryError(f"no step {step} in this trace; steps recorded: {steps(events)}")


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


def is_wall_time(extra_key: str) -> bool:
    """Whether a stage extra (or a key inside one) differs on every run: a wall time or a process id.

    `*timing*`, seconds (`s`, `*_s`), clock readings (`start`, `end`, `*_start`, `*_end`), and the ids of the
    processes that did the work (`pid`, `*_pid`, `*_pids`: the agent-loop workers, the engine's process).
    """
    key = str(extra_key)
    return ("timing" in key or key in ("s", "start", "end", "pid") or
            key.endswith(("_s", "_start", "_end", "_pid", "_pids")))


def timeline(events: list[dict], step: int) -> list[dict]:
    """One step's stages as `{stage, role, start_s, wall_s, added, versions}`, start relative to the step's first stage."""
    check_step(events, step)
    evs = stage_events(events, step)
    t0 = min(e["t_start"] for e in evs)
    return [{"stage": e["stage"], "role": e.get("role"), "start_s": e["t_start"] - t0, "wall_s": e.get("wall_s", 0.0),
             "added": e.get("added", []), "versions": e.get("versions", {})} for e in evs]
