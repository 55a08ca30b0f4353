"""`minirl trace ...`: read a recorded run from the command line (no verl counterpart).

    minirl trace show RUN [--step K]     per-step table of stages x fields (+ added, ~ changed, r read ...)
    minirl trace show RUN --ranks        per worker rank: mesh, dispatch, local rows, micro-batches, collectives
    minirl trace lineage RUN FIELD       producer, consumers, shape, mask, storage and lifetime of FIELD
    minirl trace diff RUN_A RUN_B        stages, branches, fields and versions that differ

RUN is a trace directory, a `trace.jsonl`, a run directory (`trainer.default_local_dir`, holding
`trace/`) or the name of a reference trace in `traces/` (`grpo`, `ppo_gae` ...). A RUN, step or
field that does not exist, or a file that is not a trace (binary, empty, other JSON, a metrics log),
is one line on stderr saying what is there and what was expected, and exit status 2. Torn lines (a
killed writer's last line) are skipped and counted on stderr; the command still answers.
"""

from __future__ import annotations

import sys

from minirl.trace.query import TraceQueryError
from minirl.trace.schema import TraceFormatError, TraceNotFound


def _load(args, run) -> list[dict]:
    from minirl.trace.query import load
    from minirl.trace.schema import read_trace

    events = load(run)
    if read_trace.last_torn:
        print(f"minirl trace {args.trace_command}: skipped {read_trace.last_torn} torn line(s) in {run} "
              f"(a writer killed mid-line); read the {len(events)} complete events", file=sys.stderr)
    return events


def _show(args) -> int:
    from minirl.trace.show import format_ranks, format_show

    events = _load(args, args.run)
    if args.ranks:
        from minirl.trace.query import check_step

        check_step(events, args.step)
        print(format_ranks(events, step=args.step))
    else:
        print(format_show(events, step=args.step))
    return 0


def _lineage(args) -> int:
    from minirl.trace.lineage import format_lineage, lineage

    print(format_lineage(lineage(_load(args, args.run), args.field)))
    return 0


def _diff(args) -> int:
    from minirl.trace.diff import diff, format_diff

    print(format_diff(diff(_load(args, args.run_a), _load(args, args.run_b)), args.run_a, args.run_b))
    return 0


def _run(fn):
    def wrapped(args) -> int:
        try:
            return fn(args)
        except (TraceNotFound, TraceFormatError, TraceQueryError) as e:
            print(f"minirl trace {args.trace_command}: {e}", file=sys.stderr)
            return 2
        except OSError as e:  # a directory or file that cannot be read (permissions, a FIFO ...)
            print(f"minirl trace {args.trace_command}: cannot read {e.filename}: {e.strerror}; "
                  "expected a readable trace dir, trace.jsonl or run dir", file=sys.stderr)
            return 2

    return wrapped


def register_trace_cli(sub) -> None:
    """Add `trace show|lineage|diff` to the `minirl` argument parser's sub-commands."""
    t = sub.add_parser("trace", help="read a recorded run: show, lineage FIELD, diff A B")
    tsub = t.add_subparsers(dest="trace_command", required=True)
    s = tsub.add_parser("show", help="per-step table of stages x fields")
    s.add_argument("run", help="trace dir, trace.jsonl, run dir, or a name in traces/")
    s.add_argument("--step", type=int, default=None, help="only this step (default: every step)")
    s.add_argument("--ranks", action="store_true",
                   help="per worker rank instead: layout, dispatch, local rows, micro-batches, collectives")
    s.set_defaults(fn=_run(_show))
    ln = tsub.add_parser("lineage", help="producer, consumers, shape, mask, storage and lifetime of a field")
    ln.add_argument("run")
    ln.add_argument("field")
    ln.set_defaults(fn=_run(_lineage))
    d = tsub.add_parser("diff", help="stages, branches and fields that differ between two runs")
    d.add_argument("run_a")
    d.add_argument("run_b")
    d.set_defaults(fn=_run(_diff))
