"""Record the reference traces of `traces/`: run a manifest entry, store its trace, regenerate the README.

No verl counterpart. The trace package (`minirl.trace.reference`) reads the manifest and the
recordings but never runs the trainer it measures; recording is a training run, so it lives here,
next to the entry point it uses. Each entry of `traces/manifest.json` runs in this process through
`TaskRunnerV1().run(cfg)`, exactly as `minirl train <overrides>` would run it with
`OMP_NUM_THREADS=1`, and its trace is written to `traces/<name>/trace.jsonl` with machine paths
masked. When a change to the loop is *meant* to change a trace, re-record and commit `traces/`:

    bash scripts/record_traces.sh                        # every entry not pending whose requirements are met
    bash scripts/record_traces.sh grpo                   # one entry (also a pending one)
    python -m minirl.trainer.record_traces list          # what the manifest holds and whether each is recorded

tests/e2e/test_trace_regression.py calls `run_entry` to run each recorded entry again and compares.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from minirl.trace.reference import (
    MANIFEST,
    command_line,
    load_manifest,
    missing_requirements,
    overrides,
    reference_path,
)
from minirl.trace.schema import default_traces_root, read_trace

__all__ = ["main", "record", "run_entry", "write_readme"]


def run_entry(entry: dict, run_dir, root=None) -> list[dict]:
    """Run the entry's config in this process with its trace written under `run_dir/trace`; returns the events."""
    import torch

    from minirl.config import load
    from minirl.trainer.main_ppo import TaskRunnerV1

    torch.set_num_threads(1)
    cfg = load(overrides(entry, root) + [f"trainer.default_local_dir={run_dir}", f"trace.dir={run_dir}/trace"])
    TaskRunnerV1().run(cfg)
    return read_trace(Path(run_dir) / "trace")


def _mask_paths(x):
    """Absolute and home paths in a config -> `<path>`, so a recording holds nothing of this machine."""
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
             "Recorded runs that CI re-runs and compares (tests/e2e/test_trace_regression.py): same stages in the same",
             "order, same fields with the same shapes, dtypes, devices and weight versions; summaries and metrics",
             (f"within rtol={man.get('tolerance', {}).get('rtol')} / atol={man.get('tolerance', {}).get('atol')}. "
              "Look at one with `minirl trace show grpo`, `minirl trace lineage grpo advantages`,"),
             "`minirl trace diff grpo ppo_gae`.", "",
             "Each recording holds the controller's events and, merged in by time, every worker rank's `worker`",
             "events (what the rank received, its micro-batches, parameter shards and collectives; written by the",
             "rank itself to `trace.rank<r>.jsonl`, see minirl/trace/worker_trace.py). `minirl trace show NAME --ranks`",
             "prints them; the regression test compares them rank by rank.", "",
             "The stages of one sync step are verl V1's: `rollout` (the agent loop writes every session's trajectory",
             "into the TransferQueue, scored by the reward loop as the session finishes), `sample` (the ReplayBuffer",
             "picks finished groups; the padded batch is read out), `balance_batch`, `old_log_prob`, [`ref`], [`values`],",
             "`advantage`, [`update_critic`], `update_actor`, `update_weights`. A `reward` stage appears only for a",
             "reward model scored after sampling (verl: `_compute_reward_colocate`). Every step's metrics include the",
             "staleness (`training/off_policy/*`, 0 in sync mode) and the rollout/actor log-prob gap (`rollout_corr/*`).",
             "",
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
    """`python -m minirl.trainer.record_traces record [NAME ...] | list`."""
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
