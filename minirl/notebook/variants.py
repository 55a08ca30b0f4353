"""The algorithm variants of chapter 13 and `benchmarks/algorithms.py`: each is a name and verl's overrides.

Every variant starts from the same warm start (`minirl://tiny-qwen2-sft`) on the same task (2-digit
addition) with the same GRPO defaults, and changes only what its overrides say:

- `grpo`: the defaults (GRPO advantages, the vanilla loss, token-mean), the run every other one changes;
- `estimator/<name>`: `algorithm.adv_estimator=<name>` (the 13 others verl registers), vanilla loss;
- `loss/<name>`: `actor_rollout_ref.actor.policy_loss.loss_mode=<name>` (the 11 others), GRPO advantages;
- `dapo/...`: the DAPO recipe (`DAPO_RECIPE`) and each of its pieces alone on top of GRPO;
- `opd/...`: on-policy distillation from the embedded teacher (`minirl://tiny-qwen2-teacher`), verl's
  loss settings (`OPD_VARIANTS`).

`EXTRA` holds what an estimator or loss needs beyond the defaults (the keys verl uses for them), as in
`tests/e2e/test_all_algorithms.py`.
"""

from __future__ import annotations

__all__ = ["DAPO_PIECES", "DAPO_RECIPE", "EXTRA", "OPD_VARIANTS", "all_variants"]

EXTRA: dict[str, list[str]] = {
    "gdpo": ["algorithm.gdpo_reward_keys=[acc]"],
    "optimal_token_baseline": ["actor_rollout_ref.actor.calculate_sum_pi_squared=true"],
    "tir_optimal_token_baseline": ["actor_rollout_ref.actor.calculate_sum_pi_squared=true"],
    "dro": ["actor_rollout_ref.actor.policy_loss.dro_beta=0.1"],
    "bypass_mode": ["algorithm.rollout_correction.bypass_mode=true"],
    "gpg": [],
}
"""Overrides an estimator or loss needs beyond its name (the same ones verl's examples use)."""

_OVERLONG = ["reward.reward_manager.name=dapo", "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
             "+reward.reward_kwargs.overlong_buffer_cfg.len=3", "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
             "+reward.reward_kwargs.overlong_buffer_cfg.log=true", "+reward.reward_kwargs.max_resp_len=12"]

DAPO_PIECES: dict[str, list[str]] = {
    "clip_higher": ["actor_rollout_ref.actor.clip_ratio_low=0.2", "actor_rollout_ref.actor.clip_ratio_high=0.28"],
    "dynamic_sampling": ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"],
    "token_mean": ["actor_rollout_ref.actor.loss_agg_mode=token-mean"],
    "overlong_shaping": _OVERLONG,
}
"""DAPO's four changes to GRPO (Yu et al. 2025, arXiv:2503.14476), each with verl's keys. The response budget
here is 12 tokens and the longest right answer 9 (`#### 198` and the end token), so the overlong buffer is
the last 3: a response of 10-12 tokens loses up to `penalty_factor`."""

DAPO_RECIPE: list[str] = [o for piece in DAPO_PIECES.values() for o in piece]
"""All four pieces together: the DAPO-style recipe."""

OPD_VARIANTS: dict[str, list[str]] = {
    # verl's YAML defaults: k3 back-propagated next to the task reward's GRPO loss
    "k3+task": ["distillation.enabled=true"],
    # Thinking Machines' on-policy distillation: -k1 as a per-token reward, no task reward
    "pg_k1": ["distillation.enabled=true", "distillation.distillation_loss.loss_mode=k1",
              "distillation.distillation_loss.use_policy_gradient=true",
              "distillation.distillation_loss.use_task_rewards=false"],
    # GKD: forward KL over the teacher's top-k, back-propagated, no task reward
    "topk_forward_kl": ["distillation.enabled=true", "distillation.distillation_loss.loss_mode=forward_kl_topk",
                        "distillation.distillation_loss.topk=16", "distillation.distillation_loss.use_task_rewards=false"],
}
"""On-policy distillation settings (verl's `distillation.*` keys); the teacher is the embedded one."""


def all_variants() -> dict[str, list[str]]:
    """`{name: overrides}` for every variant, in the order the benchmark runs them."""
    from minirl.trainer.ppo import core_algos

    out: dict[str, list[str]] = {"grpo": []}  # grpo + vanilla + token-mean: the baseline every other run changes
    for name in sorted(core_algos.ADV_ESTIMATOR_REGISTRY):
        if name != "grpo":
            out[f"estimator/{name}"] = [f"algorithm.adv_estimator={name}", *EXTRA.get(name, [])]
    for name in sorted(core_algos.POLICY_LOSS_REGISTRY):
        if name != "vanilla":
            out[f"loss/{name}"] = [f"actor_rollout_ref.actor.policy_loss.loss_mode={name}", *EXTRA.get(name, [])]
    out["dapo/seq-mean-token-mean"] = ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"]  # GRPO paper's
    for piece, overrides in DAPO_PIECES.items():
        if piece != "token_mean":  # token-mean is already the default aggregation: that run is `grpo`
            out[f"dapo/{piece}"] = list(overrides)
    out["dapo/recipe"] = list(DAPO_RECIPE)
    for name, overrides in OPD_VARIANTS.items():
        out[f"opd/{name}"] = list(overrides)
    return out
