"""How the controller talks to a rollout server process: method calls over one socket on 127.0.0.1.

verl reaches each rollout server as a Ray actor handle (`server.generate.remote(...)`,
`ray.remote(vLLMHttpServer)`) and, for chat completions, over HTTP. minirl's server processes are
plain OS processes (starting Ray costs 30-40 s on a small machine, more than a whole tiny run), so
the same method calls go over a TCP socket bound to 127.0.0.1:

- a *frame* is an 8-byte big-endian length and a pickled message;
- the client's first frame is a random token the server was started with; a connection that
  sends anything else is closed (only the process that started the server can call it);
- a request is `(call_id, method, kwargs)`, its reply `(call_id, ok, result or error text)`; many
  calls share one connection and run concurrently on the server (every call is an asyncio task), so
  the agent loop's hundreds of `generate` requests and a control call such as `abort_all_requests`
  can be in flight at the same time.

`EventLoopThread` is the controller's side of the asyncio story: the RPC connections live in one
event loop on a background thread, and any caller, synchronous (the trainer) or in another event loop
(the agent loop run by `run_coroutine`, a Jupyter cell), submits coroutines to it.
"""

from __future__ import annotations

import asyncio
import itertools
import pickle
import struct
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import Any

__all__ = ["LOOPBACK", "EventLoopThread", "RPCClient", "RPCError", "serve_rpc"]

LOOPBACK = "127.0.0.1"
_HEADER = struct.Struct(">Q")


class RPCError(RuntimeError):
    """A server method raised: the message carries the server's exception type and text."""


async def _read_frame(reader: asyncio.StreamReader) -> Any:
    (length,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    return pickle.loads(await reader.readexactly(length))


def _frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


# ------------------------------------------------------------------------------------------ server


async def serve_rpc(handler: Callable[[str, dict], Awaitable[Any]], token: str,
                    port: int = 0) -> asyncio.AbstractServer:
    """Listen on 127.0.0.1:`port` (0: any free port); run `await handler(method, kwargs)` for every call.

    Connections must first send `token`; every request runs as its own task, so a slow call never
    blocks the others.
    """

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lock = asyncio.Lock()
        tasks: set[asyncio.Task] = set()

        async def answer(call_id, method, kwargs):
            try:
                reply = (call_id, True, await handler(method, kwargs))
            except Exception as e:  # noqa: BLE001 (any error goes back to the caller, in one line)
                reply = (call_id, False, f"{type(e).__name__}: {e}")
            async with lock:
                writer.write(_frame(reply))
                await writer.drain()

        try:
            if await asyncio.wait_for(_read_frame(reader), timeout=10) != token:
                return
            while True:
                call_id, method, kwargs = await _read_frame(reader)
                task = asyncio.ensure_future(answer(call_id, method, kwargs))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(connection, host=LOOPBACK, port=port)


# ------------------------------------------------------------------------------------------ client


class RPCClient:
    """One connection to a server; `await client.call(method, **kwargs)` from the loop that connected it."""

    def __init__(self, host: str, port: int, token: str) -> None:
        if host != LOOPBACK:
            raise ValueError(f"rollout servers listen on {LOOPBACK} only, not {host!r}.")
        self.host, self.port, self.token = host, int(port), token
        self._ids = itertools.count()
        self._pending: dict[int, asyncio.Future] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._closed_reason: str | None = None

    async def connect(self) -> None:
        reader, self._writer = await asyncio.open_connection(self.host, self.port)
        self._writer.write(_frame(self.token))
        await self._writer.drain()
        self._reader_task = asyncio.ensure_future(self._read_replies(reader))

    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                call_id, ok, result = await _read_frame(reader)
                fut = self._pending.pop(call_id, None)
                if fut is None or fut.done():
                    continue
                if ok:
                    fut.set_result(result)
                else:
                    fut.set_exception(RPCError(result))
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            self._closed_reason = f"the server at {self.host}:{self.port} closed the connection ({type(e).__name__})"
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(RPCError(self._closed_reason or "connection closed"))
            self._pending.clear()

    async def call(self, method: str, /, **kwargs) -> Any:
        """Call `method` on the server; raises `RPCError` if it raised or the connection is gone."""
        if self._writer is None or self._closed_reason is not None:
            raise RPCError(self._closed_reason or f"not connected to {self.host}:{self.port}")
        call_id = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[call_id] = fut
        self._writer.write(_frame((call_id, method, kwargs)))
        await self._writer.drain()
        return await fut

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._reader_task is not None:
            self._reader_task.cancel()
            self._reader_task = None


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
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self.loop.is_running() and not self.loop.is_closed():
            self.loop.close()
