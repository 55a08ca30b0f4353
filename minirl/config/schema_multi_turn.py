"""`actor_rollout_ref.rollout.multi_turn`: the tool agent loop's keys, one docstring each.

verl: `MultiTurnConfig` (`verl/workers/config/rollout.py:48`), the `multi_turn:` block of
`verl/trainer/config/rollout/rollout.yaml`. Every key verl has at the pin is here; minirl implements
all but `function_tool_path`, `use_inference_chat_template` and `num_repeat_rollouts`, which must stay
at their defaults (`minirl.config.unimplemented`). `multi_turn_problems` checks the values at load time.
Kept apart from `minirl.config.schema` so each file stays small; `schema.RolloutConfig` uses it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FORMATS", "SANITY_CHECK_MODES", "TRUNCATE_SIDES", "MultiTurnConfig", "multi_turn_problems"]

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


def multi_turn_problems(cfg) -> list[str]:
    """One line per bad `rollout.multi_turn` value (names, ranges, the tool config file)."""
    key = "actor_rollout_ref.rollout.multi_turn"
    mt = cfg.actor_rollout_ref.rollout.multi_turn
    p = []
    if mt.format not in FORMATS:
        p.append(f"{key}.format={mt.format!r}: minirl parses {list(FORMATS)} tool calls (verl also has gpt-oss, "
                 f"qwen3_coder, ...). Fix: {key}.format=hermes.")
    if mt.tool_response_truncate_side not in TRUNCATE_SIDES:
        p.append(f"{key}.tool_response_truncate_side={mt.tool_response_truncate_side!r} is not one of "
                 f"{list(TRUNCATE_SIDES)}. Fix: {key}.tool_response_truncate_side=middle.")
    if mt.tokenization_sanity_check_mode not in SANITY_CHECK_MODES:
        p.append(f"{key}.tokenization_sanity_check_mode={mt.tokenization_sanity_check_mode!r} is not one of "
                 f"{list(SANITY_CHECK_MODES)}. Fix: {key}.tokenization_sanity_check_mode=strict.")
    for name in ("max_assistant_turns", "max_user_turns"):
        if mt[name] is not None and int(mt[name]) < 1:
            p.append(f"{key}.{name}={mt[name]} must be >= 1 (or null for no limit). Fix: {key}.{name}=null.")
    for name in ("max_parallel_calls", "max_tool_response_length"):
        if int(mt[name]) < 1:
            p.append(f"{key}.{name}={mt[name]} must be >= 1. Fix: {key}.{name}={1 if 'calls' in name else 256}.")
    if mt.enable and mt.tool_config_path:
        from minirl.tools.tool_registry import ToolConfigError, resolve_config_path

        try:
            resolve_config_path(mt.tool_config_path)
        except ToolConfigError as e:
            p.append(f"{key}.tool_config_path={mt.tool_config_path!r}: {str(e).split(' (looked', 1)[0]}. Fix: give "
                     "an existing YAML file, e.g. minirl/tools/config/calculator_tool_config.yaml.")
    if mt.tool_config_path and not mt.enable:
        p.append(f"{key}.tool_config_path is set but {key}.enable=False, so no tool would load. Fix: "
                 f"{key}.enable=True.")
    return p
