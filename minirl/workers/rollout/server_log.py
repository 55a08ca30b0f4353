"""A rollout server's output, passed through and remembered, and the one line that says a server was lost.

The controller starts each rollout server with its stderr on a pipe; `LogTail` copies everything the
server writes to the controller's own stderr as it arrives (so it reads as before) and keeps the last
few KiB. When `RPCClient` finds the server gone or hung, `lost_server_message` writes the line the run
stops with: which server, its pid, what happened (its exit code and signal, or how long it has been
silent), what the controller was waiting for, its last log lines, that the last checkpoint stands, and
the fix.

verl: a rollout server is a Ray actor, and a dead actor surfaces as `ray.exceptions.ActorDiedError`
on the next `.remote()` call with Ray's own account of the death; a hung one waits forever. minirl's
servers are plain processes, so minirl watches them itself (`minirl.workers.rollout.rpc`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading

__all__ = ["LogTail", "exit_description", "lost_server_message"]


class LogTail:
    """Copy a pipe to this process's stderr (fd 2) as it arrives and keep its last `keep_bytes`."""

    def __init__(self, pipe, keep_bytes: int = 8192) -> None:
        self._pipe = pipe
        self._keep = int(keep_bytes)
        self._buf = b""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, name="minirl-server-log", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        fd = self._pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            try:
                os.write(2, chunk)
            except OSError:
                pass
            with self._lock:
                self._buf = (self._buf + chunk)[-self._keep:]

    def lines(self, n: int = 3, width: int = 200) -> list[str]:
        """The last `n` non-empty lines as a terminal shows them (a progress bar's last frame), each cut to `width`."""
        with self._lock:
            text = self._buf.decode(errors="replace")
        parts = [line.split("\r")[-1].strip() for line in text.split("\n")]
        return [p if len(p) <= width else p[:width] + "..." for p in parts if p][-n:]


def exit_description(returncode: int) -> str:
    """'exited with code 1' / 'was killed by SIGKILL (exit code -9)'."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name} (exit code {returncode})"
    return f"exited with code {returncode}"


def lost_server_message(name: str, process: subprocess.Popen | None, address: str | None, event: str, doing: str,
                        tail: LogTail | None) -> str:
    """The one line a run stops with when a rollout server is gone or hung.

    `event` is what the client saw ('closed the connection (IncompleteReadError)', 'answered nothing for
    60 s ...'); when the process has exited, its exit code replaces it.
    """
    pid = process.pid if process is not None else "?"
    if process is not None and "closed the connection" in event:
        try:
            process.wait(timeout=1.0)  # a dead server's socket closes a moment before the process is reaped
        except subprocess.TimeoutExpired:
            pass
    if process is not None and process.poll() is not None:
        event = exit_description(process.returncode)
    lines = tail.lines() if tail is not None else []
    logs = "; its last log lines: " + " | ".join(repr(x) for x in lines) if lines else "; it logged nothing"
    return (f"{name} (pid {pid}, {address or 'not connected'}) {event} while the controller waited for {doing}{logs}. "
            "The run stops here; the last checkpoint stands. Fix: read the server's output above (out of memory? "
            "killed? stopped?), then run again (trainer.resume_mode=auto resumes from the last checkpoint).")
