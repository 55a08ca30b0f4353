"""Hook points: the few documented places where a run lets outside code change a value on its way through.

A hook is a filter, `fn(value, **context) -> value`, registered at a named point; the code at that
point calls `apply(point, value, **context)` and goes on with what the filters return (with none
registered, the value itself: one dict lookup). minirl's fault injection (`minirl.doctor.faults`)
breaks a run through these points instead of replacing private functions, so that the trainer, the
engine and the data plane stay untouched and every place a fault can act is listed here:

| point | called in | value | context |
|---|---|---|---|
| `reward.gsm8k.strict_pattern` | `minirl.utils.reward_score.gsm8k.extract_solution` | the compiled regex of the strict answer format (`#### <n>`) | |
| `trainer.before_advantage` | `PPOTrainer._compute_advantage`, before the `advantage` span | the batch (`DataProto`) | |
| `trainer.worker_input` | `PPOTrainer._worker_input`: what a worker call is sent | the selected `DataProto` | `keys`: the fields selected |
| `config.batch_problems` | `minirl.config.validate.validate`: the batch-arithmetic problems | the list of problem lines | `cfg` |
| `engine.prepare_micro_batches` | `FSDPEngine.forward_backward_batch`: how a rank's mini-batch is cut | the function `prepare_micro_batches(data, micro_batch_size)` | |
| `worker.actor_loss_fn` | `ActorRolloutRefWorker.init_model`: the actor's loss (verl: `set_loss_fn`) | `loss_fn(model_output, data) -> (loss, metrics)` | `config`: `actor_rollout_ref.actor` |
| `worker.after_update_actor` | `ActorRolloutRefWorker.update_actor`, after the optimizer steps | the returned `DataProto` | `worker`: the worker |
| `transfer_queue.model_inputs` | `minirl.transfer_queue.build_model_inputs` | `{"input_ids", "attention_mask", "position_ids"}` | `prompts`, `responses`, `prompt_lengths`, `response_lengths` |

Hooks act in the process that registers them (a Ray worker, a rollout server or an agent-loop worker
process has its own, empty, registry: a hook on the reward parser needs the agent loop in this process,
`actor_rollout_ref.rollout.agent.placement=inprocess`, which the faults set). `use(point, fn)` registers for the duration of a `with` block, which is how the faults
use them. No verl counterpart: verl has no fault injection (its trainers have `on_*` callbacks,
which minirl keeps too: `PPOTrainer.on_step_begin` ...).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["HOOK_POINTS", "apply", "register", "registered", "unregister", "use"]

HOOK_POINTS = (
    "reward.gsm8k.strict_pattern",
    "trainer.before_advantage",
    "trainer.worker_input",
    "config.batch_problems",
    "engine.prepare_micro_batches",
    "worker.actor_loss_fn",
    "worker.after_update_actor",
    "transfer_queue.model_inputs",
)
"""Every point the code calls `apply` at (the table above)."""

_HOOKS: dict[str, list[Callable]] = {}


def _check(point: str) -> None:
    if point not in HOOK_POINTS:
        raise ValueError(f"unknown hook point {point!r}; the points are: {', '.join(HOOK_POINTS)}")


def register(point: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add `fn(value, **context) -> value` at `point` (after the ones already there); returns `fn`."""
    _check(point)
    _HOOKS.setdefault(point, []).append(fn)
    return fn


def unregister(point: str, fn: Callable[..., Any]) -> None:
    """Remove `fn` from `point` (a no-op if it is not there)."""
    fns = _HOOKS.get(point, [])
    if fn in fns:
        fns.remove(fn)
    if not fns:
        _HOOKS.pop(point, None)


@contextlib.contextmanager
def use(point: str, fn: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """`register(point, fn)` until the `with` block ends."""
    register(point, fn)
    try:
        yield fn
    finally:
        unregister(point, fn)


def registered(point: str | None = None) -> dict[str, list[Callable]] | list[Callable]:
    """The filters at `point` (or, without a point, every point that has some)."""
    if point is None:
        return {p: list(fns) for p, fns in _HOOKS.items()}
    _check(point)
    return list(_HOOKS.get(point, []))


def apply(point: str, value: Any, **context: Any) -> Any:
    """`value` passed through the filters registered at `point`, in order (unchanged when there are none)."""
    for fn in _HOOKS.get(point, ()):
        value = fn(value, **context)
    return value
