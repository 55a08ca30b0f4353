"""Ctrl-C and SIGTERM stop a run at once, in one line, and leave its last checkpoint as it was.

Python turns Ctrl-C (SIGINT) into `KeyboardInterrupt`, so `finally` blocks run (the trainer's `close`
stops rollout and reward-model servers and Ray workers); SIGTERM's default action kills the process
without them. `stop_on_signals` makes SIGTERM do what Ctrl-C does, and `stopped_line` is what the entry
points print instead of a traceback. A checkpoint is written to a temporary directory and renamed into
place (`minirl.trainer.ppo.checkpointing`), so a run stopped at any moment keeps its last complete one.
"""

from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["Stopped", "stop_on_signals", "stopped_line"]


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


def stopped_line(prog: str, error: KeyboardInterrupt) -> tuple[str, int]:
    """The line to print and the exit code (130 for Ctrl-C, 143 for SIGTERM, as shells report them)."""
    term = isinstance(error, Stopped) or "SIGTERM" in _received
    name, code = ("SIGTERM", 143) if term else ("Ctrl-C (SIGINT)", 130)
    return (f"{prog}: stopped by {name}; the last checkpoint written stands (trainer.resume_mode=auto resumes "
            "from it)."), code
