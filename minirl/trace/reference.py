"""Reference traces in `traces/`: record them, run them again, compare (the regression oracle).

No verl counterpart. `traces/manifest.json` names each reference trace with the overrides that
record it and what it `requires` (`ray`, `vllm`, `cuda`); `traces/<name>/trace.jsonl` is the
recording. tests/test_trace_regression.py re-runs every recorded entry with the same config (same
seeds, one torch thread) and asserts `compare_traces(reference, fresh) == []`. When a change to the
loop is *meant* to change a trace, re-record and commit the new files:

    bash scripts/record_traces.sh            # every entry whose requirements are met and that is not pending
    bash scripts/record_traces.sh grpo       # one entry (also a pending one)
    python -m minirl.trace.reference list    # what the manifest holds and whether each is recorded

The runs happen in this process (`TaskRunner().run`), exactly as `minirl train <overrides>` would
run them with `OMP_NUM_THREADS=1`; `traces/README.md` is regenerated with that command per trace.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

from minirl.trace.schema import TRACE_FILE, default_traces_root, read_trace

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
    return (Path(root) if root else default_traces_root()) / name / TRACE_FILE


def overrides(entry: dict, root=None) -> list[str]:
    """The entry's overrides with `{traces}` replaced by the traces folder."""
    root = str(Path(root) if root else default_traces_root())
    return [o.replace("{traces}", root) for o in entry["overrides"]]


def command_line(entry: dict) -> str:
    """The `minirl train` command (from the repository root) that records the same trace (run dir `<dir>`)."""
    ovr = [o.replace("{traces}", "traces") for o in entry["overrides"]]
    return "OMP_NUM_THREADS=1 minirl train " + " ".join(ovr) + " trainer.default_local_dir=<dir>"


def run_entry(entry: dict, run_dir, root=None) -> list[dict]:
    """Run the entry's config in this process with its trace written under `run_dir/trace`; returns the events."""
    import torch

    from minirl.config import load
    from minirl.trainer.main_ppo import (
        TaskRunner,  # the trace package observes; only this runner drives a run
    )

    torch.set_num_threads(1)
    cfg = load(overrides(entry, root) + [f"trainer.default_local_dir={run_dir}", f"trace.dir={run_dir}/trace"])
    TaskRunner().run(cfg)
    return read_trace(Path(run_dir) / "trace")


def _mask_paths(x):
    if isinstance(x, dict):
        return {k: _mask_paths(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_mask_paths(v) for v in x]
    return "<path>" if isinstance(x, str) and (os.path.isabs(x) or x.startswith("~")) else x


def record(name: str, root=None) -> Path:
    """Run manifest entry `name` and store its trace as `traces/<name>/trace.jsonl` (machine paths masked)."""
    root = Path(root) if root else default_traces_root()
    entry = load_manifest(root)["traces"][name]
    miss = missing_requirements(entry)
    if miss:
        raise RuntimeError(f"cannot record {name!r}: this machine lacks {', '.join(miss)}")
    with tempfile.TemporaryDirectory(prefix=f"minirl-trace-{name}-") as tmp:
        events = run_entry(entry, Path(tmp) / "run", root)
    out = reference_path(name, root)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        for ev in events:
            if ev.get("kind") == "run_start":
                ev = {**ev, "config": _mask_paths(ev.get("config"))}
            f.write(json.dumps(ev, separators=(",", ":")) + "\n")
    write_readme(root)
    return out


def write_readme(root=None) -> Path:
    """Regenerate `traces/README.md`: one line per trace with the command that records it."""
    root = Path(root) if root else default_traces_root()
    man = load_manifest(root)
    lines = ["# Reference traces", "",
             "Recorded runs that CI re-runs and compares (tests/test_trace_regression.py): same stages in the same",
             "order, same fields with the same shapes, dtypes, devices and weight versions; summaries and metrics",
             (f"within rtol={man.get('tolerance', {}).get('rtol')} / atol={man.get('tolerance', {}).get('atol')}. "
              "Look at one with `minirl trace show grpo`, `minirl trace lineage grpo advantages`,"),
             "`minirl trace diff grpo ppo_gae`.", "",
             "Re-record after an intended change: `bash scripts/record_traces.sh [NAME ...]`, then commit `traces/`.", ""]
    for name, entry in man["traces"].items():
        p = reference_path(name, root)
        state = f"{p.stat().st_size // 1024} KB" if p.exists() else "not recorded yet"
        if entry.get("pending"):
            state += f"; pending: {entry['pending']}"
        req = f"; requires {', '.join(entry['requires'])}" if entry.get("requires") else ""
        lines.append(f"- `{name}/` ({state}{req}): {entry['description']}. Recorded by "
                     f"`scripts/record_traces.sh {name}`, i.e. `{command_line(entry)}`.")
    (root / "README.md").write_text("\n".join(lines) + "\n")
    return root / "README.md"


def main(argv=None) -> int:
    """`python -m minirl.trace.reference record [NAME ...] | list`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd, names = (argv[0] if argv else "list"), argv[1:]
    man = load_manifest()
    if cmd == "list":
        for name, entry in man["traces"].items():
            miss = missing_requirements(entry)
            print(f"{name:12} {'recorded' if reference_path(name).exists() else 'missing ':8}  "
                  f"{'pending: ' + entry['pending'] if entry.get('pending') else ''}"
                  f"{'  lacks ' + ', '.join(miss) if miss else ''}")
        return 0
    if cmd != "record":
        print(f"unknown command {cmd!r}: use `record [NAME ...]` or `list`", file=sys.stderr)
        return 2
    unknown = [n for n in names if n not in man["traces"]]
    if unknown:
        print(f"no trace named {', '.join(unknown)} in traces/{MANIFEST}; names: {', '.join(man['traces'])}",
              file=sys.stderr)
        return 2
    todo = names or [n for n, e in man["traces"].items() if not e.get("pending") and not missing_requirements(e)]
    for name in todo:
        out = record(name)
        print(f"recorded {name}: {out} ({out.stat().st_size // 1024} KB)")
    skipped = [n for n in man["traces"] if n not in todo]
    if skipped and not names:
        print(f"skipped (pending or requirements missing): {', '.join(skipped)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
