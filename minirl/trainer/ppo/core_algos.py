r"""The formulas of RL for LLMs: advantage estimators, policy losses, loss aggregation, KL and value loss.

Mirrors `verl/trainer/ppo/core_algos.py` at the pinned commit (1dda039b9c63), with the same function
names, argument names, registry keys and return values, so that a call written against verl works
here unchanged (and the other way round): `tests/parity/` runs both on the same inputs. The masked
statistics it needs (`masked_mean`, `masked_whiten`, ...) come from `minirl.utils.torch_functional`
(verl: `verl/utils/torch_functional.py`), its only import from minirl besides the dependency-free
config getter `minirl.utils.config.cfg_get`: every formula can be read, run and tested without a
trainer, a worker or Ray.

Where this sits in a training step: the reward stage writes `token_level_scores`; with
`algorithm.use_kl_in_reward` the trainer turns them into `token_level_rewards` with `kl_penalty` and
a KL controller; an **advantage estimator** (chosen by `algorithm.adv_estimator`) turns rewards into
`advantages` (and `returns`); the actor then minimises a **policy loss** (chosen by
`actor_rollout_ref.actor.policy_loss.loss_mode`) aggregated by `agg_loss`
(`actor_rollout_ref.actor.loss_agg_mode`), and PPO's critic minimises `compute_value_loss`.

Both families are pluggable through registries, as in verl: a new algorithm is one decorated
function (`@register_adv_est("name")` / `@register_policy_loss("name")`) and a config string.

## Notation (the same symbols in every docstring below)

| symbol | meaning | verl name / shape |
|---|---|---|
| $i$, $t$ | a response (row of the batch) and a token position in it | |
| $m_{i,t}\in\{0,1\}$ | 1 on tokens the policy generated, 0 on padding and tool observations | `response_mask` `(bs, T)` |
| $L_i=\sum_t m_{i,t}$ | the response's length (its number of unmasked tokens) | |
| $r_{i,t}$ | reward of token $t$ (an outcome reward sits on the last token) | `token_level_rewards` `(bs, T)` |
| $R_i=\sum_t r_{i,t}$ | the response's score | |
| $g$, $n_g$ | a group: the responses sampled for one prompt (same `uid`), and its size | `index` `(bs,)` |
| $\mu_g$, $\sigma_g$ | mean and unbiased standard deviation of $R$ over group $g$ | |
| $V_{i,t}$ | the critic's value estimate | `values` `(bs, T)` |
| $A_{i,t}$ | advantage | `advantages` `(bs, T)` |
| $\log\pi_\theta$, $\log\pi_{\text{old}}$ | log-prob of the sampled token under the policy being trained / that sampled it | `log_prob`, `old_log_prob` |
| $\rho_{i,t}=e^{\log\pi_\theta-\log\pi_{\text{old}}}$ | importance ratio | |
| $\varepsilon_{\text{low}}$, $\varepsilon_{\text{high}}$, $c$ | PPO clip range and dual-clip bound | `clip_ratio_low`, `clip_ratio_high`, `clip_ratio_c` |
| $\ell_{i,t}$ | a per-token loss before aggregation | `loss_mat` `(bs, T)` |
| $\operatorname{sg}[\cdot]$ | stop-gradient (`.detach()`): the value is used, no gradient flows through it | |
| $p_{i,t}=e^{\log\pi_\theta(y_{i,t})}$, $p^{\text{old}}_{i,t}$ | probability of the sampled token under $\pi_\theta$ / $\pi_{\text{old}}$ | |
| $\lVert\pi_{i,t}\rVert^2=\sum_v\pi_{\text{old}}(v)^2$ | sum of the squared next-token probabilities over the vocabulary | `sum_pi_squared` `(bs, T)` |
| $G_{i,t}=\sum_{t'\ge t}m_{i,t'}r_{i,t'}$ | reward-to-go (undiscounted return from token $t$) | `returns` `(bs, T)` |
| $\pi_{\text{roll}}$, $w_{i,t}$ | the rollout engine's policy, and an importance weight $\pi_\theta/\pi_{\text{roll}}$ | `rollout_log_probs`, `rollout_is_weights` |

Masked means are written $\operatorname{mean}_m(x)=\sum_{i,t} m_{i,t}x_{i,t}\,/\,\sum_{i,t} m_{i,t}$.

## What is left out (verl has it)

Every estimator (14) and policy loss (12) verl registers at the pin is here. Left out:

- The deprecated `compute_policy_loss` (`verl/trainer/ppo/core_algos.py:1210`) and
  `compute_pf_ppo_reweight_data` (`verl/trainer/ppo/core_algos.py:2253`), which resamples a whole
  DataProto (the trainer's business).
- The rollout-correction formulas (importance weights, rejection, off-policy metrics) are in
  `minirl.trainer.ppo.rollout_corr_helper`, as in verl (`verl/trainer/ppo/rollout_corr_helper.py`);
  the `bypass_mode` loss below calls them there, importing the module when it runs, as verl does.

Simplifications: the policy losses read their settings from `config` by attribute or key, so
verl's `ActorConfig`, minirl's config dataclasses, an OmegaConf `DictConfig`, a `SimpleNamespace`
or a dict all work (verl asserts an `ActorConfig` for gspo, sapo and cispo); a key that is missing
or None takes the value verl falls back to, and each docstring lists the keys it reads. Bad inputs
raise `ValueError` with a message saying what to change, where verl uses `assert`; unknown registry
names list the registered ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

import numpy as np
import torch

from minirl.utils.config import cfg_get
from minirl.utils.torch_functional import (
    clip_by_value,
    entropy_from_logits,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)

__all__ = [
    "ADV_ESTIMATOR_REGISTRY",
    "POLICY_LOSS_REGISTRY",
    "AdaptiveKLController",
    "AdvantageEstimator",
    "FixedKLController",
    "agg_loss",
    "clip_by_value",
    "compute_entropy_loss",
    "compute_gae_advantage_return",
    "compute_gdpo_outcome_advantage",
    "compute_gpg_outcome_advantage",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_multi_turn_optimal_token_baseline_advantage",
    "compute_opo_outcome_advantage",
    "compute_optimal_token_baseline_advantage",
    "compute_policy_loss_bypass_mode",
    "compute_policy_loss_cispo",
    "compute_policy_loss_clip_cov",
    "compute_policy_loss_dppo_kl",
    "compute_policy_loss_dppo_tv",
    "compute_policy_loss_dro",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_gpg",
    "compute_policy_loss_gspo",
    "compute_policy_loss_kl_cov",
    "compute_policy_loss_reinforce",
    "compute_policy_loss_sapo",
    "compute_policy_loss_vanilla",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_rewards",
    "compute_rloo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "compute_value_loss",
    "entropy_from_logits",
    "get_adv_estimator_fn",
    "get_kl_controller",
    "get_policy_loss_fn",
    "kl_penalty",
    "kl_penalty_forward",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "register_adv_est",
    "register_policy_loss",
]


def _require_config(config: Any, fn_name: str, keys: str) -> None:
    if config is None:
        raise ValueError(
            f"{fn_name} needs `config`: the actor config (verl: ActorConfig), or any object with attribute "
            f"access holding {keys}. Fix: pass config=cfg.actor_rollout_ref.actor, or e.g. "
            f"types.SimpleNamespace(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2)."
        )


# ---------------------------------------------------------------------------------------------------------
# Registries: a config string -> a function.
# ---------------------------------------------------------------------------------------------------------

PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, Any]]]
"""`(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights)`
-> `(loss, metrics)`."""

POLICY_LOSS_REGISTRY: dict[str, PolicyLossFn] = {}
"""`actor.policy_loss.loss_mode` -> policy-loss function."""


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: make a policy loss selectable as `actor_rollout_ref.actor.policy_loss.loss_mode=name`.

    Registering a name again replaces the earlier function, as in verl. Mirrors `register_policy_loss`
    (`verl/trainer/ppo/core_algos.py:53`).
    """

    def decorator(func: PolicyLossFn) -> PolicyLossFn:
        POLICY_LOSS_REGISTRY[name] = func
        return func

    return decorator


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    """The policy loss registered as `name`.

    Mirrors `get_policy_loss_fn` (`verl/trainer/ppo/core_algos.py:70`).
    """
    if name not in POLICY_LOSS_REGISTRY:
        raise ValueError(
            f"Unsupported loss mode: {name!r}. Registered policy losses: {sorted(POLICY_LOSS_REGISTRY)}. "
            f"Fix: set actor_rollout_ref.actor.policy_loss.loss_mode to one of them, or register a function "
            f"with @register_policy_loss({name!r})."
        )
    return POLICY_LOSS_REGISTRY[name]


class AdvantageEstimator(str, Enum):
    """The built-in values of `algorithm.adv_estimator` (a plain string works too).

    Mirrors `AdvantageEstimator` (`verl/trainer/ppo/core_algos.py:88`): the same 14 members.
    """

    GAE = "gae"
    GRPO = "grpo"
    REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    REMAX = "remax"
    RLOO = "rloo"
    OPO = "opo"
    GRPO_PASSK = "grpo_passk"
    GPG = "gpg"
    RLOO_VECTORIZED = "rloo_vectorized"
    GRPO_VECTORIZED = "grpo_vectorized"
    OPTIMAL_TOKEN_BASELINE = "optimal_token_baseline"
    TIR_OPTIMAL_TOKEN_BASELINE = "tir_optimal_token_baseline"
    GDPO = "gdpo"


ADV_ESTIMATOR_REGISTRY: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {}
"""`algorithm.adv_estimator` -> estimator function `(...) -> (advantages, returns)`."""


def _name(name_or_enum: str | Enum) -> str:
    return name_or_enum.value if isinstance(name_or_enum, Enum) else name_or_enum


def register_adv_est(name_or_enum: str | AdvantageEstimator) -> Callable:
    """Decorator: make an estimator selectable as `algorithm.adv_estimator=name`.

    Registering a second, different function under a taken name is an error (as in verl). Mirrors
    `register_adv_est` (`verl/trainer/ppo/core_algos.py:116`).
    """

    def decorator(fn):
        name = _name(name_or_enum)
        if ADV_ESTIMATOR_REGISTRY.get(name, fn) is not fn:
            raise ValueError(
                f"Advantage estimator {name!r} is already registered "
                f"({ADV_ESTIMATOR_REGISTRY[name].__name__}); cannot register {fn.__name__} under the same "
                "name. Fix: pick another name."
            )
        ADV_ESTIMATOR_REGISTRY[name] = fn
        return fn

    return decorator


def get_adv_estimator_fn(name_or_enum: str | AdvantageEstimator) -> Callable:
    """The estimator registered as `name_or_enum` (a string or an `AdvantageEstimator`).

    Mirrors `get_adv_estimator_fn` (`verl/trainer/ppo/core_algos.py:137`).
    """
    name = _name(name_or_enum)
    if name not in ADV_ESTIMATOR_REGISTRY:
        raise ValueError(
            f"Unknown advantage estimator: {name!r}. "
            f"Registered estimators: {sorted(ADV_ESTIMATOR_REGISTRY)}. "
            f"Fix: set algorithm.adv_estimator to one of them, or register a function with "
            f"@register_adv_est({name!r})."
        )
    return ADV_ESTIMATOR_REGISTRY[name]


# ---------------------------------------------------------------------------------------------------------
# KL in the reward (algorithm.use_kl_in_reward): coefficient controllers.
# ---------------------------------------------------------------------------------------------------------


class AdaptiveKLController:
    r"""Adapts the KL coefficient $\beta$ towards a target KL (Ziegler et al. 2019, arXiv:1909.08593).

    After each step with measured KL $\hat{k}$ over $n$ samples:

    $$e=\operatorname{clip}\Big(\frac{\hat{k}}{k_{\text{target}}}-1,\,-0.2,\,0.2\Big),\qquad
    \beta\leftarrow\beta\,\Big(1+e\,\frac{n}{\text{horizon}}\Big)$$

    Too much KL raises $\beta$ (a stronger pull towards the reference), too little lowers it.
    Mirrors `AdaptiveKLController` (`verl/trainer/ppo/core_algos.py:153`).
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        self.value = init_kl_coef
        self.target = target_kl
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move `self.value` ($\\beta$) after a step that measured `current_kl` over `n_steps` samples."""
        error = np.clip(current_kl / self.target - 1, -0.2, 0.2)
        self.value *= 1 + error * n_steps / self.horizon


class FixedKLController:
    """A constant KL coefficient $\\beta$ (`update` does nothing).

    Mirrors `FixedKLController` (`verl/trainer/ppo/core_algos.py:177`).
    """

    def __init__(self, kl_coef: float):
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op: the coefficient stays `kl_coef`."""


def get_kl_controller(kl_ctrl: Any) -> FixedKLController | AdaptiveKLController:
    """Build the controller that `algorithm.kl_ctrl` describes (reads `type`, `kl_coef`, `target_kl`,
    `horizon`).

    Mirrors `get_kl_controller` (`verl/trainer/ppo/core_algos.py:193`).
    """
    kind = cfg_get(kl_ctrl, "type")
    if kind == "fixed":
        return FixedKLController(kl_coef=cfg_get(kl_ctrl, "kl_coef"))
    if kind == "adaptive":
        horizon = cfg_get(kl_ctrl, "horizon")
        if not horizon or horizon <= 0:
            raise ValueError(
                f"algorithm.kl_ctrl.horizon must be > 0 for the adaptive controller, got {horizon}."
            )
        return AdaptiveKLController(cfg_get(kl_ctrl, "kl_coef"), cfg_get(kl_ctrl, "target_kl"), horizon)
    raise ValueError(f"algorithm.kl_ctrl.type={kind!r} is not supported. Fix: use 'fixed' or 'adaptive'.")


def compute_rewards(token_level_scores, old_log_prob, ref_log_prob, kl_ratio):
    r"""Scores minus a $k_1$ KL penalty: $r_{i,t}=s_{i,t}-\beta(\log\pi_{\text{old}}-\log\pi_{\text{ref}})$.

    `kl_ratio` is $\beta$. Mirrors `compute_rewards` (`verl/trainer/ppo/core_algos.py:1124`); the
    trainer's `apply_kl_penalty` (`verl/trainer/ppo/ray_trainer.py:78`) uses `kl_penalty` instead,
    which also offers the other estimators.
    """
    return token_level_scores - (old_log_prob - ref_log_prob) * kl_ratio


# ---------------------------------------------------------------------------------------------------------
# Advantage estimators. Each returns (advantages, returns), both (bs, T).
# ---------------------------------------------------------------------------------------------------------


def _groups(index: Any, bsz: int, device: torch.device | None = None) -> list[torch.Tensor]:
    """Row indices of each group (same `uid`), groups in order of first appearance."""
    if len(index) != bsz:
        raise ValueError(
            f"index (the uid of each response) has {len(index)} entries but the batch has {bsz} responses. "
            "Fix: pass data.non_tensor_batch['uid'] of the same batch."
        )
    rows: dict[Any, list[int]] = {}
    for i, uid in enumerate(index):
        rows.setdefault(uid.item() if isinstance(uid, torch.Tensor) else uid, []).append(i)
    return [torch.tensor(r, dtype=torch.long, device=device) for r in rows.values()]


def _group_ids(index: Any, bsz: int, device: torch.device | None = None) -> torch.Tensor:
    """Each row's group as a number 0..G-1 (the vectorised estimators scatter by it).

    verl: `as_torch_index` (`verl/utils/groupwise.py:91`) for grpo_vectorized, `np.unique` for
    rloo_vectorized; only which rows share a number matters, not the numbering.
    """
    if len(index) != bsz:
        raise ValueError(
            f"index (the uid of each response) has {len(index)} entries but the batch has {bsz} responses. "
            "Fix: pass data.non_tensor_batch['uid'] of the same batch."
        )
    labels = index.cpu().numpy() if isinstance(index, torch.Tensor) else np.asarray(index, dtype=object)
    try:
        inverse = np.unique(labels, return_inverse=True)[1]
    except TypeError:  # labels of mixed types do not sort: group by their text
        inverse = np.unique(labels.astype(str), return_inverse=True)[1]
    return torch.as_tensor(inverse.reshape(-1), dtype=torch.long, device=device)


def _group_sums(values: torch.Tensor, gid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(count, sum)` of `values` per group, each of shape `(G,)`."""
    n_groups = int(gid.max().item()) + 1 if gid.numel() else 0
    count = values.new_zeros(n_groups).index_add_(0, gid, torch.ones_like(values))
    total = values.new_zeros(n_groups).index_add_(0, gid, values)
    return count, total


def _reward_to_go(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    r"""$G_{i,t}=\sum_{t'\ge t}m_{i,t'}r_{i,t'}$: the masked rewards summed from each token to the end."""
    return (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])


@register_adv_est(AdvantageEstimator.GAE)
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: torch.Tensor,
    lam: torch.Tensor,
):
    r"""Generalized Advantage Estimation (Schulman et al. 2015), PPO's estimator; needs a critic.

    Runs backwards over the response. At an unmasked token:

    $$\delta_t = r_t+\gamma V_{t+1}-V_t,\qquad A_t=\delta_t+\gamma\lambda A_{t+1}$$

    where $V_{t+1}$ and $A_{t+1}$ are those of the next **unmasked** token (0 after the last one):
    a masked token (a tool observation inside a multi-turn response) is skipped, it carries the next
    value and advantage through unchanged. Then

    $$\text{returns}_t=A_t+V_t,\qquad A\leftarrow\operatorname{whiten}_m(A)$$

    i.e. the returns (the critic's regression target) use the raw advantages, and the advantages
    are whitened over the mask afterwards (masked positions are whitened too, not zeroed).
    Mirrors `compute_gae_advantage_return` (`verl/trainer/ppo/core_algos.py:216`).
    """
    with torch.no_grad():
        mask = response_mask.to(values.dtype)
        next_value = torch.zeros_like(values[:, 0])
        next_adv = torch.zeros_like(values[:, 0])
        advantages = torch.zeros_like(values)
        for t in reversed(range(values.shape[-1])):
            # $\delta_t$ and $A_t$ as if token t were unmasked
            delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
            adv_t = delta + gamma * lam * next_adv
            # a masked token keeps the next token's value and advantage
            m = mask[:, t]
            next_value = values[:, t] * m + (1 - m) * next_value
            next_adv = adv_t * m + (1 - m) * next_adv
            advantages[:, t] = next_adv
        returns = advantages + values
        advantages = masked_whiten(advantages, response_mask)
    return advantages, returns


@register_adv_est(AdvantageEstimator.GRPO)
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""GRPO (Shao et al. 2024): each response's score compared with its group's, no critic.

    $$A_{i,t}=\frac{R_i-\mu_{g(i)}}{\sigma_{g(i)}+\epsilon}\,m_{i,t}
    \qquad\text{or, with } \texttt{norm\_adv\_by\_std\_in\_grpo=False}\text{ (Dr.GRPO)},\qquad
    A_{i,t}=(R_i-\mu_{g(i)})\,m_{i,t}$$

    $\sigma_g$ is the unbiased standard deviation. A group of one gets $\mu=0$, $\sigma=1$ (so its
    advantage is its raw score); a group whose scores are all equal gets advantage 0. The same
    scalar is broadcast over every token of the response. `config` is unused. `returns` equals
    `advantages`. Mirrors `compute_grpo_outcome_advantage` (`verl/trainer/ppo/core_algos.py:268`).
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        adv = torch.empty_like(scores)
        for rows in _groups(index, scores.shape[0], scores.device):
            group = scores[rows]
            mean, std = (group.mean(), group.std()) if len(rows) > 1 else (0.0, 1.0)
            adv[rows] = (group - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else group - mean
        adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_est(AdvantageEstimator.GRPO_VECTORIZED)
def compute_grpo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""GRPO's advantage computed with scatter ops instead of a Python loop over groups.

    The same formula as `compute_grpo_outcome_advantage`,

    $$A_{i,t}=\frac{R_i-\mu_{g(i)}}{\sigma_{g(i)}+\epsilon}\,m_{i,t}\qquad(\text{or }(R_i-\mu_{g(i)})\,m_{i,t}),$$

    with the group sums gathered by `index_add_` in one pass, so its cost does not grow with the
    number of groups in Python. A group of one gets $\mu=0$, $\sigma=1$. The numbers equal `grpo`'s up
    to float rounding (the sums are taken in another order). `config` is unused; `returns` equals
    `advantages`. Mirrors `compute_grpo_vectorized_outcome_advantage`
    (`verl/trainer/ppo/core_algos.py:335`), whose group statistics come from `group_mean_std`
    (`verl/utils/groupwise.py:164`).
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        gid = _group_ids(index, scores.shape[0], scores.device)
        count, total = _group_sums(scores, gid)
        mean = total / count.clamp(min=1.0)
        spread = scores.new_zeros(count.shape).index_add_(0, gid, (scores - mean[gid]) ** 2)
        std = (spread / (count - 1.0).clamp(min=1.0)).clamp(min=0.0).sqrt()
        single = count <= 1.0  # a group of one: mean 0, std 1, as in the loop version
        mean, std = mean.masked_fill(single, 0.0), std.masked_fill(single, 1.0)
        centred = scores - mean[gid]
        adv = centred / (std[gid] + epsilon) if norm_adv_by_std_in_grpo else centred
        adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_est(AdvantageEstimator.GDPO)
def compute_gdpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any | None = None,
    non_tensor_batch: dict | None = None,
    batch: Any | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""GDPO (arXiv:2601.05242): normalise each reward component within its group, then combine.

    GRPO sums the reward components (format, accuracy, ...) into one score before comparing a
    response with its group, so a component with a large spread drowns the others. GDPO runs GRPO on
    each component $k$ separately and adds the results with weights $w_k$:

    $$A^{(k)}_{i,t}=\frac{R^{(k)}_i-\mu^{(k)}_{g(i)}}{\sigma^{(k)}_{g(i)}+\epsilon}\,m_{i,t},\qquad
    A=\operatorname{whiten}_m\Big(\sum_k w_k A^{(k)}\Big)\cdot m$$

    (without the division by $\sigma^{(k)}+\epsilon$ when `norm_adv_by_std_in_grpo` is off).

    The components are the columns `config.gdpo_reward_keys` of `non_tensor_batch` (one number per
    response: what `compute_score` returned in its dict), each placed on the response's last token
    (`attention_mask` of `batch` past `prompts`' width, minus one); `config.gdpo_reward_weights`
    ($w_k$, default all 1) must have one weight per key. Without `config`, `non_tensor_batch` and
    `batch` the single component is `token_level_rewards`, and GDPO is GRPO followed by a whitening
    over the batch. `returns` equals `advantages`.
    Mirrors `compute_gdpo_outcome_advantage` (`verl/trainer/ppo/core_algos.py:362`).

    In verl's V1 trainer at the pin, `_compute_advantage` (`verl/trainer/ppo/v1/trainer_base.py:1638`)
    reads only `uid`, `response_mask`, `rm_scores` and the log-prob and value fields from the
    TransferQueue, so neither the reward columns nor `prompts`/`attention_mask` reach this function
    and its key check fails; the legacy trainer's `compute_advantage`
    (`verl/trainer/ppo/ray_trainer.py:187`) hands it the whole batch, and so does minirl's.
    """
    components, weights = [token_level_rewards], None
    if config is not None and non_tensor_batch is not None and batch is not None:
        components = _gdpo_components(response_mask, config, non_tensor_batch, batch)
        weights = cfg_get(config, "gdpo_reward_weights")
        if weights is not None and len(weights) != len(components):
            raise ValueError(
                f"algorithm.gdpo_reward_weights has {len(weights)} weights for {len(components)} "
                f"algorithm.gdpo_reward_keys. Fix: give one weight per key, or null for equal weights."
            )
    weights = torch.as_tensor(
        list(weights) if weights is not None else [1.0] * len(components),
        dtype=torch.float32,
        device=token_level_rewards.device,
    )
    combined = None
    for w, component in zip(weights, components):
        adv_k, _ = compute_grpo_outcome_advantage(
            token_level_rewards=component,
            response_mask=response_mask,
            index=index,
            epsilon=epsilon,
            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
        )
        combined = w * adv_k if combined is None else combined + w * adv_k
    advantages = masked_whiten(combined, response_mask) * response_mask
    return advantages, advantages


def _gdpo_components(response_mask, config, non_tensor_batch, batch) -> list[torch.Tensor]:
    """One `(bs, T)` tensor per `gdpo_reward_keys` column, its value on each response's last token."""
    keys = cfg_get(config, "gdpo_reward_keys")
    if not keys:
        raise ValueError(
            "adv_estimator=gdpo needs algorithm.gdpo_reward_keys: the names of the reward components your "
            "compute_score returns in its dict. Fix: e.g. algorithm.gdpo_reward_keys=[format_reward,accuracy_reward]."
        )
    prompt_width = batch["prompts"].shape[1]
    last = batch["attention_mask"][:, prompt_width:].sum(dim=1).long() - 1  # -1 (empty response): last column
    rows = torch.arange(response_mask.shape[0], device=response_mask.device)
    components = []
    for key in keys:
        if key not in non_tensor_batch:
            raise ValueError(
                f"algorithm.gdpo_reward_keys names {key!r}, which is not a column of the batch (columns: "
                f"{sorted(non_tensor_batch)}). Fix: return {key!r} in the dict of compute_score, or change the key."
            )
        try:
            values = np.asarray(non_tensor_batch[key], dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"gdpo reward column {key!r} must hold one number per response; got {type(e).__name__}: {e}. "
                "Fix: make compute_score return a number under that key for every response."
            ) from e
        component = torch.zeros_like(response_mask, dtype=torch.float32)
        component[rows, last] = torch.as_tensor(values, device=response_mask.device)
        components.append(component)
    return components


@register_adv_est(AdvantageEstimator.GRPO_PASSK)
def compute_grpo_passk_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Pass@k training (arXiv:2503.19595): only the best response of each group is rewarded.

    With $R_{(1)}\ge R_{(2)}$ the two highest scores of group $g$ and $i^{\star}$ the row holding
    $R_{(1)}$ (the first such row under `torch.topk`'s tie-breaking):

    $$A_{i^{\star},t}=\frac{R_{(1)}-R_{(2)}}{\sigma_g+\epsilon}\,m_{i^{\star},t},\qquad A_{i,t}=0 \text{ for } i\ne i^{\star}$$

    (no division by $\sigma_g+\epsilon$ when `norm_adv_by_std_in_grpo` is off). As in verl, that flag
    is read from `config.norm_adv_by_std_in_grpo` (default True), **not** from the argument of the
    same name, so `config` (the `algorithm` config) is required; every group needs $n_g\ge 2$.
    Mirrors `compute_grpo_passk_outcome_advantage` (`verl/trainer/ppo/core_algos.py:472`).
    """
    if config is None:
        raise ValueError(
            "compute_grpo_passk_outcome_advantage needs config (the algorithm config): it reads "
            "config.norm_adv_by_std_in_grpo, as verl does. Fix: pass config=cfg.algorithm."
        )
    norm_by_std = cfg_get(config, "norm_adv_by_std_in_grpo", True)
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        adv = torch.zeros_like(scores)
        for rows in _groups(index, scores.shape[0], scores.device):
            if len(rows) < 2:
                raise ValueError(
                    f"grpo_passk needs at least 2 responses per prompt, got a group of {len(rows)} "
                    f"(rows {rows.tolist()}). Fix: set actor_rollout_ref.rollout.n >= 2."
                )
            group = scores[rows]
            top, top_idx = torch.topk(group, 2)
            gap = top[0] - top[1]
            adv[rows[top_idx[0]]] = gap / (group.std() + epsilon) if norm_by_std else gap
        adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS_BASELINE)
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: torch.Tensor,
    epsilon: float = 1e-6,
    config: Any | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""REINFORCE++ with a group baseline (arXiv:2501.03262): group-centred, then whitened over the batch.

    $$\tilde A_{i,t}=(R_i-\mu_{g(i)})\,m_{i,t},\qquad A=\operatorname{whiten}_m(\tilde A)\cdot m$$

    A group of one has $\mu=0$. Unlike GRPO the scale comes from the whole batch's spread, not each
    group's. `epsilon` and `config` are unused; `returns` equals `advantages`.
    Mirrors `compute_reinforce_plus_plus_baseline_outcome_advantage` (`verl/trainer/ppo/core_algos.py:536`).
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        centred = scores.clone()
        for rows in _groups(index, scores.shape[0], scores.device):
            if len(rows) > 1:
                centred[rows] = scores[rows] - scores[rows].mean()
        adv = centred.unsqueeze(-1).expand_as(token_level_rewards) * response_mask
        adv = masked_whiten(adv, response_mask) * response_mask
    return adv, adv


@register_adv_est(AdvantageEstimator.RLOO)
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config: Any | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""RLOO (Ahmadian et al. 2024, arXiv:2402.14740): the baseline is the mean of the *other* responses.

    $$A_{i,t}=\Big(R_i-\frac{1}{n_g-1}\sum_{j\in g,\,j\ne i}R_j\Big)m_{i,t}
    =\frac{n_g}{n_g-1}\big(R_i-\mu_g\big)\,m_{i,t}$$

    A group of one has no other response: its advantage is its raw score $R_i$ (verl's `rloo`; its
    `rloo_vectorized` gives 0 instead). `epsilon` and `config` are unused; `returns` equals
    `advantages`. Mirrors `compute_rloo_outcome_advantage` (`verl/trainer/ppo/core_algos.py:588`).
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        adv = scores.clone()
        for rows in _groups(index, scores.shape[0], scores.device):
            n = len(rows)
            if n > 1:
                # written as verl orders it, n R_i/(n-1) - n mu/(n-1), so float rounding matches too
                adv[rows] = scores[rows] * n / (n - 1) - scores[rows].mean() * n / (n - 1)
        adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_est(AdvantageEstimator.OPO)
def compute_opo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config: Any | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""OPO (arXiv:2505.23585): the baseline is the group's length-weighted mean score.

    $$b_g=\frac{\sum_{j\in g}L_j R_j}{\sum_{j\in g}L_j},\qquad A_{i,t}=(R_i-b_{g(i)})\,m_{i,t}$$

    with $L_j$ the number of unmasked tokens of response $j$. A group of one has $b=0$. `epsilon`
    and `config` are unused; `returns` equals `advantages`.
    Mirrors `compute_opo_outcome_advantage` (`verl/trainer/ppo/core_algos.py:640`).
    """
    with torch.no_grad():
        lengths = response_mask.sum(dim=-1)
        scores = token_level_rewards.sum(dim=-1)
        adv = scores.clone()
        for rows in _groups(index, scores.shape[0], scores.device):
            if len(rows) > 1:
                baseline = (lengths[rows] * scores[rows]).sum() / lengths[rows].sum()
                adv[rows] = scores[rows] - baseline
        adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS)
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config: Any | None = None, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""REINFORCE++ (arXiv:2501.03262): discounted return-to-go, whitened over the batch.

    Backwards over the response, skipping masked tokens (they carry the running return through and
    get return 0):

    $$G_{i,t}=\big(r_{i,t}+\gamma\,G_{i,t'}\big)\,m_{i,t}\quad(t' \text{ the next unmasked token}),\qquad
    A=\operatorname{whiten}_m(G)\cdot m$$

    Reads $\gamma$ from `config.gamma` (the `algorithm` config, required). Returns
    `(advantages, returns)` with `returns` $=G$ (not whitened).
    Mirrors `compute_reinforce_plus_plus_outcome_advantage` (`verl/trainer/ppo/core_algos.py:694`).
    """
    gamma = cfg_get(config, "gamma")
    if gamma is None:
        raise ValueError(
            "compute_reinforce_plus_plus_outcome_advantage needs config.gamma (the discount). "
            "Fix: pass config=cfg.algorithm (algorithm.gamma, 1.0 by default)."
        )
    with torch.no_grad():
        mask = response_mask.to(token_level_rewards.dtype)
        returns = torch.zeros_like(token_level_rewards)
        running = torch.zeros_like(token_level_rewards[:, 0])
        for t in reversed(range(token_level_rewards.shape[1])):
            candidate = token_level_rewards[:, t] + gamma * running
            returns[:, t] = candidate * mask[:, t]
            running = candidate * mask[:, t] + running * (1 - mask[:, t])
        advantages = masked_whiten(returns, response_mask) * response_mask
    return advantages, returns


@register_adv_est(AdvantageEstimator.REMAX)
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""ReMax (Li et al. 2023, arXiv:2310.10505): the baseline is the score of the greedy response.

    $$G_{i,t}=\sum_{t'\ge t} m_{i,t'}\,r_{i,t'},\qquad A_{i,t}=G_{i,t}-b_i\,m_{i,t}$$

    with $b_i$ = `reward_baselines[i]`, the reward of a greedy decode of the same prompt (verl's legacy
    trainer samples it next to the $n$ responses in `RayPPOTrainer.fit`, `verl/trainer/ppo/ray_trainer.py:1405`; its V1 trainer
    at the pin does not, so remax cannot run there). Returns `(advantages, returns=G)`. `config` is unused.
    Mirrors `compute_remax_outcome_advantage` (`verl/trainer/ppo/core_algos.py:735`).
    """
    with torch.no_grad():
        returns = _reward_to_go(token_level_rewards, response_mask)
        advantages = returns - reward_baselines.unsqueeze(-1) * response_mask
    return advantages, returns


@register_adv_est(AdvantageEstimator.GPG)
def compute_gpg_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    f_norm: float = 1.0,
    alpha: float = 1.0,
    config=None,
    **kwargs,
):
    r"""GPG (arXiv:2504.02546): group-centred scores, scaled up by the share of non-zero scores.

    $$\alpha=\frac{B}{\max(1,\ \#\{i: R_i\ne 0\})},\qquad A_{i,t}=\frac{\alpha\,(R_i-\mu_{g(i)})}{f_\text{norm}}\,m_{i,t}$$

    with $B$ the batch size; a group of one has $\mu=0$. The `alpha` argument is overwritten by
    that formula (as in verl); `epsilon` and `config` are unused; `returns` equals `advantages`.
    Mirrors `compute_gpg_outcome_advantage` (`verl/trainer/ppo/core_algos.py:771`).
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        alpha = scores.shape[0] / torch.count_nonzero(scores).clamp(min=1)
        centred = scores.clone()
        for rows in _groups(index, scores.shape[0], scores.device):
            if len(rows) > 1:
                centred[rows] = scores[rows] - scores[rows].mean()
        adv = (alpha * centred / f_norm).unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_est(AdvantageEstimator.RLOO_VECTORIZED)
def compute_rloo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config: Any | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""RLOO's leave-one-out advantage with group sums gathered in one pass (no loop over groups).

    With $S_g=\sum_{j\in g}R_j$:

    $$A_{i,t}=\frac{n_g R_i-S_{g(i)}}{n_g-1}\,\mathbb{1}[n_g>1]\,m_{i,t}$$

    which is `rloo`'s formula, except for **a group of one: advantage 0 here**, where `rloo` keeps
    the raw score $R_i$ (a lone response has no other response to compare with). `epsilon` and
    `config` are unused; `returns` equals `advantages`.
    Mirrors `compute_rloo_vectorized_outcome_advantage` (`verl/trainer/ppo/core_algos.py:834`).
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        gid = _group_ids(index, scores.shape[0], scores.device)
        count, total = _group_sums(scores, gid)
        n = count[gid]
        adv = (n * scores - total[gid]) / (n - 1).clamp(min=1) * (n > 1)
        adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


def _path_variance(old_log_probs, sum_pi_squared, response_mask, rollout_is_weights) -> torch.Tensor:
    r"""$W_{i,t}=\sum_{t'\le t}m_{i,t'}\,\bar w_{i,t'}^2\,\big(1-2p^{\text{old}}_{i,t'}+\lVert\pi_{i,t'}\rVert^2\big)$.

    $1-2p+\lVert\pi\rVert^2=\lVert e_y-\pi\rVert^2$ is the squared norm of the gradient of
    $\log\pi(y)$ with respect to the logits (one-hot of the sampled token minus the distribution):
    how much one token can move the policy. $\bar w$ = `rollout_is_weights` (1 when None).
    """
    per_token = 1 - 2 * torch.exp(old_log_probs) + sum_pi_squared
    if rollout_is_weights is not None:
        per_token = per_token * rollout_is_weights**2
    return (per_token * response_mask).cumsum(dim=-1)


def _zero_tail(baselines: torch.Tensor, rows: torch.Tensor, lengths: torch.Tensor) -> None:
    """If one response of the group is strictly the longest, zero its baseline past the runner-up's length.

    Beyond the second-longest response, the longest is alone: its "group average" would be its own
    return, which would cancel its advantage there.
    """
    ordered = torch.sort(lengths).values
    longest, runner_up = int(ordered[-1].item()), int(ordered[-2].item())
    at_longest = (lengths == longest).nonzero(as_tuple=True)[0]
    if at_longest.numel() == 1 and longest > runner_up:
        baselines[rows[at_longest[0]], runner_up:] = 0.0


@register_adv_est(AdvantageEstimator.OPTIMAL_TOKEN_BASELINE)
def compute_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Optimal token baseline (OTB): a baseline per token position, weighted by how much each path can move the policy.

    A REINFORCE gradient $\sum_t G_{i,t}\nabla\log\pi(y_{i,t})$ has the least variance when the
    baseline at step $t$ weights each response by the gradient energy of its path so far. With
    $W_{i,t}$ that cumulative energy (see `_path_variance`: from `old_log_probs` and
    `sum_pi_squared`, $\lVert\pi\rVert^2$ computed by the actor from its logits) and $G$ the
    reward-to-go, for each group $g$ and **absolute** position $t$:

    $$B_{g,t}=\frac{\sum_{j\in g}m_{j,t}W_{j,t}G_{j,t}}{\sum_{j\in g}m_{j,t}W_{j,t}+\epsilon},\qquad
    A_{i,t}=\big(G_{i,t}-B_{g(i),t}\big)\,m_{i,t}$$

    A group of one has $B=0$. With `handle_zero_tail`, when one response is strictly the longest of
    its group its baseline is 0 past the second-longest length (there it is alone: see `_zero_tail`).
    Returns `(advantages, returns=G)`. Mirrors `compute_optimal_token_baseline_advantage`
    (`verl/trainer/ppo/core_algos.py:872`); verl computes `sum_pi_squared` in the actor's forward
    (`calculate_sum_pi_squared_from_logits`, `verl/utils/torch_functional.py:690`) when
    `actor.calculate_sum_pi_squared` is set.
    """
    with torch.no_grad():
        returns = _reward_to_go(token_level_rewards, response_mask)
        energy = _path_variance(old_log_probs, sum_pi_squared, response_mask, rollout_is_weights)
        baselines = torch.zeros_like(returns)
        for rows in _groups(index, returns.shape[0], returns.device):
            if len(rows) == 1:
                continue
            weight = energy[rows] * response_mask[rows]
            baselines[rows] = (returns[rows] * weight).sum(dim=0) / (weight.sum(dim=0) + epsilon)
            if handle_zero_tail:
                _zero_tail(baselines, rows, response_mask[rows].sum(dim=-1))
        advantages = (returns - baselines) * response_mask
    return advantages, returns


@register_adv_est(AdvantageEstimator.TIR_OPTIMAL_TOKEN_BASELINE)
def compute_multi_turn_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The optimal token baseline for tool-integrated (multi-turn) responses: positions counted over policy tokens only.

    In a multi-turn response the policy's tokens are interleaved with tool observations
    ($m_{i,t}=0$), which sit at different positions in different responses. So each response's
    unmasked tokens are first packed to the left, $k=0,1,\dots,L_i-1$ counting the policy's tokens,
    and the baseline of `compute_optimal_token_baseline_advantage` is taken over $k$ instead of $t$:

    $$B_{g,k}=\frac{\sum_{j\in g}W_{j,(k)}G_{j,(k)}}{\sum_{j\in g}W_{j,(k)}+\epsilon},\qquad
    A_{i,(k)}=G_{i,(k)}-B_{g(i),k}$$

    where $(k)$ is the position of the $k$-th unmasked token of that response (a response shorter than
    $k$ contributes 0). Responses with no unmasked token are left out of their group; a group of one
    has $B=0$; `handle_zero_tail` as in OTB, on the packed lengths. The advantages are written back at
    the original positions. Returns `(advantages, returns=G)` ($G$ at the original positions).
    Mirrors `compute_multi_turn_optimal_token_baseline_advantage` (`verl/trainer/ppo/core_algos.py:991`).
    """
    with torch.no_grad():
        returns = _reward_to_go(token_level_rewards, response_mask)
        energy = _path_variance(old_log_probs, sum_pi_squared, response_mask, rollout_is_weights)
        keep = response_mask.bool()
        lengths = keep.sum(dim=-1)
        width = int(lengths.max().item()) if lengths.numel() else 0
        row, _ = keep.nonzero(as_tuple=True)
        k = (keep.cumsum(dim=-1) - 1)[keep]  # rank of each unmasked token within its response
        packed_energy = energy.new_zeros(keep.shape[0], width)
        packed_returns = torch.zeros_like(packed_energy)
        packed_energy[row, k], packed_returns[row, k] = energy[keep], returns[keep]

        baselines = torch.zeros_like(packed_returns)
        nonempty = (lengths > 0).nonzero(as_tuple=True)[0]
        index_nonempty = [index[int(i)] for i in nonempty]
        for rows in _groups(index_nonempty, len(nonempty), returns.device):
            rows = nonempty[rows]
            if len(rows) == 1:
                continue
            b = (packed_returns[rows] * packed_energy[rows]).sum(dim=0) / (packed_energy[rows].sum(dim=0) + epsilon)
            baselines[rows] = b.to(baselines.dtype)
            if handle_zero_tail:
                _zero_tail(baselines, rows, lengths[rows])

        advantages = torch.zeros_like(returns)
        advantages[keep] = (packed_returns - baselines)[row, k]
        advantages = advantages * response_mask
    return advantages, returns


# ---------------------------------------------------------------------------------------------------------
# Loss aggregation: (bs, T) per-token losses -> one scalar.
# ---------------------------------------------------------------------------------------------------------

LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: int | None = None,
    global_batch_size: int | None = None,
    loss_scale_factor: int | None = None,
):
    r"""Reduce a per-token loss $\ell_{i,t}$ to the scalar that is back-propagated (`actor.loss_agg_mode`).

    With $D$ = `dp_size`, $N$ = `batch_num_tokens` (unmasked tokens in the **global** batch; the
    local count when None) and $B$ = `global_batch_size` (responses with at least one unmasked
    token; the local count when None):

    $$\text{token-mean}=\frac{D}{N}\sum_{i,t}m_{i,t}\ell_{i,t}\qquad
    \text{token-sum}=D\sum_{i,t}m_{i,t}\ell_{i,t}$$

    $$\text{seq-mean-token-sum}=\frac{D}{B}\sum_i\sum_t m_{i,t}\ell_{i,t}\qquad
    \text{seq-mean-token-mean}=\frac{D}{B}\sum_{i:L_i>0}\frac{\sum_t m_{i,t}\ell_{i,t}}{L_i+10^{-8}}$$

    and seq-mean-token-sum-norm is seq-mean-token-sum divided by `loss_scale_factor` (default: the
    padded response length $T$, a constant, as in Dr.GRPO).

    token-mean weights every token equally (long answers weigh more), seq-mean-token-mean weights
    every answer equally. The factor $D$: FSDP *averages* gradients over the $D$ data-parallel
    ranks, each holding a part of the batch, so each rank multiplies by $D$ and the average equals
    the loss over the global batch. With $D>1$ the global counts must be given.
    Mirrors `agg_loss` (`verl/trainer/ppo/core_algos.py:1140`).
    """
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            _need_global(dp_size, "batch_num_tokens", loss_agg_mode)
            batch_num_tokens = loss_mask.sum()
        return masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask) * dp_size
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode!r}. Fix: use one of {list(LOSS_AGG_MODES)}.")
    token_count = loss_mask.sum(dim=-1)
    seq_losses = (loss_mat * loss_mask).sum(dim=-1)
    if loss_agg_mode == "seq-mean-token-mean":
        seq_losses = seq_losses / (token_count + 1e-8)
    has_tokens = (token_count > 0).float()  # fully masked responses do not count
    if global_batch_size is None:
        _need_global(dp_size, "global_batch_size", loss_agg_mode)
        global_batch_size = has_tokens.sum()
    loss = masked_sum(seq_losses, has_tokens) / global_batch_size * dp_size
    if loss_agg_mode == "seq-mean-token-sum-norm":
        loss = loss / (loss_scale_factor if loss_scale_factor is not None else loss_mask.shape[-1])
    return loss


def _need_global(dp_size: int, key: str, mode: str) -> None:
    if dp_size > 1:
        raise ValueError(
            f"agg_loss({mode!r}) with dp_size={dp_size} needs {key} of the global batch (each rank only sees "
            f"its part). Fix: pass {key}= (verl puts it in actor config.global_batch_info)."
        )


# ---------------------------------------------------------------------------------------------------------
# Policy losses. Signature (old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
# rollout_is_weights) -> (loss, metrics). `config` is the actor config: anything with attribute access.
# ---------------------------------------------------------------------------------------------------------


def _clip_range(config: Any) -> tuple[float, float]:
    """$(\\varepsilon_{low}, \\varepsilon_{high})$: clip_ratio_low / clip_ratio_high, else clip_ratio."""
    clip_ratio = cfg_get(config, "clip_ratio", 0.2)
    return cfg_get(config, "clip_ratio_low", clip_ratio), cfg_get(config, "clip_ratio_high", clip_ratio)


def _agg(pg_losses, response_mask, loss_agg_mode, config, rollout_is_weights):
    """Apply rollout IS weights if given, then `agg_loss` with the counts in `config.global_batch_info`."""
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    batch_info = cfg_get(config, "global_batch_info", {})
    return agg_loss(loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **batch_info)


def _metrics(pg_clipfrac=None, ppo_kl=None, pg_clipfrac_lower=None) -> dict[str, float]:
    """The diagnostics verl logs, as Python floats under verl's keys (only those given)."""
    values = {
        "actor/pg_clipfrac": pg_clipfrac,
        "actor/ppo_kl": ppo_kl,
        "actor/pg_clipfrac_lower": pg_clipfrac_lower,
    }
    return {k: float(torch.as_tensor(v).detach().item()) for k, v in values.items() if v is not None}


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""PPO's clipped surrogate with dual clip (Ye et al. 2019, arXiv:1912.09729): the default loss.

    The log-ratio is clamped to $[-20, 20]$ before `exp` (so $\rho$ stays finite), then

    $$\ell^{\text{clip}}_{i,t}=\max\big(-A_{i,t}\rho_{i,t},\ -A_{i,t}\operatorname{clip}(\rho_{i,t},1-\varepsilon_{\text{low}},1+\varepsilon_{\text{high}})\big)$$

    PPO's clip only stops $\rho$ from moving *further* in the direction the advantage pushes it. When
    $A<0$ and $\rho\gg1$ the unclipped term $-A\rho$ grows without bound; dual clip caps it at $-cA$:

    $$\ell_{i,t}=\begin{cases}\min(\ell^{\text{clip}}_{i,t},\,-c\,A_{i,t}) & A_{i,t}<0\\ \ell^{\text{clip}}_{i,t} & A_{i,t}\ge 0\end{cases}
    \qquad\text{loss}=\operatorname{agg}(\ell\cdot w)$$

    ($w$ = `rollout_is_weights` when given.) Metrics: `actor/pg_clipfrac` (share of tokens where the
    clipped term won), `actor/ppo_kl` ($\operatorname{mean}_m(\log\pi_{\text{old}}-\log\pi_\theta)$)
    and `actor/pg_clipfrac_lower` (share of tokens capped by $c$).

    Reads from `config`: `clip_ratio` (0.2), `clip_ratio_low`, `clip_ratio_high` (fall back to
    `clip_ratio`), `clip_ratio_c` (3.0, must be > 1), `global_batch_info` ({}).
    Mirrors `compute_policy_loss_vanilla` (`verl/trainer/ppo/core_algos.py:1286`).
    """
    _require_config(config, "compute_policy_loss_vanilla", "clip_ratio_low, clip_ratio_high, clip_ratio_c")
    clip_low, clip_high = _clip_range(config)
    clip_c = cfg_get(config, "clip_ratio_c", 3.0)
    if clip_c <= 1.0:
        raise ValueError(
            f"clip_ratio_c is the dual-clip bound and must be > 1.0, got {clip_c}. Fix: use e.g. 3.0."
        )

    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    ppo_kl = masked_mean(-log_ratio, response_mask)

    # $\ell^{\text{clip}}$: PPO's pessimistic max of the unclipped and clipped terms
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    loss_ppo = torch.maximum(loss_unclipped, loss_clipped)
    pg_clipfrac = masked_mean((loss_clipped > loss_unclipped).float(), response_mask)

    # dual clip: cap at $-cA$ where $A<0$
    loss_cap = -advantages * clip_c
    negative = advantages < 0
    pg_clipfrac_lower = masked_mean(((loss_ppo > loss_cap) & negative).float(), response_mask)
    pg_losses = torch.where(negative, torch.minimum(loss_ppo, loss_cap), loss_ppo)

    pg_loss = _agg(pg_losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    return pg_loss, _metrics(pg_clipfrac, ppo_kl, pg_clipfrac_lower)


def _dppo_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights,
               fn_name, inside) -> tuple[torch.Tensor, dict[str, Any]]:
    """What the two DPPO losses share; `inside(log_prob, old_log_prob, delta_low, delta_high, positive)` is the
    trust region (True inside)."""
    _require_config(config, fn_name, "clip_ratio_low, clip_ratio_high (the divergence bounds), clip_ratio_c")
    delta_low, delta_high = _clip_range(config)
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    cap = cfg_get(config, "clip_ratio_c", 20.0)
    weight = torch.clamp(ratio, max=cap).detach()  # truncated importance weight sg[min(rho, c)]
    valid = inside(log_prob, old_log_prob, delta_low, delta_high, advantages > 0)
    valid = valid.detach().float()  # $k_{i,t}$: 1 inside the trust region
    pg_losses = -advantages * weight * log_prob * valid
    pg_loss = _agg(pg_losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    return pg_loss, _metrics(
        masked_mean(1.0 - valid, response_mask),
        masked_mean(-log_ratio, response_mask),
        masked_mean((ratio > cap).float() * valid, response_mask),
    )


def _inside_tv(log_prob, old_log_prob, delta_low, delta_high, positive):
    change = torch.exp(log_prob) - torch.exp(old_log_prob)  # $p - p^{old}$
    return torch.where(positive, change <= delta_high, change >= -delta_low)


def _inside_binary_kl(log_prob, old_log_prob, delta_low, delta_high, positive):
    # KL between Bernoulli(p_old) and Bernoulli(p): "this token" against "any other token"
    p, p_old = torch.exp(log_prob), torch.exp(old_log_prob)
    kl = p_old * (old_log_prob - log_prob) + (1 - p_old) * torch.log((1.0 - p_old + 1e-8) / (1.0 - p + 1e-8))
    return torch.where(positive, (kl <= delta_high) | (p <= p_old), (kl <= delta_low) | (p >= p_old))


@register_policy_loss("dppo_tv")
def compute_policy_loss_dppo_tv(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""DPPO-Binary-TV (arXiv:2602.04879): PPO's trust region measured in probability, not in ratio.

    PPO's clip bounds the ratio $\rho$, which is loose for likely tokens ($p=0.9\to0.99$ is only
    $\rho=1.1$) and tight for rare ones ($p=0.001\to0.01$ is $\rho=10$). DPPO instead bounds the
    change of the sampled token's probability, the total-variation distance between the two
    Bernoulli distributions "this token / any other":

    $$k_{i,t}=\begin{cases}\mathbb{1}\big[p_{i,t}-p^{\text{old}}_{i,t}\le\delta_{\text{high}}\big] & A_{i,t}>0\\
    \mathbb{1}\big[p_{i,t}-p^{\text{old}}_{i,t}\ge-\delta_{\text{low}}\big] & A_{i,t}\le0\end{cases}\qquad
    \ell_{i,t}=-A_{i,t}\,\operatorname{sg}\big[\min(\rho_{i,t},c)\big]\,\log\pi_\theta(y_{i,t})\,k_{i,t}$$

    Inside the region the gradient is PPO's unclipped one ($\rho\nabla\log\pi=\nabla\rho$, up to the
    truncation at $c$); outside it is 0. The log-ratio is clamped to $[-20,20]$ before `exp`.
    $\delta_{\text{low}}$, $\delta_{\text{high}}$ are `clip_ratio_low` / `clip_ratio_high` (divergence
    bounds here, not ratio bounds) and $c$ is `clip_ratio_c` (20.0 when missing; **the actor config's
    default of 3.0 applies when it is set**, as in verl). Metrics: `actor/pg_clipfrac` (share of
    tokens outside the region), `actor/ppo_kl`, `actor/pg_clipfrac_lower` (share inside it whose
    $\rho$ was truncated at $c$).

    Reads from `config`: `clip_ratio`, `clip_ratio_low`, `clip_ratio_high`, `clip_ratio_c`,
    `global_batch_info`. Mirrors `compute_policy_loss_dppo_tv` (`verl/trainer/ppo/core_algos.py:1380`).
    """
    return _dppo_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights,
                      "compute_policy_loss_dppo_tv", _inside_tv)


@register_policy_loss("dppo_kl")
def compute_policy_loss_dppo_kl(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""DPPO-Binary-KL (arXiv:2602.04879): the DPPO trust region measured by a binary KL.

    As `compute_policy_loss_dppo_tv`, with the region given by the KL divergence between the
    Bernoulli distributions $(p^{\text{old}},1-p^{\text{old}})$ and $(p,1-p)$ of the sampled token:

    $$D_{i,t}=p^{\text{old}}\log\frac{p^{\text{old}}}{p}+(1-p^{\text{old}})\log\frac{1-p^{\text{old}}+10^{-8}}{1-p+10^{-8}}$$

    $$k_{i,t}=\begin{cases}\mathbb{1}\big[D_{i,t}\le\delta_{\text{high}}\ \lor\ p\le p^{\text{old}}\big] & A_{i,t}>0\\
    \mathbb{1}\big[D_{i,t}\le\delta_{\text{low}}\ \lor\ p\ge p^{\text{old}}\big] & A_{i,t}\le0\end{cases}\qquad
    \ell_{i,t}=-A_{i,t}\,\operatorname{sg}\big[\min(\rho_{i,t},c)\big]\,\log\pi_\theta(y_{i,t})\,k_{i,t}$$

    (a token is only cut off when it moved *past* the bound in the direction its advantage pushes).
    Same config keys and metrics as `dppo_tv`. Mirrors `compute_policy_loss_dppo_kl`
    (`verl/trainer/ppo/core_algos.py:1461`).
    """
    return _dppo_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights,
                      "compute_policy_loss_dppo_kl", _inside_binary_kl)


@register_policy_loss("gspo")
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""GSPO (arXiv:2507.18071): PPO's clip applied to a *sequence*-level ratio.

    The ratio is the geometric mean of the token ratios of the response:

    $$s_i=\exp\Big(\frac{1}{L_i}\sum_t m_{i,t}(\log\pi_\theta-\log\pi_{\text{old}})_{i,t}\Big)$$

    and each token uses it through a straight-through form, so its value is $s_i$ but its gradient
    flows through its own log-prob only:

    $$\log s_{i,t}=\min\big(\operatorname{sg}[\log s_i]+\log\pi_\theta(y_{i,t})-\operatorname{sg}[\log\pi_\theta(y_{i,t})],\ 10\big),\qquad
    \ell_{i,t}=\max\big(-A_{i,t}s_{i,t},\ -A_{i,t}\operatorname{clip}(s_{i,t},1-\varepsilon_{\text{low}},1+\varepsilon_{\text{high}})\big)$$

    ($\partial s_{i,t}/\partial\log\pi_\theta(y_{i,t})=s_{i,t}$.) Aggregated with
    **seq-mean-token-mean** whatever `loss_agg_mode` says (pinned verl; PyPI verl 0.9.1 uses
    `loss_agg_mode` instead). Metrics: `actor/pg_clipfrac`, `actor/ppo_kl`, and
    `actor/pg_clipfrac_lower` = 0 (no dual clip).

    Reads from `config`: `clip_ratio`, `clip_ratio_low`, `clip_ratio_high`, `global_batch_info`.
    GSPO's paper uses tiny ranges (e.g. 3e-4 / 4e-4). Mirrors `compute_policy_loss_gspo`
    (`verl/trainer/ppo/core_algos.py:1546`).
    """
    _require_config(config, "compute_policy_loss_gspo", "clip_ratio_low, clip_ratio_high")
    clip_low, clip_high = _clip_range(config)
    log_ratio = log_prob - old_log_prob

    # $\log s_i$: length-normalised sequence log-ratio
    lengths = response_mask.sum(dim=-1).clamp(min=1)
    seq_log_ratio = (log_ratio * response_mask).sum(dim=-1) / lengths
    # straight-through token form: value $\log s_i$, gradient of $\log\pi_\theta(y_{i,t})$
    log_s = log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
    s = torch.exp(torch.clamp(log_s, max=10.0))

    loss_unclipped = -advantages * s
    loss_clipped = -advantages * torch.clamp(s, 1 - clip_low, 1 + clip_high)
    pg_losses = torch.maximum(loss_unclipped, loss_clipped)

    # pinned verl forces seq-mean-token-mean here (verl 0.9.1: the loss_agg_mode argument)
    pg_loss = _agg(pg_losses, response_mask, "seq-mean-token-mean", config, rollout_is_weights)
    pg_clipfrac = masked_mean((loss_clipped > loss_unclipped).float(), response_mask)
    return pg_loss, _metrics(pg_clipfrac, masked_mean(-log_ratio, response_mask), 0.0)


@register_policy_loss("sapo")
def compute_policy_loss_sapo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""SAPO (arXiv:2511.20347): a smooth sigmoid gate on the ratio instead of a hard clip.

    With the log-ratio clamped to $[-20,20]$ and $\tau_{i,t}=\tau_+$ where $A_{i,t}>0$, else $\tau_-$:

    $$f(\rho,\tau)=\frac{4}{\tau}\,\sigma\big(\tau(\rho-1)\big),\qquad \ell_{i,t}=-f(\rho_{i,t},\tau_{i,t})\,A_{i,t}$$

    At $\rho=1$ the gate's slope is 1 (the plain policy gradient); far from 1 the sigmoid
    saturates and the gradient fades smoothly (faster for larger $\tau$). Aggregated with
    **seq-mean-token-mean** whatever `loss_agg_mode` says (as verl). Metrics: `actor/ppo_kl`, and
    `actor/pg_clipfrac` = `actor/pg_clipfrac_lower` = 0.

    Reads from `config`: `tau_pos` (1.0), `tau_neg` (1.05), `global_batch_info`.
    Mirrors `compute_policy_loss_sapo` (`verl/trainer/ppo/core_algos.py:1622`).
    """
    _require_config(config, "compute_policy_loss_sapo", "tau_pos, tau_neg")
    tau_pos = torch.as_tensor(cfg_get(config, "tau_pos", 1.0), dtype=advantages.dtype, device=advantages.device)
    tau_neg = torch.as_tensor(cfg_get(config, "tau_neg", 1.05), dtype=advantages.dtype, device=advantages.device)

    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    tau = torch.where(advantages > 0, tau_pos, tau_neg)
    # $f(\rho,\tau)$
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    pg_losses = -gate * advantages

    pg_loss = _agg(pg_losses, response_mask, "seq-mean-token-mean", config, rollout_is_weights)
    return pg_loss, _metrics(0.0, masked_mean(-log_ratio, response_mask), 0.0)


@register_policy_loss("gpg")
def compute_policy_loss_gpg(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""GPG (arXiv:2504.02546): plain REINFORCE, no ratio and no clip.

    $$\ell_{i,t}=-A_{i,t}\log\pi_\theta(y_{i,t})$$

    Its gradient is the textbook policy gradient $-A\nabla\log\pi_\theta$. `old_log_prob` is unused;
    returns no metrics (`{}`), as verl. Reads `global_batch_info` from `config` (required, as verl).
    Mirrors `compute_policy_loss_gpg` (`verl/trainer/ppo/core_algos.py:1707`).
    """
    _require_config(config, "compute_policy_loss_gpg", "global_batch_info")
    pg_losses = -log_prob * advantages
    return _agg(pg_losses, response_mask, loss_agg_mode, config, rollout_is_weights), {}


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""Clip-Cov (Cui et al. 2025, arXiv:2505.22617): drop the gradient of a few high-covariance tokens.

    Entropy collapses through tokens whose log-prob and advantage move together. With the centred
    covariance term (means over unmasked tokens)

    $$C_{i,t}=\big(A_{i,t}-\operatorname{mean}_m(A)\big)\big(\log\pi_\theta(y_{i,t})-\operatorname{mean}_m(\log\pi_\theta)\big)$$

    the candidates are unmasked tokens not already clipped by PPO with $lb<C_{i,t}<ub$; a random
    `max(1, int(clip_cov_ratio * N))` of them (N unmasked tokens; drawn with `torch.randperm`, so
    seed torch to reproduce) get $k_{i,t}=0$, all others $k_{i,t}=1$:

    $$\ell_{i,t}=k_{i,t}\max\big(-A\rho,\ -A\operatorname{clip}(\rho,1-\varepsilon_{\text{low}},1+\varepsilon_{\text{high}})\big)_{i,t}$$

    (no log-ratio clamp, no dual clip). Metrics: `actor/pg_clipfrac` (share of tokens with $k=0$)
    and `actor/ppo_kl`.

    Reads from `config`: `clip_ratio`, `clip_ratio_low`, `clip_ratio_high`, `global_batch_info`,
    `policy_loss.clip_cov_ratio` (0.0002, > 0), `policy_loss.clip_cov_lb` (1.0),
    `policy_loss.clip_cov_ub` (5.0). Mirrors `compute_policy_loss_clip_cov`
    (`verl/trainer/ppo/core_algos.py:1743`).
    """
    _require_config(config, "compute_policy_loss_clip_cov", "clip_ratio_low, clip_ratio_high, policy_loss")
    pl = cfg_get(config, "policy_loss")
    cov_ratio = cfg_get(pl, "clip_cov_ratio", 0.0002)
    cov_lb, cov_ub = cfg_get(pl, "clip_cov_lb", 1.0), cfg_get(pl, "clip_cov_ub", 5.0)
    if cov_ratio <= 0:
        raise ValueError(f"policy_loss.clip_cov_ratio must be > 0, got {cov_ratio}.")
    clip_low, clip_high = _clip_range(config)

    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    valid = response_mask > 0

    # $C_{i,t}$ and the candidate tokens
    cov = (advantages - masked_mean(advantages, response_mask)) * (
        log_prob.detach() - masked_mean(log_prob.detach(), response_mask)
    )
    candidates = valid & ~(loss_clipped > loss_unclipped) & (cov > cov_lb) & (cov < cov_ub)
    candidates = torch.nonzero(candidates)
    n_drop = max(int(cov_ratio * response_mask.sum().item()), 1)
    keep = torch.ones_like(advantages)  # $k_{i,t}$
    if len(candidates) > 0:
        chosen = candidates[torch.randperm(len(candidates))[:n_drop]]
        keep[chosen[:, 0], chosen[:, 1]] = 0

    pg_losses = torch.maximum(loss_unclipped, loss_clipped) * keep
    pg_loss = _agg(pg_losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    return pg_loss, _metrics(
        masked_mean((keep == 0).float(), response_mask), masked_mean(-log_ratio, response_mask)
    )


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""KL-Cov (Cui et al. 2025, arXiv:2505.22617): a KL penalty on the highest-covariance tokens only.

    With $C$ the centred covariance term of Clip-Cov (here centred by the plain mean over the
    unmasked tokens), the top `max(1, int(kl_cov_ratio * N))` unmasked tokens by $C$ form a set $K$:

    $$\ell_{i,t}=-A_{i,t}\rho_{i,t}+\mathbb{1}[(i,t)\in K]\;\beta\,\big\lvert\log\pi_\theta(y_{i,t})-\log\pi_{\text{old}}(y_{i,t})\big\rvert$$

    (no clip at all). Metric: `actor/ppo_kl` = $\operatorname{mean}_m\lvert\log\rho\rvert$ (absolute,
    unlike the other losses).

    Reads from `config`: `policy_loss.kl_cov_ratio` (0.0002, > 0), `policy_loss.ppo_kl_coef` ($\beta$;
    1.0 when missing or None, as verl's fallback), `global_batch_info`.
    Mirrors `compute_policy_loss_kl_cov` (`verl/trainer/ppo/core_algos.py:1848`).
    """
    _require_config(config, "compute_policy_loss_kl_cov", "policy_loss.kl_cov_ratio, policy_loss.ppo_kl_coef")
    pl = cfg_get(config, "policy_loss")
    cov_ratio, kl_coef = cfg_get(pl, "kl_cov_ratio", 0.0002), cfg_get(pl, "ppo_kl_coef", 1.0)
    if cov_ratio <= 0:
        raise ValueError(f"policy_loss.kl_cov_ratio must be > 0, got {cov_ratio}.")

    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    pg_losses = -advantages * ratio

    valid = response_mask > 0
    flat_valid = torch.nonzero(valid.reshape(-1), as_tuple=True)[0]
    if len(flat_valid) > 0:
        adv_v, logp_v = advantages[valid].detach(), log_prob[valid].detach()
        cov = (adv_v - adv_v.mean()) * (logp_v - logp_v.mean())
        top = torch.topk(cov, max(1, int(len(cov) * cov_ratio)), largest=True).indices
        in_k = torch.zeros(valid.numel(), dtype=torch.bool, device=valid.device)
        in_k[flat_valid[top]] = True
        # add $\beta\lvert\log\rho\rvert$ on the tokens of $K$
        pg_losses = torch.where(in_k.view_as(pg_losses), pg_losses + kl_coef * log_ratio.abs(), pg_losses)

    pg_loss = _agg(pg_losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    return pg_loss, _metrics(ppo_kl=masked_mean(log_ratio.abs(), response_mask))


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""GMPO (arXiv:2507.20673): optimise the geometric mean of token ratios, clipped per token in log space.

    Each token's log-ratio $x_{i,t}=\log\rho_{i,t}$ is clipped pessimistically for its advantage's sign
    $\operatorname{sgn}(A)$, then averaged over the response:

    $$\hat x_{i,t}=\operatorname{sgn}(A_{i,t})\min\big(\operatorname{sgn}(A_{i,t})\,x_{i,t},\ \operatorname{sgn}(A_{i,t})\operatorname{clip}(x_{i,t},-\varepsilon_{\text{low}},\varepsilon_{\text{high}})\big)$$

    $$\bar\rho_i=\exp\Big(\frac{\sum_t m_{i,t}\hat x_{i,t}}{L_i+10^{-8}}\Big),\qquad
    \bar A_i=\frac{\sum_t m_{i,t}A_{i,t}}{L_i+10^{-8}},\qquad \text{loss}=\frac1B\sum_i -\bar A_i\,\bar\rho_i$$

    (the clip range bounds the log-ratio, not the ratio; `loss_agg_mode` and `global_batch_info` are
    not used: a plain mean over the $B$ rows). `rollout_is_weights` are reduced to a per-response
    geometric mean first. Metrics: `actor/pg_clipfrac` / `actor/pg_clipfrac_lower`: share of tokens
    whose log-ratio was outside the range with $A>0$ / $A<0$; `actor/ppo_kl`.

    Reads from `config`: `clip_ratio`, `clip_ratio_low`, `clip_ratio_high`.
    Mirrors `compute_policy_loss_geo_mean` (`verl/trainer/ppo/core_algos.py:1928`).
    """
    _require_config(config, "compute_policy_loss_geo_mean", "clip_ratio_low, clip_ratio_high")
    clip_low, clip_high = _clip_range(config)
    log_ratio = log_prob - old_log_prob  # not clamped to +-20 here (verl leaves that commented out)

    # $\hat x_{i,t}$
    sign = torch.sign(advantages)
    clipped = torch.clamp(log_ratio, -clip_low, clip_high)
    pessimistic = sign * torch.min(sign * log_ratio, sign * clipped)

    lengths = response_mask.sum(dim=-1) + 1e-8
    seq_ratio = torch.exp((pessimistic * response_mask).sum(dim=-1) / lengths)  # $\bar\rho_i$
    seq_adv = (advantages * response_mask).sum(dim=-1) / lengths  # $\bar A_i$
    pg_losses = -seq_adv * seq_ratio
    if rollout_is_weights is not None:
        log_w = torch.log(rollout_is_weights + 1e-10)
        pg_losses = pg_losses * torch.exp((log_w * response_mask).sum(dim=-1) / lengths)
    pg_loss = pg_losses.mean()

    was_clipped = log_ratio != clipped
    clipfrac = masked_mean((was_clipped & (advantages > 0)).float(), response_mask)
    clipfrac_lower = masked_mean((was_clipped & (advantages < 0)).float(), response_mask)
    return pg_loss, _metrics(clipfrac, masked_mean(-log_ratio, response_mask), clipfrac_lower)


@register_policy_loss("dro")
def compute_policy_loss_dro(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""DRO ("Direct Reward Optimization", as verl names it): REINFORCE with a quadratic pull towards $\pi_{\text{old}}$.

    No ratio and no clip: the policy gradient term plus a squared log-ratio penalty,

    $$\ell_{i,t}=-\Big(A_{i,t}\log\pi_\theta(y_{i,t})-\tfrac{\beta}{2}\big(\log\pi_\theta(y_{i,t})-\log\pi_{\text{old}}(y_{i,t})\big)^2\Big)$$

    whose gradient $-(A-\beta\log\rho)\nabla\log\pi_\theta$ shrinks the step of a token as soon as its
    log-ratio has moved by $A/\beta$: a soft trust region where PPO's is hard. The log-ratio is not
    clamped. Metric: `actor/ppo_kl` only.

    Reads from `config`: `policy_loss.dro_beta` ($\beta$, required, > 0; verl's default is null),
    `global_batch_info`. Mirrors `compute_policy_loss_dro` (`verl/trainer/ppo/core_algos.py:2014`).
    """
    _require_config(config, "compute_policy_loss_dro", "policy_loss.dro_beta")
    beta = cfg_get(cfg_get(config, "policy_loss"), "dro_beta")
    if beta is None or beta <= 0:
        raise ValueError(
            f"loss_mode=dro needs actor_rollout_ref.actor.policy_loss.dro_beta > 0 (the weight of the "
            f"squared log-ratio), got {beta}. Fix: e.g. actor_rollout_ref.actor.policy_loss.dro_beta=0.1."
        )
    log_ratio = log_prob - old_log_prob
    pg_losses = -(advantages * log_prob - 0.5 * beta * log_ratio.square())
    pg_loss = _agg(pg_losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    return pg_loss, _metrics(ppo_kl=masked_mean(-log_ratio, response_mask))


@register_policy_loss("cispo")
def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""CISPO (MiniMax-M1, arXiv:2506.13585): clip the importance weight, keep every token's gradient.

    With the log-ratio clamped to $[-20,20]$:

    $$\ell_{i,t}=-\operatorname{sg}\big[\operatorname{clip}(\rho_{i,t},1-\varepsilon_{\text{low}},1+\varepsilon_{\text{high}})\big]\,A_{i,t}\,\log\pi_\theta(y_{i,t})$$

    PPO zeroes the gradient of a clipped token; here the clipped weight only scales a REINFORCE
    gradient, so rare, high-ratio tokens still learn. Metrics: `actor/pg_clipfrac` (share of tokens
    whose ratio was clipped), `actor/ppo_kl`, `actor/pg_clipfrac_lower` = 0.

    Reads from `config`: `clip_ratio`, `clip_ratio_low`, `clip_ratio_high`, `global_batch_info`.
    Mirrors `compute_policy_loss_cispo` (`verl/trainer/ppo/core_algos.py:2047`).
    """
    _require_config(config, "compute_policy_loss_cispo", "clip_ratio_low, clip_ratio_high")
    clip_low, clip_high = _clip_range(config)
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    weight = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    pg_losses = -weight.detach() * advantages * log_prob

    pg_loss = _agg(pg_losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    pg_clipfrac = masked_mean((ratio != weight).float(), response_mask)
    return pg_loss, _metrics(pg_clipfrac, masked_mean(-log_ratio, response_mask), 0.0)


def _cfg_raw(cfg: Any, key: str, default: Any) -> Any:
    """`cfg[key]` / `cfg.key`, keeping an explicit None (unlike `cfg_get`): here None means 'off'."""
    if isinstance(cfg, Mapping):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


def compute_policy_loss_reinforce(
    rollout_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-sum",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""Plain REINFORCE, optionally importance-weighted: $\ell_{i,t}=-A_{i,t}\,\log\pi_\theta(y_{i,t})\,w_{i,t}$.

    No ratio, no clip; $w$ = `rollout_is_weights` (detached; 1 when None). Metric: `actor/ppo_kl`
    $=\operatorname{mean}_m(\log\pi_{\text{roll}}-\log\pi_\theta)$. Not registered: `bypass_mode` calls it
    for `loss_type=reinforce`. Note the default aggregation, seq-mean-token-sum (verl's).
    Reads `global_batch_info` from `config`.
    Mirrors `compute_policy_loss_reinforce` (`verl/trainer/ppo/core_algos.py:2332`).
    """
    _require_config(config, "compute_policy_loss_reinforce", "global_batch_info")
    pg_loss = _agg(-advantages * log_prob, response_mask, loss_agg_mode, config, rollout_is_weights)
    return pg_loss, _metrics(ppo_kl=masked_mean(rollout_log_prob - log_prob, response_mask))


@register_policy_loss("bypass_mode")
def compute_policy_loss_bypass_mode(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""The loss for bypass mode, where the rollout's own log-probs stand in for $\pi_{\text{old}}$.

    In bypass mode (`algorithm.rollout_correction.bypass_mode`) the trainer skips the actor's
    old-log-prob forward and sets $\log\pi_{\text{old}}=\log\pi_{\text{roll}}$: two policies instead of
    three. This loss treats `old_log_prob` as $\log\pi_{\text{roll}}$, computes (without gradient) the
    importance weights $w$ and the rejection mask $m'$ of `compute_rollout_correction_and_rejection_mask`
    from $\pi_\theta$ against $\pi_{\text{roll}}$, and then, by `rollout_correction.loss_type`:

    - `ppo_clip` (default): `compute_policy_loss_vanilla` on $m'$, **without** $w$: the PPO ratio
      $\pi_\theta/\pi_{\text{roll}}$ already is the importance weight, and its clip bounds it;
    - `reinforce`: `compute_policy_loss_reinforce`, $\ell=-A\log\pi_\theta\,w$ on $m'$.

    The `rollout_is_weights` argument is ignored (the weights are computed here). Metrics: those of
    the chosen loss plus the `rollout_corr/...` ones.

    Reads from `config`: `policy_loss.rollout_correction` (required) with `loss_type` (ppo_clip),
    `rollout_is` (null: no weights), `rollout_is_threshold` (2.0), `rollout_is_batch_normalize`
    (false), `rollout_rs` (null: no rejection), `rollout_rs_threshold`; and the keys of the loss it
    dispatches to. In verl, `PolicyLossConfig.rollout_correction` is a dataclass whose default sets
    `rollout_is: sequence` (`PolicyLossConfig`, `verl/workers/config/actor.py:77`); minirl's YAML spells that default out.
    Mirrors `compute_policy_loss_bypass_mode` (`verl/trainer/ppo/core_algos.py:2413`).
    """
    _require_config(config, "compute_policy_loss_bypass_mode", "policy_loss.rollout_correction")
    rc = cfg_get(cfg_get(config, "policy_loss"), "rollout_correction")
    if rc is None:
        raise ValueError(
            "loss_mode=bypass_mode reads actor_rollout_ref.actor.policy_loss.rollout_correction (loss_type, "
            "rollout_is, rollout_rs, ...), which is missing. Fix: keep that section of the config (its defaults work)."
        )
    loss_type = cfg_get(rc, "loss_type", "ppo_clip")
    if loss_type not in ("ppo_clip", "reinforce"):
        raise ValueError(f"policy_loss.rollout_correction.loss_type={loss_type!r}. Fix: ppo_clip or reinforce.")
    from minirl.trainer.ppo.rollout_corr_helper import (
        compute_rollout_correction_and_rejection_mask,  # as verl does
    )

    rollout_log_prob = old_log_prob
    with torch.no_grad():
        weights, mask, corr_metrics = compute_rollout_correction_and_rejection_mask(
            old_log_prob=log_prob,  # the current policy: w = pi_theta / pi_roll
            rollout_log_prob=rollout_log_prob,
            response_mask=response_mask,
            rollout_is=_cfg_raw(rc, "rollout_is", None),
            rollout_is_threshold=_cfg_raw(rc, "rollout_is_threshold", 2.0),
            rollout_is_batch_normalize=bool(_cfg_raw(rc, "rollout_is_batch_normalize", False)),
            rollout_rs=_cfg_raw(rc, "rollout_rs", None),
            rollout_rs_threshold=_cfg_raw(rc, "rollout_rs_threshold", None),
        )
    if loss_type == "reinforce":
        pg_loss, metrics = compute_policy_loss_reinforce(
            rollout_log_prob, log_prob, advantages, mask, loss_agg_mode, config, rollout_is_weights=weights
        )
    else:
        pg_loss, metrics = compute_policy_loss_vanilla(
            rollout_log_prob, log_prob, advantages, mask, loss_agg_mode, config, rollout_is_weights=None
        )
    metrics.update(corr_metrics)
    return pg_loss, metrics


# ---------------------------------------------------------------------------------------------------------
# Entropy, value and KL terms.
# ---------------------------------------------------------------------------------------------------------


def compute_entropy_loss(logits, response_mask, loss_agg_mode: str = "token-mean"):
    r"""Aggregated token entropy $\operatorname{agg}(H_{i,t})$ of the policy's next-token distributions.

    `logits` `(bs, T, vocab)`. The actor subtracts `entropy_coeff` times this (a bonus for keeping the
    policy spread out). Mirrors `compute_entropy_loss` (`verl/trainer/ppo/core_algos.py:2107`).
    """
    return agg_loss(
        loss_mat=entropy_from_logits(logits), loss_mask=response_mask, loss_agg_mode=loss_agg_mode
    )


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    dp_size: int = 1,
    batch_num_tokens: int | None = None,
    global_batch_size: int | None = None,
    loss_scale_factor: int | None = None,
):
    r"""PPO's clipped value loss for the critic.

    With $\hat V$ = `vpreds` (the critic now), $V$ = `values` (the critic when the batch was made),
    $G$ = `returns` and $\epsilon_v$ = `cliprange_value`:

    $$\hat V^{\text{clip}}=\operatorname{clip}(\hat V,\,V-\epsilon_v,\,V+\epsilon_v),\qquad
    \text{loss}=\tfrac12\operatorname{agg}\Big(\max\big((\hat V-G)^2,\,(\hat V^{\text{clip}}-G)^2\big)\Big)$$

    The max keeps the critic from gaining by moving far from its old prediction in one update.
    Returns `(vf_loss, vf_clipfrac)`, the latter the share of tokens where the clipped error was the
    larger. The last four arguments are passed to `agg_loss`.
    Mirrors `compute_value_loss` (`verl/trainer/ppo/core_algos.py:2124`).
    """
    vpred_clipped = clip_by_value(vpreds, values - cliprange_value, values + cliprange_value)
    err_unclipped = (vpreds - returns) ** 2
    err_clipped = (vpred_clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(
        loss_mat=torch.max(err_unclipped, err_clipped),
        loss_mask=response_mask,
        loss_agg_mode=loss_agg_mode,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
        loss_scale_factor=loss_scale_factor,
    )
    vf_clipfrac = masked_mean((err_clipped > err_unclipped).float(), response_mask)
    return vf_loss, vf_clipfrac


KL_PENALTY_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def kl_penalty(logprob: torch.FloatTensor, ref_logprob: torch.FloatTensor, kl_penalty) -> torch.FloatTensor:
    r"""A per-token KL estimate between the policy and the reference, `kl_penalty` naming the estimator.

    `kl_penalty` is one of kl/k1, abs, mse/k2, low_var_kl/k3 (see `kl_penalty_forward`), optionally
    with a `+` suffix. The `+` form keeps the value of the named estimator but takes the gradient
    of $k_2$ (straight-through):

    $$k^{+}=k_2-\operatorname{sg}[k_2]+\operatorname{sg}[k],\qquad k_2=\tfrac12(\log\pi_\theta-\log\pi_{\text{ref}})^2$$

    Why: $k_1$ and $k_3$ are unbiased (or low-variance) estimates of the KL *value*, but their
    expected gradient is not the KL's gradient; $k_2$'s is (J. Schulman, "Approximating KL
    divergence", 2020). `mse+`/`k2+` are plain $k_2$. Used for `algorithm.kl_penalty` (KL in the
    reward) and `actor.kl_loss_type` (KL loss). Mirrors `kl_penalty` (`verl/trainer/ppo/core_algos.py:2187`).
    """
    straight_through = kl_penalty.endswith("+")
    base = kl_penalty[:-1] if straight_through else kl_penalty
    value = kl_penalty_forward(logprob, ref_logprob, base)
    if not straight_through or base in ("mse", "k2"):
        return value
    # value of the named estimator, gradient of $k_2$
    k2 = 0.5 * (logprob - ref_logprob).square()
    return k2 - k2.detach() + value.detach()


def kl_penalty_forward(
    logprob: torch.FloatTensor, ref_logprob: torch.FloatTensor, kl_penalty
) -> torch.FloatTensor:
    r"""The KL estimators of one sampled token, with $x=\log\pi_\theta-\log\pi_{\text{ref}}$:

    $$k_1=x\ (\texttt{kl}),\qquad \lvert x\rvert\ (\texttt{abs}),\qquad k_2=\tfrac12x^2\ (\texttt{mse}),\qquad
    k_3=e^{-x}+x-1\ (\texttt{low\_var\_kl})$$

    $k_3$ is always $\ge 0$ and has low variance; it is computed with $x$ clamped to $[-20,20]$ and
    the result clamped to $[-10,10]$ for stability. Mirrors `kl_penalty_forward`
    (`verl/trainer/ppo/core_algos.py:2215`).
    """
    diff = logprob - ref_logprob
    if kl_penalty in ("kl", "k1"):
        return diff
    if kl_penalty == "abs":
        return diff.abs()
    if kl_penalty in ("mse", "k2"):
        return 0.5 * diff.square()
    if kl_penalty in ("low_var_kl", "k3"):
        neg = torch.clamp(ref_logprob - logprob, min=-20, max=20)  # $-x$
        k3 = (torch.exp(neg) - neg - 1).contiguous()
        return torch.clamp(k3, min=-10, max=10)
    if kl_penalty == "full":
        raise NotImplementedError(
            "kl_penalty='full' (exact KL over the vocabulary) is not implemented, as in verl."
        )
    raise ValueError(
        f"Unknown kl_penalty {kl_penalty!r}. Fix: use one of {list(KL_PENALTY_TYPES)}, optionally with a '+' "
        "suffix (k2 gradient, straight-through)."
    )
