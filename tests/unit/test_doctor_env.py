"""`minirl doctor --env`: the block verl's `scripts/diagnose.py` prints for a bug report (Python, pip and the
package versions, the platform, the environment variables, the devices), with minirl in verl's place, then
minirl's resolved config. Every value is compared with what this interpreter reports itself."""

from __future__ import annotations

import importlib.metadata
import platform

import pytest

from minirl.cli import main
from minirl.doctor.env import PACKAGES, environment_sections


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(["doctor", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _value(out: str, label: str) -> str:
    line = next(ln for ln in out.splitlines() if ln.split(" : ")[0].strip() == label)
    return line.split(" : ", 1)[1].strip()


def test_env_block_has_verls_sections_and_this_interpreters_values(capsys, monkeypatch):
    import torch

    monkeypatch.setenv("VERL_LOGGING_LEVEL", "WARN")
    monkeypatch.setenv("HF_TOKEN", "hf_do_not_print_me")
    rc, out, err = _run(capsys, "--env")
    assert rc == 0, err
    titles = [ln.strip("-") for ln in out.splitlines() if ln.startswith("----------")]
    assert titles[:6] == ["Python Info", "Pip Info", "minirl Info", "Platform Info", "Environment", "System Info"]
    assert _value(out, "Version") == platform.python_version()          # the first Version line is Python's
    assert _value(out, "torch") == torch.__version__
    for name in ("transformers", "ray", "vllm"):                          # the versions the issue asks for
        try:
            want = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            want = "not found."
        assert _value(out, name) == want, name
    assert _value(out, "CUDA available") == str(torch.cuda.is_available())
    assert _value(out, "GPU Count") == str(torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert _value(out, "verl pin").startswith("1dda039b9c63")
    assert _value(out, "VERL_LOGGING_LEVEL") == '"WARN"'                 # verl's VERL_* variables are shown ...
    assert "hf_do_not_print_me" not in out and _value(out, "HF_TOKEN") == "(set, value hidden)"  # ... secrets never


def test_env_block_ends_with_the_resolved_config_and_its_batch_arithmetic(capsys):
    rc, out, _ = _run(capsys, "--env", "algorithm.adv_estimator=gae", "data.train_batch_size=64")
    assert rc == 0
    assert _value(out, "algorithm.adv_estimator") == "gae"
    assert "data.train_batch_size : 64 (override)" in " ".join(out.split())
    assert "sequences per step" in out and "critic=on" in out           # `minirl config explain`'s table follows


def test_env_with_a_run_summarises_the_config_that_run_recorded(capsys):
    rc, out, _ = _run(capsys, "--env", "ppo_gae")                       # a reference trace in traces/
    assert rc == 0
    assert "minirl Config (recorded by ppo_gae)" in out and _value(out, "algorithm.adv_estimator") == "gae"


@pytest.mark.parametrize("argv, says", [
    (["--env", "actor_rollout_ref.actor.ppo_mini_batchsize=4"], "ppo_mini_batchsize"),
    (["--env", "ppo_gae", "data.train_batch_size=4"], "either one RUN or key=value overrides"),
    ([], "give a RUN"),
])
def test_bad_env_arguments_are_one_line_errors(capsys, argv, says):
    rc, _, err = _run(capsys, *argv)
    assert rc == 2 and says in err and err.count("\n") <= 2, err


def test_sections_as_data_list_every_package_once():
    sections = dict(environment_sections())
    labels = [k for k, _ in sections["Pip Info"]]
    assert all(labels.count(p) == 1 for p in PACKAGES)
