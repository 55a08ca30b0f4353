"""Build the tools of a run from the tool config YAML (`actor_rollout_ref.rollout.multi_turn.tool_config_path`).

The file lists tools, each a class to import, its config and its schema (verl's format):

    tools:
      - class_name: minirl.tools.calculator.CalculatorTool   # module path + class, imported
        config:
          type: native                                       # verl's only tool type at the pin
          max_expression_length: 64
        tool_schema:                                         # OpenAI function format (minirl.tools.schemas)
          type: function
          function: {name: calc, description: ..., parameters: {...}}

Mirrors `verl/tools/tool_registry.py`: `get_tool_class` (`:41`), `initialize_tools_from_config` (`:55`),
`load_all_tools` (`:83`), and the path lookup `resolve_config_path`
(`verl/experimental/agent_loop/utils.py:19`: absolute, then the working directory, then the project
root). `AgentLoopWorker.__init__` loads the tools once per worker (`verl/experimental/agent_loop/agent_loop.py:461`).

minirl simplifies: no `function_tool_path` (verl's `@function_tool` functions, whose schema is read
from the signature; minirl rejects the key at config time); every problem with the file is one line
naming the file, the tool's index and the fix.
"""

from __future__ import annotations

import importlib

from minirl.config.schema_multi_turn import find_tool_config, tool_config_candidates
from minirl.tools.base_tool import BaseTool
from minirl.tools.schemas import OpenAIFunctionToolSchema, SchemaError

__all__ = ["ToolConfigError", "get_tool_class", "initialize_tools_from_config", "load_all_tools",
           "resolve_config_path"]


class ToolConfigError(ValueError):
    """The tool config file is missing or wrong; one line names the file, the entry and the fix."""


def resolve_config_path(path: str) -> str:
    """An absolute path as is; else the first of cwd/path, <project root>/path, <package>/path that exists.

    The search is `minirl.config.schema_multi_turn.find_tool_config` (the config check looks the same way).
    """
    found = find_tool_config(path)
    if found is None:
        raise ToolConfigError(f"tool config {str(path)!r} not found (looked in {', '.join(tool_config_candidates(path))}). "
                              "Fix: set actor_rollout_ref.rollout.multi_turn.tool_config_path to an existing YAML file, "
                              "e.g. minirl/tools/config/calculator_tool_config.yaml.")
    return found


def _where(error: BaseException) -> str:
    """' (file.py:LINE)': where the innermost frame of `error` ran, or ''."""
    tb = error.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    return f" ({tb.tb_frame.f_code.co_filename}:{tb.tb_lineno})"


def get_tool_class(cls_name: str) -> type:
    """Import `package.module.Class` (verl: `get_tool_class`); the class must subclass `BaseTool`."""
    module_name, _, class_name = str(cls_name).rpartition(".")
    if not module_name:
        raise ToolConfigError(f"class_name {cls_name!r} is not a dotted path. Fix: write it as package.module.Class.")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ToolConfigError(f"class_name {cls_name!r}: cannot import module {module_name!r} ({e}). Fix: a module "
                              "on the Python path (PYTHONPATH, or an installed package).") from None
    except Exception as e:  # noqa: BLE001 (the module's own code raised while it was imported)
        raise ToolConfigError(f"class_name {cls_name!r}: importing {module_name!r} raised {type(e).__name__}: "
                              f"{e}{_where(e)}. Fix: correct the module at that line.") from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, BaseTool)):
        raise ToolConfigError(f"class_name {cls_name!r}: {module_name} has no BaseTool subclass {class_name!r}. Fix: "
                              "name a class that subclasses minirl.tools.BaseTool.")
    return cls


def initialize_tools_from_config(tools_config_file: str) -> list[BaseTool]:
    """Instantiate every tool the YAML lists: `cls(config=..., tool_schema=...)`, in file order."""
    from omegaconf import OmegaConf

    path = resolve_config_path(tools_config_file)
    try:
        raw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except Exception as e:  # noqa: BLE001 (a YAML syntax error of any kind)
        raise ToolConfigError(f"tool config {path}: not valid YAML ({str(e).splitlines()[0]}).") from None
    entries = raw.get("tools") if isinstance(raw, dict) else None
    if not isinstance(entries, list):
        raise ToolConfigError(f"tool config {path}: needs a top-level list `tools:` (one entry per tool).")
    tools, names = [], set()
    for i, entry in enumerate(entries):
        where = f"tool config {path}, tools[{i}]"
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise ToolConfigError(f"{where}: each entry needs class_name (and config, tool_schema).")
        config = dict(entry.get("config") or {"type": "native"})
        if config.get("type", "native") != "native":
            raise ToolConfigError(f"{where}: config.type={config.get('type')!r}; verl's only tool type is native.")
        try:
            schema = OpenAIFunctionToolSchema.from_dict(entry["tool_schema"]) if entry.get("tool_schema") else None
            cls = get_tool_class(entry["class_name"])
        except (SchemaError, ToolConfigError, ValueError) as e:
            raise ToolConfigError(f"{where}: {e}") from None
        try:
            tool = cls(config=config, tool_schema=schema)
        except (SchemaError, ToolConfigError) as e:
            raise ToolConfigError(f"{where}: {e}") from None
        except Exception as e:  # noqa: BLE001 (any error of the tool's own __init__ is one line, not a traceback)
            raise ToolConfigError(f"{where}: {cls.__name__}(config=..., tool_schema=...) raised {type(e).__name__}: "
                                  f"{e}{_where(e)}. Fix: the tool's config: block, or the class's __init__.") from None
        if tool.name in names:
            raise ToolConfigError(f"{where}: a second tool named {tool.name!r}; tool names must be unique.")
        names.add(tool.name)
        tools.append(tool)
    return tools


def load_all_tools(tool_config_path: str | None, function_tool_path: str | None = None) -> list[BaseTool]:
    """The run's tools (verl: `load_all_tools`); `function_tool_path` is not implemented by minirl."""
    if function_tool_path:
        raise ToolConfigError("multi_turn.function_tool_path is not implemented by minirl; declare the tool as a "
                              "BaseTool subclass in the tool config YAML instead.")
    return initialize_tools_from_config(tool_config_path) if tool_config_path else []
