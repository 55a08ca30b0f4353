"""`ToolAgentLoop`: a multi-turn session in which the policy calls tools, as a small state machine.

    PENDING --(template the prompt)--> GENERATING --(tool calls in the reply)--> PROCESSING_TOOLS
                                          |   ^                                        |
                        (no call, turn or |   +----(observation appended)--------------+
                         length limit)    v
                                      TERMINATED

One session, turn by turn (`AgentData` holds its state):

- GENERATING: send the session's ids so far to the rollout; append the sampled ids with
  `response_mask` 1 and their log-probs; stop if the response budget or a turn limit is reached;
  otherwise parse the reply for tool calls (`multi_turn.format`, hermes);
- PROCESSING_TOOLS: run up to `max_parallel_calls` calls concurrently; each result, cut to
  `max_tool_response_length` characters, becomes a `tool` message; the template tokens and the
  observation are appended with `response_mask` 0 and log-prob 0 (`minirl.agent_loop.continuous_token`);
- TERMINATED: `response_ids` = everything after the prompt, cut at `rollout.response_length`.

The reward is not computed here: the whole trajectory gets one terminal score (the reward function
reads the decoded response, observations included), placed on the last response token, and GRPO
spreads the sequence-level advantage over every token with `response_mask` 1. Tool failures (an
unparsable call, an unknown tool, arguments that are not a JSON object, a tool that raises, a call
that runs past `multi_turn.tool_timeout` (minirl only: `minirl.tools.calling`), a tool-reported
error) never end the session: verl turns them into observation text the model reads next turn (an
unparsable hermes block is dropped, as in verl), and minirl counts them.

Mirrors `verl/experimental/agent_loop/tool_agent_loop.py`: `AgentState` (`:48`), `AgentData` (`:55`),
`ToolAgentLoop` (`:99`) with `run` (`:124`), `_handle_pending_state` (`:207`),
`_handle_generating_state` (`:223`), `_handle_processing_tools_state` (`:298`),
`_build_assistant_message` (`:401`) and `_call_tool` (`:431`), registered as `tool_agent` and chosen
per sample by the row's `agent_name`.

minirl simplifies: text only (no images, videos, audio, routed experts); no `FunctionTool`
(`function_tool_path`); a turn asks the rollout for up to `response_length` new tokens (verl caps
each request at the budget left, `min(response_length, prompt_length + response_length - len(ids))`;
the final cut gives the same trajectory); minirl adds the per-session record `extra_fields["multi_turn"]`
(turns, token counts by role, mask spans, tool latency, failures) that the trace and the metrics read,
and runs the tokenization sanity check at the end of every session.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from enum import Enum
from typing import Any

from minirl.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from minirl.agent_loop.continuous_token import ContinuousTokenBuilder, token_roles, tokenization_sanity_check
from minirl.agent_loop.tool_parser import FunctionCall, ToolParser
from minirl.tools.calling import ToolTimeout, call_tool
from minirl.tools.schemas import OpenAIFunctionCallSchema, OpenAIFunctionParsedSchema, ToolResponse
from minirl.utils.config import cfg_get

__all__ = ["AgentData", "AgentState", "ToolAgentLoop", "truncate_tool_response"]

logger = logging.getLogger(__name__)
_WARNED: dict[str, int] = {}
WARN_LIMIT = 3
"""Per kind of problem, how many sessions log a warning; later ones are only counted (trace and metrics)."""


def warn_limited(kind: str, message: str) -> None:
    """Log `message` for the first `WARN_LIMIT` sessions that hit `kind`, then say that the rest are counted."""
    n = _WARNED[kind] = _WARNED.get(kind, 0) + 1
    if n <= WARN_LIMIT:
        logger.warning(message)
    if n == WARN_LIMIT:
        logger.warning("(%s: further occurrences are not logged; they are counted in the multi_turn/* metrics and "
                       "the trace's multi_turn summary)", kind)


class AgentState(Enum):
    """Where a session is (verl: `AgentState`)."""

    PENDING = "pending"
    GENERATING = "generating"
    PROCESSING_TOOLS = "processing_tools"
    TERMINATED = "terminated"


class AgentData:
    """Everything one session carries from state to state (verl: `AgentData`).

    `prompt_ids` is the WHOLE sequence so far (prompt + response: what the next generation reads);
    `response_mask` / `response_logprobs` cover its response part. `turns`, `failures`,
    `tool_latency_s`, `truncated`, `roles` are minirl's bookkeeping for the trace.
    """

    def __init__(self, messages: list[dict], metrics: AgentLoopMetrics, request_id: str, tools_kwargs: dict):
        self.messages = messages
        self.metrics = metrics
        self.request_id = request_id
        self.tools_kwargs = tools_kwargs
        self.prompt_ids: list[int] = []
        self.response_ids: list[int] = []  # the last turn's sampled ids
        self.response_mask: list[int] = []
        self.response_logprobs: list[float] | None = []
        self.turn_scores: list[float] = []
        self.tool_rewards: list[float] = []
        self.user_turns = 0
        self.assistant_turns = 0
        self.tool_calls: list[FunctionCall] = []
        self.extra_fields: dict[str, Any] = {}
        self.active_tools: dict = {}
        self.active_schemas: list[dict] = []
        # minirl: per-session record
        self.turns: list[dict] = []
        self.roles: list[str] = []
        self.failures: dict[str, int] = {}
        self.tool_latency_s: list[float] = []
        self.truncated = 0
        self.calls_ignored = 0
        self.termination = ""

    def fail(self, kind: str) -> None:
        self.failures[kind] = self.failures.get(kind, 0) + 1


def truncate_tool_response(text: str, max_length: int, side: str) -> str:
    """Cut `text` to `max_length` characters as verl does: keep the end (`left`), the start (`right`) or both ends."""
    if len(text) <= max_length:
        return text
    if side == "left":
        return "(truncated)..." + text[-max_length:]
    if side == "right":
        return text[:max_length] + "...(truncated)"
    half = max_length // 2
    return text[:half] + "...(truncated)..." + text[len(text) - half:]


@register("tool_agent")
class ToolAgentLoop(AgentLoopBase):
    """The tool-calling agent loop; `tools` are the worker's tools (`minirl.tools.load_all_tools`)."""

    def __init__(self, rollout_config, server_manager, tokenizer, tools: list | None = None, **kwargs):
        super().__init__(rollout_config, server_manager, tokenizer, **kwargs)
        mt = rollout_config.multi_turn
        if not cfg_get(mt, "enable", False):
            raise ValueError("a row asks for agent_name=tool_agent but actor_rollout_ref.rollout.multi_turn.enable="
                             "False. Fix: set multi_turn.enable=True and multi_turn.tool_config_path=<tool YAML>.")
        self.max_user_turns = cfg_get(mt, "max_user_turns")
        self.max_assistant_turns = cfg_get(mt, "max_assistant_turns")
        self.max_parallel_calls = int(cfg_get(mt, "max_parallel_calls", 1))
        self.max_tool_response_length = int(cfg_get(mt, "max_tool_response_length", 256))
        self.tool_response_truncate_side = str(cfg_get(mt, "tool_response_truncate_side", "middle"))
        self.sanity_check_mode = str(cfg_get(mt, "tokenization_sanity_check_mode", "strict"))
        self.tool_timeout = float(cfg_get(mt, "tool_timeout", 60.0))
        self.tools = {tool.name: tool for tool in (tools or [])}
        self.tool_schemas = [tool.tool_schema.model_dump() for tool in (tools or [])]
        self.tool_parser = ToolParser.get_tool_parser(str(cfg_get(mt, "format", "hermes")), tokenizer)
        self.builder = ContinuousTokenBuilder(tokenizer)

    async def run(self, sampling_params, **kwargs) -> AgentLoopOutput:
        agent_data = AgentData(list(kwargs["raw_prompt"]), AgentLoopMetrics(), uuid.uuid4().hex,
                               dict(kwargs.get("tools_kwargs") or {}))
        selection = (kwargs.get("extra_info") or {}).get("tool_selection")  # per-sample tools, as verl
        agent_data.active_tools = {n: self.tools[n] for n in selection if n in self.tools} if selection else self.tools
        agent_data.active_schemas = [t.tool_schema.model_dump() for t in agent_data.active_tools.values()]
        state = AgentState.PENDING
        while state != AgentState.TERMINATED:
            if state == AgentState.PENDING:
                state = await self._handle_pending_state(agent_data, sampling_params)
            elif state == AgentState.GENERATING:
                state = await self._handle_generating_state(agent_data, sampling_params)
            else:
                state = await self._handle_processing_tools_state(agent_data)
        return self._finalize(agent_data)

    # ------------------------------------------------------------------------------------ states
    async def _handle_pending_state(self, agent_data: AgentData, sampling_params) -> AgentState:
        """Template the prompt (with the tool schemas) into the first ids."""
        agent_data.prompt_ids = self.builder.build_initial_tokens(agent_data.messages, agent_data.active_schemas)
        return AgentState.GENERATING

    async def _handle_generating_state(self, agent_data: AgentData, sampling_params) -> AgentState:
        """Sample one assistant turn, append it, decide: terminate, or run its tool calls."""
        t0 = time.perf_counter()
        out = await self.server_manager.generate(agent_data.request_id, agent_data.prompt_ids, sampling_params)
        elapsed = time.perf_counter() - t0
        agent_data.metrics.generate_sequences += elapsed
        agent_data.extra_fields.setdefault("min_global_steps", out.policy_version)
        agent_data.extra_fields["max_global_steps"] = out.policy_version  # the last turn's weights
        agent_data.assistant_turns += 1
        agent_data.response_ids = list(out.token_ids)
        start = len(agent_data.response_mask)
        merge = self.builder.merge_assistant_tokens(agent_data.prompt_ids, agent_data.response_ids)
        logprobs = agent_data.response_logprobs if out.log_probs is not None else None
        agent_data.response_mask, agent_data.response_logprobs = self.builder.align_response_metadata(
            merge, agent_data.response_mask, logprobs, out.log_probs)
        agent_data.prompt_ids = merge.token_ids
        agent_data.roles += token_roles(merge)
        agent_data.turns.append({"turn": len(agent_data.turns) + 1, "role": "assistant", "start": start,
                                 "end": len(agent_data.response_mask), "stop_reason": out.stop_reason,
                                 "generate_s": round(elapsed, 6)})
        if len(agent_data.response_mask) >= self.response_length:
            agent_data.termination = "response_length"
            return AgentState.TERMINATED
        if self.max_assistant_turns and agent_data.assistant_turns >= int(self.max_assistant_turns):
            agent_data.termination = "max_assistant_turns"
            return AgentState.TERMINATED
        if self.max_user_turns and agent_data.user_turns >= int(self.max_user_turns):
            agent_data.termination = "max_user_turns"
            return AgentState.TERMINATED
        content, calls, dropped = self.tool_parser.extract_tool_calls(agent_data.response_ids)
        for _ in range(dropped):
            agent_data.fail("parse_error")
        agent_data.tool_calls = calls
        agent_data.messages.append(self._build_assistant_message(content, agent_data))
        if calls:
            return AgentState.PROCESSING_TOOLS
        agent_data.termination = "no_tool_call"
        return AgentState.TERMINATED

    async def _handle_processing_tools_state(self, agent_data: AgentData) -> AgentState:
        """Run the calls, append their results as `tool` messages (mask 0), go back to generating."""
        previous = list(agent_data.messages)
        calls = agent_data.tool_calls[: self.max_parallel_calls]
        agent_data.calls_ignored += len(agent_data.tool_calls) - len(calls)
        t0 = time.perf_counter()
        responses = await asyncio.gather(*(self._call_tool(c, agent_data.tools_kwargs, agent_data) for c in calls))
        elapsed = time.perf_counter() - t0
        agent_data.metrics.tool_calls += elapsed
        for call, (response, reward, _) in zip(calls, responses):
            message = {"role": "tool", "content": response.text or ""}
            if call.tool_call_id is not None:
                message["tool_call_id"] = call.tool_call_id
            agent_data.messages.append(message)
            if reward is not None:
                agent_data.tool_rewards.append(float(reward))
        merge = self.builder.merge_non_assistant_tokens(previous, agent_data.messages, agent_data.prompt_ids,
                                                        agent_data.active_schemas)
        mask, logprobs = self.builder.align_response_metadata(merge, agent_data.response_mask,
                                                              agent_data.response_logprobs)
        if len(mask) >= self.response_length:  # verl drops the observation that would not fit, and stops
            agent_data.termination = "response_length"
            return AgentState.TERMINATED
        start, roles = len(agent_data.response_mask), token_roles(merge)
        agent_data.prompt_ids, agent_data.response_mask, agent_data.response_logprobs = merge.token_ids, mask, logprobs
        agent_data.roles += roles
        agent_data.turns.append({"turn": len(agent_data.turns) + 1, "role": "tool", "start": start, "end": len(mask),
                                 "template_tokens": roles.count("template"),
                                 "observation_tokens": roles.count("observation"),
                                 "tool_calls": [c.name for c in calls], "tool_s": round(elapsed, 6)})
        agent_data.user_turns += 1
        return AgentState.GENERATING

    # ----------------------------------------------------------------------------------- helpers
    def _build_assistant_message(self, content: str, agent_data: AgentData) -> dict:
        """The assistant turn as a chat message: its text outside the calls, and the calls with decoded arguments."""
        message: dict[str, Any] = {"role": "assistant", "content": content or ""}
        if not agent_data.tool_calls:
            return message
        tool_calls = []
        for call in agent_data.tool_calls[: self.max_parallel_calls]:
            parsed, bad = OpenAIFunctionCallSchema.from_openai_function_parsed_schema(
                OpenAIFunctionParsedSchema(call.name, call.arguments))
            function = {"name": call.name, "arguments": call.arguments if bad else parsed.arguments}
            entry = {"type": "function", "function": function}
            if call.tool_call_id is not None:
                entry["id"] = call.tool_call_id
            tool_calls.append(entry)
        message["tool_calls"] = tool_calls
        return message

    async def _call_tool(self, tool_call: FunctionCall, tools_kwargs: dict, agent_data: AgentData
                         ) -> tuple[ToolResponse, float, dict]:
        """Run one call with the tool's lifecycle; every failure becomes observation text (and is counted)."""
        t0 = time.perf_counter()
        try:
            return self._postprocess_response(*(await self._execute(tool_call, tools_kwargs, agent_data)), agent_data)
        finally:
            agent_data.tool_latency_s.append(time.perf_counter() - t0)

    async def _execute(self, tool_call: FunctionCall, tools_kwargs: dict, agent_data: AgentData):
        name = tool_call.name
        if name not in agent_data.active_tools:
            agent_data.fail("unknown_tool")
            return ToolResponse(text=f"Unknown function '{name}'. Available tools: {list(agent_data.active_tools)}"), \
                0.0, {}
        try:
            arguments = json.loads(tool_call.arguments)
            if not isinstance(arguments, dict):
                raise TypeError(f"expected a JSON object, got {type(arguments).__name__}")
        except (json.JSONDecodeError, TypeError) as e:
            agent_data.fail("bad_json")
            return ToolResponse(text=f"Invalid JSON in arguments for '{name}': {e}"), 0.0, {}
        tool = agent_data.active_tools[name]
        kwargs = tools_kwargs.get(name, {}) if isinstance(tools_kwargs, dict) else {}
        try:  # minirl: create / execute / release under multi_turn.tool_timeout (verl awaits them, no timeout)
            response, reward, info = await call_tool(tool, arguments, self.tool_timeout, agent_data=agent_data,
                                                     create_kwargs=kwargs.get("create_kwargs", {}))
        except ToolTimeout as e:
            agent_data.fail("timeout")
            warn_limited("tool timeout", f"tool {name!r} {e}")
            return ToolResponse(text=f"Error executing tool '{name}': {e}"), 0.0, {}
        except Exception as e:  # noqa: BLE001 (a tool's own bug must not end the rollout)
            agent_data.fail("exception")
            warn_limited("tool exception", f"tool {name!r} raised {type(e).__name__}: {e}")
            return ToolResponse(text=f"Error executing tool '{name}': {e}"), 0.0, {}
        if isinstance(info, dict) and info.get("error"):
            agent_data.fail(str(info["error"]))  # the tool's own failure report (e.g. timeout)
        return response, reward, info

    def _postprocess_response(self, response: ToolResponse, reward, info, agent_data: AgentData):
        text = response.text or ""
        cut = truncate_tool_response(text, self.max_tool_response_length, self.tool_response_truncate_side)
        if cut != text:
            agent_data.truncated += 1
        return ToolResponse(text=cut), reward, info

    def _finalize(self, agent_data: AgentData) -> AgentLoopOutput:
        """Split the ids into prompt and response, cut at `response_length`, attach the session record."""
        n = len(agent_data.response_mask)
        prompt_ids = agent_data.prompt_ids[: len(agent_data.prompt_ids) - n]
        response_ids = agent_data.prompt_ids[len(prompt_ids):]
        R = self.response_length
        mismatch = None
        if self.sanity_check_mode != "disable":
            messages = list(agent_data.messages)
            if agent_data.termination in ("response_length", "max_assistant_turns", "max_user_turns") \
                    and agent_data.turns and agent_data.turns[-1]["role"] == "assistant":
                # the last reply ended the session before it was parsed into a message (as in verl)
                text = self.tokenizer.decode(agent_data.response_ids, skip_special_tokens=True)
                messages.append({"role": "assistant", "content": text})
            mismatch = tokenization_sanity_check(self.tokenizer, messages, agent_data.prompt_ids, len(prompt_ids),
                                                 agent_data.turns, self.sanity_check_mode, agent_data.active_schemas)
            if mismatch:
                warn_limited("tokenization sanity check", f"session {agent_data.request_id}: {mismatch['message']}")
        roles = agent_data.roles[:R]
        agent_data.turns = [dict(t, end=min(t["end"], R)) for t in agent_data.turns if t["start"] < R]
        agent_data.extra_fields.update({
            "turn_scores": agent_data.turn_scores, "tool_rewards": agent_data.tool_rewards,
            "multi_turn": session_record(agent_data, roles, mismatch)})
        return AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=response_ids[:R], response_mask=agent_data.response_mask[:R],
            response_logprobs=agent_data.response_logprobs[:R] if agent_data.response_logprobs else None,
            num_turns=agent_data.user_turns + agent_data.assistant_turns + 1, metrics=agent_data.metrics,
            extra_fields=agent_data.extra_fields)


def role_spans(roles: list[str]) -> list[list]:
    """`["assistant", "assistant", "template", ...]` -> `[["assistant", 0, 2], ["template", 2, 3], ...]`."""
    spans = []
    for i, role in enumerate(roles):
        if spans and spans[-1][0] == role:
            spans[-1][2] = i + 1
        else:
            spans.append([role, i, i + 1])
    return spans


def session_record(agent_data: AgentData, roles: list[str], mismatch: dict | None) -> dict:
    """What the trace and the metrics read about one session (JSON-ready)."""
    counts = {r: roles.count(r) for r in ("assistant", "template", "observation")}
    return {"assistant_turns": agent_data.assistant_turns, "user_turns": agent_data.user_turns,
            "tool_calls": len(agent_data.tool_latency_s), "calls_ignored": agent_data.calls_ignored,
            "failures": dict(agent_data.failures), "tool_latency_s": [round(x, 6) for x in agent_data.tool_latency_s],
            "truncated_tool_responses": agent_data.truncated, "termination": agent_data.termination,
            "token_counts": counts, "mask_spans": role_spans(roles), "turns": agent_data.turns,
            "sanity_mismatch": mismatch}
