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
(`raw_prompt`, `data_source`, `reward_model`, `extra_info`, ...). `input_ids`, `attention_mask` and
`position_ids` are NOT stored (verl stores `input_ids`/`position_ids` too): minirl's data plane
builds them once, when a stage reads the batch (`minirl.transfer_queue.kv_batch_get_padded`).

minirl simplifications: the worker runs its sessions to completion inside `generate_sequences`
(verl's returns at once and leaves the sessions as background tasks, and `ReplayBuffer.sample`
polls until the groups are terminal); responses longer than `rollout.response_length` are cut
(verl's legacy path cuts the same way); a failed group is an error when sampled (verl pads the
missing trajectories or, with `trainer.v1.sampler.sync_refill_failed_groups`, refills them).
"""

from __future__ import annotations

import asyncio
import time

import torch

from minirl.agent_loop.agent_loop import AgentLoopManager, AgentLoopOutput, AgentLoopWorker
from minirl.agent_loop.multi_turn_stats import summarize_sessions
from minirl.protocol import DataProto
from minirl.transfer_queue import TransferQueue, trajectory_key
from minirl.utils.py_functional import run_coroutine


class AgentLoopWorkerTQ(AgentLoopWorker):
    """An agent-loop worker that writes every finished session into the TransferQueue `tq`."""

    def __init__(self, config, tokenizer, llm_client, reward_loop_worker_handles=None, tq: TransferQueue | None = None):
        super().__init__(config, tokenizer, llm_client, reward_loop_worker_handles)
        if tq is None:
            raise ValueError("AgentLoopWorkerTQ needs the TransferQueue to write into (tq=...).")
        self.tq = tq
        self.session_timing: list[dict] = []  # each written session's AgentLoopMetrics + key, for the trace

    async def generate_sequences(self, batch: DataProto) -> None:
        """Run every prompt of `batch` (one row per prompt, with `uid`) as `n` sessions; write them all.

        `batch.meta_info`: `global_steps` (the step that fetched the prompts), `validate` (use
        `val_kwargs` and the `val` partition), optional `seed`.
        """
        validate = bool(batch.meta_info.get("validate", False))
        sampling_params = self.sampling_params(validate, batch.meta_info.get("seed"))
        default = self.rollout_config.agent.default_agent_loop
        global_steps = int(batch.meta_info.get("global_steps", 0))
        rows = [{k: v[i] for k, v in batch.non_tensor_batch.items()} for i in range(len(batch))]
        trajectory = {"step": global_steps, "validate": validate}
        await asyncio.gather(*(self._run_prompt(row, sampling_params, trajectory, default) for row in rows))

    async def _run_prompt(self, prompt: dict, sampling_params, trajectory: dict, default_agent: str) -> None:
        """`n` sessions of one prompt; the prompt's status tag goes running -> finished | failure."""
        uid = prompt["uid"]
        partition = "val" if trajectory["validate"] else "train"
        self.tq.kv_batch_put([uid], partition_id=partition, tags=[{"status": "running"}])
        config = self.rollout_config
        n = int(prompt.pop("__rollout_n__", config.val_kwargs.n if trajectory["validate"] else config.n))
        agent_name = prompt.pop("agent_name", None) or default_agent
        tasks = [asyncio.ensure_future(self._run_agent_loop(sampling_params, trajectory, agent_name=agent_name,
                                                            session_id=i, global_steps=trajectory["step"], **prompt))
                 for i in range(n)]
        results = await asyncio.gather(*tasks, return_exceptions=True)  # every session settles first
        errors = [r for r in results if isinstance(r, BaseException)]
        tag = {"status": "failure", "error": f"{type(errors[0]).__name__}: {errors[0]}"} if errors else \
            {"status": "finished"}
        self.tq.kv_batch_put([uid], partition_id=partition, tags=[tag])

    async def _agent_loop_postprocess(self, output: AgentLoopOutput, validate: bool, **kwargs) -> AgentLoopOutput:
        """Score the session (if a reward-loop worker is given), then write it as one trajectory."""
        await self._compute_score([output], kwargs)
        P, R = int(self.rollout_config.prompt_length), int(self.rollout_config.response_length)
        if len(output.prompt_ids) > P:
            raise ValueError(f"session {kwargs['uid']}_{kwargs['session_id']}: the prompt has {len(output.prompt_ids)} "
                             f"tokens but rollout.prompt_length={P}. Fix: raise data.max_prompt_length.")
        responses = output.response_ids[:R]  # verl's legacy path cuts at response_length the same way
        fields = {"prompts": torch.tensor(output.prompt_ids, dtype=torch.int64),
                  "responses": torch.tensor(responses, dtype=torch.int64),
                  "response_mask": torch.tensor(output.response_mask[:R], dtype=torch.int64)}
        if output.response_logprobs is not None:
            fields["rollout_log_probs"] = torch.tensor(output.response_logprobs[:R], dtype=torch.float32)
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
        self.session_timing.append({"key": trajectory_key(kwargs["uid"], kwargs["session_id"], 0),
                                    **fields["agent_loop_metrics"]})
        fields.update(kwargs)  # uid, session_id, global_steps and the dataset row
        if "reward_extra_info" in output.extra_fields:
            fields["reward_extra_info"] = output.extra_fields["reward_extra_info"]
        key = trajectory_key(kwargs["uid"], kwargs["session_id"], 0)
        tag = {"status": "success", "prompt_len": len(output.prompt_ids), "response_len": len(responses),
               "seq_len": len(output.prompt_ids) + len(responses), "global_steps": int(kwargs["global_steps"]),
               "min_global_steps": fields["min_global_steps"], "max_global_steps": fields["max_global_steps"]}
        self.tq.kv_batch_put([key], partition_id="val" if validate else "train",
                             fields={k: [v] for k, v in fields.items()}, tags=[tag])
        return output


class AgentLoopManagerTQ(AgentLoopManager):
    """Hands each agent-loop worker its share of the prompts; the workers write the TransferQueue.

    verl: `AgentLoopManagerTQ` (`verl/trainer/ppo/v1/agent_loop_tq.py:230`). `generate_sequences`
    returns nothing: the trajectories are in `tq`, and `ReplayBuffer.sample` decides which to train on.
    """

    agent_loop_workers_class = AgentLoopWorkerTQ

    def __init__(self, config, tokenizer, rollout, tq: TransferQueue, reward_loop_worker_handles=None):
        super().__init__(config, tokenizer, rollout, reward_loop_worker_handles, tq=tq)
        self.tq = tq

    def generate_sequences(self, prompts: DataProto) -> dict:
        """Run every session of `prompts` (one row per prompt, each with a `uid`) into the TransferQueue.

        Returns what the trace records about the rollout: the batch sizes sent to the rollout and the
        wall time. The prompts' status tags must exist already (`status: pending`).
        """
        t0 = time.perf_counter()

        async def run_all():
            await asyncio.gather(*(w.generate_sequences(chunk) for w, chunk in self._chunks(prompts)))

        for w in self.agent_loop_workers:
            w.multi_turn_sessions.clear()
        run_coroutine(run_all)
        info = {**self.llm_client.pop_stats(), "generate_sequences_s": time.perf_counter() - t0}
        # per written session: its key and AgentLoopMetrics (wall-clock start, scored, written)
        info["session_timing"] = sorted((t for w in self.agent_loop_workers for t in w.session_timing),
                                        key=lambda t: t["start"])
        for w in self.agent_loop_workers:
            w.session_timing.clear()
        sessions = [r for w in self.agent_loop_workers for r in w.multi_turn_sessions]
        if sessions:  # tool-agent sessions: turns, token counts by role, mask spans, latency, failures
            info["multi_turn"] = summarize_sessions(sessions)
        return info


__all__ = ["AgentLoopManagerTQ", "AgentLoopWorkerTQ"]
