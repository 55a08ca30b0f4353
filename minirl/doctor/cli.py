"""`minirl doctor RUN`: the findings of one run, or one line saying why there is nothing to read.

    minirl doctor RUN            one block per finding (layer, evidence, stage, verl code); "no finding" if healthy;
                                 one line first when the run never finished a training step
    minirl doctor RUN --json     the same findings as JSON (a list of objects)
    minirl doctor --env [key=value ...]   the environment block for a bug report (what verl's scripts/diagnose.py
                                          prints) and minirl's resolved config (the defaults plus these overrides)
    minirl doctor --env RUN      the same, with the config RUN recorded in its trace

RUN is what `minirl trace` takes: a run directory (`trainer.default_local_dir`, holding `trace/` and
`metrics.jsonl`), a trace directory, a `trace.jsonl`, or the name of a reference trace in `traces/`.
Exit status: 0 no finding, 1 at least one finding (or the run never finished a training step), 2 nothing
readable (no trace, not a trace).
"""

from __future__ import annotations

import json
import sys

from minirl.trace.schema import TraceFormatError, TraceNotFound


def _env(args) -> int:
    from omegaconf import OmegaConf

    from minirl.config import ConfigError, load
    from minirl.doctor.env import config_summary, environment_report

    words = ([args.run] if args.run else []) + list(args.overrides)
    overrides = [w for w in words if "=" in w]
    runs = [w for w in words if "=" not in w]
    if len(runs) > 1 or (runs and overrides):
        print(f"minirl doctor --env: give either one RUN or key=value overrides, not {words}", file=sys.stderr)
        return 2
    print(environment_report())
    if runs:
        from minirl.doctor import load_run
        from minirl.trace.query import run_info

        try:
            recorded = run_info(load_run(runs[0]).events).get("config")
        except (TraceNotFound, TraceFormatError) as e:
            print(f"minirl doctor --env: {e}", file=sys.stderr)
            return 2
        if not recorded:
            print(f"minirl doctor --env: {runs[0]} recorded no config in its trace (run_start event)", file=sys.stderr)
            return 2
        print(config_summary(OmegaConf.create(recorded), source=f"recorded by {runs[0]}"))
        return 0
    try:
        cfg = load(overrides)
    except ConfigError as e:
        print(f"minirl doctor --env: {e}", file=sys.stderr)
        return 2
    print(config_summary(cfg, overrides, source="defaults + " + " ".join(overrides) if overrides else "defaults"))
    return 0


def _doctor(args) -> int:
    from minirl.doctor import diagnose, format_report, load_run

    if args.env:
        return _env(args)
    if not args.run or args.overrides:
        print("minirl doctor: give a RUN (run dir, trace dir, trace.jsonl or a name in traces/), or --env",
              file=sys.stderr)
        return 2
    try:
        record = load_run(args.run)
    except (TraceNotFound, TraceFormatError) as e:
        print(f"minirl doctor: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"minirl doctor: cannot read {e.filename}: {e.strerror}; expected a run dir, trace dir or "
              "trace.jsonl", file=sys.stderr)
        return 2
    findings = diagnose(record)
    unfinished = never_finished(record)
    if args.json:
        rows = [f.as_dict() for f in findings]
        if unfinished:
            rows.insert(0, {"layer": None, "check": "never_finished_a_step", "title": unfinished})
        print(json.dumps(rows, indent=2, default=str))
    else:
        if unfinished:
            print(f"minirl doctor {record.source}: {unfinished}")
        if findings or not unfinished:
            print(format_report(findings, record))
    return 1 if findings or unfinished else 0


def never_finished(record) -> str:
    """'' if the run logged a training step (or only validated); else one line saying how far it got."""
    if any(step >= 1 for step in record.metrics) or record.cfg("trainer.val_only", False):
        return ""
    from minirl.trace.query import stage_events

    stages = [e for e in stage_events(record.events) if e.get("step", 0) >= 1]
    if stages:
        last = stages[-1]
        how = " and it raised" if last.get("status") == "error" else ""
        reached = f"its trace ends in stage {last['stage']} of step {last['step']}{how}"
    else:
        reached = "no training stage ran (it stopped while starting or validating)"
    ended = any(e.get("kind") == "run_end" for e in record.events)
    return (f"the run never finished a training step: {reached}; no metrics row for a step >= 1"
            f"{'' if ended else ', and no run_end event (killed?)'}. Not a healthy run: there is nothing to "
            "diagnose yet. Fix: read the run's own output (the error it stopped with), then run it again.")


def register_doctor_cli(sub) -> None:
    """Add `doctor RUN [--json]` to the `minirl` argument parser's sub-commands."""
    d = sub.add_parser("doctor", help="which layer of a run broke: findings from its trace and metrics")
    d.add_argument("run", nargs="?", help="run dir (trainer.default_local_dir), trace dir, trace.jsonl, or a name in traces/")
    d.add_argument("overrides", nargs="*", help="with --env: key=value overrides of the config to summarise")
    d.add_argument("--json", action="store_true", help="print the findings as JSON")
    d.add_argument("--env", action="store_true",
                   help="print the environment block for a bug report (verl's scripts/diagnose.py) and the resolved config")
    d.set_defaults(fn=_doctor)
