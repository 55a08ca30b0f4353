"""The rollout servers as the agent loop sees them: a manager that starts them, a balancer, a client.

- `LLMServerManager` starts the replicas (`RolloutReplica`, one server process each), in parallel,
  and owns the background event loop their connections live on; `get_client()` hands out clients;
  `shutdown()` (also on exit and when the manager is garbage collected) stops every process.
- `GlobalRequestLoadBalancer` picks a server per request: a request id seen before goes back to the
  same server (sticky: a multi-turn session, or a resumed partial rollout, finds its prefix there),
  a new one goes to the server with the fewest requests in flight.
- `LLMServerClient.generate(request_id, prompt_ids, sampling_params)` is what an agent loop awaits.
  Requests from all sessions go out concurrently; the servers batch them. When a server aborts a
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
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import OrderedDict
from typing import Any

from minirl.utils.config import cfg_get
from minirl.workers.rollout.replica import RolloutReplica, num_replicas

__all__ = ["GlobalRequestLoadBalancer", "LLMServerClient", "LLMServerManager", "build_rollout"]

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

    Same call as the in-process client (`minirl.agent_loop.LLMServerClient`): `await
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

        from minirl.workers.rollout.base import TokenOutput

        budget = int(sampling_params.max_tokens)
        params = sampling_params
        tokens: list[int] = []
        log_probs: list[float] | None = [] if sampling_params.logprobs else None
        versions: list[int] = []
        resumed_at: list[int] = []
        while True:
            out = await self._generate_once(request_id, list(prompt_ids) + tokens, params)
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
        key = (out.extra_fields.get("replica_rank"), out.extra_fields.get("server_batch"))
        if key[1] is not None and key not in self._seen_batches:
            self._seen_batches.add(key)
            self.batches.append(int(out.extra_fields.get("server_batch_size", 1)))

    def pop_stats(self) -> dict:
        """What the trace records about the last rollout: server batches, requests per server, resumes."""
        stats = {"rollout_batches": list(self.batches), "requests_per_server": dict(self.load_balancer.requests),
                 "resumed_requests": self.resumed_requests}
        self.batches.clear()
        self._seen_batches.clear()
        self.resumed_requests = 0
        for sid in self.load_balancer.requests:
            self.load_balancer.requests[sid] = 0
        return stats


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
        from minirl.workers.rollout.rpc import EventLoopThread

        self.config = config
        self.rollout_config = config.actor_rollout_ref.rollout
        self.model_path = str(model_path)
        self.loop = EventLoopThread()
        device = str(cfg_get(config.trainer, "device", "cpu"))
        count = num_replicas(self.rollout_config)
        self.rollout_replicas = [RolloutReplica(i, self.rollout_config, self.model_path, _device_of(device, i),
                                                self.loop) for i in range(count)]
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
    from minirl.workers.rollout.replica import uses_servers

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
