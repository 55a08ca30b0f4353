"""The names other rooms register (estimators, policy losses, reward managers, tasks, distillation losses), read without importing them.

`minirl.config.load` checks `algorithm.adv_estimator`, `actor_rollout_ref.actor.policy_loss.loss_mode`,
`reward.reward_manager.name`, `distillation.distillation_loss.loss_mode` and the SFT task against what
the stages register. Config is a leaf (it imports no stage, and no torch), so this module reads the
built-in names from the registering module's source (the decorator calls `@register_adv_est(...)`,
`@register_policy_loss("...")`, `@register("...")`,
`@register_distillation_loss(DistillationLossSettings(names=[...]))` and the `TASKS` dict) and adds the names registered at run time when that module is
already imported (a lab's own policy loss, registered before the run, is accepted).
`tests/unit/test_config.py` checks that the source reading finds exactly what the imported registries hold.

verl checks these names only when the trainer looks them up (`get_adv_estimator_fn`,
`verl/trainer/ppo/core_algos.py:137`); minirl checks them at load time, with every other problem.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

__all__ = ["REGISTRIES", "registered_checkpoint_engines", "registered_names"]

_PACKAGE = Path(__file__).resolve().parents[1]

REGISTRIES: dict[str, tuple[str, str, str, str]] = {
    # kind: (source file under minirl/, module, the decorator that registers (or "" for a dict literal), registry)
    "adv_estimator": ("trainer/ppo/core_algos.py", "minirl.trainer.ppo.core_algos", "register_adv_est",
                      "ADV_ESTIMATOR_REGISTRY"),
    "policy_loss": ("trainer/ppo/core_algos.py", "minirl.trainer.ppo.core_algos", "register_policy_loss",
                    "POLICY_LOSS_REGISTRY"),
    "reward_manager": ("workers/reward/managers.py", "minirl.workers.reward.managers", "register",
                       "REWARD_MANAGER_REGISTRY"),
    "task": ("data/tasks.py", "minirl.data.tasks", "", "TASKS"),
    "distillation_loss": ("trainer/distillation/losses.py", "minirl.trainer.distillation.losses",
                          "register_distillation_loss", "DISTILLATION_LOSS_REGISTRY"),
}
"""What each kind of name is registered by: the file read, the module whose registry is added when imported."""


def _enum_values(tree: ast.Module) -> dict[str, dict[str, str]]:
    """`class X(str, Enum): A = "a"` -> {"X": {"A": "a"}} (for `@register_adv_est(AdvantageEstimator.GAE)`)."""
    out: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            values = {t.id: s.value.value for s in node.body if isinstance(s, ast.Assign)
                      for t in s.targets if isinstance(t, ast.Name) and isinstance(s.value, ast.Constant)}
            if values:
                out[node.name] = values
    return out


@cache
def _source_names(path: str, decorator: str, registry: str) -> frozenset[str]:
    tree = ast.parse((_PACKAGE / path).read_text())
    names: set[str] = set()
    if not decorator:  # a dict literal: REGISTRY = {"name": ..., ...}
        for node in tree.body:
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) else None)
            if isinstance(target, ast.Name) and target.id == registry and isinstance(node.value, ast.Dict):
                names |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        return frozenset(names)
    enums = _enum_values(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == decorator and node.args):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Call):  # a settings object: DistillationLossSettings(names=[...] or "...")
            arg = next((kw.value for kw in arg.keywords if kw.arg == "names"), arg.args[0] if arg.args else None)
            if isinstance(arg, (ast.List, ast.Tuple)):
                names |= {e.value for e in arg.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                continue
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            names.add(arg.value)
        elif isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name):
            value = enums.get(arg.value.id, {}).get(arg.attr)
            if value is not None:
                names.add(value)
    return frozenset(names)


def registered_names(kind: str) -> list[str]:
    """The sorted names of `kind` (a key of `REGISTRIES`): the source's, plus the live registry's if imported."""
    path, module, decorator, registry = REGISTRIES[kind]
    names = set(_source_names(path, decorator, registry))
    live = getattr(sys.modules.get(module), registry, None) or {}
    names |= {str(getattr(k, "value", k)) for k in live}
    return sorted(names)


def registered_checkpoint_engines() -> dict[str, str]:
    """Checkpoint-engine backends registered in this process -> the backend their rollout servers receive as.

    Read from `minirl.checkpoint_engine.base.CheckpointEngineRegistry` only when that module is already
    imported (a backend registered with `@CheckpointEngineRegistry.register` has imported it), so config
    stays a leaf. A class's `receiver_backend` (None: its own name) is what the servers build by name in
    their processes: a backend a notebook registers that sends with its own packing and receives as `nccl`
    maps to `nccl` (lab 06).
    """
    base = sys.modules.get("minirl.checkpoint_engine.base")
    registry = getattr(getattr(base, "CheckpointEngineRegistry", None), "_registry", None) or {}
    return {name: str(getattr(cls, "receiver_backend", None) or name) for name, cls in registry.items()}
