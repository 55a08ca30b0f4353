"""The async trainers' rollout side: generation in the background, a pausable in-controller engine, a prompt stream.

In verl every V1 trainer submits prompts fire-and-forget: `AgentLoopManagerTQ.generate_sequences`
(`verl/trainer/ppo/v1/agent_loop_tq.py:243`) starts each prompt's sessions as background tasks of the
Ray agent-loop workers and returns, and `ReplayBuffer.sample` polls the TransferQueue until enough
groups are done. minirl's sync trainer generates inline instead (one process, nothing to overlap);
the async trainers use what is here:

- `BackgroundGeneration.submit(prompts)` runs the agent-loop workers' `generate_sequences` on an
  event loop in a background thread and returns at once. The sessions write their trajectories into
  the TransferQueue as they finish, exactly as in sync mode; a session that fails marks its group
  `failure`, and an error outside the sessions is raised in the trainer at its next `check()`.
- `ColocatedRollout` is colocate_async's rollout: the in-controller engine (verl: *hybrid* replicas
  inside the training workers, sharing their GPUs) behind the replica interface, with a real
  `abort_all_requests` / `resume_generation`: an abort lets the running engine call stop after its
  current token and holds every new request, so the trainer can train and load new weights while
  the sessions wait; resumed requests continue with their tokens and log-probs (verl's
  `FullyAsyncLLMServerClient`, `verl/workers/rollout/llm_server.py:292`, via minirl's
  `LLMServerClient.generate` resume loop).
- `PromptStream` hands out prompts one at a time: verl forces `data.gen_batch_size=1` for the async
  trainers so that a refill can fetch exactly `k` prompts (`PPOTrainer._init_dataloader`,
  `verl/trainer/ppo/v1/trainer_base.py:655`).

What minirl simplifies: the background loop is a thread of the controller process (verl: Ray actors);
`separate_async` uses the rollout servers' own client loop (`LLMServerManager.loop`); in-flight prompts
are not saved in checkpoints (verl stores the prompts in the TransferQueue and re-submits them on
resume, `_reissue_inflight_prompts`), so a resumed async run starts with an empty pipeline.
"""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import Future
from dataclasses import asdict

from minirl.protocol import DataProto
from minirl.trainer.ppo.dataloader import PromptLoader, to_dataproto
from minirl.workers.rollout.llm_server import GlobalRequestLoadBalancer, LLMServerClient
from minirl.workers.rollout.replica import LocalReplica
from minirl.workers.rollout.rpc import EventLoopThread

__all__ = ["BackgroundGeneration", "ColocatedRollout", "PromptStream"]


# ----------------------------------------------------------------------------------- background


class BackgroundGeneration:
    """Runs the agent loop's prompts on a background event loop; `submit` returns at once.

    Args:
        agent_loop_manager: the trainer's `AgentLoopManagerTQ` (its workers write the TransferQueue).
        loop: the `EventLoopThread` the sessions run on (the rollout's client loop).
    """

    def __init__(self, agent_loop_manager, loop: EventLoopThread) -> None:
        self.manager, self.loop = agent_loop_manager, loop
        self._futures: set[Future] = set()
        self._tasks: set[asyncio.Task] = set()  # the same work as seen from the loop (to cancel it there)
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()
        self.submitted = 0
        """Prompts submitted so far."""

    def submit(self, prompts: DataProto) -> int:
        """Start every session of `prompts` (one row per prompt, `uid` set, status `pending` in the store)."""
        for worker, chunk in self.manager._chunks(prompts):
            fut = self.loop.submit(self._tracked(worker.generate_sequences(chunk)))
            with self._lock:
                self._futures.add(fut)
            fut.add_done_callback(self._done)
        self.submitted += len(prompts)
        return len(prompts)

    async def _tracked(self, coro):
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            return await coro
        finally:
            self._tasks.discard(task)

    def _done(self, fut: Future) -> None:
        with self._lock:
            self._futures.discard(fut)
        if not fut.cancelled() and fut.exception() is not None:
            self._errors.append(fut.exception())

    @property
    def in_flight(self) -> int:
        """Chunks of prompts whose sessions have not all settled."""
        with self._lock:
            return len(self._futures)

    def check(self) -> None:
        """Raise, in the trainer, the first error the background generation hit (outside any session)."""
        if self._errors:
            e = self._errors[0]
            raise RuntimeError(f"background generation failed: {type(e).__name__}: {e}") from e

    def pop_session_timing(self) -> list[dict]:
        """Every session written since the last call: key + AgentLoopMetrics (wall-clock start/end)."""
        out = []
        for w in self.manager.agent_loop_workers:
            n = len(w.session_timing)
            out.extend(w.session_timing[:n])
            del w.session_timing[:n]
        return sorted(out, key=lambda t: t["start"])

    def cancel(self, timeout_s: float = 10.0) -> None:
        """Cancel every unfinished prompt and wait until its sessions have stopped (their groups stay `running`)."""
        async def cancel_all():
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()  # a gather cancels its children: every prompt's sessions
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._tasks and self.loop.loop.is_running():
            self.loop.run(cancel_all(), timeout=timeout_s)


# ------------------------------------------------------------------------------ colocated engine


class PausableLocalReplica(LocalReplica):
    """The in-controller replica with a real abort: the engine stops after its current token, new requests wait.

    verl: a hybrid replica's `abort_all_requests` (`verl/workers/rollout/replica.py:273`) / `resume_generation` (`:277`).
    """

    def __init__(self, owner: ColocatedRollout) -> None:
        super().__init__(owner.rollout)
        self.owner = owner
        self.resumed = threading.Event()
        self.resumed.set()
        self._gate = asyncio.Event()  # the same gate as seen from the owner's loop: waiters sleep, they do not poll
        self._gate.set()
        self.in_flight = 0
        """Requests inside the engine now."""
        self.aborts = 0

    def _set_gate(self, is_open: bool) -> None:
        (self.resumed.set if is_open else self.resumed.clear)()
        loop = self.owner.loop.loop
        if loop.is_running():
            loop.call_soon_threadsafe(self._gate.set if is_open else self._gate.clear)
        else:
            (self._gate.set if is_open else self._gate.clear)()

    async def wait_resumed(self) -> None:
        """Wait (on the owner's loop) until the gate is open. An asyncio.Event, not a poll: a 2 ms poll of each of
        the hundreds of held requests kept the loop thread busy and slowed the training it should leave alone."""
        await self._gate.wait()

    async def abort_all_requests(self) -> dict:
        """Close the gate, make the running engine call return after its current token, wait until it has."""
        self._set_gate(False)
        running = self.in_flight
        self.rollout.abort_event.set()
        await self.owner.loop.call(asyncio.sleep(0))  # runs once the loop is free: the engine call has returned
        self.aborts += 1
        return {"aborted_running": running, "aborted_queued": 0}

    async def resume_generation(self) -> dict:
        self.rollout.abort_event.clear()
        self._set_gate(True)
        return {"resumed": True}


class ColocatedClient(LLMServerClient):
    """The agent loop's client of the colocated engine: batching, a pause gate, and the resume loop.

    Every call runs on the owner's loop (so the in-process batching client always sees one event
    loop); `_generate_once` waits at the gate, then sends the request to the in-process batching client,
    with equal sampling parameters interned so that resumed requests with the same remaining budget
    share one engine batch.
    """

    def __init__(self, owner: ColocatedRollout) -> None:
        from minirl.agent_loop.agent_loop import LLMServerClient as InProcessClient

        super().__init__(GlobalRequestLoadBalancer({owner.replica.server_address: owner.replica}))
        self.owner = owner
        self.inner = InProcessClient(owner.rollout)
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
            out = await self.inner.generate(request_id, prompt_ids, params)
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


# ------------------------------------------------------------------------------------- prompts


class PromptStream(PromptLoader):
    """Prompts one by one, over a fresh permutation per epoch (verl's async `gen_batch_size=1` dataloader).

    `len()` stays the batches per epoch (the run length is counted in steps, as in verl); the state
    counts prompts: `{"epoch", "index", "unit": "prompt"}`.
    """

    def next_prompts(self, k: int) -> DataProto:
        """The next `k` prompts; an epoch boundary in the middle continues with the next permutation."""
        if k < 1:
            raise ValueError(f"PromptStream.next_prompts({k}): ask for at least one prompt.")
        idx = []
        while len(idx) < k:
            if self.index >= len(self.dataset):
                self.epoch, self.index = self.epoch + 1, 0
            order = self._order(self.epoch)
            take = min(k - len(idx), len(self.dataset) - self.index)
            idx += order[self.index:self.index + take].tolist()
            self.index += take
        return to_dataproto(self.collate_fn([self.dataset[i] for i in idx]))

    def next_batch(self) -> DataProto:
        return self.next_prompts(self.batch_size)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index, "unit": "prompt"}

    def load_state_dict(self, state: dict) -> None:
        scale = 1 if state.get("unit") == "prompt" else self.batch_size  # a sync checkpoint counts batches
        self.epoch, self.index = int(state["epoch"]), int(state["index"]) * scale
