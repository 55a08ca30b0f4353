"""Worked solutions of lab 04 (multi-turn tool agent), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (its `globals()`: the parameters of the first
cell, `rows`, `tok`, ...) and returns the answer: a class, the tool config's text, a function or a value.
The lab's checks call them when solutions are on (`SOLUTION = True`, or `MINIRL_LAB_SOLUTIONS=1`); the
first line of each docstring is printed next to the answer. Try the exercise before you read its solution.
"""

from minirl.tools import BaseTool, ToolResponse


class Multiplier(BaseTool):
    """Multiplies two integers written as "a*b"; anything else is answered with an error text."""

    async def execute(self, instance_id, parameters, **kwargs):
        try:
            a, b = str(parameters["expr"]).split("*")
            return ToolResponse(text=str(int(a) * int(b))), 0.0, {}
        except (KeyError, ValueError) as e:
            return ToolResponse(text=f"error: expected a*b with two integers ({e})"), 0.0, {"error": "bad_arguments"}


def exercise_1(nb):
    """Split "a*b" at the "*", multiply the two integers, answer the product as text (errors as text too)."""
    return Multiplier


def exercise_2(nb):
    """class_name __main__.MyTool (the notebook's name for the class), type native, the call's schema: calc(expr)."""
    return """tools:
  - class_name: __main__.MyTool
    config:
      type: native
    tool_schema:
      type: function
      function:
        name: calc
        description: Multiply two integers written as a*b.
        parameters:
          type: object
          properties:
            expr:
              type: string
              description: for example 347*56
          required: [expr]
"""


def exercise_3(nb):
    """The policy's text as it is (mask 1); each result wrapped in the tool message's template (mask 0)."""
    tok = nb["tok"]

    def encode(text):
        return tok(text, add_special_tokens=False)["input_ids"]

    def build_response(turns):
        ids, mask = [], []
        for role, text in turns:
            piece = encode(text) if role == "assistant" else \
                encode("\n<|im_start|>tool\n" + text + "<|im_end|>\n<|im_start|>assistant\n")
            ids += piece
            mask += [1 if role == "assistant" else 0] * len(piece)
        return ids, mask

    return build_response


def exercise_4(nb):
    """The product cut to MAX_TOOL_RESPONSE_LENGTH characters on TRUNCATE_SIDE, with verl's marker."""
    text, n, side = nb["rows"][0]["reward_model"]["ground_truth"], nb["MAX_TOOL_RESPONSE_LENGTH"], nb["TRUNCATE_SIDE"]
    if len(text) <= n:
        return text
    if side == "left":
        return "(truncated)..." + text[-n:]
    if side == "right":
        return text[:n] + "...(truncated)"
    return text[: n // 2] + "...(truncated)..." + text[len(text) - n // 2:]


def exercise_5(nb):
    """(2, the call's tokens): the observation would overflow, so it is dropped and the session ends after the call."""
    call = nb["session_turns"](nb["outs"][0])[0][1]
    return (2, len(nb["tok"](call, add_special_tokens=False)["input_ids"]))
