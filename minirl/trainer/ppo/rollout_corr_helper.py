r"""Rollout correction in the trainer: importance weights and rejection between the rollout's policy and pi_old.

verl: `verl/trainer/ppo/rollout_corr_helper.py`, called by `PPOTrainer._compute_advantage`
(`verl/trainer/ppo/v1/trainer_base.py:1638`, its step 2). Off-policyness has two separate causes, and
both show up as one gap between the policy that *sampled* a token, $\pi_{\text{roll}}$
(`rollout_log_probs`, recorded by the rollout engine), and the proximal anchor $\pi_{\text{old}}$
(`old_log_probs`, recomputed by the actor):

- **policy lag**: the trajectory was sampled by older weights (async trainers; a partial rollout even by
  two versions). Measured in versions: `training/off_policy/trajectory_staleness` (`off_policy.py`);
- **inference/training mismatch**: same weights, different numbers (vLLM bf16 kernels vs the FSDP fp32
  forward). Measured on the log-probs: `training/rollout_actor_logprob_diff_*`, `rollout_corr/kl`.

In *decoupled* mode (`algorithm.rollout_correction.bypass_mode=False`, three policies) the trainer
corrects that gap once per batch, after `old_log_prob`, with $x=\log\pi_{\text{old}}-\log\pi_{\text{roll}}$:

$$w_{i,t}=\min\big(e^{x_{i,t}},\bar w\big)\ (\texttt{token}),\qquad
w_{i,t}=\min\big(e^{\sum_{t'}m_{i,t'}x_{i,t'}},\bar w\big)\ (\texttt{sequence})$$

(`rollout_is`, truncated at `rollout_is_threshold` $\bar w$, or zeroed outside `"lower_upper"`: IcePop),
and a rejection mask from `rollout_rs` that removes tokens or whole responses from `response_mask`.
The PPO ratio $\pi_\theta/\pi_{\text{old}}$ keeps its trust region; the weights multiply each token's
loss (`rollout_is_weights` in `compute_policy_loss_vanilla`). The formulas live in
`minirl.trainer.core_algos` (`compute_rollout_correction_and_rejection_mask`); this module is the
trainer's side: the batch in, `rollout_is_weights` and the new `response_mask` out, the metrics named as
verl names them (`rollout_corr/...`). In *bypass* mode (two policies) `old_log_probs` *is*
`rollout_log_probs`, nothing is corrected here, and the actor's `bypass_mode` loss does it per
micro-batch against the current $\pi_\theta$.

`PRESETS` holds the named configurations of verl's `RolloutCorrectionConfig` (its classmethods,
`verl/trainer/config/algorithm.py:63`); `preset_overrides(name)` turns one into command-line overrides.

What minirl leaves out: the per-sequence IS/RS spread metrics verl adds (`compute_is_metrics`,
`compute_rs_metrics` std and deviation columns); see `minirl.trainer.core_algos` for the subset kept.
"""

from __future__ import annotations

from typing import Any

from minirl.protocol import DataProto
from minirl.trainer.core_algos import compute_rollout_correction_and_rejection_mask
from minirl.utils.config import cfg_get

__all__ = ["PRESETS", "apply_rollout_correction", "compute_rollout_correction_and_add_to_batch", "preset",
           "preset_overrides"]

_GEO = "0.999_1.001"  # verl's geometric-mean RS band: the per-token log-ratio mean within +-0.1%

PRESETS: dict[str, dict[str, Any]] = {
    # decoupled: three policies (pi_roll, pi_old, pi_theta), the weights correct pi_old vs pi_roll
    "decoupled_token_is": {"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": None},
    "decoupled_seq_is": {"rollout_is": "sequence", "rollout_is_threshold": 2.0, "rollout_rs": None},
    "decoupled_token_icepop": {"rollout_is": "token", "rollout_is_threshold": "0.5_5.0", "rollout_rs": None},
    "decoupled_seq_is_rs": {"rollout_is": "sequence", "rollout_is_threshold": 2.0, "rollout_rs": "seq_sum_k1",
                            "rollout_rs_threshold": "0.5_2.0"},
    "decoupled_geo_rs": {"rollout_is": None, "rollout_rs": "seq_mean_k1", "rollout_rs_threshold": _GEO},
    "decoupled_geo_rs_seq_tis": {"rollout_is": "sequence", "rollout_is_threshold": 2.0, "rollout_rs": "seq_mean_k1",
                                 "rollout_rs_threshold": _GEO},
    "decoupled_geo_rs_token_tis": {"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": "seq_mean_k1",
                                   "rollout_rs_threshold": _GEO},
    "decoupled_k3_rs": {"rollout_is": None, "rollout_rs": "seq_mean_k3", "rollout_rs_threshold": 0.01},
    "decoupled_k3_rs_seq_tis": {"rollout_is": "sequence", "rollout_is_threshold": 2.0, "rollout_rs": "seq_mean_k3",
                                "rollout_rs_threshold": 0.01},
    "decoupled_k3_rs_token_tis": {"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": "seq_mean_k3",
                                  "rollout_rs_threshold": 0.01},
    # bypass: two policies (pi_roll = pi_old, pi_theta); loss_type picks the bypass_mode loss
    "bypass_ppo_clip": {"rollout_is": None, "rollout_rs": None, "bypass_mode": True, "loss_type": "ppo_clip"},
    "bypass_ppo_clip_geo_rs": {"rollout_is": None, "rollout_rs": "seq_mean_k1", "rollout_rs_threshold": _GEO,
                               "bypass_mode": True, "loss_type": "ppo_clip"},
    "bypass_ppo_clip_k3_rs": {"rollout_is": None, "rollout_rs": "seq_mean_k3", "rollout_rs_threshold": 0.01,
                              "bypass_mode": True, "loss_type": "ppo_clip"},
    "bypass_pg_is": {"rollout_is": "sequence", "rollout_is_threshold": 2.0, "rollout_rs": None, "bypass_mode": True,
                     "loss_type": "reinforce"},
    "bypass_pg_token_icepop": {"rollout_is": "token", "rollout_is_threshold": "0.5_5.0", "rollout_rs": None,
                               "bypass_mode": True, "loss_type": "reinforce"},
    "bypass_pg_geo_rs": {"rollout_is": None, "rollout_rs": "seq_mean_k1", "rollout_rs_threshold": _GEO,
                         "bypass_mode": True, "loss_type": "reinforce"},
    "bypass_pg_geo_rs_seq_tis": {"rollout_is": "sequence", "rollout_is_threshold": 2.0, "rollout_rs": "seq_mean_k1",
                                 "rollout_rs_threshold": _GEO, "bypass_mode": True, "loss_type": "reinforce"},
    "bypass_pg_geo_rs_token_tis": {"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": "seq_mean_k1",
                                   "rollout_rs_threshold": _GEO, "bypass_mode": True, "loss_type": "reinforce"},
    # metrics only
    "disabled": {"rollout_is": None, "rollout_rs": None},
}
"""verl's `RolloutCorrectionConfig` presets at their default arguments: name -> the keys the classmethod sets."""

_DEFAULTS = {"rollout_is": None, "rollout_is_threshold": 2.0, "rollout_rs": None, "rollout_rs_threshold": None,
             "bypass_mode": False, "loss_type": "ppo_clip", "rollout_is_batch_normalize": False}


def preset(name: str) -> dict[str, Any]:
    """The full `algorithm.rollout_correction` section of preset `name` (unset keys at the YAML defaults)."""
    if name not in PRESETS:
        raise ValueError(f"unknown rollout-correction preset {name!r}. Fix: one of {sorted(PRESETS)}.")
    return {**_DEFAULTS, **PRESETS[name]}


def _override(key: str, value: Any) -> str:
    return f"{key}={'null' if value is None else str(value).lower() if isinstance(value, bool) else value}"


def preset_overrides(name: str) -> list[str]:
    """Command-line overrides that select preset `name`.

    A bypass preset also sets the actor's `policy_loss.loss_mode=bypass_mode` and copies the IS / RS /
    loss_type keys into `actor_rollout_ref.actor.policy_loss.rollout_correction`, which is what verl's
    `apply_bypass_mode` (`verl/trainer/ppo/rollout_corr_helper.py:1109`) does in its legacy trainer; verl's
    V1 trainer leaves that to the user (and minirl's config check asks for it).
    """
    section = preset(name)
    out = [_override(f"algorithm.rollout_correction.{k}", v) for k, v in section.items()]
    if section["bypass_mode"]:
        pl = "actor_rollout_ref.actor.policy_loss"
        out.append(f"{pl}.loss_mode=bypass_mode")
        out += [_override(f"{pl}.rollout_correction.{k}", v) for k, v in section.items() if k != "bypass_mode"]
    return out


def compute_rollout_correction_and_add_to_batch(batch: DataProto, rollout_corr_config) -> tuple[DataProto, dict]:
    """IS weights (if `rollout_is`) and rejection (if `rollout_rs`) of `old_log_probs` against `rollout_log_probs`.

    Always replaces `response_mask` with the mask after rejection (unchanged without `rollout_rs`); adds
    `rollout_is_weights` `[B, R]` only when `rollout_is` is set. Returns the batch and the `rollout_corr/...`
    metrics (weights, rejection, and the off-policy diagnostics `kl`, `k3_kl`, perplexities, chi^2).
    Mirrors `compute_rollout_correction_and_add_to_batch` (`verl/trainer/ppo/rollout_corr_helper.py:1013`).
    """
    weights, mask, metrics = compute_rollout_correction_and_rejection_mask(
        old_log_prob=batch.batch["old_log_probs"],
        rollout_log_prob=batch.batch["rollout_log_probs"],
        response_mask=batch.batch["response_mask"],
        rollout_is=cfg_get(rollout_corr_config, "rollout_is", None),
        rollout_is_threshold=cfg_get(rollout_corr_config, "rollout_is_threshold", 2.0),
        rollout_is_batch_normalize=bool(cfg_get(rollout_corr_config, "rollout_is_batch_normalize", False)),
        rollout_rs=cfg_get(rollout_corr_config, "rollout_rs", None),
        rollout_rs_threshold=cfg_get(rollout_corr_config, "rollout_rs_threshold", None),
    )
    batch.batch["response_mask"] = mask.to(batch.batch["response_mask"].dtype)
    if weights is not None:
        batch.batch["rollout_is_weights"] = weights
    return batch, metrics


def apply_rollout_correction(batch: DataProto, rollout_corr_config, metrics: dict) -> DataProto:
    """The V1 trainer's step 2 of `_compute_advantage`: correct in decoupled mode, skip in bypass mode.

    Runs when the batch has `rollout_log_probs` (`rollout.calculate_log_probs`) and bypass mode is off, i.e.
    in every decoupled run, sync included: with `rollout_is` and `rollout_rs` null it only measures
    (`rollout_corr/...` metrics). Mirrors the `rollout_correction` branch of `PPOTrainer._compute_advantage`
    (`verl/trainer/ppo/v1/trainer_base.py:1638`).
    """
    if rollout_corr_config is None or bool(cfg_get(rollout_corr_config, "bypass_mode", False)):
        return batch
    if "rollout_log_probs" not in batch.batch.keys():  # noqa: SIM118 (TensorDict keys)
        return batch
    batch, corr_metrics = compute_rollout_correction_and_add_to_batch(batch, rollout_corr_config)
    metrics.update(corr_metrics)
    return batch
