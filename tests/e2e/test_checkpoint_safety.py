"""Nothing lost: the step's metrics row is written before its checkpoint becomes the latest, `latest` is
written atomically, a run killed with SIGKILL resumes to the same result, and a resume with other
batch sizes or learning rates says what changed.

One uninterrupted 2-step run (`reference`) is what the interrupted runs must equal after resuming:
the same metrics on the steps they redo and the same actor weights at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from minirl.config import load
from minirl.trainer.main_ppo import TaskRunnerV1
from minirl.trainer.ppo import checkpointing
from minirl.utils.tracking import Tracking

ROOT = Path(__file__).resolve().parents[2]
BASE = ["actor_rollout_ref.model.path=minirl://tiny-qwen2", "data.train_batch_size=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "data.max_response_length=8",
        "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.logger=[file]", "trace.level=off",
        "trainer.save_freq=1", "trainer.total_training_steps=2"]


@pytest.fixture(autouse=True)
def _no_progress_bar(monkeypatch):
    monkeypatch.setenv("MINIRL_NO_PROGRESS", "1")


def _run(run_dir, *extra):
    return TaskRunnerV1().run(load([*BASE, f"trainer.default_local_dir={run_dir}", *extra]))


def _actor_state(trainer) -> dict:
    return {k: v.clone() for k, v in trainer.actor_rollout_wg.workers[0].actor.engine.module.state_dict().items()}


def _same_steps(resumed, reference, steps):
    a = {r["step"]: r for r in reference.history}
    b = {r["step"]: r for r in resumed.history}
    assert sorted(b) == list(steps)
    for step in steps:
        for key, value in a[step].items():
            if not key.startswith(("timing_s/", "perf/", "agent_loop/")):  # wall times
                assert b[step][key] == pytest.approx(value, abs=1e-6), (step, key)
    sa, sb = _actor_state(reference), _actor_state(resumed)
    assert all(torch.allclose(sa[k], sb[k], atol=1e-6) for k in sa)


def _rows(run_dir) -> list[dict]:
    return [json.loads(line) for line in open(Path(run_dir) / "metrics.jsonl")]


# ------------------------------------------------------------------------------------------- quick
def test_latest_is_written_atomically_and_old_checkpoints_pruned_after(tmp_path, monkeypatch):
    for k in range(1, 6):
        (tmp_path / f"global_step_{k}").mkdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    seen = []
    real_replace = os.replace

    def replace(src, dst):  # what a reader of `latest` could see at the moment it changes
        seen.append((Path(src).name, Path(src).read_text(), (tmp_path / "latest_checkpointed_iteration.txt").read_text()))
        real_replace(src, dst)

    monkeypatch.setattr(checkpointing.os, "replace", replace)
    cfg = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path), "max_actor_ckpt_to_keep": 2}})
    trainer = SimpleNamespace(config=cfg, _unmarked_checkpoint=5)
    assert checkpointing.mark_latest(trainer) == 5
    assert seen == [(".latest_checkpointed_iteration.txt.tmp", "5", "4")]  # whole new file, old one until the swap
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "5"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_4", "global_step_5",
                                                        "latest_checkpointed_iteration.txt"]
    assert checkpointing.mark_latest(trainer) is None  # nothing new to mark


# -------------------------------------------------------------------------------------------- runs
@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    return run_dir, _run(run_dir)


@pytest.mark.slow
def test_the_metrics_row_lands_before_its_checkpoint_is_marked_latest(reference, tmp_path, monkeypatch):
    ref_dir, ref = reference
    run_dir = tmp_path / "run"
    marked = []
    real_mark = checkpointing.mark_latest

    def spy(trainer):
        step = trainer._unmarked_checkpoint
        marked.append((step, [r["step"] for r in _rows(run_dir)]))
        return real_mark(trainer)

    monkeypatch.setattr(checkpointing, "mark_latest", spy)
    real_log = Tracking.log  # the trainer's logger (PPOTrainer.logger)

    def log_then_die(self, metrics, step):  # the process dies right after step 2's row is written
        real_log(self, metrics, step)
        if step == 2:
            raise KeyboardInterrupt("killed between the row and the latest marker")

    monkeypatch.setattr(Tracking, "log", log_then_die)
    with pytest.raises(KeyboardInterrupt):
        _run(run_dir)
    assert marked == [(1, [1])]  # when step 1 became the latest, its row was already in metrics.jsonl
    assert [r["step"] for r in _rows(run_dir)] == [1, 2]  # step 2's row is not lost...
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text() == "1"  # ...and 2 is not marked
    assert (run_dir / "global_step_2" / "trainer_state.pt").exists()  # complete on disk, not picked
    monkeypatch.setattr(Tracking, "log", real_log)
    resumed = _run(run_dir)  # redoes step 2: the same numbers as without the crash
    _same_steps(resumed, ref, [2])
    assert [r["step"] for r in _rows(run_dir)] == [1, 2, 2]  # the redone step's row comes last
    assert _rows(run_dir)[-1]["actor/pg_loss"] == pytest.approx(_rows(ref_dir)[-1]["actor/pg_loss"], abs=1e-6)


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_equals_the_uninterrupted_run(reference, tmp_path):
    _, ref = reference
    run_dir = tmp_path / "run"
    env = {**os.environ, "MINIRL_NO_PROGRESS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "minirl.trainer.main_ppo", *BASE,
                             f"trainer.default_local_dir={run_dir}"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    latest = run_dir / "latest_checkpointed_iteration.txt"
    deadline = time.monotonic() + 240
    while not (latest.exists() and latest.read_text() == "1"):
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "the run did not reach its first checkpoint"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # step 2 is under way
    proc.wait(timeout=30)
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert 2 not in [r["step"] for r in _rows(run_dir)]  # killed before the end
    resumed = _run(run_dir)
    _same_steps(resumed, ref, [2])
    assert latest.read_text() == "2" and not list(run_dir.glob(".tmp_global_step_*"))


@pytest.mark.slow
def test_a_resume_with_other_batch_sizes_or_lr_warns_with_the_differences(reference, tmp_path, capsys):
    ref_dir, _ = reference
    run_dir = tmp_path / "run"
    shutil.copytree(ref_dir, run_dir)
    (run_dir / "latest_checkpointed_iteration.txt").write_text("1")
    cfg = load([*BASE, f"trainer.default_local_dir={run_dir}", "data.train_batch_size=16",
                "actor_rollout_ref.actor.optim.lr=1e-3"])
    trainer = TaskRunnerV1().build(cfg)
    try:
        err = capsys.readouterr().err
        line = next(x for x in err.splitlines() if "differ from the checkpoint" in x)
        assert "data.train_batch_size 8 -> 16" in line and "actor_rollout_ref.actor.optim.lr 0.0001 -> 0.001" in line
        assert str(run_dir / "global_step_1") in line
        assert trainer.resume_changes == {"data.train_batch_size": (8, 16),
                                          "actor_rollout_ref.actor.optim.lr": (1e-4, 1e-3)}
        # what the warning says about the learning rate: the restored optimizer state keeps the checkpoint's
        optimizer = trainer.actor_rollout_wg.workers[0].actor.engine.optimizer
        assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-4)
        assert "keeps its learning rate" in line
    finally:
        trainer.close()
    same = TaskRunnerV1().build(load([*BASE, f"trainer.default_local_dir={run_dir}"]))
    same.close()
    assert same.resume_changes == {} and "differ from the checkpoint" not in capsys.readouterr().err


# ------------------------------------------------------------------------ async: nothing in flight is lost
R = "actor_rollout_ref.rollout"
ASYNC = {  # 8 prompts x 4 per step; separate_async: 4 local updates of 2 prompts per weight sync
    "colocate_async": ["trainer.v1.trainer_mode=colocate_async"],
    "separate_async": ["trainer.v1.trainer_mode=separate_async", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                       f"{R}.nnodes=1", f"{R}.n_gpus_per_node=1", f"{R}.checkpoint_engine.backend=nccl"],
}
ASYNC_STEPS = 3
SLOW_JUDGE = """
import threading, time
_one_at_a_time = threading.Lock()
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    with _one_at_a_time:  # 25 ms per session, one after another: a batch of 32 takes ~0.8 s to score
        time.sleep(0.025)
    return 0.0
"""
DRIVER = '''
import json, os, signal, sys
from minirl.agent_loop import worker_process
from minirl.config import load
from minirl.trainer.main_ppo import TaskRunnerV1
from minirl.utils import hooks
from minirl.utils.tracking import Tracking

point, after, pidfile, *overrides = sys.argv[1:]
trainer = TaskRunnerV1().build(load(overrides))
calls = []

def die():  # SIGKILL: no clean-up runs; first say which processes the run had, so the test can check they end too
    pids = dict(trainer.process_table(), fork_server=worker_process._fork_server.pid)
    open(pidfile, "w").write(json.dumps(pids))
    os.kill(os.getpid(), signal.SIGKILL)

def count(value, **context):
    if point == "sampled" or "advantages" in context.get("keys", ()):
        calls.append(1)
        if len(calls) == int(after):
            die()
    return value

if point == "row_written":  # step `after`'s row is in metrics.jsonl, its checkpoint saved but not yet the latest
    real_log = Tracking.log
    def log(self, metrics, step):
        real_log(self, metrics, step)
        if step == int(after):
            die()
    Tracking.log = log
else:  # "sampled": the n-th batch was just read out of the store; "updating": the n-th update_actor is sent
    hooks.register("transfer_queue.model_inputs" if point == "sampled" else "trainer.worker_input", count)
trainer.fit()
'''


def _trained_uids(events, steps) -> list[str]:
    """The prompt uids each `sample` span of `steps` trained (one per group)."""
    from minirl.transfer_queue import uid_of

    return [uid for e in events if e.get("kind") == "stage" and e["stage"] == "sample" and e["step"] in steps
            for uid in sorted({uid_of(t["key"]) for t in e["extra"]["session_timing"]})]


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "point", "after"), [
    ("colocate_async", "sampled", 2),      # step 2's batch just sampled, step 3's generating
    ("colocate_async", "row_written", 2),  # step 2 done and saved, not yet the latest: resume redoes it
    ("separate_async", "updating", 6),     # step 2's second local update (of 4) under way
    ("separate_async", "sampled", 5),      # step 2's first local update sampled, the rest still generating
])
def test_an_async_run_killed_resumes_with_its_prompts_in_flight_reissued(tmp_path, mode, point, after):
    """kill -9 at a point of step 2, then resume from step 1's checkpoint: the groups that were finished come back
    as they were, the unfinished ones are generated again (same uids), no prompt is trained twice or lost, the
    pipeline holds as many prompts as an unstopped run's, versions count global steps, no process is left."""
    from minirl.trace import read_trace

    run_dir, pidfile = tmp_path / "run", tmp_path / "pids.json"
    driver, judge = tmp_path / "driver.py", tmp_path / "slow_judge.py"
    driver.write_text(DRIVER)
    judge.write_text(SLOW_JUDGE)  # slow scoring: the batch ahead is still unfinished when step 1 is saved
    base = [*BASE, *ASYNC[mode], f"trainer.total_training_steps={ASYNC_STEPS}", "trace.level=stages",
            f"trainer.default_local_dir={run_dir}", f"reward.custom_reward_function.path={judge}"]
    env = {**os.environ, "MINIRL_NO_PROGRESS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(driver), point, str(after), str(pidfile), *base,
                           f"trace.dir={tmp_path / 'killed'}"], cwd=ROOT, env=env, capture_output=True, timeout=300,
                          check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-3000:]
    # every process of the killed run ends by itself: the agent-loop workers, rollout servers and the fork server
    pids = {role: pid for role, pid in json.loads(pidfile.read_text()).items() if role != "controller"}
    assert any(r.startswith("agent_loop_worker") for r in pids) and "fork_server" in pids
    deadline = time.monotonic() + 15
    while any(Path(f"/proc/{pid}").exists() for pid in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [r for r, pid in pids.items() if Path(f"/proc/{pid}").exists()], pids
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text() == "1"
    saved = torch.load(run_dir / "global_step_1" / "transfer_queue.pt", weights_only=False)["partitions"]["train"]
    prompts = {k: e["tag"]["status"] for k, e in saved.items() if e["tag"].get("is_prompt")}
    unfinished = sorted(k for k, s in prompts.items() if s in ("pending", "running"))
    assert len(prompts) == 8 and unfinished  # the batch ahead of step 1, not all of it generated and scored yet
    killed = read_trace(tmp_path / "killed")

    trainer = TaskRunnerV1().build(load([*base, f"trace.dir={tmp_path / 'resumed'}"]))
    trained: dict[int, list[str]] = {}
    trainer.add_step_callback(lambda s, b, m: trained.setdefault(s, []).extend(sorted(set(b.non_tensor_batch["uid"]))))
    try:
        trainer.fit()
        left = {k for k, t in trainer.tq.kv_list("train")["train"].items() if t.get("is_prompt")}
    finally:
        trainer.close()
    print(f"{mode} {point}: at the checkpoint {len(unfinished)} of {len(prompts)} prompts unfinished")
    assert sorted(trained) == [2, 3] and trainer.reissued_prompts == len(unfinished)
    before = _trained_uids(killed, {1})
    after_resume = [u for s in (2, 3) for u in trained[s]]
    assert len(before) == 8 and len(after_resume) == len(set(after_resume)) == 16
    assert not set(before) & set(after_resume)  # nothing trained twice (step 2 is redone, not repeated)
    assert set(prompts) <= set(after_resume) | left  # every prompt in flight at the checkpoint: trained or in flight
    # the stream went on where the checkpoint stopped: warm-up + 3 steps of 8 prompts, as without the kill
    assert trainer.loader.state_dict()["index"] == 8 * (1 + ASYNC_STEPS)
    resumed = read_trace(tmp_path / "resumed")
    reissue = [e for e in resumed if e.get("stage") == "rollout" and e["extra"].get("reissued")]
    assert [e["extra"]["prompts"] for e in reissue] == ([len(unfinished)] if unfinished else [])
    for r in trainer.history:  # versions in global steps; nothing newer than the rollout could hold
        assert (r["version/actor"], r["version/rollout"], r["version/old"]) == (r["step"], r["step"], r["step"] - 1)
        assert r["training/off_policy/trajectory_staleness/min"] >= 0
