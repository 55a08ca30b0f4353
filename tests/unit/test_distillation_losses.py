"""On-policy distillation losses (`minirl.trainer.distillation`) against their formulas.

Random inputs, and the edges: a micro-batch whose mask is all zero, a single token, extreme
log-probs (a teacher that gives the sampled token probability e^-1e4). PyPI verl's own functions are
compared in `tests/parity/test_parity_distillation.py`.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from minirl.protocol import DataProto
from minirl.trainer.distillation import (
    DISTILLATION_LOSS_REGISTRY,
    DistillationLossSettings,
    distillation_loss,
    distillation_ppo_loss,
    get_distillation_loss_fn,
    get_distillation_loss_settings,
    is_distillation_enabled,
    register_distillation_loss,
)
from minirl.trainer.distillation.fsdp.losses import compute_forward_kl_topk, kl_divergence
from minirl.trainer.ppo import core_algos

ESTIMATORS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def actor_cfg(**kw):
    base = {"loss_agg_mode": "token-mean", "clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2,
            "clip_ratio_c": 3.0, "entropy_coeff": 0.0, "use_kl_loss": False, "kl_loss_coef": 0.001,
            "kl_loss_type": "low_var_kl", "loss_scale_factor": None, "policy_loss": {"loss_mode": "vanilla"}}
    base.update(kw)
    return OmegaConf.create(base)


def dist_cfg(**kw):
    loss = {"loss_mode": "k3", "topk": 4, "use_task_rewards": True, "distillation_loss_coef": 1.0,
            "loss_max_clamp": None, "log_prob_min_clamp": None, "use_policy_gradient": False,
            "policy_loss_mode": "vanilla", "clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2}
    loss.update(kw)
    return OmegaConf.create({"enabled": True, "distillation_loss": loss})


def micro_batch(seed=0, B=4, R=6, mask=None, k=1, meta=None):
    g = torch.Generator().manual_seed(seed)
    if mask is None:
        lengths = torch.randint(1, R + 1, (B,), generator=g)
        mask = (torch.arange(R)[None] < lengths[:, None]).long()
    student = -3 * torch.rand(B, R, generator=g)
    teacher = -3 * torch.rand(B, R, k, generator=g)
    tensors = {"response_mask": mask, "teacher_logprobs": teacher, "old_log_probs": student + 0.1 * torch.randn(B, R, generator=g),
               "advantages": torch.randn(B, R, generator=g)}
    data = DataProto.from_dict(tensors=tensors, meta_info=dict(meta or {}))
    return data, {"log_probs": student.clone().requires_grad_(True)}


# ------------------------------------------------------------------------------------------ registry


def test_registry_holds_verls_names():
    assert sorted(DISTILLATION_LOSS_REGISTRY) == sorted([*ESTIMATORS, "forward_kl_topk"])
    assert get_distillation_loss_settings("forward_kl_topk").use_topk
    assert all(get_distillation_loss_settings(n).use_estimator for n in ESTIMATORS)
    with pytest.raises(ValueError, match="loss_mode to one of"):
        get_distillation_loss_fn("reverse_kl")
    with pytest.raises(ValueError, match="already registered"):
        register_distillation_loss(DistillationLossSettings(names="k3", use_estimator=True))(lambda **kw: None)
    with pytest.raises(ValueError, match="exactly one"):
        DistillationLossSettings(names="x", use_topk=True, use_estimator=True)
    assert is_distillation_enabled({"enabled": True}) and not is_distillation_enabled(None)


# ------------------------------------------------------------------------------------------ estimators


def _expected(mode: str, s: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    x = s - t
    return {"kl": x, "k1": x, "abs": x.abs(), "mse": 0.5 * x**2, "k2": 0.5 * x**2,
            "low_var_kl": (torch.exp(-x) + x - 1).clamp(-10, 10), "k3": (torch.exp(-x) + x - 1).clamp(-10, 10)}[mode]


@pytest.mark.parametrize("mode", ESTIMATORS)
@pytest.mark.parametrize("seed", [0, 1])
def test_estimator_per_token_matches_formula(mode, seed):
    data, out = micro_batch(seed)
    fn = get_distillation_loss_fn(mode)
    losses, metrics = fn(config=actor_cfg(), distillation_config=dist_cfg(loss_mode=mode), model_output=out, data=data)
    want = _expected(mode, out["log_probs"].detach(), data.batch["teacher_logprobs"].squeeze(-1))
    torch.testing.assert_close(losses.detach(), want, atol=1e-6, rtol=0)
    m = data.batch["response_mask"].bool()
    assert metrics["actor/distillation/abs_loss"] == pytest.approx(float(want[m].abs().mean()), abs=1e-6)


@pytest.mark.parametrize("mode", ["k3", "k2", "abs"])
def test_supervised_loss_is_token_mean_and_gradient_matches(mode):
    data, out = micro_batch(3)
    loss, metrics = distillation_loss(actor_cfg(), dist_cfg(loss_mode=mode), out, data)
    s, t = out["log_probs"], data.batch["teacher_logprobs"].squeeze(-1)
    m = data.batch["response_mask"].float()
    per_token = _expected(mode, s, t)
    want = (per_token * m).sum() / m.sum()
    assert float(loss.detach()) == pytest.approx(float(want.detach()), abs=1e-6)
    loss.backward()
    x = (s - t).detach()
    dk = {"k3": 1 - torch.exp(-x), "k2": x, "abs": torch.sign(x)}[mode]  # d D / d log pi
    torch.testing.assert_close(s.grad, dk * m / m.sum(), atol=1e-6, rtol=0)
    assert metrics["actor/distillation/loss_max"] >= metrics["actor/distillation/loss_min"]


def test_k1_as_supervised_loss_is_refused():
    data, out = micro_batch(0)
    with pytest.raises(ValueError, match="use_policy_gradient=True"):
        distillation_loss(actor_cfg(), dist_cfg(loss_mode="k1"), out, data)


def test_policy_gradient_path_is_vanilla_ppo_with_minus_divergence_as_advantage():
    data, out = micro_batch(4)
    dc = dist_cfg(loss_mode="k1", use_policy_gradient=True, clip_ratio_high=0.28)
    loss, metrics = distillation_loss(actor_cfg(), dc, out, data)
    s, t = out["log_probs"].detach(), data.batch["teacher_logprobs"].squeeze(-1)
    ref, ref_metrics = core_algos.compute_policy_loss_vanilla(
        old_log_prob=data.batch["old_log_probs"], log_prob=out["log_probs"].detach(), advantages=t - s,
        response_mask=data.batch["response_mask"].bool(), loss_agg_mode="token-mean",
        config=SimpleNamespace(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, global_batch_info={}))
    assert float(loss.detach()) == pytest.approx(float(ref), abs=1e-6)
    assert metrics["actor/distillation/pg_clipfrac"] == pytest.approx(ref_metrics["actor/pg_clipfrac"])
    # the advantage is detached: no gradient flows through the teacher's "reward"
    loss.backward()
    assert torch.isfinite(out["log_probs"].grad).all()


def test_loss_max_clamp_clamps_both_sides():
    data, out = micro_batch(5)
    out["log_probs"].data[0, 0] = -50.0  # k1 very negative at one token
    dc = dist_cfg(loss_mode="k1", use_policy_gradient=True, loss_max_clamp=2.0, use_task_rewards=False)
    _, metrics = distillation_loss(actor_cfg(), dc, out, data)
    assert metrics["actor/distillation/loss_min"] < -2.0  # the range is logged before the clamp, as verl does
    losses, _ = get_distillation_loss_fn("k1")(config=None, distillation_config=dc, model_output=out, data=data)
    assert float(losses.detach().clamp(-2, 2).min()) == -2.0


# ------------------------------------------------------------------------------------------ edges


def test_all_masked_micro_batch_gives_zero_loss_and_no_range_metrics():
    mask = torch.zeros(3, 5, dtype=torch.long)
    data, out = micro_batch(6, B=3, R=5, mask=mask, meta={"batch_num_tokens": 7, "dp_size": 1})
    loss, metrics = distillation_loss(actor_cfg(), dist_cfg(), out, data)
    assert float(loss.detach()) == 0.0 and "actor/distillation/loss_min" not in metrics
    loss.backward()
    assert float(out["log_probs"].grad.abs().sum()) == 0.0


def test_one_token():
    mask = torch.tensor([[1]])
    data, out = micro_batch(7, B=1, R=1, mask=mask)
    loss, _ = distillation_loss(actor_cfg(), dist_cfg(loss_mode="k3"), out, data)
    x = float(out["log_probs"].detach()[0, 0] - data.batch["teacher_logprobs"][0, 0, 0])
    assert float(loss.detach()) == pytest.approx(math.exp(-x) + x - 1, abs=1e-6)


def test_extreme_log_probs_stay_finite():
    data, out = micro_batch(8, B=2, R=3)
    data.batch["teacher_logprobs"][0, :, 0] = -1e4  # the teacher all but forbids the student's token
    out["log_probs"].data[1, :] = -1e4  # the student sampled a token it gives probability ~0
    for mode in ESTIMATORS:
        use_pg = mode in ("kl", "k1")
        loss, metrics = distillation_loss(actor_cfg(), dist_cfg(loss_mode=mode, use_policy_gradient=use_pg), out, data)
        assert math.isfinite(float(loss.detach())), mode
        assert all(math.isfinite(v) for v in metrics.values()), (mode, metrics)
    k3, _ = get_distillation_loss_fn("k3")(config=None, distillation_config=dist_cfg(), model_output=out, data=data)
    assert float(k3.detach().max()) == 10.0  # verl's k3 clamp


# ------------------------------------------------------------------------------------------ combination


@pytest.mark.parametrize("use_task_rewards,use_pg", [(True, False), (False, False), (True, True), (False, True)])
def test_distillation_ppo_loss_combines_as_verl(use_task_rewards, use_pg):
    data, out = micro_batch(9)
    mode = "k1" if use_pg else "k3"
    dc = dist_cfg(loss_mode=mode, use_task_rewards=use_task_rewards, use_policy_gradient=use_pg,
                  distillation_loss_coef=0.5)
    loss, metrics = distillation_ppo_loss(actor_cfg(), dc, out, data)
    from minirl.workers.utils.losses import ppo_loss

    ppo, _ = ppo_loss(actor_cfg(), out, data)
    distill, _ = distillation_loss(actor_cfg(), dc, out, data)
    want = float(ppo.detach()) + 0.5 * float(distill.detach()) if use_task_rewards else float(distill.detach())
    assert float(loss.detach()) == pytest.approx(want, abs=1e-6)
    assert metrics["actor/distillation/loss"] == pytest.approx(float(distill.detach()), abs=1e-6)
    assert ("actor/pg_loss" in metrics) == (use_task_rewards or use_pg)


# ------------------------------------------------------------------------------------------ top-k


def _topk_case(seed=0, B=2, R=4, V=11, k=4, same=False):
    g = torch.Generator().manual_seed(seed)
    student_logits = torch.randn(B, R, V, generator=g) * 2
    teacher_logits = student_logits.clone() if same else torch.randn(B, R, V, generator=g) * 2
    t_lp = torch.log_softmax(teacher_logits, -1)
    vals, ids = torch.topk(t_lp, k, dim=-1)
    return student_logits, vals, ids, t_lp


def test_topk_forward_kl_matches_formula():
    logits, vals, ids, _ = _topk_case()
    out = compute_forward_kl_topk(logits, vals, ids, dist_cfg())
    s_lp = torch.log_softmax(logits, -1).gather(-1, ids)
    want = (vals.exp() * (vals - s_lp)).sum(-1)
    torch.testing.assert_close(out["distillation_losses"], want, atol=1e-6, rtol=0)
    torch.testing.assert_close(out["teacher_mass"], vals.exp().sum(-1), atol=1e-6, rtol=0)
    torch.testing.assert_close(kl_divergence(s_lp, vals), want, atol=1e-6, rtol=0)


def test_topk_is_exact_forward_kl_when_k_is_the_vocabulary():
    logits, vals, ids, t_lp = _topk_case(1, k=11)
    out = compute_forward_kl_topk(logits, vals, ids, dist_cfg())
    full = (t_lp.exp() * (t_lp - torch.log_softmax(logits, -1))).sum(-1)
    torch.testing.assert_close(out["distillation_losses"], full, atol=1e-5, rtol=0)
    torch.testing.assert_close(out["student_mass"], torch.ones_like(full), atol=1e-5, rtol=0)
    same = compute_forward_kl_topk(*_topk_case(2, k=11, same=True)[:3], dist_cfg())
    assert float(same["distillation_losses"].abs().max()) < 1e-5
    assert int(same["overlap_count"].min()) == 11


def test_topk_log_prob_min_clamp():
    logits, vals, ids, _ = _topk_case(3)
    logits[..., :] = 0.0
    logits[..., 0] = 60.0  # the student puts ~all mass on token 0: log-probs of the others ~ -60
    out = compute_forward_kl_topk(logits, vals, ids, dist_cfg(log_prob_min_clamp=-10.0))
    s_lp = torch.log_softmax(logits, -1).gather(-1, ids).clamp_min(-10.0)
    want = (vals.exp() * (vals.clamp_min(-10.0) - s_lp)).sum(-1)
    torch.testing.assert_close(out["distillation_losses"], want, atol=1e-5, rtol=0)


def test_topk_through_the_loss_clamps_at_zero_and_reports_mass():
    logits, vals, ids, _ = _topk_case(4)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    data = DataProto.from_dict(tensors={"response_mask": mask, "teacher_logprobs": vals, "teacher_ids": ids,
                                        "old_log_probs": torch.zeros(2, 4), "advantages": torch.zeros(2, 4)})
    loss_fn = lambda **kw: distillation_ppo_loss(actor_cfg(), dist_cfg(loss_mode="forward_kl_topk", use_task_rewards=False), **kw)
    processed = loss_fn(student_logits=logits, data=data)  # the engine's logits-processor call
    out = {"log_probs": torch.log_softmax(logits, -1).gather(-1, torch.zeros(2, 4, 1, dtype=torch.long)).squeeze(-1),
           **processed}
    loss, metrics = loss_fn(model_output=out, data=data)
    m = mask.bool()
    want = processed["distillation_losses"].clamp_min(0)[m].mean()
    assert float(loss.detach()) == pytest.approx(float(want.detach()), abs=1e-6)
    assert metrics["actor/distillation/teacher_mass"] == pytest.approx(float(vals.exp().sum(-1)[m].mean()), abs=1e-6)
    assert 0.0 <= metrics["actor/distillation/overlap_ratio"] <= 1.0


def test_topk_without_teacher_ids_says_what_is_missing():
    logits, vals, _, _ = _topk_case(5)
    data = DataProto.from_dict(tensors={"response_mask": torch.ones(2, 4), "teacher_logprobs": vals})
    with pytest.raises(KeyError, match="teacher_ids"):
        distillation_ppo_loss(actor_cfg(), dist_cfg(loss_mode="forward_kl_topk"), student_logits=logits, data=data)
