"""Decoupled rollout correction on hand-made tensors: IS weights, rejection, presets, the trainer's step.

`minirl.trainer.ppo.rollout_corr_helper.compute_rollout_correction_and_rejection_mask` (verl:
`verl/trainer/ppo/rollout_corr_helper.py:786`) and the trainer side,
`minirl.trainer.ppo.rollout_corr_helper.apply_rollout_correction` (verl: step 2 of
`PPOTrainer._compute_advantage`, `verl/trainer/ppo/v1/trainer_base.py:1638`). The weight and
rejection primitives alone are in tests/unit/test_core_algos.py; this file covers the combined call
(direction of the ratio, weights computed on the mask before rejection, sequence-level
truncation, IcePop and batch normalisation, several rejection criteria at once), every preset
and the batch in, batch out contract. Every expected number is worked out by hand in the comments.
"""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from minirl.config import load
from minirl.protocol import DataProto
from minirl.trainer.ppo.rollout_corr_helper import (
    PRESETS,
    apply_rollout_correction,
    lag_advantage_bias,
    preset,
    preset_overrides,
)
from minirl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask as correct


def T(x):
    return torch.tensor(x, dtype=torch.float32)


def close(a, b, tol=1e-5):
    torch.testing.assert_close(a.float(), T(b) if not torch.is_tensor(b) else b.float(), atol=tol, rtol=tol)


def logs(rollout_probs, old_probs):
    """(old_log_prob, rollout_log_prob) from per-token probabilities; ratio = old / rollout."""
    return torch.log(T(old_probs)), torch.log(T(rollout_probs))


# two responses of 3 tokens; the second has one pad
MASK = T([[1, 1, 1], [1, 1, 0]])
# per-token ratios pi_old / pi_roll: row 0 = 3, 1, 0.25 (product 0.75); row 1 = 2, 1.5 (product 3), pad
OLD, ROLL = logs([[0.2, 0.5, 0.8], [0.25, 0.4, 0.9]], [[0.6, 0.5, 0.2], [0.5, 0.6, 0.1]])


def test_token_weights_are_old_over_rollout_truncated_and_the_mask_is_untouched():
    w, mask, m = correct(OLD, ROLL, MASK, rollout_is="token", rollout_is_threshold=2.0)
    close(w, [[2.0, 1.0, 0.25], [2.0, 1.5, 0.0]])  # min(ratio, 2): 3 -> 2, 2 stays, pad -> 0
    close(mask, MASK)
    assert mask is not MASK  # a copy: the caller's mask is not the one returned
    assert all(k.startswith("rollout_corr/") for k in m)
    # KL(roll || old) estimate mean(-log ratio) over the 5 valid tokens
    kl = -(math.log(3) + 0 + math.log(0.25) + math.log(2) + math.log(1.5)) / 5
    assert m["rollout_corr/kl"] == pytest.approx(kl, abs=1e-6)
    assert m["rollout_corr/rollout_is_mean"] == pytest.approx((2 + 1 + 0.25 + 2 + 1.5) / 5)
    # the ratio points one way: swapping the policies gives 1/3, 1, 4 ... (4 -> 2)
    w_swapped, _, _ = correct(ROLL, OLD, MASK, rollout_is="token", rollout_is_threshold=2.0)
    close(w_swapped, [[1 / 3, 1.0, 2.0], [0.5, 2 / 3, 0.0]])


def test_sequence_weights_are_the_product_truncated_from_above_only():
    w, _, m = correct(OLD, ROLL, MASK, rollout_is="sequence", rollout_is_threshold=2.0)
    # row 0: 3 * 1 * 0.25 = 0.75 (below the threshold: kept, TIS never raises a weight); row 1: 2 * 1.5 = 3 -> 2
    close(w, [[0.75, 0.75, 0.75], [2.0, 2.0, 0.0]])
    assert m["rollout_corr/rollout_is_max"] == pytest.approx(3.0)  # the raw sequence ratio, before truncation
    assert m["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(0.5)  # one of two responses > 2


@pytest.mark.parametrize("level,expected", [
    ("token", [[0.0, 1.0, 0.0], [2.0, 1.5, 0.0]]),  # 3 and 0.25 outside [0.5, 2]: zeroed, 2 is kept (inclusive)
    ("sequence", [[0.75, 0.75, 0.75], [0.0, 0.0, 0.0]]),  # 0.75 inside, 3 outside: the whole response -> 0
])
def test_lower_upper_string_zeroes_outside_the_band(level, expected):
    w, mask, m = correct(OLD, ROLL, MASK, rollout_is=level, rollout_is_threshold="0.5_2.0")
    close(w, expected)
    close(mask, MASK)  # IcePop zeroes weights; it rejects nothing
    assert "rollout_corr/rollout_is_oob_ratio" in m


def test_a_threshold_from_the_config_file_is_read_as_a_band():
    rc = OmegaConf.create({"rollout_is": "token", "rollout_is_threshold": "0.5_2.0"})
    batch = make_batch()
    apply_rollout_correction(batch, rc, {})
    close(batch.batch["rollout_is_weights"], [[0.0, 1.0, 0.0], [2.0, 1.5, 0.0]])


@pytest.mark.parametrize("level,expected,factor", [
    # token: mean of the 5 truncated weights (2 + 1 + .25 + 2 + 1.5) / 5 = 1.35
    ("token", T([[2.0, 1.0, 0.25], [2.0, 1.5, 0.0]]) / 1.35, 1.35),
    # sequence: one weight per response, (0.75 + 2) / 2 = 1.375; a token mean would give 0.75*3+2*2 / 5 = 1.25
    ("sequence", T([[0.75, 0.75, 0.75], [2.0, 2.0, 0.0]]) / 1.375, 1.375),
])
def test_batch_normalisation_divides_by_the_mean_of_its_level(level, expected, factor):
    w, _, m = correct(OLD, ROLL, MASK, rollout_is=level, rollout_is_threshold=2.0, rollout_is_batch_normalize=True)
    close(w, expected)
    assert m["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(factor)
    raw = (2 + 1 + 0.25 + 2 + 1.5) / 5 if level == "token" else (0.75 * 3 + 2 * 2) / 5
    assert m["rollout_corr/rollout_is_mean"] == pytest.approx(raw)  # reported before normalising, as verl does


def test_rejection_removes_tokens_or_whole_responses_and_keeps_the_weights():
    # token_k1 with ratio bounds [0.5, 2]: drops the tokens with ratio 3 and 0.25
    w, mask, m = correct(OLD, ROLL, MASK, rollout_is="token", rollout_is_threshold=2.0,
                         rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0")
    close(mask, [[0, 1, 0], [1, 1, 0]])
    close(w, [[2.0, 1.0, 0.25], [2.0, 1.5, 0.0]])  # weights come from the mask before rejection (verl's order)
    assert m["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(2 / 5)
    assert m["rollout_corr/rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 2)
    # seq_sum_k1: the sequence's log ratio sum, ln .75 (kept) and ln 3 (> ln 2: the whole response goes)
    _, mask, _ = correct(OLD, ROLL, MASK, rollout_rs="seq_sum_k1", rollout_rs_threshold="0.5_2.0")
    close(mask, [[1, 1, 1], [0, 0, 0]])
    # geometric mean (seq_mean_k1) with verl's +-0.1% band rejects both: neither row has mean log ratio ~ 0
    _, mask, _ = correct(OLD, ROLL, MASK, rollout_rs="seq_mean_k1", rollout_rs_threshold="0.999_1.001")
    close(mask, [[0, 0, 0], [0, 0, 0]])
    _, mask, _ = correct(OLD, OLD, MASK, rollout_rs="seq_mean_k1", rollout_rs_threshold="0.999_1.001")
    close(mask, MASK)  # the same policy: log ratio 0 everywhere, nothing rejected


def test_several_criteria_must_all_pass_each_with_its_threshold():
    # seq_max_k2 (max 0.5 x^2): row 0 0.5 ln(4)^2 = 0.96, row 1 0.5 ln(2)^2 = 0.24; token_k3 (e^x - 1 - x) <= 0.5:
    # ratio 3: 2 - ln 3 = 0.90 (out), 0.25: -0.75 + ln 4 = 0.64 (out), 2: 1 - ln 2 = 0.31, 1.5: 0.09, 1: 0
    _, mask, m = correct(OLD, ROLL, MASK, rollout_rs="seq_max_k2,token_k3", rollout_rs_threshold="0.5,0.5")
    close(mask, [[0, 0, 0], [1, 1, 0]])  # row 0 fails seq_max_k2 (0.96 > 0.5) whole; row 1 passes both
    assert m["rollout_corr/rollout_rs_seq_max_k2_seq_masked_fraction"] == pytest.approx(1 / 2)
    assert m["rollout_corr/rollout_rs_token_k3_masked_fraction"] == pytest.approx(2 / 5)
    _, mask, _ = correct(OLD, ROLL, MASK, rollout_rs="seq_max_k2,token_k3", rollout_rs_threshold="1.0,0.5")
    close(mask, [[0, 1, 0], [1, 1, 0]])  # seq_max_k2 passes now: only token_k3's two tokens go
    with pytest.raises(ValueError, match="has 3 entries for 2 options"):
        correct(OLD, ROLL, MASK, rollout_rs="seq_max_k2,token_k3", rollout_rs_threshold="1,2,3")


def test_no_weights_without_rollout_is_and_shape_errors():
    w, mask, m = correct(OLD, ROLL, MASK)
    close(mask, MASK)
    assert w is None and "rollout_corr/rollout_is_mean" not in m and "rollout_corr/kl" in m  # metrics only
    w, _, _ = correct(OLD, ROLL, MASK, rollout_is="token", rollout_is_threshold=None)
    assert w is None  # verl too: no threshold, no weights
    with pytest.raises(ValueError, match="must be equal"):
        correct(OLD, ROLL[:, :2], MASK)
    with pytest.raises(ValueError, match="no valid token"):
        correct(OLD, ROLL, torch.zeros_like(MASK))


# --------------------------------------------------------------------------------------- the trainer's step


def make_batch(**extra) -> DataProto:
    tensors = {"old_log_probs": OLD.clone(), "rollout_log_probs": ROLL.clone(),
               "response_mask": MASK.long(), **extra}
    return DataProto.from_dict(tensors=tensors)


def section(**kw):
    return OmegaConf.create({**preset("disabled"), **kw})


def test_decoupled_mode_adds_weights_and_replaces_the_mask():
    batch, metrics = make_batch(), {}
    out = apply_rollout_correction(batch, section(rollout_is="sequence", rollout_rs="token_k1",
                                                  rollout_rs_threshold="0.5_2.0"), metrics)
    close(out.batch["rollout_is_weights"], [[0.75, 0.75, 0.75], [2.0, 2.0, 0.0]])
    assert out.batch["response_mask"].dtype == torch.long  # the mask keeps its dtype
    close(out.batch["response_mask"], [[0, 1, 0], [1, 1, 0]])
    assert "rollout_corr/rollout_rs_masked_fraction" in metrics and "rollout_corr/rollout_is_mean" in metrics


def test_metrics_only_when_both_are_null():
    batch, metrics = make_batch(), {}
    out = apply_rollout_correction(batch, section(), metrics)
    assert "rollout_is_weights" not in out.batch.keys()  # noqa: SIM118
    close(out.batch["response_mask"], MASK)
    assert metrics["rollout_corr/kl"] == pytest.approx(-(math.log(3) + math.log(0.25) + math.log(3)) / 5, abs=1e-6)


@pytest.mark.parametrize("case", ["bypass", "no_rollout_log_probs", "no_section"])
def test_bypass_mode_and_missing_inputs_leave_the_batch_alone(case):
    batch = make_batch() if case != "no_rollout_log_probs" else DataProto.from_dict(
        tensors={"old_log_probs": OLD.clone(), "response_mask": MASK.long()})
    before = {k: v.clone() for k, v in batch.batch.items()}
    rc = None if case == "no_section" else section(rollout_is="token", rollout_rs="token_k1",
                                                   rollout_rs_threshold="0.5_2.0", bypass_mode=(case == "bypass"))
    metrics = {}
    out = apply_rollout_correction(batch, rc, metrics)
    assert out is batch and metrics == {}
    assert set(out.batch.keys()) == set(before)
    for k, v in before.items():
        assert torch.equal(out.batch[k], v), k


# -------------------------------------------------------------------------------------------------- presets


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_loads_as_a_valid_config(name):
    cfg = load(preset_overrides(name))  # the config check runs here: a bad preset would raise ConfigError
    rc = OmegaConf.to_container(cfg.algorithm.rollout_correction)
    assert rc == preset(name)
    if rc["bypass_mode"]:  # the actor's bypass_mode loss reads its own copy, which must agree
        pl = cfg.actor_rollout_ref.actor.policy_loss
        assert pl.loss_mode == "bypass_mode"
        assert {k: pl.rollout_correction[k] for k in rc if k != "bypass_mode"} == \
               {k: v for k, v in rc.items() if k != "bypass_mode"}
    # the thresholds parse: the correction runs on the hand-made batch
    if not rc["bypass_mode"]:
        batch, metrics = make_batch(), {}
        apply_rollout_correction(batch, cfg.algorithm.rollout_correction, metrics)
        assert ("rollout_is_weights" in batch.batch.keys()) == (rc["rollout_is"] is not None)  # noqa: SIM118
        assert ("rollout_corr/rollout_rs_masked_fraction" in metrics) == (rc["rollout_rs"] is not None)


def test_preset_names_and_unknown_preset():
    # verl's RolloutCorrectionConfig classmethods at the pin: `decoupled_token_is` (verl/trainer/config/algorithm.py:187)
    # to `disabled` (verl/trainer/config/algorithm.py:608)
    assert len(PRESETS) == 19 and "disabled" in PRESETS
    assert sum(p.get("bypass_mode", False) for p in PRESETS.values()) == 8
    with pytest.raises(ValueError, match="unknown rollout-correction preset 'tis'"):
        preset("tis")


def test_lag_advantage_bias_reads_the_sign_of_the_lag():
    """Tokens the anchor likes more than the sampler did (x > 0) carry the positive advantages: corr > 0, and the
    reweighted sum moves toward them; masked tokens count nowhere."""
    old = torch.log(torch.tensor([[0.6, 0.5, 0.9], [0.2, 0.5, 0.1]]))
    roll = torch.log(torch.tensor([[0.3, 0.5, 0.1], [0.4, 0.5, 0.1]]))  # x = ln 2, 0, (masked) | ln .5, 0, ...
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    out = lag_advantage_bias(old, roll, adv, mask)
    assert out["tokens"] == 4 and out["corr_x_adv"] == pytest.approx(math.sqrt(0.5))  # x = (a, 0, -a, 0)
    assert out["w_pos"] == pytest.approx((2.0 + 1.0) / 2) and out["w_neg"] == pytest.approx((0.5 + 1.0) / 2)
    assert out["sum_adv"] == pytest.approx(0.0) and out["sum_w_adv"] == pytest.approx(2.0 + 1.0 - 0.5 - 1.0)
    same = lag_advantage_bias(old, old, adv, mask)  # no lag: w = 1, nothing correlates, the sums agree
    assert same["corr_x_adv"] == 0.0 and same["sum_w_adv"] == pytest.approx(same["sum_adv"])
    noise = lag_advantage_bias(old + 1e-7 * adv, old, adv, mask)  # two fp32 forwards of one model: not lag
    assert noise["corr_x_adv"] == 0.0 and noise["w_pos"] == noise["w_neg"] == 1.0
