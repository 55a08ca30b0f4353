"""Continuous tokens: one growing list of token ids per session, appended turn by turn, never re-tokenized.

A multi-turn session is one sequence: the prompt, then what the policy generated, then the tool's
answer wrapped in the chat template, then the policy again... The agent loop keeps that sequence as
ids and only ever APPENDS to it:

- a policy turn appends exactly the ids the rollout sampled (response_mask 1, their log-probs);
- a tool turn appends the template tokens and the observation, tokenized on their own by rendering
  the template twice and keeping the difference (response_mask 0, log-prob 0).

It never decodes the conversation to text and tokenizes it again, because that is not the sequence
the policy saw: a tokenizer may merge characters across a turn boundary differently, decoding may
not round-trip (minirl's byte-level model can emit bytes that are not valid UTF-8), and re-rendering
a tool call from its parsed JSON may space it differently. The PPO ratio must be taken on the tokens
that were sampled, with the log-probs they were sampled with. `tokenization_sanity_check` measures
how far a full re-tokenization would have drifted, and says where.

Mirrors verl's Continuous Token builder, `verl/utils/tokenizer/continuous_token.py`: `MergeResult`
(`:37`), `ContinuousTokenBuilder` (`:56`: `build_initial_tokens` `:97`, `merge_non_assistant_tokens`
`:145`, `merge_assistant_tokens` `:158`, `render_delta_token_id` `:199`, `align_response_metadata`
`:308`) and the ChatML boundary rule of `QwenContinuousTokenBuilder` (`:439`): generation stops at
`<|im_end|>` but the template writes `<|im_end|>\\n`, so the missing newline is inserted (mask 0)
before a tool turn. verl's `ToolAgentLoop` calls them through `AgentLoopBase.ct_*`
(`verl/experimental/agent_loop/agent_loop.py:315`, `:359`, `:383`).

The sanity check follows the legacy SGLang rollout's `AsyncRolloutRequest.finalize`
(`verl/workers/rollout/schemas.py:591`), the only code at the pin that reads
`multi_turn.tokenization_sanity_check_mode` (verl's V1 `ToolAgentLoop` does not run it); minirl runs
it at the end of every tool-agent session.

minirl simplifies: one builder (ChatML boundary rule when the tokenizer has `<|im_end|>`), text only;
`MergeResult.content_spans` (minirl only) marks which appended ids are the observation itself, so a
trace can tell template tokens from tool output.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Literal

from minirl.agent_loop.tool_parser import render_hermes_tool_calls
from minirl.config.schema_multi_turn import SANITY_CHECK_MODES

__all__ = ["SANITY_CHECK_MODES", "ContinuousTokenBuilder", "MergeResult", "assistant_text", "token_roles",
           "tokenization_sanity_check", "tokenize_conversation"]

_SYNTHETIC_SYSTEM = {"role": "system", "content": "continuous token synthetic system"}
_SYNTHETIC_USER = {"role": "user", "content": "continuous token synthetic user"}


@dataclass(frozen=True)
class MergeResult:
    """The runtime ids after a merge, and what was appended (verl: `MergeResult`).

    `inserted_token_ids` are boundary tokens the builder added itself (never generated: mask 0);
    `appended_token_count` counts the appended ids after them; `content_spans` (minirl) are the
    `[start, end)` ranges, within those appended ids, that hold the messages' own content.
    """

    token_ids: list[int]
    appended_token_count: int
    kind: Literal["assistant", "non_assistant"] = "non_assistant"
    inserted_token_ids: list[int] = field(default_factory=list)
    content_spans: list[tuple[int, int]] = field(default_factory=list)


def _ids(out) -> list[int]:
    """`apply_chat_template(tokenize=True)` returns a list (transformers 4) or a BatchEncoding (5)."""
    if isinstance(out, dict) or hasattr(out, "input_ids"):
        out = out["input_ids"]
    return [int(t) for t in out]


def _find(sub: list[int], seq: list[int], start: int = 0) -> int:
    for i in range(start, len(seq) - len(sub) + 1):
        if seq[i:i + len(sub)] == sub:
            return i
    return -1


class ContinuousTokenBuilder:
    """Build the first prompt and append assistant / tool turns to a session's ids (see the module docstring).

    Args:
        tokenizer: a transformers tokenizer with a chat template.
        chat_template_kwargs: extra keyword arguments for `apply_chat_template` (`data.apply_chat_template_kwargs`).
    """

    def __init__(self, tokenizer, chat_template_kwargs: dict | None = None):
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        newline = tokenizer.encode("\n", add_special_tokens=False)
        im_end = tokenizer.encode("<|im_end|>", add_special_tokens=False)  # one id when it is a special token
        # ChatML (Qwen) boundary: a turn generated up to <|im_end|> lacks the template's "\n"
        self._boundary = (int(im_end[0]), int(newline[0])) if len(im_end) == 1 and len(newline) == 1 else None

    def _render(self, messages: list[dict], add_generation_prompt: bool, tools: list[dict] | None = None) -> list[int]:
        kwargs = {k: v for k, v in self.chat_template_kwargs.items() if k not in ("tokenize", "return_dict")}
        return _ids(self.tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=True,
                                                       add_generation_prompt=add_generation_prompt, **kwargs))

    def build_initial_tokens(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The prompt ids: the messages rendered with the template, ending with the assistant header."""
        return self._render(messages, True, tools)

    def merge_assistant_tokens(self, runtime_token_ids: list[int], assistant_token_ids: list[int]) -> MergeResult:
        """Append the sampled ids as they are."""
        return MergeResult(list(runtime_token_ids) + list(assistant_token_ids), len(assistant_token_ids), "assistant")

    def render_delta_token_id(self, prefix_messages: list[dict], appended: list[dict], add_generation_prompt: bool = False,
                              tools: list[dict] | None = None) -> list[int]:
        """Render `prefix` and `prefix + appended`; return the ids the appended messages add."""
        prefix = self._render(prefix_messages, False, tools)
        full = self._render(prefix_messages + appended, add_generation_prompt, tools)
        if full[: len(prefix)] != prefix:
            roles = [m.get("role") for m in appended] or ["generation_prompt"]
            raise ValueError(f"continuous tokens: the chat template does not render {roles} as an append to the "
                             "conversation (the prefix changed), so its ids cannot be appended.")
        return full[len(prefix):]

    def merge_non_assistant_tokens(self, previous_messages: list[dict], updated_messages: list[dict],
                                   runtime_token_ids: list[int], tools: list[dict] | None = None) -> MergeResult:
        """Append the tool/user messages added since `previous_messages`, then the next assistant header."""
        if updated_messages[: len(previous_messages)] != previous_messages:
            raise ValueError("continuous tokens: messages must be append-only; an earlier message changed.")
        appended = updated_messages[len(previous_messages):]
        bad = [m.get("role") for m in appended if m.get("role") not in ("tool", "user", "system")]
        if bad:
            raise ValueError(f"continuous tokens: only tool/user/system messages are tokenized here, got {bad}.")
        synthetic = {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": m.get("name", "tool"), "arguments": {}}}
            for m in appended if m.get("role") == "tool"]}
        ids, spans = [], []
        for message in appended:  # one at a time, so each message's own content can be located
            prefix = [_SYNTHETIC_SYSTEM, _SYNTHETIC_USER] + ([synthetic] if message["role"] == "tool" else [])
            delta = self.render_delta_token_id(prefix, [message], tools=tools)
            content = self.tokenizer.encode(str(message.get("content") or ""), add_special_tokens=False)
            at = _find(content, delta) if content else -1
            if at >= 0:
                spans.append((len(ids) + at, len(ids) + at + len(content)))
            ids += delta
        ids += self.render_delta_token_id(updated_messages, [], add_generation_prompt=True, tools=tools)
        prefix_ids, inserted = list(runtime_token_ids), []
        if self._boundary and prefix_ids and prefix_ids[-1] == self._boundary[0]:
            inserted = [self._boundary[1]]
        return MergeResult(prefix_ids + inserted + ids, len(ids), "non_assistant", inserted, spans)

    @staticmethod
    def align_response_metadata(merge: MergeResult, response_mask: list[int], response_logprobs: list[float] | None,
                                assistant_logprobs: list[float] | None = None) -> tuple[list[int], list[float] | None]:
        """Extend mask and log-probs over the merge: 1 + sampled log-probs for assistant ids, 0 / 0.0 otherwise."""
        mask = list(response_mask) + [0] * len(merge.inserted_token_ids)
        logprobs = None if response_logprobs is None else list(response_logprobs) + [0.0] * len(merge.inserted_token_ids)
        if merge.kind == "assistant":
            mask += [1] * merge.appended_token_count
            if logprobs is not None:
                if assistant_logprobs is None or len(assistant_logprobs) != merge.appended_token_count:
                    raise ValueError("continuous tokens: the rollout returned no log-prob for some sampled ids.")
                logprobs += list(assistant_logprobs)
        else:
            mask += [0] * merge.appended_token_count
            if logprobs is not None:
                logprobs += [0.0] * merge.appended_token_count
        return mask, logprobs


def assistant_text(message: dict) -> str:
    """The text an assistant message stands for: its content, then its tool calls in hermes format."""
    return str(message.get("content") or "") + render_hermes_tool_calls(message.get("tool_calls") or [])


def tokenize_conversation(tokenizer, messages: list[dict], tools: list[dict] | None = None,
                          chat_template_kwargs: dict | None = None) -> dict[str, Any]:
    """A whole conversation as the tool agent loop would have built it, for SFT rows with tool calls.

    The prompt is every message before the first assistant one; each assistant message is
    `assistant_text(message)` tokenized plus EOS (mask 1); each run of tool/user messages is merged
    as in a rollout (mask 0). Returns `prompt_ids`, `response_ids`, `response_mask` and `token_roles`
    (`"assistant"`, `"template"` or `"observation"` per response id).
    """
    builder = ContinuousTokenBuilder(tokenizer, chat_template_kwargs)
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), None)
    if first is None or first == 0:
        raise ValueError("tokenize_conversation: need prompt messages followed by at least one assistant message.")
    prompt_ids = builder.build_initial_tokens(messages[:first], tools)
    runtime, mask, roles, i = list(prompt_ids), [], [], first
    while i < len(messages):
        if messages[i].get("role") == "assistant":
            ids = tokenizer.encode(assistant_text(messages[i]), add_special_tokens=False) + [tokenizer.eos_token_id]
            merge = builder.merge_assistant_tokens(runtime, ids)
            i += 1
        else:
            j = i
            while j < len(messages) and messages[j].get("role") != "assistant":
                j += 1
            merge = builder.merge_non_assistant_tokens(messages[:i], messages[:j], runtime, tools)
            i = j
        mask, _ = builder.align_response_metadata(merge, mask, None)
        roles += token_roles(merge)
        runtime = merge.token_ids
    return {"prompt_ids": prompt_ids, "response_ids": runtime[len(prompt_ids):], "response_mask": mask,
            "token_roles": roles}


def token_roles(merge: MergeResult) -> list[str]:
    """Per id a merge added: `assistant` (sampled), `observation` (a message's content) or `template`."""
    if merge.kind == "assistant":
        return ["assistant"] * merge.appended_token_count
    roles = ["template"] * merge.appended_token_count
    for a, b in merge.content_spans:
        roles[a:b] = ["observation"] * (b - a)
    return ["template"] * len(merge.inserted_token_ids) + roles


def tokenization_sanity_check(tokenizer, messages: list[dict], token_ids: list[int], prompt_length: int,
                              turns: list[dict], mode: str = "strict", tools: list[dict] | None = None) -> dict | None:
    """Compare the session's ids with a full re-tokenization of its messages; None when they agree.

    The messages are rendered to text with the chat template (assistant turns as `assistant_text`),
    tokenized in one go, and compared with `token_ids` (prompt + response) position by position; the
    re-tokenization may be longer (the template closes the last turn). `mode`: `strict` reports any
    difference, `ignore_strippable` only differences that are not whitespace, `disable` skips the check.
    A mismatch is `{"position", "response_position", "turn", "role", "used", "retokenized", "message"}`,
    with the turn found in `turns` (the session's `[start, end)` response spans).
    """
    if mode == "disable":
        return None
    rendered = [dict(m, content=assistant_text(m)) if m.get("role") == "assistant" else m for m in messages]
    text = tokenizer.apply_chat_template(rendered, tools=tools or None, tokenize=False, add_generation_prompt=False)
    full = tokenizer(text, add_special_tokens=False)["input_ids"]
    n = min(len(full), len(token_ids))
    pos = next((i for i in range(n) if full[i] != token_ids[i]), None)
    if pos is None:
        if len(full) >= len(token_ids):
            return None
        pos = n
    if mode == "ignore_strippable":
        a = tokenizer.decode(token_ids, skip_special_tokens=False)
        b = tokenizer.decode(full[: len(token_ids)], skip_special_tokens=False)
        ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
        if all(not a[i1:i2].strip() and not b[j1:j2].strip() for tag, i1, i2, j1, j2 in ops if tag != "equal"):
            return None
    r = pos - prompt_length
    turn = next((t for t in turns if t["start"] <= r < t["end"]), None)
    where = "the prompt" if r < 0 else (f"turn {turn['turn']} ({turn['role']})" if turn else "the response")
    used = token_ids[pos:pos + 4]
    again = full[pos:pos + 4]
    message = (f"tokenization sanity check ({mode}): re-tokenizing the conversation differs from the ids the rollout "
               f"used at position {pos} (response position {r}, {where}): used {tokenizer.decode(used)!r} "
               f"{used}, re-tokenized {tokenizer.decode(again)!r} {again}. The ids as generated are kept for training.")
    return {"position": pos, "response_position": r, "turn": turn["turn"] if turn else None,
            "role": turn["role"] if turn else ("prompt" if r < 0 else None), "used": used,
            "retokenized": again, "message": message}
