"""The recorder: spans around stages, field snapshots and diffs, append-only JSONL output."""

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

from minirl.trace.schema import SCHEMA_VERSION, TRACE_FILE, VERL_PIN

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


def _mask_for(name, value, tensors):
    if value.dim() != 2:
        return None
    if "response_mask" in tensors and value.shape == tensors["response_mask"].shape and name != "response_mask":
        return tensors["response_mask"].bool()
    if "attention_mask" in tensors and value.shape == tensors["attention_mask"].shape and name != "attention_mask":
        return tensors["attention_mask"].bool()
    return None


def tensor_summary(name, value: torch.Tensor, tensors: dict) -> dict:
    """Mean/min/max over the valid tokens (response_mask or attention_mask when shapes match)."""
    out = {}
    if value.numel() == 0:
        return out
    if value.is_floating_point() or value.dtype == torch.bool or name.endswith("mask"):
        v = value.detach().float()
        mask = _mask_for(name, value, tensors)
        if mask is not None:
            v = v[mask]
            out["masked_by"] = "response_mask" if mask.shape == tensors.get("response_mask", v).shape else "attention_mask"
            out["valid"] = int(mask.sum())
        if v.numel():
            out.update(mean=round(float(v.mean()), 6), min=round(float(v.min()), 6), max=round(float(v.max()), 6))
    return out


def snapshot(batch, level: str) -> dict:
    """Describe every field of a DataProto (or a dict of tensors) at this moment."""
    if batch is None:
        return {}
    fields = {}
    tensors = {}
    td = getattr(batch, "batch", None)
    if td is not None:
        tensors = {k: td[k] for k in td.keys()}
    elif isinstance(batch, dict):
        tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
    for k, v in tensors.items():
        f = {"storage": "batch", "shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", ""),
             "device": str(v.device), "_id": (v.data_ptr(), v._version)}
        if level == "fields":
            f["summary"] = tensor_summary(k, v, tensors)
        fields[k] = f
    for k, v in (getattr(batch, "non_tensor_batch", None) or {}).items():
        fields[k] = {"storage": "non_tensor_batch", "shape": list(np.shape(v)), "dtype": str(getattr(v, "dtype", type(v).__name__)),
                     "device": "cpu", "_id": (id(v),)}
    for k, v in (getattr(batch, "meta_info", None) or {}).items():
        fields[k] = {"storage": "meta_info", "shape": [], "dtype": type(v).__name__, "device": "-", "_id": (repr(v)[:200],)}
    return fields


class NullTracer:
    """Records nothing (`trace.level=off`)."""

    level = "off"
    versions: dict = {}

    @contextmanager
    def span(self, stage, batch=None, step=0, role="trainer", rank=0, reads=(), extra=None):
        yield {}

    def event(self, kind, **payload):
        pass

    def close(self):
        pass


class Tracer:
    """Append-only JSONL tracer. One instance per process; workers add their role and rank."""

    def __init__(self, trace_dir, level="fields", run_id=None, config=None, meta=None):
        if level not in ("off", "stages", "fields"):
            raise ValueError(f"trace.level={level!r}: valid are off, stages, fields")
        self.level = level
        self.dir = Path(trace_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / TRACE_FILE
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.versions: dict = {}
        self._f = open(self.path, "a", buffering=1)
        fp = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16] if config else None
        from minirl import __version__

        self.event("run_start", level=level, config_fingerprint=fp, minirl_version=__version__, verl_pin=VERL_PIN,
                   **(meta or {}))

    def _write(self, ev: dict):
        self._f.write(json.dumps(ev, default=str) + "\n")
        self._f.flush()

    def event(self, kind, **payload):
        """Write one non-stage event (run_start, metrics, run_end ...)."""
        self._write({"schema": SCHEMA_VERSION, "run_id": self.run_id, "kind": kind, "t": time.time(), **payload})

    @contextmanager
    def span(self, stage, batch=None, step=0, role="trainer", rank=0, reads=(), extra=None):
        """Time a stage and record how it changed `batch`. Yields a dict the stage may fill with `extra` numbers."""
        before = snapshot(batch, "stages") if self.level != "off" else {}
        info = dict(extra or {})
        t0 = time.time()
        p0 = time.perf_counter()
        yield info
        wall = time.perf_counter() - p0
        target = info.pop("_batch", batch)
        after = snapshot(target, self.level)
        added = [k for k in after if k not in before]
        removed = [k for k in before if k not in after]
        changed = [k for k in after if k in before and after[k]["_id"] != before[k]["_id"]]
        for f in after.values():
            f.pop("_id", None)
        ev = {"stage": stage, "step": step, "role": role, "rank": rank,
              "device": _device_of(after), "t_start": t0, "wall_s": round(wall, 6),
              "added": added, "removed": removed, "changed": changed, "read": list(reads),
              "versions": dict(self.versions), "extra": info}
        if self.level == "fields":
            ev["fields"] = after
        ev["pid"] = os.getpid()
        self.event("stage", **ev)

    def close(self):
        if not self._f.closed:
            self.event("run_end")
            self._f.close()


def _device_of(fields: dict) -> str:
    devs = {f["device"] for f in fields.values() if f.get("storage") == "batch"}
    return ",".join(sorted(devs)) if devs else "cpu"
