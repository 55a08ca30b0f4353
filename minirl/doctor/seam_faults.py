"""Lab 08's faults: three ways a run breaks through verl's own seams, none of them chapter 12's.

No verl counterpart (verl has no fault injection). Unlike `minirl.doctor.faults` (chapter 12's eight faults),
nothing here patches minirl: each fault is what a user could plug in by mistake, through the seam verl
offers for it, so the lab's reader meets bugs that look like real ones.

| fault | layer | what it is | the seam |
|---|---|---|---|
| `negated_reward` | reward | the reward function returns minus the correctness: right answers score -1, wrong ones 0 | `reward.custom_reward_function.path` (a file this module writes) |
| `grpo_by_variance` | advantage | a "faster GRPO" that divides by the group's variance instead of its standard deviation | `@register_adv_est("grpo_fast")`, `algorithm.adv_estimator=grpo_fast` |
| `token_sum_loss` | loss | the policy loss summed over tokens instead of averaged (`loss_agg_mode=token-sum`) | a config override |

`seam_fault_run(name)` trains a short run (`SETTINGS`, from the SFT warm start, metrics in `metrics.jsonl`
next to the trace) with the fault's overrides (`None`: the clean run, with the same reward function file minus
the fault). Every run's reward function returns `{"score", "acc"}`, so `acc` is logged for all of them. Like
`minirl.doctor.faults`, this module trains (through the notebook harness, when a run starts); the rest of
`minirl.doctor` only reads. The advantage fault is a user's module too (`grpo_fast.py`, written to the run's
folder and imported before the run), so the doctor imports no trainer.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BASE_OVERRIDES", "SEAM_FAULTS", "SETTINGS", "SeamFault", "SeamFaultRun", "seam_fault_run"]

SETTINGS = {"train_batch_size": 8, "n": 4, "response_length": 12, "steps": 2}
"""The short run: 8 prompts x 4 responses, 2 steps (chapter 12's fault runs have the same size)."""
BASE_OVERRIDES = ("actor_rollout_ref.model.path=minirl://tiny-qwen2-sft", "trainer.logger=[console,file]",
                  "data.train_max_samples=512", "data.val_max_samples=16", "actor_rollout_ref.actor.use_kl_loss=true")
"""The SFT warm start (its rule reward is ~0.1, not 0), a metrics.jsonl, small datasets, a reference policy."""

_REWARD = '''"""The arithmetic task's rule (minirl's default_compute_score), as a dict with its verdict as `acc`."""

from minirl.utils.reward_score import default_compute_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    acc = float(default_compute_score(data_source, solution_str, ground_truth, extra_info))
    return {{"score": {sign}acc, "acc": acc}}
'''


@dataclass(frozen=True)
class SeamFault:
    """One fault of lab 08: the layer it breaks, what it is, and the seam it goes through."""

    name: str
    layer: str
    what: str
    seam: str


SEAM_FAULTS = {f.name: f for f in (
    SeamFault("negated_reward", "reward", "the reward function returns minus the correctness: right answers "
              "score -1, wrong ones 0", "reward.custom_reward_function.path"),
    SeamFault("grpo_by_variance", "advantage", "GRPO divided by the group's variance instead of its standard "
              "deviation (a registered 'grpo_fast')", "register_adv_est + algorithm.adv_estimator"),
    SeamFault("token_sum_loss", "loss", "the policy loss is summed over the tokens instead of averaged "
              "(actor.loss_agg_mode=token-sum)", "a config override"),
)}
"""name -> the fault."""


_GRPO_FAST = '''"""A colleague's "faster GRPO", registered as `grpo_fast` (lab 08's advantage fault)."""

import torch

from minirl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

if "grpo_fast" not in ADV_ESTIMATOR_REGISTRY:

    @register_adv_est("grpo_fast")
    def grpo_fast(token_level_rewards, response_mask, index, epsilon=1e-6, config=None, **kwargs):
        """GRPO with the bug: (R - mean) / (var + eps), as a colleague's "faster" version had it."""
        scores = token_level_rewards.sum(-1)
        adv = torch.zeros_like(scores)
        for uid in set(index):
            rows = torch.as_tensor(index == uid)
            group = scores[rows]
            adv[rows] = (group - group.mean()) / (group.var() + epsilon) if len(group) > 1 else group
        adv = adv.unsqueeze(-1) * response_mask
        return adv, adv
'''


def _register_grpo_fast(workdir: str) -> None:
    """Register `grpo_fast` as a user does: a module of theirs that calls `register_adv_est`, imported before the
    run (written next to the run's reward file; the doctor itself imports no trainer)."""
    from minirl.utils.import_utils import load_module

    path = Path(workdir) / "grpo_fast.py"
    path.write_text(_GRPO_FAST)
    load_module(str(path))


def _overrides(name: str | None, workdir: str) -> list[str]:
    if name is not None and name not in SEAM_FAULTS:
        raise KeyError(f"no seam fault {name!r}; there are {sorted(SEAM_FAULTS)}")
    path = Path(workdir) / "reward.py"
    path.write_text(_REWARD.format(sign="-" if name == "negated_reward" else ""))
    out = [f"reward.custom_reward_function.path={path}"]
    if name == "grpo_by_variance":
        _register_grpo_fast(workdir)
        out.append("algorithm.adv_estimator=grpo_fast")
    if name == "token_sum_loss":
        out.append("actor_rollout_ref.actor.loss_agg_mode=token-sum")
    return out


@dataclass
class SeamFaultRun:
    """Where a fault run wrote its trace and metrics (`minirl.doctor.load_run(run_dir)` reads them)."""

    fault: str | None
    run_dir: str
    error: str | None = None
    """How the run ended early (a `NonFiniteError`), or None."""


def seam_fault_run(name: str | None, overrides=(), **settings) -> SeamFaultRun:
    """Train the short run with fault `name` (None: clean), `overrides` last; a NaN that stops it is kept in `error`."""
    from minirl.notebook import NonFiniteError, small_run

    workdir = tempfile.mkdtemp(prefix=f"minirl-seam-fault-{name or 'clean'}-")
    ovr = [*BASE_OVERRIDES, *_overrides(name, workdir), *overrides]
    try:
        small_run(ovr, workdir=workdir, keep_batches=False, **{**SETTINGS, **settings})
    except NonFiniteError as e:
        return SeamFaultRun(name, workdir, f"{type(e).__name__}: {e}")
    return SeamFaultRun(name, workdir)
