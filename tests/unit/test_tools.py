"""minirl.tools: the calculator's safe parser and bounds, schemas, the tool config registry."""
import asyncio
import builtins

import pytest

from minirl.tools import (
    CALCULATOR_TOOL_CONFIG,
    BaseTool,
    CalculatorTool,
    OpenAIFunctionToolSchema,
    ToolConfigError,
    initialize_tools_from_config,
    load_all_tools,
)
from minirl.tools.calculator import CalculatorError, evaluate
from minirl.tools.schemas import SchemaError


@pytest.mark.parametrize("expr, value", [("347*56", "19432"), ("(2+3)*4", "20"), ("7/2", "3.5"), ("-3+5", "2"),
                                         ("1/3", "0.333333"), ("2*-(3-10)", "14"), (" 12 + 30 ", "42"),
                                         ("0.1+0.2", "0.3"), ("10/4*2", "5"), ("1-2-3", "-4")])
def test_calculator_values_are_exact(expr, value):
    assert evaluate(expr) == value


@pytest.mark.parametrize("expr, kind", [("", "syntax"), ("2+", "syntax"), ("(1+2", "syntax"), ("1 2", "syntax"),
                                        ("__import__('os')", "syntax"), ("2**8", "syntax"), ("1.2.3", "syntax"),
                                        ("1/0", "division_by_zero"), ("1/(2-2)", "division_by_zero"),
                                        ("1" * 65, "too_long"), ("(" * 20 + "1" + ")" * 20, "too_long"),
                                        ("9" * 25 + "*" + "9" * 25, "overflow")])
def test_calculator_refuses_bad_input_with_a_kind(expr, kind):
    with pytest.raises(CalculatorError) as e:
        evaluate(expr)
    assert e.value.kind == kind and str(e.value)


def test_calculator_time_bound_and_no_eval(monkeypatch):
    with pytest.raises(CalculatorError) as e:
        evaluate("1+2*3", timeout_s=-1.0)  # the deadline has passed before the first node
    assert e.value.kind == "timeout"

    def forbidden(*a, **k):
        raise AssertionError("the calculator must never eval/exec model output")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    assert evaluate("(12+30)*2") == "84"


def test_calculator_tool_returns_errors_as_observations():
    (tool,) = initialize_tools_from_config(CALCULATOR_TOOL_CONFIG)
    assert isinstance(tool, CalculatorTool) and tool.name == "calc" and tool.argument == "expr"

    async def call(args):
        iid, _ = await tool.create()
        try:
            return await tool.execute(iid, args)
        finally:
            await tool.release(iid)

    resp, reward, info = asyncio.run(call({"expr": "347*56"}))
    assert (resp.text, reward, info) == ("19432", 0.0, {})
    resp, _, info = asyncio.run(call({"expr": "1/0"}))
    assert resp.text == "error: division by zero" and info == {"error": "division_by_zero"}
    resp, _, info = asyncio.run(call({"x": "1"}))
    assert resp.text.startswith("error: pass the expression") and info == {"error": "bad_arguments"}


def test_schema_round_trip_and_bad_schemas():
    d = {"type": "function", "function": {"name": "lookup", "description": "find a word",
                                          "parameters": {"type": "object",
                                                         "properties": {"word": {"type": "string"}},
                                                         "required": ["word"]}}}
    schema = OpenAIFunctionToolSchema.from_dict(d)
    assert schema.model_dump() == d and schema.function.name == "lookup"
    with pytest.raises(SchemaError, match="has no 'name'"):
        OpenAIFunctionToolSchema.from_dict({"type": "function", "function": {"description": "x"}})
    with pytest.raises(SchemaError, match=r"required arguments \['w'\]"):
        OpenAIFunctionToolSchema.from_dict({"type": "function", "function": {
            "name": "f", "description": "x", "parameters": {"properties": {}, "required": ["w"]}}})
    with pytest.raises(ValueError, match="no tool schema"):
        BaseTool({})


def test_tool_config_errors_are_one_line(tmp_path):
    with pytest.raises(ToolConfigError, match="not found"):
        initialize_tools_from_config(str(tmp_path / "missing.yaml"))
    cases = {
        "tools: 3\n": "top-level list `tools:`",
        "tools:\n  - config: {}\n": "needs class_name",
        "tools:\n  - class_name: os.path.join\n": "no BaseTool subclass",
        "tools:\n  - class_name: nosuchmodule.Tool\n": "cannot import module",
        "tools:\n  - class_name: minirl.tools.BaseTool\n    config: {type: mcp}\n": "only tool type is native",
    }
    from pathlib import Path

    calc = Path(CALCULATOR_TOOL_CONFIG).read_text().split("tools:\n", 1)[1]
    cases["tools:\n" + calc + calc] = "a second tool named 'calc'"
    for i, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"t{i}.yaml"
        path.write_text(text)
        with pytest.raises(ToolConfigError, match=message) as e:
            initialize_tools_from_config(str(path))
        assert "\n" not in str(e.value) and str(path) in str(e.value)
    with pytest.raises(ToolConfigError, match="function_tool_path is not implemented"):
        load_all_tools(None, "tools.py")
