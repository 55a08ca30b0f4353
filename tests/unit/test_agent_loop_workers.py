"""Agent-loop workers as processes of their own (`actor_rollout_ref.rollout.agent.placement`): where they run, what
they write, that a sync run samples the same tokens as with the agent loop in the controller, and clean exits."""
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

import minirl.trainer.warm_start  # noqa: F401 (registers minirl://tiny-qwen2-sft)
from minirl.agent_loop import AgentLoopManagerTQ, LocalAgentLoopManagerTQ, new_uids
from minirl.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from minirl.agent_loop.worker_process import cpu_seconds, resolve_agent_placement
from minirl.config import ConfigError, load
from minirl.data.rl_dataset import RLDataset, collate_to_dataproto
from minirl.data.tasks import resolve_data_files
from minirl.models import load_tokenizer, resolve_model_path
from minirl.trainer.ppo.replay_buffer import ReplayBuffer, submit_prompts
from minirl.transfer_queue import TransferQueue, kv_batch_get_padded
from minirl.workers.reward import RewardLoopManager
from minirl.workers.reward.managers import REWARD_MANAGER_REGISTRY, NaiveRewardManager
from minirl.workers.reward.managers import register as register_reward_manager
from minirl.workers.rollout.hf_rollout import HFRollout

A = "actor_rollout_ref.rollout.agent"


@pytest.fixture(scope="module")
def setup():
    cfg = load(["actor_rollout_ref.model.path=minirl://tiny-qwen2", "actor_rollout_ref.rollout.n=4",
                "data.max_response_length=6", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32"])
    path = resolve_model_path(cfg.actor_rollout_ref.model.path)
    tok = load_tokenizer(path)
    ds = RLDataset(resolve_data_files(cfg.data.val_files, cfg.data.builtin), tok, cfg.data, max_samples=6)
    return cfg, tok, ds, path


def _prompts(ds):
    batch = collate_to_dataproto([ds[i] for i in range(len(ds))])
    batch.non_tensor_batch["uid"] = new_uids(len(batch))
    batch.meta_info.update(global_steps=1, validate=False)
    return batch


def _run(manager_cls, cfg, tok, path, prompts, **kw):
    """A fresh rollout (same seed each time), the prompts through `manager_cls`, read back padded."""
    rollout = HFRollout(cfg.actor_rollout_ref.rollout, path)
    tq = TransferQueue()
    submit_prompts(tq, list(prompts.non_tensor_batch["uid"]), global_steps=1)
    manager = manager_cls(cfg, tok, rollout, tq=tq, **kw)
    try:
        info = manager.generate_sequences(prompts)
        pids = manager.worker_pids()
    finally:
        manager.shutdown()
    meta, _ = ReplayBuffer(tq).sample(global_steps=1, batch_size=len(prompts))
    r = cfg.actor_rollout_ref.rollout
    out = kv_batch_get_padded(tq, meta, int(r.prompt_length), int(r.response_length), tok.pad_token_id)
    return out, info, pids


def test_placement_follows_the_trainers_workers_unless_set():
    assert resolve_agent_placement(load([])) == "process"  # one rank in this process: worker processes, no Ray
    assert resolve_agent_placement(load(["trainer.n_gpus_per_node=2"])) == "ray"  # Ray ranks: Ray actors (verl)
    assert resolve_agent_placement(load([f"{A}.placement=inprocess"])) == "inprocess"
    with pytest.raises(ConfigError, match=rf"{A}.placement='threads' is not a placement .* Fix: one of auto, "
                                          "process, ray, inprocess"):
        load([f"{A}.placement=threads"])


def test_worker_processes_sample_what_the_in_process_agent_loop_samples(setup):
    """One worker process: the controller's engine, served to it, sees the same batches in the same order, so the
    tokens and log-probs are the ones the in-process agent loop gets; the sessions ran in the worker, the engine
    batches here; the worker is gone after shutdown."""
    cfg, tok, ds, path = setup
    prompts = _prompts(ds)
    here, info_here, _ = _run(LocalAgentLoopManagerTQ, cfg, tok, path, prompts)
    there, info, pids = _run(AgentLoopManagerTQ, cfg, tok, path, prompts, placement="process")
    for field in ("responses", "response_mask", "rollout_log_probs"):
        assert (here.batch[field] == there.batch[field]).all(), field
    assert info["rollout_batches"] == info_here["rollout_batches"] == [24]  # 6 prompts x 4 sessions, one batch
    assert len(pids) == 1 and pids[0] != os.getpid() and info["agent_loop_pids"] == pids
    sessions = info["session_timing"]
    assert len(sessions) == 24 and {t["pid"] for t in sessions} == set(pids)
    assert {b[0] for t in sessions for b in t["engine_batches"]} == {os.getpid()}  # the engine: in the controller
    assert all(t["start"] <= t["gen_start"] <= t["gen_end"] <= t["end"] for t in sessions)
    assert [b["size"] for b in info["engine_batches"]] == [24]
    deadline = time.monotonic() + 5
    while cpu_seconds(pids[0]) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cpu_seconds(pids[0]) is None  # the process has exited


@register("minirl_test_talking_agent")
class TalkingAgentLoop(AgentLoopBase):
    """A user's own agent loop, registered in this (the controller's) process: it prints and answers at once."""

    async def run(self, sampling_params, **kwargs) -> AgentLoopOutput:
        print(f"talking agent in pid {os.getpid()}")
        return AgentLoopOutput(prompt_ids=[1, 2], response_ids=[3], response_mask=[1], response_logprobs=[-0.5],
                               extra_fields={"min_global_steps": 0, "max_global_steps": 0})


def test_two_workers_share_the_prompts_run_a_users_agent_loop_and_speak_through_the_controller(setup, capsys):
    _, tok, ds, path = setup
    prompts = _prompts(ds)
    prompts.non_tensor_batch["agent_name"] = np.array(["minirl_test_talking_agent"] * len(prompts), dtype=object)
    two = load(["actor_rollout_ref.model.path=minirl://tiny-qwen2", "actor_rollout_ref.rollout.n=4",
                "data.max_response_length=6", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
                f"{A}.num_workers=2"])
    out, info, pids = _run(AgentLoopManagerTQ, two, tok, path, prompts, placement="process")
    assert len(pids) == 2 and sorted(info["agent_loop_pids"]) == sorted(pids)
    assert {t["pid"] for t in info["session_timing"]} == set(pids)  # 3 prompts each
    assert out.batch["responses"][:, 0].tolist() == [3] * 24  # the user's loop ran in the workers
    err = capsys.readouterr().err  # what the workers printed comes out here, in the controller
    assert {int(line.rsplit(" ", 1)[1]) for line in err.splitlines() if "talking agent" in line} == set(pids)



def test_a_reward_manager_registered_in_the_controller_scores_in_the_worker_processes(setup):
    """The worker process builds its own reward-loop worker; a manager registered here is registered there too,
    and scores every session there. Defined in the test, as lab 02 defines one in its notebook: the class travels
    by value (importing a module there would not register it)."""

    class ConstantRewardManager(NaiveRewardManager):
        """A user's own reward manager: every session scores 0.25."""

        async def run_single(self, data):
            out = await super().run_single(data)
            out["reward_score"] = 0.25
            return out

    register_reward_manager("minirl_test_constant_reward")(ConstantRewardManager)
    try:
        _, tok, ds, path = setup
        scored = load(["actor_rollout_ref.model.path=minirl://tiny-qwen2", "actor_rollout_ref.rollout.n=4",
                       "data.max_response_length=6", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
                       "reward.reward_manager.name=minirl_test_constant_reward"])
        handles = RewardLoopManager(scored, tok).reward_loop_worker_handles
        out, _, pids = _run(AgentLoopManagerTQ, scored, tok, path, _prompts(ds), placement="process",
                            reward_loop_worker_handles=handles)
    finally:
        REWARD_MANAGER_REGISTRY.pop("minirl_test_constant_reward", None)
    assert len(pids) == 1 and pids[0] != os.getpid()
    assert out.batch["rm_scores"].sum(-1).tolist() == [0.25] * 24  # the user's manager scored every session


class LockedAgentLoop(TalkingAgentLoop):
    """An agent loop that cannot be pickled: its class holds a lock."""

    guard = threading.Lock()


def test_a_users_agent_loop_travels_to_ray_workers_by_value_and_one_that_cannot_stays_behind_with_a_line(capsys):
    """Ray unpickles an actor's arguments where this test module cannot be imported (it is on pytest's sys.path
    only): the class must travel by value; a class that cannot be pickled is left out, with one line."""
    from ray import cloudpickle

    from minirl.agent_loop.worker_process import _ship_by_value

    shipped = _ship_by_value({"talking": TalkingAgentLoop, "locked": LockedAgentLoop})
    assert shipped == {"talking": TalkingAgentLoop}
    err = capsys.readouterr().err
    assert "agent loop 'locked' (test_agent_loop_workers.LockedAgentLoop) is not available" in err, err
    assert "Fix:" in err and len([x for x in err.splitlines() if "'locked'" in x]) == 1, err
    code = "import pickle, sys; cls = pickle.loads(sys.stdin.buffer.read()); print(cls.__name__, cls.__module__)"
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}
    done = subprocess.run([sys.executable, "-c", code], input=cloudpickle.dumps(TalkingAgentLoop), env=env,
                          cwd=tempfile.gettempdir(), capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().split() == ["TalkingAgentLoop", "test_agent_loop_workers"]
