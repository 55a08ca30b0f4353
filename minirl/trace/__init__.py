"""minirl's instrument: every stage of `fit()` as JSONL events, and the views that read them (no verl counterpart).

A stage of the trainer runs inside `tracer.span(stage, batch, step=...)`. On exit the span writes one
event: which fields the stage added, removed, changed or read, each field's shape, dtype, device,
storage (batch / non_tensor_batch / meta_info / transfer_queue) and a masked summary, the weight
versions of actor, rollout, ref and critic, who ran it and for how long.

The modules, one job each:

| module | what it does |
|---|---|
| `recorder` | `Tracer` and its spans: what the trainer calls to write events |
| `worker_trace` | per-rank `worker` events: what each worker rank got and did (`trace.rank<r>.jsonl`) |
| `schema` | the event format, finding a trace (`resolve_run`), reading and checking it (`read_trace`) |
| `stages` | what each stage is: the minirl method and the verl symbol behind it (`STAGE_INFO`) |
| `query` | the basic questions: `load`, `run_info`, `steps`, `stage_events`, `all_fields`, `timeline` |
| `show` | `minirl trace show`: one step as a stages x fields table; `--ranks`: per worker rank |
| `lineage` | `minirl trace lineage`: a field's producer, consumers, shape, mask, storage and lifetime |
| `diff` | `minirl trace diff`: stages, branches, fields and versions that differ between two runs |
| `plots` | matplotlib figures: stage timeline, field lineage, a step's batch split |
| `compare` | is a fresh trace the same run as a reference trace? (the regression oracle) |
| `reference` | the reference traces in `traces/`: the manifest, where each is, what it requires |
| `cli` | the `minirl trace` commands: `show`, `lineage`, `diff` |

The package only observes: it imports nothing of the trainer, the workers or the agent loop (they
call it). Recording the reference traces, which needs a training run, lives on the trainer's side.

    from minirl.trace import Tracer, lineage, read_trace
    tracer = Tracer("runs/x/trace", level="fields")
    with tracer.span("reward", batch, step=1, role="reward", reads=["responses"]):
        ...  # the stage mutates batch
    events = read_trace("runs/x/trace")
    print(lineage.format_lineage(lineage.lineage(events, "rm_scores")))

On the command line: `minirl trace show RUN`, `minirl trace lineage RUN FIELD`, `minirl trace diff A B`.
"""

import importlib

# Imported on first use, so that `minirl trace show` reads a trace without importing torch (~5 s).
_LAZY = {"Tracer": "recorder", "NullTracer": "recorder", "get_tracer": "recorder", "set_tracer": "recorder",
         "read_trace": "schema", "resolve_run": "schema", "TraceNotFound": "schema", "TraceFormatError": "schema",
         "SCHEMA_VERSION": "schema", "STAGE_INFO": "stages", "describe_stage": "stages"}
_SUBMODULES = ("recorder", "worker_trace", "schema", "stages", "query", "show", "lineage", "diff", "plots", "compare", "reference",
               "cli")

__all__ = [
    "SCHEMA_VERSION",
    "STAGE_INFO",
    "NullTracer",
    "TraceFormatError",
    "TraceNotFound",
    "Tracer",
    "describe_stage",
    "get_tracer",
    "read_trace",
    "resolve_run",
    "set_tracer",
]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"minirl.trace.{_LAZY[name]}"), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"minirl.trace.{name}")
    raise AttributeError(f"module 'minirl.trace' has no attribute {name!r}")
