"""minirl's instrument: every stage of `fit()` as JSONL events (no verl counterpart).

A stage of the trainer runs inside `tracer.span(stage, batch, step=...)`. On exit the span writes one
event: which fields the stage added, removed or changed in the batch, each field's shape, dtype,
device, storage (batch / non_tensor_batch / meta_info) and a masked summary, the weight versions of
the models that touched it, and the wall time. See `minirl.trace.schema` for the event format.

    from minirl.trace import Tracer, read_trace
    tracer = Tracer("runs/x/trace", level="fields")
    with tracer.span("reward", batch, step=1, role="reward"):
        ...  # the stage mutates batch
    events = read_trace("runs/x/trace")
"""

from minirl.trace.recorder import NullTracer, Tracer, get_tracer, set_tracer
from minirl.trace.schema import SCHEMA_VERSION, read_trace

__all__ = ["Tracer", "NullTracer", "get_tracer", "set_tracer", "read_trace", "SCHEMA_VERSION"]
