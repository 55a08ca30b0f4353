"""Multi-turn tool sessions on the vllm rollout: the same episodes, masks and tool results as the hf rollout.

The policy is the embedded model after a short SFT on calculator episodes (`minirl.notebook.tool_policy`,
cached under $MINIRL_CACHE); its weights are pushed into the session's vLLM engine, and the same greedy
`ToolAgentLoop` sessions run on vLLM and on the hf rollout. Runs in .venv-vllm (`bash scripts/vllm.sh`).
"""
import asyncio

import pytest

pytest.importorskip("vllm")

import torch

from minirl.agent_loop import ToolAgentLoop
from minirl.workers.rollout.llm_server import LocalLLMServerClient
from minirl.agent_loop.agent_loop import load_tools
from minirl.config import load
from minirl.models import load_tokenizer
from minirl.notebook.tool_policy import tool_agent_overrides, tool_policy
from minirl.workers.rollout.base import SamplingParams
from minirl.workers.rollout.hf_rollout import HFRollout


def sessions(rollout, cfg, tokenizer, rows):
    rc = cfg.actor_rollout_ref.rollout
    client, tools = LocalLLMServerClient(rollout), load_tools(rc)
    sp = SamplingParams.from_rollout_config(rc, validate=True)  # greedy

    async def run():
        loops = [ToolAgentLoop(rc, client, tokenizer, tools=tools) for _ in rows]
        return await asyncio.gather(*(loop.run(sp, raw_prompt=r["prompt"]) for loop, r in zip(loops, rows)))

    return asyncio.run(run()), client.batches


def test_tool_sessions_on_vllm_match_hf(rollout, base_weights):
    from transformers import AutoModelForCausalLM

    path, rows = tool_policy()
    rows = rows[:4]
    cfg = load(tool_agent_overrides(path))
    tokenizer = load_tokenizer(path)
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    rollout.update_weights(((k, v) for k, v in policy.state_dict().items()), version=1)
    try:
        on_vllm, batches = sessions(rollout, cfg, tokenizer, rows)
    finally:  # later tests expect the checkpoint's own weights
        rollout.update_weights(iter(base_weights.items()), version=0)
    on_hf, _ = sessions(HFRollout(cfg.actor_rollout_ref.rollout, path), cfg, tokenizer, rows)
    for row, v, h in zip(rows, on_vllm, on_hf):
        rec = v.extra_fields["multi_turn"]
        assert rec["tool_calls"] >= 1 and v.num_turns >= 4, rec  # the policy called the calculator
        assert v.response_ids == h.response_ids and v.response_mask == h.response_mask
        assert rec["mask_spans"] == h.extra_fields["multi_turn"]["mask_spans"]
        text = tokenizer.decode(v.response_ids, skip_special_tokens=True)
        assert f"tool\n{row['reward_model']['ground_truth']}\n" in text  # the real calculator's answer
        mask = torch.tensor(v.response_mask).bool()
        lv, lh = torch.tensor(v.response_logprobs), torch.tensor(h.response_logprobs)
        assert float((lv[~mask]).abs().max()) == 0.0  # observation and template tokens carry no log-prob
        assert float((lv[mask] - lh[mask]).abs().max()) < 1e-3  # both engines sampled with the same weights
        assert {v.extra_fields["min_global_steps"], v.extra_fields["max_global_steps"]} == {1}
    assert batches[0] == len(rows)  # the sessions' first turns reached vLLM as one batch
