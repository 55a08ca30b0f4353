"""The rollout as the agent loop sees it: the clients it awaits, and the managers that own the engines behind them.

Three clients, one call (`await client.generate(request_id, prompt_ids, sampling_params) -> TokenOutput`):

- `LLMServerClient`: requests to rollout server processes (`rollout.nnodes >= 1`), load balanced;
- `LocalLLMServerClient`: the in-controller engine (`rollout.nnodes = 0`, the default): the requests of
  one event-loop turn go to `BaseRollout.generate` as one batch;
- `ColocatedClient`: colocate_async's in-controller engine behind a pause gate (`ColocatedRollout`).

And what owns the engines:

- `LLMServerManager` starts the replicas (`RolloutReplica`, one server process each), in parallel,
  and owns the background event loop their connections live on; `get_client()` hands out clients;
  `shutdown()` (also on exit and when the manager is garbage collected) stops every process.
- `GlobalRequestLoadBalancer` picks a server per request: a request id seen before goes back to the
  same server (sticky: a multi-turn session, or a resumed partial rollout, finds its prefix there),
  a new one goes to the server with the fewest requests in flight.
- `LLMServerClient.generate(request_id, prompt_ids, sampling_params)`:
  requests from all sessions go out concurrently; the servers batch them. When a server aborts a
  request for a weight sync, the client keeps the tokens and log-probs it got, waits for generation
  to resume, and asks for the rest with `prompt + tokens so far` and the remaining budget, so one
  response can span two weight versions: `extra_fields["min_global_steps"]` and
  `["max_global_steps"]` record the first and last version that sampled it, `["num_resumes"]` how
  often it was resumed and `["resumed_at"]` after how many tokens.

Mirrors verl (`verl/workers/rollout/llm_server.py`): `GlobalRequestLoadBalancer` (`:46`,
`acquire_server` `:83`, `release_server` `:116`), `LLMServerClient.generate` (`:240`) with the
resume loop of `FullyAsyncLLMServerClient.generate` (`:346`), and `LLMServerManager` (`:464`,
`_initialize_llm_servers` `:518`, `get_client` `:613`). What minirl simplifies: the balancer is a plain
object in the controller (verl: a Ray actor shared by every AgentLoopWorker), routing is exactly
least-in-flight with ties to the lowest rank (verl also offers hash routing for `full_determinism`),
and the resume loop runs in every client (verl keeps it in the fully-async client; its sync
trainer never aborts).

`ColocatedRollout` is colocate_async's rollout: the in-controller engine (verl: *hybrid* replicas
inside the training workers, sharing their GPUs) behind the replica interface
(`minirl.workers.rollout.replica.PausableLocalReplica`), with a real `abort_all_requests` /
`resume_generation`: an abort lets the running engine call stop after its current token and holds
every new request, so the trainer can train and load new weights while the sessions wait; resumed
requests continue with their tokens and log-probs through `LLMServerClient.generate`'s resume loop
(verl's `FullyAsyncLLMServerClient`, `verl/workers/rollout/llm_server.py:292`). Its event loop is a
thread of the controller process (verl: Ray actors).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import secrets
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import asdict
from typing import Any

from minirl.config.derived import generation_nice, num_replicas, uses_servers
from minirl.workers.rollout.base import BaseRollout, SamplingParams, TokenOutput
from minirl.workers.rollout.replica import (
    PausableLocalReplica,
    RolloutReplica,
    ServedLocalReplica,
    server_timeout,
)
from minirl.workers.rollout.rpc import (
    HUNG_AFTER_S,
    LOOPBACK,
    EventLoopThread,
    RPCClient,
    RPCError,
    ServerLost,
)

__all__ = ["SESSION_REQUESTS", "BatchingLLMServerClient", "ColocatedClient", "ColocatedRollout",
           "GlobalRequestLoadBalancer", "LLMServerClient", "LLMServerManager", "LocalLLMServerClient",
           "LocalRolloutServer", "RemoteRolloutServer", "build_rollout", "client_for_endpoints"]

SESSION_REQUESTS: contextvars.ContextVar[list | None] = contextvars.ContextVar("minirl_session_requests", default=None)
"""The request records of the agent-loop session running in this context (minirl only, for the trace).

An agent-loop worker sets a fresh list before a session starts (`AgentLoopWorker._run_agent_loop`); every
call a client makes for it appends `{"sent", "received", "server_pid", "replica", "batch", "batch_size",
"batch_start", "batch_end", "global_steps"}`: when the request left, when its answer came back, and the engine
batch that computed it with the weight version it ran with (stamped by `RolloutServer`). A timeline then draws generation, agent-loop work and training as
rows of their processes."""


def _note_request(sent: float, out) -> None:
    records = SESSION_REQUESTS.get()
    if records is None:
        return
    x = out.extra_fields
    records.append({"sent": sent, "received": time.time(), "server_pid": x.get("server_pid"),
                    "replica": x.get("replica_rank"), "batch": x.get("server_batch"),
                    "batch_size": x.get("server_batch_size"), "batch_start": x.get("batch_start"),
                    "batch_end": x.get("batch_end"), "global_steps": x.get("global_steps", out.policy_version)})

DEFAULT_ROUTING_CACHE_SIZE = 10000
"""Request ids the sticky cache remembers (verl's `DEFAULT_ROUTING_CACHE_SIZE`)."""


class GlobalRequestLoadBalancer:
    """Sticky per request id, else least in flight (verl: `GlobalRequestLoadBalancer`).

    Args:
        servers: server id -> replica handle.
        max_cache_size: request ids remembered for stickiness (least recently used evicted first).
    """

    def __init__(self, servers: dict[str, Any], max_cache_size: int = DEFAULT_ROUTING_CACHE_SIZE) -> None:
        self._servers = dict(servers)
        self._inflight = {sid: 0 for sid in servers}
        self._sticky: OrderedDict[str, str] = OrderedDict()
        self._max_cache_size = int(max_cache_size)
        self._lock = threading.Lock()
        self.requests = {sid: 0 for sid in servers}
        """Requests sent to each server so far (for the trace)."""

    def acquire_server(self, request_id: str) -> tuple[str, Any]:
        """The server for `request_id`, counted as one more request in flight there."""
        with self._lock:
            sid = self._sticky.get(request_id)
            if sid is not None and sid in self._inflight:
                self._sticky.move_to_end(request_id)
            else:
                if not self._inflight:
                    raise RuntimeError("No available servers in load balancer")
                least = min(self._inflight.values())
                sid = next(s for s, n in self._inflight.items() if n == least)
                self._sticky[request_id] = sid
                while len(self._sticky) > self._max_cache_size:
                    self._sticky.popitem(last=False)
            self._inflight[sid] += 1
            self.requests[sid] += 1
            return sid, self._servers[sid]

    def release_server(self, server_id: str) -> None:
        """One request fewer in flight on `server_id`."""
        with self._lock:
            if self._inflight.get(server_id, 0) > 0:
                self._inflight[server_id] -= 1

    def add_servers(self, servers: dict[str, Any]) -> None:
        with self._lock:
            for sid, handle in servers.items():
                self._servers[sid], self._inflight[sid] = handle, 0
                self.requests.setdefault(sid, 0)

    def remove_servers(self, server_ids: list[str]) -> None:
        with self._lock:
            for sid in server_ids:
                self._servers.pop(sid, None)
                self._inflight.pop(sid, None)

    def get_status(self) -> dict:
        with self._lock:
            return {"servers": dict(self._inflight), "total_inflight": sum(self._inflight.values()),
                    "requests": dict(self.requests)}


class LLMServerClient:
    """What an agent loop awaits to sample from the rollout servers (verl: `LLMServerClient`).

    Same call as the in-process client (`LocalLLMServerClient`, below): `await
    client.generate(request_id, prompt_ids, sampling_params) -> TokenOutput`.
    """

    def __init__(self, load_balancer: GlobalRequestLoadBalancer, manager: LLMServerManager | None = None,
                 resume_sleep_s: float = 0.0) -> None:
        self.load_balancer = load_balancer
        self.manager = manager
        self.resume_sleep_s = resume_sleep_s
        self.batches: list[int] = []
        """The batch sizes the servers ran this client's requests in (one entry per server batch)."""
        self._seen_batches: set[tuple] = set()
        self.resumed_requests = 0
        """Requests that were aborted by a weight sync and resumed (partial rollouts)."""

    @property
    def policy_version(self) -> int:
        """The oldest weight version any server holds (what a request sent now may meet)."""
        return self.manager.policy_version if self.manager is not None else 0

    async def _generate_once(self, request_id: str, prompt_ids: list[int], sampling_params):
        server_id, server = self.load_balancer.acquire_server(request_id)
        try:
            return await server.generate(request_id, prompt_ids, sampling_params)
        finally:
            self.load_balancer.release_server(server_id)

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params):
        """Sample one response; a request aborted by a weight sync resumes where it stopped."""
        import dataclasses

        budget = int(sampling_params.max_tokens)
        params = sampling_params
        tokens: list[int] = []
        log_probs: list[float] | None = [] if sampling_params.logprobs else None
        versions: list[int] = []
        resumed_at: list[int] = []
        while True:
            sent = time.time()
            out = await self._generate_once(request_id, list(prompt_ids) + tokens, params)
            _note_request(sent, out)
            self._record_batch(out)
            tokens.extend(out.token_ids)
            if log_probs is not None and out.log_probs is not None:
                log_probs.extend(out.log_probs)
            if out.token_ids or out.stop_reason != "aborted":
                versions.append(int(out.extra_fields.get("global_steps", out.policy_version)))
            if out.stop_reason != "aborted" or len(tokens) >= budget:
                stop = out.stop_reason if out.stop_reason != "aborted" else "length"
                break
            resumed_at.append(len(tokens))
            if self.resume_sleep_s:
                await asyncio.sleep(self.resume_sleep_s)
            params = dataclasses.replace(sampling_params, max_tokens=budget - len(tokens))
        if resumed_at:
            self.resumed_requests += 1
        versions = versions or [int(out.policy_version)]
        extra = dict(out.extra_fields)
        extra.update(min_global_steps=min(versions), max_global_steps=max(versions), num_resumes=len(resumed_at),
                     resumed_at=resumed_at)
        return TokenOutput(token_ids=tokens, log_probs=log_probs, stop_reason=stop, policy_version=max(versions),
                           extra_fields=extra)

    def _record_batch(self, out) -> None:
        x = out.extra_fields
        key = (x.get("server_pid", x.get("replica_rank")), x.get("server_batch"))
        if key[1] is not None and key not in self._seen_batches:
            self._seen_batches.add(key)
            self.batches.append(int(x.get("server_batch_size", 1)))
            self.engine_batches.append({"server_pid": x.get("server_pid"), "replica": x.get("replica_rank"),
                                        "batch": x.get("server_batch"), "size": int(x.get("server_batch_size", 1)),
                                        "start": x.get("batch_start"), "end": x.get("batch_end"),
                                        "global_steps": x.get("global_steps")})

    @property
    def engine_batches(self) -> list[dict]:
        """Every engine batch this client's requests ran in since the last `pop_stats` (pid, id, size, span)."""
        if not hasattr(self, "_engine_batches"):
            self._engine_batches: list[dict] = []
        return self._engine_batches

    def pop_stats(self) -> dict:
        """What the trace records about the last rollout: server batches, requests per server, resumes."""
        stats = {"rollout_batches": list(self.batches), "requests_per_server": dict(self.load_balancer.requests),
                 "resumed_requests": self.resumed_requests, "engine_batches": list(self.engine_batches)}
        self.batches.clear()
        self.engine_batches.clear()
        self._seen_batches.clear()
        self.resumed_requests = 0
        for sid in self.load_balancer.requests:
            self.load_balancer.requests[sid] = 0
        return stats


class LocalLLMServerClient:
    """The in-controller client: `await client.generate(request_id, prompt_ids, sampling_params)`.

    The same call as verl's `LLMServerClient` (`verl/workers/rollout/llm_server.py:197`), which
    routes each request to a vLLM/SGLang server (`generate`, `:240`); minirl's client of the rollout
    server processes is `LLMServerClient` above. Here requests wait in a
    queue until every session that is ready has asked, then go to the in-process rollout as one batch
    (`BaseRollout.generate`): the one-process debug mode (`actor_rollout_ref.rollout.nnodes=0`).
    """

    def __init__(self, rollout: BaseRollout):
        self.rollout = rollout
        self._pending: list[tuple[list[int], SamplingParams, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None
        self.batches: list[int] = []  # sizes of the batches sent, for the trace
        self._count = 0  # batches sent so far (their ids)

    @property
    def policy_version(self) -> int:
        """The weight version the rollout holds now."""
        return self.rollout.policy_version

    def pop_stats(self) -> dict:
        """What the trace records about the last rollout: the batch sizes sent to the rollout (then cleared)."""
        stats = {"rollout_batches": list(self.batches)}
        self.batches.clear()
        return stats

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: SamplingParams) -> TokenOutput:
        sent = time.time()
        out = await self.generate_unrecorded(request_id, prompt_ids, sampling_params)
        _note_request(sent, out)
        return out

    async def generate_unrecorded(self, request_id: str, prompt_ids: list[int], sampling_params) -> TokenOutput:
        """`generate` without the session's request record (a wrapping client records the call itself)."""
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((prompt_ids, sampling_params, fut))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        return await fut

    async def _flush(self):
        while self._pending:  # requests that arrive while a batch runs go in the next one
            await self._flush_once()

    async def _flush_once(self):
        # Let every runnable session reach its generate() call before sending the batch.
        while True:
            n = len(self._pending)
            await asyncio.sleep(0)
            if len(self._pending) == n:
                break
        pending, self._pending = self._pending, []
        groups: dict[int, list] = {}
        for item in pending:  # one batch per distinct SamplingParams object
            groups.setdefault(id(item[1]), []).append(item)
        # At most `max_num_seqs` per call (the hf rollout's sub-batch). After each call its sessions run
        # on (and start their reward, in threads) before the next call: reward overlaps generation.
        size = int(getattr(self.rollout, "max_num_seqs", 0) or 0) or len(pending)
        chunks = [items[i:i + size] for items in groups.values() for i in range(0, len(items), size)]
        for items in chunks:
            start = time.time()
            try:
                outs = self.rollout.generate([p for p, _, _ in items], items[0][1])
            except Exception as e:  # noqa: BLE001 (surface the rollout's error in every waiting session)
                for _, _, fut in items:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            self.batches.append(len(items))
            self._count += 1
            end, batch = time.time(), self._count
            for (_, _, fut), out in zip(items, outs):
                out.extra_fields.setdefault("server_pid", os.getpid())  # the batch that computed it, for the trace
                out.extra_fields.setdefault("server_batch", batch)
                out.extra_fields.setdefault("server_batch_size", len(items))
                out.extra_fields.setdefault("batch_start", start)
                out.extra_fields.setdefault("batch_end", end)
                fut.set_result(out)
            if len(chunks) > 1:
                for _ in range(4):  # the sessions just answered reach their reward call
                    await asyncio.sleep(0)


class ColocatedClient(LLMServerClient):
    """The agent loop's client of the colocated engine: batching, a pause gate, and the resume loop.

    Every call runs on the owner's loop (so the in-process batching client always sees one event
    loop); `_generate_once` waits at the gate, then sends the request to the `LocalLLMServerClient`,
    with equal sampling parameters interned so that resumed requests with the same remaining budget
    share one engine batch.
    """

    def __init__(self, owner: ColocatedRollout) -> None:
        super().__init__(GlobalRequestLoadBalancer({owner.replica.server_address: owner.replica}))
        self.owner = owner
        self.inner = LocalLLMServerClient(owner.rollout)
        self._params: dict[str, object] = {}

    @property
    def policy_version(self) -> int:
        return self.owner.rollout.policy_version

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params):
        return await self.owner.loop.call(super().generate(request_id, prompt_ids, sampling_params))

    async def _generate_once(self, request_id: str, prompt_ids: list[int], sampling_params):
        replica = self.owner.replica
        await replica.wait_resumed()
        params = self._params.setdefault(json.dumps(asdict(sampling_params), sort_keys=True), sampling_params)
        replica.in_flight += 1
        try:
            out = await self.inner.generate_unrecorded(request_id, prompt_ids, params)
        finally:
            replica.in_flight -= 1
        out.extra_fields.setdefault("global_steps", out.policy_version)
        return out

    def pop_stats(self) -> dict:
        stats = super().pop_stats()
        stats["rollout_batches"] = self.inner.pop_stats()["rollout_batches"]
        return stats


class ColocatedRollout:
    """colocate_async's rollout: the in-controller engine, generating in a background thread, pausable.

    It offers what the trainer asks of a rollout: `get_client()` (the agent loop's client),
    `get_replicas()` (for the naive checkpoint engine), `policy_version`, `loop`, `shutdown()`.
    """

    def __init__(self, rollout) -> None:
        self.rollout = rollout
        self.loop = EventLoopThread(name="minirl-colocated-rollout")
        self.replica = PausableLocalReplica(self)
        self._client = ColocatedClient(self)

    @property
    def policy_version(self) -> int:
        return self.rollout.policy_version

    def get_client(self) -> ColocatedClient:
        return self._client

    def get_replicas(self) -> list[PausableLocalReplica]:
        return [self.replica]

    def shutdown(self) -> None:
        """Stop generating (a running engine call returns after its current token), end the loop's tasks, stop it."""
        self.rollout.abort_event.set()
        self.replica._set_gate(True)

        async def cancel_rest():
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        if self.loop.loop.is_running():
            self.loop.run(cancel_rest(), timeout=10)
        self.loop.stop()
        self.replica.shutdown()


# ------------------------------------------------------------------ what agent-loop worker processes use


class RemoteRolloutServer:
    """An agent-loop worker's handle on one rollout server, reached over its socket on 127.0.0.1.

    The server is a `RolloutServer`: a process of its own (`rollout.nnodes >= 1`, started by
    `LLMServerManager`) or the controller's engine served by `LocalRolloutServer`. The worker opens its own
    connection (the token comes with the endpoint) on the first call, in the worker's event loop. verl:
    the worker holds the server's Ray actor handle and calls `server.generate.remote(...)`.

    Args:
        endpoint: `{"rank", "host", "port", "token"}` and optionally `hung_after_s` (`rollout.server.timeout`)
            (`LLMServerManager.endpoints()`, `LocalRolloutServer.endpoints()`).

    A dead or hung server raises `ServerLost` here, in the worker; the worker hands it to the controller, which
    words the line with what it knows of the process (pid, exit code, log lines) and stops the run.
    """

    def __init__(self, endpoint: dict) -> None:
        self.endpoint = dict(endpoint)
        self.replica_rank = int(endpoint.get("rank", 0))
        self.server_address = f"{endpoint['host']}:{endpoint['port']}"
        self._client: RPCClient | None = None
        self._lock: asyncio.Lock | None = None

    async def _connected(self) -> RPCClient:
        if self._client is None:
            self._lock = self._lock or asyncio.Lock()
            async with self._lock:
                if self._client is None:
                    client = RPCClient(self.endpoint["host"], int(self.endpoint["port"]), self.endpoint["token"],
                                       name=f"rollout server {self.replica_rank}",
                                       hung_after_s=float(self.endpoint.get("hung_after_s", HUNG_AFTER_S)))
                    try:
                        await client.connect()
                    except (OSError, RPCError) as e:  # refused, reset, silent: it is gone (the controller words it)
                        event = f"did not take a connection ({type(e).__name__})"
                        raise ServerLost(f"{client.name} ({self.server_address}) {event}", address=self.server_address,
                                         event=event, doing="this worker's first call") from None
                    self._client = client
        return self._client

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params) -> TokenOutput:
        """One request (verl: `server.generate.remote(...)`)."""
        client = await self._connected()
        return await client.call("generate", request_id=request_id, prompt_ids=list(prompt_ids),
                                 sampling_params=asdict(sampling_params))

    async def generate_batch(self, requests: list[tuple[str, list[int], Any]]) -> list[TokenOutput]:
        """Several requests in one call, run as one engine batch (`RolloutServer.generate_batch`; minirl only)."""
        client = await self._connected()
        return await client.call("generate_batch", requests=[(rid, list(ids), asdict(sp)) for rid, ids, sp in requests])

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


class BatchingLLMServerClient(LLMServerClient):
    """An agent-loop worker's client of the controller's served engine: one batch per event-loop turn.

    The requests the worker's sessions make in one turn of its event loop go to the server as ONE
    `generate_batch` call (one per distinct sampling parameters), exactly the batches
    `LocalLLMServerClient` forms when the agent loop runs in the controller: with one worker, a sync run
    samples the same tokens either way. Aborted requests resume through `LLMServerClient.generate`'s loop
    (colocate_async pauses the engine at every sample end).
    """

    def __init__(self, server: RemoteRolloutServer) -> None:
        super().__init__(GlobalRequestLoadBalancer({server.server_address: server}))
        self.server = server
        self._pending: list[tuple[str, list[int], Any, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None

    async def _generate_once(self, request_id: str, prompt_ids: list[int], sampling_params):
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((request_id, list(prompt_ids), sampling_params, fut))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        return await fut

    async def _flush(self) -> None:
        while self._pending:  # requests that arrive while a batch is out go in the next one
            while True:  # let every runnable session reach its generate() call first
                n = len(self._pending)
                await asyncio.sleep(0)
                if len(self._pending) == n:
                    break
            pending, self._pending = self._pending, []
            groups: dict[str, list] = {}
            for item in pending:
                groups.setdefault(json.dumps(asdict(item[2]), sort_keys=True), []).append(item)
            for items in groups.values():
                try:
                    outs = await self.server.generate_batch([(rid, ids, sp) for rid, ids, sp, _ in items])
                except Exception as e:  # noqa: BLE001 (every waiting session sees the server's error)
                    for *_, fut in items:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                for (*_, fut), out in zip(items, outs):
                    if not fut.done():
                        fut.set_result(out)

    def pop_stats(self) -> dict:
        stats = super().pop_stats()
        stats.pop("requests_per_server")  # one served engine: the count says nothing (and its port changes per run)
        return stats


def client_for_endpoints(endpoints: list[dict]) -> LLMServerClient:
    """The client an agent-loop worker process uses: batching for the controller's served engine, else one
    request at a time over the servers, load balanced (verl: `LLMServerManager.get_client` in each worker)."""
    servers = [RemoteRolloutServer(e) for e in endpoints]
    if len(servers) == 1 and endpoints[0].get("batching"):
        return BatchingLLMServerClient(servers[0])
    return LLMServerClient(GlobalRequestLoadBalancer({s.server_address: s for s in servers}))


class LocalRolloutServer:
    """The controller's engine (`rollout.nnodes=0`) served to agent-loop worker processes.

    When the agent loop runs in processes of its own (`rollout.agent.placement`: process or ray), the
    in-controller engine must be reachable from them: this runs a `RolloutServer` (the scheduler, abort
    and resume, version stamps of a rollout server process) around the engine, on a thread of the
    controller, listening on 127.0.0.1 with a token. Its replica (`ServedLocalReplica`) takes weights by
    the naive checkpoint engine, in this process, and pauses the scheduler for colocate_async.
    verl: the hybrid replicas' servers run inside the training workers (`vLLMHttpServer` actors beside
    them), and the agent-loop workers call them as Ray actors.

    It offers what the trainer asks of a rollout: `endpoints()`, `get_replicas()`, `policy_version`,
    `rollout` (the engine), `shutdown()`.
    """

    in_controller = True

    def __init__(self, rollout) -> None:
        self.rollout = rollout
        self.loop = EventLoopThread(name="minirl-local-rollout-server")
        self.token = secrets.token_hex(16)
        self.server, self._listener = self.loop.run(self._start())
        self.port = int(self._listener.sockets[0].getsockname()[1])
        self.server_address = f"{LOOPBACK}:{self.port}"
        self.replica = ServedLocalReplica(self)

    async def _start(self):
        from minirl.workers.rollout.rpc import serve_rpc
        from minirl.workers.rollout.server import RolloutServer

        server = RolloutServer({}, "", 0, str(getattr(self.rollout, "device", "cpu")), rollout=self.rollout)
        allowed = {"generate", "generate_batch", "status"}  # never shutdown (os._exit) or weights from a worker

        async def handle(method, kwargs):
            if method not in allowed:
                raise AttributeError(f"the controller's served engine answers {sorted(allowed)}, not {method!r}")
            return await server.handle(method, kwargs)

        return server, await serve_rpc(handle, self.token)

    def endpoints(self) -> list[dict]:
        """Where worker processes reach the engine (`batching`: send each turn's requests as one batch)."""
        return [{"rank": 0, "host": LOOPBACK, "port": self.port, "token": self.token, "batching": True}]

    @property
    def policy_version(self) -> int:
        return self.rollout.policy_version

    def get_replicas(self) -> list[ServedLocalReplica]:
        return [self.replica]

    def shutdown(self) -> None:
        """Stop serving: a running batch returns after its current token, waiting requests fail, the thread ends."""
        if self.loop.loop.is_closed():
            return
        self.rollout.abort_event.set()

        async def stop():
            self._listener.close()
            self.server._stopping.set()
            self.server._wakeup.set()
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        if self.loop.loop.is_running():
            with contextlib.suppress(Exception):  # shutting down anyway
                self.loop.run(stop(), timeout=10)
        self.server.engine.shutdown(wait=True)
        self.rollout.abort_event.clear()
        self.loop.stop()


class LLMServerManager:
    """Starts the rollout server processes and hands out clients (verl: `LLMServerManager`).

    Args:
        config: the whole trainer config (reads `actor_rollout_ref.rollout` and `trainer.device`).
        model_path: the model directory the servers load (the actor's `model.path`, resolved).

    Use `LLMServerManager.create(config, model_path)` (starts the servers) and `shutdown()` (or
    `with LLMServerManager.create(...) as manager:`). With `wait=False` the processes start and
    `create` returns at once (the trainer builds the actor meanwhile); the first call that needs the
    servers waits until they are up.
    """

    def __init__(self, config, model_path: str) -> None:
        self.config = config
        self.rollout_config = config.actor_rollout_ref.rollout
        self.model_path = str(model_path)
        self.loop = EventLoopThread()
        device = str(config.trainer.device)
        count = num_replicas(self.rollout_config)
        nice = generation_nice(config)
        self.rollout_replicas = [RolloutReplica(i, self.rollout_config, self.model_path, _device_of(device, i),
                                                self.loop, nice=nice) for i in range(count)]
        self.global_load_balancer: GlobalRequestLoadBalancer | None = None
        self._starting = None
        # runs on shutdown(), when the manager is collected, or at interpreter exit, whichever is first
        self._finalizer = weakref.finalize(self, _shutdown_all, self.rollout_replicas, self.loop)

    @classmethod
    def create(cls, config, model_path: str, wait: bool = True) -> LLMServerManager:
        """Start every replica's server (in parallel) and the load balancer; stop them all if one fails."""
        manager = cls(config, model_path)
        try:
            for replica in manager.rollout_replicas:
                replica.start_process()
            manager._starting = manager.loop.submit(manager._initialize_llm_servers())
            if wait:
                manager.wait_ready()
        except BaseException:
            manager.shutdown()
            raise
        return manager

    async def _initialize_llm_servers(self) -> None:
        await asyncio.gather(*(r.launch_server() for r in self.rollout_replicas))

    def wait_ready(self) -> None:
        """Block until every server is up and connected (a failed start stops them all and raises)."""
        if self.global_load_balancer is not None:
            return
        try:
            self._starting.result()
        except BaseException:
            self.shutdown()
            raise
        self.global_load_balancer = GlobalRequestLoadBalancer({r.server_address: r for r in self.rollout_replicas})

    def get_client(self) -> LLMServerClient:
        """A client for the agent loop (verl: `LLMServerManager.get_client`)."""
        self.wait_ready()
        return LLMServerClient(self.global_load_balancer, manager=self)

    def get_replicas(self) -> list[RolloutReplica]:
        self.wait_ready()
        return self.rollout_replicas

    def get_addresses(self) -> list[str]:
        return [r.server_address for r in self.get_replicas()]

    def endpoints(self) -> list[dict]:
        """Where agent-loop worker processes reach each server: rank, host, port, the server's token, and how long
        it may stay silent before it counts as hung (`rollout.server.timeout`)."""
        hung_after_s = server_timeout(self.rollout_config)
        return [{"rank": r.replica_rank, "host": LOOPBACK, "port": r.port, "token": r._token,
                 "hung_after_s": hung_after_s} for r in self.get_replicas()]

    @property
    def policy_version(self) -> int:
        """The oldest weight version held by any replica (all equal after a complete sync)."""
        return min((r.global_steps for r in self.rollout_replicas), default=0)

    def status(self) -> list[dict]:
        """Every server's `status()` (pid, version, queue, memory)."""
        replicas = self.get_replicas()

        async def statuses():
            return await asyncio.gather(*(r.status() for r in replicas))

        return self.loop.run(statuses())

    def shutdown(self) -> None:
        """Stop every server process and the client loop (safe to call twice)."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def build_rollout(config, model_path: str, device: str):
    """The trainer's rollout: the in-controller engine (`rollout.nnodes=0`) or the rollout servers (`>= 1`).

    verl: `LLMServerManager.create` in `PPOTrainer._setup` (`verl/trainer/ppo/v1/trainer_base.py:229`),
    hybrid replicas inside the trainer's workers; standalone ones in `PPOTrainerSeparateAsync._setup`
    (`verl/trainer/ppo/v1/trainer_separate_async.py:126`).
    """
    from minirl.workers.rollout.base import get_rollout_class

    rollout = config.actor_rollout_ref.rollout
    if uses_servers(rollout):  # the processes start now; the trainer builds its actor while they come up
        return LLMServerManager.create(config, model_path, wait=False)
    return get_rollout_class(rollout.name)(rollout, model_path, device=device)


def _device_of(device: str, rank: int) -> str:
    """Replica `rank`'s device: `cpu`, or `cuda:<rank mod visible GPUs>`."""
    if device != "cuda":
        return "cpu"
    import torch

    return f"cuda:{rank % max(1, torch.cuda.device_count())}"


def _shutdown_all(replicas: list[RolloutReplica], loop) -> None:
    for replica in replicas:
        replica.shutdown()
    loop.stop()
