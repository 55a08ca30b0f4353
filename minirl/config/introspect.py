"""Looking into a config: its dotted keys, what changed from the defaults, and which code read each key.

No verl counterpart: verl's config is read by its code, and nothing records the reading. Chapter 02
uses these to show how `key=value` overrides become the runtime config, and where each key lands:

    from minirl.config import load
    from minirl.config.introspect import config_changes, config_readers, record_config_reads

    config_changes(load([]), load(ovr), ovr)    # keys that differ from the defaults: override or interpolation
    with record_config_reads() as reads:        # {dotted key: {file that read it, ...}}
        ...                                     # build and fit a trainer
    config_readers(reads, "actor_rollout_ref.actor.optim.lr")   # {"actor / critic worker": [files]}
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

from minirl.utils.py_functional import flatten_dict

__all__ = ["add_config_reads", "component_of", "config_changes", "config_readers", "flatten_config",
           "record_config_reads", "recording_config_reads"]

_ACTIVE: list[dict] = []
"""The `reads` dicts of the `record_config_reads` blocks now open in this process."""

_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the `minirl` package

# Which part of the system a minirl source file belongs to (first matching prefix wins).
_COMPONENTS = [
    ("minirl/trainer/ppo/", "trainer (controller)"),
    ("minirl/trainer/main_ppo.py", "trainer (controller)"),
    ("minirl/trainer/ppo/core_algos.py", "trainer (controller)"),
    ("minirl/single_controller/", "trainer (controller)"),
    ("minirl/workers/engine_workers.py", "actor / critic worker"),
    ("minirl/workers/engine/", "actor / critic worker"),
    ("minirl/workers/utils/", "actor / critic worker"),
    ("minirl/config/", "config validation"),
    ("minirl/workers/rollout/", "rollout server"),
    ("minirl/agent_loop/", "agent loop (rollout client)"),
    ("minirl/workers/reward/", "reward manager"),
    ("minirl/data/", "dataset"),
    ("minirl/models/", "model loading"),
    ("minirl/checkpoint_engine/", "weight sync"),
    ("minirl/trace/", "tracer"),
]
# Frames skipped when looking for the reader of a key: OmegaConf itself, this file, and the one
# config getter (`minirl.utils.config.cfg_get`), whose caller is the real reader.
_PASS_THROUGH = (os.sep + "omegaconf" + os.sep, __file__, str(_ROOT / "minirl" / "utils" / "config.py"))


def flatten_config(cfg) -> dict:
    """`{dotted.key: value}` for every leaf of a (resolved) OmegaConf config or nested dict."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    return flatten_dict(cfg)


def config_changes(base, cfg, overrides: Sequence[str] = ()) -> list[dict]:
    """Keys whose value differs between two configs, and why: named in `overrides` or followed an interpolation.

    Rows are `{"key", "default", "now", "why"}`, `why` being `override` or `interpolation (${...})`.
    """
    a, b = flatten_config(base), flatten_config(cfg)
    named = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    return [{"key": k, "default": a.get(k), "now": b[k], "why": "override" if k in named else "interpolation (${...})"}
            for k in b if a.get(k) != b[k]]


def _relative(path: str) -> str | None:
    try:
        return Path(path).resolve().relative_to(_ROOT).as_posix()
    except ValueError:
        return None


def component_of(path: str) -> str:
    """The part of minirl a source file belongs to: trainer, actor worker, rollout server, reward manager ..."""
    rel = _relative(path)
    if rel is None:
        return "outside minirl"
    return next((c for prefix, c in _COMPONENTS if rel.startswith(prefix)), rel)


@contextmanager
def record_config_reads():
    """Record every config key read while the block runs, and the file that read it.

    Yields a dict `{dotted key: {file, ...}}` that fills up as the code reads `cfg.a.b`, `cfg["a"]`,
    `cfg.get("a")` or `cfg_get(cfg, "a")` on any OmegaConf `DictConfig`. It patches `DictConfig`'s three
    accessors for the duration of the block (all threads of this process), so keep the block to one
    run. Reads made in other processes are not seen, except those of agent-loop worker processes and actors,
    which record their own while this block is open and send them back with each report (`add_config_reads`);
    Ray training workers' reads (`trainer.worker_group=ray`) are not seen.
    """
    from omegaconf import DictConfig

    reads: dict[str, set] = {}
    originals = {name: DictConfig.__dict__[name] for name in ("__getattr__", "__getitem__", "get")}

    def caller() -> str:
        f = sys._getframe(2)
        while f is not None and any(p in f.f_code.co_filename for p in _PASS_THROUGH):
            f = f.f_back
        return f.f_code.co_filename if f is not None else "?"

    def wrap(name):
        orig = originals[name]

        def accessor(self, key, *args, **kwargs):
            value = orig(self, key, *args, **kwargs)
            if isinstance(key, str) and not key.startswith("_") and not isinstance(value, DictConfig):
                try:
                    full = self._get_full_key(key)
                except Exception:  # noqa: BLE001 (a key OmegaConf cannot place: keep its short name)
                    full = key
                reads.setdefault(full, set()).add(caller())
            return value

        return accessor

    for name in originals:
        setattr(DictConfig, name, wrap(name))
    _ACTIVE.append(reads)
    try:
        yield reads
    finally:
        _ACTIVE.remove(reads)
        for name, orig in originals.items():
            setattr(DictConfig, name, orig)


def recording_config_reads() -> bool:
    """Whether a `record_config_reads` block is open in this process (an agent-loop worker then records too)."""
    return bool(_ACTIVE)


def add_config_reads(reads: dict) -> None:
    """Add `{dotted key: [file, ...]}` read in another process (an agent-loop worker) to every open recording."""
    for active in _ACTIVE:
        for key, files in reads.items():
            active.setdefault(key, set()).update(files)


def config_readers(reads: dict, key: str) -> dict[str, list[str]]:
    """`{component: [minirl files]}` that read config `key` in a recorded run (`SmallRun.config_reads`)."""
    out: dict[str, list[str]] = {}
    for path in sorted(reads.get(key, ())):
        rel = _relative(path)
        if rel is not None:
            out.setdefault(component_of(path), []).append(rel)
    return out
