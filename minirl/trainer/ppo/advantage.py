"""From scores to advantages: KL-in-reward, then the configured estimator.

verl: `apply_kl_penalty` (`verl/trainer/ppo/ray_trainer.py:78`) and `compute_advantage`
(`verl/trainer/ppo/ray_trainer.py:187`), called from `PPOTrainer._compute_advantage`
(`verl/trainer/ppo/v1/trainer_base.py:1638`).
"""

from __future__ import annotations

import numpy as np
import torch

from minirl.protocol import DataProto
from minirl.trainer import core_algos


def apply_kl_penalty(data: DataProto, kl_ctrl, kl_penalty: str = "kl"):
    """$r_t = s_t - \\beta \\cdot \\mathrm{KL}_t(\\pi_{old} \\| \\pi_{ref})$ on every valid response token."""
    mask = data.batch["response_mask"]
    kld = core_algos.kl_penalty(data.batch["old_log_probs"], data.batch["ref_log_prob"], kl_penalty=kl_penalty) * mask
    beta = kl_ctrl.value
    data.batch["token_level_rewards"] = data.batch["token_level_scores"] - beta * kld
    current_kl = float(((kld.sum(-1)) / mask.sum(-1).clamp(min=1)).mean())
    kl_ctrl.update(current_kl=current_kl, n_steps=len(data))
    return data, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}


def compute_advantage(data: DataProto, adv_estimator: str, gamma: float = 1.0, lam: float = 1.0,
                      norm_adv_by_std_in_grpo: bool = True, config=None) -> DataProto:
    """Write `advantages` and `returns` [B, R] with the registered estimator (verl's dispatch, simplified)."""
    b = data.batch
    if adv_estimator == "gae":
        adv, ret = core_algos.compute_gae_advantage_return(
            token_level_rewards=b["token_level_rewards"], values=b["values"], response_mask=b["response_mask"],
            gamma=gamma, lam=lam)
    elif adv_estimator == "grpo":
        adv, ret = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=b["token_level_rewards"], response_mask=b["response_mask"],
            index=data.non_tensor_batch["uid"], norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)
    else:
        fn = core_algos.get_adv_estimator_fn(adv_estimator)
        kwargs = {"token_level_rewards": b["token_level_rewards"], "response_mask": b["response_mask"],
                  "config": config, "index": data.non_tensor_batch["uid"], "gamma": gamma}
        if "reward_baselines" in b.keys():
            kwargs["reward_baselines"] = b["reward_baselines"]
        import inspect

        params = inspect.signature(fn).parameters
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            kwargs = {k: v for k, v in kwargs.items() if k in params}
        adv, ret = fn(**kwargs)
    data.batch["advantages"] = adv
    data.batch["returns"] = ret
    return data


def group_sizes(uids: np.ndarray) -> dict:
    """How many sequences share each uid (a GRPO group)."""
    values, counts = np.unique(uids.astype(str), return_counts=True)
    return dict(zip(values, counts))


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum() / mask.sum().clamp(min=1))
