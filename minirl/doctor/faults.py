"""Fault injection for the doctor's tests, chapter 12 and lab 08: eight known ways a run goes wrong.

No verl counterpart (verl has no fault injection). Each fault breaks one layer of a training step
the way verl users report it breaking, so that a test can check that `minirl doctor` names that
layer and no other:

| fault | layer | what the fault does | how it is injected |
|---|---|---|---|
| `stale_rollout_weights` | weight sync | the sync after step 1 does not happen: step 2 samples with version-0 weights | `checkpoint_engine.debug_skip_sync_steps=[1]` (the weight-sync debug switch) |
| `reward_parser_never_matches` | reward | the answer parser looks for `\\boxed{...}`, the model writes `#### 46`: every score is 0 | `minirl.utils.reward_score.gsm8k._STRICT` |
| `all_equal_groups` | advantage | every response of a prompt gets the same reward (its group's best): GRPO's advantage is 0 everywhere | `PPOTrainer._compute_advantage` |
| `mask_counts_padding` | loss | the loss mask handed to the actor update is all ones: padding tokens enter the loss | `PPOTrainer._worker_input` (update_actor's input) |
| `micro_batch_exceeds_rank_share` | scheduling | `ppo_micro_batch_size_per_gpu` larger than a rank's mini-batch, the legacy `loss / (mini // micro)` = `loss / 0` (verl issue #2505's NaN) | the config check, `prepare_micro_batches`, the actor's loss |
| `exploding_lr` | backend | `actor.optim.lr=1e4` (10^8 x the default): one optimizer step blows the weights up, the next gradient norm is NaN | a config override |
| `wrong_position_ids` | rollout | the trajectory's position ids count the prompt's left padding: the actor's log-probs differ from the rollout's | `minirl.transfer_queue.build_model_inputs` |
| `reference_moves` | weight sync | the reference policy receives the actor's weights after every update (`use_kl_loss=true`) | `ActorRolloutRefWorker.update_actor` |

**Why a context manager, not a config key.** A fault is `with inject("name") as fault:` around a
run, plus the config overrides the fault lists (`fault.overrides`). It patches the one function
where the fault acts and restores it on exit, so no production code path carries a fault branch,
no config file or command line can switch a fault on by accident, and nothing is on by default
(`minirl train` never imports this module). The one fault that needs no patch reuses the weight-sync
debug switch that already exists for lab 06 (`checkpoint_engine.debug_skip_sync_steps`). The
patches act in this process only: `fault_run` refuses Ray workers and rollout servers.

`fault_run(name)` trains a short run with a fault (the small settings of `minirl.notebook.small_run`,
from the SFT warm start, so that the rule reward is not 0 to begin with) and returns where its trace
and metrics are, catching the `NonFiniteError` that stops the NaN faults: the doctor reads that run.

This is the one module of `minirl.doctor` that touches the trainer and the workers (to patch them,
imported when a fault is injected); `minirl.doctor` itself only reads traces.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["FAULTS", "FAULT_RUN_SETTINGS", "Fault", "FaultRun", "fault_run", "inject"]

FAULT_RUN_SETTINGS = {"train_batch_size": 8, "n": 4, "response_length": 12, "steps": 2}
"""The short run every fault is injected into: 8 prompts x 4 responses, 2 steps (a few seconds each)."""

BASE_OVERRIDES = ("actor_rollout_ref.model.path=minirl://tiny-qwen2-sft", "trainer.logger=[console,file]",
                  "data.train_max_samples=512", "data.val_max_samples=16")
"""The SFT warm start (the default model: its rule reward is ~0.1, not 0), a metrics.jsonl next to the trace,
and datasets cut to what two steps read (tokenizing all 7000 prompts would take longer than the run)."""
_IN_PROCESS = {"trainer.worker_group": ("inprocess", "auto"), "trainer.n_gpus_per_node": ("1",),
               "trainer.nnodes": ("1",), "actor_rollout_ref.rollout.nnodes": ("0",)}
"""The values of these keys that keep every worker in this process (where the faults' patches act)."""


@dataclass(frozen=True)
class Fault:
    """One injectable fault: the layer it breaks, what it does, and how."""

    name: str
    layer: str
    """The layer `minirl doctor` must name (one of `minirl.doctor.LAYERS`)."""
    what: str
    """What goes wrong, in one sentence."""
    acts_in: str
    """The minirl code the fault patches (or the config key it sets)."""
    overrides: tuple = ()
    """Config overrides the fault needs (`key=value`, verl style)."""
    patch: Callable | None = field(default=None, repr=False)
    """`patch(stack)`: installs the fault's patches on an `ExitStack` (None: overrides only)."""


def _setattr(stack: contextlib.ExitStack, obj, name: str, value) -> None:
    """Set `obj.name = value` until the stack closes (then the original is back)."""
    old = getattr(obj, name)
    setattr(obj, name, value)
    stack.callback(setattr, obj, name, old)


# ------------------------------------------------------------------------------------------ the patches
def _reward_parser(stack):
    from minirl.utils.reward_score import gsm8k

    _setattr(stack, gsm8k, "_STRICT", re.compile(r"\\boxed\{(-?[0-9.,]+)\}"))  # a MATH parser on GSM8K answers


def _all_equal_groups(stack):
    import numpy as np
    import torch

    from minirl.trainer.ppo.trainer_base import PPOTrainer

    original = PPOTrainer._compute_advantage

    def equal_groups(self, batch, metrics):
        scores = batch.batch["rm_scores"]
        uids = np.asarray(batch.non_tensor_batch["uid"])
        totals = scores.sum(-1)
        equal = scores.clone()
        for uid in np.unique(uids):
            rows = torch.as_tensor(uids == uid)
            best = int(torch.nonzero(rows).flatten()[int(totals[rows].argmax())])
            equal[rows] = scores[best]  # every session of the prompt: the best session's token scores
        batch.batch["rm_scores"] = equal
        return original(self, batch, metrics)

    _setattr(stack, PPOTrainer, "_compute_advantage", equal_groups)


def _mask_counts_padding(stack):
    import torch

    from minirl.trainer.ppo.trainer_base import PPOTrainer

    original = PPOTrainer._worker_input

    def worker_input(self, batch, keys, **meta):
        data = original(self, batch, keys, **meta)
        if "advantages" in keys:  # update_actor's input: the loss mask covers the padding too
            data.batch["response_mask"] = torch.ones_like(data.batch["response_mask"])
        return data

    _setattr(stack, PPOTrainer, "_worker_input", worker_input)


def _micro_batch_exceeds_share(stack):
    import importlib

    import torch

    from minirl.workers import engine_workers
    from minirl.workers.engine import fsdp_engine

    validate = importlib.import_module("minirl.config.validate")  # the module (`minirl.config.validate` is a function)
    check = validate._batch_problems

    def without_micro_check(cfg, d):  # let through what minirl's config check stops (verl's did not)
        return [p for p in check(cfg, d) if "ppo_micro_batch_size_per_gpu=" not in p or "#2505" not in p]

    def legacy_micro_batches(data, micro_batch_size):  # one micro-batch of what the rank has, no error
        return data.split(int(micro_batch_size))

    loss = engine_workers.ppo_loss

    def legacy_scaled_loss(config, model_output, data):
        value, metrics = loss(config, model_output, data)
        per_rank = int(data.meta_info["global_batch_size"]) // int(data.meta_info.get("dp_size", 1))
        gradient_accumulation = per_rank // int(data.meta_info["micro_batch_size"])  # 16 // 1024 = 0
        return value / torch.tensor(float(gradient_accumulation)), metrics

    _setattr(stack, validate, "_batch_problems", without_micro_check)
    _setattr(stack, fsdp_engine, "prepare_micro_batches", legacy_micro_batches)
    _setattr(stack, engine_workers, "ppo_loss", legacy_scaled_loss)


def _wrong_position_ids(stack):
    import torch

    from minirl import transfer_queue

    build = transfer_queue.build_model_inputs

    def padded_positions(prompts, responses, prompt_lengths, response_lengths):
        out = build(prompts, responses, prompt_lengths, response_lengths)
        P, R = prompts.shape[1], responses.shape[1]
        pos = out["position_ids"].clone()
        pos[:, P:] = (P + torch.arange(R)) * out["attention_mask"][:, P:]  # counts the prompt's left padding
        out["position_ids"] = pos
        return out

    _setattr(stack, transfer_queue, "build_model_inputs", padded_positions)


def _reference_moves(stack):
    import torch

    from minirl.single_controller.base.decorator import MAGIC_ATTR
    from minirl.workers.engine_workers import ActorRolloutRefWorker

    update = ActorRolloutRefWorker.update_actor

    def update_and_move_ref(self, data):
        out = update(self, data)
        if self.ref is not None:  # the reference gets the actor's new weights (it should stay at version 0)
            with torch.no_grad():
                for ref_p, actor_p in zip(self.ref.engine.module.parameters(), self.actor.engine.module.parameters()):
                    ref_p.copy_(actor_p)
        return out

    setattr(update_and_move_ref, MAGIC_ATTR, getattr(update, MAGIC_ATTR))  # the same @register dispatch
    _setattr(stack, ActorRolloutRefWorker, "update_actor", update_and_move_ref)


FAULTS: dict[str, Fault] = {f.name: f for f in [
    Fault("stale_rollout_weights", "weight sync",
          "the weight sync after step 1 is skipped: step 2 samples with the version-0 weights while the actor is at 1",
          "actor_rollout_ref.rollout.checkpoint_engine.debug_skip_sync_steps (minirl.checkpoint_engine.manager)",
          ("actor_rollout_ref.rollout.checkpoint_engine.debug_skip_sync_steps=[1]",)),
    Fault("reward_parser_never_matches", "reward",
          "the answer parser looks for \\boxed{...} while the model writes '#### 46': every response scores 0",
          "minirl.utils.reward_score.gsm8k._STRICT", (), _reward_parser),
    Fault("all_equal_groups", "advantage",
          "every response of a prompt gets the same reward (its group's best): GRPO's advantages are 0 everywhere",
          "PPOTrainer._compute_advantage (rm_scores made equal within each uid group)", (), _all_equal_groups),
    Fault("mask_counts_padding", "loss",
          "the loss mask handed to the actor update is all ones: padding tokens are counted in the policy loss",
          "PPOTrainer._worker_input (update_actor's response_mask)", (), _mask_counts_padding),
    Fault("micro_batch_exceeds_rank_share", "scheduling",
          "ppo_micro_batch_size_per_gpu is larger than a rank's mini-batch: the legacy loss / (mini // micro) "
          "divides by 0 (verl issue #2505)",
          "minirl.config.validate._batch_problems, fsdp_engine.prepare_micro_batches, engine_workers.ppo_loss",
          ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1024",), _micro_batch_exceeds_share),
    Fault("exploding_lr", "backend",
          "the actor's learning rate is 1e4 (10^8 x the default): one optimizer step blows the weights up and the "
          "next gradient norm is NaN", "actor_rollout_ref.actor.optim.lr", ("actor_rollout_ref.actor.optim.lr=1e4",)),
    Fault("wrong_position_ids", "rollout",
          "the trajectory's position ids count the prompt's left padding: the actor scores the tokens at other "
          "positions than the rollout sampled them",
          "minirl.transfer_queue.build_model_inputs", (), _wrong_position_ids),
    Fault("reference_moves", "weight sync",
          "the reference policy is given the actor's weights after every update, so it is no longer the version-0 policy",
          "ActorRolloutRefWorker.update_actor (the ref engine's parameters)",
          ("actor_rollout_ref.actor.use_kl_loss=true",), _reference_moves),
]}


def get_fault(name: str) -> Fault:
    """The fault `name`, or a ValueError listing the faults there are."""
    if name not in FAULTS:
        raise ValueError(f"unknown fault {name!r}; the faults are: {', '.join(FAULTS)}")
    return FAULTS[name]


@contextlib.contextmanager
def inject(name: str) -> Iterator[Fault]:
    """Inject fault `name` until the block ends; yields the `Fault` (run with its `overrides`).

        with inject("wrong_position_ids") as fault:
            small_run(list(fault.overrides), ...)
    """
    fault = get_fault(name)
    with contextlib.ExitStack() as stack:
        if fault.patch is not None:
            fault.patch(stack)
        yield fault


@dataclass
class FaultRun:
    """A short run with (or without) a fault: where its trace and metrics are, and how it ended."""

    fault: str | None
    """The fault's name (None: a clean run)."""
    run_dir: str
    """`trainer.default_local_dir`: `metrics.jsonl` and `trace/` (what `minirl doctor` reads)."""
    error: str | None
    """The error that stopped the run (a `NonFiniteError` names the stage and the field), or None."""
    wall_s: float
    run: object | None = None
    """The `minirl.notebook.SmallRun` (config, trainer, events, batches) when the run finished."""

    @property
    def trace_dir(self) -> str:
        return str(Path(self.run_dir) / "trace")


def fault_run(fault: str | None = None, overrides: Sequence[str] = (), *, workdir: str | None = None,
              keep_batches: bool = False, **settings) -> FaultRun:
    """Train a short run with `fault` injected (None: clean) and return where it wrote its trace and metrics.

    `settings` override `FAULT_RUN_SETTINGS` (the `small_run` sizes); `overrides` come last. A
    `NonFiniteError` (how the NaN faults end) is caught and kept in `FaultRun.error`; any other
    error propagates. The run writes to `workdir` (default: a new temporary directory).
    """
    from minirl.notebook import small_run
    from minirl.trainer.ppo.finite_checks import NonFiniteError

    for item in overrides:  # the defaults run everything in this process; only an override can move it out
        key, _, value = str(item).lstrip("+").partition("=")
        if key in _IN_PROCESS and value.strip() not in _IN_PROCESS[key]:
            raise ValueError(f"fault_run: {item!r} puts workers in other processes, but faults patch this process; "
                             "run with one rank in-process (trainer.worker_group=inprocess, n_gpus_per_node=1, "
                             "rollout.nnodes=0)")
    sizes = {**FAULT_RUN_SETTINGS, **settings}
    workdir = workdir or tempfile.mkdtemp(prefix=f"minirl-fault-{fault or 'clean'}-")
    with inject(fault) if fault else contextlib.nullcontext(None) as f:
        ovr = list(BASE_OVERRIDES) + list(f.overrides if f else ()) + list(overrides)
        t0, error, run = time.perf_counter(), None, None
        try:
            run = small_run(ovr, workdir=workdir, keep_batches=keep_batches, **sizes)
        except NonFiniteError as e:
            error = f"{type(e).__name__}: {e}"
    return FaultRun(fault=fault, run_dir=workdir, error=error, wall_s=time.perf_counter() - t0, run=run)
