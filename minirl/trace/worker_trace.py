"""Per-rank worker events: what every worker process did with its share of a controller call.

No verl counterpart (verl's profiler times worker methods; nothing records their inputs). The
controller's `trace.jsonl` sees a stage as one call (`actor_rollout_wg.compute_log_prob(batch)`);
this module records the other side of it. Each worker process opens its own part file,
`trace.rank<r>.jsonl` in the run's trace directory (`init_worker_tracer`, called through
`Worker.init_trace`), and every `@register`-ed method call on it writes one `worker` event there:

- who: `rank`, `world_size`, the worker class, its `role`, the `method`;
- how it was dispatched: `dispatch` (`ONE_TO_ALL`, `DP_COMPUTE_PROTO`, `nd_mesh:actor` ...),
  `execute` and `collect` (how the controller gathers the outputs), `dp_rank` and `collected`
  (whether this rank's output reaches the controller: in an nd-mesh only one rank per dp rank);
- its local inputs and output: rows and the shape of every field (`describe_value`);
- `engines`: for each engine it built (in `init_model`), the device mesh, this rank's coordinates
  on it and the local shape of every parameter shard (`note_engine_layout`);
- `passes`: for each engine pass (`train_batch` / `infer_batch`), the micro-batches (count, rows,
  tokens, response tokens), the global numbers the loss normalises with, and the collectives that
  ran, by phase, each with the global ranks of its process group (`engine_pass`,
  `note_micro_batches`); with a pipeline (the Megatron-layout engine) also `pipeline`: this stage's
  schedule, every forward and backward with its micro-batch and wall-clock start and end
  (`note_pipeline_schedule`).

Why part files and not the controller's trace: the events must survive exactly the runs where the
controller gets nothing back (a hung collective, a dead peer), and a worker's event is written when
its call ends, by the process that ran it, one complete line per `write` like every trace event.
`read_trace` merges the part files by time. On several nodes `trace.dir` must be on a shared
filesystem for the merge to see every rank (each node writes its own ranks' files).

Collectives are counted with a `TorchDispatchMode` that sees every c10d op of the block (FSDP2's
all-gathers and reduce-scatters, the all-reduces DTensor issues for tensor parallelism and for a
sharded grad norm, `dist.*` calls) with the ranks of its process group; for an op on DTensors it steps aside first
so that DTensor's own collectives come back through it (the trick of torch's `CommDebugMode`). It
only runs when there are several ranks and a worker call is being recorded.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from minirl.trace.recorder import Tracer

__all__ = ["close_worker_tracer", "current_worker_call", "describe_value", "engine_pass", "get_worker_tracer",
           "init_worker_tracer", "note_engine_layout", "note_micro_batches", "note_pipeline_schedule", "phase",
           "worker_call"]

_tracer: Tracer | None = None  # this process's part-file tracer (one per process, shared by colocated roles)
_open_calls: list[dict] = []  # the worker calls being recorded, innermost last


def init_worker_tracer(trace_dir, level: str, run_id: str | None, rank: int) -> Tracer | None:
    """Open `trace.rank<rank>.jsonl` under `trace_dir` for this process; again for the same run: a no-op.

    One file per process: workers sharing a process (colocated roles, or the in-process group's
    several ranks) write to the file of the first, and every event names its own `rank`. A tracer
    left open for another run (an earlier run in the same process) is closed first.
    """
    global _tracer
    if level == "off":
        close_worker_tracer()
        return None
    part = f"rank{rank}"
    if _tracer is not None and _tracer.dir == Path(trace_dir) and _tracer.run_id == run_id:
        return _tracer
    close_worker_tracer()
    _tracer = Tracer(trace_dir, level=level, run_id=run_id, part=part)
    return _tracer


def close_worker_tracer() -> None:
    """Close this process's part file (its `run_end` event says how many events it holds)."""
    global _tracer
    if _tracer is not None:
        _tracer.close()
    _tracer = None
    _open_calls.clear()


def get_worker_tracer() -> Tracer | None:
    """This process's part-file tracer, or None when worker calls are not recorded."""
    return _tracer


def current_worker_call() -> dict | None:
    """The record of the innermost worker call being recorded in this process (None outside one)."""
    return _open_calls[-1] if _open_calls else None


# ------------------------------------------------------------------------------------ describing values
def _mask_path(value: str) -> str:
    return "<path>" if os.path.isabs(value) or value.startswith("~") else value


def describe_value(value) -> dict:
    """What a worker received or returned, without the data: rows and field shapes of a DataProto."""
    batch = getattr(value, "batch", None)
    if hasattr(value, "non_tensor_batch") and hasattr(value, "meta_info"):
        tensors = {} if batch is None else {k: list(batch[k].shape) for k in batch.keys()}  # noqa: SIM118
        return {"type": "DataProto", "rows": len(value), "batch": tensors,
                "non_tensor_batch": sorted(value.non_tensor_batch), "meta_info": sorted(value.meta_info)}
    if isinstance(value, torch.Tensor):
        return {"type": "Tensor", "shape": list(value.shape), "dtype": str(value.dtype).replace("torch.", "")}
    if isinstance(value, (list, tuple)):
        return {"type": type(value).__name__, "len": len(value)}
    if isinstance(value, dict):
        return {"type": "dict", "keys": sorted(map(str, value))[:16]}
    out = {"type": type(value).__name__}
    if isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 80):
        out["value"] = _mask_path(value) if isinstance(value, str) else value
    return out


# ------------------------------------------------------------------------------------ one worker call
@contextmanager
def worker_call(record: dict, args: tuple = (), kwargs: dict | None = None):
    """Record one worker method call; yields the record (None when this process records nothing).

    `record` holds who and how (`rank`, `method`, `dispatch` ...); the inputs are described from
    `args`/`kwargs`; the block may set `record["output"]`. On exit one `worker` event is written.
    """
    tracer = _tracer
    if tracer is None:
        yield None
        return
    rec = dict(record)
    rec["inputs"] = [describe_value(a) for a in args] + [
        {"name": k, **describe_value(v)} for k, v in (kwargs or {}).items()]
    t_start, p0 = time.time(), time.perf_counter()
    _open_calls.append(rec)
    status, error = "ok", None
    try:
        yield rec
    except BaseException as e:
        status, error = "error", f"{type(e).__name__}: {e}"
        raise
    finally:
        _open_calls.remove(rec)
        rec.update(t_start=t_start, wall_s=round(time.perf_counter() - p0, 6), status=status)
        if error:
            rec["error"] = error
        tracer.event("worker", **rec)


# ------------------------------------------------------------------------------------ engine notes
def note_engine_layout(layout: dict) -> None:
    """Add an engine's layout (mesh, coordinates, parameter shards) to the current worker call."""
    call = current_worker_call()
    if call is not None:
        call.setdefault("engines", []).append(layout)


@contextmanager
def engine_pass(kind: str, **info):
    """One engine pass (`train` or `infer`) inside a worker call; yields its note (None outside a call).

    The note is filled by `note_micro_batches` (from `forward_backward_batch`) and by the `phase`
    blocks inside the pass, which count the collectives each phase ran.
    """
    call = current_worker_call()
    if call is None:
        yield None
        return
    note = {"pass": kind, **info}
    call.setdefault("passes", []).append(note)
    yield note


def note_micro_batches(micro_batches, global_info: dict, **extra) -> None:
    """Note how a rank cut its batch: micro-batch count, rows, tokens and response tokens of each."""
    call = current_worker_call()
    if call is None:
        return
    passes = call.setdefault("passes", [])
    if not passes or "micro_batches" in passes[-1]:
        passes.append({"pass": "forward_backward"})  # called outside train_batch / infer_batch
    sizes, tokens, response_tokens = [], [], []
    for mb in micro_batches:
        td = mb.batch
        keys = set(td.keys())
        sizes.append(len(mb))
        tokens.append(int(td["attention_mask"].sum()) if "attention_mask" in keys else None)
        response_tokens.append(int(td["response_mask"].sum()) if "response_mask" in keys else None)
    passes[-1].update(micro_batches=len(sizes), sizes=sizes, tokens=tokens, response_tokens=response_tokens,
                      **{k: global_info[k] for k in ("dp_size", "global_batch_size", "batch_num_tokens")
                         if k in global_info}, **extra)


def note_pipeline_schedule(ops: list[dict], **info) -> None:
    """Note a pipeline stage's schedule in the current engine pass: `info` and its ops, in the order run.

    Each op is `{"op": "forward" | "backward", "micro_batch": i, "t_start", "t_end"}` (wall clock,
    comparable across the ranks of one machine); `busy_s` is their summed duration. The idle time
    between the first and the last op of all stages (the pipeline bubble) is read from the merged ranks.
    """
    call = current_worker_call()
    if call is None:
        return
    passes = call.setdefault("passes", [])
    if not passes:
        passes.append({"pass": "forward_backward"})
    rounded = [{**o, "t_start": round(o["t_start"], 6), "t_end": round(o["t_end"], 6)} for o in ops]
    passes[-1]["pipeline"] = {**info, "busy_s": round(sum(o["t_end"] - o["t_start"] for o in ops), 6),
                              "ops": rounded}


@contextmanager
def phase(note: dict | None, name: str):
    """Count the collectives of the block into `note["collectives"][name]` (a no-op without a note).

    Counting needs several ranks (one rank runs no collective) and costs a Python hook per op, so
    it only runs while a worker call is recorded.
    """
    import torch.distributed as dist

    if note is None or not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        with nullcontext():
            yield
        return
    counter = _CollectiveCounter()
    try:
        with counter:
            yield
    finally:
        note.setdefault("collectives", {})[name] = counter.summary()


# c10d / functional-collective op names -> the collective they are
_COLLECTIVES = {"allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
                "allgather": "all_gather", "_allgather_base": "all_gather", "all_gather_into_tensor": "all_gather",
                "allgather_into_tensor_coalesced": "all_gather", "reduce_scatter": "reduce_scatter",
                "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
                "broadcast": "broadcast", "alltoall": "all_to_all", "alltoall_base": "all_to_all",
                "all_to_all_single": "all_to_all", "send": "send", "recv_": "recv", "recv_any_source": "recv",
                "barrier": "barrier", "gather": "gather", "scatter": "scatter", "reduce": "reduce"}


def _group_ranks(args, kwargs) -> tuple[int, ...] | None:
    """The global ranks of the process group a c10d op runs on (a boxed ProcessGroup, or a group name)."""
    import torch.distributed as dist

    for a in list(args) + list((kwargs or {}).values()):
        try:
            if isinstance(a, torch.ScriptObject):
                group = dist.ProcessGroup.unbox(a)
            elif isinstance(a, str):
                group = dist.distributed_c10d._resolve_process_group(a)
            else:
                continue
            return tuple(dist.get_process_group_ranks(group))
        except Exception:  # noqa: BLE001, S112 (not a process group after all)
            continue
    return None


def _collective_counter_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class CollectiveCounter(TorchDispatchMode):
        """Counts the c10d and functional collectives dispatched inside the block, by (name, group's ranks)."""

        def __init__(self):
            super().__init__()
            self.counts: dict[tuple, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if isinstance(func, torch._ops.HigherOrderOperator):
                return func(*args, **(kwargs or {}))
            if any(t.__name__ == "DTensor" for t in types):
                # let DTensor desugar the op first: the collectives it issues come back through this mode
                # (a mode otherwise runs before the tensor subclass, and would never see them)
                return NotImplemented
            if func.namespace in ("c10d", "_c10d_functional", "c10d_functional"):
                name = _COLLECTIVES.get(func._opname.rstrip("_")) or _COLLECTIVES.get(func._opname)
                if name is not None:
                    key = (name, _group_ranks(args, kwargs))
                    self.counts[key] = self.counts.get(key, 0) + 1
            return func(*args, **(kwargs or {}))

        def summary(self) -> list[dict]:
            rows = sorted(self.counts.items(), key=lambda kv: (kv[0][0], len(kv[0][1] or ()), kv[0][1] or ()))
            return [{"op": op, "group_size": len(ranks) if ranks else None, "group_ranks": list(ranks or []),
                     "calls": n} for (op, ranks), n in rows]

    return CollectiveCounter


def _CollectiveCounter():
    global _COUNTER_CLS
    if _COUNTER_CLS is None:
        _COUNTER_CLS = _collective_counter_class()
    return _COUNTER_CLS()


_COUNTER_CLS = None
