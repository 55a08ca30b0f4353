"""ReplayBuffer (sync): samples whole GRPO groups by their tags; keys and order as written."""
import pytest
import torch

from minirl.trainer.ppo.replay_buffer import ReplayBuffer, submit_prompts
from minirl.transfer_queue import TransferQueue, trajectory_key, uid_of

N = 2  # sessions per prompt


def set_prompt_status(tq, uids, status, extra=None):
    """What AgentLoopWorkerTQ._run_prompt does as a group's sessions start and settle."""
    tq.kv_batch_put(list(uids), tags=[{"status": status, **(extra or {})} for _ in uids])


def write_group(tq, uid, step, version):
    keys = [trajectory_key(uid, s) for s in range(N)]
    tags = [{"uid": uid, "session_id": s, "status": "finished", "min_global_steps": version,
             "max_global_steps": version, "is_padding": False} for s in range(N)]
    tq.kv_batch_put(keys, fields={"responses": [torch.arange(s + 1) for s in range(N)]}, tags=tags)
    return keys


def test_keys_and_uids():
    assert trajectory_key("u1", 3) == "u1_3_0" and uid_of("u1_3_0") == "u1"


def test_sample_waits_for_whole_groups_then_returns_them_in_write_order():
    tq = TransferQueue()
    rb = ReplayBuffer(tq)
    submit_prompts(tq, ["p", "q"], global_steps=1)
    set_prompt_status(tq, ["p", "q"], "running")
    keys_p = write_group(tq, "p", 1, version=0)
    set_prompt_status(tq, ["p"], "finished")
    with pytest.raises(RuntimeError, match=r"only 1 prompt groups are finished.*'running': 1"):
        rb.sample(global_steps=1, batch_size=2)
    keys_q = write_group(tq, "q", 1, version=0)
    set_prompt_status(tq, ["q"], "finished")
    meta, metrics = rb.sample(global_steps=1, batch_size=2)
    assert meta.keys == keys_p + keys_q and meta.partition_id == "train" and metrics == {}
    assert meta.tag_values("uid") == ["p", "p", "q", "q"] and meta.tag_values("max_global_steps") == [0] * 4
    # prompt keys are gone, trajectories stay until the trainer clears them at the end of the step
    assert sorted(tq.kv_list("train")["train"]) == sorted(keys_p + keys_q)
    tq.kv_clear(meta.keys)
    assert len(tq) == 0


def test_oldest_groups_first_and_only_batch_size_groups():
    tq = TransferQueue()
    rb = ReplayBuffer(tq)
    submit_prompts(tq, ["new"], global_steps=5)
    submit_prompts(tq, ["old"], global_steps=4)
    write_group(tq, "new", 5, version=4)
    write_group(tq, "old", 4, version=3)
    set_prompt_status(tq, ["new", "old"], "finished")
    meta, _ = rb.sample(global_steps=5, batch_size=1)
    assert {uid_of(k) for k in meta.keys} == {"old"} and len(meta) == N
    assert list(tq.kv_list("train")["train"]).count("new") == 1  # the other group waits in the buffer


def test_bad_mode_status_and_missing_trajectories():
    tq = TransferQueue()
    with pytest.raises(ValueError, match="sync buffer only"):
        ReplayBuffer(tq, trainer_mode="separate_async")
    submit_prompts(tq, ["p"], global_steps=1)
    set_prompt_status(tq, ["p"], "done")
    with pytest.raises(ValueError, match="prompt 'p' has status 'done'"):
        ReplayBuffer(tq).sample(global_steps=1, batch_size=1)
    set_prompt_status(tq, ["p"], "finished")
    with pytest.raises(RuntimeError, match="have no trajectories"):
        ReplayBuffer(tq).sample(global_steps=1, batch_size=1)


def test_a_failed_group_stops_the_step_with_its_error():
    """verl would train on the surviving trajectories; minirl stops and names the uid and the error."""
    tq = TransferQueue()
    submit_prompts(tq, ["p"], global_steps=1)
    write_group(tq, "p", 1, version=0)
    set_prompt_status(tq, ["p"], "failure", {"error": "ValueError: session 1 broke"})
    with pytest.raises(RuntimeError, match=r"failed during rollout, e\.g\. uid p: ValueError: session 1 broke"):
        ReplayBuffer(tq).sample(global_steps=1, batch_size=1)
