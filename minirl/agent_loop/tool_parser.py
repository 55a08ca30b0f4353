"""Tool-call parsing: find `<tool_call>{json}</tool_call>` in what the model generated (verl's `hermes` format).

After each assistant turn the agent loop decodes the generated tokens and asks the parser for the
tool calls in them. The `hermes` format (Qwen2.5's, NousResearch Hermes'): each call is a JSON object
between two marker strings,

    <tool_call>{"name":"calc","arguments":{"expr":"347*56"}}</tool_call>

and the text outside the markers is the assistant's `content`. With minirl's byte-level tokenizer the
markers are plain characters, so the tiny model writes them one byte at a time.

Mirrors `verl/experimental/agent_loop/tool_parser.py`: `FunctionCall` (`:32`), the `ToolParser`
registry (`:48`, `get_tool_parser` `:82`, `register` `:88`) and `HermesToolParser` (`:97`), whose
`extract_tool_calls` (`:108`) decodes the response, finds every `<tool_call>...</tool_call>` span,
`json.loads` it and keeps `name` and `arguments` (re-encoded as a JSON string). A span that is not
valid JSON (or lacks `name`/`arguments`) is dropped (verl logs each at error level; minirl at debug
level) and the parser returns how many were dropped, so the agent loop counts them (`parse_error`).

`render_hermes_tool_calls` is the inverse (minirl only): it writes tool calls back as text. The SFT
rows of the tool task use it to write the demonstration, and the tokenization sanity check uses it to
rebuild an assistant turn from its message; both write compact JSON (no spaces: fewer tokens for the
tiny model; Qwen2.5's chat template writes `json.dumps` spacing).

minirl simplifies: the response is decoded without special tokens (verl keeps them, so its `content`
ends with `<|im_end|>`); no stop tokens (the parsers verl needs them for, e.g. Gemma 4, are not ported;
hermes relies on the EOS after the call as verl's does), no other formats (`multi_turn.format` must
be `hermes`).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["FunctionCall", "HermesToolParser", "ToolParser", "render_hermes_tool_calls"]

logger = logging.getLogger(__name__)

TOOL_CALL_START, TOOL_CALL_END = "<tool_call>", "</tool_call>"


@dataclass
class FunctionCall:
    """One parsed call: the function `name` and its `arguments` as a JSON string (verl: `FunctionCall`)."""

    name: str
    arguments: str
    tool_call_id: str | None = None


class ToolParser:
    """Base of the tool-call parsers, registered by `multi_turn.format` (verl: `ToolParser`)."""

    _registry: ClassVar[dict[str, type]] = {}

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    @property
    def stop_token_ids(self) -> list[int]:
        """Extra stop tokens the format needs (none for hermes: the model ends the turn with EOS)."""
        return []

    def extract_tool_calls(self, response_ids: list[int]) -> tuple[str, list[FunctionCall], int]:
        """`(content, calls, dropped)`: the text without the calls, the calls, and how many spans failed to parse."""
        raise NotImplementedError

    @classmethod
    def get_tool_parser(cls, name: str, tokenizer) -> ToolParser:
        if name not in cls._registry:
            raise ValueError(f"unknown tool-call format {name!r}; minirl has {sorted(cls._registry)}. "
                             "Fix: actor_rollout_ref.rollout.multi_turn.format=hermes.")
        return cls._registry[name](tokenizer)

    @classmethod
    def register(cls, name: str):
        def decorator(subclass):
            cls._registry[name] = subclass
            return subclass

        return decorator


@ToolParser.register("hermes")
class HermesToolParser(ToolParser):
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number per turn."""

    tool_call_regex = re.compile(re.escape(TOOL_CALL_START) + r"(.*?)" + re.escape(TOOL_CALL_END), re.DOTALL)

    def extract_tool_calls(self, response_ids: list[int]) -> tuple[str, list[FunctionCall], int]:
        text = self.tokenizer.decode(response_ids, skip_special_tokens=True)
        if TOOL_CALL_START not in text or TOOL_CALL_END not in text:
            return text, [], 0
        calls, dropped = [], 0
        for match in self.tool_call_regex.findall(text):
            try:
                obj = json.loads(match)
                calls.append(FunctionCall(name=str(obj["name"]), arguments=json.dumps(obj["arguments"])))
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                dropped += 1
                logger.debug("could not decode a tool call (%s: %s): %r", type(e).__name__, e, match[:80])
        return self.tool_call_regex.sub("", text), calls, dropped


def render_hermes_tool_calls(tool_calls: list[dict]) -> str:
    """Assistant-message `tool_calls` -> the text the model writes: `<tool_call>{...}</tool_call>` each.

    Each entry is OpenAI's `{"type": "function", "function": {"name": ..., "arguments": {...} or "json"}}`.
    JSON is compact (`separators=(",", ":")`) with keys in the order name, arguments.
    """
    out = []
    for call in tool_calls:
        fn = call.get("function", call)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                pass
        out.append(TOOL_CALL_START + json.dumps({"name": fn["name"], "arguments": args}, separators=(",", ":"))
                   + TOOL_CALL_END)
    return "".join(out)
