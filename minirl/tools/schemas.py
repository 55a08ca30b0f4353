"""Tool schemas in OpenAI's function format, and what a tool hands back.

A tool tells the model what it does with a JSON schema in OpenAI's *function* format, the format
chat templates render into the prompt and tool-call parsers read back:

    {"type": "function",
     "function": {"name": "calc", "description": "Evaluate an arithmetic expression.",
                  "parameters": {"type": "object",
                                 "properties": {"expr": {"type": "string", "description": "..."}},
                                 "required": ["expr"]}}}

Mirrors `verl/tools/schemas.py`: `OpenAIFunctionPropertySchema` (`:21`), `OpenAIFunctionParametersSchema`
(`:32`), `OpenAIFunctionSchema` (`:41`), `OpenAIFunctionToolSchema` (`:52`), `OpenAIFunctionParsedSchema`
(`:59`), `OpenAIFunctionCallSchema` (`:66`) and `ToolResponse` (`:98`).

minirl simplifies: plain dataclasses with `from_dict` / `model_dump` instead of pydantic models (verl
validates with pydantic's `model_validate`; minirl checks the few fields it needs and says which one
is wrong); `ToolResponse` carries text only (verl's may carry images and videos for VL models).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "OpenAIFunctionCallSchema",
    "OpenAIFunctionParametersSchema",
    "OpenAIFunctionParsedSchema",
    "OpenAIFunctionPropertySchema",
    "OpenAIFunctionSchema",
    "OpenAIFunctionToolSchema",
    "ToolResponse",
]


class SchemaError(ValueError):
    """A tool schema is malformed; the message names the field and what it should be."""


def _need(d: Any, key: str, kind: type | tuple, where: str):
    if not isinstance(d, dict) or key not in d:
        raise SchemaError(f"tool schema: {where} has no {key!r} (OpenAI function format: "
                          "{type: function, function: {name, description, parameters}}).")
    if not isinstance(d[key], kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise SchemaError(f"tool schema: {where}.{key} must be a {names}, got {d[key]!r}.")
    return d[key]


@dataclass
class OpenAIFunctionPropertySchema:
    """One parameter: its JSON type (`"string"`, `"integer"`, ...), a description, allowed values."""

    type: str | list[str]
    description: str | None = None
    enum: list[Any] | None = None


@dataclass
class OpenAIFunctionParametersSchema:
    """The parameters object: `type: object`, one property per argument, the required ones."""

    type: str = "object"
    properties: dict[str, OpenAIFunctionPropertySchema] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)


@dataclass
class OpenAIFunctionSchema:
    """A function: its name (what the model writes in a tool call), description and parameters."""

    name: str
    description: str
    parameters: OpenAIFunctionParametersSchema = field(default_factory=OpenAIFunctionParametersSchema)
    strict: bool = False


@dataclass
class OpenAIFunctionToolSchema:
    """A tool: `{"type": "function", "function": {...}}` (verl: `OpenAIFunctionToolSchema`)."""

    type: str
    function: OpenAIFunctionSchema

    @classmethod
    def from_dict(cls, d: dict) -> OpenAIFunctionToolSchema:
        """Build from the YAML/JSON dict (verl: pydantic `model_validate`); a bad field raises `SchemaError`."""
        kind = _need(d, "type", str, "the tool")
        fn = _need(d, "function", dict, "the tool")
        name = _need(fn, "name", str, "function")
        description = _need(fn, "description", str, "function")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        props = _need(params, "properties", dict, "function.parameters")
        properties = {}
        for arg, spec in props.items():
            ptype = _need(spec, "type", (str, list), f"function.parameters.properties.{arg}")
            properties[arg] = OpenAIFunctionPropertySchema(ptype, spec.get("description"), spec.get("enum"))
        required = list(params.get("required") or [])
        unknown = [r for r in required if r not in properties]
        if unknown:
            raise SchemaError(f"tool schema {name!r}: required arguments {unknown} are not among the properties "
                              f"{sorted(properties)}.")
        parameters = OpenAIFunctionParametersSchema(str(params.get("type", "object")), properties, required)
        return cls(kind, OpenAIFunctionSchema(name, description, parameters, bool(fn.get("strict", False))))

    def model_dump(self) -> dict:
        """The schema as the dict chat templates receive (verl: `model_dump(exclude_unset=True, exclude_none=True)`)."""
        props = {}
        for arg, p in self.function.parameters.properties.items():
            props[arg] = {k: v for k, v in (("type", p.type), ("description", p.description), ("enum", p.enum))
                          if v is not None}
        params = {"type": self.function.parameters.type, "properties": props}
        if self.function.parameters.required:
            params["required"] = list(self.function.parameters.required)
        fn = {"name": self.function.name, "description": self.function.description, "parameters": params}
        if self.function.strict:
            fn["strict"] = True
        return {"type": self.type, "function": fn}


@dataclass
class OpenAIFunctionParsedSchema:
    """A parsed tool call before its arguments are decoded: `name` and `arguments` as a JSON string."""

    name: str
    arguments: str


@dataclass
class OpenAIFunctionCallSchema:
    """A tool call with decoded arguments (a dict), as an assistant message's `tool_calls` entry holds it."""

    name: str
    arguments: dict[str, Any]

    @staticmethod
    def from_openai_function_parsed_schema(parsed: OpenAIFunctionParsedSchema) -> tuple[OpenAIFunctionCallSchema, bool]:
        """Decode the JSON arguments; returns `(call, has_decode_error)` (arguments `{}` when they are not an object)."""
        try:
            arguments = json.loads(parsed.arguments)
        except (json.JSONDecodeError, TypeError):
            return OpenAIFunctionCallSchema(parsed.name, {}), True
        if not isinstance(arguments, dict):
            return OpenAIFunctionCallSchema(parsed.name, {}), True
        return OpenAIFunctionCallSchema(parsed.name, arguments), False


@dataclass
class ToolResponse:
    """What a tool returns to the conversation: the text of the `tool` message (verl: `ToolResponse`)."""

    text: str | None = None

    def is_empty(self) -> bool:
        return not self.text
