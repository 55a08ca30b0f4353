"""In-controller rollout vs rollout server processes, on the default GRPO run: tokens/s, step time, start-up.

    python benchmarks/rollout_servers.py [--steps 6] [--replicas 1 2] [--repeats 1]

Trains the default config (GRPO on the embedded arithmetic task: 32 prompts x n=8, 12 new tokens,
the embedded 0.4M-parameter model) for `--steps` steps, validation off, once with the rollout in the
controller process (`actor_rollout_ref.rollout.nnodes=0`, the `naive` sync) and once per
`--replicas` count with that many rollout server processes (`rollout.nnodes=1`,
`rollout.n_gpus_per_node=k`, `checkpoint_engine.backend=nccl`), and reports, as the median over the
steps after the first:

- generation tokens/s: response tokens of the step / the `rollout` span's `generate_sequences_s`;
- `timing_s/step`, `timing_s/gen` (rollout + sample), `timing_s/update_weights` (the sync);
- start-up: `TaskRunnerV1().build(config)` (datasets, actor, rollout or server processes, first sync).

The placements are interleaved over `--repeats` rounds so that a busy machine slows them alike. At
this model size per-request overheads dominate; the numbers say which placement a laptop should
default to, not how real models scale.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MINIRL_NO_PROGRESS", "1")

R = "actor_rollout_ref.rollout"


def placement_overrides(replicas: int) -> list[str]:
    """0: the in-controller rollout; k >= 1: k rollout server processes synced by the streaming engine."""
    if replicas == 0:
        return []
    return [f"{R}.nnodes=1", f"{R}.n_gpus_per_node={replicas}", f"{R}.checkpoint_engine.backend=nccl"]


def run_once(replicas: int, steps: int) -> dict:
    import torch

    from minirl.config import load
    from minirl.trace import read_trace
    from minirl.trace.query import stage_events
    from minirl.trainer.main_ppo import TaskRunnerV1

    torch.set_num_threads(1)
    workdir = tempfile.mkdtemp(prefix="minirl-bench-servers-")
    cfg = load([f"trainer.total_training_steps={steps}", "trainer.val_before_train=false", "trainer.test_freq=-1",
                "trainer.logger=[]", f"trainer.default_local_dir={workdir}", "trainer.resume_mode=disable",
                *placement_overrides(replicas)])
    t0 = time.perf_counter()
    trainer = TaskRunnerV1().build(cfg)
    build_s = time.perf_counter() - t0
    try:
        trainer.fit()
    finally:
        trainer.close()
    sequences = int(cfg.data.train_batch_size) * int(cfg.actor_rollout_ref.rollout.n)
    gen = {e["step"]: e["extra"]["generate_sequences_s"] for e in stage_events(read_trace(cfg.trace.dir))
           if e["stage"] == "rollout"}
    rows = [r for r in trainer.history if r["step"] >= 2]  # step 1 pays one-time costs (first batches, caches)
    return {"replicas": replicas, "build_s": build_s,
            "tokens_per_s": statistics.median(r["response_length/mean"] * sequences / gen[r["step"]] for r in rows),
            "step_s": statistics.median(r["timing_s/step"] for r in rows),
            "gen_s": statistics.median(r["timing_s/gen"] for r in rows),
            "sync_s": statistics.median(r["timing_s/update_weights"] for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2], help="server counts to compare with 0")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    placements = [0, *args.replicas]
    results: dict[int, list[dict]] = {k: [] for k in placements}
    for _ in range(args.repeats):
        for k in placements:
            results[k].append(run_once(k, args.steps))
    print(f"default GRPO run, {args.steps} steps, medians over steps 2..{args.steps}, {args.repeats} round(s); "
          f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'placement':<24} {'gen tokens/s':>12} {'step s':>8} {'gen s':>8} {'sync s':>8} {'start-up s':>11}")
    for k in placements:
        rs = results[k]
        name = "in-controller (naive)" if k == 0 else f"{k} server process{'es' if k > 1 else ''} (nccl)"
        med = {key: statistics.median(r[key] for r in rs) for key in ("tokens_per_s", "step_s", "gen_s", "sync_s",
                                                                       "build_s")}
        print(f"{name:<24} {med['tokens_per_s']:>12.0f} {med['step_s']:>8.3f} {med['gen_s']:>8.3f} "
              f"{med['sync_s']:>8.3f} {med['build_s']:>11.1f}")


if __name__ == "__main__":
    main()
