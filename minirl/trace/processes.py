"""Who ran what, and when: a run's generation, agent loop and training, one row per process, from its trace.

No verl counterpart (verl's timelines come from its profilers). An async trainer only pays off if its
processes work at the same time; the trace says when each did:

- the `sample` span of every step lists the sessions it trained (`session_timing`): their agent-loop
  process (`pid`), when the session started and was written (`start`, `end`), when its first request left
  and its last answer came back (`gen_start`, `gen_end`), and the engine batches that computed it (server
  pid, batch id, start, end, size, weight version), as `PPOTrainer._sample` records them
  (`minirl.trainer.ppo.metric_utils.sample_trace_info`); it also names the run's processes (`process_pids`);
- every stage span has its wall-clock start and length (`t_start`, `wall_s`).

From those:

- `trained_sessions(events)`: one row per trained session;
- `process_activity(events)`: one row per process and kind of work, with its busy intervals: generation
  (engine batches, in the process that ran them: the controller for `rollout.nnodes=0`, a rollout server
  otherwise), agent loop (each session's own work: before its first request and after its last answer,
  in the agent-loop worker), training (the stages, in the controller), plus the controller's waits and
  weight syncs;
- `overlap_summary(events)`: how much generation and agent-loop work ran while the trainer trained.

`minirl.trace.plots.process_timeline` draws the rows.
"""

from __future__ import annotations

from minirl.trace.query import stage_events

__all__ = ["TRAIN_STAGES", "intersect_s", "overlap_summary", "process_activity", "process_pids", "trained_sessions",
           "union"]

TRAIN_STAGES = ("balance_batch", "old_log_prob", "ref_log_prob", "values", "advantage", "update_critic",
                "update_actor")
"""The stages that train (the controller's own work in a step, besides waiting for data and syncing weights)."""


def trained_sessions(events: list[dict]) -> list[dict]:
    """Every trained session (from the `sample` spans), in start order: `step` (the step that trained it), the
    `session_timing` fields, and `v_min` / `v_max` (the first and last weight version that sampled it)."""
    out = []
    for e in stage_events(events):
        if e["stage"] == "sample":
            for t in e.get("extra", {}).get("session_timing", []):
                out.append({"step": e["step"], **t, "v_min": t["min_global_steps"], "v_max": t["max_global_steps"]})
    return sorted(out, key=lambda s: s["start"])


def process_pids(events: list[dict]) -> dict[str, int]:
    """`{role: pid}` of the run's processes (`controller`, `rollout_server_<i>`, `agent_loop_worker_<i>`)."""
    for e in reversed(stage_events(events)):
        if e["stage"] == "sample" and "process_pids" in e.get("extra", {}):
            return dict(e["extra"]["process_pids"])
    return {}


def union(intervals) -> list[tuple[float, float]]:
    """Overlapping or touching `(start, end)` intervals merged, sorted."""
    out: list[list[float]] = []
    for a, b in sorted((float(a), float(b)) for a, b, *_ in intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def intersect_s(xs, ys) -> float:
    """Seconds that two sets of intervals share (each merged first)."""
    total = 0.0
    for a, b in union(xs):
        for c, d in union(ys):
            total += max(0.0, min(b, d) - max(a, c))
    return total


def _role(pids: dict[str, int], pid) -> str:
    names = [r for r, p in pids.items() if p == pid]
    return names[0] if names else "process"


def process_activity(events: list[dict]) -> list[dict]:
    """One row per (process, kind of work): `{"kind", "pid", "role", "label", "intervals"}`, intervals `(start, end,
    tag)` in wall-clock seconds (tag: the weight version of an engine batch, the session's last version for agent-loop
    work, the stage's name for training). The training row also has `waits` (`sample` / sync `rollout` spans: waiting
    for data or generating inline) and `syncs` (`update_weights`). Rows: generation first, then agent loop, then
    training."""
    pids = process_pids(events)
    controller = pids.get("controller")
    sessions = trained_sessions(events)
    batches: dict[tuple, tuple] = {}
    for s in sessions:
        for b in s.get("engine_batches", []):
            pid, bid, start, end = b[:4]
            batches[(pid, bid, start)] = (start, end, b[5] if len(b) > 5 else s["v_max"])
    rows = []
    for pid in sorted({k[0] for k in batches}):
        role = _role(pids, pid)
        rows.append({"kind": "generation", "pid": pid, "role": role, "label": f"generation\n{role} {pid}",
                     "intervals": sorted(v for k, v in batches.items() if k[0] == pid)})
    for pid in sorted({s["pid"] for s in sessions}):
        work = []
        for s in (s for s in sessions if s["pid"] == pid):
            if s.get("gen_start"):  # templating before the first request; reward and the write after the last answer
                work += [(s["start"], s["gen_start"], s["v_max"]), (s["gen_end"], s["end"], s["v_max"])]
            else:
                work.append((s["start"], s["end"], s["v_max"]))
        role = _role(pids, pid)
        rows.append({"kind": "agent_loop", "pid": pid, "role": role, "label": f"agent loop\n{role} {pid}",
                     "intervals": sorted(work)})
    stages = stage_events(events)
    rows.append({"kind": "training", "pid": controller, "role": "controller", "label": f"training\ncontroller {controller}",
                 "intervals": [(e["t_start"], e["t_start"] + e["wall_s"], e["stage"]) for e in stages
                               if e["stage"] in TRAIN_STAGES],
                 "waits": [(e["t_start"], e["t_start"] + e["wall_s"], e["stage"]) for e in stages
                           if e["stage"] in ("sample", "rollout") and e["step"] >= 1],
                 "syncs": [(e["t_start"], e["t_start"] + e["wall_s"], "update_weights") for e in stages
                           if e["stage"] == "update_weights" and e["step"] >= 1]})
    return rows


def overlap_summary(events: list[dict]) -> dict:
    """How much of the other processes' work ran while the controller trained, and where it ran.

    `processes`: the distinct pids that worked; `generation in the controller`: whether the engine is the
    controller's (verl: hybrid replicas); `generation while training s` / `agent-loop work while training s`:
    seconds of engine batches / agent-loop work that overlap the training stages; `sessions started before the
    previous step's update ended`; `generation ended during update_actor` (a session whose last answer came back
    while the actor was updating: the engine was not paused).
    """
    rows = process_activity(events)
    training = next(r for r in rows if r["kind"] == "training")
    gen = [iv for r in rows if r["kind"] == "generation" for iv in r["intervals"]]
    loop = [iv for r in rows if r["kind"] == "agent_loop" for iv in r["intervals"]]
    updates = [(e["t_start"], e["t_start"] + e["wall_s"]) for e in stage_events(events) if e["stage"] == "update_actor"]
    trained_at = {}
    for e in stage_events(events):
        if e["stage"] == "update_actor":  # the end of each step's last update
            trained_at[e["step"]] = max(trained_at.get(e["step"], 0.0), e["t_start"] + e["wall_s"])
    sessions = trained_sessions(events)
    return {"processes": len({r["pid"] for r in rows}),
            "generation in the controller": all(r["pid"] == training["pid"] for r in rows if r["kind"] == "generation"),
            "generation while training s": round(intersect_s(gen, training["intervals"]), 4),
            "agent-loop work while training s": round(intersect_s(loop, training["intervals"]), 4),
            "sessions started before the previous step's update ended": sum(
                s["start"] < trained_at.get(s["step"] - 1, -1.0) for s in sessions),
            "generation ended during update_actor": sum(
                any(a <= s["gen_end"] <= b for a, b in updates) for s in sessions if s.get("gen_end"))}
