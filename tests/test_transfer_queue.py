"""TransferQueue: per-sample storage without padding, explicit padded <-> nested conversion, BatchMeta."""
import numpy as np
import pytest
import torch

from minirl.transfer_queue import BatchMeta, TransferQueue, nested_to_padded, padded_to_nested

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
    assert isinstance(meta, BatchMeta) and meta.keys == keys and meta.tag_values("uid") == ["a", "a", "b"]
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


def test_batch_meta_select_and_padding_mask():
    meta = BatchMeta(["k0", "k1", "k2"], [{"is_padding": False}, {"is_padding": True}, {}], "train", {"temperature": 1.0})
    assert meta.non_padding_mask().tolist() == [True, False, True]
    sub = meta.select_idxs([2, 0])
    assert sub.keys == ["k2", "k0"] and len(sub) == 2 and sub.extra_info == {"temperature": 1.0}
    with pytest.raises(ValueError, match="3 keys but 2 tags"):
        BatchMeta(["a", "b", "c"], [{}, {}])


def test_object_and_numpy_scalar_fields_keep_their_shape_and_dtype():
    tq = TransferQueue()
    tq.kv_batch_put(["a", "b"], fields={"turns": np.array([1, 2], dtype=np.int32),
                                        "raw_prompt": [[{"role": "user"}], [{"role": "user"}]]})
    got = tq.kv_batch_get(["a", "b"])
    assert got["turns"].dtype == np.int32 and got["turns"].tolist() == [1, 2]
    assert got["raw_prompt"].shape == (2,) and got["raw_prompt"][1] == [{"role": "user"}]


def test_trainer_round_trip_reproduces_the_agent_loop_batch_bit_for_bit():
    """Agent-loop output (padded) -> TransferQueue (unpadded) -> ReplayBuffer -> _get (padded) == the original."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from minirl.agent_loop.agent_loop import AgentLoopOutput, AgentLoopWorker
    from minirl.trainer.ppo.trainer import PPOTrainer

    rollout = OmegaConf.create({"prompt_length": 4, "response_length": 3})
    outputs = [AgentLoopOutput(prompt_ids=[7, 8], response_ids=[1, 2, 3], response_mask=[1, 0, 1],
                               response_logprobs=[-0.5, 0.0, -1.5]),
               AgentLoopOutput(prompt_ids=[7, 8], response_ids=[4], response_mask=[1], response_logprobs=[-0.25]),
               AgentLoopOutput(prompt_ids=[9, 9, 9, 9], response_ids=[], response_mask=[], response_logprobs=[])]
    for o in outputs:
        o.extra_fields.update(min_global_steps=3, max_global_steps=3)
    non_tensor = {"uid": np.array(["u", "u", "v"], dtype=object), "data_source": np.array(["s"] * 3, dtype=object)}
    fake_worker = SimpleNamespace(rollout_config=rollout, tokenizer=SimpleNamespace(pad_token_id=0))
    original = AgentLoopWorker._postprocess(fake_worker, outputs, non_tensor)

    trainer = PPOTrainer.__new__(PPOTrainer)
    trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}, "trainer": {"v1": {"trainer_mode": "sync"}}})
    trainer.tokenizer, trainer.global_steps, trainer.tq = SimpleNamespace(pad_token_id=0), 4, TransferQueue()
    from minirl.trainer.ppo.replay_buffer import ReplayBuffer, set_prompt_status, submit_prompts

    submit_prompts(trainer.tq, ["u", "v"], global_steps=4)
    trainer._put_trajectories(original)
    set_prompt_status(trainer.tq, ["u", "v"], "finished")
    meta, _ = ReplayBuffer(trainer.tq).sample(global_steps=4, batch_size=2)
    assert meta.keys == ["u_0_0", "u_1_0", "v_0_0"] and meta.tag_values("seq_len") == [5, 3, 4]
    assert trainer.tq.kv_batch_get(["u_1_0"], select_fields=["responses"])["responses"].offsets().tolist() == [0, 1]
    rebuilt = trainer._get(meta)
    assert list(rebuilt.batch.keys()) == ["prompts", "responses", "response_mask", "rollout_log_probs",
                                          "input_ids", "attention_mask", "position_ids"]
    for key in original.batch.keys():
        assert torch.equal(rebuilt.batch[key], original.batch[key]), key
        assert rebuilt.batch[key].dtype == original.batch[key].dtype, key
    for key, value in original.non_tensor_batch.items():
        assert rebuilt.non_tensor_batch[key].tolist() == value.tolist() and rebuilt.non_tensor_batch[key].dtype == value.dtype
    # a stage may ask for just what it reads
    only = trainer._get(meta, ["attention_mask", "uid"])
    assert list(only.batch.keys()) == ["attention_mask"] and list(only.non_tensor_batch) == ["uid"]
