"""`minirl://tiny-qwen2-sft`, the default model: built once (command and time printed), cached, reused.

The fast tests replace the SFT run by a stand-in that saves the random-init model, so they check the
cache logic (marker, fingerprint, reuse, rebuild on a changed recipe, the caller's RNG) in seconds.
The slow test is the issue's done-when: `minirl train trainer.total_training_steps=3` with the
defaults prints a non-zero score. It builds the real warm start in `$MINIRL_CACHE` (once per CI run:
every later use, here and in the benchmarks, finds it cached).
"""

from __future__ import annotations

import json
import os
import re

import pytest
import torch

from minirl.models import resolve_model_path
from minirl.models.tiny import MARKER_FILE, make_tiny_model
from minirl.trainer import sft_trainer, warm_start


class _Calls(list):
    progress = None


@pytest.fixture
def fake_sft(tmp_path, monkeypatch):
    """A stand-in for `run_sft`: saves the random-init model where the SFT would, and reseeds torch as it does."""
    monkeypatch.setenv("MINIRL_CACHE", str(tmp_path / "cache"))
    calls = _Calls()

    def run_sft(overrides, quiet=False, progress=None):
        calls.append(list(overrides))
        calls.progress = progress
        out = next(o.split("=", 1)[1] for o in overrides if o.startswith("trainer.default_local_dir="))
        torch.manual_seed(0)
        model, tokenizer = make_tiny_model("tiny-qwen2", seed=0)
        model.save_pretrained(f"{out}/hf_model")
        tokenizer.save_pretrained(f"{out}/hf_model")
        with open(f"{out}/sft_history.jsonl", "w") as f:
            f.write(json.dumps({"step": 1, "val/acc": 0.25}) + "\n")
        return {"path": f"{out}/hf_model", "val_acc": 0.25, "steps": 1, "history": [], "wall_s": 0.1}

    monkeypatch.setattr(sft_trainer, "run_sft", run_sft)
    return calls


def test_built_once_with_the_command_printed_then_reused(fake_sft, capsys):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    path = resolve_model_path("minirl://tiny-qwen2-sft")
    torch.testing.assert_close(torch.rand(3), expected)  # the SFT's seeding did not leak into the caller
    err = capsys.readouterr().err
    assert "minirl sft model.path=minirl://tiny-qwen2 trainer.stop_at_val_score=0.2" in err
    assert re.search(r"built minirl://tiny-qwen2-sft in \d+ s: 1 SFT steps", err)
    with open(os.path.join(path, MARKER_FILE)) as f:
        marker = json.load(f)
    assert marker["base"] == "minirl://tiny-qwen2" and marker["val_acc"] == 0.25
    assert os.path.isfile(os.path.join(path, "sft_history.jsonl"))
    assert path == os.path.join(os.environ["MINIRL_CACHE"], "models", "tiny-qwen2-sft")
    what, about = fake_sft.progress  # the build's bar says what it builds and roughly how long it takes
    assert what == "building minirl://tiny-qwen2-sft" and "accuracy >= 0.2" in about and "min" in about
    assert resolve_model_path("tiny-qwen2-sft") == path and len(fake_sft) == 1  # cached: no second SFT
    assert capsys.readouterr().err == ""
    assert not [d for d in os.listdir(os.path.dirname(path)) if ".building-" in d]  # no temporary left


def test_a_changed_recipe_rebuilds(fake_sft, monkeypatch, capsys):
    warm_start.build_warm_start()
    spec = {"base": "tiny-qwen2", "overrides": ["trainer.stop_at_val_score=0.3"]}
    monkeypatch.setitem(warm_start.WARM_START_PRESETS, "tiny-qwen2-sft", spec)
    warm_start.build_warm_start()
    assert len(fake_sft) == 2 and "trainer.stop_at_val_score=0.3" in fake_sft[1]
    assert "recipe changed" in capsys.readouterr().err


def test_the_distillation_teacher_continues_the_warm_start(fake_sft, monkeypatch, capsys):
    path = resolve_model_path("minirl://tiny-qwen2-teacher")
    err = capsys.readouterr().err
    # the warm start first, then the teacher's SFT from it; both commands printed
    assert "minirl sft model.path=minirl://tiny-qwen2 trainer.stop_at_val_score=0.2" in err
    assert "minirl sft model.path=minirl://tiny-qwen2-sft trainer.stop_at_val_score=0.9" in err
    assert len(fake_sft) == 2 and path.endswith("tiny-qwen2-teacher")
    assert resolve_model_path("minirl://tiny-qwen2-teacher") == path and len(fake_sft) == 2  # cached
    # a changed warm-start recipe changes the teacher's fingerprint too: both rebuild
    spec = {"base": "tiny-qwen2", "overrides": ["trainer.stop_at_val_score=0.3"]}
    monkeypatch.setitem(warm_start.WARM_START_PRESETS, "tiny-qwen2-sft", spec)
    resolve_model_path("minirl://tiny-qwen2-teacher")
    assert len(fake_sft) == 4


def test_unknown_embedded_model_names_both_kinds():
    with pytest.raises(ValueError, match=r"minirl://tiny-qwen2-sft"):
        resolve_model_path("minirl://tiny-qwen3-sft")


@pytest.mark.slow
def test_first_run_with_the_defaults_prints_a_non_zero_score(tmp_path, monkeypatch, capsys):
    """The done-when: `minirl train trainer.total_training_steps=3` learns from the SFT warm start, not zeros."""
    from minirl.cli import main

    monkeypatch.chdir(tmp_path)  # the default output dir is relative (checkpoints/...)
    assert main(["train", "trainer.total_training_steps=3"]) == 0
    out = capsys.readouterr().out
    scores = [float(s) for s in re.findall(r"critic/score/mean=([0-9.eE+-]+)", out)]
    assert len(scores) == 3, out[-2000:]
    assert all(s > 0 for s in scores), f"scores {scores}: the default model should start from the SFT warm start"


def test_a_build_bar_shows_even_when_quiet_unless_progress_is_off(tmp_path, monkeypatch, capsys):
    """The warm start runs its SFT quietly, but a reader waiting on it sees a bar with what and how long."""
    from minirl.utils.progress import build_progress

    monkeypatch.delenv("MINIRL_NO_PROGRESS", raising=False)
    args = ["model.path=minirl://tiny-qwen2", "trainer.total_training_steps=2", "trainer.test_freq=2",
            "data.val_max_samples=2", "trainer.stop_at_val_score=null", "trace.level=off"]
    sft_trainer.run_sft([*args, f"trainer.default_local_dir={tmp_path / 'a'}"], quiet=True,
                        progress=("building something", "SFT, about 1 s"))
    err = capsys.readouterr().err
    assert "building something (SFT, about 1 s)" in err and "2/2" in err
    monkeypatch.setenv("MINIRL_NO_PROGRESS", "1")
    sft_trainer.run_sft([*args, f"trainer.default_local_dir={tmp_path / 'b'}"], quiet=True,
                        progress=("building something", "SFT, about 1 s"))
    assert "building something" not in capsys.readouterr().err
    assert build_progress("x", 1, "y").disable
