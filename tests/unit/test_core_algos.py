"""Hand-computed checks of `minirl.trainer.ppo.core_algos` (no verl needed; tests/parity/ compares with verl).

Every expected number below was worked out by hand from the formula in the function's docstring;
the comments show the arithmetic. Batches include a masked token in the middle of a response (a
tool observation), a group of one and a group whose rewards are all equal.
"""

from __future__ import annotations

import ast
import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import minirl.trainer.ppo.core_algos as ca
import minirl.trainer.ppo.rollout_corr_helper as rch

T = torch.tensor


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(
        torch.as_tensor(actual).float(), torch.as_tensor(expected).float(), atol=atol, rtol=0
    )


# ------------------------------------------------------------------------------------ module contract


def test_imports_torch_numpy_and_the_two_leaf_utils_only():
    """Formulas stand alone: torch, numpy, `minirl.utils.torch_functional` and the config getter, nothing of a run.

    One import inside a function, as verl has it (`compute_policy_loss_bypass_mode`,
    `verl/trainer/ppo/core_algos.py:2413`): the loss reads the rollout-correction formulas from
    `minirl.trainer.ppo.rollout_corr_helper` when it runs.
    """
    tree = ast.parse(Path(ca.__file__).read_text())
    roots, minirl_modules, in_functions = set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_functions |= {(node.name, n.module) for n in ast.walk(node) if isinstance(n, ast.ImportFrom)}
    for node in tree.body:
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
            minirl_modules |= {a.name for a in node.names if a.name.startswith("minirl")}
        elif isinstance(node, ast.ImportFrom):
            roots.add((node.module or "").split(".")[0])
            if (node.module or "").startswith("minirl"):
                minirl_modules.add(node.module)
    assert roots <= {"__future__", "collections", "enum", "typing", "numpy", "torch", "minirl"}, roots
    assert minirl_modules <= {"minirl.utils.torch_functional", "minirl.utils.config"}, minirl_modules
    assert in_functions == {("compute_policy_loss_bypass_mode", "minirl.trainer.ppo.rollout_corr_helper")}, in_functions
    for leaf in ("minirl/utils/torch_functional.py", "minirl/utils/config.py"):  # and those import no minirl
        text = (Path(ca.__file__).parents[3] / leaf).read_text()
        assert "from minirl" not in text and "import minirl" not in text, leaf


def test_every_issue_name_is_registered():
    assert set(ca.ADV_ESTIMATOR_REGISTRY) == {
        "gae",
        "grpo",
        "rloo",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
        "remax",
        "gpg",
        "opo",
        "grpo_passk",
        "grpo_vectorized",
        "rloo_vectorized",
        "gdpo",
        "optimal_token_baseline",
        "tir_optimal_token_baseline",
    }
    assert {m.value for m in ca.AdvantageEstimator} == set(ca.ADV_ESTIMATOR_REGISTRY)
    assert set(ca.POLICY_LOSS_REGISTRY) == {
        "vanilla",
        "gspo",
        "sapo",
        "cispo",
        "gpg",
        "clip_cov",
        "kl_cov",
        "geo_mean",
        "dppo_tv",
        "dppo_kl",
        "dro",
        "bypass_mode",
    }
    assert ca.get_adv_estimator_fn(ca.AdvantageEstimator.GRPO) is ca.compute_grpo_outcome_advantage
    assert ca.get_adv_estimator_fn("grpo") is ca.compute_grpo_outcome_advantage
    assert ca.get_policy_loss_fn("vanilla") is ca.compute_policy_loss_vanilla


def test_unknown_names_list_the_registered_ones():
    with pytest.raises(
        ValueError, match=r"Unknown advantage estimator: 'gdpo2'.*'grpo'.*algorithm.adv_estimator"
    ):
        ca.get_adv_estimator_fn("gdpo2")
    with pytest.raises(ValueError, match=r"Unsupported loss mode: 'dro2'.*'vanilla'.*policy_loss.loss_mode"):
        ca.get_policy_loss_fn("dro2")


def test_register_new_names():
    @ca.register_adv_est("_test_zero")
    def zero(token_level_rewards, response_mask, **kwargs):
        return torch.zeros_like(token_level_rewards), torch.zeros_like(token_level_rewards)

    try:
        assert ca.get_adv_estimator_fn("_test_zero") is zero
        ca.register_adv_est("_test_zero")(zero)  # the same function again is fine
        with pytest.raises(ValueError, match="already registered"):
            ca.register_adv_est("_test_zero")(lambda **kw: None)
    finally:
        del ca.ADV_ESTIMATOR_REGISTRY["_test_zero"]


# ------------------------------------------------------------------------------------ masked helpers


def test_masked_helpers():
    x, m = T([1.0, float("nan"), 3.0]), T([1.0, 0.0, 1.0])
    close(ca.masked_sum(x, m), 4.0)  # the NaN under the mask does not leak
    close(ca.masked_mean(x, m), 2.0)
    close(ca.masked_var(T([1.0, 100.0, 3.0]), m), 2.0)  # ((1-2)^2 + (3-2)^2) / (2-1)
    close(ca.masked_var(T([1.0, 100.0, 3.0]), m, unbiased=False), 1.0)
    w = ca.masked_whiten(T([1.0, 100.0, 3.0]), m)
    close(w[[0, 2]], [-1 / math.sqrt(2), 1 / math.sqrt(2)])  # (x - 2) / sqrt(2)
    close(ca.masked_whiten(T([1.0, 100.0, 3.0]), m, shift_mean=False)[0], 2 - 1 / math.sqrt(2))
    close(ca.masked_mean(T([[1.0, 2.0], [5.0, 7.0]]), T([[1.0, 1.0], [0.0, 1.0]]), axis=-1), [1.5, 7.0])
    close(ca.clip_by_value(T([0.0, 5.0]), T([1.0, 1.0]), T([2.0, 6.0])), [1.0, 5.0])
    with pytest.raises(ValueError, match="at least 2 unmasked elements, got 1"):
        ca.masked_var(T([1.0, 2.0]), T([1.0, 0.0]))


def test_entropy_from_logits():
    close(ca.entropy_from_logits(torch.zeros(2, 4)), [math.log(4)] * 2)  # uniform over 4
    close(ca.entropy_from_logits(T([[100.0, 0.0, 0.0]])), [0.0])  # (almost) deterministic
    p = torch.softmax(T([1.0, 2.0, 3.0]), -1)
    close(ca.entropy_from_logits(T([1.0, 2.0, 3.0])), -(p * p.log()).sum())
    close(ca.compute_entropy_loss(torch.zeros(2, 3, 5), torch.ones(2, 3)), math.log(5))


# ------------------------------------------------------------------------------------ outcome estimators
# Rows: 0-2 group "a" (scores 1, 0, 0), 3 group "b" alone (0.7), 4-5 group "c" (0.5, 0.5: all equal).
# Row 0 has a masked token in the middle (t=1).

MASK = T(
    [[1, 0, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.float32
)
SCORES = [1.0, 0.0, 0.0, 0.7, 0.5, 0.5]
UID = np.array(["a", "a", "a", "b", "c", "c"], dtype=object)


def outcome_rewards(scores=SCORES, mask=MASK):
    """Each score on the response's last unmasked token."""
    r = torch.zeros_like(mask)
    last = mask.shape[1] - 1 - mask.flip(-1).argmax(-1)
    r[torch.arange(len(scores)), last] = T(scores)
    return r


def per_row(values):
    return T(values).unsqueeze(-1) * MASK


def test_grpo_hand_computed():
    s = math.sqrt(1 / 3)  # unbiased std of (1, 0, 0): sqrt(((2/3)^2 + 2 (1/3)^2) / 2)
    adv, ret = ca.compute_grpo_outcome_advantage(outcome_rewards(), MASK, UID)
    expected = [
        (2 / 3) / s,
        (-1 / 3) / s,
        (-1 / 3) / s,
        0.7 / (1 + 1e-6),
        0.0,
        0.0,
    ]  # group of one: mu 0, sigma 1
    close(adv, per_row(expected))
    assert adv[0, 1] == 0  # the masked middle token gets no advantage
    assert ret is adv
    adv, _ = ca.compute_grpo_outcome_advantage(outcome_rewards(), MASK, UID, norm_adv_by_std_in_grpo=False)
    close(adv, per_row([2 / 3, -1 / 3, -1 / 3, 0.7, 0.0, 0.0]))  # Dr.GRPO: no division by sigma


def test_grpo_sums_token_rewards_and_checks_index():
    r = torch.zeros(2, 3)
    r[0] = T([0.5, 0.0, 0.5])  # score 1 spread over two tokens
    adv, _ = ca.compute_grpo_outcome_advantage(r, torch.ones(2, 3), np.array([0, 0]))
    close(
        adv[:, 0], [0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5)], atol=1e-5
    )  # (1, 0): mu .5, sigma sqrt(.5)
    with pytest.raises(ValueError, match="index .* has 1 entries but the batch has 2"):
        ca.compute_grpo_outcome_advantage(r, torch.ones(2, 3), np.array(["a"]))


def test_rloo_hand_computed():
    adv, _ = ca.compute_rloo_outcome_advantage(outcome_rewards(), MASK, UID)
    # R_i - mean of the others: 1 - 0, 0 - (1+0)/2, ...; group of one keeps its raw score
    close(adv, per_row([1.0, -0.5, -0.5, 0.7, 0.0, 0.0]))


def test_opo_hand_computed():
    adv, _ = ca.compute_opo_outcome_advantage(outcome_rewards(), MASK, UID)
    b = (3 * 1.0 + 2 * 0 + 3 * 0) / (3 + 2 + 3)  # lengths 3, 2, 3 -> length-weighted baseline 0.375
    close(adv, per_row([1 - b, -b, -b, 0.7, 0.0, 0.0]))


def test_gpg_advantage_hand_computed():
    adv, _ = ca.compute_gpg_outcome_advantage(outcome_rewards(), MASK, UID)
    alpha = 6 / 4  # 6 responses, 4 non-zero scores
    close(adv, per_row([alpha * 2 / 3, -alpha / 3, -alpha / 3, alpha * 0.7, 0.0, 0.0]))
    adv, _ = ca.compute_gpg_outcome_advantage(outcome_rewards(), MASK, UID, f_norm=2.0)
    close(adv[0, 0], alpha * 2 / 3 / 2)


def test_reinforce_plus_plus_baseline_hand_computed():
    adv, ret = ca.compute_reinforce_plus_plus_baseline_outcome_advantage(outcome_rewards(), MASK, UID)
    centred = [2 / 3, -1 / 3, -1 / 3, 0.7, 0.0, 0.0]  # R - group mean (group of one: mean 0)
    tokens = np.repeat(centred, MASK.sum(-1).int().tolist())  # the unmasked tokens the whitening sees
    mean, std = tokens.mean(), tokens.std(ddof=1)
    close(adv, per_row([(c - mean) / math.sqrt(std**2 + 1e-8) for c in centred]))
    assert ret is adv


def test_grpo_passk_hand_computed():
    keep = [0, 1, 2, 4, 5]  # groups a and c (pass@k needs >= 2 per group)
    r, m, uid = outcome_rewards()[keep], MASK[keep], UID[keep]
    adv, _ = ca.compute_grpo_passk_outcome_advantage(r, m, uid, config=NS(norm_adv_by_std_in_grpo=True))
    # group a: only the best (row 0) gets (1 - 0) / sigma; group c: best == second -> 0
    close(adv, T([1 / (math.sqrt(1 / 3) + 1e-6), 0, 0, 0, 0]).unsqueeze(-1) * m)
    adv, _ = ca.compute_grpo_passk_outcome_advantage(r, m, uid, config={"norm_adv_by_std_in_grpo": False})
    close(adv[:, 0], [1.0, 0, 0, 0, 0])
    with pytest.raises(ValueError, match="at least 2 responses per prompt, got a group of 1"):
        ca.compute_grpo_passk_outcome_advantage(outcome_rewards(), MASK, UID, config=NS())
    with pytest.raises(ValueError, match="needs config"):
        ca.compute_grpo_passk_outcome_advantage(r, m, uid)


def test_grpo_vectorized_equals_grpo():
    """Hand-derived check: the scatter version gives grpo's numbers (test_grpo_hand_computed's), group of one too."""
    for norm in (True, False):
        loop, _ = ca.compute_grpo_outcome_advantage(outcome_rewards(), MASK, UID, norm_adv_by_std_in_grpo=norm)
        vec, ret = ca.compute_grpo_vectorized_outcome_advantage(outcome_rewards(), MASK, UID, norm_adv_by_std_in_grpo=norm)
        close(vec, loop, atol=1e-6)
        assert ret is vec
    vec, _ = ca.compute_grpo_vectorized_outcome_advantage(outcome_rewards(), MASK, UID)
    close(vec[3, 0], 0.7 / (1 + 1e-6))  # row 3 alone: mu 0, sigma 1


def test_rloo_vectorized_hand_computed():
    adv, _ = ca.compute_rloo_vectorized_outcome_advantage(outcome_rewards(), MASK, UID)
    # (n R_i - S_g) / (n - 1): group a (1,0,0): (3-1)/2, (0-1)/2, (0-1)/2; the group of one gets 0, not 0.7
    close(adv, per_row([1.0, -0.5, -0.5, 0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="index .* has 2 entries"):
        ca.compute_rloo_vectorized_outcome_advantage(outcome_rewards(), MASK, UID[:2])


def gdpo_case():
    """4 responses of 2 tokens, groups a (rows 0,1) and b (rows 2,3); two reward columns."""
    mask = torch.ones(4, 2)
    columns = {"uid": np.array(["a", "a", "b", "b"], dtype=object),
               "fmt": np.array([1.0, 0.0, 1.0, 1.0], dtype=object), "acc": np.array([0.0, 2.0, 3.0, 1.0], dtype=object)}
    tensors = {"prompts": torch.zeros(4, 3, dtype=torch.long), "attention_mask": torch.ones(4, 5, dtype=torch.long)}
    return mask, columns, tensors


def test_gdpo_hand_computed():
    mask, columns, tensors = gdpo_case()
    cfg = NS(gdpo_reward_keys=["fmt", "acc"], gdpo_reward_weights=[1.0, 2.0])
    adv, ret = ca.compute_gdpo_outcome_advantage(torch.zeros(4, 2), mask, columns["uid"], config=cfg,
                                                 non_tensor_batch=columns, batch=tensors)
    # GRPO of a pair (x != y) is +-s, s = (|x-y|/2) / (|x-y|/sqrt 2) = 1/sqrt 2; equal pair: 0
    # fmt: a (+s, -s), b (0, 0); acc: a (-s, +s), b (+s, -s); 1*fmt + 2*acc = (-s, s, 2s, -2s) per token.
    # Whitening over the 8 tokens (mean 0, unbiased var 20 s^2 / 7) leaves (-1, 1, 2, -2) * sqrt(7/20)
    close(adv, T([-1.0, 1.0, 2.0, -2.0]).unsqueeze(-1).expand(4, 2) * math.sqrt(7 / 20), atol=1e-5)
    assert ret is adv
    # GRPO on the sum fmt + 2 acc = (1, 4 | 7, 3) would rank the pairs the same but scale them by the spread
    with pytest.raises(ValueError, match="gdpo_reward_weights has 1 weights for 2"):
        ca.compute_gdpo_outcome_advantage(torch.zeros(4, 2), mask, columns["uid"], config=NS(gdpo_reward_keys=[
            "fmt", "acc"], gdpo_reward_weights=[1.0]), non_tensor_batch=columns, batch=tensors)
    with pytest.raises(ValueError, match="names 'format'.*not a column"):
        ca.compute_gdpo_outcome_advantage(torch.zeros(4, 2), mask, columns["uid"], config=NS(gdpo_reward_keys=[
            "format"]), non_tensor_batch=columns, batch=tensors)
    with pytest.raises(ValueError, match="needs algorithm.gdpo_reward_keys"):
        ca.compute_gdpo_outcome_advantage(torch.zeros(4, 2), mask, columns["uid"], config=NS(),
                                          non_tensor_batch=columns, batch=tensors)


def test_gdpo_without_batch_is_whitened_grpo():
    grpo, _ = ca.compute_grpo_outcome_advantage(outcome_rewards(), MASK, UID)
    gdpo, _ = ca.compute_gdpo_outcome_advantage(outcome_rewards(), MASK, UID)
    close(gdpo, ca.masked_whiten(grpo, MASK) * MASK)


def otb_case():
    """One group of two. Row 0: 4 slots, t=1 an observation, reward 1 at t=3; row 1: 2 tokens, reward 0.

    old p = 0.5 and sum pi^2 = 0.5 on row 0 (w = 1 - 2p + sum pi^2 = 0.5 a token); p = 0.1, 0.3 on row 1
    (w = 1.1). Cumulative W over unmasked tokens: row 0 (0.5, ., 1.0, 1.5), row 1 (1.1, 2.2).
    """
    mask = T([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    rewards = T([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    old = torch.log(T([[0.5] * 4, [0.1] * 4]))
    sum_pi2 = T([[0.5] * 4, [0.3] * 4])
    return rewards, mask, np.array(["g", "g"], dtype=object), old, sum_pi2


def test_optimal_token_baseline_hand_computed():
    r, m, uid, old, q = otb_case()
    adv, ret = ca.compute_optimal_token_baseline_advantage(r, m, uid, old, q)
    close(ret, [[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])  # G: reward-to-go (also at the observation t=1)
    # t=0: B = (1 * 0.5 + 0 * 1.1) / (0.5 + 1.1) = 0.3125; t=1: only row 1 (G 0) -> 0; t>=2: row 0 alone,
    # and it is the strictly longest (3 tokens vs 2): zero tail from t = 2 -> B = 0 there
    close(adv, [[1 - 0.3125, 0.0, 1.0, 1.0], [-0.3125, 0.0, 0.0, 0.0]])
    adv, _ = ca.compute_optimal_token_baseline_advantage(r, m, uid, old, q, handle_zero_tail=False)
    close(adv[0], [1 - 0.3125, 0.0, 0.0, 0.0])  # row 0 alone at t=2,3: B = its own G, A = 0
    w = T([[1.0] * 4, [2.0] * 4])  # IS weights scale w by their square: row 1 -> 4.4
    adv, _ = ca.compute_optimal_token_baseline_advantage(r, m, uid, old, q, rollout_is_weights=w)
    close(adv[0, 0], 1 - 0.5 / (0.5 + 4.4))
    adv, _ = ca.compute_optimal_token_baseline_advantage(r[:1], m[:1], uid[:1], old[:1], q[:1])
    close(adv, ret[:1] * m[:1])  # a group of one: no baseline, A = G on its tokens


def test_tir_optimal_token_baseline_aligns_policy_tokens():
    r, m, uid, old, q = otb_case()
    adv, ret = ca.compute_multi_turn_optimal_token_baseline_advantage(r, m, uid, old, q)
    # packed: row 0's tokens (t=0,2,3) are k=0,1,2, row 1's (t=0,1) k=0,1.
    # k=0: 0.5 / 1.6 = 0.3125; k=1: (1 * 1.0 + 0 * 2.2) / 3.2 = 0.3125; k=2: zero tail -> 0
    close(adv, [[0.6875, 0.0, 0.6875, 1.0], [-0.3125, -0.3125, 0.0, 0.0]])
    close(ret, [[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    # OTB compares row 0's third token with nothing (row 1 is masked at t=2); TIR with row 1's second
    otb, _ = ca.compute_optimal_token_baseline_advantage(r, m, uid, old, q)
    assert otb[0, 2] == 1.0 and adv[0, 2] == pytest.approx(0.6875)
    r2, m2 = torch.cat([r, torch.zeros(1, 4)]), torch.cat([m, torch.zeros(1, 4)])  # an empty response
    adv2, _ = ca.compute_multi_turn_optimal_token_baseline_advantage(
        r2, m2, np.array(["g", "g", "g"], dtype=object), torch.cat([old, old[:1]]), torch.cat([q, q[:1]]))
    close(adv2[:2], adv)  # it is left out of the group
    close(adv2[2], torch.zeros(4))


# ------------------------------------------------------------------------------------ token-level estimators


def test_gae_hand_computed_with_masked_middle_token():
    r, v, m = T([[0.0, 0.0, 1.0]]), T([[0.5, 9.0, 0.8]]), T([[1.0, 0.0, 1.0]])
    adv, ret = ca.compute_gae_advantage_return(r, v, m, gamma=0.9, lam=0.8)
    # t=2: delta = 1 - 0.8 = 0.2 -> A2 = 0.2
    # t=1 masked: carries A = 0.2 and V_next = 0.8 (its own value 9.0 is ignored)
    # t=0: delta = 0 + 0.9 * 0.8 - 0.5 = 0.22 -> A0 = 0.22 + 0.9 * 0.8 * 0.2 = 0.364
    close(ret, [[0.364 + 0.5, 0.2 + 9.0, 0.2 + 0.8]])  # returns use the raw advantages
    std = math.sqrt(2 * 0.082**2 + 1e-8)  # whitening over the unmasked 0.364 and 0.2 (mean 0.282)
    close(adv, [[0.082 / std, -0.082 / std, -0.082 / std]])  # the masked token is whitened too


def test_gae_gamma_lam_one_is_reward_to_go_minus_value():
    r, v, m = T([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]), T([[0.5, 0.5, 0.5], [0.0, 1.0, 0.0]]), torch.ones(2, 3)
    _, ret = ca.compute_gae_advantage_return(r, v, m, gamma=1.0, lam=1.0)
    close(ret, [[3.0, 2.0, 2.0], [3.0, 3.0, 0.0]])  # sum of rewards from t on


def test_reinforce_plus_plus_hand_computed():
    r, m = T([[0.0, 0.0, 0.0, 1.0]]), T([[1.0, 0.0, 1.0, 1.0]])
    adv, ret = ca.compute_reinforce_plus_plus_outcome_advantage(r, m, config=NS(gamma=0.5))
    # backwards: G3 = 1, G2 = 0.5, t=1 masked (return 0, running 0.5 carried), G0 = 0.25
    close(ret, [[0.25, 0.0, 0.5, 1.0]])
    g = np.array([0.25, 0.5, 1.0])
    w = (g - g.mean()) / math.sqrt(g.var(ddof=1) + 1e-8)
    close(adv, [[w[0], 0.0, w[1], w[2]]])
    with pytest.raises(ValueError, match="needs config.gamma"):
        ca.compute_reinforce_plus_plus_outcome_advantage(r, m)


def test_remax_hand_computed():
    r, m = T([[0.0, 5.0, 1.0, 0.0]]), T([[1.0, 0.0, 1.0, 1.0]])
    adv, ret = ca.compute_remax_outcome_advantage(r, T([0.25]), m)
    close(ret, [[1.0, 1.0, 1.0, 0.0]])  # reward-to-go of the masked rewards (the 5.0 is masked out)
    close(adv, [[0.75, 1.0, 0.75, -0.25]])  # minus the greedy baseline, only where unmasked


# ------------------------------------------------------------------------------------ agg_loss

LOSS, LMASK = (
    T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]),
    T([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
)


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3 tokens
        ("token-sum", 7.0),
        ("seq-mean-token-sum", 3.5),  # (3 + 4) / 2 responses; the fully masked row does not count
        ("seq-mean-token-mean", 2.75),  # (1.5 + 4) / 2
        ("seq-mean-token-sum-norm", 3.5 / 3),  # / T
    ],
)
def test_agg_loss_modes(mode, expected):
    close(ca.agg_loss(LOSS, LMASK, mode), expected)


def test_agg_loss_global_counts():
    close(ca.agg_loss(LOSS, LMASK, "token-mean", dp_size=2, batch_num_tokens=14), 7 / 14 * 2)
    close(ca.agg_loss(LOSS, LMASK, "token-sum", dp_size=2), 14.0)
    close(ca.agg_loss(LOSS, LMASK, "seq-mean-token-sum", dp_size=2, global_batch_size=4), 7 / 4 * 2)
    close(ca.agg_loss(LOSS, LMASK, "seq-mean-token-sum-norm", loss_scale_factor=7), 0.5)
    with pytest.raises(ValueError, match="dp_size=2 needs batch_num_tokens"):
        ca.agg_loss(LOSS, LMASK, "token-mean", dp_size=2)
    with pytest.raises(ValueError, match="dp_size=2 needs global_batch_size"):
        ca.agg_loss(LOSS, LMASK, "seq-mean-token-mean", dp_size=2)
    with pytest.raises(ValueError, match="Invalid loss_agg_mode: 'mean'.*token-mean"):
        ca.agg_loss(LOSS, LMASK, "mean")


# ------------------------------------------------------------------------------------ policy losses


@dataclasses.dataclass
class _Actor:
    clip_ratio: float = 0.2
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    global_batch_info: dict = dataclasses.field(default_factory=dict)


def vanilla_case():
    ratio = T([[1.5, 0.5, 1.0, 1.5, 5.0, 0.5]])
    adv = T([[1.0, 1.0, -1.0, -1.0, -1.0, -1.0]])
    mask = T([[1.0, 1.0, 0.0, 1.0, 1.0, 1.0]])  # t=2 masked (and its log-ratio is huge below)
    old = torch.full((1, 6), -2.0)
    log_prob = (old + ratio.log()).clone()
    log_prob[0, 2] = 40.0  # log-ratio 42, clamped to 20 before exp: stays finite
    return old, log_prob.requires_grad_(), adv, mask


@pytest.mark.parametrize(
    "config",
    [
        _Actor(),
        NS(clip_ratio=0.2, clip_ratio_low=None, clip_ratio_high=None),
        {"clip_ratio": 0.2},
        OmegaConf.create({"clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": 3.0}),
    ],
    ids=["dataclass", "namespace", "dict", "dictconfig"],
)
def test_vanilla_dual_clip_hand_computed(config):
    old, lp, adv, mask = vanilla_case()
    loss, metrics = ca.compute_policy_loss_vanilla(old, lp, adv, mask, "token-mean", config)
    # per token: A=+1,rho=1.5 -> max(-1.5, -1.2) = -1.2 (clipped) | A=+1,rho=.5 -> max(-.5,-.8) = -.5
    # A=-1,rho=1.5 -> 1.5 | A=-1,rho=5 -> max(5, 1.2) = 5, dual-clipped to 3
    # A=-1,rho=.5 -> max(.5, .8) = .8 (clipped)
    close(loss, (-1.2 - 0.5 + 1.5 + 3.0 + 0.8) / 5)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 5)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 5)
    kl = -sum(math.log(x) for x in [1.5, 0.5, 1.5, 5.0, 0.5]) / 5
    assert metrics["actor/ppo_kl"] == pytest.approx(kl, abs=1e-6)
    loss.backward()  # d(-A rho)/d log pi = -A rho where unclipped; 0 where clipped or masked
    close(lp.grad, [[0.0, -0.5 / 5, 0.0, 1.5 / 5, 0.0, 0.0]])


def test_vanilla_asymmetric_clip_weights_and_global_info():
    old, lp, adv, mask = vanilla_case()
    cfg = _Actor(clip_ratio_high=0.28, global_batch_info={"dp_size": 2, "batch_num_tokens": 10})
    loss, _ = ca.compute_policy_loss_vanilla(old, lp, adv, mask, "token-mean", cfg)
    close(loss, (-1.28 - 0.5 + 1.5 + 3.0 + 0.8) / 10 * 2)  # clip-higher; global token count, times dp_size
    loss_w, _ = ca.compute_policy_loss_vanilla(
        old, lp, adv, mask, "token-mean", _Actor(), rollout_is_weights=torch.full((1, 6), 2.0)
    )
    close(loss_w, 2 * (-1.2 - 0.5 + 1.5 + 3.0 + 0.8) / 5)


def test_policy_loss_config_errors():
    old, lp, adv, mask = vanilla_case()
    with pytest.raises(ValueError, match="needs `config`"):
        ca.compute_policy_loss_vanilla(old, lp, adv, mask)
    with pytest.raises(ValueError, match="clip_ratio_c .* must be > 1.0, got 0.5"):
        ca.compute_policy_loss_vanilla(old, lp, adv, mask, config=_Actor(clip_ratio_c=0.5))


def test_gspo_sequence_ratio_straight_through():
    old = torch.zeros(1, 3)
    lp = T([[0.2, 0.4, 5.0]]).requires_grad_()  # log-ratios; the 5.0 is masked out
    adv, mask = torch.ones(1, 3), T([[1.0, 1.0, 0.0]])
    s = math.exp(0.3)  # geometric mean of the token ratios: exp((0.2 + 0.4) / 2)
    loss, m = ca.compute_policy_loss_gspo(old, lp, adv, mask, "token-sum", NS(clip_ratio=0.5))
    close(loss, -s)  # loss_agg_mode is ignored: always seq-mean-token-mean
    loss.backward()  # value s, gradient s on each token's own log-prob, / L = 2
    close(lp.grad, [[-s / 2, -s / 2, 0.0]])
    assert m["actor/pg_clipfrac"] == 0 and m["actor/pg_clipfrac_lower"] == 0
    assert m["actor/ppo_kl"] == pytest.approx(-0.3)
    loss, m = ca.compute_policy_loss_gspo(old, lp, adv, mask, config=NS(clip_ratio=0.2))
    close(loss, -1.2)  # s = 1.35 clipped to 1.2
    assert m["actor/pg_clipfrac"] == 1.0


def test_sapo_gate_hand_computed():
    lp = torch.zeros(1, 2, requires_grad=True)
    loss, m = ca.compute_policy_loss_sapo(
        torch.zeros(1, 2), lp, T([[1.0, -1.0]]), torch.ones(1, 2), config=NS(tau_pos=1.0, tau_neg=1.05)
    )
    # rho = 1: gate = sigmoid(0) * 4 / tau = 2 / tau  ->  (-2/1 + 2/1.05) / 2 tokens
    close(loss, (-2.0 + 2 / 1.05) / 2)
    loss.backward()  # slope of the gate at rho=1 is 1: the plain policy gradient -A, / 2 tokens
    close(lp.grad, [[-0.5, 0.5]])
    assert m == {"actor/pg_clipfrac": 0.0, "actor/ppo_kl": 0.0, "actor/pg_clipfrac_lower": 0.0}


def test_cispo_keeps_gradient_of_clipped_tokens():
    old = T([[-1.0 - math.log(1.5)]])
    lp = T([[-1.0]]).requires_grad_()  # rho = 1.5
    loss, m = ca.compute_policy_loss_cispo(
        old, lp, T([[1.0]]), T([[1.0]]), config=NS(clip_ratio_low=0.2, clip_ratio_high=0.28)
    )
    close(loss, -1.28 * 1.0 * -1.0)  # -sg[clip(1.5)] * A * log pi
    loss.backward()
    close(lp.grad, [[-1.28]])  # not zero, unlike PPO's clipped token
    assert m["actor/pg_clipfrac"] == 1.0


def test_gpg_loss_is_reinforce():
    lp = T([[-0.5, -1.0, 7.0]]).requires_grad_()
    loss, m = ca.compute_policy_loss_gpg(
        torch.zeros(1, 3), lp, T([[2.0, 1.0, 1.0]]), T([[1.0, 1.0, 0.0]]), config=NS()
    )
    close(loss, (1.0 + 1.0) / 2)  # -A log pi: 2 * .5 and 1 * 1
    loss.backward()
    close(lp.grad, [[-1.0, -0.5, 0.0]])
    assert m == {}


def cov_case():
    # A centred at 0, log pi centred at -2 -> covariance terms (3)(1) = 3, (-1)(-1) = 1, 0, 0
    adv = T([[3.0, -1.0, -1.0, -1.0]])
    lp = T([[-1.0, -3.0, -2.0, -2.0]])
    return adv, lp, torch.ones(1, 4)


def test_clip_cov_hand_computed():
    adv, lp, mask = cov_case()
    lp = lp.clone().requires_grad_()
    cfg = NS(clip_ratio=0.2, policy_loss=NS(clip_cov_ratio=0.5, clip_cov_lb=1.0, clip_cov_ub=5.0))
    loss, m = ca.compute_policy_loss_clip_cov(lp.detach().clone(), lp, adv, mask, config=cfg)
    # rho = 1 everywhere; only the token with cov 3 lies in (1, 5): its loss (-3) is dropped
    close(loss, (0 + 1 + 1 + 1) / 4)
    assert m == {"actor/pg_clipfrac": 0.25, "actor/ppo_kl": 0.0}
    loss.backward()
    close(lp.grad, [[0.0, 0.25, 0.25, 0.25]])


def test_kl_cov_hand_computed():
    adv, lp, mask = cov_case()
    cfg = NS(policy_loss=NS(kl_cov_ratio=0.25, ppo_kl_coef=0.5))
    loss, m = ca.compute_policy_loss_kl_cov(lp - 0.1, lp, adv, mask, config=cfg)
    # top-1 covariance token (A=3) gets + 0.5 * |0.1|; the -A rho terms sum to 0 (sum A = 0)
    close(loss, 0.05 / 4)
    assert m == {"actor/ppo_kl": pytest.approx(0.1)}


def test_geo_mean_hand_computed():
    cfg = NS(clip_ratio=0.2)
    old, mask = torch.zeros(1, 3), T([[1.0, 1.0, 0.0]])
    loss, m = ca.compute_policy_loss_geo_mean(
        old, T([[0.1, 0.5, 9.0]]), T([[1.0, 1.0, 1.0]]), mask, config=cfg
    )
    close(loss, -math.exp((0.1 + 0.2) / 2))  # A > 0: log-ratio 0.5 clipped to 0.2; mean 0.15
    assert (m["actor/pg_clipfrac"], m["actor/pg_clipfrac_lower"]) == (0.5, 0.0)
    loss, m = ca.compute_policy_loss_geo_mean(
        old, T([[-0.1, -0.5, 9.0]]), -torch.ones(1, 3), mask, config=cfg
    )
    close(loss, math.exp(-0.15))  # A < 0: -0.5 clipped to -0.2
    assert (m["actor/pg_clipfrac"], m["actor/pg_clipfrac_lower"]) == (0.0, 0.5)


def dppo_case():
    """p_old = 0.5 everywhere but the last token (0.1); A = +1, +1, -1, -1, -1."""
    p_old, p = T([[0.5, 0.5, 0.5, 0.5, 0.1]]), T([[0.9, 0.6, 0.2, 0.45, 0.45]])
    return p_old.log(), p.log().requires_grad_(), T([[1.0, 1.0, -1.0, -1.0, -1.0]]), torch.ones(1, 5)


def test_dppo_tv_hand_computed():
    old, lp, adv, mask = dppo_case()
    cfg = _Actor(clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0)
    loss, m = ca.compute_policy_loss_dppo_tv(old, lp, adv, mask, "token-mean", cfg)
    # p - p_old = 0.4 (A>0: > 0.2, out), 0.1 (in), -0.3 (A<0: < -0.2, out), -0.05 (in), 0.35 (A<0: in)
    # in: -A sg[min(rho, 3)] log p: -1.2 log .6, +0.9 log .45, + min(4.5, 3) log .45
    kept = [-1.2 * math.log(0.6), 0.9 * math.log(0.45), 3.0 * math.log(0.45)]
    close(loss, sum(kept) / 5)
    assert m["actor/pg_clipfrac"] == pytest.approx(2 / 5)  # outside the trust region
    assert m["actor/pg_clipfrac_lower"] == pytest.approx(1 / 5)  # rho = 4.5 truncated at c = 3
    loss.backward()  # the gradient of -A w log p is -A w: PPO's unclipped gradient, 0 outside
    close(lp.grad, [[0.0, -1.2 / 5, 0.0, 0.9 / 5, 3.0 / 5]])


def test_dppo_kl_cuts_a_likely_token_pushed_to_certainty():
    old, lp = torch.log(T([[0.9, 0.5]])), torch.log(T([[0.999, 0.6]]))
    adv, mask, cfg = torch.ones(1, 2), torch.ones(1, 2), _Actor()
    # p: 0.9 -> 0.999 moves the probability by only 0.099 (TV 0.099 <= 0.2: kept by dppo_tv), but the
    # binary KL 0.9 ln(.9/.999) + 0.1 ln(.1/.001) = 0.367 > 0.2: dppo_kl drops it
    _, tv = ca.compute_policy_loss_dppo_tv(old, lp, adv, mask, "token-mean", cfg)
    loss, kl = ca.compute_policy_loss_dppo_kl(old, lp, adv, mask, "token-mean", cfg)
    assert tv["actor/pg_clipfrac"] == 0.0 and kl["actor/pg_clipfrac"] == 0.5
    close(loss, -(0.6 / 0.5) * math.log(0.6) / 2)  # only the second token: KL 0.0204 <= 0.2
    # a token whose probability fell while A > 0 is never cut (it moved against the push)
    _, kl = ca.compute_policy_loss_dppo_kl(torch.log(T([[0.9]])), torch.log(T([[0.01]])), torch.ones(1, 1),
                                           torch.ones(1, 1), "token-mean", cfg)
    assert kl["actor/pg_clipfrac"] == 0.0


def test_dro_hand_computed():
    old, lp = torch.log(T([[0.25]])), torch.log(T([[0.5]])).requires_grad_()  # log-ratio ln 2
    cfg = NS(policy_loss=NS(dro_beta=0.5))
    loss, m = ca.compute_policy_loss_dro(old, lp, torch.ones(1, 1), torch.ones(1, 1), "token-mean", cfg)
    close(loss, -(math.log(0.5) - 0.25 * math.log(2) ** 2))  # -(A log p - beta/2 x^2)
    loss.backward()
    close(lp.grad, [[-(1 - 0.5 * math.log(2))]])  # -(A - beta x): the penalty shrinks the step
    assert m == {"actor/ppo_kl": pytest.approx(-math.log(2))}
    with pytest.raises(ValueError, match="dro_beta > 0.*got None"):
        ca.compute_policy_loss_dro(old, lp, torch.ones(1, 1), torch.ones(1, 1), config=NS(policy_loss=NS()))


def test_rollout_correction_weights_hand_computed():
    x, mask = torch.log(T([[3.0, 1.0, 0.25, 7.0]])), T([[1.0, 1.0, 1.0, 0.0]])
    w, m = rch.compute_rollout_correction_weights(x, mask, "token", 2.0)
    close(w, [[2.0, 1.0, 0.25, 0.0]])  # truncated at 2; the masked token is 0
    assert m["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 3)  # 3 > 2
    assert m["rollout_is_ratio_fraction_low"] == pytest.approx(1 / 3)  # 0.25 < 1/2
    assert m["rollout_is_mean"] == pytest.approx(3.25 / 3)
    w, _ = rch.compute_rollout_correction_weights(x, mask, "token", "0.5_2.0")
    close(w, [[0.0, 1.0, 0.0, 0.0]])  # IcePop: zero outside [0.5, 2]
    w, _ = rch.compute_rollout_correction_weights(x, mask, "sequence", 5.0)
    close(w, [[0.75, 0.75, 0.75, 0.0]])  # exp(ln 3 + 0 + ln .25) for every token of the response
    w, m = rch.compute_rollout_correction_weights(x, mask, "token", 2.0, rollout_is_batch_normalize=True)
    close(w, T([[2.0, 1.0, 0.25, 0.0]]) / (3.25 / 3))
    assert m["rollout_is_batch_norm_factor"] == pytest.approx(3.25 / 3)
    with pytest.raises(ValueError, match="rollout_is_threshold='2_1'"):
        rch.compute_rollout_correction_weights(x, mask, "token", "2_1")
    with pytest.raises(ValueError, match="rollout_is='tokens'"):
        rch.compute_rollout_correction_weights(x, mask, "tokens", 2.0)


def test_rollout_rejection_mask_hand_computed():
    x, mask = torch.log(T([[3.0, 1.0, 0.6], [1.1, 0.9, 1.0]])), torch.ones(2, 3)
    # token_k1 keeps -log r in [ln(1/2), ln 2]: ratios 3 out, 1 and 0.6 in
    kept, m = rch.compute_rollout_rejection_mask(x, mask, "token_k1", 2.0)
    close(kept, [[0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    assert m["rollout_rs_masked_fraction"] == pytest.approx(1 / 6)
    assert m["rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 2)
    # seq_max_k2: max 0.5 (log r)^2 per response: row 0 0.60 > 0.1 (dropped whole), row 1 0.007
    kept, _ = rch.compute_rollout_rejection_mask(x, mask, "seq_max_k2", 0.1)
    close(kept, [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    with pytest.raises(ValueError, match=r"option\(s\) \['token_k4'\] unknown"):
        rch.compute_rollout_rejection_mask(x, mask, "token_k4", 1.0)
    with pytest.raises(ValueError, match="needs rollout_rs_threshold"):
        rch.compute_rollout_rejection_mask(x, mask, "token_k2", None)


def bypass_config(**rc):
    return _Actor(clip_ratio_high=0.28) if rc is None else NS(
        clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, global_batch_info={},
        policy_loss=NS(rollout_correction=NS(**rc)))


def test_bypass_mode_dispatch():
    old, lp, adv, mask = vanilla_case()
    lp = lp.detach()
    vanilla, _ = ca.compute_policy_loss_vanilla(old, lp, adv, mask, "token-mean", bypass_config())
    loss, m = ca.compute_policy_loss_bypass_mode(old, lp, adv, mask, "token-mean",
                                                 bypass_config(rollout_is="sequence", rollout_is_threshold=2.0))
    close(loss, vanilla)  # ppo_clip: the ratio already is the IS weight; the weights are only measured
    assert "rollout_corr/rollout_is_mean" in m and "actor/pg_clipfrac" in m and "rollout_corr/kl" in m
    # reinforce with token weights min(rho, 2): -A log pi w, aggregated over the unmasked tokens
    loss, _ = ca.compute_policy_loss_bypass_mode(
        old, lp, adv, mask, "token-sum", bypass_config(loss_type="reinforce", rollout_is="token", rollout_is_threshold=2.0))
    rho = torch.exp(lp - old).clamp(max=2.0)
    close(loss, (-adv * lp * rho * mask).sum())
    # rejection: token_k1 with ratio bounds [0.4, 2] drops the rho = 5 token (and the masked one stays out)
    loss, m = ca.compute_policy_loss_bypass_mode(
        old, lp, adv, mask, "token-sum",
        bypass_config(loss_type="reinforce", rollout_is=None, rollout_rs="token_k1", rollout_rs_threshold="0.4_2.0"))
    close(loss, (-adv * lp * T([[1.0, 1.0, 0.0, 1.0, 0.0, 1.0]])).sum())
    assert m["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 / 5)
    with pytest.raises(ValueError, match="policy_loss.rollout_correction.*missing"):
        ca.compute_policy_loss_bypass_mode(old, lp, adv, mask, config=NS(policy_loss=NS()))
    with pytest.raises(ValueError, match="loss_type='pg'"):
        ca.compute_policy_loss_bypass_mode(old, lp, adv, mask, config=bypass_config(loss_type="pg"))


@pytest.mark.parametrize("name", sorted(ca.POLICY_LOSS_REGISTRY))
def test_policy_loss_contract(name):
    """Every registered loss: a finite scalar with a gradient, and verl's metric keys."""
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 5, generator=g)
    lp = (old + 0.1 * torch.randn(4, 5, generator=g)).requires_grad_()
    adv, mask = torch.randn(4, 5, generator=g), (torch.rand(4, 5, generator=g) > 0.2).float()
    cfg = NS(
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        clip_ratio_c=3.0,
        tau_pos=1.0,
        tau_neg=1.05,
        policy_loss=NS(dro_beta=0.1, rollout_correction=NS(rollout_is="sequence", rollout_is_threshold=2.0)),
        global_batch_info={},
    )
    loss, metrics = ca.get_policy_loss_fn(name)(old, lp, adv, mask, "token-mean", cfg)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    assert lp.grad is not None and torch.isfinite(lp.grad).all()
    expected = {"gpg": set(), "kl_cov": {"actor/ppo_kl"}, "clip_cov": {"actor/pg_clipfrac", "actor/ppo_kl"},
                "dro": {"actor/ppo_kl"}}
    if name == "bypass_mode":  # the PPO metrics plus the rollout-correction ones
        metrics = {k: v for k, v in metrics.items() if not k.startswith("rollout_corr/")}
    assert set(metrics) == expected.get(
        name, {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}
    )
    assert all(isinstance(v, float) for v in metrics.values())


# ------------------------------------------------------------------------------------ value loss, KL


def test_value_loss_hand_computed():
    vpreds, values, returns = T([[1.0, 2.0]]), T([[0.5, 2.0]]), T([[2.0, 1.0]])
    loss, clipfrac = ca.compute_value_loss(vpreds, returns, values, torch.ones(1, 2), cliprange_value=0.2)
    # clipped preds (0.7, 2.0); errors unclipped (1, 1), clipped (1.69, 1) -> 0.5 * mean(1.69, 1)
    close(loss, 0.5 * (1.69 + 1.0) / 2)
    close(clipfrac, 0.5)


def test_kl_penalty_values():
    lp, ref = T([0.5, -0.5]), T([0.0, 0.0])  # x = log pi - log pi_ref = (0.5, -0.5)
    close(ca.kl_penalty(lp, ref, "kl"), [0.5, -0.5])
    close(ca.kl_penalty(lp, ref, "k1"), [0.5, -0.5])
    close(ca.kl_penalty(lp, ref, "abs"), [0.5, 0.5])
    close(ca.kl_penalty(lp, ref, "mse"), [0.125, 0.125])
    k3 = [math.exp(-0.5) + 0.5 - 1, math.exp(0.5) - 0.5 - 1]  # e^{-x} + x - 1
    close(ca.kl_penalty(lp, ref, "low_var_kl"), k3)
    close(ca.kl_penalty(lp, ref, "k3+"), k3)  # '+' keeps the value
    close(ca.kl_penalty(T([-30.0]), T([0.0]), "k3"), [10.0])  # clamped to [-10, 10]
    with pytest.raises(ValueError, match="Unknown kl_penalty 'k4'"):
        ca.kl_penalty(lp, ref, "k4")
    with pytest.raises(NotImplementedError):
        ca.kl_penalty(lp, ref, "full")


@pytest.mark.parametrize(
    "name,grad",
    [
        ("k1", [1.0, 1.0]),
        ("k3", [1 - math.exp(-0.5), 1 - math.exp(0.5)]),  # d/dx of x and of e^{-x} + x - 1
        ("k1+", [0.5, -0.5]),
        ("k3+", [0.5, -0.5]),
        ("abs+", [0.5, -0.5]),
        ("k2+", [0.5, -0.5]),  # k2's: x
    ],
)
def test_kl_penalty_straight_through_gradient(name, grad):
    lp = T([0.5, -0.5]).requires_grad_()
    ca.kl_penalty(lp, torch.zeros(2), name).sum().backward()
    close(lp.grad, grad)


def test_kl_controllers_and_rewards():
    ctrl = ca.get_kl_controller(NS(type="adaptive", kl_coef=0.1, target_kl=0.1, horizon=100))
    ctrl.update(current_kl=0.2, n_steps=10)  # error clip(2 - 1) = 0.2 -> 0.1 * (1 + 0.2 * 10 / 100)
    assert ctrl.value == pytest.approx(0.102)
    ctrl.update(current_kl=0.05, n_steps=10)  # error -0.5 clipped to -0.2
    assert ctrl.value == pytest.approx(0.102 * 0.98)
    fixed = ca.get_kl_controller({"type": "fixed", "kl_coef": 0.05})
    fixed.update(current_kl=9.0, n_steps=10)
    assert isinstance(fixed, ca.FixedKLController) and fixed.value == 0.05
    with pytest.raises(ValueError, match="horizon must be > 0"):
        ca.get_kl_controller({"type": "adaptive", "kl_coef": 0.1, "target_kl": 0.1, "horizon": 0})
    with pytest.raises(ValueError, match="type='pid' is not supported"):
        ca.get_kl_controller({"type": "pid"})
    close(ca.compute_rewards(T([1.0, 0.0]), T([-1.0, -2.0]), T([-1.5, -1.0]), 0.1), [1.0 - 0.05, 0.1])
