"""Rule-based score functions, chosen by each sample's `data_source`.

A *rule reward* checks a response with code instead of a learned reward model: the GSM8K scorer
reads the number after `#### `, the countdown scorer evaluates the equation in `<answer>`. The reward
manager calls `default_compute_score(data_source, solution_str, ground_truth, extra_info)` once per
response, where `data_source` is the row's `data_source` column (the key named by
`data.reward_fn_key`) and `ground_truth` is `reward_model["ground_truth"]`.

Mirrors `default_compute_score` (`verl/utils/reward_score/__init__.py:19`): dispatch on the data
source, return a float (or a dict with a `"score"` key and extra metrics, passed through), and raise
`NotImplementedError` for a data source with no scorer. verl's version is an `if/elif` chain over ~20
public datasets (GSM8K, MATH, code with a sandbox, geometry, search QA); minirl keeps a small table:

| data_source | scorer |
|---|---|
| `openai/gsm8k` | `gsm8k.compute_score` (verl's, strict `#### `) |
| `minirl/arithmetic` | `arithmetic.compute_score` (the same GSM8K check) |
| `minirl/multiply_tool` | `arithmetic.compute_score` (the same check, on the whole multi-turn response) |
| `minirl/countdown`, `countdown` (TinyZero's name) | `countdown.compute_score` |

For any other dataset, write your own `compute_score` and point `reward.custom_reward_function.path`
at its file, as in verl.
"""

from __future__ import annotations

from minirl.utils.reward_score import arithmetic, countdown, gsm8k

__all__ = ["KNOWN_DATA_SOURCES", "SCORE_FNS", "default_compute_score"]

SCORE_FNS = {
    "openai/gsm8k": gsm8k.compute_score,
    "minirl/arithmetic": arithmetic.compute_score,
    "minirl/multiply_tool": arithmetic.compute_score,  # the same `#### <answer>` check, tool or not
    "minirl/countdown": countdown.compute_score,
    "countdown": countdown.compute_score,
}
KNOWN_DATA_SOURCES = tuple(SCORE_FNS)


def default_compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float | dict:
    """Score one response with the rule of its data source.

    Args:
        data_source: which dataset the prompt came from (selects the scorer).
        solution_str: the decoded response (without the prompt).
        ground_truth: the row's `reward_model["ground_truth"]` (a string for GSM8K-style tasks, a
            `{"target", "numbers"}` dict for countdown).
        extra_info: the row's `extra_info` (unused by the built-in scorers; custom ones may read it).
        **kwargs: accepted for verl's signature (`sandbox_fusion_url`, ...), unused.

    Returns:
        A float, or the scorer's dict unchanged when it returns one.
    """
    score_fn = SCORE_FNS.get(str(data_source))
    if score_fn is None:
        raise NotImplementedError(
            f"Reward function is not implemented for data_source={data_source!r}. Known data sources: "
            f"{list(KNOWN_DATA_SOURCES)}. For another dataset, write a compute_score(data_source, "
            f"solution_str, ground_truth, extra_info) and set reward.custom_reward_function.path=<file.py>."
        )
    result = score_fn(solution_str, ground_truth)
    if isinstance(result, dict):
        return result
    return float(result)


default_compute_score.minirl_inline = True  # rule scoring of one string: run on the loop, no thread
