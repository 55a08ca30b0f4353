"""What the doctor reads: one run's trace events and metric rows, indexed by step and stage.

No verl counterpart. `load_run(RUN)` finds the run the way `minirl trace` does (a run directory, a
trace directory, a `trace.jsonl`, a reference-trace name; `minirl.trace.query.load`), keeps the last
run of the file (a resumed run appends under a new `run_id`), and reads the metrics:

- the trace's `metrics` events (the row the trainer logged each step, non-finite values as null);
- `metrics.jsonl` next to `trace/` (`trainer.logger=[file]`) when the trace has none (`trace.level`
  was `stages`, or an older run).

Everything else comes from the trace: the resolved config (`run_start`), one `stage` event per
stage and step (fields, summaries, versions, extras), the `nonfinite` records the trainer's NaN
check leaves (`minirl.trainer.ppo.finite_checks`, read here as plain events), and the per-rank
`worker` events (`trace.rank<r>.jsonl`: each rank's micro-batches and loss tokens).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from minirl.trace.query import load, run_info, stage_events
from minirl.trace.show import worker_events

__all__ = ["RunRecord", "load_run"]


@dataclass
class RunRecord:
    """One run as the doctor sees it (plain dicts from the trace, nothing imported from the trainer)."""

    source: str
    """What the caller passed (a run dir, trace dir, file or name)."""
    events: list[dict]
    """The run's events (`minirl.trace.read_trace`), the last run only."""
    metrics: dict[int, dict] = field(default_factory=dict)
    """step -> the metrics row logged at that step (the last one when a step logged twice)."""
    metrics_from: str = "trace"
    """Where the metric rows came from: `trace` (its `metrics` events), `metrics.jsonl`, or `none`."""

    # ------------------------------------------------------------------------------ the run
    @property
    def config(self) -> dict:
        """The resolved config of the run (`run_start.config`), or {} when the trace has none."""
        return run_info(self.events).get("config") or {}

    def cfg(self, dotted: str, default=None):
        """One config value by dotted key (`actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu`)."""
        node = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    @property
    def steps(self) -> list[int]:
        """Training steps (>= 1) that have a stage event or a metrics row."""
        stages = {e["step"] for e in stage_events(self.events) if e["step"] >= 1}
        return sorted(stages | {s for s in self.metrics if s >= 1})

    # ------------------------------------------------------------------------------ stages
    def stage(self, name: str, step: int) -> dict | None:
        """The `stage` event of `name` at `step` (the last, if a stage ran twice), or None."""
        found = [e for e in stage_events(self.events, step) if e["stage"] == name]
        return found[-1] if found else None

    def stages_named(self, name: str) -> list[dict]:
        """Every `stage` event of `name`, in step order."""
        return [e for e in stage_events(self.events) if e["stage"] == name]

    def summary(self, name: str, step: int, field_name: str) -> dict:
        """The masked summary (`mean`, `min`, `max`, `valid`, `nonfinite`) of a field where stage `name` made it."""
        ev = self.stage(name, step)
        return ((ev or {}).get("fields", {}).get(field_name) or {}).get("summary") or {}

    def errors(self) -> list[dict]:
        """Stage events whose stage raised (`status: error`)."""
        return [e for e in stage_events(self.events) if e.get("status") == "error"]

    def nonfinite(self) -> list[dict]:
        """The NaN/inf records of the trainer's per-stage check (`kind: nonfinite`), in order."""
        return [e for e in self.events if e.get("kind") == "nonfinite"]

    def worker_calls(self, stage: dict, method: str | None = None) -> list[dict]:
        """The per-rank `worker` events that ran inside `stage`'s span (optionally of one `method`)."""
        t0, wall = stage.get("t_start", 0.0), stage.get("wall_s", 0.0)
        return [w for w in worker_events(self.events) if t0 <= w.get("t_start", -1.0) <= t0 + wall
                and (method is None or w.get("method") == method)]

    # ------------------------------------------------------------------------------ metrics
    def metric(self, key: str, step: int):
        """The logged value of `key` at `step` (None when absent or logged as null: non-finite)."""
        value = self.metrics.get(step, {}).get(key)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def series(self, key: str) -> dict[int, float]:
        """step -> value of `key` over the training steps that logged it."""
        return {s: v for s in sorted(self.metrics) if s >= 1 and (v := self.metric(key, s)) is not None}


def _metrics_from_events(events: list[dict]) -> dict[int, dict]:
    return {int(e["step"]): dict(e["metrics"]) for e in events if e.get("kind") == "metrics"}


def _metrics_file(source: str, events: list[dict]) -> Path | None:
    """`metrics.jsonl` of the run: in the run dir given, or next to the trace dir, or where the config says."""
    candidates = [Path(source), Path(source).parent]
    local_dir = (run_info(events).get("config") or {}).get("trainer", {}).get("default_local_dir")
    if local_dir:
        candidates.append(Path(local_dir))
    for folder in candidates:
        if (folder / "metrics.jsonl").is_file():
            return folder / "metrics.jsonl"
    return None


def _read_metrics_file(path: Path) -> dict[int, dict]:
    rows = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line of a killed run
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows[row["step"]] = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                                 for k, v in row.items()}
    return rows


def load_run(run) -> RunRecord:
    """Read run `run` (run dir, trace dir, `trace.jsonl` or a reference-trace name) for the doctor.

    Raises `minirl.trace.TraceNotFound` / `TraceFormatError` (one-line messages) when there is no trace.
    """
    events = load(run)
    run_id = run_info(events).get("run_id")
    if run_id is not None:
        events = [e for e in events if e.get("run_id") == run_id]
    metrics, where = _metrics_from_events(events), "trace"
    if not metrics:
        path = _metrics_file(str(run), events)
        metrics, where = (_read_metrics_file(path), "metrics.jsonl") if path else ({}, "none")
    return RunRecord(source=str(run), events=events, metrics=metrics, metrics_from=where)
