"""Reward managers: one session's response in, `{"reward_score", "reward_extra_info"}` out.

A reward manager decodes a response, calls a score function with verl's contract
`compute_score(data_source, solution_str, ground_truth, extra_info) -> float | dict` (a dict holds
`"score"` and any other numbers, which become `reward_extra_info`), and returns one score per
session. verl V1 calls it per session from a `RewardLoopWorker` (`minirl.workers.reward.reward_loop`)
as soon as the session ends, so the managers are async and take a one-row `DataProto`
(`RewardManagerBase.run_single`, `verl/experimental/reward_loop/reward_manager/base.py:58`). Where a
whole batch is scored at once (a colocated reward model, `compute_rm_score`), the scores are laid out
by `assemble_rm_scores`: each on the LAST valid response token of `rm_scores` [B, R], 0 elsewhere
(`RewardManagerBase.assemble_rm_scores`, `verl/experimental/reward_loop/reward_manager/base.py:62`).

| name | what it does | verl |
|---|---|---|
| `naive` | one call per sample | `NaiveRewardManager` (`verl/experimental/reward_loop/reward_manager/naive.py:24`) |
| `dapo` | naive + DAPO's overlong penalty (`reward.reward_kwargs.overlong_buffer_cfg`) | `DAPORewardManager` (`verl/experimental/reward_loop/reward_manager/dapo.py:24`) |
| `batch` | a function of lists, called once for the sessions that end together | `BatchRewardManager` (`verl/workers/reward_manager/batch.py:26`, legacy) |

A failed call (exception, timeout, None, a string, NaN, inf, a dict without `"score"`, a batch
result of the wrong length) is contained: the sample is scored 0 with `reward_extra_info={"acc": 0.0}`
(verl's `rate_limited` manager does the same for errors and timeouts), the result carries
`"reward_failure"` (minirl only), and the run's `FailureLog` prints the first one
(`minirl.workers.reward.scoring`).

minirl simplifications: the data source column is `data.reward_fn_key` for every manager (verl's
reward-loop managers read `data_source`); `batch` has no reward-loop version in verl (its V1 reward
loop registers naive, dapo, gdpo, rate_limited and remote), so minirl's collects the sessions that finish
in the same event-loop turn and calls the function once for them.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable

import torch

from minirl.config.errors import ConfigError
from minirl.protocol import DataProto
from minirl.utils.config import cfg_get
from minirl.workers.reward.scoring import (
    BadRewardOutput,
    FailureLog,
    function_location,
    parse_score,
    run_score_fn,
)

REWARD_MANAGER_REGISTRY: dict[str, type] = {}
"""name -> reward manager class (verl: `REWARD_MANAGER` in the reward loop's registry, `REWARD_MANAGER_REGISTRY` in the
legacy `verl/workers/reward_manager/registry.py`)."""


def register(name: str):
    """Register a reward manager class by name (verl: `register`, `verl/experimental/reward_loop/reward_manager/registry.py:24`)."""

    def deco(cls):
        REWARD_MANAGER_REGISTRY[name] = cls
        return cls

    return deco


def get_reward_manager_cls(name: str):
    """verl: `get_reward_manager_cls` (`verl/experimental/reward_loop/reward_manager/registry.py:41`)."""
    if name not in REWARD_MANAGER_REGISTRY:
        raise ValueError(f"unknown reward manager {name!r}; registered: {sorted(REWARD_MANAGER_REGISTRY)}. "
                         "Set reward.reward_manager.name to one of them.")
    return REWARD_MANAGER_REGISTRY[name]


def default_compute_score(*args, **kwargs):
    """The built-in rule scorer (`minirl.utils.reward_score.default_compute_score`), imported on first use."""
    from minirl.utils.reward_score import default_compute_score as fn

    return fn(*args, **kwargs)


default_compute_score.minirl_inline = True  # as the scorer it forwards to: on the loop, no thread per session


def _accepts(fn: Callable, name: str) -> bool:
    params = inspect.signature(fn).parameters.values()
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


class RewardManagerBase:
    """Decode a session, call the score function, contain its failures.

    Args:
        config: the whole trainer config (`reward.timeout`, `reward.reward_kwargs`, `data.reward_fn_key`).
        tokenizer: the policy's tokenizer (decodes the responses).
        compute_score: the score function (None: the built-in rule of each data source).
        reward_router_address: `host:port` of the reward-model server when one runs; passed on to a
            custom function that accepts it, so the function can query the model itself (verl does
            the same for generative reward models).
        reward_model_tokenizer: the reward model's tokenizer, passed on with the address.
    """

    def __init__(self, config, tokenizer, compute_score: Callable | None = None, reward_router_address=None,
                 reward_model_tokenizer=None):
        self.config = config
        self.tokenizer = tokenizer
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = cfg_get(cfg_get(config, "data"), "reward_fn_key", "data_source")
        self.timeout = float(cfg_get(cfg_get(config, "reward"), "timeout", 300.0))
        self.failures = FailureLog()  # the RewardLoopManager hands every manager its run's log
        self.extra_kwargs = {}
        if reward_router_address is not None:
            for key, value in (("reward_router_address", reward_router_address),
                               ("reward_model_tokenizer", reward_model_tokenizer)):
                if _accepts(self.compute_score, key):
                    self.extra_kwargs[key] = value

    # ------------------------------------------------------------------------------ one session
    def sample_inputs(self, data: DataProto) -> dict:
        """The score function's arguments for the (last) row of `data`, plus `where` (for messages)."""
        i = len(data) - 1  # verl: data[-1:], the last output of a multi-output session
        nt = data.non_tensor_batch
        responses = data.batch["responses"][i]
        R = responses.shape[-1]
        valid = int(data.batch["attention_mask"][i, -R:].sum()) if R else 0
        text = self.tokenizer.decode(responses[:valid].tolist(), skip_special_tokens=True)
        extra = dict(nt["extra_info"][i] or {}) if "extra_info" in nt else {}
        tool_fields = nt["tool_extra_fields"][i] if "tool_extra_fields" in nt else None
        if isinstance(tool_fields, dict):
            extra.update(tool_fields)
        for column in ("__num_turns__", "num_turns"):
            if column in nt:
                extra["num_turns"] = int(nt[column][i])
                break
        source = nt[self.reward_fn_key][i] if self.reward_fn_key in nt else "unknown"
        gt = nt["reward_model"][i].get("ground_truth") if "reward_model" in nt else None
        key = f"{nt['uid'][i]}_{nt['session_id'][i]}" if "uid" in nt and "session_id" in nt else f"row {i}"
        where = f"sample {key} (dataset index {extra.get('index', '?')}, data_source {source!r})"
        return {"data_source": source, "solution_str": text, "ground_truth": gt, "extra_info": extra,
                "where": where, "valid_response_length": valid}

    def contain_failure(self, error: BadRewardOutput, where: str, fn: Callable | None = None) -> dict:
        name = getattr(fn or self.compute_score, "__name__", "compute_score")
        message = f"{where}: {name} ({function_location(fn or self.compute_score)}) {error}"
        self.failures.report(message)
        return {"reward_score": 0.0, "reward_extra_info": {"acc": 0.0}, "reward_failure": message}

    async def _score_one(self, sample: dict) -> dict:
        kwargs = {k: sample[k] for k in ("data_source", "solution_str", "ground_truth", "extra_info")}
        try:
            result = await run_score_fn(self.compute_score, {**kwargs, **self.extra_kwargs}, self.timeout,
                                        sample["where"])
            score, extra = parse_score(result)
        except BadRewardOutput as e:
            return self.contain_failure(e, sample["where"])
        return {"reward_score": score, "reward_extra_info": extra}

    async def run_single(self, data: DataProto) -> dict:
        """Score one session: `{"reward_score": float, "reward_extra_info": dict}` (+ `"reward_failure"`)."""
        return await self._score_one(self.sample_inputs(data))

    # ----------------------------------------------------------------------------- a whole batch
    @classmethod
    def assemble_rm_scores(cls, data: DataProto, scores: list[float]) -> torch.Tensor:
        """`rm_scores` [B, R]: each sample's score on its last valid response token, 0 elsewhere."""
        P = data.batch["prompts"].size(1)
        valid = data.batch["attention_mask"][:, P:].sum(dim=1)
        rm_scores = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        rows = torch.arange(rm_scores.size(0))
        rm_scores[rows, (valid - 1).clamp(min=0)] = torch.tensor(scores, dtype=torch.float32)
        return rm_scores


@register("naive")
class NaiveRewardManager(RewardManagerBase):
    """One score call per session (verl: `NaiveRewardManager`, `verl/experimental/reward_loop/reward_manager/naive.py:24`)."""


@register("dapo")
class DAPORewardManager(RewardManagerBase):
    """Naive scoring plus DAPO's soft overlong penalty.

    verl: `DAPORewardManager` (`verl/experimental/reward_loop/reward_manager/dapo.py:24`), configured by
    `reward.reward_kwargs.overlong_buffer_cfg` (`enable`, `len`, `penalty_factor`, `log`) and
    `reward.reward_kwargs.max_resp_len`. With $L_{max}$ = `max_resp_len`, $L_{buf}$ = `len` and a
    response of $L$ tokens, the expected length is $L_{max} - L_{buf}$ and

    $$r \\mathrel{+}= \\min\\Big(0,\\; -\\frac{L - (L_{max} - L_{buf})}{L_{buf}}\\cdot \\text{penalty\\_factor}\\Big)$$

    so the penalty grows linearly from 0 at the expected length to `-penalty_factor` at `max_resp_len`.
    With `log`, `overlong_reward` and `overlong` are added to `reward_extra_info`.
    """

    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None, reward_model_tokenizer=None):
        super().__init__(config, tokenizer, compute_score, reward_router_address, reward_model_tokenizer)
        kwargs = cfg_get(cfg_get(config, "reward"), "reward_kwargs", {}) or {}
        self.overlong_buffer_cfg = cfg_get(kwargs, "overlong_buffer_cfg")
        self.max_resp_len = cfg_get(kwargs, "max_resp_len")
        cfg = self.overlong_buffer_cfg
        if cfg is not None and cfg_get(cfg, "enable", False):
            k = "reward.reward_kwargs"
            buffer = cfg_get(cfg, "len", 0)
            if self.max_resp_len is None:
                raise ConfigError(f"{k}.overlong_buffer_cfg.enable=True needs {k}.max_resp_len (verl asserts it). "
                                 f"Fix: +{k}.max_resp_len=<data.max_response_length>.")
            if not buffer or buffer <= 0:
                raise ConfigError(f"{k}.overlong_buffer_cfg.len={buffer!r} must be > 0 when the overlong penalty is on. "
                                 f"Fix: +{k}.overlong_buffer_cfg.len=<tokens>, or .enable=False.")
            if self.max_resp_len < buffer:
                raise ConfigError(f"{k}.max_resp_len={self.max_resp_len} must be >= overlong_buffer_cfg.len={buffer} "
                                 "(verl asserts it). Fix: a shorter buffer.")

    async def run_single(self, data: DataProto) -> dict:
        sample = self.sample_inputs(data)
        out = await self._score_one(sample)
        cfg = self.overlong_buffer_cfg
        if "reward_failure" in out or cfg is None or not cfg_get(cfg, "enable", False):
            return out
        buffer = float(cfg_get(cfg, "len"))
        exceed = sample["valid_response_length"] - (float(self.max_resp_len) - buffer)
        penalty = min(-exceed / buffer * float(cfg_get(cfg, "penalty_factor", 1.0)), 0.0)
        out["reward_score"] += penalty
        if cfg_get(cfg, "log", False):
            out["reward_extra_info"].update(overlong_reward=penalty, overlong=penalty < 0)
        return out


def _default_batch_fn(data_sources, solution_strs, ground_truths, extra_infos, **kwargs):
    """The built-in rule applied to lists (what `batch` calls without a custom function)."""
    return [default_compute_score(data_source=a, solution_str=b, ground_truth=c, extra_info=d, **kwargs)
            for a, b, c, d in zip(data_sources, solution_strs, ground_truths, extra_infos)]


@register("batch")
class BatchRewardManager(RewardManagerBase):
    """One call of a function of lists for all sessions that end together.

    The function is `compute_score(data_sources, solution_strs, ground_truths, extra_infos) -> list`
    with one float or dict per sample (verl: `BatchRewardManager.verify`,
    `verl/workers/reward_manager/batch.py:26`). Sessions wait in a queue until no other session
    reaches the manager in the same event-loop turn, then the queue goes out as one call; a whole
    padded batch (`compute_rm_score`) is one call.
    """

    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None, reward_model_tokenizer=None):
        super().__init__(config, tokenizer, compute_score or _default_batch_fn, reward_router_address,
                         reward_model_tokenizer)
        self._pending: list[tuple[dict, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None

    async def run_single(self, data: DataProto) -> dict:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((self.sample_inputs(data), future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        return await future

    async def _flush(self) -> None:
        while True:  # let every session that is ready join this call
            n = len(self._pending)
            await asyncio.sleep(0)
            if len(self._pending) == n:
                break
        pending, self._pending = self._pending, []
        samples = [s for s, _ in pending]
        for (_, future), result in zip(pending, await self._score_many(samples)):
            if not future.done():
                future.set_result(result)

    async def _score_many(self, samples: list[dict]) -> list[dict]:
        lists = {"data_sources": [s["data_source"] for s in samples],
                 "solution_strs": [s["solution_str"] for s in samples],
                 "ground_truths": [s["ground_truth"] for s in samples],
                 "extra_infos": [s["extra_info"] for s in samples]}
        what = f"{len(samples)} samples from {samples[0]['where']} on"
        try:
            results = await run_score_fn(self.compute_score, {**lists, **self.extra_kwargs}, self.timeout, what)
            if not isinstance(results, (list, tuple)) and not hasattr(results, "__len__"):
                raise BadRewardOutput(f"returned {type(results).__name__} {results!r:.60}, not a list of scores")
            if len(results) != len(samples):
                raise BadRewardOutput(f"returned {len(results)} scores for {len(samples)} samples")
        except BadRewardOutput as e:
            return [self.contain_failure(e, f"{s['where']} (#{i} of {len(samples)} in the call)") for i, s in enumerate(samples)]
        out = []
        for i, (s, r) in enumerate(zip(samples, results)):
            try:
                score, extra = parse_score(r)
                out.append({"reward_score": score, "reward_extra_info": extra})
            except BadRewardOutput as e:
                out.append(self.contain_failure(BadRewardOutput(f"{e} (entry {i} of its list)"), s["where"]))
        return out


__all__ = ["BatchRewardManager", "DAPORewardManager", "NaiveRewardManager", "RewardManagerBase",
           "default_compute_score", "get_reward_manager_cls", "register"]
