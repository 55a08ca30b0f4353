"""Worked solutions of lab 03 (compare GRPO and PPO), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (its `globals()`: the parameters, the runs ...) and
returns the answer: a function or a value. The lab's checks call them when solutions are on (`SOLUTION =
True`, or `MINIRL_LAB_SOLUTIONS=1`); the first line of each docstring is printed next to the answer.
Try the exercise before you read its solution.
"""

import numpy as np
import torch

from minirl.trainer.ppo.core_algos import agg_loss, masked_mean, masked_whiten


def grpo_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True, config=None):
    """GRPO's outcome advantage: (advantages, returns), both [B, R]."""
    scores = token_level_rewards.sum(dim=-1)
    adv = torch.zeros_like(scores)
    index = np.asarray(index)
    for uid in np.unique(index):
        rows = torch.as_tensor(index == uid)
        group = scores[rows]
        mean, std = (group.mean(), group.std()) if len(group) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        adv[rows] = (group - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else group - mean
    adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


def exercise_1(nb):
    """Per uid: (R_i - mean) / (unbiased std + eps), a group of one as (R_i - 0) / 1, broadcast over the mask."""
    return grpo_advantage


def gae(token_level_rewards, values, response_mask, gamma, lam):
    """Generalized Advantage Estimation: (advantages whitened over the mask, returns), both [B, R]."""
    mask = response_mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])
    next_adv = torch.zeros_like(values[:, 0])
    advantages = torch.zeros_like(values)
    for t in reversed(range(values.shape[-1])):
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam * next_adv
        m = mask[:, t]  # a masked token passes the next unmasked token's value and advantage through
        next_value = m * values[:, t] + (1 - m) * next_value
        next_adv = m * adv_t + (1 - m) * next_adv
        advantages[:, t] = next_adv
    returns = advantages + values
    return masked_whiten(advantages, response_mask), returns


def exercise_2(nb):
    """Backwards: delta = r + gamma V' - V, A = delta + gamma lambda A'; masked tokens carry V', A'; whiten last."""
    return gae


def dual_clip_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
                   rollout_is_weights=None):
    """PPO's clipped surrogate with dual clip: (loss, metrics)."""
    low = getattr(config, "clip_ratio_low", None) or config.clip_ratio
    high = getattr(config, "clip_ratio_high", None) or config.clip_ratio
    c = config.clip_ratio_c
    log_ratio = torch.clamp(log_prob - old_log_prob, -20.0, 20.0)
    ratio = torch.exp(log_ratio)
    unclipped, clipped = -advantages * ratio, -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    clip_loss = torch.maximum(unclipped, clipped)
    cap = -advantages * c
    negative = advantages < 0
    losses = torch.where(negative, torch.minimum(clip_loss, cap), clip_loss)
    if rollout_is_weights is not None:
        losses = losses * rollout_is_weights
    loss = agg_loss(loss_mat=losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode,
                    **getattr(config, "global_batch_info", {}))
    metrics = {"actor/pg_clipfrac": masked_mean((clipped > unclipped).float(), response_mask).item(),
               "actor/ppo_kl": masked_mean(-log_ratio, response_mask).item(),
               "actor/pg_clipfrac_lower": masked_mean(((clip_loss > cap) & negative).float(), response_mask).item()}
    return loss, metrics


def exercise_3(nb):
    """max(-A rho, -A clip(rho)) per token, then min with -c A where A < 0; agg_loss with the global batch info."""
    return dual_clip_loss


def exercise_4(nb):
    """max(-A rho, -A clip(rho)) = max(10, 1.2) = 10; A < 0 caps it at -c A = 3."""
    return min(max(10.0, 1.2), 3.0)


def exercise_5(nb):
    """need_critic is True only for gae (critic.enable unset), and THIRD is not gae."""
    return nb["THIRD"] == "gae"
