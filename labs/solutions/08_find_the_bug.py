"""Worked solutions of lab 08 (find the bug), kept out of the notebook.

Three doctor rules, one per kind of evidence a healthy run never shows, each written on the metrics verl logs
too. Each `exercise_<n>(nb)` picks, for run A, B or C, the rule that fires on that run and on no other: the
answer comes from the evidence in `records`, never from the hidden fault's name. The first line of each
docstring is printed next to the answer. Try the exercises before you read their solutions.
"""

import math

from minirl.doctor import Evidence, Finding


def correct_answers_never_rewarded(rec):
    """Correct answers (acc > 0) while no response scores above 0: the reward contradicts its own verdict."""
    out = []
    for step in rec.steps:
        acc, top = rec.metric("reward/acc/mean", step), rec.metric("critic/score/max", step)
        if acc is not None and top is not None and acc > 0 and top <= 0:
            out.append(Finding("reward", "correct_answers_never_rewarded",
                               "responses the rule marks correct get no positive score", "rollout", [step],
                               [Evidence("reward/acc/mean", acc, step, "> 0: some answers are right", "metrics"),
                                Evidence("critic/score/max", top, step, "> 0 when an answer is right", "metrics")],
                               [("get_custom_reward_fn", "verl/trainer/ppo/reward.py:50")]))
    return out


def grpo_out_of_bounds(rec):
    """|advantage| above (n - 1) / sqrt(n), which no GRPO group can reach with unbiased-std normalisation."""
    n = int(rec.cfg("actor_rollout_ref.rollout.n", 1))
    bound = (n - 1) / math.sqrt(n) if n > 1 else math.inf
    out = []
    for step in rec.steps:
        hi, lo = rec.metric("critic/advantages/max", step), rec.metric("critic/advantages/min", step)
        worst = max(abs(hi or 0.0), abs(lo or 0.0))
        if worst > bound + 1e-3:
            out.append(Finding("advantage", "grpo_out_of_bounds", f"|advantage| {worst:.3g} above GRPO's bound "
                               f"{bound:.3g} for n={n}", "advantage", [step],
                               [Evidence("critic/advantages/max", hi, step, f"<= {bound:.3g}", "metrics")],
                               [("compute_grpo_outcome_advantage", "verl/trainer/ppo/core_algos.py:268")]))
    return out


def loss_scaled_by_tokens(rec):
    """A gradient norm two orders of magnitude above a token-mean loss's: the loss sums over tokens."""
    out = []
    for step in rec.steps:
        gn = rec.metric("actor/grad_norm", step)
        if gn is not None and gn > 20.0:
            out.append(Finding("loss", "loss_scaled_by_tokens", "the loss is a sum over tokens, not a mean",
                               "update_actor", [step],
                               [Evidence("actor/grad_norm", gn, step, "O(1) for a token-mean loss on this model",
                                         "metrics"),
                                Evidence("actor/pg_loss", rec.metric("actor/pg_loss", step), step,
                                         "O(0.01): a mean over tokens of advantage x ratio", "metrics")],
                               [("agg_loss", "verl/trainer/ppo/core_algos.py:1140")]))
    return out


RULES = (correct_answers_never_rewarded, grpo_out_of_bounds, loss_scaled_by_tokens)


def _rule_for(nb, label):
    records = nb["records"]
    for rule in RULES:
        if rule(records[label]) and not any(rule(rec) for other, rec in records.items() if other != label):
            return rule
    raise ValueError(f"no worked rule fires on run {label} alone")


def exercise_1(nb):
    """The rule (of three: reward verdict vs score, GRPO's bound, loss scale) that fires on run A and nowhere else."""
    return _rule_for(nb, "A")


def exercise_2(nb):
    """The rule that fires on run B and nowhere else."""
    return _rule_for(nb, "B")


def exercise_3(nb):
    """The rule that fires on run C and nowhere else."""
    return _rule_for(nb, "C")


def exercise_4(nb):
    """One response apart from n - 1 others: (1 - 1/n) / sqrt(1/n) = (n - 1) / sqrt(n), 7 / sqrt(8) for n = 8."""
    n = nb["n"]
    return (n - 1) / math.sqrt(n)
