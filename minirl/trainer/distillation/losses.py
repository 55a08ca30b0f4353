r"""On-policy distillation (OPD) losses: a teacher's token-level signal on the student's own samples.

Mirrors `verl/trainer/distillation/losses.py` at the pin: the same registry, names, `distillation.*`
keys and metric keys. What OPD is: the student samples a response $y\sim\pi_\theta(\cdot\mid x)$
(the ordinary rollout), a *teacher* $\nu$ scores every sampled token in context, $s_t=(x,y_{<t})$,
and the student is trained to match the teacher on exactly the states it visits. verl V1 gets the
teacher's numbers in the agent loop, right after a session is scored
(`AgentLoopWorkerTQ._agent_loop_postprocess`, `verl/trainer/ppo/v1/agent_loop_tq.py:150`: a
`generate` request to the teacher's server with `prompt_logprobs` and `max_tokens=1`,
`AsyncTeacherLLMServerManager.compute_teacher_logprobs_single`,
`verl/experimental/teacher_loop/teacher_manager.py:115`), stores them with the trajectory as
`teacher_logprobs` / `teacher_ids`, and the actor's loss becomes `distillation_ppo_loss`
(`verl/trainer/distillation/losses.py:165`) instead of `ppo_loss`
(`ActorRolloutRefWorker.init_model`, `verl/workers/engine_workers.py`). minirl does the same; see
`minirl.workers.teacher` for the teacher server and `minirl.agent_loop.agent_loop_tq` for the call.

## The registered losses (`distillation.distillation_loss.loss_mode`)

Two families, told apart by `DistillationLossSettings` (exactly one of `use_topk` / `use_estimator`):

| loss_mode | family | per-token $D_t$ | teacher data it needs |
|---|---|---|---|
| `kl`, `k1` | estimator | $\log\pi_\theta(y_t)-\log\nu(y_t)$ | $\log\nu$ of the sampled token |
| `abs` | estimator | $\lvert\log\pi_\theta(y_t)-\log\nu(y_t)\rvert$ | same |
| `mse`, `k2` | estimator | $\tfrac12(\log\pi_\theta(y_t)-\log\nu(y_t))^2$ | same |
| `low_var_kl`, `k3` (default) | estimator | $e^{\log\nu-\log\pi_\theta}-(\log\nu-\log\pi_\theta)-1$ | same |
| `forward_kl_topk` | top-k | $\sum_{j\le k}\nu(v_j)(\log\nu(v_j)-\log\pi_\theta(v_j))$ | the teacher's top-$k$ ids and log-probs (`topk`) |

The estimators are `core_algos.kl_penalty` with the teacher in the reference's place: single-sample
estimates of the *reverse* KL $\mathrm{KL}(\pi_\theta\,\|\,\nu)$, since $y_t$ was drawn from the
student. The top-k loss is a truncated *forward* KL $\mathrm{KL}(\nu\,\|\,\pi_\theta)$, computed from
the student's logits while the engine has them (`minirl.trainer.distillation.fsdp.losses`).

## How the per-token $D_t$ becomes a loss (`distillation_loss`)

1. `loss_max_clamp` (if set) clamps $D_t$ to $[-c, c]$ (the lower side matters for k1, which can be negative).
2. `use_policy_gradient=False` (verl's YAML default, "GKD OPD"): back-propagate $D$ itself,
   $L_{\text{distill}}=\operatorname{agg}_m(D)$ with `actor.loss_agg_mode`. k1 is refused here: its
   gradient does not depend on the teacher.
3. `use_policy_gradient=True` ("PG OPD", Thinking Machines' on-policy distillation): use
   $-\operatorname{sg}[D_t]$ as a per-token *advantage* in a PPO loss (`policy_loss_mode`, only
   `vanilla`, with the distillation section's own `clip_ratio*`): $k_1$ then gives the reward
   $\log\nu(y_t)-\log\pi_\theta(y_t)$.

## How it combines with the task reward (`distillation_ppo_loss`)

$$L=\begin{cases}L_{\text{ppo}}+c\cdot L_{\text{distill}} & \texttt{use\_task\_rewards}\ (c=\texttt{distillation\_loss\_coef})\\
L_{\text{distill}} & \text{otherwise}\end{cases}$$

where $L_{\text{ppo}}$ is the whole `ppo_loss` (policy loss, entropy bonus, KL loss). Without task
rewards the PPO term (KL loss and entropy bonus included) is dropped; verl still computes it when
`use_policy_gradient` is on, for its metrics, and so does minirl.

## What minirl simplifies (verl does instead)

- Padded `[B, R]` (and `[B, R, k]`) tensors with the response part only; verl stores the teacher's
  numbers for the whole sequence, packed, and slices the response with `no_padding_2_padding`.
- Metrics are floats averaged over micro-batches (`actor/distillation/loss` summed, as verl's
  `AggregationType.SUM`); verl reduces `loss_min`/`loss_max`/`*_mass_min/max` with MIN/MAX.
- Settings are read with `cfg_get` from any mapping or object; verl converts to `DistillationConfig`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch

from minirl.config.schema_distillation import DistillationLossConfig as _LOSS
from minirl.config.values import K1_SUPERVISED
from minirl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty
from minirl.utils.config import cfg_get
from minirl.workers.utils.losses import ppo_loss

__all__ = [
    "DISTILLATION_LOSS_REGISTRY",
    "DistillationLossSettings",
    "compute_distillation_loss_range",
    "compute_distillation_loss_reverse_kl_estimator",
    "compute_forward_kl_topk",
    "compute_topk_loss",
    "distillation_loss",
    "distillation_ppo_loss",
    "get_distillation_loss_fn",
    "get_distillation_loss_settings",
    "is_distillation_enabled",
    "register_distillation_loss",
]

DistillationLossFn = Callable[..., tuple[torch.Tensor, dict[str, Any]]]
"""`(config, distillation_config, model_output, data) -> (per-token losses [B, R], metrics)`."""


def is_distillation_enabled(config) -> bool:
    """True when `distillation.enabled` (verl: `is_distillation_enabled`, `verl/trainer/distillation/losses.py:39`)."""
    return bool(cfg_get(config, "enabled", False))


@dataclass
class DistillationLossSettings:
    """What a registered distillation loss needs from the teacher: its top-k, or only the sampled token.

    Mirrors `DistillationLossSettings` (`verl/trainer/distillation/losses.py:47`): exactly one of
    `use_topk` and `use_estimator` is true.
    """

    names: str | list[str] = field(default_factory=list)
    """Name(s) the loss is registered under (`distillation.distillation_loss.loss_mode`)."""
    use_topk: bool = False
    """The loss reads the teacher's top-k ids and log-probs (and the student's logits)."""
    use_estimator: bool = False
    """The loss is a single-sample KL estimator on the sampled token's log-probs."""

    def __post_init__(self):
        self.names = [self.names] if isinstance(self.names, str) else list(self.names)
        if int(self.use_topk) + int(self.use_estimator) != 1:
            raise ValueError(f"DistillationLossSettings{tuple(self.names)}: exactly one of use_topk and use_estimator "
                             f"must be true, got use_topk={self.use_topk}, use_estimator={self.use_estimator}.")


DISTILLATION_LOSS_REGISTRY: dict[str, DistillationLossFn] = {}
"""`distillation.distillation_loss.loss_mode` -> loss function."""
DISTILLATION_SETTINGS_REGISTRY: dict[str, DistillationLossSettings] = {}
"""`loss_mode` -> what the loss needs from the teacher."""


def register_distillation_loss(loss_settings: DistillationLossSettings) -> Callable[[DistillationLossFn], DistillationLossFn]:
    """Decorator: register a distillation loss under every name of `loss_settings`.

    A name registered twice is an error, as in verl (`register_distillation_loss`,
    `verl/trainer/distillation/losses.py:75`).
    """

    def decorator(func: DistillationLossFn) -> DistillationLossFn:
        for name in loss_settings.names:
            if name in DISTILLATION_LOSS_REGISTRY:
                raise ValueError(f"Distillation loss function with name {name!r} is already registered.")
            DISTILLATION_LOSS_REGISTRY[name] = func
            DISTILLATION_SETTINGS_REGISTRY[name] = loss_settings
        return func

    return decorator


def _unknown(loss_name: str) -> ValueError:
    return ValueError(f"Unsupported distillation loss mode: {loss_name!r}. Fix: set "
                      f"distillation.distillation_loss.loss_mode to one of {sorted(DISTILLATION_LOSS_REGISTRY)}.")


def get_distillation_loss_fn(loss_name: str) -> DistillationLossFn:
    """The loss registered as `loss_name` (verl: `get_distillation_loss_fn`, `verl/trainer/distillation/losses.py:91`)."""
    if loss_name not in DISTILLATION_LOSS_REGISTRY:
        raise _unknown(loss_name)
    return DISTILLATION_LOSS_REGISTRY[loss_name]


def get_distillation_loss_settings(loss_name: str) -> DistillationLossSettings:
    """verl: `get_distillation_loss_settings` (`verl/trainer/distillation/losses.py:100`)."""
    if loss_name not in DISTILLATION_SETTINGS_REGISTRY:
        raise _unknown(loss_name)
    return DISTILLATION_SETTINGS_REGISTRY[loss_name]


# ----------------------------------------------------------------------------------------------- helpers


def _tensors(data) -> Mapping:
    """The tensors of a micro-batch: a `DataProto`'s `batch`, or a plain mapping (tests)."""
    return data.batch if hasattr(data, "batch") else data


def _global_batch_info(config, data) -> dict:
    """dp_size / batch_num_tokens / global_batch_size the engine put in `meta_info`, + `loss_scale_factor`."""
    meta = getattr(data, "meta_info", None) or {}
    return {"dp_size": int(meta.get("dp_size", 1)), "batch_num_tokens": meta.get("batch_num_tokens"),
            "global_batch_size": meta.get("global_batch_size"),
            "loss_scale_factor": cfg_get(config, "loss_scale_factor")}


def _loss_config(distillation_config):
    return cfg_get(distillation_config, "distillation_loss", {})


def _item(v) -> float:
    return float(v.detach()) if isinstance(v, torch.Tensor) else float(v)


def compute_distillation_loss_range(distillation_losses: torch.Tensor, response_mask: torch.Tensor) -> dict:
    """`distillation/loss_min` and `loss_max` over the response tokens (verl: `:109`, `compute_distillation_loss_range`)."""
    valid = distillation_losses[response_mask.bool()]
    if valid.numel() == 0:  # a micro-batch with no response token: nothing to report
        return {}
    return {"actor/distillation/loss_min": _item(valid.min()), "actor/distillation/loss_max": _item(valid.max())}


# ------------------------------------------------------------------------------------- the two families


def compute_topk_loss(config, distillation_config, data, student_logits: torch.Tensor) -> dict:
    """The logits-processor call: top-k forward KL from the student's logits and the stored teacher top-k.

    verl: `compute_topk_loss` (`verl/trainer/distillation/losses.py:123`), which picks the FSDP or
    Megatron implementation by `actor.strategy`; minirl has the FSDP one only.
    """
    from minirl.trainer.distillation.fsdp.losses import compute_forward_kl_topk as topk_from_logits

    t = _tensors(data)
    for key in ("teacher_logprobs", "teacher_ids"):
        if key not in t.keys():  # noqa: SIM118 (a TensorDict has no `in`)
            raise KeyError(f"distillation loss_mode needs the teacher's top-k: the micro-batch has no {key!r} "
                           f"(it has {sorted(t.keys())}). Were the teacher log-probs computed during rollout?")
    outputs = topk_from_logits(student_logits=student_logits, teacher_topk_log_probs=t["teacher_logprobs"],
                               teacher_topk_ids=t["teacher_ids"], config=distillation_config)
    expected = tuple(student_logits.shape[:2])
    for key, value in outputs.items():
        assert tuple(value.shape) == expected, f"{key}: {tuple(value.shape)} != {expected}"
    return outputs


@register_distillation_loss(DistillationLossSettings(names=["forward_kl_topk"], use_topk=True))
def compute_forward_kl_topk(config, distillation_config, model_output: dict, data) -> tuple[torch.Tensor, dict]:
    r"""Top-k forward KL, already computed from the logits (`compute_topk_loss`); here clamped at 0, plus metrics.

    Metrics: the mass the student and the teacher put on the teacher's top-k (`distillation/student_mass`,
    `teacher_mass`, with min/max), and with the overlap diagnostics `distillation/overlap_ratio` (the
    share of the teacher's top-k in the student's top-k) and `distillation/overlap_token_advantage`.
    Mirrors `compute_forward_kl_topk` (`verl/trainer/distillation/losses.py:306`).
    """
    for key in ("distillation_losses", "student_mass", "teacher_mass"):
        if key not in model_output:
            raise KeyError(f"forward_kl_topk: the model output has no {key!r}: the engine did not run the top-k "
                           "logits processor. The trainer must set meta_info['distillation_use_topk']=True.")
    mask = _tensors(data)["response_mask"].bool()
    losses = model_output["distillation_losses"]
    student_mass, teacher_mass = model_output["student_mass"][mask], model_output["teacher_mass"][mask]
    metrics: dict[str, float] = {}
    if mask.any():
        metrics.update({"actor/distillation/student_mass": _item(student_mass.mean()),
                        "actor/distillation/student_mass_min": _item(student_mass.min()),
                        "actor/distillation/student_mass_max": _item(student_mass.max()),
                        "actor/distillation/teacher_mass": _item(teacher_mass.mean()),
                        "actor/distillation/teacher_mass_min": _item(teacher_mass.min()),
                        "actor/distillation/teacher_mass_max": _item(teacher_mass.max())})
        count, adv = model_output.get("overlap_count"), model_output.get("overlap_token_advantage")
        if count is not None and adv is not None:
            k = int(cfg_get(_loss_config(distillation_config), "topk", _LOSS.topk))
            metrics["actor/distillation/overlap_ratio"] = _item(count[mask].float().mean() / k)
            where = mask & (count > 0)
            metrics["actor/distillation/overlap_token_advantage"] = _item(adv[where].mean()) if where.any() else 0.0
    # over k tokens neither side sums to 1, so the divergence can dip below 0
    return losses.clamp_min(0.0), metrics


@register_distillation_loss(
    DistillationLossSettings(names=["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"], use_estimator=True))
def compute_distillation_loss_reverse_kl_estimator(config, distillation_config, model_output: dict,
                                                    data) -> tuple[torch.Tensor, dict]:
    r"""A single-sample reverse-KL estimate per token: `kl_penalty(student, teacher, loss_mode)`.

    $x_t=\log\pi_\theta(y_t)-\log\nu(y_t)$ on the sampled token; k1 $=x$, abs $=|x|$, k2 $=x^2/2$,
    k3 $=e^{-x}+x-1$ (see `core_algos.kl_penalty_forward`). Metric: `distillation/abs_loss`, the mean
    $|D_t|$ (k1 can be negative). Mirrors `compute_distillation_loss_reverse_kl_estimator`
    (`verl/trainer/distillation/losses.py:373`).
    """
    t = _tensors(data)
    if "teacher_logprobs" not in t.keys():  # noqa: SIM118 (a TensorDict has no `in`)
        raise KeyError(f"distillation needs 'teacher_logprobs' in the micro-batch (it has {sorted(t.keys())}). "
                       "Were the teacher log-probs computed during rollout (distillation.enabled=True)?")
    student = model_output["log_probs"]
    teacher = t["teacher_logprobs"]
    teacher = teacher.squeeze(-1) if teacher.dim() == student.dim() + 1 else teacher
    mask = t["response_mask"].bool()
    if teacher.shape != student.shape or mask.shape != student.shape:
        raise ValueError(f"distillation: teacher log-probs {tuple(teacher.shape)}, student log-probs "
                         f"{tuple(student.shape)} and response_mask {tuple(mask.shape)} must have one shape [B, R].")
    losses = kl_penalty(logprob=student, ref_logprob=teacher.to(student.dtype),
                        kl_penalty=str(cfg_get(_loss_config(distillation_config), "loss_mode", "k3")))
    metrics = {"actor/distillation/abs_loss": _item(losses[mask].abs().mean())} if mask.any() else {}
    return losses, metrics


# ------------------------------------------------------------------------------ per-token -> scalar


def distillation_loss(config, distillation_config, model_output: dict, data) -> tuple[torch.Tensor, dict]:
    r"""The distillation term $L_{\text{distill}}$ of one micro-batch and its metrics.

    Per-token $D$ from the registered loss, clamped to `loss_max_clamp`; then either aggregated
    directly (`use_policy_gradient=False`) or used as advantages $-\operatorname{sg}[D]$ in
    `policy_loss_mode` with the distillation section's `clip_ratio`, `clip_ratio_low`,
    `clip_ratio_high` (`use_policy_gradient=True`; pg metrics renamed `actor/distillation/*`).
    Aggregation: `actor.loss_agg_mode` with the global batch numbers. Mirrors `distillation_loss`
    (`verl/trainer/distillation/losses.py:230`).
    """
    if distillation_config is None:
        raise ValueError("distillation_loss needs the distillation config (distillation.*).")
    lc = _loss_config(distillation_config)
    loss_mode = str(cfg_get(lc, "loss_mode", "k3"))
    use_pg = bool(cfg_get(lc, "use_policy_gradient", False))
    if not use_pg and loss_mode in ("kl", "k1"):  # verl refuses it in DistillationLossConfig.__post_init__
        raise ValueError(K1_SUPERVISED)
    losses, metrics = get_distillation_loss_fn(loss_mode)(config=config, distillation_config=distillation_config,
                                                          model_output=model_output, data=data)
    t = _tensors(data)
    mask = t["response_mask"].bool()
    loss_agg_mode = str(cfg_get(config, "loss_agg_mode", "token-mean"))
    metrics.update(compute_distillation_loss_range(losses, mask))
    clamp = cfg_get(lc, "loss_max_clamp")
    if clamp is not None:
        losses = losses.clamp(min=-float(clamp), max=float(clamp))  # the min side is for k1, which can be < 0
    gbi = _global_batch_info(config, data)
    if use_pg:
        # the negative divergence as a per-token reward (Thinking Machines' on-policy distillation)
        pg_config = SimpleNamespace(clip_ratio=float(cfg_get(lc, "clip_ratio", 0.2)),
                                    clip_ratio_low=cfg_get(lc, "clip_ratio_low", _LOSS.clip_ratio_low),
                                    clip_ratio_high=cfg_get(lc, "clip_ratio_high", _LOSS.clip_ratio_high),
                                    global_batch_info=gbi)
        policy_loss_fn = get_policy_loss_fn(str(cfg_get(lc, "policy_loss_mode", "vanilla")))
        loss, pg_metrics = policy_loss_fn(
            old_log_prob=t["old_log_probs"], log_prob=model_output["log_probs"], advantages=-losses.detach(),
            response_mask=mask, loss_agg_mode=loss_agg_mode, config=pg_config,
            rollout_is_weights=t["rollout_is_weights"] if "rollout_is_weights" in t.keys() else None)  # noqa: SIM118
        metrics.update({f"actor/distillation/{k.removeprefix('actor/')}": _item(v) for k, v in pg_metrics.items()})
    else:
        # back-propagate the divergence itself, as a supervised loss (GKD, arXiv:2306.13649)
        loss = agg_loss(loss_mat=losses, loss_mask=mask, loss_agg_mode=loss_agg_mode, **gbi)
    return loss, metrics


def distillation_ppo_loss(config, distillation_config, model_output: dict | None = None, data=None,
                          student_logits: torch.Tensor | None = None):
    r"""The actor's loss when `distillation.enabled`: the logits processor, or the final loss.

    - Called with `student_logits` (by the engine, while it holds the logits, only when
      `meta_info["distillation_use_topk"]`): returns the top-k tensors of `compute_topk_loss`.
    - Called with `(model_output, data)` (the ordinary loss call): returns `(loss, metrics)` with

    $$L=\begin{cases}L_{\text{ppo}}+\texttt{distillation\_loss\_coef}\cdot L_{\text{distill}} & \texttt{use\_task\_rewards}\\
    L_{\text{distill}} & \text{otherwise}\end{cases}$$

    Bound as `partial(distillation_ppo_loss, actor_config, distillation_config)` by the actor worker,
    as verl binds it (`verl/workers/engine_workers.py`). Mirrors `distillation_ppo_loss`
    (`verl/trainer/distillation/losses.py:165`).
    """
    if student_logits is not None:
        return compute_topk_loss(config, distillation_config, data, student_logits)
    lc = _loss_config(distillation_config)
    use_task_rewards = bool(cfg_get(lc, "use_task_rewards", True))
    distill, distill_metrics = distillation_loss(config, distillation_config, model_output, data)
    if not use_task_rewards and not bool(cfg_get(lc, "use_policy_gradient", False)):
        policy_loss, metrics = 0.0, {}
    else:
        policy_loss, metrics = ppo_loss(config, model_output, data)
        if not use_task_rewards:
            policy_loss = 0.0
    metrics.update(distill_metrics)
    coef = float(cfg_get(lc, "distillation_loss_coef", 1.0)) if use_task_rewards else 1.0
    loss = policy_loss + distill * coef
    metrics["actor/distillation/loss"] = _item(distill)
    return loss, metrics
