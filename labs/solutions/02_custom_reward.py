"""Worked solutions of lab 02 (custom reward), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (its `globals()`) and returns the answer: a
function, a class, a list of overrides or a value. The lab's checks call them when solutions are on
(`SOLUTION = True`, or `MINIRL_LAB_SOLUTIONS=1`); the first line of each docstring is printed next to
the answer. Try the exercises before you read their solutions.
"""

import math  # noqa: F401  (the notebook writes these imports above a function when it saves it to a file)
import re

from minirl.workers.reward.managers import NaiveRewardManager, register


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Format + correctness + partial credit for a well-formed wrong answer."""
    m = re.fullmatch(r"#### (-?\d+)", solution_str.strip())
    if m is None:
        return {"score": 0.0, "format": 0.0, "correct": 0.0}
    diff = abs(int(m.group(1)) - int(ground_truth))
    score = 1.0 if diff == 0 else 0.1 + 0.4 * max(0.0, 1 - diff / 10)
    return {"score": score, "format": 1.0, "correct": float(diff == 0)}


def exercise_1(nb):
    """re.fullmatch(r"#### (-?\\d+)", response.strip()), then 1.0 | 0.1 + 0.4 * max(0, 1 - |diff| / 10) | 0.0."""
    return compute_score


@register("my_overlong")
class OverlongRewardManager(NaiveRewardManager):
    """The naive manager plus DAPO's soft overlong penalty, configured by reward.reward_kwargs."""

    def __init__(self, config, tokenizer, compute_score=None, **kwargs):
        super().__init__(config, tokenizer, compute_score, **kwargs)
        rk = config.reward.reward_kwargs
        self.max_resp_len, self.buffer_len = rk.max_resp_len, rk.overlong_buffer_cfg.len
        self.penalty_factor = rk.overlong_buffer_cfg.penalty_factor

    async def run_single(self, data):
        out = await super().run_single(data)
        length = self.sample_inputs(data)["valid_response_length"]
        expected = self.max_resp_len - self.buffer_len  # tokens a response may use for free
        out["reward_score"] += min(0.0, -(length - expected) / self.buffer_len * self.penalty_factor)
        return out


def exercise_2(nb):
    """penalty = min(0, -(L - (L_max - L_buf)) / L_buf * penalty_factor), added to the naive score."""
    return OverlongRewardManager


def compute_score_w(data_source, solution_str, ground_truth, extra_info=None, width=10):
    """my_compute_score with the partial credit's width as a parameter."""
    m = re.fullmatch(r"#### (-?\d+)", solution_str.strip())
    if m is None:
        return {"score": 0.0, "format": 0.0, "correct": 0.0}
    diff = abs(int(m.group(1)) - int(ground_truth))
    score = 1.0 if diff == 0 else 0.1 + 0.4 * max(0.0, 1 - diff / width)
    return {"score": score, "format": 1.0, "correct": float(diff == 0)}


def exercise_3(nb):
    """Exercise 1's function with the width a keyword parameter (10 by default)."""
    return compute_score_w


def exercise_4(nb):
    """The function's name (the file holds it under that name) and the width, bound by reward_kwargs."""
    return [f"reward.custom_reward_function.name={nb['reward_fn_w'].__name__}",
            f"+reward.custom_reward_function.reward_kwargs.width={nb['WIDTH']}"]


def exercise_5(nb):
    """len("#### 45") - 1: one token per byte, and the score sits on the last valid response token."""
    return len("#### 45") - 1


def exercise_6(nb):
    """The malformed cases (expected score 0.0): each returned None, so each is a contained failure."""
    return sum(1 for _, expected in nb["CASES"] if expected == 0.0)
