"""Score each response with a rule function chosen by `data_source`, write `rm_scores`.

The contract (same as verl): a score function is
`compute_score(data_source, solution_str, ground_truth, extra_info) -> float | dict`; a dict must hold
`"score"` and may hold more numbers, which become `reward_extra_info` columns. The manager decodes the
valid response tokens, calls the function, and puts the score on the LAST valid response token of
`rm_scores` [B, R]; every other position is 0. The trainer then copies `rm_scores` to
`token_level_scores` (`PPOTrainer._compute_advantage`, `verl/trainer/ppo/v1/trainer_base.py:1638`).

minirl simplification: managers run synchronously in the trainer process (verl's reward loop runs
them as async tasks in `RewardLoopWorker`s, `verl/experimental/reward_loop/reward_loop.py:93`).
"""

from __future__ import annotations

import importlib.util
import inspect
import os
from functools import partial

import numpy as np
import torch

from minirl.protocol import DataProto

_REGISTRY: dict[str, type] = {}


class RewardFunctionError(RuntimeError):
    """A score function raised; the message names the sample's index, data_source and the function."""


def register(name: str):
    """Register a reward manager class by name (verl: `register`, `verl/experimental/reward_loop/reward_manager/registry.py:24`)."""

    def deco(cls):
        _REGISTRY[name] = cls
        return cls

    return deco


def get_reward_manager_cls(name: str):
    """verl: `get_reward_manager_cls` (`verl/experimental/reward_loop/reward_manager/registry.py:41`)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown reward manager {name!r}; registered: {sorted(_REGISTRY)}. "
                         "Set reward.reward_manager.name to one of them.")
    return _REGISTRY[name]


def _call_with_kwargs(fn, kwargs, *args, **call_kwargs):
    return fn(*args, **{**call_kwargs, **kwargs})


def get_custom_reward_fn(config):
    """Load `reward.custom_reward_function.path`/`.name` (or the legacy top-level key) from a Python file.

    verl: `get_custom_reward_fn` (`verl/trainer/ppo/reward.py:50`). Returns None when no path is set.
    """
    section = (config.get("reward") or {}).get("custom_reward_function") or {}
    if not section.get("path"):
        section = config.get("custom_reward_function") or {}
    path, name = section.get("path"), section.get("name") or "compute_score"
    if not path:
        return None
    path = os.path.expanduser(str(path))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"reward.custom_reward_function.path={path!r} does not exist. "
                                "Fix: give the path of a .py file that defines the function.")
    spec = importlib.util.spec_from_file_location("minirl_custom_reward", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise RuntimeError(f"could not import the custom reward file {path!r}: {type(e).__name__}: {e}") from e
    if not hasattr(module, name):
        defined = [k for k, v in vars(module).items() if callable(v) and not k.startswith("_")]
        raise AttributeError(f"reward.custom_reward_function.name={name!r} is not defined in {path!r}; "
                             f"callables there: {defined}.")
    fn = getattr(module, name)
    kwargs = dict(section.get("reward_kwargs") or {})
    return partial(_call_with_kwargs, fn, kwargs) if kwargs else fn


def _default_compute_score(*args, **kwargs):
    from minirl.utils.reward_score import default_compute_score

    return default_compute_score(*args, **kwargs)


class _RewardManagerBase:
    def __init__(self, config, tokenizer, compute_score=None, reward_fn_key="data_source"):
        self.config = config
        self.tokenizer = tokenizer
        self.compute_score = compute_score or _default_compute_score
        self.reward_fn_key = reward_fn_key

    def _decode(self, data: DataProto) -> list[str]:
        responses = data.batch["responses"]
        R = responses.shape[-1]
        valid = data.batch["attention_mask"][:, -R:].sum(-1)
        return [self.tokenizer.decode(responses[i, : int(valid[i])].tolist(), skip_special_tokens=True)
                for i in range(len(data))]

    def _fields(self, data: DataProto, i: int):
        nt = data.non_tensor_batch
        ds = nt[self.reward_fn_key][i] if self.reward_fn_key in nt else "unknown"
        gt = nt["reward_model"][i]["ground_truth"] if "reward_model" in nt else None
        extra = dict(nt["extra_info"][i] or {}) if "extra_info" in nt else {}
        if "__num_turns__" in nt:
            extra["num_turns"] = int(nt["__num_turns__"][i])
        return ds, gt, extra

    def _write(self, data: DataProto, scores: list, extra: dict) -> DataProto:
        R = data.batch["responses"].shape[-1]
        valid = data.batch["attention_mask"][:, -R:].sum(-1)
        rm = torch.zeros(len(data), R, dtype=torch.float32)
        last = (valid - 1).clamp(min=0)
        rm[torch.arange(len(data)), last] = torch.tensor(scores, dtype=torch.float32)
        out = DataProto.from_dict(tensors={"rm_scores": rm},
                                  non_tensors={k: np.array(v, dtype=object) for k, v in extra.items()},
                                  meta_info={"reward_extra_keys": list(extra)})
        return out


@register("naive")
class NaiveRewardManager(_RewardManagerBase):
    """Score one sample at a time (verl: `NaiveRewardManager`, `verl/experimental/reward_loop/reward_manager/naive.py:24`)."""

    def __call__(self, data: DataProto) -> DataProto:
        texts = self._decode(data)
        scores, extra = [], {}
        for i, text in enumerate(texts):
            ds, gt, info = self._fields(data, i)
            try:
                result = self.compute_score(data_source=ds, solution_str=text, ground_truth=gt, extra_info=info)
            except Exception as e:
                name = getattr(self.compute_score, "__name__", repr(self.compute_score))
                raise RewardFunctionError(
                    f"the score function {name} raised {type(e).__name__}: {e} on sample {i} "
                    f"(data_source={ds!r}, index={info.get('index')!r}, response={text[:80]!r})."
                ) from e
            if isinstance(result, dict):
                if "score" not in result:
                    raise RewardFunctionError(f"the score function returned a dict without 'score' on sample {i} "
                                              f"(data_source={ds!r}): {result}")
                score = float(result["score"])
                for k, v in result.items():
                    extra.setdefault(k, [None] * len(texts))[i] = v
            else:
                score = float(result)
                extra.setdefault("acc", [None] * len(texts))[i] = score
            scores.append(score)
        return self._write(data, scores, extra)


@register("batch")
class BatchRewardManager(_RewardManagerBase):
    """Score the whole batch in one call (verl: `BatchRewardManager`, `verl/workers/reward_manager/batch.py:26`).

    The function receives lists: `compute_score(data_sources, solution_strs, ground_truths, extra_infos)`.
    """

    def __call__(self, data: DataProto) -> DataProto:
        texts = self._decode(data)
        fields = [self._fields(data, i) for i in range(len(data))]
        ds, gts, infos = (list(x) for x in zip(*fields)) if fields else ([], [], [])
        fn = self.compute_score
        try:
            if fn is _default_compute_score:
                results = [fn(data_source=a, solution_str=b, ground_truth=c, extra_info=d)
                           for a, b, c, d in zip(ds, texts, gts, infos)]
            else:
                results = fn(data_sources=ds, solution_strs=texts, ground_truths=gts, extra_infos=infos)
        except Exception as e:
            raise RewardFunctionError(f"the batch score function raised {type(e).__name__}: {e} "
                                      f"(data_sources={sorted(set(map(str, ds)))}).") from e
        scores, extra = [], {}
        for i, r in enumerate(results):
            s = float(r["score"]) if isinstance(r, dict) else float(r)
            for k, v in (r.items() if isinstance(r, dict) else [("acc", s)]):
                extra.setdefault(k, [None] * len(results))[i] = v
            scores.append(s)
        return self._write(data, scores, extra)


def load_reward_manager(config, tokenizer):
    """Build the configured manager with the custom or default score function (verl: `load_reward_manager`, `verl/trainer/ppo/reward.py:111`)."""
    name = config.reward.reward_manager.name
    fn = get_custom_reward_fn(config)
    if fn is not None and name == "naive" and "data_sources" in inspect.signature(fn).parameters:
        name = "batch"
    return get_reward_manager_cls(name)(config, tokenizer, compute_score=fn,
                                        reward_fn_key=config.data.get("reward_fn_key", "data_source"))
