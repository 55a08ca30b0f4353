"""Ctrl-C and SIGTERM stop a run at once, in one line, and leave its last checkpoint as it was.

Python turns Ctrl-C (SIGINT) into `KeyboardInterrupt`, so `finally` blocks run (the trainer's `close`
stops rollout and reward-model servers and Ray workers); SIGTERM's default action kills the process
without them. `stop_on_signals` makes SIGTERM do what Ctrl-C does, and `stopped_line` is what the entry
points print instead of a traceback. A checkpoint is written to a temporary directory and renamed into
place (`minirl.trainer.ppo.checkpointing`), so a run stopped at any moment keeps its last complete one;
`signals_deferred` holds a stop that arrives while one is being written until it is on disk (torch's
distributed checkpoint would otherwise wrap the `KeyboardInterrupt` in a `CheckpointException`).
"""

from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["Stopped", "signals_deferred", "stop_on_signals", "stopped_line"]


class Stopped(KeyboardInterrupt):
    """SIGTERM arrived (a `KeyboardInterrupt`, so everything that handles Ctrl-C handles it)."""


_received: list[str] = []  # the signals stop_on_signals saw, so the stop line names the right one


@contextlib.contextmanager
def stop_on_signals():
    """While inside, SIGTERM does what Ctrl-C does in the main thread (a no-op elsewhere).

    That is: it calls the SIGINT handler in place (inside `asyncio.run` that handler cancels the main
    task, which then ends in `KeyboardInterrupt`; elsewhere it raises `KeyboardInterrupt`), or raises
    `Stopped` where SIGINT is ignored or left to the OS (a background job).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        _received.append(signal.Signals(signum).name)
        on_sigint = signal.getsignal(signal.SIGINT)
        if callable(on_sigint):
            on_sigint(signal.SIGINT, frame)
        else:
            raise Stopped(signal.Signals(signum).name)

    _received.clear()
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def signals_deferred():
    """While inside (writing a checkpoint), Ctrl-C and SIGTERM are held; the first one held acts on leaving.

    The block finishes, the handlers in place before it are restored, and the held signal is raised again,
    so it does exactly what it would have done a moment earlier. A no-op outside the main thread, where
    Python delivers no signals.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum, frame):
        held.append(signum)

    previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if held:
            signal.raise_signal(held[0])


def stopped_line(prog: str, error: KeyboardInterrupt) -> tuple[str, int]:
    """The line to print and the exit code (130 for Ctrl-C, 143 for SIGTERM, as shells report them)."""
    term = isinstance(error, Stopped) or "SIGTERM" in _received
    name, code = ("SIGTERM", 143) if term else ("Ctrl-C (SIGINT)", 130)
    return (f"{prog}: stopped by {name}; the last checkpoint written stands (trainer.resume_mode=auto resumes "
            "from it)."), code
