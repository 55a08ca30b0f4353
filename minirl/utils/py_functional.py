"""Small pure-Python helpers used across rooms (verl: `verl/utils/py_functional.py`).

- `run_coroutine`: run an `async` function to completion from synchronous code, also when the
  calling thread already runs an event loop (a Jupyter kernel does: its cells run inside one, and
  `asyncio.run` refuses to start a second loop there). verl's controller is synchronous and its
  async workers are Ray actors with their own loops; minirl runs agent loops, rollout servers'
  clients and weight syncs from the synchronous trainer, in scripts and notebooks alike.
- `flatten_dict`: `{"a": {"b": 1}}` -> `{"a.b": 1}`, the dotted keys of the config and of traces.
- `file_lock`: an exclusive lock on a file, so that two processes that build the same cached thing
  (the warm start, a reward model, a tool-using policy) build it once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["file_lock", "flatten_dict", "run_coroutine"]


def run_coroutine(make_coro: Callable[[], Coroutine] | Coroutine) -> Any:
    """Run a coroutine (or a function returning one) to completion and return its result.

    Without a running loop in this thread: `asyncio.run`. With one (Jupyter): in a helper thread
    with its own loop, waiting for it here, so the caller still sees a plain function call.
    """
    def coro():
        return make_coro() if callable(make_coro) else make_coro

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro())
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(coro())).result()


def flatten_dict(d: Mapping | None, prefix: str = "") -> dict:
    """Nested mappings -> one level with dotted keys; an empty mapping stays as a value (`{}`)."""
    out: dict = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten_dict(v, key + "."))
        else:
            out[key] = v
    return out


@contextlib.contextmanager
def file_lock(path: str):
    """An exclusive lock on `path` (created if missing); a second process waits here for the first."""
    try:
        import fcntl
    except ImportError:  # no fcntl (Windows): builds may race (each one should stay atomic)
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
