"""Peak resident memory of a `minirl train` run: the default run and the 2-rank Ray run.

    python benchmarks/peak_rss.py [--steps 5] [--only default|ray2]

Each run is a `minirl train` subprocess (with the defaults plus `trainer.total_training_steps`, outputs
in a temporary folder). Every 0.2 s the RSS of its whole process tree is summed (`psutil`: the driver,
and with Ray its GCS, raylet, dashboard and worker processes); the peak of that sum is reported, with
the driver's own peak and, for Ray, the peak of the training workers alone. RSS counts shared pages
(torch's libraries) once per process, so the tree's sum overstates what the machine gives up.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

RUNS = {"default": [], "ray2": ["trainer.n_gpus_per_node=2"]}


def _tree_rss(root) -> tuple[int, int, int]:
    """(whole tree, the root process, processes whose command line names a Ray worker) in bytes."""
    import psutil

    total = root_rss = workers = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            rss = proc.memory_info().rss
            name = " ".join(proc.cmdline()[:2])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += rss
        if proc.pid == root.pid:
            root_rss = rss
        elif "ray::" in name or "default_worker.py" in name:
            workers += rss
    return total, root_rss, workers


def measure(name: str, steps: int) -> dict:
    import psutil

    out = tempfile.mkdtemp(prefix=f"minirl-rss-{name}-")
    cmd = [sys.executable, "-m", "minirl.cli", "train", f"trainer.total_training_steps={steps}",
           f"trainer.default_local_dir={out}", "trainer.resume_mode=disable", *RUNS[name]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MINIRL_NO_PROGRESS": "1", "HF_HUB_OFFLINE": "1"}
    start = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    root = psutil.Process(proc.pid)
    peak = (0, 0, 0)
    while proc.poll() is None:
        sample = _tree_rss(root)
        peak = tuple(max(a, b) for a, b in zip(peak, sample))
        time.sleep(0.2)
    err = proc.stderr.read()
    if proc.returncode != 0:
        raise SystemExit(f"{name}: minirl train failed (exit {proc.returncode}):\n{err[-3000:]}")
    mb = [p / 2**20 for p in peak]
    return {"run": name, "wall_s": time.time() - start, "tree_mb": mb[0], "driver_mb": mb[1], "workers_mb": mb[2]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--only", choices=sorted(RUNS), default=None)
    args = ap.parse_args()
    print("| run | wall s | peak RSS, process tree (MB) | driver (MB) | Ray workers (MB) |\n|---|---:|---:|---:|---:|")
    for name in [args.only] if args.only else list(RUNS):
        r = measure(name, args.steps)
        workers = f"{r['workers_mb']:.0f}" if name != "default" else "-"
        print(f"| `minirl train` {' '.join(RUNS[name]) or '(defaults)'} | {r['wall_s']:.0f} | {r['tree_mb']:.0f} | "
              f"{r['driver_mb']:.0f} | {workers} |", flush=True)


if __name__ == "__main__":
    main()
