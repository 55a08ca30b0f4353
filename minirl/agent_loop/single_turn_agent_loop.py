"""One prompt, one response: the default agent loop.

verl: `SingleTurnAgentLoop` (`verl/experimental/agent_loop/single_turn_agent_loop.py:29`), whose `run`
(`:38`) builds the prompt tokens, awaits one `generate`, and returns an `AgentLoopOutput` with
`num_turns=2` (user + assistant) and `response_mask` all ones.

The prompt tokens: verl applies the chat template to `raw_prompt` here and left-truncates them to
`rollout.prompt_length` with a warning (`AgentLoopBase._cap_text_prompt_length`,
`verl/experimental/agent_loop/agent_loop.py:407`). minirl takes the dataset's `raw_prompt_ids` when
the row has them: the same template, already checked or cut as `data.truncation` says
(`minirl.data.rl_dataset`), so the ids the rollout sees are the ones the dataset decided on.
"""

from __future__ import annotations

import time
import uuid

from minirl.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register


@register("single_turn_agent")
class SingleTurnAgentLoop(AgentLoopBase):
    """Tokenize the chat prompt, sample one response, done."""

    async def run(self, sampling_params, **kwargs) -> AgentLoopOutput:
        ids = kwargs.get("raw_prompt_ids")  # the dataset's ids, after data.truncation (verl re-templates raw_prompt)
        prompt_ids = list(ids) if ids is not None else self.apply_chat_template(list(kwargs["raw_prompt"]))
        t0 = time.perf_counter()
        out = await self.server_manager.generate(uuid.uuid4().hex, prompt_ids, sampling_params)
        gen_s = time.perf_counter() - t0
        response_ids = out.token_ids[: self.response_length]
        logprobs = out.log_probs[: self.response_length] if out.log_probs is not None else None
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=[1] * len(response_ids),
            response_logprobs=logprobs,
            num_turns=2,
            metrics=AgentLoopMetrics(generate_sequences=gen_s),
            extra_fields={"min_global_steps": out.extra_fields.get("min_global_steps", out.policy_version),
                          "max_global_steps": out.extra_fields.get("max_global_steps", out.policy_version)},
        )
