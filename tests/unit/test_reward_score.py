"""Rule scorers on hand-written responses: correct, wrong, malformed; and dispatch by data_source."""

import pytest

from minirl.utils import reward_score
from minirl.utils.reward_score import arithmetic, countdown, default_compute_score, gsm8k

# ------------------------------------------------------------------------------------------- gsm8k


@pytest.mark.parametrize(
    "response, expected",
    [
        ("She has 5+3=8 apples.\n#### 8", 1.0),  # correct
        ("#### 9", 0.0),  # wrong number, format_score defaults to 0
        ("The answer is 8", 0.0),  # no '#### ' marker: strict extraction finds nothing
        ("####8", 0.0),  # the space after #### is required
        ("#### 7\nwait, no\n#### 8", 1.0),  # the last marker wins
        ("#### 8.0", 0.0),  # compared as strings: "8.0" != "8"
        ("", 0.0),
    ],
)
def test_gsm8k_strict(response, expected):
    assert gsm8k.compute_score(response, "8") == expected


def test_gsm8k_details():
    assert gsm8k.extract_solution("so #### 1,234") == "1234"  # commas removed
    assert gsm8k.extract_solution("#### -17") == "-17"
    assert gsm8k.compute_score("#### -17", "-17") == 1.0
    assert gsm8k.compute_score("#### 9", "8", format_score=0.1) == 0.1
    assert gsm8k.compute_score("#### 8", "8", score=2.0) == 2.0
    # only the last 300 characters are searched
    assert gsm8k.compute_score("#### 8" + "x" * 300, "8") == 0.0
    assert gsm8k.compute_score("x" * 300 + "#### 8", "8") == 1.0
    # flexible: the last number anywhere
    assert gsm8k.extract_solution("it is 8 or maybe 12.", method="flexible") == "12."
    assert gsm8k.compute_score("I think 8", "8", method="flexible") == 1.0
    assert gsm8k.extract_solution("no digits", method="flexible") is None
    with pytest.raises(ValueError, match="strict"):
        gsm8k.extract_solution("#### 8", method="loose")


# -------------------------------------------------------------------------------------- arithmetic


def test_arithmetic_uses_the_gsm8k_rule():
    assert arithmetic.format_answer(46) == "#### 46"
    assert arithmetic.compute_score("#### 46", "46") == 1.0
    assert arithmetic.compute_score("#### 46", 46) == 1.0  # an int ground truth is compared as a string
    assert arithmetic.compute_score("#### 47", "46") == 0.0
    assert arithmetic.compute_score("46", "46") == 0.0
    assert arithmetic.compute_score("#### -5", "-5") == 1.0


# --------------------------------------------------------------------------------------- countdown

GT = {"target": 16, "numbers": [3, 5, 2]}


@pytest.mark.parametrize(
    "response, expected",
    [
        ("<answer>(3+5)*2</answer>", 1.0),  # correct
        ("<answer> 2 * (5 + 3) </answer>", 1.0),  # any order, spaces
        ("<answer>3+5+2</answer>", 0.1),  # right numbers, wrong value
        ("<answer>(3+5)*2*1</answer>", 0.1),  # a number that was not given
        ("<answer>(3+3)*2</answer>", 0.1),  # 5 unused, 3 used twice
        ("(3+5)*2", 0.0),  # no answer tags
        ("<answer>(3+5)*2", 0.0),  # unclosed tag
        ("<answer>3+5+2</answer> then <answer>(3+5)*2</answer>", 1.0),  # the last answer wins
        ("<answer>(3+5)**2</answer>", 0.1),  # power is not an allowed operation
        ("<answer>16</answer>", 0.1),
    ],
)
def test_countdown_scores(response, expected):
    assert countdown.compute_score(response, GT) == expected


def test_countdown_is_exact_and_never_executes_code():
    assert countdown.evaluate_equation("6/4*4") == 6  # exact fractions: no float round-off
    assert countdown.compute_score("<answer>6/4*4</answer>", {"target": 6, "numbers": [6, 4, 4]}) == 1.0
    assert countdown.compute_score("<answer>8/(2-2)</answer>", {"target": 4, "numbers": [8, 2, 2]}) == 0.1
    assert countdown.evaluate_equation("1.5*2") is None  # '.' is not accepted (TinyZero allows it)
    assert countdown.evaluate_equation("7//2") is None
    assert countdown.evaluate_equation("-3+5") == 2
    assert countdown.evaluate_equation("(" * 150 + "1" + ")" * 150) is None  # over-long input
    attack = "<answer>__import__('os').system('echo hi')</answer>"
    assert countdown.compute_score(attack, {"target": 0, "numbers": []}) == 0.1
    assert countdown.evaluate_equation("__import__('os')") is None
    assert countdown.validate_equation("12+3", [3, 12]) and not countdown.validate_equation("1+23", [12, 3])


# ---------------------------------------------------------------------------------------- dispatch


def test_default_compute_score_dispatches_by_data_source():
    assert default_compute_score("openai/gsm8k", "#### 72", "72") == 1.0
    assert default_compute_score("minirl/arithmetic", "#### 46", "46", extra_info={"index": 0}) == 1.0
    assert default_compute_score("minirl/arithmetic", "#### 45", "46") == 0.0
    assert default_compute_score("minirl/countdown", "<answer>(3+5)*2</answer>", GT) == 1.0
    assert default_compute_score("countdown", "<answer>3*5+2</answer>", GT) == 0.1  # TinyZero's name
    assert type(default_compute_score("openai/gsm8k", "nothing", "72")) is float


def test_unknown_data_source_names_the_known_ones():
    with pytest.raises(NotImplementedError) as err:
        default_compute_score("my/dataset", "#### 1", "1")
    message = str(err.value)
    assert "'my/dataset'" in message and "custom_reward_function" in message
    for source in ("openai/gsm8k", "minirl/arithmetic", "minirl/countdown"):
        assert source in message


def test_dict_results_pass_through(monkeypatch):
    monkeypatch.setitem(reward_score.SCORE_FNS, "test/dict", lambda s, gt: {"score": 0.5, "acc": True})
    assert default_compute_score("test/dict", "x", "y") == {"score": 0.5, "acc": True}


# ------------------------------------------------------------------------- where a score call runs


def _thread_of(fn, **kwargs):
    """Run `fn` through `run_score_fn` and report the name of the thread it ran in, and its result."""
    import asyncio
    import threading

    from minirl.workers.reward.scoring import run_score_fn, runs_inline

    seen = {}

    def spy(**kw):
        seen["thread"] = threading.current_thread().name
        return fn(**kw)

    spy.minirl_inline = runs_inline(fn)  # the spy runs where `fn` would
    result = asyncio.run(run_score_fn(spy, kwargs, timeout=5.0, what="sample 0"))
    return seen["thread"], result


def test_minirl_scorers_run_inline_and_user_functions_in_a_thread():
    """minirl's rule scorer is called on the loop's thread; any other sync function gets its own thread."""
    import threading

    from minirl.workers.reward.scoring import runs_inline

    args = {"data_source": "minirl/arithmetic", "solution_str": "#### 8", "ground_truth": "8"}
    assert runs_inline(default_compute_score)
    thread, result = _thread_of(default_compute_score, **args)
    assert thread == threading.current_thread().name and result == 1.0

    def user_fn(data_source, solution_str, ground_truth):
        return 0.5

    assert not runs_inline(user_fn)
    thread, result = _thread_of(user_fn, **args)
    assert thread == "minirl-reward" and result == 0.5


def test_an_inline_scorer_that_raises_takes_the_same_error_path():
    """An exception of an inline scorer becomes BadRewardOutput naming the exception, as a threaded one does."""
    import asyncio

    from minirl.workers.reward.scoring import BadRewardOutput, run_score_fn

    args = {"data_source": "no/such/source", "solution_str": "#### 8", "ground_truth": "8"}
    with pytest.raises(BadRewardOutput, match="raised NotImplementedError: Reward function is not implemented"):
        asyncio.run(run_score_fn(default_compute_score, args, timeout=5.0))
