r"""Rollout correction: importance weights and rejection between the rollout's policy and pi_old, and their formulas.

verl: `verl/trainer/ppo/rollout_corr_helper.py`, called by `PPOTrainer._compute_advantage`
(`verl/trainer/ppo/v1/trainer_base.py:1638`, its step 2). Off-policyness has two separate causes, and
both show up as one gap between the policy that *sampled* a token, $\pi_{\text{roll}}$
(`rollout_log_probs`, recorded by the rollout engine), and the proximal anchor $\pi_{\text{old}}$
(`old_log_probs`, recomputed by the actor):

- **policy lag**: the trajectory was sampled by older weights (async trainers; a partial rollout even by
  two versions). Measured in versions: `training/off_policy/trajectory_staleness` (`metric_utils.py`);
- **inference/training mismatch**: same weights, different numbers (vLLM bf16 kernels vs the FSDP fp32
  forward). Measured on the log-probs: `training/rollout_actor_logprob_diff_*`, `rollout_corr/kl`.

In *decoupled* mode (`algorithm.rollout_correction.bypass_mode=False`, three policies) the trainer
corrects that gap once per batch, after `old_log_prob`, with $x=\log\pi_{\text{old}}-\log\pi_{\text{roll}}$:

$$w_{i,t}=\min\big(e^{x_{i,t}},\bar w\big)\ (\texttt{token}),\qquad
w_{i,t}=\min\big(e^{\sum_{t'}m_{i,t'}x_{i,t'}},\bar w\big)\ (\texttt{sequence})$$

(`rollout_is`, truncated at `rollout_is_threshold` $\bar w$, or zeroed outside `"lower_upper"`: IcePop),
and a rejection mask from `rollout_rs` that removes tokens or whole responses from `response_mask`.
The PPO ratio $\pi_\theta/\pi_{\text{old}}$ keeps its trust region; the weights multiply each token's
loss (`rollout_is_weights` in `compute_policy_loss_vanilla`). This module holds the formulas
(`compute_rollout_correction_weights`, `compute_rollout_rejection_mask`, `compute_offpolicy_metrics`,
`compute_rollout_correction_and_rejection_mask`: tensors in, tensors and metrics out, testable without a
run) and the trainer's side (`apply_rollout_correction`: the batch in, `rollout_is_weights` and the new
`response_mask` out, the metrics named as verl names them, `rollout_corr/...`). What a threshold string
means is parsed in config (`minirl.config.schema_async.parse_rollout_is_threshold`), so that the
check at load time and the formulas agree. In *bypass* mode (two policies) `old_log_probs` *is*
`rollout_log_probs`, nothing is corrected here, and the actor's `bypass_mode` loss does it per
micro-batch against the current $\pi_\theta$.

`PRESETS` holds the named configurations of verl's `RolloutCorrectionConfig` (its classmethods,
`verl/trainer/config/algorithm.py:63`); `preset_overrides(name)` turns one into command-line overrides.

What minirl leaves out: the per-sequence IS/RS spread metrics verl adds (`compute_is_metrics`,
`compute_rs_metrics` std and deviation columns), and the spread of each rejection statistic.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from minirl.config.schema_async import (
    ROLLOUT_RS_OPTIONS,
    parse_rollout_is_threshold,
    parse_rollout_rs_thresholds,
)
from minirl.protocol import DataProto
from minirl.utils.config import cfg_get
from minirl.utils.torch_functional import masked_mean, masked_sum

__all__ = ["PRESETS", "SAFETY_BOUND", "apply_rollout_correction", "compute_offpolicy_metrics",
           "compute_rollout_correction_and_add_to_batch", "compute_rollout_correction_and_rejection_mask",
           "compute_rollout_correction_weights", "compute_rollout_rejection_mask", "lag_advantage_bias", "preset",
           "preset_overrides"]

# ------------------------------------------------------------------------------------ the formulas

SAFETY_BOUND = 20.0
"""|log-ratio| is clamped to this before exp (e^20 ~ 5e8), as in verl (`SAFETY_BOUND`)."""


def _masked_mean_all_ranks(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`mean_m` over every data-parallel rank's values when torch.distributed is running (verl:
    `distributed_masked_mean`, `verl/utils/torch_functional.py:967`), else over the local ones."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return masked_mean(values, mask)
    total, count = (values * mask).sum(), mask.sum().to(values.dtype)
    torch.distributed.all_reduce(total)
    torch.distributed.all_reduce(count)
    return total / count


def compute_rollout_correction_weights(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str = "token",
    rollout_is_threshold: str | float = 2.0,
    rollout_is_batch_normalize: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""Importance weights $w=\pi_\theta/\pi_{\text{roll}}$ that correct for sampling from another policy, truncated.

    With $x_{i,t}$ = `log_ratio` ($\log\pi_\theta-\log\pi_{\text{roll}}$, clamped to $\pm20$):

    $$w^{\text{token}}_{i,t}=e^{x_{i,t}},\qquad w^{\text{sequence}}_{i,t}=e^{\sum_{t'}m_{i,t'}x_{i,t'}}\ \text{(the same for every token of } i)$$

    then masked, and either truncated, $w\leftarrow\min(w,\bar w)$ (TIS, threshold a number $\bar w$),
    or, for a threshold `"lower_upper"`, set to 0 outside $[\text{lower},\text{upper}]$ (IcePop). With
    `rollout_is_batch_normalize` the weights are divided by their mean (over tokens, or over
    responses for `sequence`; over all ranks when torch.distributed runs). The weights are detached:
    they reweight the samples, they are not optimised.

    Returns `(weights, metrics)`; metrics (a subset of verl's): `rollout_is_mean`, `_max`, `_min`,
    `_ratio_fraction_high` / `_low` (share of raw weights above the upper / below the lower bound,
    lower = 1/upper for TIS), `_eff_sample_size` ($1/\operatorname{mean}_m(\hat w^2)$ with $\hat w$ the
    weights over their mean), and `_oob_ratio` (IcePop) or `_batch_norm_factor` when those apply.
    Mirrors `compute_rollout_correction_weights` (`verl/trainer/ppo/rollout_corr_helper.py:522`).
    """
    if rollout_is not in ("token", "sequence"):
        raise ValueError(f"rollout_is={rollout_is!r} is not an IS level. Fix: token, sequence or null (off).")
    upper, lower = parse_rollout_is_threshold(rollout_is_threshold)
    if rollout_is == "token":
        log_w = log_ratio
        raw = torch.exp(torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND))
    else:
        log_w = masked_sum(log_ratio, response_mask, axis=-1).unsqueeze(-1)  # (bs, 1)
        raw = torch.exp(torch.clamp(log_w, -SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    raw = raw * response_mask
    if lower is None:
        weights = raw.clamp(max=upper)
    else:
        weights = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))

    low = 1.0 / upper if lower is None else lower
    valid = response_mask.bool()
    if rollout_is == "sequence":
        metrics = {
            "rollout_is_max": torch.exp(torch.clamp(log_w.max(), max=SAFETY_BOUND)).item(),
            "rollout_is_min": torch.exp(log_w.min()).item(),
            "rollout_is_ratio_fraction_high": (log_w > np.log(upper)).float().mean().item(),
            "rollout_is_ratio_fraction_low": (log_w < np.log(low)).float().mean().item(),
        }
    else:
        metrics = {
            "rollout_is_max": weights.masked_fill(~valid, float("-inf")).max().item(),
            "rollout_is_min": weights.masked_fill(~valid, float("inf")).min().item(),
            "rollout_is_ratio_fraction_high": masked_mean((raw > upper).float(), response_mask).item(),
            "rollout_is_ratio_fraction_low": masked_mean((raw < low).float(), response_mask).item(),
        }
    metrics["rollout_is_mean"] = masked_mean(weights, response_mask).item()
    bounded = weights.clamp(min=0.0, max=upper)
    normalised = bounded / (masked_mean(bounded, response_mask) + 1e-8)
    metrics["rollout_is_eff_sample_size"] = 1.0 / masked_mean(normalised.square(), response_mask).item()
    if lower is not None:
        metrics["rollout_is_oob_ratio"] = masked_mean(((raw < lower) | (raw > upper)).float(), response_mask).item()

    weights = weights.detach()
    if rollout_is_batch_normalize:
        mask = response_mask.to(weights.dtype)
        if rollout_is == "token":
            mean = _masked_mean_all_ranks(weights, mask)
        else:  # one weight per response: average the responses that have tokens
            per_seq, has_tokens = masked_mean(weights, response_mask, axis=-1), (mask.sum(dim=-1) > 0).to(weights.dtype)
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                mean = _masked_mean_all_ranks(per_seq, has_tokens)
            else:
                mean = (per_seq * has_tokens).sum() / has_tokens.sum().clamp_min(1e-8)
        if mean > 1e-8:
            weights = weights / mean
            metrics["rollout_is_batch_norm_factor"] = mean.item()
        else:
            metrics["rollout_is_batch_norm_factor"] = 1.0
    return weights, metrics


def compute_rollout_rejection_mask(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_rs: str = "token_k1",
    rollout_rs_threshold: str | float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""A hard trust region: mask out the tokens (or whole responses) whose divergence from the rollout is too large.

    With $x$ = `log_ratio` clamped to $\pm20$ and the per-token divergence estimates
    $k_1=-x$, $k_2=\tfrac12x^2$, $k_3=e^{x}-1-x$, each option of `rollout_rs` (comma-separated, all
    must pass) keeps a token when its statistic is within the bound:

    - `token_k1`: $\log\text{lower}\le k_1\le\log\text{upper}$ per token; `token_k2`, `token_k3`: $k\le\text{upper}$;
    - `seq_sum_k*`, `seq_mean_k*`, `seq_max_k2|3`: the sum / mean / max of the token statistic over
      the response, against the same bounds, keeping or dropping the whole response.

    Returns `(response_mask * keep, metrics)`, the mask in `response_mask`'s dtype; metrics:
    `rollout_rs_<option>_masked_fraction` (tokens) and `_seq_masked_fraction` (responses with tokens),
    and the same for all options together (`rollout_rs_masked_fraction`, `rollout_rs_seq_masked_fraction`,
    the latter over all responses). verl also logs each statistic's mean/max/min/std.
    Mirrors `compute_rollout_rejection_mask` (`verl/trainer/ppo/rollout_corr_helper.py:197`).
    """
    if not isinstance(rollout_rs, str) or not rollout_rs.strip():
        raise ValueError(f"rollout_rs={rollout_rs!r}: give one or more of {list(ROLLOUT_RS_OPTIONS)}, comma-separated.")
    if log_ratio.shape[0] == 0:
        return response_mask, {}
    options = list(dict.fromkeys(o.strip() for o in rollout_rs.split(",") if o.strip()))
    unknown = [o for o in options if o not in ROLLOUT_RS_OPTIONS]
    if unknown:
        raise ValueError(f"rollout_rs option(s) {unknown} unknown. Fix: use some of {list(ROLLOUT_RS_OPTIONS)}.")
    bounds = parse_rollout_rs_thresholds(options, rollout_rs_threshold)

    x = torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND)
    per_token = {"k1": -x, "k2": 0.5 * x**2, "k3": torch.exp(x) - 1.0 - x}
    valid = response_mask.bool()
    has_tokens = response_mask.sum(dim=-1) > 0
    combined = torch.ones_like(response_mask, dtype=log_ratio.dtype)
    metrics: dict[str, float] = {}
    for option in options:
        level, k = option.rsplit("_", 1)
        lower, upper = bounds[option]
        stat = per_token[k]
        if level == "seq_sum":
            stat = masked_sum(stat, response_mask, axis=-1).unsqueeze(-1)
        elif level == "seq_mean":
            stat = masked_mean(stat, response_mask, axis=-1).unsqueeze(-1)
        elif level == "seq_max":
            top = stat.masked_fill(~valid, float("-inf")).max(dim=-1).values
            stat = torch.where(top == float("-inf"), torch.zeros_like(top), top).unsqueeze(-1)  # no token: 0
        ok = (stat >= np.log(lower)) & (stat <= np.log(upper)) if k == "k1" else stat <= upper
        ok = ok.expand_as(valid)
        keep = ok.to(log_ratio.dtype)
        combined = combined * keep
        seq_kept = (ok | ~valid).all(dim=-1)
        metrics[f"rollout_rs_{option}_masked_fraction"] = masked_mean(1 - keep, response_mask).item()
        n_seq = has_tokens.float().sum()
        metrics[f"rollout_rs_{option}_seq_masked_fraction"] = (
            (((~seq_kept) & has_tokens).float().sum() / n_seq).item() if n_seq > 0 else 0.0
        )
    metrics["rollout_rs_masked_fraction"] = masked_mean(1 - combined, response_mask).item()
    rejected_seq = ((combined <= 0.5) & valid).any(dim=-1)
    metrics["rollout_rs_seq_masked_fraction"] = rejected_seq.float().mean().item()
    return (response_mask * combined).to(dtype=response_mask.dtype), metrics


def compute_offpolicy_metrics(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor | None, response_mask: torch.Tensor
) -> dict[str, float]:
    r"""How far the rollout's policy is from the training policy, from the log-probs of the sampled tokens.

    With $\ell=$ `old_log_prob` (training policy), $\ell^{\text{roll}}$ = `rollout_log_prob` and
    $x=\ell-\ell^{\text{roll}}$: `kl` $=\operatorname{mean}_m(-x)$ (an estimate of
    $\mathrm{KL}(\pi_{\text{roll}}\Vert\pi)$), `k3_kl` $=\operatorname{mean}_m(e^x-x-1)$,
    `training_ppl` / `rollout_ppl` (per-response perplexity $e^{-\operatorname{mean}_t\ell}$, averaged),
    their logs, `log_ppl_diff` (mean, abs mean, max, min over responses), `ppl_ratio`, and the
    $\chi^2$ divergences `chi2_token` $=\operatorname{mean}_m(e^{2x})-1$ and `chi2_seq`
    $=\operatorname{mean}_i(e^{2\sum_t m x})-1$ (exponents clamped). Without `rollout_log_prob`, only
    the training perplexity. Mirrors `compute_offpolicy_metrics` (`verl/trainer/ppo/rollout_corr_helper.py:904`).
    """
    if not response_mask.any():
        raise ValueError("compute_offpolicy_metrics: response_mask has no valid token.")
    mean_lp = masked_mean(old_log_prob, response_mask, axis=-1)
    metrics = {"training_ppl": torch.exp(-mean_lp).mean().item(), "training_log_ppl": (-mean_lp).mean().item()}
    if rollout_log_prob is None:
        return metrics
    x = old_log_prob - rollout_log_prob
    mean_roll = masked_mean(rollout_log_prob, response_mask, axis=-1)
    diff = mean_roll - mean_lp
    x_safe = torch.clamp(x, -SAFETY_BOUND, SAFETY_BOUND)
    seq_sum = torch.clamp(masked_sum(x, response_mask, axis=-1), -SAFETY_BOUND, SAFETY_BOUND)
    metrics.update({
        "kl": masked_mean(-x, response_mask).item(),
        "k3_kl": masked_mean(torch.exp(x) - x - 1, response_mask).item(),
        "rollout_ppl": torch.exp(-mean_roll).mean().item(),
        "rollout_log_ppl": (-mean_roll).mean().item(),
        "log_ppl_diff": diff.mean().item(),
        "log_ppl_abs_diff": diff.abs().mean().item(),
        "log_ppl_diff_max": diff.max().item(),
        "log_ppl_diff_min": diff.min().item(),
        "ppl_ratio": torch.exp(diff).mean().item(),
        "chi2_token": (masked_mean(torch.exp(x_safe).square(), response_mask) - 1.0).item(),
        "chi2_seq": (torch.exp(2.0 * seq_sum).mean() - 1.0).item(),
    })
    return metrics


FLOAT_NOISE = 1e-5
"""|log pi_old - log pi_roll| below this is float noise, not lag (same weights on CPU: ~1e-7; chapter 10)."""


def lag_advantage_bias(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, advantages: torch.Tensor,
                       response_mask: torch.Tensor) -> dict[str, float]:
    r"""What the weights $w=e^{x}$, $x=\log\pi_{\text{old}}-\log\pi_{\text{roll}}$, would change in one batch's
    policy gradient: do they lean toward the tokens with positive advantage or the others? (minirl's own; no
    verl counterpart.)

    Over the response tokens ($m=1$), with $A$ the advantages:

    - `corr_x_adv`: the Pearson correlation of $x$ and $A$. Above 0: the sampler drew the tokens with
      positive advantage *less* often than $\pi_{\text{old}}$ would (policy lag: the last update raised them);
    - `w_pos`, `w_neg`: the mean $w$ of the tokens with $A>0$ and with $A<0$;
    - `sum_adv`, `sum_w_adv`: $\sum_t m_tA_t$ as sampled and $\sum_t m_t w_t A_t$ reweighted to
      $\pi_{\text{old}}$: the net push of a token-mean loss (below 0: the sampled tokens pushed down overall).

    Without a correction the loss uses the first weighting; if `corr_x_adv` keeps one sign step after step,
    that difference is a bias with a direction, not noise (`benchmarks/staleness_bias.py`, chapter 10).
    Differences below `FLOAT_NOISE` (two fp32 forwards of the same weights) count as 0, so a fresh batch reads
    `corr_x_adv` 0 and $w=1$.
    """
    m = response_mask.bool()
    x = (old_log_prob - rollout_log_prob)[m].double().clamp(-SAFETY_BOUND, SAFETY_BOUND)
    x = torch.where(x.abs() < FLOAT_NOISE, torch.zeros_like(x), x)
    a = advantages[m].double()
    w = torch.exp(x)
    pos, neg = a > 0, a < 0
    varies = x.numel() > 1 and bool(x.std() > 0) and bool(a.std() > 0)
    return {"tokens": int(m.sum()),
            "corr_x_adv": float(torch.corrcoef(torch.stack([x, a]))[0, 1]) if varies else 0.0,
            "w_pos": float(w[pos].mean()) if pos.any() else float("nan"),
            "w_neg": float(w[neg].mean()) if neg.any() else float("nan"),
            "sum_adv": float(a.sum()), "sum_w_adv": float((w * a).sum())}


def compute_rollout_correction_and_rejection_mask(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str | None = None,
    rollout_is_threshold: str | float | None = 2.0,
    rollout_is_batch_normalize: bool = False,
    rollout_rs: str | None = None,
    rollout_rs_threshold: str | float | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    r"""IS weights (if `rollout_is`), a rejection mask (if `rollout_rs`) and the off-policy metrics, in one call.

    `old_log_prob` is the policy being corrected *to* (in bypass mode: the current $\pi_\theta$) and
    `rollout_log_prob` the one that sampled. Returns `(weights or None, response_mask after rejection,
    metrics)`, every metric prefixed `rollout_corr/`. verl returns the weights wrapped in a DataProto
    (`rollout_is_weights`); minirl returns the tensor (`compute_rollout_correction_and_add_to_batch` puts it in the batch).
    Mirrors `compute_rollout_correction_and_rejection_mask` (`verl/trainer/ppo/rollout_corr_helper.py:786`).
    """
    if not response_mask.any():
        raise ValueError("rollout correction: response_mask has no valid token (1) in this micro-batch.")
    if old_log_prob.shape != rollout_log_prob.shape or old_log_prob.shape != response_mask.shape:
        raise ValueError(
            f"rollout correction: log-prob shapes {tuple(old_log_prob.shape)} / {tuple(rollout_log_prob.shape)} "
            f"and response_mask {tuple(response_mask.shape)} must be equal."
        )
    log_ratio = old_log_prob - rollout_log_prob
    metrics: dict[str, float] = {}
    weights = None
    if rollout_is is not None and rollout_is_threshold is not None:
        weights, is_metrics = compute_rollout_correction_weights(
            log_ratio, response_mask, rollout_is, rollout_is_threshold, rollout_is_batch_normalize
        )
        metrics.update(is_metrics)
    mask = response_mask.clone()
    if rollout_rs is not None:
        mask, rs_metrics = compute_rollout_rejection_mask(log_ratio, response_mask, rollout_rs, rollout_rs_threshold)
        metrics.update(rs_metrics)
    metrics.update(compute_offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask))
    return weights, mask, {f"rollout_corr/{k}": float(v) for k, v in metrics.items()}


# ------------------------------------------------------------------------------------ presets

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


# ------------------------------------------------------------------------ the trainer's side


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
