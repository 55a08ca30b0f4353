"""Worked solutions of lab 02 (custom reward), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (its `globals()`) and returns the answer; the lab's
checks call them when solutions are on (`SOLUTION = True`, or `MINIRL_LAB_SOLUTIONS=1` as the test suite
runs labs). Exercise 1's answer is a function: `compute_score` below, which the notebook then checks on
the cases and trains with. Try the exercises before you read their solutions.
"""

import math  # noqa: F401  (the notebook writes these imports above the function when it saves it to a file)
import re


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


def exercise_2(nb):
    """len("#### 45") - 1: one token per byte, and the score sits on the last valid response token."""
    return len("#### 45") - 1


def exercise_3(nb):
    """The malformed cases (expected score 0.0): each returned None, so each is a contained failure."""
    return sum(1 for _, expected in nb["CASES"] if expected == 0.0)


def exercise_4(nb):
    """"rollout": a custom function is scored per session as it ends (no colocated reward model)."""
    return "rollout"


def exercise_5(nb):
    """The keys of the dict the function returns, in its order: each becomes a non_tensor_batch column."""
    fn = nb["reward_fn"]
    return list(fn(data_source="minirl/arithmetic", solution_str="#### 1", ground_truth="1", extra_info={}))
