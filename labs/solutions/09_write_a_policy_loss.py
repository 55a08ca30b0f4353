"""Worked solutions of lab 09 (write a policy loss), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (its `globals()`) and returns the answer; the lab's
checks call them when solutions are on (`SOLUTION = True`, or `MINIRL_LAB_SOLUTIONS=1` as the test suite
runs labs). Every answer is a function: exercise 2's registers exercise 1's loss (the lab calls it with
`MY_LOSS_NAME`). Try the exercises before you read their solutions.
"""

import torch

from minirl.trainer.ppo import core_algos
from minirl.utils.config import cfg_get


def cispo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
          rollout_is_weights=None):
    """CISPO: -sg[clip(rho, 1 - eps_low, 1 + eps_high)] * A * log pi, aggregated like every loss."""
    clip_low, clip_high = float(cfg_get(config, "clip_ratio_low")), float(cfg_get(config, "clip_ratio_high"))
    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, -20.0, 20.0))
    weight = torch.clamp(ratio, 1 - clip_low, 1 + clip_high).detach()  # no gradient through the weight
    losses = -weight * advantages * log_prob
    if rollout_is_weights is not None:
        losses = losses * rollout_is_weights
    batch_info = dict(cfg_get(config, "global_batch_info", {}) or {})  # the engine's global counts (several ranks)
    loss = core_algos.agg_loss(losses, response_mask, loss_agg_mode, **batch_info)
    clipfrac = core_algos.masked_mean((ratio != weight).float(), response_mask)
    return loss, {"actor/pg_clipfrac": float(clipfrac)}


def silenced(ratio, advantages, response_mask, clip_low, clip_high, clip_c):
    """Tokens whose vanilla-PPO gradient is 0: past the window in the advantage's direction, or dual-clipped."""
    up = (advantages > 0) & (ratio > 1 + clip_high)
    down = (advantages < 0) & (ratio < 1 - clip_low)
    dual = (advantages < 0) & (ratio > clip_c)
    return (up | down | dual) & response_mask.bool()


def gspo_log_ratio(log_prob, old_log_prob, response_mask):
    """log s_i = mean over the response's tokens of log pi - log pi_old; straight-through per token."""
    seq = ((log_prob - old_log_prob) * response_mask).sum(-1) / response_mask.sum(-1).clamp(min=1)
    return log_prob - log_prob.detach() + seq.detach().unsqueeze(-1)


def exercise_1(nb):
    """ratio = exp(log pi - log pi_old); weight = clip(ratio).detach(); agg_loss(-weight * A * log pi)."""
    return cispo


def register(fn, name):
    """register_policy_loss(name)(fn): the decorator, called by hand; it hands back fn."""
    return core_algos.register_policy_loss(name)(fn)


def exercise_2(nb):
    """register_policy_loss(name)(fn): the decorator, called by hand."""
    return register


def exercise_3(nb):
    """Past the window in A's direction (rho > 1 + eps_high with A > 0, rho < 1 - eps_low with A < 0), or rho > c with A < 0."""
    return silenced


def exercise_4(nb):
    """(log pi - log pi_old) averaged over the unmasked tokens, then sg[log s_i] + log pi - sg[log pi]."""
    return gspo_log_ratio
