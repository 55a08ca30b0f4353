"""Timing a stage: `marked_timer` (verl: `marked_timer`, `verl/utils/profiler/performance.py:172`).

verl's trainers import it as `verl.utils.debug.marked_timer`.

verl's `marked_timer(name, timing_raw, color=...)` also marks the span for Nsight/NPU profilers;
minirl's only adds the wall time to `timing_raw[name]` (the trainer logs it as `timing_s/<name>`).
"""

from __future__ import annotations

import time
from contextlib import contextmanager

__all__ = ["marked_timer"]


@contextmanager
def marked_timer(name: str, timing_raw: dict):
    """Add the block's wall time (seconds) to `timing_raw[name]` (accumulating over repeated blocks)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        timing_raw[name] = timing_raw.get(name, 0.0) + time.perf_counter() - t0
