"""Each entry point checks its own arguments before any work, in its own words, and stops when told to.

- `minirl train-rm`: every bad flag is named as the user typed it (`--batch-size 0`, not a config key),
  exit 2, one line, and nothing is sampled or trained (a tripwire stands in for the work);
- `minirl sft`: a bad model path or output directory is one line naming `model.path` /
  `trainer.default_local_dir`;
- a Ray address nobody answers at is one line within seconds, in each of its forms;
- SIGTERM stops a running `minirl train` at once, in one line (exit 143), and the last checkpoint stands.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import minirl.cli

ROOT = Path(__file__).resolve().parents[2]
HINT = "(set MINIRL_DEBUG=1"


def one_line(err: str, *parts: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(HINT)]
    assert len(lines) == 1, f"expected one line, got {len(lines)}:\n{err}"
    for part in (*parts, "Fix"):
        assert part in lines[0], f"{part!r} is not in:\n{lines[0]}"
    return lines[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------- train-rm
RM_CASES = {  # flags -> what the line must say
    "batch_size_zero": (["--batch-size", "0"], "--batch-size 0 must be an integer >= 1"),
    "batch_size_negative": (["--batch-size", "-3"], "--batch-size -3 must be an integer >= 1"),
    "samples_zero": (["--samples", "0"], "--samples 0 must be an integer >= 1"),
    "prompts_zero": (["--prompts", "0"], "--prompts 0 must be an integer >= 1"),
    "heldout_zero": (["--heldout", "0"], "--heldout 0 must be an integer >= 1"),
    "epochs_zero": (["--epochs", "0"], "--epochs 0 must be an integer >= 1"),
    "lr_zero": (["--lr", "0"], "--lr 0.0 must be a finite number > 0"),
    "lr_nan": (["--lr", "nan"], "--lr nan must be a finite number > 0"),
    "response_length_zero": (["--response-length", "0"], "--response-length 0 must be an integer >= 1"),
    "policy_missing": (["--policy", "/no/such/model"], "--policy /no/such/model: no such model directory"),
    "policy_unknown_preset": (["--policy", "minirl://tiny-llama"], "--policy 'minirl://tiny-llama': no such embedded"),
    "out_under_a_file": (["--out", "{tmp}/a_file/rm"], "is a file, so the model cannot be saved there"),
}


@pytest.fixture
def no_rm_work(monkeypatch):
    def tripwire(*args, **kwargs):
        raise AssertionError("train-rm started working on arguments it should have rejected")

    monkeypatch.setattr("minirl.trainer.rm_trainer.train_reward_model", tripwire)


@pytest.mark.parametrize("name", list(RM_CASES))
def test_train_rm_checks_its_own_flags_first(name, tmp_path, capsys, no_rm_work):
    flags, words = RM_CASES[name]
    (tmp_path / "a_file").write_text("x")
    flags = [f.format(tmp=tmp_path) for f in flags]
    if "--out" not in flags:
        flags += ["--out", str(tmp_path / "rm")]
    assert minirl.cli.main(["train-rm", *flags]) == 2
    line = one_line(capsys.readouterr().err, words)
    assert line.startswith("minirl train-rm: ") and "actor_rollout_ref" not in line


def test_train_rm_names_every_bad_flag_at_once(tmp_path, capsys, no_rm_work):
    assert minirl.cli.main(["train-rm", "--batch-size", "0", "--samples", "0", "--out", str(tmp_path)]) == 2
    line = one_line(capsys.readouterr().err, "--batch-size 0", "--samples 0")
    assert line.count("Fix:") == 2


def test_train_reward_model_in_python_names_its_keywords(tmp_path):
    from minirl.trainer.rm_trainer import train_reward_model

    with pytest.raises(ValueError, match=r"batch_size=0 must be an integer >= 1 .* Fix: batch_size=64"):
        train_reward_model(str(tmp_path), batch_size=0)


# ------------------------------------------------------------------------------------------------ sft
SFT_CASES = {
    "unknown_preset": (["model.path=minirl://tiny-llama"], "model.path='minirl://tiny-llama': no such embedded model"),
    "empty_model_dir": (["model.path={tmp}/empty"], "has no config.json"),
    "output_under_a_file": (["trainer.default_local_dir={tmp}/a_file/sft"], "trainer.default_local_dir="),
}


@pytest.mark.parametrize("name", list(SFT_CASES))
def test_sft_names_a_bad_path_in_one_line(name, tmp_path, capsys):
    overrides, words = SFT_CASES[name]
    (tmp_path / "empty").mkdir()
    (tmp_path / "a_file").write_text("x")
    overrides = [o.format(tmp=tmp_path) for o in overrides]
    if not any(o.startswith("trainer.default_local_dir") for o in overrides):
        overrides.append(f"trainer.default_local_dir={tmp_path / 'sft'}")
    assert minirl.cli.main(["sft", *overrides]) == 2
    line = one_line(capsys.readouterr().err, words)
    assert line.startswith("minirl sft: ") and "actor_rollout_ref" not in line


# ------------------------------------------------------------------------------------------ Ray address
def test_every_form_of_an_unreachable_ray_address_is_one_line_within_seconds(monkeypatch, tmp_path):
    import tempfile

    from minirl.single_controller.cluster_address import ClusterAddressError, check_cluster_address

    port = _free_port()
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # no /tmp/ray/ray_current_cluster here
    cases = {f"127.0.0.1:{port}": f"nothing answers at 127.0.0.1:{port}",
             f"ray://127.0.0.1:{port}": f"nothing answers at 127.0.0.1:{port}",
             "auto": "no Ray cluster runs on this machine",
             "cluster-without-port": "is not host:port"}
    for address, words in cases.items():
        t0 = time.monotonic()
        with pytest.raises(ClusterAddressError) as e:
            check_cluster_address(address)
        assert time.monotonic() - t0 < 5
        assert words in str(e.value) and "Fix:" in str(e.value) and "\n" not in str(e.value), str(e.value)
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    with pytest.raises(ClusterAddressError, match=f"address='auto'|address=auto|127.0.0.1:{port}"):
        check_cluster_address("auto")
    with socket.socket() as listener:  # something listens: the probe passes (Ray itself decides the rest)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        check_cluster_address(f"127.0.0.1:{listener.getsockname()[1]}")


# -------------------------------------------------------------------------------------------- signals
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")
def test_sigterm_stops_a_running_train_in_one_line_and_the_checkpoint_stands(tmp_path):
    out = tmp_path / "run"
    args = ["actor_rollout_ref.model.path=minirl://tiny-qwen2", "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "data.max_response_length=8",
            "data.val_files=null", "trainer.val_before_train=false", "trainer.test_freq=-1",
            "trainer.logger=[console]", "trace.level=off", "trainer.save_freq=1", "trainer.total_training_steps=500",
            f"trainer.default_local_dir={out}"]
    env = {**os.environ, "MINIRL_NO_PROGRESS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("MINIRL_DEBUG", None)
    proc = subprocess.Popen([sys.executable, "-m", "minirl.trainer.main_ppo", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 240
        while not (out / "latest_checkpointed_iteration.txt").exists():  # step 1 is done and saved
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=60)
        stopped_in = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert stopped_in < 30, stopped_in
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[-1].startswith("minirl train: stopped by SIGTERM; the last checkpoint written stands"), err
    step = int((out / "latest_checkpointed_iteration.txt").read_text())
    assert step >= 1 and (out / f"global_step_{step}").is_dir()


def test_a_wrapped_run_error_is_still_one_line():
    """An async trainer re-raises a background error as 'background generation failed: ...' from the error:
    `minirl train` still prints the error's own line (a lost rollout server here), not a traceback."""
    from minirl.trainer.main_ppo import user_error
    from minirl.workers.rollout.rpc import ServerLost

    lost = ServerLost("rollout server 0 (pid 1, 127.0.0.1:2) was killed by SIGKILL ...")
    try:
        try:
            raise lost
        except ServerLost as e:
            raise RuntimeError(f"background generation failed: {type(e).__name__}: {e}") from e
    except RuntimeError as wrapper:
        assert user_error(wrapper) is lost
    assert user_error(RuntimeError("a bug")) is None  # anything else keeps its traceback
