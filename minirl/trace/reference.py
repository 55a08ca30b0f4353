"""The reference traces in `traces/`: the manifest, where each recording is, what it requires.

No verl counterpart. `traces/manifest.json` names each reference trace with the overrides that
record it and what it `requires` (`ray`, `vllm`, `cuda`); `traces/<name>/trace.jsonl` is the
recording. tests/e2e/test_trace_regression.py re-runs every recorded entry with the same config (same
seeds, one torch thread) and asserts `compare_traces(reference, fresh) == []`
(`minirl.trace.compare`).

This module only reads: recording a trace means running the trainer, and the trace package never
imports what it measures, so the runs and `traces/README.md` are made on the trainer's side, by the
`record_traces` module next to the trainer's entry point (what `bash scripts/record_traces.sh [NAME ...]`
calls).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from minirl.trace.schema import TRACE_FILE, default_traces_root

MANIFEST = "manifest.json"


def load_manifest(root=None) -> dict:
    """`traces/manifest.json`: `{"traces": {name: {"description", "overrides", "requires", "pending"?}}, ...}`."""
    root = Path(root) if root else default_traces_root()
    with open(root / MANIFEST) as f:
        return json.load(f)


def missing_requirements(entry: dict) -> list[str]:
    """The entry's requirements this machine lacks (`ray`, `vllm`: importable; `cuda`: a GPU torch can use)."""
    missing = []
    for req in entry.get("requires", []):
        if req == "cuda":
            import torch

            if not torch.cuda.is_available():
                missing.append("cuda (no GPU visible to torch)")
        elif not _installed(req):
            missing.append(f"{req} (not installed)")
    return missing


def _installed(module: str) -> bool:
    """A real package, not a namespace stand-in (a `tests/vllm/` folder makes `vllm` a namespace package)."""
    spec = importlib.util.find_spec(module)
    return spec is not None and spec.origin not in (None, "namespace")


def reference_path(name: str, root=None) -> Path:
    """`traces/<name>/trace.jsonl` (it may not exist yet: `pending` entries are not recorded by default)."""
    return (Path(root) if root else default_traces_root()) / name / TRACE_FILE


def overrides(entry: dict, root=None) -> list[str]:
    """The entry's overrides with `{traces}` replaced by the traces folder."""
    root = str(Path(root) if root else default_traces_root())
    return [o.replace("{traces}", root) for o in entry["overrides"]]


def command_line(entry: dict) -> str:
    """The `minirl train` command (from the repository root) that records the same trace (run dir `<dir>`)."""
    ovr = [o.replace("{traces}", "traces") for o in entry["overrides"]]
    return "OMP_NUM_THREADS=1 minirl train " + " ".join(ovr) + " trainer.default_local_dir=<dir>"
