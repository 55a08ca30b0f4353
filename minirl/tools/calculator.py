"""The calculator tool: exact arithmetic on `+ - * /` and parentheses, parsed by hand, never `eval`.

The model writes a tool call such as `{"name": "calc", "arguments": {"expr": "347*56"}}`; the tool
answers `19432`, which the agent loop splices into the conversation as a `tool` message. Everything
the model sends is untrusted text, so the expression is parsed by a small recursive-descent parser
over a fixed grammar (no `eval`, no `ast.literal_eval`, no names, no exponent):

    expr   := term (("+" | "-") term)*
    term   := factor (("*" | "/") factor)*
    factor := ("+" | "-") factor | NUMBER | "(" expr ")"

and every input is bounded: its length (`max_expression_length` characters), the nesting depth
(`max_depth`), the size of every number and intermediate result (`max_result_digits` digits) and
the wall time (`timeout_s`, checked at every node). Arithmetic is exact (`fractions.Fraction`); a
result that is not an integer is printed with at most 6 decimals.

Errors never raise: they come back as the observation `error: <what>` (so the model sees what went
wrong, as verl shows tool failures) with the metrics `{"error": <kind>}`, which the agent loop
counts. Kinds: `bad_arguments`, `too_long`, `syntax`, `division_by_zero`, `overflow`, `timeout`.

verl ships no calculator; its example tools (GSM8K's answer checker, search, sandboxed code) follow
the same `BaseTool` contract (`verl/tools/base_tool.py:24`).
"""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any

from minirl.tools.base_tool import BaseTool
from minirl.tools.schemas import ToolResponse

__all__ = ["CalculatorError", "CalculatorTool", "evaluate", "format_number"]

_OPS = "+-*/()"


class CalculatorError(ValueError):
    """An expression the calculator refuses; `kind` names the failure (counted by the agent loop)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _tokenize(expr: str) -> list[tuple[str, str, int]]:
    """`"3*(4+5)"` -> `[("num", "3", 0), ("op", "*", 1), ...]`; anything else is a syntax error."""
    tokens, i = [], 0
    while i < len(expr):
        ch = expr[i]
        if ch in " \t":
            i += 1
        elif ch in _OPS:
            tokens.append(("op", ch, i))
            i += 1
        elif ch.isdigit() or ch == ".":
            j = i
            while j < len(expr) and (expr[j].isdigit() or expr[j] == "."):
                j += 1
            text = expr[i:j]
            if text.count(".") > 1 or text == ".":
                raise CalculatorError("syntax", f"bad number {text!r} at position {i}")
            tokens.append(("num", text, i))
            i = j
        else:
            raise CalculatorError("syntax", f"unexpected character {ch!r} at position {i}")
    return tokens


class _Parser:
    """Recursive descent over the token list, with the depth, size and time bounds."""

    def __init__(self, tokens, max_depth: int, max_digits: int, deadline: float):
        self.tokens, self.pos = tokens, 0
        self.max_depth, self.limit, self.deadline = max_depth, Fraction(10) ** max_digits, deadline

    def _peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ("end", "", -1)

    def _tick(self, depth: int) -> None:
        if time.perf_counter() > self.deadline:
            raise CalculatorError("timeout", "the expression took too long to evaluate")
        if depth > self.max_depth:
            raise CalculatorError("too_long", f"parentheses nested deeper than {self.max_depth}")

    def _bounded(self, value: Fraction) -> Fraction:
        if abs(value) >= self.limit or value.denominator >= self.limit:
            raise CalculatorError("overflow", "a number in the expression is too large")
        return value

    def parse(self) -> Fraction:
        value = self.expr(0)
        kind, text, at = self._peek()
        if kind != "end":
            raise CalculatorError("syntax", f"unexpected {text!r} at position {at}")
        return value

    def expr(self, depth: int) -> Fraction:
        value = self.term(depth)
        while self._peek()[1] in ("+", "-"):
            op = self.tokens[self.pos][1]
            self.pos += 1
            rhs = self.term(depth)
            value = self._bounded(value + rhs if op == "+" else value - rhs)
        return value

    def term(self, depth: int) -> Fraction:
        value = self.factor(depth)
        while self._peek()[1] in ("*", "/"):
            op = self.tokens[self.pos][1]
            self.pos += 1
            rhs = self.factor(depth)
            if op == "/" and rhs == 0:
                raise CalculatorError("division_by_zero", "division by zero")
            value = self._bounded(value * rhs if op == "*" else value / rhs)
        return value

    def factor(self, depth: int) -> Fraction:
        self._tick(depth)
        kind, text, at = self._peek()
        if text in ("+", "-"):
            self.pos += 1
            value = self.factor(depth + 1)
            return -value if text == "-" else value
        if kind == "num":
            self.pos += 1
            return self._bounded(Fraction(text))
        if text == "(":
            self.pos += 1
            value = self.expr(depth + 1)
            if self._peek()[1] != ")":
                raise CalculatorError("syntax", f"missing ')' for the '(' at position {at}")
            self.pos += 1
            return value
        raise CalculatorError("syntax", "the expression ended early" if kind == "end" else
                              f"unexpected {text!r} at position {at}")


def format_number(value: Fraction) -> str:
    """`Fraction(19432)` -> `"19432"`; `Fraction(1, 3)` -> `"0.333333"` (6 decimals, trailing zeros cut)."""
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def evaluate(expr: str, max_expression_length: int = 64, max_depth: int = 16, max_result_digits: int = 30,
             timeout_s: float = 0.05) -> str:
    """Evaluate `expr` within the bounds; returns the formatted result or raises `CalculatorError`."""
    if len(expr) > max_expression_length:
        raise CalculatorError("too_long", f"the expression has {len(expr)} characters; at most "
                                          f"{max_expression_length} are allowed")
    tokens = _tokenize(expr)
    if not tokens:
        raise CalculatorError("syntax", "the expression is empty")
    deadline = time.perf_counter() + timeout_s
    return format_number(_Parser(tokens, max_depth, max_result_digits, deadline).parse())


class CalculatorTool(BaseTool):
    """`calc(expr)`: the value of an arithmetic expression, or `error: ...` (see the module docstring).

    Config keys (the `config:` block of the tool YAML): `max_expression_length` (64), `max_depth` (16),
    `max_result_digits` (30), `timeout_s` (0.05), `argument` (the parameter holding the expression,
    default: the schema's first required parameter).
    """

    minirl_inline = True
    """Runs on the agent loop's event loop (`minirl.tools.calling`): it returns at once and bounds its own time."""

    def __init__(self, config: dict, tool_schema=None):
        super().__init__(config, tool_schema)
        required = self.tool_schema.function.parameters.required
        props = list(self.tool_schema.function.parameters.properties)
        self.argument = self.config.get("argument") or (required[0] if required else (props[0] if props else "expr"))
        self.bounds = {"max_expression_length": int(self.config.get("max_expression_length", 64)),
                       "max_depth": int(self.config.get("max_depth", 16)),
                       "max_result_digits": int(self.config.get("max_result_digits", 30)),
                       "timeout_s": float(self.config.get("timeout_s", 0.05))}

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        expr = parameters.get(self.argument) if isinstance(parameters, dict) else None
        try:
            if not isinstance(expr, str):
                raise CalculatorError("bad_arguments", f"pass the expression as a string in {self.argument!r}")
            return ToolResponse(text=evaluate(expr, **self.bounds)), 0.0, {}
        except CalculatorError as e:
            return ToolResponse(text=f"error: {e}"), 0.0, {"error": e.kind}
