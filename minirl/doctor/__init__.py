"""`minirl doctor`: which layer of a training run broke, read from the run's own trace and metrics.

No verl counterpart. verl users ask it every week, from the numbers their run logged: NaN
grad_norm once micro-batches exceed the samples a rank gets (verl issue #2505), a reward stuck at
0, a KL that measures nothing, a log-prob mismatch after a sync, observation tokens in the loss.
The doctor answers from what the run wrote (the trace `minirl.trace` records and the metric
rows), and for each finding prints the layer (rollout, reward, advantage, loss, scheduling,
backend, weight sync), the evidence (metric or field, step, value vs expected), the stage where
it shows and the verl code where the same failure would show. A healthy run gets no finding.

    from minirl.doctor import diagnose, load_run, format_report
    findings = diagnose("checkpoints/minirl/arithmetic_grpo")   # run dir, trace dir or trace.jsonl
    print(format_report(findings, load_run("checkpoints/minirl/arithmetic_grpo")))

On the command line: `minirl doctor RUN` (exit status 0: no finding, 1: findings, 2: no readable trace).
`minirl doctor --env` prints what a bug report needs besides the run: versions, platform, devices and
minirl's resolved config (`minirl.doctor.env`).

| module | what it does |
|---|---|
| `findings` | the seven layers, `Evidence`, `Finding`, the verl code each finding cites |
| `record` | `load_run`: one run's events and metric rows, by step and stage |
| `checks` | the checks, one per failure, `diagnose`, and `register_check` (a check of your own joins them) |
| `report` | the printed report, table rows, the faults x layers table |
| `cli` | `minirl doctor RUN [--json]`, `minirl doctor --env [RUN or key=value ...]` |
| `env` | the environment block for a bug report (what verl's `scripts/diagnose.py` prints) and the resolved config |
| `faults` | fault injection for the tests, chapter 12 and lab 08 (hooks at `minirl.utils.hooks`; runs a job with the notebook harness) |

The package reads only: it imports `minirl.trace` and nothing of the trainer or the workers
(`faults`, which breaks a run through the hook points of `minirl.utils.hooks`, is imported only when asked for).
"""

from __future__ import annotations

import importlib

from minirl.doctor.checks import CHECKS, register_check, registered_checks, unregister_check
from minirl.doctor.findings import LAYERS, Evidence, Finding
from minirl.doctor.record import RunRecord, load_run
from minirl.doctor.report import confusion_rows, format_confusion, format_report, layers_named, rows

__all__ = ["CHECKS", "LAYERS", "Evidence", "Finding", "RunRecord", "confusion_rows", "diagnose", "format_confusion",
           "format_report", "layers_named", "load_run", "register_check", "registered_checks", "rows",
           "unregister_check"]


def diagnose(run) -> list[Finding]:
    """The findings for `run` (a run dir, trace dir, `trace.jsonl`, reference-trace name, or a `RunRecord`)."""
    from minirl.doctor.checks import diagnose as run_checks

    return run_checks(run if isinstance(run, RunRecord) else load_run(run))


def __getattr__(name):
    if name == "faults":  # runs a training job: imported on request only
        return importlib.import_module("minirl.doctor.faults")
    raise AttributeError(f"module 'minirl.doctor' has no attribute {name!r}")
