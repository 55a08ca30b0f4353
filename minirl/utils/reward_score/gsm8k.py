"""The GSM8K rule reward: 1 if the number after the last `#### ` equals the ground truth, else 0.

Mirrors `extract_solution` (`verl/utils/reward_score/gsm8k.py:20`) and `compute_score`
(`verl/utils/reward_score/gsm8k.py:52`), behaviour for behaviour:

- only the last 300 characters of the response are searched (the final answer is at the end, and a
  regex over a long string is slow);
- `strict` extraction requires the literal `#### ` marker followed by a number (digits, `.`, `,`,
  optional leading `-`); the last such match wins; commas and `$` are removed;
- `flexible` extraction takes the last number anywhere in the text (not `""` or `"."`);
- the extracted string is compared with the ground truth *as a string*: `"72.0"` does not match `"72"`;
- no answer -> 0; an answer that differs -> `format_score` (0 by default); a match -> `score` (1).

The strict marker is what makes this a *format* reward as well: a model that never writes `#### ` gets
0 however good its arithmetic. minirl's arithmetic task uses the same `#### <answer>` format so that
this scorer applies unchanged.
"""

from __future__ import annotations

import re

from minirl.utils import hooks

__all__ = ["compute_score", "extract_solution"]

_SOLUTION_CLIP_CHARS = 300
_STRICT = re.compile(r"#### (-?[0-9.,]+)")
_ANY_NUMBER = re.compile(r"(-?[0-9.,]+)")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The final answer in `solution_str` as a string, or None if there is none.

    `method="strict"`: the number after the last `#### `; `"flexible"`: the last number in the text.
    The strict pattern passes the hook point `reward.gsm8k.strict_pattern` (`minirl.utils.hooks`).
    """
    if method not in ("strict", "flexible"):
        raise ValueError(f"method must be 'strict' or 'flexible', got {method!r}")
    tail = solution_str[-_SOLUTION_CLIP_CHARS:]
    if method == "strict":
        matches = hooks.apply("reward.gsm8k.strict_pattern", _STRICT).findall(tail)
        return matches[-1].replace(",", "").replace("$", "") if matches else None
    for candidate in reversed(_ANY_NUMBER.findall(tail)):
        if candidate not in ("", "."):
            return candidate
    return None


def compute_score(
    solution_str: str,
    ground_truth: str,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """Score one response against the ground-truth answer string (see the module docstring)."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    return score if answer == str(ground_truth) else format_score
