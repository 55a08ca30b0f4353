"""AgentLoop (V1, TransferQueue): n sessions per prompt, trajectory keys and tags, statuses, padding, versions."""
import asyncio

import numpy as np
import pytest
import torch

import minirl.trainer.warm_start  # noqa: F401 (registers minirl://tiny-qwen2-sft)
from minirl.agent_loop import AgentLoopManagerTQ, new_uids
from minirl.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from minirl.config import load
from minirl.data.rl_dataset import RLDataset, collate_to_dataproto
from minirl.data.tasks import resolve_data_files
from minirl.models import load_tokenizer, resolve_model_path
from minirl.trainer.ppo.replay_buffer import ReplayBuffer, submit_prompts
from minirl.transfer_queue import TransferQueue, kv_batch_get_padded
from minirl.workers.rollout.hf_rollout import HFRollout


@pytest.fixture(scope="module")
def setup():
    cfg = load(["actor_rollout_ref.model.path=minirl://tiny-qwen2", "actor_rollout_ref.rollout.n=3", "data.max_response_length=6",
               "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32"])
    path = resolve_model_path(cfg.actor_rollout_ref.model.path)
    tok = load_tokenizer(path)
    ds = RLDataset(resolve_data_files(cfg.data.val_files, cfg.data.builtin), tok, cfg.data, max_samples=4)
    rollout = HFRollout(cfg.actor_rollout_ref.rollout, path)
    return cfg, tok, ds, rollout


def _prompts(ds, validate=False, step=1):
    batch = collate_to_dataproto([ds[i] for i in range(len(ds))])
    batch.non_tensor_batch["uid"] = new_uids(len(batch))
    batch.meta_info.update(global_steps=step, validate=validate)
    return batch


def _generate(cfg, tok, rollout, prompts, partition="train"):
    """What the trainer does: register the prompts, run the agent loop, sample the groups, read them padded."""
    tq = TransferQueue()
    submit_prompts(tq, list(prompts.non_tensor_batch["uid"]), global_steps=1, partition_id=partition)
    info = AgentLoopManagerTQ(cfg, tok, rollout, tq=tq).generate_sequences(prompts)
    meta, _ = ReplayBuffer(tq).sample(global_steps=1, batch_size=len(prompts), partition_id=partition)
    r = cfg.actor_rollout_ref.rollout
    out = kv_batch_get_padded(tq, meta, int(r.prompt_length), int(r.response_length), tok.pad_token_id)
    return tq, meta, out, info


def test_one_prompt_becomes_n_sessions_with_verl_keys_and_tags(setup):
    cfg, tok, ds, rollout = setup
    prompts = _prompts(ds)
    tq, meta, out, info = _generate(cfg, tok, rollout, prompts)
    uids = list(prompts.non_tensor_batch["uid"])
    # {uid}_{session_id}_{index}: 3 sessions per prompt, one output each, written in prompt order
    assert meta.keys == [f"{u}_{s}_0" for u in uids for s in range(3)]
    assert out.non_tensor_batch["session_id"].tolist() == [0, 1, 2] * 4
    assert [t["status"] for t in meta.tags] == ["success"] * 12
    assert all(t["seq_len"] == t["prompt_len"] + t["response_len"] for t in meta.tags)
    assert {t["min_global_steps"] for t in meta.tags} == {t["max_global_steps"] for t in meta.tags} == {0}
    # the prompt keys are cleared by sampling; the trajectories stay until the trainer clears them
    assert sorted(tq.kv_list("train")["train"]) == sorted(meta.keys)
    # every session went to the rollout in ONE batch (the in-process client batches them)
    assert info["rollout_batches"] == [12]
    # the three sessions of a prompt sample independently: not three copies of one response
    r = out.batch["responses"].view(4, 3, -1)
    assert any(not torch.equal(r[i, 0], r[i, 1]) or not torch.equal(r[i, 1], r[i, 2]) for i in range(4))


def test_padded_layout_and_model_inputs(setup):
    cfg, tok, ds, rollout = setup
    P, R = cfg.actor_rollout_ref.rollout.prompt_length, cfg.actor_rollout_ref.rollout.response_length
    _, _, out, _ = _generate(cfg, tok, rollout, _prompts(ds))
    b = out.batch
    assert b["prompts"].shape == (12, P) and b["responses"].shape == (12, R)
    assert b["input_ids"].shape == b["attention_mask"].shape == b["position_ids"].shape == (12, P + R)
    pm = b["attention_mask"][:, :P]
    assert bool((pm[:, -1] == 1).all()) and bool((pm.cumsum(1)[:, -1] == pm.sum(1)).all())  # LEFT-padded prompts
    rm = b["attention_mask"][:, P:]
    assert torch.equal(b["response_mask"], rm) and bool((rm[:, 1:] <= rm[:, :-1]).all())  # RIGHT-padded, single turn
    first = (pm == 1).int().argmax(1)
    assert all(int(b["position_ids"][i, first[i]]) == 0 for i in range(12))  # positions start at the first real token
    assert (out.non_tensor_batch["num_turns"] == 2).all()
    assert float(b["rollout_log_probs"][rm == 0].abs().sum()) == 0.0  # 0 on padding


def test_runs_inside_a_running_event_loop(setup):
    cfg, tok, ds, rollout = setup

    async def in_jupyter():  # a notebook cell runs inside an event loop
        return _generate(cfg, tok, rollout, _prompts(ds))[2]

    assert len(asyncio.run(in_jupyter())) == 12


def test_validation_uses_val_kwargs_n_and_the_val_partition_and_is_greedy(setup):
    cfg, tok, ds, rollout = setup
    p = _prompts(ds, validate=True)
    _, meta_a, a, _ = _generate(cfg, tok, rollout, p, partition="val")
    _, _, b, _ = _generate(cfg, tok, rollout, p, partition="val")
    assert meta_a.partition_id == "val" and len(a) == 4  # val_kwargs.n = 1 session per prompt
    assert torch.equal(a.batch["responses"], b.batch["responses"])
    assert np.array_equal(a.non_tensor_batch["uid"], p.non_tensor_batch["uid"])


@register("minirl_test_failing_agent")
class _FailingAgent(AgentLoopBase):
    async def run(self, sampling_params, **kwargs) -> AgentLoopOutput:
        if kwargs["session_id"] == 1:
            raise ValueError("session 1 could not parse its tool call")
        return AgentLoopOutput(prompt_ids=[1, 2], response_ids=[3], response_mask=[1])


def test_a_failing_session_marks_its_group_failure_with_the_error(setup):
    cfg, tok, ds, rollout = setup
    p = _prompts(ds)
    p.non_tensor_batch["agent_name"] = np.array(["minirl_test_failing_agent"] * len(p), dtype=object)
    tq = TransferQueue()
    uids = list(p.non_tensor_batch["uid"])
    submit_prompts(tq, uids, global_steps=1)
    AgentLoopManagerTQ(cfg, tok, rollout, tq=tq).generate_sequences(p)
    tags = tq.kv_list("train")["train"]
    assert [tags[u]["status"] for u in uids] == ["failure"] * 4
    assert tags[uids[0]]["error"] == "ValueError: session 1 could not parse its tool call"
    assert f"{uids[0]}_0_0" in tags and f"{uids[0]}_1_0" not in tags  # the sessions that finished were written
    with pytest.raises(RuntimeError, match="failed during rollout"):
        ReplayBuffer(tq).sample(global_steps=1, batch_size=4)
