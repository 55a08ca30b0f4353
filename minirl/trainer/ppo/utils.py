"""Which models a run needs, under verl's names, and the V1 trainer's metric folding (verl: `verl/trainer/ppo/utils.py`,
`verl/trainer/ppo/v1/utils.py`).

`need_critic` (`verl/trainer/ppo/utils.py:96`) and `need_reference_policy` (`verl/trainer/ppo/utils.py:75`)
are computed from the config alone, so they live with it (`minirl.config.derived`: the config checks read
them before any stage exists) and are re-exported here, where a reader of verl looks for them.
`MetricsAggregator` (`verl/trainer/ppo/v1/utils.py:26`) folds the metrics of the `parameter_sync_step`
local updates of one global step into one row.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from minirl.config.derived import need_critic, need_reference_policy, need_teacher_policy

__all__ = ["MetricsAggregator", "need_critic", "need_reference_policy", "need_teacher_policy"]


class MetricsAggregator:
    """One row from the metrics of several local updates (verl: `MetricsAggregator`, `verl/trainer/ppo/v1/utils.py:26`).

    By the name of the metric: counts of evicted samples and `timing_s/...` are summed, names with
    `max` / `min` take the max / min, `.../lr` and `training/global_step` the last value, everything
    else a mean weighted by the update's sample count (the staleness of evicted samples by how many
    were evicted). DAPO's per-value counts are flat keys here (`.../filtered_reward_counts/<value>`, averaged like
    the others); verl merges them as one dict.
    """

    SUM = ("training/off_policy/evicted_samples", "validation/off_policy/evicted_samples",
           "training/rollout_failure/evicted_samples", "validation/rollout_failure/evicted_samples",
           "training/filter_groups/evicted_samples", "training/filter_groups/discarded_surplus_samples",
           "training/filter_groups/generated_groups")
    LAST = ("training/global_step", "training/rollout_probs_diff_valid")

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
