"""The run harness of the chapters and labs: a small real training run, its trace and its batches.

No verl counterpart: verl has no notebooks. A chapter runs minirl for real, with settings small
enough for a laptop CPU (8 prompts x 4 responses of 8 tokens, 2 steps: a few seconds), then reads
what happened from the run's trace (`minirl.trace`) and from the batches the steps trained on:

    run = small_run(train_batch_size=8, n=4, steps=2)
    run.stage("advantage", step=1)["fields"]["advantages"]["shape"]   # the trace event of one stage
    run.batches[1]                                                    # the DataProto step 1 trained on

`small_run` uses only the trainer's public entry points: `minirl.config.load(overrides)`,
`TaskRunnerV1().build(cfg)`, `PPOTrainer.add_step_callback` (to keep each step's batch),
`trainer.fit()`, and the trace written to `cfg.trace.dir`. Its outputs (checkpoints dir, trace) go
to a fresh temporary directory, never into the repository; the embedded model and task are cached
under `$MINIRL_CACHE` as in every run. It works inside Jupyter's running event loop because the
trainer runs its coroutines with `minirl.utils.py_functional.run_coroutine`. The progress bar is
off by default (`progress=False`): a widget bar renders as noise on the static site; the console
logger's one line per step stays. A one-time build the run needs first (the SFT warm start) shows its
own bar (`minirl.utils.progress`) unless `MINIRL_NO_PROGRESS=1`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minirl.trainer.ppo.finite_checks import (
    NonFiniteError,  # what stops a run on a NaN (trainer.nonfinite=stop)
)

__all__ = ["TOY_REWARD_SOURCE", "NonFiniteError", "SmallRun", "small_overrides", "small_run", "write_toy_reward"]

TOY_REWARD_SOURCE = '''"""A shaping reward for notebooks: the share of printable ASCII characters in the response.

A randomly initialised model never writes the right `#### <answer>`, so the task's rule reward is 0
for every response and every GRPO advantage is 0. A random byte-level model writes mostly
unprintable bytes; the share of printable ones differs between responses from the first step, so
the advantages a chapter shows are not all zero. `acc` keeps the real rule's verdict (0 or 1).
Plugged in with verl's hook: reward.custom_reward_function.path=<this file>.
"""

from minirl.utils.reward_score import default_compute_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    acc = float(default_compute_score(data_source, solution_str, ground_truth, extra_info))
    printable = sum(ch.isascii() and ch.isprintable() for ch in solution_str) / max(len(solution_str), 1)
    return {"score": printable, "acc": acc}
'''


def write_toy_reward(workdir: str | os.PathLike) -> str:
    """Write `TOY_REWARD_SOURCE` to `<workdir>/toy_reward.py` and return its path."""
    path = Path(workdir) / "toy_reward.py"
    path.write_text(TOY_REWARD_SOURCE)
    return str(path)


def small_overrides(*, train_batch_size: int = 8, n: int = 4, response_length: int = 8, steps: int = 2,
                    ppo_mini_batch_size: int | None = None, micro_batch_size: int | None = None,
                    workdir: str | None = None, model: str = "minirl://tiny-qwen2") -> list[str]:
    """verl-style `key=value` overrides for a tiny run (no validation passes, console log only).

    `ppo_mini_batch_size` defaults to half the prompts (two optimizer steps per training step) and
    `micro_batch_size` (`ppo_micro_batch_size_per_gpu`) to a quarter of the per-rank mini-batch.
    `model` defaults to the random-init model (fast, short responses: the chapters that show how fields
    move); `minirl://tiny-qwen2-sft` is the warm start (the chapters that show learning, chapter 00's words).
    """
    mini = ppo_mini_batch_size or max(1, train_batch_size // 2)
    micro = micro_batch_size or max(1, mini * n // 4)
    out = [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_batch_size={train_batch_size}",
        f"actor_rollout_ref.rollout.n={n}",
        f"data.max_response_length={response_length}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.logger=[console]",
    ]
    if workdir is not None:
        out.append(f"trainer.default_local_dir={workdir}")
    return out


@dataclass
class SmallRun:
    """What `small_run` hands back: the config, the trainer, the trace events and the step batches."""

    config: Any
    """The resolved config (`minirl.config.load(overrides)`)."""
    trainer: Any
    """The trainer after `fit()` (its workers, rollout and `history` of logged metrics)."""
    events: list[dict]
    """Every trace event (`minirl.trace.read_trace(config.trace.dir)`)."""
    workdir: str
    """The temporary directory holding the run's outputs (`trainer.default_local_dir`)."""
    overrides: list[str]
    """The overrides the config was loaded with."""
    batches: dict[int, Any] = field(default_factory=dict)
    """step -> the batch that step trained on (every field after its last stage), from the step callback."""
    config_reads: dict[str, set] = field(default_factory=dict)
    """dotted config key -> the files that read it during build and fit (`minirl.config.introspect`)."""

    @property
    def trace_dir(self) -> str:
        """Where the run's trace is (`trace.dir`)."""
        return str(self.config.trace.dir)

    def stage(self, name: str, step: int = 1) -> dict:
        """The trace event of stage `name` at `step` (KeyError naming the stages that exist if absent)."""
        from minirl.trace.query import stage_events

        evs = stage_events(self.events, step=step)
        for e in evs:
            if e["stage"] == name:
                return e
        raise KeyError(f"no stage {name!r} at step {step} in the trace; stages there: {[e['stage'] for e in evs]}")


def small_run(overrides: Sequence[str] = (), *, train_batch_size: int = 8, n: int = 4, response_length: int = 8,
              steps: int = 2, ppo_mini_batch_size: int | None = None, micro_batch_size: int | None = None,
              toy_reward: bool = False, keep_batches: bool = True, progress: bool = False,
              workdir: str | None = None, model: str = "minirl://tiny-qwen2", close: bool = True) -> SmallRun:
    """Train `steps` GRPO steps with tiny settings and return the config, trainer, trace and batches.

    `overrides` (verl's `key=value`) are applied after the small settings, so they win. `model` is
    `actor_rollout_ref.model.path` (default: the random-init model; see `small_overrides`). `toy_reward`
    scores responses with `TOY_REWARD_SOURCE` (non-zero advantages from a random model). The run writes
    to `workdir` (default: a new temporary directory). With `keep_batches`, a step callback
    (`PPOTrainer.add_step_callback`) keeps the batch of each step in `SmallRun.batches[step]`. Which
    file read which config key during build and fit is in `SmallRun.config_reads`. With `close=False` the
    trainer stays open after `fit()` (its rollout servers keep running, e.g. to ask them for tokens): call
    `run.trainer.close()` when done (a failed `fit()` closes it anyway).
    """
    from minirl.config import load
    from minirl.config.introspect import record_config_reads
    from minirl.models import resolve_model_path
    from minirl.trace import read_trace
    from minirl.trainer import warm_start  # noqa: F401 (registers minirl://tiny-qwen2-sft, resolved below)
    from minirl.trainer.main_ppo import TaskRunnerV1

    workdir = workdir or tempfile.mkdtemp(prefix="minirl-nb-")
    ovr = small_overrides(train_batch_size=train_batch_size, n=n, response_length=response_length, steps=steps,
                          ppo_mini_batch_size=ppo_mini_batch_size, micro_batch_size=micro_batch_size,
                          workdir=workdir, model=model)
    if toy_reward:
        ovr.append(f"reward.custom_reward_function.path={write_toy_reward(workdir)}")
    ovr += list(overrides)
    config = load(ovr)
    # a one-time build (the SFT warm start) shows its own bar: it runs before the training bar is silenced
    resolve_model_path(str(config.actor_rollout_ref.model.path))
    batches: dict[int, Any] = {}
    old = os.environ.get("MINIRL_NO_PROGRESS")
    if not progress:
        os.environ["MINIRL_NO_PROGRESS"] = "1"
    try:
        with record_config_reads() as reads:
            trainer = TaskRunnerV1().build(config)
            if keep_batches:
                trainer.add_step_callback(lambda step, batch, metrics: batches.__setitem__(step, batch))
            try:
                trainer.fit()
            except BaseException:
                trainer.close()
                raise
            if close:
                trainer.close()
    finally:
        if not progress:
            if old is None:
                os.environ.pop("MINIRL_NO_PROGRESS", None)
            else:
                os.environ["MINIRL_NO_PROGRESS"] = old
    return SmallRun(config=config, trainer=trainer, events=read_trace(config.trace.dir), workdir=workdir,
                    overrides=ovr, batches=batches, config_reads=reads)
