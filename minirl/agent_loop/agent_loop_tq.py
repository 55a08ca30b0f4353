"""The agent loop writes the TransferQueue: sessions in, one stored trajectory per finished session out.

verl: `AgentLoopWorkerTQ` (`verl/trainer/ppo/v1/agent_loop_tq.py:53`) and `AgentLoopManagerTQ`
(`verl/trainer/ppo/v1/agent_loop_tq.py:230`), the agent loop of the V1 trainer.

How a prompt becomes `rollout.n` trajectories (`_run_prompt`, verl `:107`):

1. the trainer has registered the prompt under its `uid` with tag `status: pending`
   (`PPOTrainer._submit_batch_to_rollout`);
2. the worker marks it `running` and starts `n` independent sessions (`session_id` 0..n-1): `n`
   is `rollout.n` when training, `rollout.val_kwargs.n` when validating, or the row's own
   `__rollout_n__`. The prompt is NOT copied `n` times into a batch (the legacy trainer did that with
   `DataProto.repeat`); each session is its own agent loop with its own requests;
3. as each session finishes, `_agent_loop_postprocess` (verl `:150`) writes its output under the key
   `{uid}_{session_id}_{index}` with the prompt's dataset fields, unpadded, and tags it (`status`,
   lengths, the policy versions `min_global_steps`/`max_global_steps` that sampled it, the step
   that fetched the prompt);
4. once every session has settled, the prompt becomes `finished` (or `failure` if one raised) and the
   `ReplayBuffer` may sample the whole group.

What is stored per trajectory (fields; verl `output.as_dict()` + the dataset row): `prompts`,
`responses`, `response_mask` (1-D tensors, unpadded), `rollout_log_probs`, `rm_scores` (when the
reward was computed during rollout: the score on the last response token), `num_turns`,
`min_global_steps`, `max_global_steps`, `agent_loop_metrics` (the session's timings; verl: `metrics`),
`uid`, `session_id`, `global_steps` and the dataset's columns
(`raw_prompt`, `data_source`, `reward_model`, `extra_info`, ...). With on-policy distillation
(`distillation.enabled`) also `teacher_logprobs` and `teacher_ids` `[R, K]`: the teacher's log-probs of
the response tokens (or its top-K at each of them), asked for right after the reward
(`AgentLoopWorker._compute_teacher_logprobs`; verl keeps them for the whole sequence, padded). `input_ids`, `attention_mask` and
`position_ids` are NOT stored (verl stores `input_ids`/`position_ids` too): minirl's data plane
builds them once, when a stage reads the batch (`minirl.transfer_queue.kv_batch_get_padded`).

Where the workers run (`actor_rollout_ref.rollout.agent.placement`, minirl only): in processes of their own
(`process`, the default without Ray; `ray`: Ray actors, verl's way), `actor_rollout_ref.rollout.agent.num_workers`
of them, each talking to the rollout itself and writing the TransferQueue itself
(`minirl.agent_loop.worker_process`); or in the controller (`inprocess`, `LocalAgentLoopManagerTQ`), the path a
reader steps through with a debugger. Either way the manager only schedules: it splits the prompts and hands
each worker its share.

minirl simplifications: a worker's `generate_sequences` runs its sessions to completion and returns what
the trace records (verl's returns at once and leaves the sessions as background tasks, and
`ReplayBuffer.sample` polls until the groups are terminal; minirl's async trainers submit through
`BackgroundGeneration`, which does not wait); responses longer than `rollout.response_length` are cut
(verl's legacy path cuts the same way); a failed group is an error when sampled (verl pads the
missing trajectories or, with `trainer.v1.sampler.sync_refill_failed_groups`, refills them).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from concurrent.futures import Future

import torch

from minirl.agent_loop.agent_loop import REPORT, AgentLoopManager, AgentLoopOutput, AgentLoopWorker
from minirl.agent_loop.multi_turn_stats import summarize_sessions
from minirl.agent_loop.worker_process import (
    AgentLoopWorkerProcess,
    RayAgentLoopWorker,
    TransferQueueServer,
    resolve_agent_placement,
)
from minirl.config.derived import generation_nice
from minirl.config.introspect import recording_config_reads
from minirl.protocol import DataProto
from minirl.transfer_queue import TransferQueue, trajectory_key
from minirl.utils.py_functional import run_coroutine
from minirl.workers.rollout.rpc import EventLoopThread, ServerLost


class AgentLoopWorkerTQ(AgentLoopWorker):
    """An agent-loop worker that writes every finished session into the TransferQueue `tq`.

    `tq` is the controller's `TransferQueue` (the worker runs in the controller) or, in a worker process,
    a `TransferQueueClient` (`async_kv_batch_put`, verl's `tq.async_kv_batch_put`).
    """

    def __init__(self, config, tokenizer, llm_client, reward_loop_worker_handles=None, tq: TransferQueue | None = None,
                 teacher_client: dict | None = None):
        super().__init__(config, tokenizer, llm_client, reward_loop_worker_handles, teacher_client=teacher_client)
        if tq is None:
            raise ValueError("AgentLoopWorkerTQ needs the TransferQueue to write into (tq=...).")
        self.tq = tq
        r = self.rollout_config  # read once: a DictConfig lookup per session adds up at 256 sessions a step
        self._lengths = (int(r.prompt_length), int(r.response_length))
        self._n: dict[bool, int] = {}

    async def _put(self, keys: list[str], partition_id: str, fields: dict | None = None,
                   tags: list[dict] | None = None) -> None:
        put = getattr(self.tq, "async_kv_batch_put", None)
        if put is not None:
            await put(keys, partition_id=partition_id, fields=fields, tags=tags)
        else:
            self.tq.kv_batch_put(keys, partition_id=partition_id, fields=fields, tags=tags)

    async def generate_sequences(self, batch: DataProto) -> dict:
        """Run every prompt of `batch` (one row per prompt, with `uid`) as `n` sessions; write them all.

        `batch.meta_info`: `global_steps` (the step that fetched the prompts), `validate` (use
        `val_kwargs` and the `val` partition), optional `seed`. Returns what the trace records about these
        sessions: `session_timing` (per written session its key and `AgentLoopMetrics`), the tool sessions'
        records (`multi_turn_sessions`), and this process's `pid`.
        """
        report = {"session_timing": [], "multi_turn_sessions": [], "pid": os.getpid()}
        token = REPORT.set(report)  # every session task started below inherits it
        try:
            validate = bool(batch.meta_info.get("validate", False))
            sampling_params = self.sampling_params(validate, batch.meta_info.get("seed"))
            default = self.rollout_config.agent.default_agent_loop
            global_steps = int(batch.meta_info.get("global_steps", 0))
            rows = [{k: v[i] for k, v in batch.non_tensor_batch.items()} for i in range(len(batch))]
            trajectory = {"step": global_steps, "validate": validate}
            # every prompt of the chunk `running` in one write, then all sessions start in the same event-loop
            # turn, so their first requests form the same batches however the store is reached (verl: one
            # `async_kv_put` per prompt, in `_run_prompt`)
            await self._put([row["uid"] for row in rows], "val" if validate else "train",
                            tags=[{"status": "running"} for _ in rows])
            await asyncio.gather(*(self._run_prompt(row, sampling_params, trajectory, default) for row in rows))
        finally:
            REPORT.reset(token)
        return report

    async def _run_prompt(self, prompt: dict, sampling_params, trajectory: dict, default_agent: str) -> None:
        """`n` sessions of one prompt (already tagged `running`); its status tag then goes to finished | failure."""
        uid = prompt["uid"]
        partition = "val" if trajectory["validate"] else "train"
        validate = bool(trajectory["validate"])
        if validate not in self._n:
            self._n[validate] = int(self.rollout_config.val_kwargs.n if validate else self.rollout_config.n)
        n = int(prompt.pop("__rollout_n__", self._n[validate]))
        agent_name = prompt.pop("agent_name", None) or default_agent
        tasks = [asyncio.ensure_future(self._run_agent_loop(sampling_params, trajectory, agent_name=agent_name,
                                                            session_id=i, global_steps=trajectory["step"], **prompt))
                 for i in range(n)]
        try:
            results = await asyncio.gather(*tasks, return_exceptions=True)  # every session settles first
        except asyncio.CancelledError:  # cancelled (a run that ends, or one killed): the group stays `running`
            for task in tasks:
                task.cancel()
            raise
        errors = [r for r in results if isinstance(r, BaseException)]
        tag = {"status": "failure", "error": f"{type(errors[0]).__name__}: {errors[0]}"} if errors else \
            {"status": "finished"}
        await self._put([uid], partition, tags=[tag])
        lost = next((e for e in errors if isinstance(e, ServerLost)), None)
        if lost is not None:  # a dead or hung rollout server is not one failed session: it stops the run
            raise lost

    async def _agent_loop_postprocess(self, output: AgentLoopOutput, validate: bool, **kwargs) -> AgentLoopOutput:
        """Score the session (if a reward-loop worker is given), then write it as one trajectory."""
        await self._compute_score([output], kwargs)
        # on-policy distillation: the teacher scores the session's tokens (verl: right after the reward)
        await self._compute_teacher_logprobs(output, output.prompt_ids, output.response_ids, validate, kwargs)
        P, R = self._lengths
        if len(output.prompt_ids) > P:
            raise ValueError(f"session {kwargs['uid']}_{kwargs['session_id']}: the prompt has {len(output.prompt_ids)} "
                             f"tokens but rollout.prompt_length={P}. Fix: raise data.max_prompt_length.")
        responses = output.response_ids[:R]  # verl's legacy path cuts at response_length the same way
        fields = {"prompts": torch.tensor(output.prompt_ids, dtype=torch.int64),
                  "responses": torch.tensor(responses, dtype=torch.int64),
                  "response_mask": torch.tensor(output.response_mask[:R], dtype=torch.int64)}
        if output.response_logprobs is not None:
            fields["rollout_log_probs"] = torch.tensor(output.response_logprobs[:R], dtype=torch.float32)
        if "teacher_logprobs" in output.extra_fields:  # the response's rows: token t is scored at row P_i - 1 + t
            start = len(output.prompt_ids) - 1
            for name in ("teacher_ids", "teacher_logprobs"):
                fields[name] = output.extra_fields.pop(name)[start:start + len(responses)]
        if output.reward_score is not None:  # verl: rm_scores, the score on the last response token
            rm_scores = torch.zeros(len(responses), dtype=torch.float32)
            if len(responses):
                rm_scores[-1] = float(output.reward_score)
            fields["rm_scores"] = rm_scores
        output.metrics.end = time.time()
        fields["num_turns"] = output.num_turns
        fields["min_global_steps"] = int(output.extra_fields["min_global_steps"])
        fields["max_global_steps"] = int(output.extra_fields["max_global_steps"])
        # verl stores the whole AgentLoopMetrics as the field `metrics`
        fields["agent_loop_metrics"] = dict(vars(output.metrics))
        key = trajectory_key(kwargs["uid"], kwargs["session_id"], 0)
        report = REPORT.get()
        if report is not None:
            report["session_timing"].append({"key": key, **fields["agent_loop_metrics"]})
        fields.update(kwargs)  # uid, session_id, global_steps and the dataset row
        if "reward_extra_info" in output.extra_fields:
            fields["reward_extra_info"] = output.extra_fields["reward_extra_info"]
        tag = {"status": "success", "prompt_len": len(output.prompt_ids), "response_len": len(responses),
               "seq_len": len(output.prompt_ids) + len(responses), "global_steps": int(kwargs["global_steps"]),
               "min_global_steps": fields["min_global_steps"], "max_global_steps": fields["max_global_steps"]}
        await self._put([key], "val" if validate else "train", fields={k: [v] for k, v in fields.items()}, tags=[tag])
        return output


def merge_reports(reports: list[dict]) -> dict:
    """The workers' reports of one rollout as one record for the trace: server batches (each engine batch
    once, however many workers had requests in it), requests per server, resumes, session timings."""
    engine, seen = [], set()
    for r in reports:
        for b in r.get("engine_batches", []):
            key = (b.get("server_pid"), b.get("replica"), b.get("batch"))
            if key not in seen:
                seen.add(key)
                engine.append(b)
    info = {"rollout_batches": [b["size"] for b in engine] if engine else
            [n for r in reports for n in r.get("rollout_batches", [])]}
    if engine:
        info["engine_batches"] = engine
    per_server: dict = {}
    for r in reports:
        for sid, n in r.get("requests_per_server", {}).items():
            per_server[sid] = per_server.get(sid, 0) + n
    if per_server:
        info["requests_per_server"] = per_server
    if any("resumed_requests" in r for r in reports):
        info["resumed_requests"] = sum(r.get("resumed_requests", 0) for r in reports)
    info["agent_loop_pids"] = sorted({r["pid"] for r in reports if "pid" in r})
    info["session_timing"] = sorted((t for r in reports for t in r.get("session_timing", [])), key=lambda t: t["start"])
    sessions = [s for r in reports for s in r.get("multi_turn_sessions", [])]
    if sessions:  # tool-agent sessions: turns, token counts by role, mask spans, latency, failures
        info["multi_turn"] = summarize_sessions(sessions)
    return info


class AgentLoopManagerTQ(AgentLoopManager):
    """Hands each agent-loop worker its share of the prompts; the workers write the TransferQueue.

    verl: `AgentLoopManagerTQ` (`verl/trainer/ppo/v1/agent_loop_tq.py:230`). `generate_sequences` returns
    what the trace records, not the trajectories: they are in `tq`, and `ReplayBuffer.sample` decides which to
    train on.

    Args:
        config: the trainer's config (`rollout.agent.num_workers`, `rollout.agent.placement`).
        tokenizer: the policy's tokenizer (handed to each worker).
        rollout: the in-controller engine (a `BaseRollout`; served to worker processes by a
            `LocalRolloutServer` this manager starts and owns), a `LocalRolloutServer`, or an
            `LLMServerManager` of rollout server processes.
        tq: the TransferQueue the workers write (served to worker processes by a `TransferQueueServer`).
        reward_loop_worker_handles: score each session as it ends (None: the trainer scores the batch).
        placement: override `rollout.agent.placement` (`process`, `ray`, `inprocess`).
    """

    agent_loop_workers_class = AgentLoopWorkerTQ

    def __init__(self, config, tokenizer, rollout, tq: TransferQueue, reward_loop_worker_handles=None,
                 teacher_client: dict | None = None, placement: str | None = None):
        self.placement = placement or resolve_agent_placement(config)
        if teacher_client and self.placement != "inprocess":  # config/values.py refuses this config first
            raise ValueError(f"on-policy distillation runs its sessions in the controller in minirl, not with "
                             f"rollout.agent.placement={self.placement}. Fix: placement=auto (or inprocess).")
        self.tq = tq
        self._served = None
        self.tq_server = None
        if self.placement == "inprocess":
            super().__init__(config, tokenizer, rollout, reward_loop_worker_handles, tq=tq, teacher_client=teacher_client)
            self.loop = getattr(rollout, "loop", None)  # colocate_async / servers: the rollout's client loop
            return
        from minirl.workers.rollout.llm_server import ColocatedRollout, LocalRolloutServer

        self.config, self.rollout, self.llm_client = config, rollout, None
        if isinstance(rollout, ColocatedRollout):
            raise TypeError("ColocatedRollout runs the agent loop in the controller; with agent-loop worker "
                             "processes colocate_async serves its engine with LocalRolloutServer. Fix: "
                             "actor_rollout_ref.rollout.agent.placement=inprocess, or pass LocalRolloutServer(engine).")
        if not hasattr(rollout, "endpoints"):  # the bare in-controller engine: serve it to the workers
            self._served = rollout = LocalRolloutServer(rollout)
        self.loop = EventLoopThread(name="minirl-agent-loop-manager")
        self.agent_loop_workers = []
        parts = {"served": self._served}  # what the manager owns besides the workers (not `self`: see finalize)
        # the processes end on shutdown(), when the manager is collected, or at exit, whichever is first
        self._finalizer = weakref.finalize(self, _shutdown_all, self.agent_loop_workers, parts, self.loop)
        try:
            self.tq_server = parts["tq_server"] = TransferQueueServer(tq, self.loop)
            spec = {"config": _plain(config), "tokenizer": tokenizer, "tq": self.tq_server.endpoint(),
                    "reward": _reward_spec(reward_loop_worker_handles), "agent_loops": _user_agent_loops(),
                    "reward_managers": _user_reward_managers(), "nice": generation_nice(config),
                    "record_config_reads": recording_config_reads()}
            cls = RayAgentLoopWorker if self.placement == "ray" else AgentLoopWorkerProcess
            n = max(1, int(config.actor_rollout_ref.rollout.agent.num_workers))
            failures = _failure_log(reward_loop_worker_handles)  # the workers' reward failures are merged into it
            self.agent_loop_workers.extend(cls(i, spec, self.loop, failures=failures) for i in range(n))
            describe = _lost_server_line(rollout)  # not a method: the workers must not hold the manager (finalize)
            for w in self.agent_loop_workers:
                w.describe_lost = describe
            endpoints = rollout.endpoints()

            async def connect_all():
                await asyncio.gather(*(w.connect(endpoints) for w in self.agent_loop_workers))

            self.loop.run(connect_all())
        except BaseException:
            self.shutdown()
            raise

    @property
    def in_process(self) -> bool:
        return self.placement == "inprocess"

    def worker_pids(self) -> list[int]:
        """The agent-loop worker processes' pids (none when they run in the controller)."""
        return [] if self.in_process else [w.pid for w in self.agent_loop_workers if w.pid is not None]

    def generate_sequences(self, prompts: DataProto) -> dict:
        """Run every session of `prompts` (one row per prompt, each with a `uid`) into the TransferQueue.

        Returns what the trace records about the rollout (`merge_reports`: the engine batches, the sessions'
        times, the workers' pids) and the wall time. The prompts' status tags must exist already (`status: pending`).
        """
        t0 = time.perf_counter()

        async def run_all():
            return await asyncio.gather(*(w.generate_sequences(chunk) for w, chunk in self.split_prompts(prompts)))

        if self.in_process:
            reports = run_coroutine(run_all)
            if reports:
                reports[0].update(self.llm_client.pop_stats())
        else:
            reports = self.loop.run(run_all())
        info = merge_reports(list(reports))
        info["generate_sequences_s"] = time.perf_counter() - t0
        return info

    def cancel(self) -> int:
        """Cancel what the worker processes are generating (their groups stay `running`); how many calls."""
        if self.in_process or not self.loop.loop.is_running():
            return 0

        async def cancel_all():
            return await asyncio.gather(*(w.cancel() for w in self.agent_loop_workers), return_exceptions=True)

        return sum(n for n in self.loop.run(cancel_all(), timeout=30) if isinstance(n, int))

    def shutdown(self) -> None:
        """Stop the worker processes, the TransferQueue server and a served engine (safe to call twice)."""
        if not self.in_process:
            self._finalizer()


def _shutdown_all(workers: list, parts: dict, loop) -> None:
    for w in workers:
        w.shutdown()
    workers.clear()
    if parts.get("tq_server") is not None:
        parts.pop("tq_server").close()
    if parts.get("served") is not None:
        parts.pop("served").shutdown()
    loop.stop()


class LocalAgentLoopManagerTQ(AgentLoopManagerTQ):
    """The agent loop in the controller: `AgentLoopWorkerTQ` objects whose sessions run on this process's event
    loop (`placement="inprocess"`), minirl's one-process path for reading and debugging one session."""

    def __init__(self, config, tokenizer, rollout, tq: TransferQueue, reward_loop_worker_handles=None):
        super().__init__(config, tokenizer, rollout, tq, reward_loop_worker_handles, placement="inprocess")


def _lost_server_line(rollout):
    """`describe(info, doing)`: the one line of a rollout server a worker process lost, as the controller words it.

    The controller started the server processes, so its replica (`RolloutReplica`) knows the pid, the exit code
    (SIGKILL, out of memory) and the last log lines; a worker knows only the address. None (the worker's
    line stands) for a server the controller has no process of (`LocalRolloutServer`).
    """

    def describe(info: dict, doing: str) -> str | None:
        for replica in rollout.get_replicas():
            if getattr(replica, "server_address", None) == info.get("address") and hasattr(replica, "_describe_lost"):
                return replica._describe_lost(info["event"], doing)
        return None

    return describe


def _plain(config) -> dict:
    from omegaconf import DictConfig, OmegaConf

    return OmegaConf.to_container(config, resolve=True) if isinstance(config, DictConfig) else dict(config)


def _user_agent_loops() -> dict:
    """Agent loops registered in this process beyond minirl's own (the workers register them too)."""
    from minirl.agent_loop.agent_loop import _AGENT_LOOP_REGISTRY

    return {name: cls for name, cls in _AGENT_LOOP_REGISTRY.items() if not cls.__module__.startswith("minirl.")}


def _user_reward_managers() -> dict:
    """Reward managers registered in this process beyond minirl's own: a worker process builds its reward-loop
    worker, so it registers them too (a class defined in a notebook works in the default placement)."""
    from minirl.workers.reward.managers import REWARD_MANAGER_REGISTRY

    return {name: cls for name, cls in REWARD_MANAGER_REGISTRY.items() if not cls.__module__.startswith("minirl.")}


def _reward_spec(handles) -> dict | None:
    """What a worker process needs to build its own reward-loop worker (None: the trainer scores the batch):
    the reward model's address, tokenizer and token (its server refuses a request without it)."""
    if not handles:
        return None
    h = handles[0]
    return {"router_address": getattr(h, "reward_router_address", None),
            "rm_tokenizer": getattr(h, "reward_model_tokenizer", None),
            "rm_token": getattr(h, "reward_model_token", None)}


def _failure_log(handles):
    """The controller's `FailureLog` (shared by its reward-loop workers), or None without reward handles."""
    return getattr(getattr(handles[0], "reward_manager", None), "failures", None) if handles else None


__all__ = ["AgentLoopManagerTQ", "AgentLoopWorkerTQ", "BackgroundGeneration", "LocalAgentLoopManagerTQ",
           "merge_reports"]


class BackgroundGeneration:
    """Runs the agent loop's prompts in the background; `submit` returns at once.

    verl: `AgentLoopManagerTQ.generate_sequences` (`verl/trainer/ppo/v1/agent_loop_tq.py:243`), which starts each
    prompt's sessions as background tasks and returns; minirl's `generate_sequences` above runs them to the
    end, and the async trainers (`minirl.trainer.ppo.trainer_async`) submit through this instead. The
    sessions write their trajectories into the TransferQueue as they finish, exactly as in sync mode; a
    session that fails marks its group `failure`, and an error outside the sessions is raised in the
    trainer at its next `check()`.

    Args:
        agent_loop_manager: the trainer's `AgentLoopManagerTQ`.
        loop: the `EventLoopThread` the calls run on: the manager's own (worker processes), or for the agent
            loop in the controller the rollout's client loop (`LLMServerManager.loop`, `ColocatedRollout.loop`).
    """

    def __init__(self, agent_loop_manager, loop=None) -> None:
        self.manager = agent_loop_manager
        self.loop = loop or agent_loop_manager.loop
        if self.loop is None:
            raise ValueError("BackgroundGeneration needs an event loop thread: the manager's (worker processes) "
                             "or the rollout's (ColocatedRollout, LLMServerManager)")
        self._futures: set[Future] = set()
        self._tasks: set[asyncio.Task] = set()  # the same work as seen from the loop (to cancel it there)
        self._errors: list[BaseException] = []
        self._reports: list[dict] = []
        self._lock = threading.Lock()
        self.submitted = 0
        """Prompts submitted so far."""

    def submit(self, prompts: DataProto) -> int:
        """Start every session of `prompts` (one row per prompt, `uid` set, status `pending` in the store)."""
        for worker, chunk in self.manager.split_prompts(prompts):
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
            if fut.cancelled():
                return
            if fut.exception() is not None:
                self._errors.append(fut.exception())
            elif isinstance(fut.result(), dict):
                self._reports.append(fut.result())

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

    def pop_reports(self) -> list[dict]:
        """The reports (`AgentLoopWorkerTQ.generate_sequences`) of every chunk finished since the last call."""
        with self._lock:
            out, self._reports = self._reports, []
        return out

    def cancel(self, timeout_s: float = 10.0) -> None:
        """Cancel every unfinished prompt and wait until its sessions have stopped (their groups stay `running`)."""
        cancel_remote = getattr(self.manager, "cancel", None)
        if cancel_remote is not None:
            cancel_remote()  # worker processes: their sessions stop there, their calls return

        async def cancel_all():
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()  # a gather cancels its children: every prompt's sessions
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._tasks and self.loop.loop.is_running():
            self.loop.run(cancel_all(), timeout=timeout_s)
