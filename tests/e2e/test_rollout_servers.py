"""Rollout replicas as server processes, synced by the streaming checkpoint engine (slow: real processes).

One module fixture trains 3 GRPO steps with 2 rollout server processes and `checkpoint_engine.backend=nccl`
(gloo on CPU), 0.25 MiB buckets and the notebooks' toy reward (so the actor really changes), and after every
step's sync asks both servers and the actor's weights for greedy tokens; the tests then read that run and
use its live servers:

- every trajectory carries the version that sampled it, every sync moved the whole model in the
  planned number of buckets, each server got requests;
- after each sync both servers' greedy tokens equal the actor's;
- a sync in the middle of generation aborts the requests and resumes them: the partial output is kept
  (the tokens equal an uninterrupted run with the same weights) and the trajectory spans two versions;
- the servers listen on 127.0.0.1 only, a server whose controller dies exits by itself, a server
  that cannot start reports it in one line, and closing the trainer leaves no process behind.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.slow

R = "actor_rollout_ref.rollout"
BUCKET_MB = 0.25
QUESTIONS = ["What is 12+34?", "What is 56+7?"]


def _overrides(workdir: str) -> list[str]:
    from minirl.notebook.run import write_toy_reward  # non-zero advantages from a random model

    return [f"reward.custom_reward_function.path={write_toy_reward(workdir)}", "data.train_batch_size=4", f"{R}.n=4",
            "data.max_response_length=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "trainer.total_training_steps=3", "trainer.val_before_train=false", "trainer.test_freq=-1",
            "trainer.logger=[console]", f"trainer.default_local_dir={workdir}", "actor_rollout_ref.actor.optim.lr=1e-3",
            f"{R}.nnodes=1", f"{R}.n_gpus_per_node=2", f"{R}.checkpoint_engine.backend=nccl",
            f"{R}.checkpoint_engine.update_weights_bucket_megabytes={BUCKET_MB}"]


def _prompts(tokenizer) -> list[list[int]]:
    out = []
    for q in QUESTIONS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
        out.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return out


def _greedy_check(trainer, step: int) -> dict:
    """Both servers' greedy tokens and the actor's (its current tensors in a local hf rollout)."""
    from minirl.workers.rollout.base import SamplingParams
    from minirl.workers.rollout.hf_rollout import HFRollout

    params = SamplingParams(do_sample=False, max_tokens=12, ignore_eos=True)
    prompts = _prompts(trainer.tokenizer)
    weights = trainer.actor_rollout_wg.get_per_tensor_param()[0]
    actor = HFRollout({"seed": 0}, trainer.config.actor_rollout_ref.model.path)
    actor.update_weights(iter(weights), version=step)
    mine = actor.generate(prompts, params)
    want = [o.token_ids for o in mine]

    async def ask_all():
        async def ask(replica):
            return [await replica.generate(f"check-{step}-{i}", p, params) for i, p in enumerate(prompts)]

        return await asyncio.wait_for(asyncio.gather(*(ask(r) for r in trainer.rollout.get_replicas())), 60)

    servers = asyncio.run(ask_all())
    gap = max(abs(x - y) for outs in servers for o, m in zip(outs, mine) for x, y in zip(o.log_probs, m.log_probs))
    return {"step": step, "actor": want, "servers": [[o.token_ids for o in outs] for outs in servers], "gap": gap,
            "versions": [[o.policy_version for o in outs] for outs in servers],
            "weight_sum": float(sum(t.double().abs().sum() for _, t in weights))}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from minirl.config import load
    from minirl.trace import read_trace
    from minirl.trainer.main_ppo import TaskRunnerV1

    workdir = str(tmp_path_factory.mktemp("servers"))
    cfg = load(_overrides(workdir))
    t0 = time.perf_counter()
    trainer = TaskRunnerV1().build(cfg)
    started = time.perf_counter() - t0
    checks, batches = [_greedy_check(trainer, 0)], {}
    trainer.add_step_callback(lambda step, batch, m: (batches.__setitem__(step, batch),
                                                      checks.append(_greedy_check(trainer, step))))
    try:
        trainer.fit()
    except BaseException:
        trainer.close()
        raise
    print(f"\n[servers] build {started:.1f} s, 3 steps {time.perf_counter() - t0 - started:.1f} s")
    yield SimpleNamespace(trainer=trainer, config=cfg, events=read_trace(cfg.trace.dir), checks=checks,
                          batches=batches)
    trainer.close()


def _stages(events, name):
    return [e for e in events if e.get("kind") == "stage" and e["stage"] == name and e.get("status") == "ok"]


def test_three_steps_two_server_processes_every_trajectory_versioned(served):
    from minirl.checkpoint_engine import bucket_size_bytes, plan_buckets

    manager = served.trainer.rollout
    pids = [r.pid for r in manager.get_replicas()]
    assert len(pids) == 2 and len(set(pids)) == 2 and os.getpid() not in pids
    assert all(r.alive() for r in manager.get_replicas())
    weights = served.trainer.actor_rollout_wg.get_per_tensor_param()[0]
    planned = plan_buckets([(n, t.numel() * t.element_size()) for n, t in weights], bucket_size_bytes(BUCKET_MB))
    model_bytes = sum(t.numel() * t.element_size() for _, t in weights)
    syncs = _stages(served.events, "update_weights")
    assert [e["step"] for e in syncs] == [0, 1, 2, 3]
    for e in syncs:
        x = e["extra"]
        assert (x["backend"], x["transport"], x["rollout/replicas"]) == ("nccl", "gloo", 2)
        assert x["perf/update_weights_bytes"] == model_bytes and x["perf/update_weights_buckets"] == len(planned) > 1
        assert [b["bytes"] for b in x["buckets"]] == [p["bytes"] for p in planned]
        assert all(r["bytes"] == model_bytes and r["global_steps"] == e["step"] for r in x["replicas"])
        assert e["versions_after"]["rollout"] == e["step"]
    phases = [p["phase"] for p in syncs[0]["extra"]["phases"]]
    assert phases[:3] == ["abort", "release_kv_cache", "build_process_group"]
    assert "build_process_group" not in [p["phase"] for p in syncs[1]["extra"]["phases"]]  # built once
    for step in (1, 2, 3):
        sample = next(e for e in _stages(served.events, "sample") if e["step"] == step)
        assert sample["extra"]["policy_versions"] == [step - 1]
        batch = served.batches[step]
        assert set(batch.non_tensor_batch["min_global_steps"]) == set(batch.non_tensor_batch["max_global_steps"]) \
            == {step - 1}  # sampled by the weights of the step before, as sync mode must
        rollout = next(e for e in _stages(served.events, "rollout") if e["step"] == step)
        assert sorted(rollout["extra"]["requests_per_server"].values()) == [8, 8]  # 16 sessions, balanced
    rows = [r for r in served.trainer.history if "perf/update_weights_bytes" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["perf/update_weights_buckets"] == len(planned) for r in rows)
    assert all(r["training/rollout_actor_logprob_diff_max"] < 1e-4 for r in rows)  # the servers had the actor's weights


def test_after_each_sync_the_servers_greedy_tokens_equal_the_actors(served):
    assert [c["step"] for c in served.checks] == [0, 1, 2, 3]
    for c in served.checks:
        for tokens, versions in zip(c["servers"], c["versions"]):
            assert tokens == c["actor"], f"step {c['step']}: a server's greedy tokens differ from the actor's"
            assert versions == [c["step"]] * len(QUESTIONS)
        assert c["gap"] < 1e-5  # the log-probs of those tokens agree too: every weight arrived
    sums = [c["weight_sum"] for c in served.checks]
    assert all(a != b for a, b in itertools.pairwise(sums))  # the actor really changed between the syncs


def test_a_sync_during_generation_keeps_the_partial_output_and_spans_two_versions(served):
    from minirl.workers.rollout.base import SamplingParams

    trainer = served.trainer
    manager, client = trainer.rollout, trainer.rollout.get_client()
    params = SamplingParams(do_sample=False, max_tokens=400, ignore_eos=True)
    prompts = _prompts(trainer.tokenizer) * 4
    before = manager.policy_version

    async def generate_all():
        return await asyncio.gather(*(client.generate(f"long-{i}", p, params) for i, p in enumerate(prompts)))

    uninterrupted = asyncio.run(generate_all())
    assert all(o.extra_fields["num_resumes"] == 0 for o in uninterrupted)
    future = manager.loop.submit(generate_all())  # generate on the servers while this thread syncs
    deadline = time.monotonic() + 30
    while not any(s["in_flight"] for s in manager.status()):
        assert time.monotonic() < deadline, "the servers never started generating"
        time.sleep(0.005)
    time.sleep(0.05)
    sync = trainer.checkpoint_manager.update_weights(before + 100)  # the same weights, a new version number
    outs = future.result(timeout=120)
    assert sync["rollout/aborted_requests"] > 0 and sync["phases"][0]["phase"] == "abort"
    resumed = [o for o in outs if o.extra_fields["num_resumes"] > 0]
    assert resumed, "no request was in flight when the sync aborted them"
    for o, full in zip(outs, uninterrupted):
        kept = (o.extra_fields["resumed_at"] or [len(o.token_ids)])[0]
        assert o.token_ids[:kept] == full.token_ids[:kept]  # what came before the abort was kept, not redone
        # kept, not recomputed; equal up to float noise (the batch around each request differed)
        assert o.log_probs[:kept] == pytest.approx(full.log_probs[:kept], abs=1e-5)
        assert len(o.log_probs) == len(o.token_ids) == params.max_tokens  # the budget counts both parts
    for o in resumed:
        assert 0 < o.extra_fields["resumed_at"][0] < params.max_tokens
        assert (o.extra_fields["min_global_steps"], o.extra_fields["max_global_steps"]) == (before, before + 100)
    trainer.checkpoint_manager.update_weights(before)  # back to the version the trainer holds


def _listening_addresses(pid: int) -> list[str]:
    """The local addresses of `pid`'s listening TCP sockets (Linux /proc), as `ip:port`."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                    host, port = cols[1].split(":")
                    if len(host) == 8:
                        ip = ".".join(str(int(host[i:i + 2], 16)) for i in (6, 4, 2, 0))
                    else:
                        ip = "ipv6:" + host
                    found.append(f"{ip}:{int(port, 16)}")
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_servers_listen_on_loopback_only(served):
    for replica in served.trainer.rollout.get_replicas():
        addresses = _listening_addresses(replica.pid)
        assert replica.server_address in addresses
        assert addresses and all(a.startswith("127.0.0.1:") for a in addresses), addresses


_ORPHAN = """
import os, sys, time
from omegaconf import OmegaConf
from minirl.workers.rollout.replica import RolloutReplica
from minirl.workers.rollout.rpc import EventLoopThread
loop = EventLoopThread()
replica = RolloutReplica(0, OmegaConf.create({"name": "hf", "seed": 0}), sys.argv[1], "cpu", loop)
loop.run(replica.launch_server())
print(replica.pid, flush=True)
time.sleep(600)
"""


def _running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (exited, waiting for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_server_exits_when_its_controller_is_killed(served):
    path = served.config.actor_rollout_ref.model.path
    controller = subprocess.Popen([sys.executable, "-c", _ORPHAN, path], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(controller.stdout.readline())
        os.kill(pid, 0)  # the server is up
        controller.kill()  # SIGKILL: no atexit, no cleanup in the controller
        controller.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(pid), "the orphaned rollout server is still running"
    finally:
        if controller.poll() is None:
            controller.kill()


def test_a_server_that_cannot_start_says_so_and_leaves_nothing(served, tmp_path):
    from omegaconf import OmegaConf

    from minirl.workers.rollout.llm_server import LLMServerManager

    cfg = OmegaConf.merge(served.config, {"actor_rollout_ref": {"rollout": {"n_gpus_per_node": 1}}})
    with pytest.raises(RuntimeError, match=r"rollout server 0 failed to start: FileNotFoundError: HFRollout could not"):
        LLMServerManager.create(cfg, str(tmp_path / "no-model-here"))


# ------------------------------------------------------------------ strangers, and servers that die or hang


class _Trap:
    """Unpickling this creates a file: the proof that a server ran code a stranger sent."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_stranger_cannot_command_a_live_server(served, tmp_path):
    """An unauthenticated pickle to a server of the live run runs nothing; the server still samples."""
    import pickle
    import socket
    import struct

    from minirl.workers.rollout.base import SamplingParams

    proof = tmp_path / "pwned"
    payload = pickle.dumps(_Trap(proof))
    replica = served.trainer.rollout.get_replicas()[0]
    host, port = replica.server_address.split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.settimeout(5)
        sock.sendall(struct.pack(">Q", len(payload)) + payload)
        try:
            assert sock.recv(1) == b""  # closed at once
        except ConnectionResetError:
            pass
    time.sleep(0.2)
    assert not proof.exists()
    prompt = _prompts(served.trainer.tokenizer)[0]
    out = asyncio.run(replica.generate("after-stranger", prompt, SamplingParams(do_sample=False, max_tokens=4)))
    assert len(out.token_ids) == 4


_STOP_A_SERVER = '''
import fcntl, os, signal
import psutil

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Scores 0; at the first sample of step 2 it sends {sig} to a rollout server of the run (its pid to {pidfile!r}).

    It runs where the sessions run (by default in the agent-loop worker processes): the calls are counted in a
    file every worker shares, and the servers are the controller's children (pid {controller})."""
    with open({counter!r}, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write("1")
        f.flush()
        f.seek(0)
        calls = len(f.read())
    if calls == {first_call_of_step_2}:
        servers = [p for p in psutil.Process({controller}).children()
                   if "minirl.workers.rollout.server" in " ".join(p.cmdline())]
        pid = max(servers, key=lambda p: p.create_time()).pid  # this run's (the module's live servers are older)
        open({pidfile!r}, "w").write(str(pid))
        os.kill(pid, signal.{sig})
    return 0.0
'''


@pytest.mark.parametrize("sig,mode", [("SIGKILL", "sync"), ("SIGSTOP", "sync"), ("SIGKILL", "separate_async")])
def test_a_dead_or_hung_server_stops_the_run_in_one_line(sig, mode, tmp_path, capfd, monkeypatch):
    """A server killed (-9) or stopped (SIGSTOP) in step 2: `minirl train` exits 2 within seconds with one line
    naming the server, its pid, what it was doing; step 1's checkpoint stands and no server is left behind."""
    from minirl.trainer.main_ppo import main

    monkeypatch.setenv("MINIRL_NO_PROGRESS", "1")
    pidfile = tmp_path / "server.pid"
    reward = tmp_path / "stop_a_server.py"
    # the first session scored after step 1 has saved: sync generates step 2's batch in step 2; separate_async
    # generates one batch ahead (num_warmup_batches=1), so its third batch is the first one submitted in step 2
    first_call = 4 * 4 + 1 if mode == "sync" else 2 * 4 * 4 + 1
    reward.write_text(_STOP_A_SERVER.format(sig=sig, pidfile=str(pidfile), first_call_of_step_2=first_call,
                                            counter=str(tmp_path / "calls"), controller=os.getpid()))
    out = tmp_path / "run"
    out.mkdir()
    args = [a for a in _overrides(str(out)) if not a.startswith("reward.custom_reward_function.path=")]
    args += [f"reward.custom_reward_function.path={reward}", "trainer.save_freq=1",
                                   f"{R}.checkpoint_engine.backend=nccl", f"{R}.server.timeout=3",
                                   "trainer.logger=[file]", "trace.level=off", f"trainer.v1.trainer_mode={mode}",
                                   "trainer.v1.separate_async.parameter_sync_step=2"]
    t0 = time.monotonic()
    code = main(args)
    wall = time.monotonic() - t0
    err = capfd.readouterr().err
    pid = int(pidfile.read_text())
    try:
        assert code == 2, err
        assert "Traceback" not in err, err
        lines = [x for x in err.splitlines() if x.startswith("minirl train:")]
        assert len(lines) == 1, err
        line = lines[0]
        assert re.search(rf"rollout server \d \(pid {pid}, 127\.0\.0\.1:\d+\) ", line), line
        what = "was killed by SIGKILL (exit code -9)" if sig == "SIGKILL" else "(hung, or stopped: SIGSTOP?"
        assert what in line and "while the controller waited for " in line, line
        assert "the last checkpoint stands" in line and "Fix:" in line, line
        last = int((out / "latest_checkpointed_iteration.txt").read_text())  # sync: 1; async: 1 or 2 (one ahead)
        assert last == 1 or (mode != "sync" and last == 2), last
        assert (out / f"global_step_{last}" / "trainer_state.pt").is_file()  # complete: what resume_mode=auto loads
        assert not list(out.glob(".tmp_global_step_*"))  # no half-written checkpoint was left in the way
        assert not _running(pid)
        print(f"\n[servers] {sig}: stopped in {wall:.1f} s: {line[:160]}...")
    finally:
        if _running(pid):
            os.kill(pid, 9)


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSTOP"])
def test_a_server_lost_in_an_agent_loop_worker_process_stops_the_controller_with_its_line(sig):
    """The sessions that meet a dead or hung server run in an agent-loop worker process (the default placement): the
    worker hands the `ServerLost` back and the controller raises it, worded with the server's pid and exit."""
    import signal
    import threading

    from minirl.agent_loop import AgentLoopManagerTQ, new_uids
    from minirl.agent_loop.worker_process import resolve_agent_placement
    from minirl.config import load
    from minirl.data.rl_dataset import RLDataset, collate_to_dataproto
    from minirl.data.tasks import resolve_data_files
    from minirl.models import load_tokenizer, resolve_model_path
    from minirl.trainer.ppo.replay_buffer import submit_prompts
    from minirl.transfer_queue import TransferQueue
    from minirl.workers.rollout.llm_server import LLMServerManager
    from minirl.workers.rollout.rpc import ServerLost

    timeout = 2 if sig == "SIGSTOP" else 60  # SIGKILL: the closed connection says it, not the silence
    cfg = load(["actor_rollout_ref.model.path=minirl://tiny-qwen2", f"{R}.n=2", "data.max_response_length=16",
                f"{R}.nnodes=1", f"{R}.n_gpus_per_node=1", f"{R}.checkpoint_engine.backend=nccl",
                f"{R}.server.timeout={timeout}", f"{R}.agent.num_workers=1",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"])
    assert resolve_agent_placement(cfg) == "process"
    path = resolve_model_path(cfg.actor_rollout_ref.model.path)
    tok = load_tokenizer(path)
    ds = RLDataset(resolve_data_files(cfg.data.val_files, cfg.data.builtin), tok, cfg.data, max_samples=4)
    tq = TransferQueue()

    def batch():
        b = collate_to_dataproto([ds[i] for i in range(len(ds))])
        b.non_tensor_batch["uid"] = new_uids(len(b))
        b.meta_info.update(global_steps=1, validate=False)
        submit_prompts(tq, list(b.non_tensor_batch["uid"]), global_steps=1)
        return b

    servers = LLMServerManager.create(cfg, path)
    pid = servers.get_replicas()[0].pid
    manager = None
    try:
        manager = AgentLoopManagerTQ(cfg, tok, servers, tq=tq)
        manager.generate_sequences(batch())  # the worker is connected and its sessions ran
        os.kill(pid, signal.SIGSTOP)  # the next sessions' requests wait in the worker
        if sig == "SIGKILL":
            threading.Timer(3.0, os.kill, (pid, signal.SIGKILL)).start()
        t0 = time.monotonic()
        with pytest.raises(ServerLost) as lost:
            manager.generate_sequences(batch())
        line = str(lost.value)
        assert re.search(rf"rollout server 0 \(pid {pid}, 127\.0\.0\.1:\d+\) ", line), line
        what = "was killed by SIGKILL (exit code -9)" if sig == "SIGKILL" else "(hung, or stopped: SIGSTOP?"
        assert what in line and "generate" in line and "of agent-loop worker 0" in line, line
        assert "the last checkpoint stands" in line and "\n" not in line, line
        assert time.monotonic() - t0 < 30
    finally:
        if manager is not None:
            manager.shutdown()
        if _running(pid):
            os.kill(pid, signal.SIGKILL)
        servers.shutdown()


def test_closing_the_trainer_stops_every_server(served):
    replicas = served.trainer.rollout.get_replicas()
    served.trainer.close()
    for replica in replicas:
        assert replica.process.wait(timeout=10) is not None
    assert not any(r.alive() for r in replicas)
