"""Worked solutions of lab 04 (multi-turn tool agent), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (its `globals()`: the parameters of the first
cell, `rows`, `CALL_TEXT`, ...) and returns the answer, computed the way the exercise asks you to
reason. The lab's checks call them when solutions are on (`SOLUTION = True` in the parameter cell,
or `MINIRL_LAB_SOLUTIONS=1`, as the test suite runs labs); the first line of each docstring is
printed next to the answer. Try the exercise before you read its solution.
"""

from minirl.tools import BaseTool, ToolResponse

TEMPLATE_TOKENS = 1 + (1 + 4 + 1) + (1 + 1 + 1 + 9 + 1)
"""'\\n' + '<|im_start|>' 'tool' '\\n' + '<|im_end|>' '\\n' '<|im_start|>' 'assistant' '\\n'."""


def exercise_1(nb):
    """The function the policy writes: name calc, one required string argument expr."""
    return {"type": "function",
            "function": {"name": "calc", "description": "Multiply two integers written as a*b.",
                         "parameters": {"type": "object",
                                        "properties": {"expr": {"type": "string", "description": "e.g. 347*56"}},
                                        "required": ["expr"]}}}


def exercise_2(nb):
    """Split "a*b" at the "*", multiply the two integers, answer the product as text (errors as text too)."""

    class Multiplier(BaseTool):
        async def execute(self, instance_id, parameters, **kwargs):
            try:
                a, b = str(parameters["expr"]).split("*")
                return ToolResponse(text=str(int(a) * int(b))), 0.0, {}
            except (KeyError, ValueError) as e:
                return ToolResponse(text=f"error: {e}"), 0.0, {"error": "bad_arguments"}

    return Multiplier


def exercise_3(nb):
    """user + assistant (the call) + tool + assistant (the answer) = 1 + 2 + 1."""
    return 4


def exercise_4(nb):
    """1 ('\\n') + 6 ('<|im_start|>tool\\n') + 13 ('<|im_end|>\\n<|im_start|>assistant\\n') = 20."""
    return TEMPLATE_TOKENS


def exercise_5(nb):
    """len(product) for each problem: the byte-level tokenizer writes one token per digit."""
    return [len(r["reward_model"]["ground_truth"]) for r in nb["rows"]]


def exercise_6(nb):
    """[0, len(call)+1) and, after 20 template + len(answer) observation tokens, len('#### answer')+1 more."""
    call = len(nb["CALL_TEXT"]) + 1  # the call and its <|im_end|>
    answer = nb["rows"][0]["reward_model"]["ground_truth"]
    start = call + TEMPLATE_TOKENS + len(answer)
    return [(0, call), (start, start + len(f"#### {answer}") + 1)]


def exercise_7(nb):
    """The product cut to MAX_TOOL_RESPONSE_LENGTH characters on TRUNCATE_SIDE, with verl's marker."""
    text, n, side = nb["rows"][0]["reward_model"]["ground_truth"], nb["MAX_TOOL_RESPONSE_LENGTH"], nb["TRUNCATE_SIDE"]
    if len(text) <= n:
        return text
    if side == "left":
        return "(truncated)..." + text[-n:]
    if side == "right":
        return text[:n] + "...(truncated)"
    return text[: n // 2] + "...(truncated)..." + text[len(text) - n // 2:]


def exercise_8(nb):
    """(2, len(call)+1): the observation would overflow, so it is dropped and the session ends after the call."""
    return (2, len(nb["CALL_TEXT"]) + 1)
