"""Parity: `minirl.trainer.distillation` against PyPI `verl==0.9.1`'s `verl.trainer.distillation`, same inputs.

verl 0.9.1's distillation losses equal the pinned commit's (a diff shows one line: 0.9.1 also accepts
`strategy="fsdp2"` in `compute_topk_loss`). verl keeps per-token tensors packed (nested, one row per
sequence over prompt + response, shifted by one like the model's outputs) and slices the response
with `no_padding_2_padding`; minirl keeps them padded `[B, R]`. The inputs below are built once in
minirl's layout and converted to verl's. verl's metrics are `Metric` objects (aggregated with
`.aggregate()`), minirl's floats under the same names with the worker's `actor/` prefix.
"""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("MINIRL_PARITY_REQUIRED") != "1":
    pytest.importorskip("verl", reason="verl is not installed here; run scripts/parity.sh")

import verl.trainer.distillation.fsdp.losses as VF
import verl.trainer.distillation.losses as V
from verl.utils.metric import Metric
from verl.workers.config import ActorConfig, DistillationConfig, DistillationLossConfig, PolicyLossConfig

import minirl.trainer.distillation.fsdp.losses as MF
import minirl.trainer.distillation.losses as M
from minirl.protocol import DataProto

pytestmark = pytest.mark.parity

ESTIMATORS = ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"]
GLOBAL = {"dp_size": 2, "batch_num_tokens": 31, "global_batch_size": 9}


def case(seed: int, B: int = 5, R: int = 6, k: int = 1, V_: int = 13, hole: bool = True):
    """Padded minirl inputs; prompts of different lengths (>= 1) and responses of lengths 1..R."""
    g = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(1, 5, (B,), generator=g)
    resp_lens = torch.randint(1, R + 1, (B,), generator=g)
    resp_lens[0] = R
    mask = (torch.arange(R)[None] < resp_lens[:, None]).long()
    if hole:
        mask[0, 1] = 0  # a tool observation inside a response
    student = -4 * torch.rand(B, R, generator=g)
    student[1, 0] = -30.0  # an unlikely sampled token
    teacher = -4 * torch.rand(B, R, k, generator=g)
    teacher[2, 0, 0] = -40.0
    old = student + 0.2 * torch.randn(B, R, generator=g)
    logits = torch.randn(B, R, V_, generator=g) * 2
    return {"prompt_lens": prompt_lens, "resp_lens": resp_lens, "mask": mask, "student": student,
            "teacher": teacher, "old": old, "logits": logits}


def packed(x: torch.Tensor, c: dict) -> torch.Tensor:
    """verl's layout of a response-side `[B, R, ...]` tensor: one row per sequence of P_i + R_i entries,
    with the response's values at positions P_i - 1 .. P_i + R_i - 2 (what `no_padding_2_padding` reads)."""
    rows = []
    for i, (p, r) in enumerate(zip(c["prompt_lens"].tolist(), c["resp_lens"].tolist())):
        row = torch.zeros(p + r, *x.shape[2:], dtype=x.dtype)
        row[p - 1:p - 1 + r] = x[i, :r]
        rows.append(row)
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def verl_data(c: dict, **extra) -> dict:
    prompts = torch.nested.as_nested_tensor([torch.ones(int(p), dtype=torch.long) for p in c["prompt_lens"]],
                                            layout=torch.jagged)
    responses = torch.nested.as_nested_tensor([torch.ones(int(r), dtype=torch.long) for r in c["resp_lens"]],
                                              layout=torch.jagged)
    return {"prompts": prompts, "responses": responses, "response_mask": c["mask"].bool(),
            "teacher_logprobs": packed(c["teacher"], c), "old_log_probs": c["old"], "max_response_len": c["mask"].shape[1],
            **GLOBAL, **extra}


def minirl_data(c: dict, **extra) -> DataProto:
    return DataProto.from_dict(tensors={"response_mask": c["mask"], "teacher_logprobs": c["teacher"],
                                        "old_log_probs": c["old"], **extra}, meta_info=dict(GLOBAL))


def configs(loss_mode: str, mode: str = "token-mean", **loss):
    settings = {"loss_mode": loss_mode, "topk": 4, "loss_max_clamp": None, "log_prob_min_clamp": None,
                "use_policy_gradient": False, **loss}
    verl_actor = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=mode,
                             policy_loss=PolicyLossConfig())
    verl_dist = DistillationConfig(enabled=False, distillation_loss=DistillationLossConfig(**settings))
    ours_actor = {"loss_agg_mode": mode, "loss_scale_factor": None}
    ours_dist = {"enabled": True, "distillation_loss": {"clip_ratio": 0.2, "clip_ratio_low": 0.2,
                                                        "clip_ratio_high": 0.2, "policy_loss_mode": "vanilla",
                                                        **settings}}
    return verl_actor, verl_dist, ours_actor, ours_dist


def values(metrics: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in metrics.items():
        v = v.aggregate() if isinstance(v, Metric) else v
        out[prefix + k] = float(v)
    return out


def test_registry(same):
    assert set(M.DISTILLATION_LOSS_REGISTRY) == set(V.DISTILLATION_LOSS_REGISTRY)
    for name in V.DISTILLATION_LOSS_REGISTRY:
        ours, theirs = M.get_distillation_loss_settings(name), V.get_distillation_loss_settings(name)
        same("get_distillation_loss_settings", (float(ours.use_topk), float(ours.use_estimator)),
             (float(theirs.use_topk), float(theirs.use_estimator)))


@pytest.mark.parametrize("loss_mode", ESTIMATORS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reverse_kl_estimator(loss_mode, seed, same):
    c = case(seed)
    va, vd, oa, od = configs(loss_mode, use_policy_gradient=True)
    theirs, tm = V.compute_distillation_loss_reverse_kl_estimator(va, vd, {"log_probs": packed(c["student"], c)},
                                                                 verl_data(c))
    ours, om = M.compute_distillation_loss_reverse_kl_estimator(oa, od, {"log_probs": c["student"]}, minirl_data(c))
    m = c["mask"].bool()
    same("compute_distillation_loss_reverse_kl_estimator", ours[m], theirs[m])
    same("compute_distillation_loss_reverse_kl_estimator", om, values(tm, "actor/"))


@pytest.mark.parametrize("loss_mode,use_pg", [("k3", False), ("k2", False), ("abs", False), ("low_var_kl", False),
                                              ("k1", True), ("k3", True), ("kl", True)])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("clamp", [None, 1.5])
@pytest.mark.parametrize("seed", [0, 1])
def test_distillation_loss(loss_mode, use_pg, mode, clamp, seed, same):
    c = case(seed)
    va, vd, oa, od = configs(loss_mode, mode, use_policy_gradient=use_pg, loss_max_clamp=clamp,
                             clip_ratio_high=0.28)
    od["distillation_loss"]["clip_ratio_high"] = 0.28
    lp_t = packed(c["student"], c).values().clone().requires_grad_()
    lp_o = c["student"].clone().requires_grad_()
    nested = torch.nested.nested_tensor_from_jagged(lp_t, packed(c["student"], c).offsets())
    theirs, tm = V.distillation_loss(va, vd, {"log_probs": nested}, verl_data(c))
    ours, om = M.distillation_loss(oa, od, {"log_probs": lp_o}, minirl_data(c))
    theirs.backward()
    ours.backward()
    grad_t = torch.zeros_like(c["student"])  # verl's gradient, back in minirl's layout
    offsets = packed(c["student"], c).offsets()
    for i, (p, r) in enumerate(zip(c["prompt_lens"].tolist(), c["resp_lens"].tolist())):
        start = int(offsets[i]) + p - 1
        grad_t[i, :r] = lp_t.grad[start:start + r]
    same("distillation_loss", (ours.detach(), lp_o.grad), (theirs.detach(), grad_t))
    same("distillation_loss", om, values(tm, "actor/"))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("min_clamp", [None, -3.0])
def test_forward_kl_topk_from_logits(seed, min_clamp, same):
    c = case(seed, k=4)
    t_lp = torch.log_softmax(torch.randn(*c["logits"].shape, generator=torch.Generator().manual_seed(seed + 7)), -1)
    vals, ids = torch.topk(t_lp, 4, dim=-1)
    _, vd, _, od = configs("forward_kl_topk", log_prob_min_clamp=min_clamp)
    # verl: one packed row of all tokens (1, N, ...); the same tokens, flattened, are minirl's [1, N, ...]
    flat = lambda x: x.reshape(1, -1, *x.shape[2:])
    nested = lambda x: torch.nested.as_nested_tensor([x.reshape(-1, x.shape[-1])], layout=torch.jagged)
    theirs = VF.compute_forward_kl_topk(flat(c["logits"]), nested(vals), nested(ids), vd, "thd")
    ours = MF.compute_forward_kl_topk(flat(c["logits"]), flat(vals), flat(ids), od)
    same("fsdp.compute_forward_kl_topk", ours, theirs)
    same("fsdp.kl_divergence", MF.kl_divergence(vals, t_lp.gather(-1, ids)), VF.kl_divergence(vals, t_lp.gather(-1, ids)))


@pytest.mark.parametrize("seed", [0, 1])
def test_forward_kl_topk_loss(seed, same):
    c = case(seed, k=4)
    B, R = c["mask"].shape
    g = torch.Generator().manual_seed(seed)
    out = {"distillation_losses": torch.randn(B, R, generator=g), "student_mass": torch.rand(B, R, generator=g),
           "teacher_mass": torch.rand(B, R, generator=g), "overlap_count": torch.randint(0, 5, (B, R), generator=g),
           "overlap_token_advantage": torch.randn(B, R, generator=g)}
    va, vd, oa, od = configs("forward_kl_topk")
    theirs, tm = V.compute_forward_kl_topk(va, vd, {k: packed(v, c) for k, v in out.items()}, verl_data(c))
    ours, om = M.compute_forward_kl_topk(oa, od, out, minirl_data(c))
    m = c["mask"].bool()
    same("compute_forward_kl_topk", ours[m], theirs[m])
    same("compute_forward_kl_topk", om, values(tm, "actor/"))
