"""Step metrics with verl's names (verl: `verl/trainer/ppo/metric_utils.py`).

`reduce_metrics` (`verl/trainer/ppo/metric_utils.py:40`, which forwards to `verl/utils/metric/utils.py:25`)
turns the per-optimizer-step lists a worker returns into one number each; `compute_data_metrics`
(`verl/trainer/ppo/metric_utils.py:429`) summarises the step's batch.
"""

from __future__ import annotations

import numpy as np
import torch

from minirl.protocol import DataProto


def reduce_metrics(metrics: dict) -> dict:
    """Mean of every non-empty metric list (verl: `reduce_metrics`; verl's also takes the max/min of keys named so)."""
    return {k: float(np.mean(v)) for k, v in metrics.items() if len(v)}


def _stats(prefix: str, x: torch.Tensor) -> dict:
    x = x.float()
    return {f"{prefix}/mean": float(x.mean()), f"{prefix}/max": float(x.max()), f"{prefix}/min": float(x.min())}


def gather_worker_metrics(out: DataProto) -> dict:
    """Metric lists from one rank, or from several (DataProto.concat makes `{key: [rank0 list, rank1 list]}`)."""
    m = out.meta_info.get("metrics", {})
    if isinstance(m, list):
        m = {k: [d[k] for d in m if k in d] for k in {k for d in m for k in d}}
    merged = {}
    for k, v in m.items():
        flat = []
        for x in v:
            flat.extend(x if isinstance(x, list) else [x])
        merged[k] = flat
    return merged


def update_batch_numbers(m: dict) -> dict:
    """What an update stage did, for the trace: optimizer steps and the per-rank mini/micro-batch sizes used.

    Every rank steps its shard of the same global optimizer step, so one rank's count is the answer.
    """
    return {"optimizer_steps": int(max(m.get("optimizer_steps", [0]))),
            "mini_batch_size_per_rank": sorted(set(m.get("mini_batch_size_per_rank", []))),
            "micro_batch_size_per_rank": sorted(set(m.get("micro_batch_size_per_rank", []))),
            "micro_batches_per_mini_batch": sorted(set(m.get("num_micro_batches", [])))}


def compute_data_metrics(batch: DataProto, use_critic: bool) -> dict:
    """critic/score, critic/rewards, critic/advantages, critic/returns, (critic/values), lengths."""
    b = batch.batch
    mask = b["response_mask"].bool()
    R = b["responses"].shape[-1]
    P = b["prompts"].shape[-1]
    resp_len = b["attention_mask"][:, -R:].sum(-1).float()
    prompt_len = b["attention_mask"][:, :P].sum(-1).float()
    m = {}
    m.update(_stats("critic/score", b["token_level_scores"].sum(-1)))
    m.update(_stats("critic/rewards", b["token_level_rewards"].sum(-1)))
    m.update(_stats("critic/advantages", b["advantages"][mask]))
    m.update(_stats("critic/returns", b["returns"][mask]))
    if use_critic and "values" in b.keys():
        v, r = b["values"][mask], b["returns"][mask]
        m.update(_stats("critic/values", v))
        m["critic/vf_explained_var"] = float(1 - torch.var(r - v) / (torch.var(r) + 1e-5))
    m.update(_stats("response_length", resp_len))
    m["response_length/clip_ratio"] = float((resp_len == R).float().mean())
    m.update(_stats("prompt_length", prompt_len))
    if "num_turns" in batch.non_tensor_batch:
        turns = torch.tensor(np.asarray(batch.non_tensor_batch["num_turns"], dtype=np.float32))
        m.update(_stats("training/num_turns", turns))  # verl: training/num_turns/{mean,max,min} in _compute_metrics
    return m


def rollout_mismatch_metrics(batch: DataProto, threshold: float = 0.5) -> dict:
    """Training/inference mismatch: log(pi_old / pi_rollout) on valid tokens (verl: `calculate_debug_metrics`,
    `verl/utils/debug/metrics.py:63`, reports the probability difference; minirl reports the log-ratio)."""
    b = batch.batch
    if "rollout_log_probs" not in b.keys() or "old_log_probs" not in b.keys():
        return {}
    mask = b["response_mask"].bool()
    d = (b["old_log_probs"] - b["rollout_log_probs"])[mask]
    if d.numel() == 0:
        return {}
    return {"training/rollout_actor_logprob_diff_mean": float(d.abs().mean()),
            "training/rollout_actor_logprob_diff_max": float(d.abs().max()),
            "training/rollout_actor_logprob_diff_frac_above_threshold": float((d.abs() > threshold).float().mean())}
