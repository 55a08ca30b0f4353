"""AgentLoop: n sessions per prompt, one uid per prompt, padding layout, batched requests, versions."""
import asyncio

import numpy as np
import pytest
import torch

from minirl.agent_loop import AgentLoopManager
from minirl.agent_loop.agent_loop import new_uids
from minirl.config import load
from minirl.data.rl_dataset import RLDataset, collate_to_dataproto
from minirl.data.tasks import resolve_data_files
from minirl.models import load_tokenizer, resolve_model_path
from minirl.workers.rollout.hf_rollout import HFRollout


@pytest.fixture(scope="module")
def setup():
    cfg = load(["actor_rollout_ref.rollout.n=3", "data.max_response_length=6",
               "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32"])
    path = resolve_model_path(cfg.actor_rollout_ref.model.path)
    tok = load_tokenizer(path)
    ds = RLDataset(resolve_data_files(cfg.data.val_files, cfg.data.builtin), tok, cfg.data, max_samples=4)
    rollout = HFRollout(cfg.actor_rollout_ref.rollout, path)
    return cfg, tok, ds, rollout


def _prompts(ds, n):
    batch = collate_to_dataproto([ds[i] for i in range(len(ds))])
    batch.non_tensor_batch["uid"] = new_uids(len(batch))
    return batch.repeat(repeat_times=n, interleave=True)


def test_sessions_layout_and_batching(setup):
    cfg, tok, ds, rollout = setup
    P, R = cfg.actor_rollout_ref.rollout.prompt_length, cfg.actor_rollout_ref.rollout.response_length
    out = AgentLoopManager(cfg, tok, rollout).generate_sequences(_prompts(ds, 3))
    b = out.batch
    assert len(out) == 12 and b["prompts"].shape == (12, P) and b["responses"].shape == (12, R)
    assert b["input_ids"].shape == b["attention_mask"].shape == b["position_ids"].shape == (12, P + R)
    # one uid per prompt, shared by its 3 sessions, interleaved (a, a, a, b, b, b, ...)
    uids = out.non_tensor_batch["uid"]
    assert all(len(set(uids[i:i + 3])) == 1 for i in range(0, 12, 3)) and len(set(uids)) == 4
    # prompts are LEFT-padded, responses RIGHT-padded; single-turn response_mask == response attention
    pm = b["attention_mask"][:, :P]
    assert bool((pm[:, -1] == 1).all()) and bool((pm.cumsum(1)[:, -1] == pm.sum(1)).all())
    rm = b["attention_mask"][:, P:]
    assert torch.equal(b["response_mask"], rm)
    assert bool(((rm[:, 1:] <= rm[:, :-1])).all())  # ones then zeros
    # position ids count real tokens from 0 at the first prompt token
    first = (pm == 1).int().argmax(1)
    assert all(int(b["position_ids"][i, first[i]]) == 0 for i in range(12))
    # every session went to the rollout in ONE batch, sampled by version 0
    assert out.meta_info["rollout_batches"] == [12]
    assert set(out.non_tensor_batch["max_global_steps"].tolist()) == {0}
    assert (out.non_tensor_batch["__num_turns__"] == 2).all()
    # rollout log-probs are 0 on padding
    assert float(b["rollout_log_probs"][rm == 0].abs().sum()) == 0.0


def test_runs_inside_a_running_event_loop(setup):
    cfg, tok, ds, rollout = setup
    manager = AgentLoopManager(cfg, tok, rollout)

    async def in_jupyter():  # a notebook cell runs inside an event loop
        return manager.generate_sequences(_prompts(ds, 2))

    out = asyncio.run(in_jupyter())
    assert len(out) == 8


def test_validation_is_greedy_and_deterministic(setup):
    cfg, tok, ds, rollout = setup
    manager = AgentLoopManager(cfg, tok, rollout)
    p = _prompts(ds, 1)
    p.meta_info["validate"] = True
    a = manager.generate_sequences(p)
    b = manager.generate_sequences(p)
    assert torch.equal(a.batch["responses"], b.batch["responses"])
    assert np.array_equal(a.non_tensor_batch["uid"], p.non_tensor_batch["uid"])
