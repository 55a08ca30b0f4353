"""Small pure-Python helpers used across rooms (verl: `verl/utils/py_functional.py`).

- `run_coroutine`: run an `async` function to completion from synchronous code, also when the
  calling thread already runs an event loop (a Jupyter kernel does: its cells run inside one, and
  `asyncio.run` refuses to start a second loop there). verl's controller is synchronous and its
  async workers are Ray actors with their own loops; minirl runs agent loops, rollout servers'
  clients and weight syncs from the synchronous trainer, in scripts and notebooks alike.
- `flatten_dict`: `{"a": {"b": 1}}` -> `{"a.b": 1}`, the dotted keys of the config and of traces.
- `file_lock`: an exclusive lock on a file, so that two processes that build the same cached thing
  (the warm start, a reward model, a tool-using policy) build it once.
- `in_daemon_thread`: await a blocking call run in a daemon thread of its own, so that a caller can stop
  waiting (a deadline) and abandon a call that never returns: user reward functions and tool calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["file_lock", "flatten_dict", "in_daemon_thread", "run_coroutine"]


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


async def in_daemon_thread(call: Callable[[], Any], name: str = "minirl-call") -> Any:
    """Run `call()` in a new daemon thread named `name`; its result (or exception) comes back through a future.

    A caller that waits with a deadline (`asyncio.wait(..., timeout=)`) can give up on it: the thread is
    abandoned, and being a daemon it does not keep the process alive; if it finishes after its event loop is
    gone, its result is dropped.
    """
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def deliver(value, error):
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(value)

    def target():
        try:
            value, error = call(), None
        except BaseException as e:  # noqa: BLE001 (the caller decides what an error means)
            value, error = None, e
        try:
            loop.call_soon_threadsafe(deliver, value, error)
        except RuntimeError:  # the loop is gone (the call overran and the caller moved on): nobody to tell
            pass

    threading.Thread(target=target, daemon=True, name=name).start()
    return await future
