"""`minirl://tiny-qwen2-sft`: the embedded model after an SFT warm start, built once and cached.

A randomly initialised model never writes `#### <answer>`, so GRPO on it sees reward 0 for every
response, every advantage is 0, and a first run prints score 0, pg_loss 0 and grad_norm 0. The
warm start teaches the answer format first: `minirl sft` (`minirl.trainer.sft_trainer`, the defaults
of `minirl/config/sft_trainer.yaml`) trains `minirl://tiny-qwen2` on the arithmetic task until its
held-out greedy accuracy first reaches 0.2, weak but non-zero, so that GRPO has something to improve.
`minirl://tiny-qwen2-teacher` continues that SFT from the warm start until 0.9: the default teacher of
on-policy distillation (`minirl.teacher_loop`), the same architecture trained longer.

`build_warm_start(name)` runs that SFT the first time it is asked for (printing the equivalent
`minirl sft ...` command and how long it took, with a progress bar: `minirl.utils.progress`) and writes
an ordinary Hugging Face directory to `$MINIRL_CACHE/models/<name>`; later calls return the directory at once. Like `build_tiny_model` it is
atomic (built in a temporary sibling, renamed into place), marked (`minirl_model.json` records the
recipe's fingerprint: the base model's and the composed SFT config's), and rebuilt when the recipe
changes. A file lock makes concurrent first uses (two test processes) wait for one build.
The caller's torch, numpy and `random` states are left as they were.

It lives with the trainer because it runs one (DESIGN.md: `models/` builds and loads models and never
imports the trainer). Importing this module registers `tiny-qwen2-sft` and `tiny-qwen2-teacher` with the model loader
(`minirl.models.register_model_preset`), so that `minirl.models.resolve_model_path("minirl://tiny-qwen2-sft")`
builds it; the trainer's entry points (`minirl train`, `minirl.trainer.main_ppo`, the notebook harness)
import it before they resolve `actor_rollout_ref.model.path`.

verl has no embedded model: a warm start there is a checkpoint directory that an SFT run
(`verl/trainer/sft_trainer.py`) wrote and `actor_rollout_ref.model.path` points at.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time

from minirl.models import register_model_preset
from minirl.models.tiny import (
    MARKER_FILE,
    build_tiny_model,
    default_cache_dir,
    is_complete_build,
    preset_fingerprint,
)
from minirl.utils.py_functional import file_lock

__all__ = ["WARM_START_PRESETS", "build_warm_start", "warm_start_command"]

# name -> the base preset and the `minirl sft` overrides on top of minirl/config/sft_trainer.yaml.
WARM_START_PRESETS: dict[str, dict] = {
    "tiny-qwen2-sft": {"base": "tiny-qwen2", "overrides": ["trainer.stop_at_val_score=0.2"],
                       "about": "until held-out greedy accuracy >= 0.2, usually 300-400 steps; about 1-3 minutes on 2 cores"},
    # the on-policy distillation teacher (minirl.teacher_loop): the warm start, trained on until 0.9. A larger teacher
    # (tiny-qwen2-wide) took 450 SFT steps / 508 s to reach 0.9 on 2 loaded cores, this one 250 / 237 s from the warm
    # start: CI builds it once for the chapter and the tests.
    "tiny-qwen2-teacher": {"base": "tiny-qwen2-sft",
                           "overrides": ["trainer.stop_at_val_score=0.9", "trainer.total_training_steps=1000"],
                           "about": "from the warm start until held-out greedy accuracy >= 0.9 (at most 1000 "
                                    "steps); about 1-4 minutes on 2 cores"},
}
_BUILD_VERSION = 1  # bump when the build itself changes (what is saved, not the SFT recipe)


def _overrides(name: str) -> list[str]:
    spec = WARM_START_PRESETS[name]
    return [f"model.path=minirl://{spec['base']}", *spec["overrides"]]


def warm_start_command(name: str = "tiny-qwen2-sft", out_dir: str = "<dir>") -> str:
    """The `minirl sft` command line that trains the same warm start into `out_dir/hf_model`."""
    return "minirl sft " + " ".join(_overrides(name) + [f"trainer.default_local_dir={out_dir}"])


def _recipe_fingerprint(name: str) -> str:
    """The base model's fingerprint plus every value of the composed SFT config (not comments, not the output dir)."""
    from omegaconf import OmegaConf

    from minirl.config import load_sft

    sft = OmegaConf.to_container(load_sft(_overrides(name)), resolve=True)
    sft["trainer"].pop("default_local_dir", None)
    spec = WARM_START_PRESETS[name]
    base = spec["base"]  # a tiny preset, or another warm start (the teacher continues the warm start's SFT)
    base_print = _recipe_fingerprint(base) if base in WARM_START_PRESETS else preset_fingerprint(base, 0)
    recipe = {"base": base_print, "sft": sft, "v": _BUILD_VERSION}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def _is_current(path: str, fingerprint: str) -> bool:
    if not is_complete_build(path):
        return False
    with open(os.path.join(path, MARKER_FILE), encoding="utf-8") as f:
        return json.load(f).get("fingerprint") == fingerprint


@contextlib.contextmanager
def _callers_rng_kept():
    """Run the SFT without touching the caller's torch / numpy / `random` states (it seeds all three)."""
    import numpy as np
    import torch

    py_state, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


def build_warm_start(name: str = "tiny-qwen2-sft", out_dir: str | None = None) -> str:
    """Build (once) the warm start `name` and return its directory.

    Args:
        name: a key of `WARM_START_PRESETS`.
        out_dir: where to write it; default `$MINIRL_CACHE/models/<name>`.

    Returns:
        The absolute path of a Hugging Face checkpoint directory (config, weights, tokenizer,
        `minirl_model.json`, and the SFT's `sft_history.jsonl`).
    """
    if name not in WARM_START_PRESETS:
        raise ValueError(f"unknown warm start {name!r}; known: {sorted(WARM_START_PRESETS)}")
    out_dir = os.path.abspath(os.path.expanduser(out_dir or os.path.join(default_cache_dir(), "models", name)))
    fingerprint = _recipe_fingerprint(name)
    if _is_current(out_dir, fingerprint):
        return out_dir
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    with file_lock(os.path.join(parent, f".{os.path.basename(out_dir)}.lock")):
        if _is_current(out_dir, fingerprint):  # another process built it while we waited
            return out_dir
        _build(name, out_dir, fingerprint)
    return out_dir


def _build(name: str, out_dir: str, fingerprint: str) -> None:
    from minirl.trainer.sft_trainer import run_sft

    base = WARM_START_PRESETS[name]["base"]
    build_warm_start(base) if base in WARM_START_PRESETS else build_tiny_model(base)
    stale = os.path.exists(out_dir)
    print(f"[minirl] building minirl://{name} once ({'recipe changed; ' if stale else ''}cached in {out_dir}):\n"
          f"[minirl]   {warm_start_command(name)}\n"
          f"[minirl]   (SFT of minirl://{base} {WARM_START_PRESETS[name].get('about', '')})",
          file=sys.stderr, flush=True)
    tmp_dir = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.building-", dir=os.path.dirname(out_dir))
    try:
        start = time.time()
        with _callers_rng_kept():
            res = run_sft(_overrides(name) + [f"trainer.default_local_dir={tmp_dir}"], quiet=True,
                          progress=(f"building minirl://{name}", f"SFT {WARM_START_PRESETS[name].get('about', '')}".strip()))
        wall = time.time() - start
        model_dir = res["path"]
        shutil.move(os.path.join(tmp_dir, "sft_history.jsonl"), os.path.join(model_dir, "sft_history.jsonl"))
        marker = {"preset": name, "base": f"minirl://{base}", "fingerprint": fingerprint,
                  "command": warm_start_command(name), "sft_steps": res["steps"], "val_acc": res["val_acc"],
                  "build_s": round(wall, 1)}
        with open(os.path.join(model_dir, MARKER_FILE), "w", encoding="utf-8") as f:
            json.dump(marker, f, indent=2, sort_keys=True)
        if stale:
            shutil.rmtree(out_dir)
        os.rename(model_dir, out_dir)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    print(f"[minirl] built minirl://{name} in {wall:.0f} s: {res['steps']} SFT steps, held-out greedy accuracy "
          f"{res['val_acc']:.3f}", file=sys.stderr, flush=True)


for _name in WARM_START_PRESETS:  # minirl://tiny-qwen2-sft resolves through the model loader from now on
    register_model_preset(_name, lambda name=_name: build_warm_start(name))
