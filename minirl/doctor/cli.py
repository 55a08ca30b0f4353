"""`minirl doctor RUN`: the findings of one run, or one line saying why there is nothing to read.

    minirl doctor RUN            one block per finding (layer, evidence, stage, verl code); "no finding" if healthy
    minirl doctor RUN --json     the same findings as JSON (a list of objects)

RUN is what `minirl trace` takes: a run directory (`trainer.default_local_dir`, holding `trace/` and
`metrics.jsonl`), a trace directory, a `trace.jsonl`, or the name of a reference trace in `traces/`.
Exit status: 0 no finding, 1 at least one finding, 2 nothing readable (no trace, not a trace).
"""

from __future__ import annotations

import json
import sys

from minirl.trace.schema import TraceFormatError, TraceNotFound


def _doctor(args) -> int:
    from minirl.doctor import diagnose, format_report, load_run

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
    if args.json:
        print(json.dumps([f.as_dict() for f in findings], indent=2, default=str))
    else:
        print(format_report(findings, record))
    return 1 if findings else 0


def register_doctor_cli(sub) -> None:
    """Add `doctor RUN [--json]` to the `minirl` argument parser's sub-commands."""
    d = sub.add_parser("doctor", help="which layer of a run broke: findings from its trace and metrics")
    d.add_argument("run", help="run dir (trainer.default_local_dir), trace dir, trace.jsonl, or a name in traces/")
    d.add_argument("--json", action="store_true", help="print the findings as JSON")
    d.set_defaults(fn=_doctor)
