"""Tools for multi-turn agent loops: `BaseTool`, OpenAI-format schemas, the registry, the calculator.

Mirrors `verl/tools/` at the pinned commit: `BaseTool` (`verl/tools/base_tool.py:24`), the schemas
(`verl/tools/schemas.py`), the registry that builds tools from the tool config YAML
(`verl/tools/tool_registry.py:55`). minirl adds one real tool, the calculator
(`minirl.tools.calculator`), and its config `minirl/tools/config/calculator_tool_config.yaml`.

Tools know nothing of the agent loop that calls them (`minirl.agent_loop.tool_agent_loop`).
"""

from minirl.tools.base_tool import BaseTool
from minirl.tools.calculator import CalculatorTool
from minirl.tools.schemas import (
    OpenAIFunctionCallSchema,
    OpenAIFunctionParametersSchema,
    OpenAIFunctionParsedSchema,
    OpenAIFunctionPropertySchema,
    OpenAIFunctionSchema,
    OpenAIFunctionToolSchema,
    ToolResponse,
)
from minirl.tools.tool_registry import (
    ToolConfigError,
    get_tool_class,
    initialize_tools_from_config,
    load_all_tools,
    resolve_config_path,
)

CALCULATOR_TOOL_CONFIG = "minirl/tools/config/calculator_tool_config.yaml"
"""The calculator's tool config, as `tool_config_path` takes it (resolved against cwd, then the project root)."""

__all__ = ["CALCULATOR_TOOL_CONFIG", "BaseTool", "CalculatorTool", "OpenAIFunctionCallSchema",
           "OpenAIFunctionParametersSchema", "OpenAIFunctionParsedSchema", "OpenAIFunctionPropertySchema",
           "OpenAIFunctionSchema", "OpenAIFunctionToolSchema", "ToolConfigError", "ToolResponse", "get_tool_class",
           "initialize_tools_from_config", "load_all_tools", "resolve_config_path"]
