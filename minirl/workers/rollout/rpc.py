"""How the controller talks to a rollout server process: method calls over one socket on 127.0.0.1.

verl reaches each rollout server as a Ray actor handle (`server.generate.remote(...)`,
`ray.remote(vLLMHttpServer)`) and, for chat completions, over HTTP. minirl's server processes are
plain OS processes (starting Ray costs 30-40 s on a small machine, more than a whole tiny run), so
the same method calls go over a TCP socket bound to 127.0.0.1. Any local user can connect to a
loopback port, so the server treats every connection as a stranger until it proves otherwise:

- the client first sends the run's token, `TOKEN_BYTES` raw bytes (the server was started with it;
  it never shows in `ps`). The server reads exactly that many bytes (within `AUTH_TIMEOUT_S`) and
  compares them in constant time (`hmac.compare_digest`); anything else closes the connection at
  once, quietly. Nothing a client sends is unpickled, buffered or logged before that;
- after it, a *frame* is an 8-byte big-endian length and a pickled message, at most
  `MAX_FRAME_BYTES` long (a longer one closes the connection before a byte of it is read), both ways;
- a request is `(call_id, method, kwargs)`, its reply `(call_id, ok, result or error text)`; many
  calls share one connection and run concurrently on the server (every call is an asyncio task), so
  the agent loop's hundreds of `generate` requests and a control call such as `abort_all_requests`
  can be in flight at the same time;
- the client pings the server every `HEARTBEAT_S` (answered by the server's event loop, not its
  engine, so a long generation still answers). A server that answers nothing for `hung_after_s`
  (`actor_rollout_ref.rollout.server.timeout`) is *hung* (e.g. stopped by SIGSTOP); one whose
  connection closes is *gone*. Either way every waiting and later call raises `ServerLost`, whose one
  line names the server, its pid, what it was doing and its last log lines. A call that never touches
  the engine (`CONTROL_METHODS`) and gets no answer within `hung_after_s` loses the server the same way.

Only the process that started a server holds its token, and the client connects to the port the
server wrote into a private (0700) directory while the server is listening on it, so no other process
can stand in for it; the client still caps the frames it reads.

`EventLoopThread` is the controller's side of the asyncio story: the RPC connections live in one
event loop on a background thread, and any caller, synchronous (the trainer) or in another event loop
(the agent loop run by `run_coroutine`, a Jupyter cell), submits coroutines to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import io
import itertools
import pickle
import secrets
import struct
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import Any

__all__ = ["AUTH_TIMEOUT_S", "CONTROL_METHODS", "HEARTBEAT_S", "HUNG_AFTER_S", "LOOPBACK", "MAX_FRAME_BYTES",
           "TOKEN_BYTES", "EventLoopThread", "RPCClient", "RPCError", "ServerLost", "new_token", "serve_rpc"]

LOOPBACK = "127.0.0.1"
TOKEN_BYTES = 32
"""Length of the token a client sends first (`new_token()`: 16 random bytes as 32 hex characters)."""
AUTH_TIMEOUT_S = 5.0
"""A connection that has not sent its token within this many seconds is closed."""
MAX_FRAME_BYTES = 64 * 2**20
"""The largest frame either side accepts (a `generate` request or its `TokenOutput` is a few KiB)."""
HEARTBEAT_S = 1.0
"""How often the client pings each server."""
HUNG_AFTER_S = 60.0
"""Default of `hung_after_s`: a server silent this long is hung (`actor_rollout_ref.rollout.server.timeout`)."""
CONTROL_METHODS = frozenset({"status", "set_global_steps", "resume_generation", "sleep", "wake_up", "shutdown"})
"""Calls answered by the server's event loop without waiting for its engine: they time out after `hung_after_s`."""
_PING = "__ping__"
_HEADER = struct.Struct(">Q")


class RPCError(RuntimeError):
    """A server method raised: the message carries the server's exception type and text."""


class ServerLost(RPCError):
    """The server process is gone or hung: one line with its name, pid, what it was doing and its last log lines.

    `address` (`host:port`), `event` (what the client saw) and `doing` (the calls in flight) come with it, so an
    agent-loop worker process can hand them to the controller, which words the line with the server's pid,
    exit code and log lines (`AgentLoopManagerTQ`).
    """

    def __init__(self, line: str, address: str | None = None, event: str | None = None,
                 doing: str | None = None) -> None:
        super().__init__(line)
        self.address, self.event, self.doing = address, event, doing

    def __reduce__(self):
        return type(self), (str(self), self.address, self.event, self.doing)


class FrameTooLarge(ConnectionError):
    """A frame header announced more than `MAX_FRAME_BYTES`; the connection is closed without reading it."""


def new_token() -> str:
    """A fresh token for one server (`TOKEN_BYTES` hex characters)."""
    return secrets.token_hex(TOKEN_BYTES // 2)


def _token_bytes(token: str | bytes) -> bytes:
    raw = token.encode() if isinstance(token, str) else bytes(token)
    if len(raw) != TOKEN_BYTES:
        raise ValueError(f"an RPC token is {TOKEN_BYTES} bytes (new_token()), not {len(raw)}")
    return raw


async def _read_frame(reader: asyncio.StreamReader, limit: int = MAX_FRAME_BYTES) -> Any:
    (length,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    if length > limit:
        raise FrameTooLarge(f"a frame of {length} bytes (the limit is {limit})")
    return pickle.loads(await reader.readexactly(length))


class _Pickler(pickle.Pickler):
    """Plain pickle, except that a CPU tensor travels as its numpy array and comes back with `torch.from_numpy`.

    torch's own pickling of a tensor runs a `torch.load` per storage on the receiving side (~0.1 ms each): an
    agent-loop worker's 256 trajectories a step, five tensors each, cost the controller 0.2 s of CPU that way;
    as numpy arrays, a few ms."""

    def reducer_override(self, obj):
        torch = sys.modules.get("torch")
        if (torch is not None and type(obj) is torch.Tensor and obj.device.type == "cpu" and not obj.requires_grad
                and obj.layout == torch.strided and obj.dtype in _NUMPY_DTYPES):
            return torch.from_numpy, (obj.detach().numpy(),)
        return NotImplemented


def _numpy_dtypes() -> frozenset:
    try:
        import torch
    except ImportError:
        return frozenset()
    return frozenset({torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8,
                      torch.uint8, torch.bool})


_NUMPY_DTYPES = _numpy_dtypes()


def _frame(obj: Any) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    data = buffer.getvalue()
    if len(data) > MAX_FRAME_BYTES:
        raise RPCError(f"a message of {len(data)} bytes is larger than the RPC frame limit ({MAX_FRAME_BYTES} bytes)")
    return _HEADER.pack(len(data)) + data


# ------------------------------------------------------------------------------------------ server


async def serve_rpc(handler: Callable[[str, dict], Awaitable[Any]], token: str,
                    port: int = 0) -> asyncio.AbstractServer:
    """Listen on 127.0.0.1:`port` (0: any free port); run `await handler(method, kwargs)` for every call.

    A connection must first send `token` (its `TOKEN_BYTES` raw bytes); every request then runs as its
    own task, so a slow call never blocks the others. Pings are answered here, by the event loop.
    """
    expected = _token_bytes(token)

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lock = asyncio.Lock()
        tasks: set[asyncio.Task] = set()

        async def send(call_id, ok, value) -> None:
            try:
                data = _frame((call_id, ok, value))
            except Exception as e:  # noqa: BLE001 (an unpicklable or oversized result: the caller gets why)
                data = _frame((call_id, False, f"{type(e).__name__}: {e}"))
            async with lock:
                writer.write(data)
                await writer.drain()

        async def answer(call_id, method, kwargs):
            try:
                reply = (True, await handler(method, kwargs))
            except Exception as e:  # noqa: BLE001 (any error goes back to the caller, in one line)
                reply = (False, f"{type(e).__name__}: {e}")
            with contextlib.suppress(ConnectionError, RuntimeError):  # the client has gone: nobody to answer
                await send(call_id, *reply)

        try:
            # authenticate before anything else: a fixed number of raw bytes, compared in constant time
            offered = await asyncio.wait_for(reader.readexactly(len(expected)), AUTH_TIMEOUT_S)
            if not hmac.compare_digest(offered, expected):
                return
            while True:
                call_id, method, kwargs = await _read_frame(reader)
                if method == _PING:
                    await send(call_id, True, None)
                    continue
                task = asyncio.ensure_future(answer(call_id, method, kwargs))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except asyncio.CancelledError:  # the server is shutting down: its answers in flight end too, quietly
            for task in tasks:  # (not re-raised: asyncio's stream callback would log a cancelled handler as an error)
                task.cancel()
        except Exception:  # noqa: BLE001, S110 (a stranger, a closed socket, a bad frame: close, say nothing)
            pass
        finally:
            writer.transport.abort()  # drop whatever else was sent, at once

    return await asyncio.start_server(connection, host=LOOPBACK, port=port)


# ------------------------------------------------------------------------------------------ client


def _retrieve(fut: asyncio.Future) -> None:
    """Mark a future's exception as seen (asyncio logs the ones nobody looked at)."""
    if not fut.cancelled():
        fut.exception()


def _doing(methods: list[str]) -> str:
    """What calls were in flight, e.g. 'generate (16 calls), update_weights'."""
    if not methods:
        return "nothing (no call in flight)"
    counts: dict[str, int] = {}
    for m in methods:
        counts[m] = counts.get(m, 0) + 1
    return ", ".join(m if k == 1 else f"{m} ({k} calls)" for m, k in counts.items())


class RPCClient:
    """One connection to a server; `await client.call(method, **kwargs)` from the loop that connected it.

    Args:
        host, port: where the server listens (127.0.0.1 only).
        token: the server's token (`new_token()`).
        name: the server in messages, e.g. 'rollout server 1'.
        hung_after_s: a server that answers nothing (not even a ping) this long is hung.
        describe: `describe(event, doing) -> str`, the `ServerLost` line (the replica adds pid, exit code and
            log lines); without it the line is `"<name> <event> while it ran <doing>"`.
    """

    def __init__(self, host: str, port: int, token: str, name: str | None = None,
                 hung_after_s: float = HUNG_AFTER_S, describe: Callable[[str, str], str] | None = None) -> None:
        if host != LOOPBACK:
            raise ValueError(f"rollout servers listen on {LOOPBACK} only, not {host!r}.")
        self.host, self.port, self.token = host, int(port), token
        self.name = name or f"the server at {host}:{port}"
        self.hung_after_s = float(hung_after_s)
        self.describe = describe
        self._ids = itertools.count()
        self._pending: dict[int, tuple[asyncio.Future, str]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: list[asyncio.Task] = []
        self._lost: str | None = None
        self._lost_how: tuple[str, str] = ("", "")
        self._closing = False
        self._last_heard = time.monotonic()

    async def connect(self, timeout: float = 30.0) -> None:
        """Connect, send the token, and wait for the first ping's answer (a refused token fails here)."""
        reader, self._writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), timeout)
        self._writer.write(_token_bytes(self.token))
        self._last_heard = time.monotonic()
        self._tasks = [asyncio.ensure_future(self._read_replies(reader)), asyncio.ensure_future(self._heartbeat())]
        try:
            await asyncio.wait_for(self.call(_PING), timeout)
        except (RPCError, asyncio.TimeoutError) as e:
            await self.close()
            raise RPCError(f"{self.name} at {self.host}:{self.port} did not accept the connection ({e})") from None

    # ------------------------------------------------------------------------- the connection's state
    def _lose(self, event: str) -> None:
        """Mark the server lost (once): fail every waiting call with one `ServerLost` line, drop the socket."""
        if self._lost is not None or self._closing:
            return
        doing = _doing([method for _, method in self._pending.values() if method != _PING])
        self._lost_how = (event, doing)
        try:
            self._lost = self.describe(event, doing) if self.describe else f"{self.name} {event} while it ran {doing}"
        except Exception as e:  # noqa: BLE001 (a message must come out of this, whatever happens)
            self._lost = f"{self.name} {event} while it ran {doing} ({type(e).__name__} while describing it)"
        for fut, _ in self._pending.values():
            if not fut.done():
                fut.set_exception(self._lost_error())
        self._pending.clear()
        if self._writer is not None:
            self._writer.transport.abort()

    def _lost_error(self) -> ServerLost:
        event, doing = self._lost_how
        return ServerLost(self._lost, address=f"{self.host}:{self.port}", event=event, doing=doing)

    @property
    def lost(self) -> str | None:
        """The `ServerLost` line once the server is gone or hung, else None."""
        return self._lost

    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                call_id, ok, result = await _read_frame(reader)
                self._last_heard = time.monotonic()
                fut = self._pending.pop(call_id, (None, ""))[0]
                if fut is None or fut.done():
                    continue
                if ok:
                    fut.set_result(result)
                else:
                    fut.set_exception(RPCError(result))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 (EOF, reset, a bad frame: the server is lost either way)
            self._lose(f"closed the connection ({type(e).__name__})")

    async def _heartbeat(self) -> None:
        """Ping every `HEARTBEAT_S` (or a quarter of `hung_after_s`); declare the server hung after `hung_after_s`
        of silence."""
        interval = min(HEARTBEAT_S, self.hung_after_s / 4)
        while self._lost is None:
            await asyncio.sleep(interval)
            silent = time.monotonic() - self._last_heard
            if silent > self.hung_after_s:
                self._lose(f"answered nothing for {silent:.0f} s (hung, or stopped: SIGSTOP?; "
                           f"actor_rollout_ref.rollout.server.timeout={self.hung_after_s:g})")
                return
            if self._writer is not None and not any(m == _PING for _, m in self._pending.values()):
                fut = asyncio.get_running_loop().create_future()
                fut.add_done_callback(_retrieve)  # nobody awaits a ping
                call_id = next(self._ids)
                self._pending[call_id] = (fut, _PING)
                self._writer.write(_frame((call_id, _PING, {})))  # no drain: a full buffer must not stop the watch

    async def call(self, method: str, /, **kwargs) -> Any:
        """Call `method` on the server; raises `RPCError` if it raised, `ServerLost` if the server is gone.

        Calls in `CONTROL_METHODS` (and the ping) must answer within `hung_after_s`, or the server is lost.
        """
        if self._lost is not None:
            raise self._lost_error()
        if self._writer is None:
            raise RPCError(f"not connected to {self.name} at {self.host}:{self.port}")
        call_id = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_retrieve)  # a timed-out control call's answer may come (or fail) later
        self._pending[call_id] = (fut, method)
        try:
            self._writer.write(_frame((call_id, method, kwargs)))
            await self._writer.drain()
        except (ConnectionError, RuntimeError) as e:
            self._pending.pop(call_id, None)
            if isinstance(e, RPCError):
                raise
            self._lose(f"closed the connection ({type(e).__name__})")
            raise self._lost_error() from None
        if method not in CONTROL_METHODS and method != _PING:
            return await fut
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.hung_after_s)
        except asyncio.TimeoutError:  # a call that needs no engine and got no answer: the server is no use
            self._lose(f"did not answer {method} within {self.hung_after_s:g} s (hung, or stopped: SIGSTOP?; "
                       f"actor_rollout_ref.rollout.server.timeout={self.hung_after_s:g})")
            raise self._lost_error() from None

    async def close(self) -> None:
        """Close the connection; waiting calls raise `RPCError`."""
        self._closing = True
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for fut, _ in self._pending.values():
            if not fut.done():
                fut.set_exception(RPCError(f"{self.name}: the connection was closed by this process"))
        self._pending.clear()
        current = asyncio.current_task()
        # ended before its loop stops
        await asyncio.gather(*(t for t in tasks if t is not current), return_exceptions=True)


# ----------------------------------------------------------------------------- the client's loop


class EventLoopThread:
    """An asyncio loop on a daemon thread; `submit`, `run` and `call` reach it from anywhere."""

    def __init__(self, name: str = "minirl-rollout-client") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine) -> Future:
        """Schedule `coro` on the loop; a `concurrent.futures.Future` of its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine, timeout: float | None = None) -> Any:
        """Run `coro` on the loop and wait for it here (synchronous callers)."""
        if self.in_loop():
            raise RuntimeError("EventLoopThread.run from inside its own loop would deadlock; await the coroutine.")
        return self.submit(coro).result(timeout)

    async def call(self, coro: Coroutine) -> Any:
        """Await `coro` from any event loop: run there directly if this is the loop, else hop over."""
        if self.in_loop():
            return await coro
        return await asyncio.wrap_future(self.submit(coro))

    def in_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def stop(self) -> None:
        """End every task still on the loop (connections, readers), then stop the loop and its thread."""
        if self.loop.is_running() and not self.in_loop():
            async def end_tasks():
                rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in rest:
                    task.cancel()
                await asyncio.gather(*rest, return_exceptions=True)

            with contextlib.suppress(Exception):  # stopping anyway
                self.run(end_tasks(), timeout=5)
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self.loop.is_running() and not self.loop.is_closed():
            self.loop.close()
