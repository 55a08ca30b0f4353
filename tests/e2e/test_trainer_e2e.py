"""The sync GRPO/PPO loop end to end on CPU, small: runs, traces, batch contract, resume, reward errors."""
import json
import re

import numpy as np
import pytest
import torch

from minirl.config import derived_numbers, load
from minirl.trace import read_trace
from minirl.trainer.main_ppo import TaskRunnerV1, main

pytestmark = pytest.mark.slow

# the random-init model, explicitly: these runs test the machinery, not learning (the default is the SFT warm start)
SMALL = ["actor_rollout_ref.model.path=minirl://tiny-qwen2", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "data.val_max_samples=8",
         "data.max_response_length=8", "trainer.logger=[file]"]


def run(tmp_path, *extra, name="run"):
    cfg = load(SMALL + [f"trainer.default_local_dir={tmp_path / name}", *extra])
    trainer = TaskRunnerV1().run(cfg)
    return cfg, trainer


def test_grpo_three_steps_stages_versions_and_batch_contract(tmp_path):
    cfg, trainer = run(tmp_path, "trainer.total_training_steps=3", "actor_rollout_ref.actor.ppo_epochs=2",
                       "trainer.test_freq=3")
    events = read_trace(cfg.trace.dir)
    stages = [e["stage"] for e in events if e["kind"] == "stage"]
    # no reward stage: the rule scores each session inside the rollout (verl V1 without a colocated reward model)
    one_step = ["rollout", "sample", "balance_batch", "old_log_prob", "advantage", "update_actor", "update_weights"]
    assert stages[:2] == ["update_weights", "validate"]
    assert stages[2:9] == one_step and stages.count("update_actor") == 3
    # the rollout stage wrote n sessions per prompt into the TransferQueue; sample read them back padded
    rollout = next(e for e in events if e.get("stage") == "rollout")
    assert rollout["extra"]["prompts"] == 8 and rollout["extra"]["trajectories"] == 32
    assert rollout["fields"]["responses"]["storage"] == "transfer_queue"
    sample = next(e for e in events if e.get("stage") == "sample")
    assert sample["changes"]["responses"] == "storage transfer_queue -> batch"
    assert {"input_ids", "attention_mask", "position_ids"} <= set(sample["added"])
    # which policy version sampled each step's trajectories: 0, 1, 2 (the rollout gets weights after each update)
    samples = [e for e in events if e.get("stage") == "sample"]
    assert [e["extra"]["policy_versions"] for e in samples] == [[0], [1], [2]]
    assert [e["versions"]["actor"] for e in samples] == [0, 1, 2]
    # the batch-size contract: what the worker did equals what `minirl config explain` predicts
    d = derived_numbers(cfg)
    upd = [e for e in events if e.get("stage") == "update_actor"]
    for e in upd:
        assert e["extra"]["optimizer_steps"] == d.optimizer_steps_per_step == 4
        assert e["extra"]["mini_batch_size_per_rank"] == [d.per_rank_mini_batch] == [16]
        assert e["extra"]["micro_batches_per_mini_batch"] == [d.micro_batches_per_mini_batch] == [2]
    # advantages: produced by the advantage stage, shape (B, response_length), read by update_actor
    adv = next(e for e in events if e.get("stage") == "advantage")
    assert "advantages" in adv["added"] and adv["fields"]["advantages"]["shape"] == [32, 8]
    assert "advantages" in upd[0]["read"]
    rows = [json.loads(x) for x in open(f"{cfg.trainer.default_local_dir}/metrics.jsonl")]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert "val-core/minirl/arithmetic/acc/mean@1" in rows[-1]
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy", "response_length/mean",
                "timing_s/update_actor", "training/rollout_actor_logprob_diff_max"):
        assert key in rows[1], key
    # hf rollout and actor compute the same log-probs in fp32: the mismatch metric is ~0
    assert rows[1]["training/rollout_actor_logprob_diff_max"] < 1e-4


@pytest.mark.parametrize("extra,stage", [
    (["algorithm.adv_estimator=gae"], "update_critic"),
    (["algorithm.adv_estimator=rloo", "actor_rollout_ref.actor.use_kl_loss=true",
      "algorithm.use_kl_in_reward=true"], "ref_log_prob"),
])
def test_ppo_and_rloo_run(tmp_path, extra, stage):
    cfg, trainer = run(tmp_path, "trainer.total_training_steps=2", "trainer.val_before_train=false",
                       "trainer.test_freq=-1", *extra)
    stages = [e["stage"] for e in read_trace(cfg.trace.dir) if e["kind"] == "stage"]
    assert stages.count(stage) == 2
    if stage == "update_critic":
        assert stages.index("values") < stages.index("advantage") < stages.index("update_critic") < stages.index("update_actor")
    rows = [json.loads(x) for x in open(f"{cfg.trainer.default_local_dir}/metrics.jsonl")]
    assert len(rows) == 2 and all(np.isfinite(r["actor/pg_loss"]) for r in rows)


def _actor_state(trainer):
    return {k: v.clone() for k, v in trainer.actor_rollout_wg.workers[0].actor.engine.module.state_dict().items()}


def test_resume_equals_uninterrupted(tmp_path):
    common = ["trainer.val_before_train=false", "trainer.test_freq=-1", "trace.level=off"]
    _, full = run(tmp_path, "trainer.total_training_steps=4", *common, name="full")
    run(tmp_path, "trainer.total_training_steps=2", "trainer.save_freq=2", *common, name="resumed")
    cfg, resumed = run(tmp_path, "trainer.total_training_steps=4", *common, name="resumed")
    a = {r["step"]: r for r in full.history}
    b = {r["step"]: r for r in resumed.history}
    assert sorted(b) == [3, 4]
    for step in (3, 4):
        for key, v in a[step].items():
            if key.startswith(("timing_s/", "perf/", "agent_loop/")):  # wall-clock numbers
                continue
            assert b[step][key] == pytest.approx(v, abs=1e-6), (step, key)
    sa, sb = _actor_state(full), _actor_state(resumed)
    assert all(torch.allclose(sa[k], sb[k], atol=1e-6) for k in sa)


def test_a_reward_function_that_fails_some_samples_is_counted_and_warned_each_step(tmp_path, capsys):
    bad = tmp_path / "bad_reward.py"
    bad.write_text("CALLS = []\n"
                   "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                   "    CALLS.append(1)\n"
                   "    if len(CALLS) % 2:\n"
                   "        raise ZeroDivisionError('boom')\n"
                   "    return 1.0\n")
    _, trainer = run(tmp_path, "trainer.total_training_steps=2", "trainer.val_before_train=false",
                     "trainer.test_freq=-1", f"reward.custom_reward_function.path={bad}")
    failures = [row["reward/failures"] for row in trainer.history]
    assert failures == [16, 16], failures  # every other call raised
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("minirl reward:")]
    assert len(warnings) == 2, warnings  # one line per step, with its count and the first failure
    for step, (line, count) in enumerate(zip(warnings, failures), start=1):
        assert line.startswith(f"minirl reward: step {step}: {int(count)} of 32 samples failed their reward"), line
        assert re.search(r"the first: sample \S+_\d \(dataset index \d+, data_source 'minirl/arithmetic'\): "
                         r"compute_score \(.*bad_reward\.py:2\) raised ZeroDivisionError: boom at line 5", line), line


def test_a_reward_function_that_fails_every_sample_stops_the_run_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad_reward.py"
    bad.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                   "    return None\n")
    out = tmp_path / "run"
    code = main(SMALL + [f"trainer.default_local_dir={out}", "trainer.total_training_steps=2",
                         "trainer.val_before_train=false", f"reward.custom_reward_function.path={bad}"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("(set MINIRL_DEBUG")]
    assert len(lines) == 1, err
    assert lines[0].startswith("minirl train: step 1: every sample (32 of 32) failed its reward, so the step would "
                               "train on nothing; the first: sample "), lines[0]
    assert re.search(r"compute_score \(.*bad_reward\.py:1\) returned None", lines[0]), lines[0]
    assert "Fix: make reward.custom_reward_function.path's function return a finite number" in lines[0]
    assert not (out / "global_step_1").exists()  # nothing trained on the zeros


def test_cli_bad_config_exits_2_with_message(capsys, tmp_path):
    assert main(["actor_rollout_ref.rollout.n=1"]) == 2
    err = capsys.readouterr().err
    assert "rollout.n=1" in err and "Fix:" in err
    assert main([f"data.train_files={tmp_path}/nope.parquet", f"trainer.default_local_dir={tmp_path}/r"]) == 2
    err = capsys.readouterr().err
    assert "data.train_files: no such file" in err and "Traceback" not in err
    assert main([f"actor_rollout_ref.model.path={tmp_path}/no_model", f"trainer.default_local_dir={tmp_path}/r"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_bypass_mode_uses_rollout_log_probs(tmp_path):
    """verl's rollout_correction.bypass_mode: old_log_probs = rollout_log_probs, no actor forward."""
    cfg, trainer = run(tmp_path, "trainer.total_training_steps=1", "trainer.val_before_train=false",
                       "trainer.test_freq=-1", "algorithm.rollout_correction.bypass_mode=true")
    ev = next(e for e in read_trace(cfg.trace.dir) if e.get("stage") == "old_log_prob")
    assert ev["extra"]["bypass_mode"] is True and ev["read"] == ["rollout_log_probs"] and ev["role"] == "trainer"
    assert "old_log_probs" in ev["added"] and "entropy" not in ev["added"]
    from minirl.config import ConfigError

    with pytest.raises(ConfigError, match="calculate_log_probs=True"):
        load(SMALL + ["algorithm.rollout_correction.bypass_mode=true", "actor_rollout_ref.rollout.calculate_log_probs=false"])


def test_critic_warmup_skips_the_actor_update_but_still_syncs(tmp_path):
    """Versions count global steps (as verl's update_weights(global_steps)): warm-up leaves the actor alone
    for `critic_warmup - 1` steps, yet every step samples with the weights the last sync pushed."""
    cfg, trainer = run(tmp_path, "algorithm.adv_estimator=gae", "trainer.critic_warmup=2", "trainer.total_training_steps=3",
                       "trainer.val_before_train=false", "trainer.test_freq=-1")
    events = read_trace(cfg.trace.dir)
    updates = [e["step"] for e in events if e.get("stage") == "update_actor"]
    samples = [e["extra"]["policy_versions"] for e in events if e.get("stage") == "sample"]
    assert updates == [2, 3] and samples == [[0], [1], [2]]
