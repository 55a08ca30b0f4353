"""The loss functions a `TrainingWorker` hands to its engine: PPO policy loss, value loss, SFT loss.

verl: `ppo_loss` (`verl/workers/utils/losses.py:57`), `value_loss` (`verl/workers/utils/losses.py:147`),
`sft_loss` (`verl/workers/utils/losses.py:28`). Each has the engine's loss signature
`loss, metrics = fn(model_output, micro_batch)` once its config is bound with `functools.partial`.

Normalisation: the engine writes the GLOBAL mini-batch numbers (`dp_size`, `batch_num_tokens`,
`global_batch_size`) into every micro-batch's `meta_info`; `agg_loss` uses them, so the sum over
micro-batches and ranks is the mean over the whole mini-batch, however it was split.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from minirl.trainer.ppo.core_algos import agg_loss, compute_value_loss, get_policy_loss_fn, kl_penalty


def _global_batch_info(config, meta: dict) -> dict:
    return {"dp_size": int(meta.get("dp_size", 1)), "batch_num_tokens": meta.get("batch_num_tokens"),
            "global_batch_size": meta.get("global_batch_size"),
            "loss_scale_factor": config.get("loss_scale_factor") if hasattr(config, "get") else None}


class _LossConfig(SimpleNamespace):
    """Attribute view of the actor config plus `global_batch_info` (verl mutates `config.global_batch_info`)."""

    def get(self, key, default=None):
        return getattr(self, key, default)


def _as_loss_config(config, gbi: dict):
    ns = _LossConfig(**{k: config[k] for k in config.keys()})
    ns.policy_loss = config["policy_loss"]
    ns.global_batch_info = gbi
    return ns


def ppo_loss(config, model_output: dict, data) -> tuple[torch.Tensor, dict]:
    """Policy loss (+ entropy bonus, + KL loss) on one micro-batch.

    $$L = L^{pg}(\\log\\pi_\\theta, \\log\\pi_{old}, A) - c_{ent} \\cdot H + c_{kl} \\cdot \\mathrm{KL}(\\pi_\\theta \\| \\pi_{ref})$$

    Reads `old_log_probs`, `advantages`, `response_mask` (and `ref_log_prob` when `use_kl_loss`).
    """
    gbi = _global_batch_info(config, data.meta_info)
    cfg = _as_loss_config(config, gbi)
    log_prob = model_output["log_probs"]
    response_mask = data.batch["response_mask"].bool()
    policy_loss_fn = get_policy_loss_fn(config.policy_loss.loss_mode)
    pg_loss, pg_metrics = policy_loss_fn(
        old_log_prob=data.batch["old_log_probs"], log_prob=log_prob, advantages=data.batch["advantages"],
        response_mask=response_mask, loss_agg_mode=config.loss_agg_mode, config=cfg,
        rollout_is_weights=data.batch["rollout_is_weights"] if "rollout_is_weights" in data.batch.keys() else None,
    )
    metrics = {f"actor/{k}" if not k.startswith("actor/") else k: _item(v) for k, v in pg_metrics.items()}
    metrics["actor/pg_loss"] = _item(pg_loss)
    loss = pg_loss
    entropy = model_output.get("entropy")
    if entropy is not None:
        ent = agg_loss(loss_mat=entropy, loss_mask=response_mask, loss_agg_mode=config.loss_agg_mode, **gbi)
        metrics["actor/entropy_loss"] = _item(ent)
        loss = loss - float(config.entropy_coeff) * ent
    if config.use_kl_loss:
        kld = kl_penalty(logprob=log_prob, ref_logprob=data.batch["ref_log_prob"], kl_penalty=config.kl_loss_type)
        kl = agg_loss(loss_mat=kld, loss_mask=response_mask, loss_agg_mode=config.loss_agg_mode, **gbi)
        loss = loss + kl * float(config.kl_loss_coef)
        metrics["actor/kl_loss"] = _item(kl)
        metrics["actor/kl_coef"] = float(config.kl_loss_coef)
    return loss, metrics


def value_loss(config, model_output: dict, data) -> tuple[torch.Tensor, dict]:
    """Clipped value loss on one micro-batch; reads `values` (old), `returns`, `response_mask`."""
    gbi = _global_batch_info(config, data.meta_info)
    vf_loss, vf_clipfrac = compute_value_loss(
        vpreds=model_output["values"], values=data.batch["values"], returns=data.batch["returns"],
        response_mask=data.batch["response_mask"].bool(), cliprange_value=float(config.cliprange_value),
        loss_agg_mode=config.loss_agg_mode, **gbi,
    )
    return vf_loss, {"critic/vf_loss": _item(vf_loss), "critic/vf_clipfrac": _item(vf_clipfrac),
                     "critic/vpred_mean": _item((model_output["values"] * data.batch["response_mask"]).sum()
                                                / data.batch["response_mask"].sum().clamp(min=1))}


def sft_loss(config, model_output: dict, data) -> tuple[torch.Tensor, dict]:
    """Negative log-likelihood of the response tokens whose `response_mask` is 1 (the SFT loss_mask)."""
    gbi = _global_batch_info(config or {}, data.meta_info)
    nll = -model_output["log_probs"]
    loss = agg_loss(loss_mat=nll, loss_mask=data.batch["response_mask"].bool(), loss_agg_mode="token-mean", **gbi)
    return loss, {"sft/loss": _item(loss)}


def _item(v):
    return float(v.detach()) if isinstance(v, torch.Tensor) else float(v)
