"""The recorder: a span around each stage, a before/after look at the batch, one JSONL line per event.

No verl counterpart (verl's `marked_timer` only times stages). The trainer wraps each stage:

    with tracer.span("advantage", batch, step=3, role="trainer", reads=["rm_scores", "uid"]) as info:
        ...                      # the stage adds or changes fields of `batch`
        info["_batch"] = out     # only if the stage produced a new batch object instead

Before the stage the span notes each field's identity (tensor storage pointer and in-place version,
numpy array object, meta value); after it, it compares: a field that is new was *added*, one that
is gone was *removed*, and one whose identity moved is compared by value (`torch.equal`), so a
stage that copies a field without touching it does not count as changing it. At level `fields` it
then summarises what the stage added or changed (mean/min/max over valid tokens), all reductions
stacked and moved to the host in one transfer per device (one sync, not one `.item()` per field).
The event format is documented in `minirl.trace.schema`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from minirl.trace.schema import LEVELS, SCHEMA_VERSION, TRACE_FILE, VERL_PIN

_current = None


def get_tracer():
    """The process's current tracer (a `NullTracer` if none was set)."""
    global _current
    if _current is None:
        _current = NullTracer()
    return _current


def set_tracer(tracer):
    """Make `tracer` the current one; returns the previous one."""
    global _current
    prev, _current = _current, tracer
    return prev


# ---------------------------------------------------------------------------------- looking at a batch
class _Field:
    """One field at one moment: what the event records, plus what change detection needs."""

    __slots__ = ("device", "dtype", "ident", "shape", "storage", "value")

    def __init__(self, storage, shape, dtype, device, value, ident):
        self.storage, self.shape, self.dtype, self.device = storage, shape, dtype, device
        self.value, self.ident = value, ident

    def record(self) -> dict:
        rec = {"storage": self.storage, "shape": self.shape, "dtype": self.dtype, "device": self.device}
        if self.storage == "meta_info" and _is_small_literal(self.value):
            rec["value"] = self.value
        return rec


def _is_small_literal(v) -> bool:
    if isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= 80):
        return True
    return isinstance(v, (list, tuple)) and len(v) <= 8 and all(isinstance(x, (bool, int, float, str)) for x in v)


def describe_batch(batch) -> dict[str, _Field]:
    """Every field of a DataProto (or a dict of tensors, or an object with `trace_fields()`) right now."""
    if batch is None:
        return {}
    if hasattr(batch, "trace_fields"):  # e.g. a transfer-queue batch handle: it describes its own fields
        return {k: _Field(d.get("storage", "transfer_queue"), list(d.get("shape", [])), str(d.get("dtype", "-")),
                          str(d.get("device", "-")), None, d.get("_id", (id(batch), k)))
                for k, d in batch.trace_fields().items()}
    fields: dict[str, _Field] = {}
    td = getattr(batch, "batch", None)
    if td is not None:
        tensors = {k: td[k] for k in td.keys()}  # noqa: SIM118 (iterating a TensorDict walks rows, not keys)
    elif isinstance(batch, dict):
        tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
    else:
        tensors = {}
    for k, v in tensors.items():
        fields[k] = _Field("batch", list(v.shape), str(v.dtype).replace("torch.", ""), str(v.device), v,
                           (v.data_ptr(), v._version))
    for k, v in (getattr(batch, "non_tensor_batch", None) or {}).items():
        fields[k] = _Field("non_tensor_batch", list(np.shape(v)), str(getattr(v, "dtype", type(v).__name__)), "cpu",
                           v, (id(v),))
    for k, v in (getattr(batch, "meta_info", None) or {}).items():
        fields[k] = _Field("meta_info", [], type(v).__name__, "-", v, (id(v),))
    return fields


def _values_equal(a, b) -> bool:
    """Same contents? (tensors by `torch.equal`, numpy object arrays element by element, else `==`)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if a.dtype != object and b.dtype != object:
            return bool(np.array_equal(a, b))
        return a.shape == b.shape and all(_values_equal(x, y) for x, y in zip(a.ravel(), b.ravel()))
    try:
        eq = a == b
        return bool(eq.all()) if hasattr(eq, "all") else bool(eq)
    except (TypeError, ValueError, RuntimeError):  # objects that do not compare: count as different
        return False


def field_change(old: _Field, new: _Field) -> str | None:
    """Why `new` differs from `old` (`values`, `shape [8] -> [32]` ...), or None when it did not change."""
    if old.ident == new.ident:
        return None
    if old.storage != new.storage:
        return f"storage {old.storage} -> {new.storage}"
    if old.shape != new.shape:
        return f"shape {old.shape} -> {new.shape}"
    if old.dtype != new.dtype:
        return f"dtype {old.dtype} -> {new.dtype}"
    if old.device != new.device:
        return f"device {old.device} -> {new.device}"
    if old.storage == "batch" and old.ident[0] == new.ident[0]:
        return "values (in place)"  # same storage, bumped version counter
    if old.value is None or new.value is None:
        return "values"
    return None if _values_equal(old.value, new.value) else "values"


# ---------------------------------------------------------------------------------------- summaries
def _fmt(x: float):
    return x if not np.isfinite(x) else float(f"{x:.7g}")


def _mask_for(name: str, value: torch.Tensor, tensors: dict):
    """The mask that says which entries of a [B, T] field are real tokens (None for other shapes)."""
    if value.dim() != 2 or name.endswith("mask"):
        return None, None
    for mname in ("response_mask", "attention_mask"):
        m = tensors.get(mname)
        if m is not None and m.shape == value.shape and m.device == value.device:
            return mname, m
    return None, None


def _stats(v: torch.Tensor, mask) -> torch.Tensor:
    """[valid, mean, min, max, nonfinite] in one tensor (no host sync)."""
    v = v.detach().float()
    if mask is None:
        mask = torch.ones_like(v, dtype=torch.bool)
    else:
        mask = mask.bool()
    valid = mask.sum()
    finite = torch.isfinite(v)
    nonfinite = (mask & ~finite).sum()
    inf = torch.tensor(float("inf"), device=v.device)
    mean = torch.where(mask, v, torch.zeros((), device=v.device)).sum() / valid.clamp(min=1)
    vmin = torch.where(mask, v, inf).amin() if v.numel() else inf
    vmax = torch.where(mask, v, -inf).amax() if v.numel() else -inf
    return torch.stack([valid.float(), mean, vmin, vmax, nonfinite.float()])


def summarize(names, fields: dict[str, _Field]) -> dict[str, dict]:
    """Masked summaries of `names`: float tensors over their mask, masks as a fraction, numeric numpy arrays."""
    tensors = {k: f.value for k, f in fields.items() if f.storage == "batch"}
    pending, out = [], {}
    for name in names:
        f = fields.get(name)
        if f is None or f.value is None:
            continue
        v = f.value
        if f.storage == "batch":
            if v.numel() == 0:
                continue
            if v.is_floating_point():
                mname, m = _mask_for(name, v, tensors)
                pending.append((name, mname, _stats(v, m)))
            elif name.endswith("mask") or v.dtype == torch.bool:
                pending.append((name, None, _stats(v, None)))
        elif f.storage == "non_tensor_batch" and isinstance(v, np.ndarray) and v.size \
                and np.issubdtype(v.dtype, np.number):
            out[name] = {"mean": _fmt(float(v.mean())), "min": _fmt(float(v.min())), "max": _fmt(float(v.max()))}
    by_device: dict = {}
    for item in pending:
        by_device.setdefault(item[2].device, []).append(item)
    for items in by_device.values():
        rows = torch.stack([s for _, _, s in items]).cpu().tolist()  # one transfer (one sync) per device
        for (name, mname, _), (valid, mean, vmin, vmax, nonfinite) in zip(items, rows):
            s = {}
            if mname:
                s.update(masked_by=mname, valid=int(valid))
            if valid:
                s.update(mean=_fmt(mean), min=_fmt(vmin), max=_fmt(vmax))
            if nonfinite:
                s["nonfinite"] = int(nonfinite)
            out[name] = s
    return out


def tensor_summary(name, value: torch.Tensor, tensors: dict) -> dict:
    """The summary of one tensor `name` given the batch's other tensors (for notebooks and tests)."""
    fields = {k: _Field("batch", list(v.shape), str(v.dtype), str(v.device), v, None) for k, v in tensors.items()}
    fields[name] = _Field("batch", list(value.shape), str(value.dtype), str(value.device), value, None)
    return summarize([name], fields).get(name, {})


def config_fingerprint(config) -> str | None:
    """16 hex digits of sha256 over the config, absolute paths masked (same overrides -> same print anywhere)."""
    if config is None:
        return None

    def mask(x):
        if isinstance(x, dict):
            return {k: mask(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [mask(v) for v in x]
        if isinstance(x, str) and (os.path.isabs(x) or x.startswith("~")):
            return "<path>"
        return x

    return hashlib.sha256(json.dumps(mask(config), sort_keys=True, default=str).encode()).hexdigest()[:16]


# -------------------------------------------------------------------------------------------- tracers
class NullTracer:
    """Records nothing (`trace.level=off`); the same methods as `Tracer`, so callers never check."""

    level = "off"
    run_id = None
    overhead_s = 0.0

    def __init__(self):
        self.versions: dict = {}
        self.version_source = None

    @contextmanager
    def span(self, stage, batch=None, step=0, role="trainer", rank=0, reads=(), extra=None):
        yield dict(extra or {})

    def event(self, kind, **payload):
        pass

    def close(self):
        pass


class Tracer:
    """Append-only JSONL tracer: one per process (a worker process passes `part=` to write its own file).

    `versions` is the dict of weight versions the next span records (the trainer sets it before each
    stage); `version_source`, if set, is a callable returning that dict, read at both ends of a span.
    `overhead_s` accumulates the seconds spent inside the tracer (what `benchmarks/trace_overhead.py`
    divides by the step time).
    """

    def __init__(self, trace_dir, level="fields", run_id=None, config=None, meta=None, part=None):
        if level not in LEVELS:
            raise ValueError(f"trace.level={level!r} is not a level: use one of {', '.join(LEVELS)} "
                             "(off records nothing, stages only names and times, fields also shapes and summaries)")
        self.level = level
        self.dir = Path(trace_dir)
        if level != "off":
            self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.part_path(trace_dir, part)
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.versions: dict = {}
        self.version_source = None
        self.overhead_s = 0.0
        self.seq = 0
        self._fd = None
        if level == "off":  # like NullTracer: no file, no events
            return
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._end_torn_line()
        from minirl import __version__

        self.event("run_start", level=level, config_fingerprint=config_fingerprint(config),
                   minirl_version=__version__, verl_pin=VERL_PIN, torch_version=torch.__version__,
                   pid=os.getpid(), part=part, **(meta or {}), config=config)

    @staticmethod
    def part_path(trace_dir, part=None) -> Path:
        """`<trace_dir>/trace.jsonl` (the controller's), or `trace.<part>.jsonl` (a worker process's)."""
        return Path(trace_dir) / (TRACE_FILE if part is None else f"trace.{part}.jsonl")

    def _end_torn_line(self):
        """A killed writer may have left half a line: end it so the next event starts on its own line."""
        size = os.fstat(self._fd).st_size
        if size:
            with open(self.path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    os.write(self._fd, b"\n")

    def _write(self, ev: dict):
        data = (json.dumps(ev, separators=(",", ":"), default=str) + "\n").encode()
        while data:  # one write() for the whole line in practice; loop only on a short write
            n = os.write(self._fd, data)
            data = data[n:]

    def event(self, kind, **payload):
        """Write one event (`run_start`, `metrics`, `run_end`, or a kind of your own)."""
        if self._fd is None:
            return
        self._write({"schema": SCHEMA_VERSION, "run_id": self.run_id, "kind": kind, "seq": self.seq,
                     "t": time.time(), **payload})
        self.seq += 1

    def _versions(self) -> dict:
        return dict(self.version_source() if self.version_source is not None else self.versions)

    @contextmanager
    def span(self, stage, batch=None, step=0, role="trainer", rank=0, reads=(), extra=None):
        """Time a stage and record how it changed `batch`. Yields a dict the stage may fill with `extra` numbers."""
        if self._fd is None:  # level off, or closed
            yield dict(extra or {})
            return
        c0 = time.perf_counter()
        before = describe_batch(batch)
        versions = self._versions()
        info = dict(extra or {})
        t_start = time.time()
        p0 = time.perf_counter()
        self.overhead_s += p0 - c0
        try:
            yield info
        except BaseException as e:
            self._finish(stage, step, role, rank, reads, info, before, versions, batch, t_start, p0,
                         error=f"{type(e).__name__}: {e}")
            raise
        self._finish(stage, step, role, rank, reads, info, before, versions, batch, t_start, p0)

    def _finish(self, stage, step, role, rank, reads, info, before, versions, batch, t_start, p0, error=None):
        wall = time.perf_counter() - p0
        c1 = time.perf_counter()
        target = info.pop("_batch", batch)
        after = describe_batch(target)
        changes = {k: why for k in after if k in before and (why := field_change(before[k], after[k]))}
        added = [k for k in after if k not in before]
        ev = {"stage": stage, "step": step, "role": role, "rank": rank, "device": _device_of(after),
              "t_start": t_start, "wall_s": round(wall, 6), "status": "error" if error else "ok",
              "added": added, "removed": [k for k in before if k not in after], "changed": list(changes),
              "changes": changes, "read": list(reads), "versions": versions}
        if self.version_source is not None:
            ev["versions_after"] = self._versions()
        ev["extra"] = info
        if error:
            ev["error"] = error
        if self.level == "fields":
            ev["fields"] = {k: f.record() for k, f in after.items()}
            if ev["removed"]:
                ev["removed_fields"] = {k: before[k].record() for k in ev["removed"]}
            for k, s in summarize(added + list(changes), after).items():
                ev["fields"][k]["summary"] = s
        else:
            ev["present"] = list(after)
        self.event("stage", **ev)
        self.overhead_s += time.perf_counter() - c1

    def close(self):
        """Write `run_end` (with the tracer's own overhead) and close the file. Safe to call twice."""
        if self._fd is not None:
            self.event("run_end", events=self.seq + 1, overhead_s=round(self.overhead_s, 6))
            os.close(self._fd)
            self._fd = None


def _device_of(fields: dict) -> str:
    devs = {f.device for f in fields.values() if f.storage == "batch"}
    return ",".join(sorted(devs)) if devs else "cpu"
