"""`minirl trace ...`: read a recorded run from the command line (no verl counterpart).

    minirl trace show RUN [--step K]     per-step table of stages x fields (+ added, ~ changed, r read ...)
    minirl trace lineage RUN FIELD       producer, consumers, shape, mask, storage and lifetime of FIELD
    minirl trace diff RUN_A RUN_B        stages, branches, fields and versions that differ

RUN is a trace directory, a `trace.jsonl`, a run directory (`trainer.default_local_dir`, holding
`trace/`) or the name of a reference trace in `traces/` (`grpo`, `ppo_gae` ...). A RUN, step or
field that does not exist is one line on stderr listing what does, and exit status 2.
"""

from __future__ import annotations

import sys

from minirl.trace.schema import TraceNotFound


def _show(args) -> int:
    from minirl.trace import views

    print(views.format_show(views.load(args.run), step=args.step))
    return 0


def _lineage(args) -> int:
    from minirl.trace import views

    print(views.format_lineage(views.lineage(views.load(args.run), args.field)))
    return 0


def _diff(args) -> int:
    from minirl.trace import views

    d = views.diff(views.load(args.run_a), views.load(args.run_b))
    print(views.format_diff(d, args.run_a, args.run_b))
    return 0


def _run(fn):
    def wrapped(args) -> int:
        from minirl.trace.views import TraceQueryError

        try:
            return fn(args)
        except (TraceNotFound, TraceQueryError) as e:
            print(f"minirl trace {args.trace_command}: {e}", file=sys.stderr)
            return 2

    return wrapped


def register_trace_cli(sub) -> None:
    """Add `trace show|lineage|diff` to the `minirl` argument parser's sub-commands."""
    t = sub.add_parser("trace", help="read a recorded run: show, lineage FIELD, diff A B")
    tsub = t.add_subparsers(dest="trace_command", required=True)
    s = tsub.add_parser("show", help="per-step table of stages x fields")
    s.add_argument("run", help="trace dir, trace.jsonl, run dir, or a name in traces/")
    s.add_argument("--step", type=int, default=None, help="only this step (default: every step)")
    s.set_defaults(fn=_run(_show))
    ln = tsub.add_parser("lineage", help="producer, consumers, shape, mask, storage and lifetime of a field")
    ln.add_argument("run")
    ln.add_argument("field")
    ln.set_defaults(fn=_run(_lineage))
    d = tsub.add_parser("diff", help="stages, branches and fields that differ between two runs")
    d.add_argument("run_a")
    d.add_argument("run_b")
    d.set_defaults(fn=_run(_diff))
