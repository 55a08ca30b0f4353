"""Fault injection for the doctor's tests, chapter 12 and lab 08: eight known ways a run goes wrong.

No verl counterpart (verl has no fault injection). Each fault breaks one layer of a training step
the way verl users report it breaking, so that a test can check that `minirl doctor` names that
layer and no other:

| fault | layer | what the fault does | how it is injected |
|---|---|---|---|
| `stale_rollout_weights` | weight sync | the sync after step 1 does not happen: step 2 samples with version-0 weights | `checkpoint_engine.debug_skip_sync_steps=[1]` (the weight-sync debug switch) |
| `reward_parser_never_matches` | reward | the answer parser looks for `\\boxed{...}`, the model writes `#### 46`: every score is 0 | hook `reward.gsm8k.strict_pattern` |
| `all_equal_groups` | advantage | every response of a prompt gets the same reward (its group's best): GRPO's advantage is 0 everywhere | hook `trainer.before_advantage` |
| `mask_counts_padding` | loss | the loss mask handed to the actor update is all ones: padding tokens enter the loss | hook `trainer.worker_input` (update_actor's input) |
| `micro_batch_exceeds_rank_share` | scheduling | `ppo_micro_batch_size_per_gpu` larger than a rank's mini-batch, the legacy `loss / (mini // micro)` = `loss / 0` (verl issue #2505's NaN) | hooks `config.batch_problems`, `engine.prepare_micro_batches`, `worker.actor_loss_fn` |
| `exploding_lr` | backend | `actor.optim.lr=1e4` (10^8 x the default): one optimizer step blows the weights up, the next gradient norm is NaN | a config override |
| `wrong_position_ids` | rollout | the trajectory's position ids count the prompt's left padding: the actor's log-probs differ from the rollout's | hook `transfer_queue.model_inputs` |
| `reference_moves` | weight sync | the reference policy receives the actor's weights after every update (`use_kl_loss=true`) | hook `worker.after_update_actor` |

**Why a context manager, not a config key.** A fault is `with inject("name") as fault:` around a
run, plus the config overrides the fault lists (`fault.overrides`). It registers a filter at the
documented hook points where the fault acts (`minirl.utils.hooks`: the trainer, the engine, the
worker, the data plane and the reward parser each pass one value through a named point) and removes
it on exit, so no production code path carries a fault branch, nothing private is replaced, no config
file or command line can switch a fault on by accident, and nothing is on by default (`minirl train`
never imports this module). The one fault that needs no hook reuses the weight-sync debug switch that
already exists for lab 06 (`checkpoint_engine.debug_skip_sync_steps`). Hooks act in this process
only: `fault_run` refuses Ray workers and rollout servers, and runs the agent loop in this process
(`rollout.agent.placement=inprocess`).

`fault_run(name)` trains a short run with a fault (the small settings of `minirl.notebook.small_run`,
from the SFT warm start, so that the rule reward is not 0 to begin with) and returns where its trace
and metrics are, catching the `NonFiniteError` that stops the NaN faults: the doctor reads that run.

This module imports no trainer or worker: it registers hooks and runs the job through the notebook
harness (`minirl.notebook.small_run`); `minirl.doctor` itself only reads traces.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from minirl.utils import hooks

__all__ = ["FAULTS", "FAULT_RUN_SETTINGS", "Fault", "FaultRun", "fault_run", "inject"]

FAULT_RUN_SETTINGS = {"train_batch_size": 8, "n": 4, "response_length": 12, "steps": 2}
"""The short run every fault is injected into: 8 prompts x 4 responses, 2 steps (a few seconds each)."""

BASE_OVERRIDES = ("actor_rollout_ref.model.path=minirl://tiny-qwen2-sft", "trainer.logger=[console,file]",
                  "data.train_max_samples=512", "data.val_max_samples=16")
"""The SFT warm start (the default model: its rule reward is ~0.1, not 0), a metrics.jsonl next to the trace,
and datasets cut to what two steps read (tokenizing all 7000 prompts would take longer than the run)."""
_IN_PROCESS = {"trainer.worker_group": ("inprocess", "auto"), "trainer.n_gpus_per_node": ("1",),
               "trainer.nnodes": ("1",), "actor_rollout_ref.rollout.nnodes": ("0",),
               "actor_rollout_ref.rollout.agent.placement": ("inprocess",)}
"""The values of these keys that keep every worker in this process (where the faults' hooks act)."""
IN_PROCESS_OVERRIDES = ("actor_rollout_ref.rollout.agent.placement=inprocess",)
"""What a fault run sets on top of the defaults: the agent loop in this process too (the reward parser's hook acts
in the agent loop, which by default runs in worker processes of its own)."""


@dataclass(frozen=True)
class Fault:
    """One injectable fault: the layer it breaks, what it does, and how."""

    name: str
    layer: str
    """The layer `minirl doctor` must name (one of `minirl.doctor.LAYERS`)."""
    what: str
    """What goes wrong, in one sentence."""
    acts_in: str
    """Where the fault acts: the hook points it uses (or the config key it sets)."""
    overrides: tuple = ()
    """Config overrides the fault needs (`key=value`, verl style)."""
    patch: Callable | None = field(default=None, repr=False)
    """`patch(stack)`: registers the fault's hooks on an `ExitStack` (None: overrides only)."""


def _hook(stack: contextlib.ExitStack, point: str, fn: Callable) -> None:
    """Register `fn` at hook point `point` (`minirl.utils.hooks`) until the stack closes."""
    stack.enter_context(hooks.use(point, fn))


# ------------------------------------------------------------------------------------------ the faults' hooks
def _reward_parser(stack):
    _hook(stack, "reward.gsm8k.strict_pattern",
          lambda pattern: re.compile(r"\\boxed\{(-?[0-9.,]+)\}"))  # a MATH parser on GSM8K answers


def _all_equal_groups(stack):
    import numpy as np
    import torch

    def equal_groups(batch):
        scores = batch.batch["rm_scores"]
        uids = np.asarray(batch.non_tensor_batch["uid"])
        totals = scores.sum(-1)
        equal = scores.clone()
        for uid in np.unique(uids):
            rows = torch.as_tensor(uids == uid)
            best = int(torch.nonzero(rows).flatten()[int(totals[rows].argmax())])
            equal[rows] = scores[best]  # every session of the prompt: the best session's token scores
        batch.batch["rm_scores"] = equal
        return batch

    _hook(stack, "trainer.before_advantage", equal_groups)


def _mask_counts_padding(stack):
    import torch

    def worker_input(data, keys):
        if "advantages" in keys:  # update_actor's input: the loss mask covers the padding too
            data.batch["response_mask"] = torch.ones_like(data.batch["response_mask"])
        return data

    _hook(stack, "trainer.worker_input", worker_input)


def _micro_batch_exceeds_share(stack):
    import torch

    def without_micro_check(problems, cfg):  # let through what minirl's config check stops (verl's did not)
        return [p for p in problems if "ppo_micro_batch_size_per_gpu=" not in p or "#2505" not in p]

    def legacy_micro_batches(data, micro_batch_size):  # one micro-batch of what the rank has, no error
        return data.split(int(micro_batch_size))

    def legacy_scaled_loss(loss_fn, config):
        def scaled(model_output, data):
            value, metrics = loss_fn(model_output, data)
            per_rank = int(data.meta_info["global_batch_size"]) // int(data.meta_info.get("dp_size", 1))
            gradient_accumulation = per_rank // int(data.meta_info["micro_batch_size"])  # 16 // 1024 = 0
            return value / torch.tensor(float(gradient_accumulation)), metrics

        return scaled

    _hook(stack, "config.batch_problems", without_micro_check)
    _hook(stack, "engine.prepare_micro_batches", lambda prepare: legacy_micro_batches)
    _hook(stack, "worker.actor_loss_fn", legacy_scaled_loss)


def _wrong_position_ids(stack):
    import torch

    def padded_positions(out, prompts, responses, prompt_lengths, response_lengths):
        P, R = prompts.shape[1], responses.shape[1]
        pos = out["position_ids"].clone()
        pos[:, P:] = (P + torch.arange(R)) * out["attention_mask"][:, P:]  # counts the prompt's left padding
        return {**out, "position_ids": pos}

    _hook(stack, "transfer_queue.model_inputs", padded_positions)


def _reference_moves(stack):
    import torch

    def move_ref(out, worker):
        if worker.ref is not None:  # the reference gets the actor's new weights (it should stay at version 0)
            with torch.no_grad():
                for ref_p, actor_p in zip(worker.ref.engine.module.parameters(),
                                          worker.actor.engine.module.parameters()):
                    ref_p.copy_(actor_p)
        return out

    _hook(stack, "worker.after_update_actor", move_ref)


FAULTS: dict[str, Fault] = {f.name: f for f in [
    Fault("stale_rollout_weights", "weight sync",
          "the weight sync after step 1 is skipped: step 2 samples with the version-0 weights while the actor is at 1",
          "actor_rollout_ref.rollout.checkpoint_engine.debug_skip_sync_steps (minirl.checkpoint_engine.manager)",
          ("actor_rollout_ref.rollout.checkpoint_engine.debug_skip_sync_steps=[1]",)),
    Fault("reward_parser_never_matches", "reward",
          "the answer parser looks for \\boxed{...} while the model writes '#### 46': every response scores 0",
          "hook reward.gsm8k.strict_pattern (minirl.utils.reward_score.gsm8k)", (), _reward_parser),
    Fault("all_equal_groups", "advantage",
          "every response of a prompt gets the same reward (its group's best): GRPO's advantages are 0 everywhere",
          "hook trainer.before_advantage (rm_scores made equal within each uid group)", (), _all_equal_groups),
    Fault("mask_counts_padding", "loss",
          "the loss mask handed to the actor update is all ones: padding tokens are counted in the policy loss",
          "hook trainer.worker_input (update_actor's response_mask)", (), _mask_counts_padding),
    Fault("micro_batch_exceeds_rank_share", "scheduling",
          "ppo_micro_batch_size_per_gpu is larger than a rank's mini-batch: the legacy loss / (mini // micro) "
          "divides by 0 (verl issue #2505)",
          "hooks config.batch_problems, engine.prepare_micro_batches, worker.actor_loss_fn",
          ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1024",), _micro_batch_exceeds_share),
    Fault("exploding_lr", "backend",
          "the actor's learning rate is 1e4 (10^8 x the default): one optimizer step blows the weights up and the "
          "next gradient norm is NaN", "actor_rollout_ref.actor.optim.lr", ("actor_rollout_ref.actor.optim.lr=1e4",)),
    Fault("wrong_position_ids", "rollout",
          "the trajectory's position ids count the prompt's left padding: the actor scores the tokens at other "
          "positions than the rollout sampled them",
          "hook transfer_queue.model_inputs (minirl.transfer_queue.build_model_inputs)", (), _wrong_position_ids),
    Fault("reference_moves", "weight sync",
          "the reference policy is given the actor's weights after every update, so it is no longer the version-0 policy",
          "hook worker.after_update_actor (the ref engine's parameters)",
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
    from minirl.notebook import NonFiniteError, small_run

    for item in overrides:  # the defaults run everything in this process; only an override can move it out
        key, _, value = str(item).lstrip("+").partition("=")
        if key in _IN_PROCESS and value.strip() not in _IN_PROCESS[key]:
            raise ValueError(f"fault_run: {item!r} puts workers in other processes, but faults hook this process; "
                             "run with one rank in-process (trainer.worker_group=inprocess, n_gpus_per_node=1, "
                             "rollout.nnodes=0, rollout.agent.placement=inprocess)")
    sizes = {**FAULT_RUN_SETTINGS, **settings}
    workdir = workdir or tempfile.mkdtemp(prefix=f"minirl-fault-{fault or 'clean'}-")
    with inject(fault) if fault else contextlib.nullcontext(None) as f:
        ovr = list(BASE_OVERRIDES) + list(IN_PROCESS_OVERRIDES) + list(f.overrides if f else ()) + list(overrides)
        t0, error, run = time.perf_counter(), None, None
        try:
            run = small_run(ovr, workdir=workdir, keep_batches=keep_batches, **sizes)
        except NonFiniteError as e:
            error = f"{type(e).__name__}: {e}"
    return FaultRun(fault=fault, run_dir=workdir, error=error, wall_s=time.perf_counter() - t0, run=run)
