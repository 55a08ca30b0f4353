"""The reward loop: where each reward is computed, per session during rollout or per batch after sampling.

verl V1 (`verl/experimental/reward_loop/reward_loop.py`):

- `RewardLoopWorker` (`:93`) scores one session: `compute_score` (`:145`) runs the custom function
  if `reward.custom_reward_function.path` is set, else the reward model if
  `reward.reward_model.enable` (`compute_score_disrm`, `:231`: the chat through the model's
  template, posted to the model's server), else the rule of the sample's data source; the reward
  manager (`minirl.workers.reward.managers`) does the decoding and calling.
- `RewardLoopManager` (`:273`) creates `reward.num_workers` workers and, with a reward model, its
  server (`RewardModelManager`). `reward_loop_worker_handles` (`:313`) decides WHERE rewards run:
  without a reward model, or with one that has its own resources
  (`reward.reward_model.enable_resource_pool=True`), it returns the workers, the agent loop gets
  them, and every session is scored in `AgentLoopWorker._compute_score` as soon as it ends, while
  other sessions are still generating. Otherwise (a reward model colocated with the actor, which
  must wait until the rollout has released the GPUs) it returns None, and the trainer scores the
  sampled batch in its `reward` stage with `compute_rm_score` (`:343`).

So by default (a rule or a custom function) the trainer never runs a reward stage: `rm_scores` come
out of the TransferQueue with the trajectories. `collect_reward_info` then turns each session's
`reward_extra_info` into `non_tensor_batch` columns and reward metrics, for either path.

minirl simplifications: workers are objects (verl: Ray actors spread over the nodes): in the trainer process,
sharing one `FailureLog`, and, when the agent loop runs in worker processes of its own
(`rollout.agent.placement`), one in each agent-loop worker, scoring that worker's sessions; a user's score function runs in a daemon thread per call and minirl's own
rule scorers inline on the event loop (see `minirl.workers.reward.scoring`; verl calls every synchronous
score function through `loop.run_in_executor`); the reward-model server is one local process.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

import numpy as np
from tqdm.auto import tqdm

from minirl.protocol import DataProto
from minirl.utils.config import cfg_get
from minirl.utils.py_functional import in_daemon_thread, run_coroutine
from minirl.workers.reward.loading import RewardFunctionError, custom_reward_path, load_reward_manager
from minirl.workers.reward.reward_model import (
    RewardModelManager,
    RewardModelServerError,
    post_request,
    register_token,
    rm_input_text,
)
from minirl.workers.reward.scoring import BadRewardOutput, FailureLog

__all__ = ["MAX_CONCURRENT_REQUESTS", "RewardLoopManager", "RewardLoopWorker", "collect_reward_info"]

MAX_CONCURRENT_REQUESTS = 32
"""Reward-model requests one worker keeps in flight (the others wait for a slot in their threads)."""


class RewardLoopWorker:
    """Scores sessions: the custom function, the reward model or the rule (verl: `RewardLoopWorker`).

    Args:
        config: the whole trainer config.
        tokenizer: the policy's tokenizer (decodes responses).
        reward_router_address: `host:port` of the reward-model server, when there is one.
        reward_model_tokenizer: the reward model's tokenizer (its chat template).
        failures: the run's `FailureLog`.
        server: the `RewardModelManager`, to tell a dead server from a slow one.
        reward_model_token: the server's token, where `server` is in another process (an agent-loop worker's
            reward-loop worker; the controller's manager started the server).
    """

    def __init__(self, config, tokenizer, reward_router_address=None, reward_model_tokenizer=None,
                 failures: FailureLog | None = None, server: RewardModelManager | None = None,
                 reward_model_token: str | None = None):
        self.config = config
        self.input_tokenizer = tokenizer
        self.reward_router_address = reward_router_address
        self.reward_model_tokenizer = reward_model_tokenizer
        self.server = server
        self.reward_model_token = reward_model_token or getattr(server, "token", None)
        register_token(reward_router_address, self.reward_model_token)  # a custom function's post_request too
        self.reward_manager = load_reward_manager(config, tokenizer, reward_router_address=reward_router_address,
                                                  reward_model_tokenizer=reward_model_tokenizer)
        self.reward_manager.failures = failures or FailureLog()
        self.use_reward_model = bool(config.reward.reward_model.enable) and custom_reward_path(config) is None
        self._request_slots = threading.BoundedSemaphore(MAX_CONCURRENT_REQUESTS)

    async def compute_score_batch(self, data: DataProto) -> list[dict]:
        """Score every row of `data` concurrently; each result also has its `score_start`/`score_end` (unix s)."""

        async def one(i):
            start = time.time()
            out = await self.compute_score(data[i:i + 1])
            return {**out, "score_start": start, "score_end": time.time()}

        return list(await asyncio.gather(*(one(i) for i in range(len(data)))))

    async def compute_score(self, data: DataProto) -> dict:
        """One session (a one-row `DataProto`) -> `{"reward_score", "reward_extra_info"}` (+ `"reward_failure"`)."""
        if self.use_reward_model:  # verl: a disrm unless a custom function is given (a genrm needs one)
            return await self.compute_score_disrm(data[-1:])
        return await self.reward_manager.run_single(data)

    async def compute_score_disrm(self, data: DataProto) -> dict:
        """Post the session to the reward-model server; the score is `probs[-1]` of its answer (verl's vLLM path)."""
        manager = self.reward_manager
        sample = manager.sample_inputs(data)
        raw_prompt = data.non_tensor_batch["raw_prompt"][0]
        text = rm_input_text(self.reward_model_tokenizer, raw_prompt, sample["solution_str"])
        payload = {"model": self.config.reward.reward_model.model_path, "input": text}
        timeout = manager.timeout
        token = self.reward_model_token  # the server refuses a request without it

        def post():
            with self._request_slots:  # at most MAX_CONCURRENT_REQUESTS in flight per worker
                return post_request(self.reward_router_address, "classify", payload, timeout, token=token)

        try:
            output = await in_daemon_thread(post, name="minirl-reward")
            score = float(output["data"][-1]["probs"][-1])
        except Exception as e:
            if self.server is not None and not self.server.alive():
                raise RewardModelServerError(f"the reward model server (pid {self.server.process.pid}) exited "
                                             f"with code {self.server.process.returncode}: "
                                             f"{self.server.last_error()}") from e
            return manager.contain_failure(BadRewardOutput(f"request failed: {type(e).__name__}: {e}"), sample["where"],
                                   fn=post_request)
        return {"reward_score": score, "reward_extra_info": {"rm_score": score}}


class RewardLoopManager:
    """Builds the reward workers (and the reward-model server) and says where rewards are computed.

    verl: `RewardLoopManager` (`verl/experimental/reward_loop/reward_loop.py:273`). Call `shutdown`
    when the run ends (`PPOTrainer.close` does): it stops the server.
    """

    def __init__(self, config, tokenizer):
        self.config = config
        self.failures = FailureLog()
        rm = config.reward.reward_model
        self.reward_model_manager = None
        self.reward_router_address = None
        rm_tokenizer = None
        if rm.enable:
            from minirl.models import load_tokenizer

            self.reward_model_manager = RewardModelManager(rm)
            self.reward_router_address = self.reward_model_manager.get_router_address()
            rm_tokenizer = load_tokenizer(self.reward_model_manager.model_path)
        try:
            n = int(cfg_get(config.reward, "num_workers", 1))
            self.reward_loop_workers = [
                RewardLoopWorker(config, tokenizer, self.reward_router_address, rm_tokenizer, self.failures,
                                 self.reward_model_manager) for _ in range(n)]
        except BaseException:
            self.shutdown()
            raise

    @property
    def reward_loop_worker_handles(self) -> list[RewardLoopWorker] | None:
        """The workers, when rewards can be computed during rollout; None for a colocated reward model.

        verl: `reward_loop_worker_handles` (`verl/experimental/reward_loop/reward_loop.py:313`).
        """
        rm = self.config.reward.reward_model
        if not rm.enable or rm.enable_resource_pool:
            return self.reward_loop_workers
        return None

    def compute_rm_score(self, data: DataProto) -> DataProto:
        """Score a whole (padded) batch: `rm_scores`, the extra columns, and in `meta_info` the
        `reward_extra_keys`, `reward_failures` and per-sample `score_timing`.

        verl: `compute_rm_score` (`verl/experimental/reward_loop/reward_loop.py:343`), which pads the
        batch to a multiple of the workers and chunks it; minirl splits it unevenly instead.
        """
        if self.reward_model_manager is not None:
            self.reward_model_manager.wake_up()
        k = len(self.reward_loop_workers)
        bounds = np.linspace(0, len(data), k + 1).astype(int)
        failed_before = self.failures.count
        bar = tqdm(total=len(data), desc="reward", leave=False, disable=os.environ.get("MINIRL_NO_PROGRESS") == "1")

        async def run_all():
            async def chunk(worker, a, b):
                out = await worker.compute_score_batch(data[int(a):int(b)])
                bar.update(len(out))
                return out

            parts = await asyncio.gather(*(chunk(w, a, b) for w, a, b in zip(self.reward_loop_workers, bounds[:-1],
                                                                             bounds[1:]) if b > a))
            return [r for part in parts for r in part]

        try:
            outputs = run_coroutine(run_all)
        finally:
            bar.close()
        if self.reward_model_manager is not None:
            self.reward_model_manager.sleep()
        manager_cls = type(self.reward_loop_workers[0].reward_manager)
        rm_scores = manager_cls.assemble_rm_scores(data, [o["reward_score"] for o in outputs])
        columns = _columns([o.get("reward_extra_info", {}) for o in outputs])
        timing = [{"score_start": o["score_start"], "score_end": o["score_end"]} for o in outputs]
        return DataProto.from_dict(tensors={"rm_scores": rm_scores}, non_tensors=columns,
                                   meta_info={"reward_extra_keys": list(columns), "score_timing": timing,
                                              "reward_failures": self.failures.count - failed_before})

    def score_batch(self, data: DataProto) -> dict:
        """Make sure `data` has its rewards and return their metrics (`collect_reward_info`), in place.

        A batch scored during rollout keeps its stored `rm_scores`; otherwise (a colocated reward model)
        `compute_rm_score` scores it now. The trainer's validation uses this for either path.
        """
        if "rm_scores" not in data.batch.keys():  # noqa: SIM118 (a TensorDict refuses `in`)
            data.union(self.compute_rm_score(data))
        return collect_reward_info(data)

    def check_failures(self, metrics: dict, samples: int, what: str, stop: bool = True) -> None:
        """After a step (or validation): say how many of its `samples` failed their reward, and the first one;
        raise `RewardFunctionError` (one line) when every one of them failed and `stop` is set.

        A step whose every sample scored 0 because its reward failed would train on nothing: GRPO's
        advantages are all 0 and the run would end "successfully" having learnt nothing. verl at the pin
        does not stop either: with its default `naive` manager an exception fails the session and the
        sync `ReplayBuffer.sample` (`verl/trainer/ppo/v1/replay_buffer.py:405`) raises only when no selected
        group has a trajectory left; its `rate_limited` manager scores errors 0 and goes on.
        """
        failed = int(metrics.get("reward/failures", 0))
        first = self.failures.take_window() or "(no message was recorded)"
        if failed <= 0:
            return
        if failed >= samples and stop:
            raise RewardFunctionError(f"{what}: every sample ({failed} of {samples}) failed its reward, so the step "
                                      f"would train on nothing; the first: {first}. Fix: {self._failure_fix()}")
        print(f"minirl reward: {what}: {failed} of {samples} samples failed their reward and were scored 0 (metric "
              f"reward/failures); the first: {first}", file=sys.stderr, flush=True)

    def _failure_fix(self) -> str:
        reward = self.config.reward
        if custom_reward_path(self.config) is not None:
            return ("make reward.custom_reward_function.path's function return a finite number or a dict with a "
                    "finite 'score' for these samples (call it by hand on the sample named above), or remove the key "
                    "to score with the task's rule.")
        if reward.reward_model.enable:
            return ("make the reward model answer (reward.reward_model.model_path: a directory `minirl train-rm` "
                    "wrote; a longer reward.timeout if it is slow), or reward.reward_model.enable=False.")
        return (f"give rows a {cfg_get(self.config.data, 'reward_fn_key', 'data_source')} with a built-in rule (minirl/utils/reward_score), or a "
                "reward function: reward.custom_reward_function.path=<file.py>.")

    def shutdown(self) -> None:
        """Stop the reward-model server, if one runs."""
        if self.reward_model_manager is not None:
            self.reward_model_manager.shutdown()


def _columns(infos: list[dict]) -> dict[str, list]:
    """Per-sample dicts -> one list per key (the union of keys; None where a sample lacks one)."""
    keys: list[str] = []
    for info in infos:
        keys += [k for k in info if k not in keys]
    return {k: [info.get(k) for info in infos] for k in keys}


def collect_reward_info(batch: DataProto) -> dict:
    """Finish the step's rewards in `batch` (in place) and return the reward metrics.

    - the per-session `reward_extra_info` dicts that the agent loop stored (scored during rollout)
      become `non_tensor_batch` columns, named in `meta_info["reward_extra_keys"]`, as the colocated
      path's are;
    - `rm_scores` must be finite (the reward managers guarantee it; this is the last gate);
    - metrics: `reward/<key>/mean` of each numeric extra column, `reward/failures` (samples scored 0
      because their reward failed), and verl's `agent_loop/compute_score/{mean,max}` (seconds per session).
    """
    nt = batch.non_tensor_batch
    if "reward_extra_info" in nt:
        columns = _columns([dict(x or {}) for x in nt.pop("reward_extra_info")])
        for key, values in columns.items():
            nt[key] = np.array(values, dtype=object)
        batch.meta_info["reward_extra_keys"] = list(columns)
    rm = batch.batch["rm_scores"]
    if not bool(rm.isfinite().all()):
        row = int((~rm.isfinite()).any(-1).nonzero()[0, 0])
        raise RuntimeError(f"rm_scores of row {row} is not finite ({rm[row].tolist()}); a reward manager let a "
                           "non-finite score through (minirl.workers.reward.scoring.parse_score should stop it).")
    metrics = {}
    for key in batch.meta_info.get("reward_extra_keys", []):
        values = [v for v in nt.get(key, []) if isinstance(v, (bool, int, float, np.number)) and not np.isnan(v)]
        if values:
            metrics[f"reward/{key}/mean"] = float(np.mean(np.asarray(values, dtype=float)))
    failures = batch.meta_info.pop("reward_failures", 0)
    if "agent_loop_metrics" in nt:
        timings = list(nt["agent_loop_metrics"])
        failures += sum(int(m.get("score_failed", 0)) for m in timings)
        seconds = np.array([float(m.get("compute_score", 0.0)) for m in timings])
        if seconds.size:
            metrics.update({"agent_loop/compute_score/mean": float(seconds.mean()),
                            "agent_loop/compute_score/max": float(seconds.max())})
    metrics["reward/failures"] = int(failures)
    return metrics
