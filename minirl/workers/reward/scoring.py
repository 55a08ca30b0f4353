"""Calling a score function safely: off the event loop, with a timeout, and its result checked.

A reward function is user code, and user code misbehaves: it raises, hangs, returns `None`, a string,
a dict without `"score"`, NaN or infinity, or (a batch function) the wrong number of scores. None of
that may crash a training step or slip a non-finite number into `rm_scores`. This module holds the
three pieces every reward manager uses:

- `run_score_fn`: runs one call. A coroutine function is awaited; a plain (sync) function runs in
  its own daemon thread, so the event loop stays free (other sessions keep generating and scoring)
  and one slow call does not hold up the others. Either way the call gets `reward.timeout` seconds;
  a call still running after `SLOW_NOTICE_S` prints one notice, so a slow function never looks like
  a hang. minirl's own rule scorers (marked `minirl_inline`) are called directly on the loop: a
  thread per session cost more than their string matching.
- `parse_score`: a function's return value -> `(score, reward_extra_info)`, or `BadRewardOutput`
  naming what was wrong. Only finite numbers pass.
- `FailureLog`: a failed sample is scored 0 (verl's `RateLimitedRewardManager.run_single`,
  `verl/experimental/reward_loop/reward_manager/limited.py:398`, does the same for exceptions and
  timeouts) and counted; the first failure is printed once, with the sample, its data_source and the
  function's `file:line`. In a training run the trainer prints instead, after every step with
  failures, how many of its samples failed and the first one, and stops the run when all of them
  did (`RewardLoopManager.check_failures`).

verl runs sync score functions with `loop.run_in_executor(None, ...)` in each `RewardLoopWorker`
(`NaiveRewardManager.run_single`, `verl/experimental/reward_loop/reward_manager/naive.py:34`), with
no timeout except in the `rate_limited` manager (`reward.timeout`, default 300 s). minirl uses one daemon
thread per call instead of an executor: an executor's threads are joined when the interpreter exits,
so a call that never returns would keep the process alive; a daemon thread is simply abandoned.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from minirl.utils.py_functional import in_daemon_thread

__all__ = ["SLOW_NOTICE_S", "BadRewardOutput", "FailureLog", "function_location", "parse_score",
           "run_score_fn", "runs_inline"]

SLOW_NOTICE_S = 10.0
"""A score call running longer than this prints one notice (then keeps waiting until `reward.timeout`)."""


class BadRewardOutput(ValueError):
    """A score function's call failed or its result is not a finite score; the message says which."""


def function_location(fn: Callable) -> str:
    """`path/to/file.py:LINE` of the `def` of `fn` (through `functools.partial`), or its repr."""
    while isinstance(fn, partial):
        fn = fn.args[0] if fn.func.__name__.startswith("_call_with_kwargs") and fn.args else fn.func
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return repr(fn)
    return f"{code.co_filename}:{code.co_firstlineno}"


def _where_raised(exc: BaseException, fn: Callable) -> str:
    """` at line N`: the deepest traceback line inside `fn`'s file (where the user's code raised), or ''."""
    target = function_location(fn).rsplit(":", 1)[0]
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == target:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" at line {line}" if line is not None else ""


INLINE_ATTR = "minirl_inline"
"""A function with this attribute set true runs inline on the event loop (minirl's own rule scorers)."""


def _unwrap(fn: Callable) -> Callable:
    while isinstance(fn, partial):
        fn = fn.func
    return fn


def runs_inline(fn: Callable) -> bool:
    """Whether `fn` is a scorer minirl trusts to return at once (pure string work on one response).

    Such a call gets no thread: starting one thread per session (256 a step at the defaults) cost more
    than the scoring. It cannot time out, so only minirl's own scorers are marked; user functions keep
    the thread and `reward.timeout`.
    """
    return bool(getattr(_unwrap(fn), INLINE_ATTR, False))


def _is_async(fn: Callable) -> bool:
    while isinstance(fn, partial):
        if inspect.iscoroutinefunction(fn.func):
            return True
        fn = fn.args[0] if fn.args and callable(fn.args[0]) else fn.func
    return inspect.iscoroutinefunction(fn)


async def run_score_fn(fn: Callable, kwargs: dict, timeout: float, what: str = "") -> Any:
    """`fn(**kwargs)` with at most `timeout` seconds; raises `BadRewardOutput` on an exception or a timeout.

    A coroutine function is awaited on this loop; a sync one runs in a daemon thread, unless it is one
    of minirl's own scorers (`runs_inline`), which is called directly. `what` names the sample in the
    slow-call notice.
    """
    if runs_inline(fn):
        # minirl simplifies: verl sends every sync score function to `loop.run_in_executor`
        # (NaiveRewardManager.run_single); minirl's own rule scorers run inline instead.
        try:
            return fn(**kwargs)
        except Exception as e:  # the same error path as a threaded call
            raise BadRewardOutput(f"raised {type(e).__name__}: {e}{_where_raised(e, fn)}") from e
    if _is_async(fn):
        task = asyncio.ensure_future(fn(**kwargs))
    else:
        task = asyncio.ensure_future(in_daemon_thread(lambda: fn(**kwargs), name="minirl-reward"))
    t0 = time.monotonic()
    try:
        done, _ = await asyncio.wait({task}, timeout=min(SLOW_NOTICE_S, timeout))
        if not done:
            FailureLog.notice_slow(fn, what, timeout)
            done, _ = await asyncio.wait({task}, timeout=max(0.0, timeout - (time.monotonic() - t0)))
        if not done:
            task.cancel()
            raise BadRewardOutput(f"timed out after {timeout:g} s (reward.timeout; its thread is abandoned)")
        return task.result()
    except BadRewardOutput:
        raise
    except Exception as e:  # any error of user code is contained by the caller
        raise BadRewardOutput(f"raised {type(e).__name__}: {e}{_where_raised(e, fn)}") from e


def _number(value: Any, what: str) -> float:
    if isinstance(value, numbers.Real):
        x = float(value)
    elif hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        x = float(value.item())  # a 0-d numpy array or torch tensor
    else:
        raise BadRewardOutput(f"returned {what}{type(value).__name__} {value!r:.60}; a score must be a number")
    if not math.isfinite(x):
        raise BadRewardOutput(f"returned {what}{x}; a score must be finite")
    return x


def parse_score(result: Any) -> tuple[float, dict]:
    """A score function's return value -> `(score, reward_extra_info)`; `BadRewardOutput` if unusable.

    A number becomes `(score, {"acc": score})`, as verl's managers do; a dict must hold a finite
    `"score"` and its other entries become `reward_extra_info` (columns of `non_tensor_batch`).
    """
    if result is None:
        raise BadRewardOutput("returned None; return a float, or a dict with a 'score' key")
    if isinstance(result, dict):
        if "score" not in result:
            raise BadRewardOutput(f"returned a dict without 'score' (keys: {sorted(map(str, result))})")
        score = _number(result["score"], "score=")
        return score, {**result, "score": score}
    score = _number(result, "")
    return score, {"acc": score}


class FailureLog:
    """Counts the samples whose reward failed; prints the first failure once (unless `quiet`).

    One per `RewardLoopManager`; every reward manager of its workers reports here. `take_window()`
    hands over the first failure reported since its last call (the trainer asks once per step). An agent-loop
    worker process keeps a quiet log of its own; its count and first failure come back with each of its
    reports and are `merge`d into the controller's (verl: each reward actor logs for itself).
    """

    _slow_noticed = False

    def __init__(self, stream=None, quiet: bool = False):
        self.count = 0
        self.first: str | None = None
        self.quiet = quiet
        """True in a training run: the trainer prints a summary per step instead (`check_failures`)."""
        self._window: str | None = None
        self._stream = stream

    def report(self, message: str) -> None:
        """Count one failed sample; print `message` if it is the first of the run (and not `quiet`)."""
        self.count += 1
        if self._window is None:
            self._window = message
        if self.first is None:
            self.first = message
            if not self.quiet:
                print(f"minirl reward: {message}; the sample is scored 0 (later failures are only counted, in the "
                      "metric reward/failures)", file=self._stream or sys.stderr, flush=True)

    def merge(self, count: int, first: str | None) -> None:
        """Add `count` failures counted in another process (an agent-loop worker's own, quiet, log), the first
        of them `first`: the window and the once-per-run print then behave as if they had been reported here."""
        if count <= 0 and first is None:
            return
        if first is not None:
            self.report(first)
            count -= 1
        self.count += max(0, count)

    def take_window(self) -> str | None:
        """The first failure reported since the last call (None if none), and start a new window."""
        message, self._window = self._window, None
        return message

    @classmethod
    def notice_slow(cls, fn: Callable, what: str, timeout: float) -> None:
        """Print once per process that a score call passed `SLOW_NOTICE_S` (and is still awaited)."""
        if cls._slow_noticed:
            return
        cls._slow_noticed = True
        print(f"minirl reward: {function_location(fn)} has run {SLOW_NOTICE_S:g} s on {what or 'a sample'} and is "
              f"still running (reward.timeout={timeout:g} s; other samples are scored meanwhile)",
              file=sys.stderr, flush=True)
