"""minirl's instrument: every stage of `fit()` as JSONL events, and the views that read them (no verl counterpart).

A stage of the trainer runs inside `tracer.span(stage, batch, step=...)`. On exit the span writes one
event: which fields the stage added, removed, changed or read, each field's shape, dtype, device,
storage (batch / non_tensor_batch / meta_info / transfer_queue) and a masked summary, the weight
versions of actor, rollout, ref and critic, who ran it and for how long. `minirl.trace.schema`
documents the format; `minirl.trace.views` answers questions about a trace (per-step tables, field
lineage, run diffs); `minirl.trace.plots` draws them; `traces/` holds the reference traces that CI
re-runs (`minirl.trace.reference`, `minirl.trace.compare`).

    from minirl.trace import Tracer, read_trace, views
    tracer = Tracer("runs/x/trace", level="fields")
    with tracer.span("reward", batch, step=1, role="reward", reads=["responses"]):
        ...  # the stage mutates batch
    events = read_trace("runs/x/trace")
    print(views.format_lineage(views.lineage(events, "rm_scores")))

On the command line: `minirl trace show RUN`, `minirl trace lineage RUN FIELD`, `minirl trace diff A B`.
"""

import importlib

# Imported on first use, so that `minirl trace show` reads a trace without importing torch (~5 s).
_LAZY = {"Tracer": "recorder", "NullTracer": "recorder", "get_tracer": "recorder", "set_tracer": "recorder",
         "read_trace": "schema", "resolve_run": "schema", "TraceNotFound": "schema", "SCHEMA_VERSION": "schema",
         "STAGE_INFO": "stages", "describe_stage": "stages"}
_SUBMODULES = ("views", "plots", "compare", "reference", "recorder", "schema", "stages", "cli")

__all__ = [
    "SCHEMA_VERSION",
    "STAGE_INFO",
    "NullTracer",
    "TraceNotFound",
    "Tracer",
    "describe_stage",
    "get_tracer",
    "read_trace",
    "resolve_run",
    "set_tracer",
    "views",
]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"minirl.trace.{_LAZY[name]}"), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"minirl.trace.{name}")
    raise AttributeError(f"module 'minirl.trace' has no attribute {name!r}")
