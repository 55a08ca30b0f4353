"""The reward model: its server on 127.0.0.1 (start, answer, stop, never outlive the run), the client's
retries, GRPO with it on both of verl's paths (colocated: reward stage; own resources: in the rollout),
and `minirl train-rm`."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import torch
from omegaconf import OmegaConf

from minirl.trace import read_trace
from minirl.trainer.main_ppo import main
from minirl.workers.reward import RewardModelManager, post_request

TINY = ["actor_rollout_ref.model.path=minirl://tiny-qwen2"]


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    """A randomly initialised 2-class Qwen2 classifier of the tiny preset (the machinery does not care how good)."""
    from transformers import Qwen2ForSequenceClassification

    from minirl.models import make_tiny_model

    lm, tokenizer = make_tiny_model("tiny-qwen2")
    config = lm.config
    config.num_labels, config.architectures = 2, ["Qwen2ForSequenceClassification"]
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("rm")
    Qwen2ForSequenceClassification(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def _listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp writes them) of sockets listening on `port`."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            with open(table) as f:
                lines = f.read().splitlines()[1:]
            for line in lines:
                local, state = line.split()[1], line.split()[3]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    out.add(local.rsplit(":", 1)[0])
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purposes
        return f.read().split()[2] != "Z"


def test_client_retries_then_gives_up():
    import socket

    with socket.socket() as s:  # a free port that nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(urllib.error.URLError):
        post_request(f"127.0.0.1:{port}", "classify", {"input": "x"}, timeout=1, max_retries=3)
    assert time.monotonic() - t0 >= 0.3  # backoff 0.1 + 0.2 s between the 3 tries


def test_a_directory_that_is_not_a_classifier_is_refused_before_any_process(tmp_path):
    from minirl.workers.reward import RewardModelServerError

    (tmp_path / "config.json").write_text('{"architectures": ["Qwen2ForCausalLM"]}')
    with pytest.raises(RewardModelServerError, match=r"holds \['Qwen2ForCausalLM'\], not a sequence classifier: its "
                                                     r"score head would be random\. Fix:"):
        RewardModelManager(OmegaConf.create({"model_path": str(tmp_path)}))


PARENT = """
import sys, time
from omegaconf import OmegaConf
from minirl.workers.reward import RewardModelManager
server = RewardModelManager(OmegaConf.create({"model_path": sys.argv[1]}))
print(server.pid, server.port, server.token, flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_server_answers_on_loopback_only_and_dies_with_its_run(rm_dir):
    """The server a run starts: verl's /classify answer, 127.0.0.1 only, and gone soon after a kill -9 of the run."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, rm_dir], stdout=subprocess.PIPE, text=True)
    try:
        server_pid, port, token = parent.stdout.readline().split()
        server_pid, port = int(server_pid), int(port)
        address = f"127.0.0.1:{port}"
        assert _pid_alive(server_pid) and _listening_addresses(port) == {"0100007F"}  # loopback, nothing else
        answer = post_request(address, "classify", {"model": rm_dir, "input": "<|im_start|>user\nhi<|im_end|>\n"}, 10,
                              token=token)
        probs = answer["data"][-1]["probs"]  # verl's vLLM path reads data[-1]["probs"][-1]
        assert answer["object"] == "list" and len(probs) == 2 and abs(sum(probs) - 1) < 1e-5
        two = post_request(address, "classify", {"input": ["a", "bb"]}, 10, token=token)
        assert [d["index"] for d in two["data"]] == [0, 1]
        with pytest.raises(urllib.error.HTTPError) as bad:  # a 4xx is not retried
            post_request(address, "classify", {"text": "no input key"}, 10, token=token)
        assert bad.value.code == 400 and "'input'" in json.loads(bad.value.read())["error"]
        with pytest.raises(urllib.error.HTTPError) as refused:  # the token is required, also for /health
            urllib.request.urlopen(f"http://{address}/health", timeout=10)
        assert refused.value.code == 401
        health = urllib.request.Request(f"http://{address}/health", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(health, timeout=10) as r:
            assert json.loads(r.read())["requests"] == 2
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 5
        while _pid_alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _pid_alive(server_pid)
    finally:
        parent.kill()


SMALL = TINY + ["data.train_batch_size=4", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "data.max_response_length=8",
                "data.val_max_samples=4", "trainer.test_freq=-1", "trainer.logger=[file]", "trainer.resume_mode=disable"]


@pytest.mark.slow
def test_grpo_with_the_reward_model_server_colocated(rm_dir, tmp_path, capsys):
    """`minirl train reward.reward_model.enable=True reward.reward_model.model_path=<dir>`: 3 steps, the server on
    localhost, scored in the reward stage after sampling (verl's default enable_resource_pool=False), then stopped."""
    out = tmp_path / "run"
    args = SMALL + [f"trainer.default_local_dir={out}", "trainer.total_training_steps=3",
                    "reward.reward_model.enable=true", f"reward.reward_model.model_path={rm_dir}"]
    assert main(args) == 0, capsys.readouterr().err
    events = read_trace(out / "trace")
    steps = [e for e in events if e.get("kind") == "stage" and e.get("step", 0) >= 1]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["step"] >= 1] == [1, 2, 3]
    assert all(r["reward/failures"] == 0 and 0 < r["reward/rm_score/mean"] < 1 for r in rows if r["step"] >= 1)
    reward = [e for e in steps if e["stage"] == "reward"]
    rollout = next(e for e in steps if e["stage"] == "rollout")
    assert len(reward) == 3 and "rm_scores" in reward[0]["added"] and "rm_scores" not in rollout["added"]
    assert len(reward[0]["extra"]["score_timing"]) == 16 and reward[0]["role"] == "reward"
    ps = subprocess.run(["ps", "-eo", "args"], check=True, capture_output=True, text=True).stdout.splitlines()
    assert not [ln for ln in ps if "minirl.workers.reward.rm_server" in ln and rm_dir in ln]  # the run stopped it


class InThreadServer:
    """Stands in for RewardModelManager: the real request handler, a fixed 'model', served from a thread."""

    def __init__(self, config):
        import threading
        from http.server import ThreadingHTTPServer

        from minirl.workers.reward.rm_server import make_handler

        class FixedModel:  # P(correct) grows with the response's length: enough to tell rows apart
            path, requests = str(config.model_path), 0

            def classify(self, texts):
                self.requests += 1
                return [[1 - min(len(t), 100) / 100, min(len(t), 100) / 100] for t in texts], 0

        self.model_path = str(config.model_path)
        self.token = "t" * 32
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(FixedModel(), self.token))
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def get_router_address(self):
        return f"127.0.0.1:{self.port}"

    def alive(self):
        return True

    def wake_up(self):
        pass

    def sleep(self):
        pass

    def shutdown(self):
        self.httpd.shutdown()


@pytest.mark.slow
def test_reward_model_with_its_own_pool_scores_each_session_in_the_rollout(rm_dir, tmp_path, monkeypatch):
    """enable_resource_pool=True: reward_loop_worker_handles are given, every session is posted as it ends."""
    from minirl.notebook import small_run
    from minirl.workers.reward import reward_loop

    monkeypatch.setattr(reward_loop, "RewardModelManager", InThreadServer)
    run = small_run(TINY + ["reward.reward_model.enable=true", f"reward.reward_model.model_path={rm_dir}",
                            "reward.reward_model.enable_resource_pool=true"], train_batch_size=4, n=4, steps=1,
                    workdir=str(tmp_path))
    stages = [e["stage"] for e in run.events if e.get("kind") == "stage" and e["step"] == 1]
    rollout = run.stage("rollout", step=1)
    assert "reward" not in stages and "rm_scores" in rollout["added"]
    end = rollout["t_start"] + rollout["wall_s"]
    assert all(0 < t["score_start"] <= t["score_end"] <= end for t in rollout["extra"]["session_timing"])
    batch = run.batches[1]
    assert batch.meta_info["reward_extra_keys"] == ["rm_score"] and run.trainer.history[-1]["reward/failures"] == 0
    scores = batch.batch["rm_scores"].sum(-1)  # probs[-1] of the fixed model: in (0, 1)
    assert ((scores > 0) & (scores < 1)).all()


@pytest.mark.slow
def test_train_rm_writes_a_model_the_server_loads(tmp_path, monkeypatch, capsys):
    from minirl.trainer.rm_trainer import train_reward_model
    from minirl.workers.reward.rm_server import RewardModel

    monkeypatch.delenv("MINIRL_NO_PROGRESS", raising=False)
    report = train_reward_model(str(tmp_path / "rm"), quiet=True, progress="building the rm", policy="minirl://tiny-qwen2",
                                prompts=8, samples=2, heldout=4, epochs=1, batch_size=8)
    err = capsys.readouterr().err  # the build's bar: what, how, about how long, and every phase done
    assert "building the rm (sample 16 responses, label them by the rule, train 1 epochs; about" in err and "4/4" in err
    assert report["train_pairs"] == 16 and report["heldout"]["pairs"] == 8
    assert 0 <= report["heldout"]["accuracy"] <= 1
    assert json.loads((tmp_path / "rm" / "rm_report.json").read_text())["settings"]["prompts"] == 8
    probs, _ = RewardModel(str(tmp_path / "rm")).classify(["<|im_start|>user\nWhat is 1+2?<|im_end|>\n"])
    assert len(probs[0]) == 2
