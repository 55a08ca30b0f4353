"""From scores to advantages: KL-in-reward, then the configured estimator.

verl: `apply_kl_penalty` (`verl/trainer/ppo/ray_trainer.py:78`) and `compute_advantage`
(`verl/trainer/ppo/ray_trainer.py:187`), called from `PPOTrainer._compute_advantage`
(`verl/trainer/ppo/v1/trainer_base.py:1638`) through `compute_advantage_for_multi_trajectories`
(`verl/trainer/ppo/v1/utils.py:148`), which calls `compute_advantage` unchanged for every estimator
but GRPO, and for GRPO groups only each session's final output (every output, in single-turn runs).

What each estimator reads beyond `token_level_rewards`, `response_mask` and the `uid` groups:
`gae` the critic's `values`; `remax` `reward_baselines` (the score of a greedy decode per prompt);
`gdpo` the reward columns named by `algorithm.gdpo_reward_keys` plus `prompts`/`attention_mask`;
`optimal_token_baseline` / `tir_optimal_token_baseline` `sum_pi_squared` and `old_log_probs` from the
actor's old-log-prob forward (`actor_rollout_ref.actor.calculate_sum_pi_squared=true`).
In verl's V1 trainer at the pin, `_compute_advantage` reads only `uid`, `response_mask`, `rm_scores`,
`rollout_log_probs`, `old_log_probs`, `ref_log_prob` and `values` from the TransferQueue, so those
three extra inputs never reach `compute_advantage` there (gdpo and the OTB estimators fail its
checks, remax misses an argument); minirl's stages pass the whole batch, as verl's legacy trainer does.
"""

from __future__ import annotations

from minirl.protocol import DataProto
from minirl.trainer.ppo import core_algos

OTB_ESTIMATORS = ("optimal_token_baseline", "tir_optimal_token_baseline")
"""Estimators that need `sum_pi_squared` from the actor's forward."""


def apply_kl_penalty(data: DataProto, kl_ctrl, kl_penalty: str = "kl"):
    """$r_t = s_t - \\beta \\cdot \\mathrm{KL}_t(\\pi_{old} \\| \\pi_{ref})$ on every valid response token."""
    mask = data.batch["response_mask"]
    kld = core_algos.kl_penalty(data.batch["old_log_probs"], data.batch["ref_log_prob"], kl_penalty=kl_penalty) * mask
    beta = kl_ctrl.value
    data.batch["token_level_rewards"] = data.batch["token_level_scores"] - beta * kld
    current_kl = float(((kld.sum(-1)) / mask.sum(-1).clamp(min=1)).mean())
    kl_ctrl.update(current_kl=current_kl, n_steps=len(data))
    return data, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}


def _need(data: DataProto, key: str, estimator: str, fix: str) -> None:
    if key not in data.batch:
        raise ValueError(f"algorithm.adv_estimator={estimator} needs `{key}` in the batch, which has "
                         f"{sorted(data.batch.keys())}. Fix: {fix}")


def compute_advantage(data: DataProto, adv_estimator: str, gamma: float = 1.0, lam: float = 1.0,
                      norm_adv_by_std_in_grpo: bool = True, config=None) -> DataProto:
    """Write `advantages` and `returns` `(B, R)` with the registered estimator `adv_estimator`.

    The dispatch of verl's `compute_advantage`: `gae` and `grpo` are called with their own arguments;
    every other estimator gets `token_level_rewards`, `response_mask`, `config` (the `algorithm`
    section), `index` (the uids) and, when the batch has them, `reward_baselines`; gdpo also the
    batch's columns and tensors, the OTB estimators `sum_pi_squared`, `old_log_probs` and
    `rollout_is_weights`. A registered custom estimator must accept these keywords (or `**kwargs`).
    """
    b = data.batch
    name = adv_estimator.value if hasattr(adv_estimator, "value") else str(adv_estimator)
    if name == "gae":
        _need(data, "values", name, "a critic must run (it does when adv_estimator=gae).")
        adv, ret = core_algos.compute_gae_advantage_return(
            token_level_rewards=b["token_level_rewards"], values=b["values"], response_mask=b["response_mask"],
            gamma=gamma, lam=lam)
    elif name == "grpo":
        adv, ret = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=b["token_level_rewards"], response_mask=b["response_mask"],
            index=data.non_tensor_batch["uid"], norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)
    else:
        fn = core_algos.get_adv_estimator_fn(name)
        kwargs = {"token_level_rewards": b["token_level_rewards"], "response_mask": b["response_mask"],
                  "config": config}
        if "uid" in data.non_tensor_batch:
            kwargs["index"] = data.non_tensor_batch["uid"]
        if "reward_baselines" in b:
            kwargs["reward_baselines"] = b["reward_baselines"]
        if name == "remax":
            _need(data, "reward_baselines", name, "the trainer must score one greedy response per prompt "
                  "(verl's legacy trainer does, in RayPPOTrainer.fit); minirl's trainer does not produce it yet.")
        if name == "gdpo":
            kwargs["non_tensor_batch"] = data.non_tensor_batch
            kwargs["batch"] = b
        if name in OTB_ESTIMATORS:
            _need(data, "sum_pi_squared", name, "set actor_rollout_ref.actor.calculate_sum_pi_squared=true "
                  "(the actor's old-log-prob forward then computes it from its logits).")
            kwargs["sum_pi_squared"] = b["sum_pi_squared"]
            kwargs["old_log_probs"] = b["old_log_probs"]
            kwargs["rollout_is_weights"] = b.get("rollout_is_weights", None)
        adv, ret = fn(**kwargs)
    data.batch["advantages"] = adv
    data.batch["returns"] = ret
    return data
