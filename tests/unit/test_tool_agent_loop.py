"""ToolAgentLoop: the state machine, continuous tokens and masks, limits, failures, sanity check, agent_name.

The policy here is scripted (a rollout that replies with fixed text per assistant turn), so each test
knows exactly which tokens the policy wrote; the real calculator runs. The mask-gradient test uses the
embedded model and `ppo_loss`.
"""
import asyncio
import json

import numpy as np
import pytest
import torch

from minirl.agent_loop import AgentLoopManagerTQ, ToolAgentLoop, new_uids
from minirl.agent_loop.agent_loop import load_tools
from minirl.agent_loop.continuous_token import tokenize_conversation
from minirl.agent_loop.multi_turn_stats import multi_turn_metrics
from minirl.agent_loop.tool_agent_loop import truncate_tool_response
from minirl.config import ConfigError, load
from minirl.data.tasks import make_multiply_tool_rows, make_sft_rows
from minirl.models.tokenizer import build_tokenizer
from minirl.protocol import DataProto
from minirl.tools import CALCULATOR_TOOL_CONFIG, BaseTool, ToolResponse
from minirl.trainer.ppo.replay_buffer import ReplayBuffer, submit_prompts
from minirl.transfer_queue import TransferQueue, kv_batch_get_padded
from minirl.workers.rollout.base import BaseRollout, SamplingParams, TokenOutput
from minirl.workers.rollout.llm_server import LocalLLMServerClient

TOK = build_tokenizer()
CALL = '<tool_call>{"name":"calc","arguments":{"expr":"347*56"}}</tool_call>'
PROMPT = [{"role": "user", "content": "What is 347*56?"}]
MT = "actor_rollout_ref.rollout.multi_turn"
ON = [f"{MT}.enable=True", f"{MT}.tool_config_path={CALCULATOR_TOOL_CONFIG}", "data.max_response_length=160"]


class ScriptedRollout(BaseRollout):
    """Replies `replies[k-1]` (+ EOS) to a prompt holding k assistant headers; log-prob -0.5 per token."""

    def __init__(self, replies, eos=True):
        super().__init__({}, None)
        self.replies, self.eos, self.calls = replies, eos, 0

    def generate(self, prompts, sampling_params):
        self.calls += 1
        outs = []
        for p in prompts:
            k = TOK.decode(p).count("<|im_start|>assistant")
            reply = self.replies[min(k, len(self.replies)) - 1]
            ids = list(reply) if isinstance(reply, list) else TOK.encode(reply, add_special_tokens=False)
            ids += [TOK.eos_token_id] if self.eos else []
            outs.append(TokenOutput(ids, [-0.5] * len(ids), "eos", self.policy_version))
        return outs

    def update_weights(self, weights, version):
        self.policy_version = version

    async def resume(self, tags):
        pass

    async def release(self):
        pass


def episode(replies, *overrides, tools=None, raw_prompt=PROMPT, eos=True):
    cfg = load(ON + list(overrides))
    rc = cfg.actor_rollout_ref.rollout
    loop = ToolAgentLoop(rc, LocalLLMServerClient(ScriptedRollout(replies, eos)), TOK,
                         tools=load_tools(rc) if tools is None else tools)
    return asyncio.run(loop.run(SamplingParams.from_rollout_config(rc), raw_prompt=raw_prompt))


def spans(out):
    return [tuple(s) for s in out.extra_fields["multi_turn"]["mask_spans"]]


def test_one_tool_episode_tokens_masks_and_turns():
    out = episode([CALL, "#### 19432"])
    rec = out.extra_fields["multi_turn"]
    text = TOK.decode(out.response_ids)
    assert text == (CALL + "<|im_end|>\n<|im_start|>tool\n19432<|im_end|>\n<|im_start|>assistant\n#### 19432<|im_end|>")
    n_call, n_answer = len(TOK.encode(CALL)) + 1, len(TOK.encode("#### 19432")) + 1
    # assistant ids | "\n" inserted + "<|im_start|>tool\n" | the observation | "<|im_end|>\n<|im_start|>assistant\n" | ...
    assert spans(out) == [("assistant", 0, n_call), ("template", n_call, n_call + 7),
                          ("observation", n_call + 7, n_call + 12), ("template", n_call + 12, n_call + 25),
                          ("assistant", n_call + 25, n_call + 25 + n_answer)]
    mask = torch.tensor(out.response_mask)
    assert mask.tolist() == [1] * n_call + [0] * 25 + [1] * n_answer
    lp = torch.tensor(out.response_logprobs)
    assert bool((lp[mask == 1] == -0.5).all()) and bool((lp[mask == 0] == 0).all())
    assert out.num_turns == 4 and rec["assistant_turns"] == 2 and rec["user_turns"] == 1  # user, asst, tool, asst
    assert rec["tool_calls"] == 1 and rec["failures"] == {} and rec["termination"] == "no_tool_call"
    assert rec["token_counts"] == {"assistant": n_call + n_answer, "template": 20, "observation": 5}
    assert [t["role"] for t in rec["turns"]] == ["assistant", "tool", "assistant"]
    assert rec["sanity_mismatch"] is None and out.extra_fields["tool_rewards"] == [0.0]
    # the SFT rows of the task build exactly these ids (same builder)
    row = next(r for r in make_sft_rows("multiply_tool", n=40, seed=0) if len(r["messages"]) == 4)
    sft = tokenize_conversation(TOK, row["messages"])
    q, a = row["extra_info"]["question"], row["extra_info"]["answer"]
    want = episode([CALL.replace("347*56", q), a], raw_prompt=row["prompt"])
    assert sft["response_ids"] == want.response_ids and sft["response_mask"] == want.response_mask
    assert sft["prompt_ids"] == want.prompt_ids


def test_sft_rows_of_the_tool_task_train_only_the_assistant_tokens():
    from minirl.trainer.sft_trainer import tokenize_sft

    rows = make_sft_rows("multiply_tool", n=20, seed=0, tool_fraction=0.5)
    tool = [len(r["messages"]) == 4 for r in rows]
    assert 0 < sum(tool) < 20  # a share of the rows shows the tool episode, the rest answer directly
    assert all(len(r["messages"]) == 4 for r in make_sft_rows("multiply_tool", n=5, seed=0, tool_fraction=1.0))
    assert all(len(r["messages"]) == 2 for r in make_sft_rows("multiply_tool", n=5, seed=0, tool_fraction=0.0))
    data = tokenize_sft(rows, TOK, 40, 128)
    for i, row in enumerate(rows):
        loss_mask, attn = data.batch["response_mask"][i], data.batch["attention_mask"][i, 40:]
        if tool[i]:
            want = tokenize_conversation(TOK, row["messages"])["response_mask"]
            assert loss_mask[: len(want)].tolist() == want and int(attn.sum()) == len(want)
            assert int(loss_mask.sum()) < int(attn.sum())  # the tool result and template tokens carry no loss
        else:
            assert torch.equal(loss_mask, attn)


def test_failures_become_observations_and_are_counted():
    class Broken(BaseTool):
        async def execute(self, instance_id, parameters, **kwargs):
            raise RuntimeError("disk on fire")

    from minirl.tools import OpenAIFunctionToolSchema

    broken = Broken({}, OpenAIFunctionToolSchema.from_dict(
        {"type": "function", "function": {"name": "broken", "description": "always fails"}}))
    cfg = load(ON)
    tools = load_tools(cfg.actor_rollout_ref.rollout) + [broken]
    replies = ['<tool_call>{"name":"nope","arguments":{}}</tool_call>',
               '<tool_call>{"name":"calc","arguments":"347*56"}</tool_call>',
               '<tool_call>{"name":"broken","arguments":{}}</tool_call>',
               '<tool_call>{"name":"calc","arguments":{"expr":"1/0"}}</tool_call>',
               '<tool_call>{not json}</tool_call>']
    out = episode(replies, "data.max_response_length=1024", tools=tools)
    rec = out.extra_fields["multi_turn"]
    assert rec["failures"] == {"unknown_tool": 1, "bad_json": 1, "exception": 1, "division_by_zero": 1,
                               "parse_error": 1}
    text = TOK.decode(out.response_ids, skip_special_tokens=True)
    for shown in ["Unknown function 'nope'. Available tools: ['calc', 'broken']",
                  "Invalid JSON in arguments for 'calc'", "Error executing tool 'broken': disk on fire",
                  "error: division by zero"]:
        assert shown in text  # the model reads what went wrong
    # the unparsable block is dropped (as verl's hermes parser does): no call, the session ends there
    assert rec["tool_calls"] == 4 and rec["termination"] == "no_tool_call" and out.num_turns == 10
    assert multi_turn_metrics({"sessions": 1, **_summary([rec])})["multi_turn/failures/total"] == 5.0


def _summary(records):
    from minirl.agent_loop.multi_turn_stats import summarize_sessions

    s = summarize_sessions(records)
    s.pop("sessions")
    return s


def test_turn_limits_parallel_calls_and_response_budget():
    two = CALL + CALL.replace("347*56", "2+2")
    out = episode([two, "#### 19432"], "data.max_response_length=400")
    assert out.extra_fields["multi_turn"]["tool_calls"] == 1 and out.extra_fields["multi_turn"]["calls_ignored"] == 1
    out = episode([two, "#### 19432"], f"{MT}.max_parallel_calls=2", "data.max_response_length=400")
    assert "<|im_start|>tool\n19432<|im_end|>\n<|im_start|>tool\n4<|im_end|>" in TOK.decode(out.response_ids)
    out = episode([CALL, CALL, CALL, "#### 1"], f"{MT}.max_assistant_turns=1")
    assert out.num_turns == 2 and out.extra_fields["multi_turn"]["termination"] == "max_assistant_turns"
    out = episode([CALL, CALL, CALL, "#### 1"], f"{MT}.max_user_turns=2", "data.max_response_length=400")
    assert out.extra_fields["multi_turn"]["user_turns"] == 2 and out.num_turns == 6
    # the budget: an observation that would not fit is dropped and the session ends (verl)
    n_call = len(TOK.encode(CALL)) + 1
    out = episode([CALL, "#### 19432"], f"data.max_response_length={n_call + 10}")
    assert out.response_mask == [1] * n_call and out.extra_fields["multi_turn"]["termination"] == "response_length"
    out = episode(["x" * 300], "data.max_response_length=40")
    assert len(out.response_ids) == 40 and out.extra_fields["multi_turn"]["turns"][0]["end"] == 40


def test_long_tool_results_are_truncated_on_the_configured_side():
    text = "".join(str(i % 10) for i in range(100))
    assert truncate_tool_response(text, 10, "left") == "(truncated)..." + text[-10:]
    assert truncate_tool_response(text, 10, "right") == text[:10] + "...(truncated)"
    assert truncate_tool_response(text, 10, "middle") == text[:5] + "...(truncated)..." + text[-5:]
    assert truncate_tool_response("short", 10, "middle") == "short"

    class Verbose(BaseTool):
        async def execute(self, instance_id, parameters, **kwargs):
            return ToolResponse(text=text), 0.0, {}

    from minirl.tools import OpenAIFunctionToolSchema

    tool = Verbose({}, OpenAIFunctionToolSchema.from_dict({"type": "function", "function": {
        "name": "calc", "description": "verbose"}}))
    out = episode([CALL, "#### 1"], f"{MT}.max_tool_response_length=16", tools=[tool])
    assert f"\n{text[:8]}...(truncated)...{text[-8:]}<|im_end|>" in TOK.decode(out.response_ids)
    assert out.extra_fields["multi_turn"]["truncated_tool_responses"] == 1


def test_sanity_check_reports_turn_and_position():
    spaced = '<tool_call>{"name": "calc", "arguments": {"expr": "347*56"}}</tool_call>'
    out = episode([spaced, "#### 19432"])
    bad = out.extra_fields["multi_turn"]["sanity_mismatch"]
    # the parsed call is re-rendered compactly: the first space after "name": differs, in turn 1
    assert bad["turn"] == 1 and bad["role"] == "assistant" and bad["response_position"] == spaced.index(" ")
    assert "turn 1 (assistant)" in bad["message"] and "position" in bad["message"]
    assert episode([spaced, "#### 19432"], f"{MT}.tokenization_sanity_check_mode=ignore_strippable") \
        .extra_fields["multi_turn"]["sanity_mismatch"] is None  # only whitespace differs
    assert episode([spaced, "#### 1"], f"{MT}.tokenization_sanity_check_mode=disable") \
        .extra_fields["multi_turn"]["sanity_mismatch"] is None
    # bytes that are not UTF-8 decode to U+FFFD: re-tokenizing gives other ids, whatever the mode
    raw = TOK.encode("ok ") + [0xE2, 0x82] + TOK.encode(CALL)
    out = episode([raw, "#### 1"], f"{MT}.tokenization_sanity_check_mode=ignore_strippable")
    bad = out.extra_fields["multi_turn"]["sanity_mismatch"]
    assert bad["turn"] == 1 and bad["response_position"] == 3
    # what was generated is what is trained on: the ids stay as sampled
    assert out.response_ids[: len(raw)] == raw


def test_tool_agent_needs_enable_and_configs_are_checked():
    cfg = load(["data.max_response_length=64"])
    with pytest.raises(ValueError, match="multi_turn.enable=True"):
        ToolAgentLoop(cfg.actor_rollout_ref.rollout, None, TOK)
    for bad, words in [([f"{MT}.tool_response_truncate_side=top"], "tool_response_truncate_side='top'"),
                       ([f"{MT}.tokenization_sanity_check_mode=loose"], "tokenization_sanity_check_mode='loose'"),
                       ([f"{MT}.max_assistant_turns=0"], "max_assistant_turns=0 must be >= 1"),
                       ([f"{MT}.tool_config_path={CALCULATOR_TOOL_CONFIG}"], "enable=False, so no tool would load"),
                       ([f"{MT}.use_inference_chat_template=True"], "minirl does not implement it"),
                       ([f"{MT}.num_repeat_rollouts=2"], "no code reads it at the pinned commit"),
                       ([f"{MT}.enable=True"], ("enable=True but actor_rollout_ref.rollout.multi_turn.tool_config_path "
                                                "is null: the model would have no tool")),
                       (ON + [f"{MT}.tool_timeout=0"], "tool_timeout=0.0 must be > 0")]:
        with pytest.raises(ConfigError, match="1 problem") as e:
            load(bad)
        assert words in str(e.value), str(e.value)


def test_agent_name_selects_the_loop_per_sample_through_the_transfer_queue():
    """A batch mixing tool-agent rows and plain rows: each row runs its own loop; the rollout span gets a summary."""
    cfg = load(ON + ["actor_rollout_ref.rollout.n=2"])
    rows = make_multiply_tool_rows(2, seed=0, split="train")
    questions = [r["extra_info"]["question"] for r in rows]
    batch = DataProto.from_dict(non_tensors={
        "raw_prompt": np.array([r["prompt"] for r in rows] + [PROMPT], dtype=object),
        "agent_name": np.array(["tool_agent", "tool_agent", "single_turn_agent"], dtype=object),
        "uid": new_uids(3)})
    batch.meta_info.update(global_steps=1, validate=False)
    replies = [[CALL.replace("347*56", q), "#### 1"] for q in questions]
    rollout = ScriptedRollout(replies[0])
    tq = TransferQueue()
    submit_prompts(tq, list(batch.non_tensor_batch["uid"]), global_steps=1)
    info = AgentLoopManagerTQ(cfg, TOK, rollout, tq=tq).generate_sequences(batch)
    meta, _ = ReplayBuffer(tq).sample(global_steps=1, batch_size=3)
    r = cfg.actor_rollout_ref.rollout
    out = kv_batch_get_padded(tq, meta, int(r.prompt_length), int(r.response_length), TOK.pad_token_id)
    turns = torch.tensor(out.non_tensor_batch["num_turns"].tolist())
    assert sorted(turns.tolist()) == [2, 2, 4, 4, 4, 4]  # 2 tool-agent prompts x n=2, 1 plain prompt x 2
    tool, plain = turns == 4, turns == 2
    mask, valid = out.batch["response_mask"], out.batch["attention_mask"][:, r.prompt_length:]
    assert bool((mask[tool].sum(1) < valid[tool].sum(1)).all())  # holes where the observations are
    assert torch.equal(mask[plain], valid[plain])  # single turn: the mask is the attention mask
    mt = info["multi_turn"]
    assert mt["sessions"] == 4 and mt["tool_calls"] == 4 and mt["sessions_with_tool_call"] == 4
    assert [(t["turn"], t["role"]) for t in mt["per_turn"]] == [(1, "assistant"), (2, "tool"), (3, "assistant")]
    assert json.dumps(info)  # the trace writes it as JSON
    assert multi_turn_metrics(mt)["multi_turn/tool_call_rate"] == 1.0
    # the same sessions' first turns went to the rollout together (one batch for the 6 first requests)
    assert info["rollout_batches"][0] == 6


def test_observation_tokens_never_enter_the_policy_gradient():
    """Question 9: the loss has no term for an observation token, whatever that token is.

    With the embedded model's logits fixed (same context), change the token id gathered as the target at
    every observation/template position, and its old log-prob and advantage: ppo_loss and every
    parameter gradient stay bit-identical. With a wrong mask (all ones) the same change moves them.
    """
    import minirl.trainer.warm_start  # noqa: F401 (registers minirl://tiny-qwen2-sft)
    from minirl.models import load_causal_lm, resolve_model_path
    from minirl.workers.utils.losses import ppo_loss

    torch.manual_seed(0)
    out = episode([CALL, "#### 19432"])
    cfg = load(ON)
    model = load_causal_lm(resolve_model_path(cfg.actor_rollout_ref.model.path))
    ids = torch.tensor([out.prompt_ids + out.response_ids])
    P, R = len(out.prompt_ids), len(out.response_ids)
    mask = torch.tensor([out.response_mask])
    targets = ids[:, P:]

    def grads(targets, mask, old, adv):
        model.zero_grad()
        logits = model(input_ids=ids).logits[:, P - 1:-1].float()
        log_probs = torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1)
        data = DataProto.from_dict(tensors={"old_log_probs": old, "advantages": adv, "response_mask": mask},
                                   meta_info={"dp_size": 1, "batch_num_tokens": int(mask.sum()), "global_batch_size": 1})
        loss, _ = ppo_loss(cfg.actor_rollout_ref.actor, {"log_probs": log_probs}, data)
        loss.backward()
        return float(loss.detach()), [p.grad.clone() for p in model.parameters()]

    old = torch.full((1, R), -0.5)
    adv = torch.full((1, R), 1.0)
    obs = mask == 0
    other = targets.clone()
    other[obs] = (other[obs] + 7) % 256  # every observation/template token replaced by another byte
    old2, adv2 = old.clone(), adv.clone()
    old2[obs], adv2[obs] = -9.0, -3.0
    loss_a, g_a = grads(targets, mask, old, adv)
    loss_b, g_b = grads(other, mask, old2, adv2)
    assert loss_a == loss_b and all(torch.equal(a, b) for a, b in zip(g_a, g_b))
    wrong = torch.ones_like(mask)  # the bug: observations in the loss
    loss_c, g_c = grads(targets, wrong, old, adv)
    loss_d, g_d = grads(other, wrong, old2, adv2)
    assert loss_c != loss_d and any(not torch.equal(a, b) for a, b in zip(g_c, g_d))


@pytest.mark.slow
def test_minirl_train_three_steps_with_multi_turn_episodes(tmp_path):
    """Done-when: `minirl train multi_turn.enable=True tool_config_path=<calculator> data.train_files=<tool task>`
    runs 3 steps of multi-turn episodes (policy: the embedded model after a short SFT on tool episodes)."""
    from minirl.notebook.tool_policy import tool_agent_overrides, tool_policy
    from minirl.trace import read_trace
    from minirl.trainer.main_ppo import main

    path, _ = tool_policy()
    argv = tool_agent_overrides(
        path, "data.train_files=minirl://multiply_tool/train", "data.val_files=minirl://multiply_tool/val",
        "data.builtin.n_train=8", "data.builtin.n_val=8", "data.val_max_samples=4", "data.train_batch_size=2",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "trainer.total_training_steps=3",
        "trainer.test_freq=3", "trainer.logger=[file]", f"trainer.default_local_dir={tmp_path}")
    assert main(argv) == 0
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "multi_turn/tool_call_rate" in r]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert all(r["multi_turn/tool_call_rate"] > 0 and r["training/num_turns/mean"] > 2 for r in train)
    assert all(r["multi_turn/tokens/observation/mean"] > 0 for r in train)
    assert "val-aux/multi_turn/tool_calls/mean" in rows[0] and "val-core/minirl/multiply_tool/acc/mean@1" in rows[-1]
    events = read_trace(str(tmp_path / "trace"))
    rollout = [e for e in events if e.get("stage") == "rollout"]
    mt = rollout[0]["extra"]["multi_turn"]
    assert mt["sessions"] == 8 and mt["per_turn"][0]["role"] == "assistant" and mt["examples"][0]["mask_spans"]
    assert {"mean", "max"} <= set(mt["tool_latency_s"]) and "failures" in mt


# ---------------------------------------------------------------------------------- tools that never return


class _Hanging(BaseTool):
    """A user tool whose call never ends in the way `how` says."""

    how = "await"

    def __init__(self, config=None, tool_schema=None):
        from minirl.tools.schemas import OpenAIFunctionToolSchema

        schema = {"type": "function", "function": {"name": "calc", "description": "hangs",
                                                   "parameters": {"type": "object", "properties": {}}}}
        super().__init__(config or {}, tool_schema or OpenAIFunctionToolSchema.from_dict(schema))

    async def execute(self, instance_id, parameters, **kwargs):
        if self.how == "await":
            await asyncio.Event().wait()  # nothing will ever set it
        import time

        time.sleep(30)  # noqa: ASYNC251 (the point: a blocking call that would stop every session on the loop)
        return ToolResponse(text="late"), 0.0, {}


class _HangingBlocking(_Hanging):
    how = "sleep"


class _HangingSync(_Hanging):
    def execute(self, instance_id, parameters, **kwargs):  # a plain def: a blocking tool
        import time

        time.sleep(30)
        return ToolResponse(text="late"), 0.0, {}


class _HangingInline(_Hanging):
    minirl_inline = True  # runs on the event loop: an await that never ends still times out


@pytest.mark.parametrize("tool_cls", [_Hanging, _HangingBlocking, _HangingSync, _HangingInline],
                         ids=["await-forever", "time.sleep-in-async", "blocking-def", "inline-await-forever"])
def test_a_tool_that_never_returns_times_out_into_an_observation(tool_cls):
    import time

    t0 = time.monotonic()
    out = episode([CALL, "#### 19432"], f"{MT}.tool_timeout=0.5", "data.max_response_length=400", tools=[tool_cls()])
    assert time.monotonic() - t0 < 10  # the session went on after 0.5 s, it did not wait for the tool
    rec = out.extra_fields["multi_turn"]
    assert rec["failures"] == {"timeout": 1} and rec["termination"] != ""
    text = TOK.decode(out.response_ids)
    assert "Error executing tool 'calc': timed out after 0.5 s (multi_turn.tool_timeout" in text
    assert text.endswith("#### 19432<|im_end|>")  # the model's next turn came after the observation


def test_a_blocking_tool_does_not_stop_the_other_sessions():
    """Two sessions on one event loop: one calls a tool that sleeps 3 s in its thread, the other finishes meanwhile."""
    import time

    cfg = load(ON + [f"{MT}.tool_timeout=10"])
    rc = cfg.actor_rollout_ref.rollout

    class Slow(_HangingSync):
        def execute(self, instance_id, parameters, **kwargs):
            time.sleep(3)
            return ToolResponse(text="done"), 0.0, {}

    ends = {}

    async def both():
        async def one(name, replies, tools):
            loop = ToolAgentLoop(rc, LocalLLMServerClient(ScriptedRollout(replies)), TOK, tools=tools)
            await loop.run(SamplingParams.from_rollout_config(rc), raw_prompt=PROMPT)
            ends[name] = time.monotonic()

        await asyncio.gather(one("slow", [CALL, "#### 1"], [Slow()]), one("plain", ["#### 2"], load_tools(rc)))

    t0 = time.monotonic()
    asyncio.run(both())
    assert ends["plain"] - t0 < 2.5 <= ends["slow"] - t0, ends
