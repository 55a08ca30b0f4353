"""The vLLM backend as a rollout server process, synced by the streaming checkpoint engine.

`minirl train actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.nnodes=1
actor_rollout_ref.rollout.n_gpus_per_node=1 actor_rollout_ref.rollout.checkpoint_engine.backend=nccl`
runs 2 steps on CPU: the vLLM engine lives in its own process (`minirl.workers.rollout.server`), receives
every sync as gloo-broadcast buckets, and stamps its outputs with the version it holds.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

R = "actor_rollout_ref.rollout"
SMALL = ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4", f"{R}.n=4",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "data.max_response_length=8",
         "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.logger=[console,file]"]


def test_minirl_train_with_a_vllm_server_process(tmp_path):
    script = Path(sys.executable).with_name("minirl")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "minirl.cli"]
    cmd += ["train", f"{R}.name=vllm", f"{R}.nnodes=1", f"{R}.n_gpus_per_node=1", f"{R}.checkpoint_engine.backend=nccl",
            f"{R}.checkpoint_engine.update_weights_bucket_megabytes=1", "trainer.total_training_steps=2", *SMALL,
            f"trainer.default_local_dir={tmp_path}"]
    proc = subprocess.run(cmd, env={**os.environ, "MINIRL_NO_PROGRESS": "1"}, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    events = [json.loads(line) for line in (tmp_path / "trace" / "trace.jsonl").read_text().splitlines()]
    syncs = [e for e in events if e.get("stage") == "update_weights"]
    assert [e["step"] for e in syncs] == [0, 1, 2]
    assert all(e["extra"]["backend"] == "nccl" and e["extra"]["perf/update_weights_buckets"] == 2 for e in syncs)
    assert all(e["extra"]["replicas"][0]["bytes"] == e["extra"]["perf/update_weights_bytes"] for e in syncs)
    samples = [e for e in events if e.get("stage") == "sample"]
    assert [e["extra"]["policy_versions"] for e in samples] == [[0], [1]]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(r["training/rollout_actor_logprob_diff_max"] < 1e-3 for r in rows)  # the server has the actor's weights
