"""The rule reward of minirl's arithmetic task: GSM8K's strict `#### <answer>` check, unchanged.

The task (`minirl.data.tasks.make_arithmetic_rows`) asks "What is 12+34?" and expects the response
`#### 46`; its ground truth is the answer as a string (`"46"`). Scoring is exactly verl's GSM8K
scorer (`compute_score`, `verl/utils/reward_score/gsm8k.py:52`), so what a reader learns about the
format reward here carries over to GSM8K: 1 for the right number after `#### `, 0 otherwise
(`format_score` for a well-formed wrong answer, 0 by default).

verl has no arithmetic task; this module exists so that `default_compute_score` can dispatch the
`minirl/arithmetic` data source the way verl dispatches `openai/gsm8k`.
"""

from __future__ import annotations

from minirl.utils.reward_score import gsm8k

__all__ = ["compute_score", "format_answer"]


def format_answer(value: int) -> str:
    """The reference response for an answer: `#### 46` (what the SFT warm start teaches)."""
    return f"#### {value}"


def compute_score(solution_str: str, ground_truth, format_score: float = 0.0, score: float = 1.0) -> float:
    """1.0 if the number after the last `#### ` equals `ground_truth`, else `format_score` (or 0)."""
    return gsm8k.compute_score(solution_str, str(ground_truth), format_score=format_score, score=score)
