"""NaN / inf checks after every stage: a run stops (or skips and counts) at the stage that produced one.

verl has one such guard, in the engine: `FSDPEngine.optimizer_step`
(`verl/workers/engine/fsdp/transformer_impl.py:764`) skips an update whose gradient norm is not
finite and prints a warning; a NaN reward, log-prob, value or advantage travels on unnoticed until
it reaches the loss, five stages later, and the run goes on, skipping every update it poisons. minirl keeps the
engine's guard (`minirl.workers.engine.fsdp_engine.FSDPEngine.optimizer_step`, which counts the
steps it skips) and adds this check, which the trainer calls right after each stage of
`_step_once` (one line per stage):

- **which values**: every floating-point tensor of the batch that the stage added or changed
  (all entries, padding included: `0 * NaN` is NaN in a masked loss), and the stage's new metrics
  that are losses or gradient norms (`actor/pg_loss`, `critic/vf_loss`, `actor/grad_norm` ...). It
  needs no tracer, so it works with `trace.level=off`.
- **what happens** (`trainer.nonfinite`): `stop` (default) ends the run with a `NonFiniteError`,
  one line naming the step, the stage and the field (`minirl train` prints it, exit code 2);
  `skip` records it and goes on: a non-finite value upstream of a loss makes the gradient norm
  non-finite, the engine skips that optimizer step, and `actor/optimizer_steps` counts only the
  steps applied (`actor/optimizer_steps_skipped` the others).
- **the record it leaves** (for `minirl doctor` and for you): a `nonfinite` trace event
  `{"kind": "nonfinite", "step", "stage", "field", "count", "total", "rows", "policy"}` (`rows`: the
  first batch rows with a non-finite entry, empty for a metric), and in the step's metrics row
  `nonfinite/<stage>/<field>` = count. On `stop` the partial row of the failed step is still
  logged (metrics.jsonl and the trace), then the run ends.

The metrics files stay strict JSON: `minirl.utils.tracking.json_row` writes a non-finite number as `null`
and counts them in `nonfinite_metrics` (Python's `json.dumps` would write the non-standard `NaN`).
"""

from __future__ import annotations

import math

import torch

__all__ = ["POLICIES", "FiniteChecks", "NonFiniteError"]

POLICIES = ("stop", "skip")
_CHECKED_METRIC_WORDS = ("loss", "grad_norm")


class NonFiniteError(RuntimeError):
    """A NaN or inf in a stage's output under `trainer.nonfinite=stop`; the message is one line."""

    def __init__(self, step: int, stage: str, field: str, count: int, total: int):
        self.step, self.stage, self.field, self.count, self.total = step, stage, field, count, total
        super().__init__(f"step {step}, stage {stage}: {field} has {count} non-finite value(s) (NaN/inf) of {total}. "
                         f"Fix: {_fix(stage, field)}; or trainer.nonfinite=skip to skip such updates and go on.")


def _fix(stage: str, field: str) -> str:
    if stage == "reward" or "score" in field or "reward" in field:
        return "make the reward function return finite floats (reward.custom_reward_function.path)"
    if "grad_norm" in field or "loss" in field:
        return "lower actor_rollout_ref.actor.optim.lr (and critic.optim.lr) or the clip_grad of the optim section"
    if stage in ("advantage", "values", "update_critic"):
        return "look upstream: the rewards and values this stage read (minirl trace show), and critic.optim.lr"
    return "check the model's weights and actor_rollout_ref.rollout.temperature (log-probs overflow)"


class FiniteChecks:
    """The per-stage check `PPOTrainer._step_once` calls as `batch = trainer.finite(stage, batch, metrics)`.

    Args:
        trainer: the `PPOTrainer`; read are `config.trainer.nonfinite`, `global_steps`, `tracer` and `logger`
            (its `log` writes the failed step's partial row).
    """

    def __init__(self, trainer):
        self.trainer = trainer
        self.policy = str(trainer.config.trainer.get("nonfinite", "stop"))
        if self.policy not in POLICIES:
            raise ValueError(f"trainer.nonfinite={self.policy!r}: use one of {', '.join(POLICIES)}.")
        self._step = None
        self._seen_tensors: dict[str, tuple] = {}  # field -> identity when last checked (this step)
        self._seen_metrics: set[str] = set()
        self._reported: set[str] = set()  # fields already reported this step (a reorder moves every field)
        self.found: list[dict] = []  # every record of this run, in order

    def __call__(self, stage: str, batch, metrics: dict):
        """Check what `stage` added to `batch` and `metrics`; returns `batch` (or raises `NonFiniteError`)."""
        step = int(self.trainer.global_steps)
        if step != self._step:  # a new step: a new batch and a new metrics dict
            self._step, self._seen_tensors, self._seen_metrics, self._reported = step, {}, set(), set()
        for record in self._tensor_records(stage, batch) + self._metric_records(stage, metrics):
            self._report(record, metrics)
        return batch

    def _tensor_records(self, stage: str, batch) -> list[dict]:
        records = []
        tensors = getattr(batch, "batch", None)
        for key in (list(tensors.keys()) if tensors is not None else []):
            value = tensors[key]
            ident = (value.data_ptr(), value._version, tuple(value.shape))
            if self._seen_tensors.get(key) == ident:
                continue  # an earlier stage's field, unchanged
            self._seen_tensors[key] = ident
            if key in self._reported or not value.is_floating_point() or value.numel() == 0:
                continue
            bad = ~torch.isfinite(value.detach())
            count = int(bad.sum())
            if count:
                rows = torch.nonzero(bad.reshape(len(value), -1).any(-1)).flatten()[:8].tolist() if value.dim() else []
                records.append({"stage": stage, "field": key, "count": count, "total": value.numel(), "rows": rows})
        return records

    def _metric_records(self, stage: str, metrics: dict) -> list[dict]:
        records = []
        for key in [k for k in metrics if k not in self._seen_metrics]:
            self._seen_metrics.add(key)
            value = metrics[key]
            if any(w in key for w in _CHECKED_METRIC_WORDS) and isinstance(value, (int, float)) \
                    and not math.isfinite(value):
                records.append({"stage": stage, "field": key, "count": 1, "total": 1, "rows": []})
        return records

    def _report(self, record: dict, metrics: dict) -> None:
        step = self._step
        record = {"step": step, **record, "policy": self.policy}
        self.found.append(record)
        self._reported.add(record["field"])
        metrics[f"nonfinite/{record['stage']}/{record['field']}"] = record["count"]
        self._seen_metrics.update(k for k in metrics if k.startswith("nonfinite/"))
        self.trainer.tracer.event("nonfinite", **record)
        if self.policy == "stop":
            self.trainer.logger.log(metrics, step)  # the failed step's partial row: what happened up to here
            raise NonFiniteError(step, record["stage"], record["field"], record["count"], record["total"])
