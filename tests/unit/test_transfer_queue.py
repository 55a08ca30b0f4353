"""TransferQueue: per-sample storage without padding, explicit padded <-> nested conversion, KVBatchMeta."""
import numpy as np
import pytest
import torch

from minirl.transfer_queue import KVBatchMeta, TransferQueue, nested_to_padded, padded_to_nested

# 3 responses right-padded to 4 and 3 prompts left-padded to 3
RESP = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0], [1, 2, 3, 4]])
RESP_MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
PROMPT = torch.tensor([[0, 9, 9], [3, 3, 3], [0, 0, 4]])
PROMPT_MASK = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 1]])


def test_padded_to_nested_and_back_right_and_left():
    rows = padded_to_nested(RESP, RESP_MASK, side="right")
    assert [r.tolist() for r in rows] == [[5, 6, 7], [8], [1, 2, 3, 4]]
    assert torch.equal(nested_to_padded(rows, width=4, side="right"), RESP)
    prompts = padded_to_nested(PROMPT, PROMPT_MASK, side="left")
    assert [r.tolist() for r in prompts] == [[9, 9], [3, 3, 3], [4]]
    assert torch.equal(nested_to_padded(prompts, width=3, side="left"), PROMPT)
    # width defaults to the longest row; pad value is explicit
    assert nested_to_padded(prompts, side="right", pad_value=-1).tolist() == [[9, 9, -1], [3, 3, 3], [4, -1, -1]]


def test_conversions_refuse_silent_damage():
    with pytest.raises(ValueError, match="width=2"):
        nested_to_padded([torch.arange(3)], width=2)  # never truncates
    with pytest.raises(ValueError, match="not contiguous on the right"):
        padded_to_nested(torch.arange(4).view(1, 4), torch.tensor([[1, 0, 1, 0]]), side="right")
    with pytest.raises(ValueError, match="side must be 'left' or 'right'"):
        padded_to_nested(RESP, RESP_MASK, side="middle")


def test_put_get_only_selected_fields_nested_scalar_and_object():
    tq = TransferQueue()
    keys = ["a_0_0", "a_1_0", "b_0_0"]
    meta = tq.kv_batch_put(keys, fields={"responses": padded_to_nested(RESP, RESP_MASK),
                                          "score": torch.tensor([1.0, 0.0, 0.5]),
                                          "data_source": np.array(["x", "y", "x"], dtype=object)},
                           tags=[{"uid": "a"}, {"uid": "a"}, {"uid": "b"}])
    assert isinstance(meta, KVBatchMeta) and meta.keys == keys and meta.tag_values("uid") == ["a", "a", "b"]
    got = tq.kv_batch_get(keys, select_fields=["responses", "score"])
    assert set(got) == {"responses", "score"}  # only what was asked for
    assert got["responses"].is_nested and got["responses"].offsets().tolist() == [0, 3, 4, 8]
    assert torch.equal(nested_to_padded(got["responses"], width=4), RESP)
    assert got["score"].tolist() == [1.0, 0.0, 0.5]
    # a subset of keys, in the order asked
    src = tq.kv_batch_get(["b_0_0", "a_0_0"], select_fields=["data_source"])["data_source"]
    assert src.dtype == object and src.tolist() == ["x", "x"]
    # a later stage adds a field to the same keys; tags merge
    tq.kv_batch_put(keys, fields={"old_log_probs": [torch.zeros(3), torch.zeros(1), torch.zeros(4)]},
                    tags=[{"status": "finished"}] * 3)
    assert tq.fields_of("a_0_0") == ["responses", "score", "data_source", "old_log_probs"]
    assert tq.kv_list("train")["train"]["a_0_0"] == {"uid": "a", "status": "finished"}
    desc = tq.describe(keys)
    assert desc["responses"] == {"storage": "transfer_queue", "dtype": "int64", "layout": "nested", "lengths": [1, 4]}
    assert desc["data_source"]["layout"] == "object" and desc["score"]["layout"] == "scalar"


def test_put_refuses_padded_tensor_and_get_names_missing_things():
    tq = TransferQueue()
    with pytest.raises(ValueError, match=r"padded tensor of shape \(3, 4\).*padded_to_nested"):
        tq.kv_batch_put(["a", "b", "c"], fields={"responses": RESP})
    with pytest.raises(ValueError, match="2 values for 3 keys"):
        tq.kv_batch_put(["a", "b", "c"], fields={"x": [1, 2]})
    tq.kv_batch_put(["a"], fields={"x": [1]})
    with pytest.raises(KeyError, match="has no field 'values'.*'x'"):
        tq.kv_batch_get(["a"], select_fields=["values"])
    with pytest.raises(KeyError, match="no key 'zz' in partition 'train'"):
        tq.kv_batch_get(["zz"], select_fields=["x"])
    with pytest.raises(KeyError, match="no partition 'val'"):
        tq.kv_batch_get(["a"], partition_id="val")


def test_clear_and_partitions():
    tq = TransferQueue()
    tq.kv_batch_put(["a", "b"], fields={"x": [1, 2]})
    tq.kv_batch_put(["a"], partition_id="val", fields={"x": [3]})
    assert len(tq) == 3
    tq.kv_clear(["a", "missing"])
    assert list(tq.kv_list("train")["train"]) == ["b"] and len(tq) == 2
    assert tq.kv_batch_get(["a"], partition_id="val")["x"].tolist() == [3]


def test_batch_meta_select():
    meta = KVBatchMeta(["k0", "k1", "k2"], [{"seq_len": 3}, {"seq_len": 4}, {}], "train", {"temperature": 1.0})
    sub = meta.select_idxs([2, 0])
    assert sub.keys == ["k2", "k0"] and len(sub) == 2 and sub.extra_info == {"temperature": 1.0}
    with pytest.raises(ValueError, match="3 keys but 2 tags"):
        KVBatchMeta(["a", "b", "c"], [{}, {}])


def test_object_and_numpy_scalar_fields_keep_their_shape_and_dtype():
    tq = TransferQueue()
    tq.kv_batch_put(["a", "b"], fields={"turns": np.array([1, 2], dtype=np.int32),
                                        "raw_prompt": [[{"role": "user"}], [{"role": "user"}]]})
    got = tq.kv_batch_get(["a", "b"])
    assert got["turns"].dtype == np.int32 and got["turns"].tolist() == [1, 2]
    assert got["raw_prompt"].shape == (2,) and got["raw_prompt"][1] == [{"role": "user"}]


def test_agent_loop_writes_unpadded_and_the_data_plane_reads_back_the_padded_layout():
    """AgentLoopOutput -> AgentLoopWorkerTQ (unpadded, one key per session) -> ReplayBuffer -> kv_batch_get_padded."""
    import asyncio

    from omegaconf import OmegaConf

    from minirl.agent_loop.agent_loop import AgentLoopOutput
    from minirl.agent_loop.agent_loop_tq import AgentLoopWorkerTQ
    from minirl.trainer.ppo.replay_buffer import ReplayBuffer, submit_prompts
    from minirl.transfer_queue import kv_batch_get_padded

    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 4, "response_length": 3}}})
    tq = TransferQueue()
    worker = AgentLoopWorkerTQ(cfg, tokenizer=None, llm_client=None, tq=tq)
    outputs = [("u", 0, AgentLoopOutput(prompt_ids=[7, 8], response_ids=[1, 2, 3], response_mask=[1, 0, 1],
                                         response_logprobs=[-0.5, 0.0, -1.5], num_turns=3)),
               ("u", 1, AgentLoopOutput(prompt_ids=[7, 8], response_ids=[4], response_mask=[1],
                                         response_logprobs=[-0.25], num_turns=2)),
               ("v", 0, AgentLoopOutput(prompt_ids=[9, 9, 9, 9], response_ids=[], response_mask=[],
                                         response_logprobs=[], num_turns=2))]
    submit_prompts(tq, ["u", "v"], global_steps=4)

    async def write():
        for uid, session, out in outputs:
            out.extra_fields.update(min_global_steps=3, max_global_steps=3)
            await worker._agent_loop_postprocess(out, validate=False, uid=uid, session_id=session, global_steps=4,
                                                 data_source="s")

    asyncio.run(write())
    tq.kv_batch_put(["u", "v"], tags=[{"status": "finished"}] * 2)
    meta, _ = ReplayBuffer(tq).sample(global_steps=4, batch_size=2)
    assert meta.keys == ["u_0_0", "u_1_0", "v_0_0"] and meta.tag_values("seq_len") == [5, 3, 4]
    assert tq.kv_batch_get(["u_1_0"], select_fields=["responses"])["responses"].offsets().tolist() == [0, 1]
    got = kv_batch_get_padded(tq, meta, prompt_length=4, response_length=3, pad_token_id=0)
    b = got.batch
    assert list(b.keys()) == ["prompts", "responses", "response_mask", "rollout_log_probs",
                              "input_ids", "attention_mask", "position_ids"]
    assert b["prompts"].tolist() == [[0, 0, 7, 8], [0, 0, 7, 8], [9, 9, 9, 9]]  # left-padded
    assert b["responses"].tolist() == [[1, 2, 3], [4, 0, 0], [0, 0, 0]]  # right-padded
    assert b["response_mask"].tolist() == [[1, 0, 1], [1, 0, 0], [0, 0, 0]]
    assert b["attention_mask"].tolist() == [[0, 0, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0, 0]]
    assert b["position_ids"].tolist() == [[0, 0, 0, 1, 2, 3, 4], [0, 0, 0, 1, 2, 0, 0], [0, 1, 2, 3, 0, 0, 0]]
    assert b["rollout_log_probs"].dtype == torch.float32 and b["rollout_log_probs"][1].tolist() == [-0.25, 0.0, 0.0]
    assert got.non_tensor_batch["num_turns"].tolist() == [3, 2, 2]
    assert got.non_tensor_batch["uid"].tolist() == ["u", "u", "v"]
    # a stage may ask for just what it reads
    only = kv_batch_get_padded(tq, meta, 4, 3, 0, fields=["attention_mask", "uid"])
    assert list(only.batch.keys()) == ["attention_mask"] and list(only.non_tensor_batch) == ["uid"]


def test_build_model_inputs_is_the_one_layout_rule():
    from minirl.transfer_queue import build_model_inputs

    out = build_model_inputs(torch.tensor([[0, 5]]), torch.tensor([[6, 0, 0]]), torch.tensor([1]), torch.tensor([1]))
    assert out["input_ids"].tolist() == [[0, 5, 6, 0, 0]]
    assert out["attention_mask"].tolist() == [[0, 1, 1, 0, 0]] and out["position_ids"].tolist() == [[0, 0, 1, 0, 0]]
