"""`actor_rollout_ref.rollout.multi_turn`: the tool agent loop's keys, one docstring each.

verl: `MultiTurnConfig` (`verl/workers/config/rollout.py:48`), the `multi_turn:` block of
`verl/trainer/config/rollout/rollout.yaml`. Every key verl has at the pin is here; minirl implements
all but `function_tool_path`, `use_inference_chat_template` and `num_repeat_rollouts`, which must stay
at their defaults (`minirl.config.unimplemented`). `minirl.config.values` checks the values at load time.
Kept apart from `minirl.config.schema` so each file stays small; `schema.RolloutConfig` uses it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["FORMATS", "SANITY_CHECK_MODES", "TRUNCATE_SIDES", "MultiTurnConfig", "find_tool_config",
           "tool_config_candidates"]

FORMATS = ("hermes",)
"""Tool-call formats minirl parses (verl also has gpt-oss, qwen3_coder, glm, seed, minimax, kimi, deepseek_v4, gemma4)."""
TRUNCATE_SIDES = ("left", "middle", "right")
SANITY_CHECK_MODES = ("strict", "ignore_strippable", "disable")


@dataclass
class MultiTurnConfig:
    """`rollout.multi_turn`: multi-turn sessions in which the model calls tools (verl: `MultiTurnConfig`)."""

    enable: bool = False
    """Load the tools and allow the tool agent loop: rows whose `agent_name` is `tool_agent` run it (minirl
    requires it for those rows; verl loads tools whenever `tool_config_path` is set)."""
    max_assistant_turns: int | None = None
    """End a session after this many assistant turns (null: no limit; the response budget still applies)."""
    tool_config_path: str | None = None
    """The tool config YAML (verl's format: `tools:` entries with class_name, config, tool_schema), e.g.
    `minirl/tools/config/calculator_tool_config.yaml`; resolved against the working directory, then the project."""
    function_tool_path: str | None = None
    """verl: a Python file of `@function_tool` functions (stateless tools, schema from the signature). Not
    implemented by minirl: must stay at its default (see `minirl.config.unimplemented`)."""
    max_user_turns: int | None = None
    """End a session after this many tool (user) turns (null: no limit)."""
    max_parallel_calls: int = 1
    """At most this many tool calls of one assistant turn run (concurrently); the rest are ignored."""
    max_tool_response_length: int = 256
    """A tool's answer longer than this many characters (verl counts characters, not tokens) is cut."""
    tool_response_truncate_side: str = "middle"
    """Which part of a long tool answer is kept: left keeps the end, right the start, middle both ends."""
    use_inference_chat_template: bool = False
    """verl: re-render the chat with the model's template instead of the recorded ids (legacy SGLang rollout
    only). Not implemented by minirl: must stay at its default (see `minirl.config.unimplemented`)."""
    tokenization_sanity_check_mode: str = "strict"
    """At the end of a session, compare its ids with a full re-tokenization of its messages and log where they
    differ: strict | ignore_strippable (whitespace-only differences pass) | disable."""
    format: str = "hermes"
    """Tool-call format the parser reads: hermes (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`)."""
    num_repeat_rollouts: int | None = None
    """verl: declared in MultiTurnConfig, read by no code at the pin. Not implemented by minirl: must stay at its
    default (see `minirl.config.unimplemented`)."""
    tool_timeout: float = 60.0
    """minirl only (verl has no tool timeout at the pin): seconds one tool call (create, execute, release) may
    take. A call still running then becomes the observation "Error executing tool ...: timed out" and a counted
    `timeout` failure; the session goes on. A user tool runs in its own thread, so a blocking call (`time.sleep`,
    a socket without a timeout) is timed out as well as an `await` that never ends."""


def tool_config_candidates(path: str) -> list[str]:
    """Where `multi_turn.tool_config_path` is looked for: as is if absolute, else cwd/path, <project>/path, <package>/path."""
    path = os.path.expanduser(str(path))
    if os.path.isabs(path):
        return [path]
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [os.path.join(os.getcwd(), path), os.path.join(os.path.dirname(package), path), os.path.join(package, path)]


def find_tool_config(path: str) -> str | None:
    """The first candidate of `tool_config_candidates(path)` that is a file (absolute), or None.

    The config check and the tool registry (`minirl.tools.tool_registry.resolve_config_path`) both use it.
    """
    return next((os.path.abspath(c) for c in tool_config_candidates(path) if os.path.isfile(c)), None)
