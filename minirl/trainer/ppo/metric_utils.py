"""Step metrics with verl's names (verl: `compute_data_metrics`, `verl/trainer/ppo/metric_utils.py:429`)."""

from __future__ import annotations

import numpy as np
import torch

from minirl.protocol import DataProto


def _stats(prefix: str, x: torch.Tensor) -> dict:
    x = x.float()
    return {f"{prefix}/mean": float(x.mean()), f"{prefix}/max": float(x.max()), f"{prefix}/min": float(x.min())}


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
    if "__num_turns__" in batch.non_tensor_batch:
        m.update(_stats("num_turns", torch.tensor(np.asarray(batch.non_tensor_batch["__num_turns__"], dtype=np.float32))))
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
