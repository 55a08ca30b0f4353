"""`BaseTool`: the lifecycle every tool follows inside a multi-turn session.

A tool is an object the agent loop calls when the model writes a tool call. Its life, per call (as
verl's `ToolAgentLoop._call_tool` drives it, `verl/experimental/agent_loop/tool_agent_loop.py:431`):

1. `create(create_kwargs=...)` -> an instance id (a tool may keep per-trajectory state under it);
2. `execute(instance_id, parameters, agent_data=...)` -> `(ToolResponse, step_reward, metrics)`:
   the response text becomes the `tool` message the model reads next turn; the step reward is
   collected in the session's `tool_rewards`; the metrics dict is the tool's own report;
3. `release(instance_id)`, always, even when `execute` raised;
4. `calc_reward(instance_id)`: a reward computed from the tool's state. verl defines it but at the
   pinned commit no agent loop calls it; a custom reward function that needs a tool-state reward
   reads `tool_rewards` from the trajectory's `extra_fields` instead (verl merges them into the
   reward function's `extra_info`, `AgentLoopWorker._compute_score`,
   `verl/experimental/agent_loop/agent_loop.py:937`).

Mirrors `BaseTool` (`verl/tools/base_tool.py:24`). A tool is built from the tool config YAML as
`cls(config=<its config dict>, tool_schema=<OpenAIFunctionToolSchema or None>)`; a subclass with a
built-in schema overrides `get_openai_tool_schema`.

Rule (DESIGN.md): a tool knows nothing of the agent loop that calls it, and never evaluates model
output as code.

minirl simplifies: the base class does not print its schema at construction (verl's does).
"""

from __future__ import annotations

import uuid
from typing import Any

from minirl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["BaseTool"]


class BaseTool:
    """Base class of tools: `create` / `execute` / `calc_reward` / `release`, named by its schema.

    Args:
        config: the tool's `config:` block of the tool config YAML (a plain dict).
        tool_schema: the schema from the YAML, or None to use `get_openai_tool_schema()`.

    Attributes:
        name: `tool_schema.function.name`, what the model writes in `{"name": ...}`.
    """

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        self.config = dict(config or {})
        self.tool_schema = tool_schema or self.get_openai_tool_schema()
        if self.tool_schema is None:
            raise ValueError(f"{type(self).__name__}: no tool schema. Fix: give tool_schema in the tool config YAML "
                             "or override get_openai_tool_schema().")
        self.name = self.tool_schema.function.name

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema | None:
        """The tool's schema in OpenAI function format (a subclass may build it in code)."""
        return getattr(self, "tool_schema", None)

    async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, ToolResponse]:
        """Start an instance for one call; returns `(instance_id, creation response)`."""
        return (instance_id or str(uuid.uuid4())), ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        """Run the tool on the decoded arguments; returns `(response, step reward, metrics)`.

        `kwargs` may hold `agent_data` (the session's state, for tools that need the history).
        """
        return ToolResponse(text="Updated the tool state."), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        """A reward from the tool's state (see the module docstring: no agent loop calls it at the pin)."""
        return 0.0

    async def release(self, instance_id: str, **kwargs) -> None:
        """Free what `create` set up."""
