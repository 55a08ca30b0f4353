"""The countdown rule reward: reach the target with the given numbers, each used exactly once.

Countdown is TinyZero's task (github.com/Jiayi-Pan/TinyZero, its `utils/reward_score/countdown.py`,
`compute_score`; TinyZero is a fork of verl): "Using the numbers [3, 5, 2], create an equation that
equals 16". The response must put its equation in `<answer>...</answer>`; the ground truth is a dict
`{"target": 16, "numbers": [3, 5, 2]}`. Scoring, as in TinyZero:

- no `<answer>...</answer>` -> 0;
- an answer that uses other numbers than the given ones (each exactly once), contains characters
  other than digits, `+ - * /`, parentheses and spaces, or cannot be evaluated (division by zero)
  -> `format_score` (0.1): the model at least used the answer format;
- an equation whose value equals the target -> `score` (1.0); any other value -> `format_score`.

Differences from TinyZero:
- TinyZero's response string includes the prompt and it first cuts everything before
  `Assistant:` / `<|im_start|>assistant` and keeps only the last line; verl (and minirl) pass the
  response alone, so the last `<answer>` anywhere in it is taken.
- TinyZero evaluates the string with Python's `eval` (after a character check, with empty
  builtins); minirl never calls `eval`: it parses the expression with `ast` and walks the tree,
  accepting only numbers, `+ - * /` and unary signs, and computes with exact fractions (TinyZero:
  floats compared with a 1e-5 tolerance). `.` is not accepted (TinyZero allows it, so "1.5" could
  pass as the numbers 1 and 5).
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

__all__ = ["compute_score", "evaluate_equation", "extract_solution", "validate_equation"]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ALLOWED_CHARS = re.compile(r"^[0-9+\-*/()\s]+$")
_MAX_EQUATION_CHARS = 200  # a longer "equation" is not a countdown answer; don't spend time parsing it
_BINARY_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}


def extract_solution(solution_str: str) -> str | None:
    """The equation inside the last `<answer>...</answer>`, stripped, or None."""
    matches = _ANSWER.findall(solution_str)
    return matches[-1].strip() if matches else None


def validate_equation(equation_str: str, available_numbers) -> bool:
    """True if the equation's numbers are exactly `available_numbers` (as a multiset: each once)."""
    used = sorted(int(n) for n in re.findall(r"\d+", equation_str))
    return used == sorted(int(n) for n in available_numbers)


def _evaluate_node(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _evaluate_node(node.body)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _evaluate_node(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _evaluate_node(node.left), _evaluate_node(node.right)
        if isinstance(node.op, ast.Div):
            return left / right  # ZeroDivisionError for x/0
        if type(node.op) in _BINARY_OPS:
            return _BINARY_OPS[type(node.op)](left, right)
    raise ValueError(f"unsupported expression element: {ast.dump(node)}")


def evaluate_equation(equation_str: str) -> Fraction | None:
    """The exact value of an arithmetic expression of integers, `+ - * /` and parentheses, or None.

    Anything else (names, calls, `**`, `//`, decimals, over-long input, division by zero) gives None.
    """
    if len(equation_str) > _MAX_EQUATION_CHARS or not _ALLOWED_CHARS.match(equation_str):
        return None
    try:
        return _evaluate_node(ast.parse(equation_str.strip(), mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None


def compute_score(
    solution_str: str, ground_truth: dict, format_score: float = 0.1, score: float = 1.0
) -> float:
    """Score one response; `ground_truth` is `{"target": int, "numbers": list[int]}`."""
    target = Fraction(int(ground_truth["target"]))
    equation = extract_solution(solution_str)
    if equation is None:
        return 0.0
    if not validate_equation(equation, ground_truth["numbers"]):
        return format_score
    value = evaluate_equation(equation)
    if value is None:
        return format_score
    return score if value == target else format_score
