r"""Versions and staleness: how far the trained batch is from the policy being trained, in weight versions.

verl: step 5 of `PPOTrainer._compute_metrics` (`verl/trainer/ppo/v1/trainer_base.py:1763`) and
`MetricsAggregator` (`verl/trainer/ppo/v1/utils.py:26`), which folds the metrics of the
`parameter_sync_step` local updates of one global step into one row.

Versions count global steps: after step $k$ the trainer syncs the weights with `update_weights(k)`, so
the rollout samples step $k+1$'s data with version $k$, and every trajectory records the first and
last version that sampled it, $v^{\min}_i$ and $v^{\max}_i$ (`min_global_steps` / `max_global_steps`
tags; two versions when a weight sync aborted and resumed it, a *partial rollout*). At step $k$ the
freshest weights are version $k-1$, so:

$$\text{spans}_i=v^{\max}_i-v^{\min}_i+1,\qquad
\text{staleness}_i=(k-1)-v^{\max}_i,\qquad \text{staleness\_worst}_i=(k-1)-v^{\min}_i$$

`spans` is the inconsistency inside one trajectory (1: one version), `staleness` the lag behind the
current policy (0 in sync mode), `staleness_worst` the lag of its oldest tokens. Each is logged as
`training/off_policy/<name>/{mean,max,min}`, verl's names. This is *policy lag*; the other source of
off-policyness, inference/training mismatch, is measured on log-probs instead
(`minirl.trainer.ppo.rollout_corr_helper`).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

__all__ = ["MetricsAggregator", "sample_trace_info", "trajectory_version_metrics"]


def trajectory_version_metrics(min_global_steps, max_global_steps, global_steps: int) -> dict[str, float]:
    """`training/off_policy/trajectory_{spans,staleness,staleness_worst}/{mean,max,min}` of one step's trajectories."""
    lo = np.asarray(min_global_steps, dtype=np.int64)
    hi = np.asarray(max_global_steps, dtype=np.int64)
    if lo.size == 0:
        return {}
    values = {"trajectory_spans": hi - lo + 1, "trajectory_staleness": (global_steps - 1) - hi,
              "trajectory_staleness_worst": (global_steps - 1) - lo}
    out = {}
    for name, v in values.items():
        for stat in ("mean", "max", "min"):
            out[f"training/off_policy/{name}/{stat}"] = float(getattr(v, stat)())
    return out


def sample_trace_info(batch, replay_buffer) -> dict:
    """What the `sample` span records in async mode: the buffer's decisions and the sampled sessions' times.

    `replay_buffer`: what `ReplayBufferAsync.sample` did (waited_s, blocked_s, polls, evicted groups with
    their spans, refilled prompts, selected spans). `session_timing`: per sampled trajectory its key,
    wall-clock `start` / `end` (the agent loop's `agent_loop_metrics`) and `min_global_steps` /
    `max_global_steps`, so a timeline of generation can be drawn from the trace alone. Empty for the
    sync buffer (the sync `rollout` span already holds the sessions' times).
    """
    last = getattr(replay_buffer, "last_sample", None)
    if last is None:
        return {}
    nt = batch.non_tensor_batch
    timing = []
    for i, m in enumerate(nt.get("agent_loop_metrics", [])):
        timing.append({"key": f"{nt['uid'][i]}_{int(nt['session_id'][i]) if 'session_id' in nt else 0}_0",
                       "start": float(m.get("start", 0.0)), "end": float(m.get("end", 0.0)),
                       "fetched_at": int(nt["global_steps"][i]) if "global_steps" in nt else None,
                       "min_global_steps": int(nt["min_global_steps"][i]),
                       "max_global_steps": int(nt["max_global_steps"][i])})
    return {"replay_buffer": dict(last), "session_timing": timing}


class MetricsAggregator:
    """One row from the metrics of several local updates (verl: `MetricsAggregator`, `verl/trainer/ppo/v1/utils.py:26`).

    By the name of the metric: counts of evicted samples and `timing_s/...` are summed, names with
    `max` / `min` take the max / min, `.../lr` and `training/global_step` the last value, everything
    else a mean weighted by the update's sample count (the staleness of evicted samples by how many
    were evicted). verl's also merges DAPO's per-value counts, which minirl does not have.
    """

    SUM = ("training/off_policy/evicted_samples", "validation/off_policy/evicted_samples",
           "training/rollout_failure/evicted_samples", "validation/rollout_failure/evicted_samples")
    LAST = ("training/global_step",)

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = defaultdict(list)
        self.weights: dict[str, list[float]] = defaultdict(list)
        self.updates = 0

    def add_step_metrics(self, metrics: dict, sample_count: int = 0) -> None:
        """Record one local update's metrics (numbers only; booleans are skipped, as in verl)."""
        self.updates += 1
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                continue
            weight = sample_count
            if key.endswith("/off_policy/evicted_samples_staleness/mean"):
                weight = metrics.get(key.rsplit("_staleness/mean", 1)[0], sample_count)
            self.values[key].append(float(value))
            self.weights[key].append(float(weight))

    @classmethod
    def _rule(cls, key: str) -> str:
        low = key.lower()
        if key in cls.SUM:
            return "sum"
        if key in cls.LAST or low == "lr" or low.endswith(("/lr", "_lr")):
            return "last"
        if "timing_s/" in low:
            return "sum"
        if "max" in low:
            return "max"
        if "min" in low:
            return "min"
        if "sum" in low or "total" in low:
            return "sum"
        return "mean"

    def get_aggregated_metrics(self) -> dict[str, float]:
        """The combined row."""
        out = {}
        for key, vals in self.values.items():
            rule = self._rule(key)
            if rule == "sum":
                out[key] = sum(vals)
            elif rule == "last":
                out[key] = vals[-1]
            elif rule == "max":
                out[key] = max(vals)
            elif rule == "min":
                out[key] = min(vals)
            else:
                w = self.weights[key]
                out[key] = sum(v * c for v, c in zip(vals, w)) / sum(w) if sum(w) > 0 else sum(vals) / len(vals)
        if {"global_seqlen/minmax_diff", "global_seqlen/max", "global_seqlen/min"} <= set(out):
            out["global_seqlen/minmax_diff"] = out["global_seqlen/max"] - out["global_seqlen/min"]
        return out
