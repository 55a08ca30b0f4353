"""sync vs colocate_async vs separate_async on 2 CPU cores: steps per minute, accuracy against wall time, staleness.

    python benchmarks/async_modes.py [--steps 40] [--test-freq 10] [--only NAME ...] [key=value ...]

Every run starts from the same warm start (`minirl://tiny-qwen2-sft`, the default model) with the same
prompts (32 x n=8, the `minirl train` defaults) and is a fresh `minirl train` process:

| name | mode | what differs |
|---|---|---|
| `sync` | sync | rollout in the controller, then training, one after the other |
| `colocate_async` | colocate_async | one batch generated ahead; generation pauses while the trainer trains (same cores) |
| `separate_async` | separate_async | a rollout server process generates while the controller trains; 4 local updates of 8 prompts per weight sync |
| `separate_async_pss1` | separate_async | the same with `parameter_sync_step=1`: one update of 32 prompts per sync, the optimizer work of sync |
| `sep_drop_1`, `sep_drop_2`, `sep_drop_4` | separate_async | `max_off_policy_threshold` 1, 2, 4, strategy `drop` |
| `sep_wait_1`, `sep_wait_2`, `sep_wait_4` | separate_async | the same thresholds, strategy `wait` |

sync and colocate_async train on the whole batch in one optimizer step (`ppo_mini_batch_size=32`);
separate_async must split it into `parameter_sync_step=4` mini-batches of 8 (verl asserts
`train_batch_size == parameter_sync_step * ppo_mini_batch_size`), so it takes 4 optimizer steps per global
step on the same 32 prompts. verl rejects a threshold of 0 (`ReplayBufferAsync` asserts it is > 0), so the
smallest is 1 (train only on prompts fetched this step).

Per run it prints steps per minute (global steps / training wall time, validation excluded), the held-out
greedy accuracy at each validation with the wall time it was reached, the staleness it trained on
(`training/off_policy/trajectory_staleness/mean`, spans max) and what the buffer evicted
(`training/off_policy/evicted_samples`, summed), `timing_s/gen` summed (sync: the generation itself; async:
the time the trainer waited in `ReplayBufferAsync.sample` for enough trainable groups), and the load average (the machine may be shared). A JSON summary goes to
`<out>/summary.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEPARATE = ["trainer.v1.trainer_mode=separate_async", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=1",
            "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl"]
RUNS: dict[str, list[str]] = {
    "sync": [],
    "colocate_async": ["trainer.v1.trainer_mode=colocate_async"],
    "separate_async": SEPARATE,
    # one local update per sync, on the whole batch: the same optimizer work per step as sync
    "separate_async_pss1": [*SEPARATE[:1], "trainer.v1.separate_async.parameter_sync_step=1", *SEPARATE[2:]],
    **{f"sep_{strategy}_{k}": [*SEPARATE, f"trainer.v1.sampler.max_off_policy_threshold={k}",
                               f"trainer.v1.sampler.max_off_policy_strategy={strategy}"]
       for strategy in ("drop", "wait") for k in (1, 2, 4)},
}


def run_one(name: str, overrides: list[str], out: Path, steps: int, test_freq: int) -> dict:
    """One `minirl train` process; returns what its metrics.jsonl says."""
    run_dir = out / name
    cmd = [sys.executable, "-m", "minirl.cli", "train", f"trainer.total_training_steps={steps}",
           f"trainer.test_freq={test_freq}", f"trainer.default_local_dir={run_dir}", "trainer.logger=[file]",
           "trainer.resume_mode=disable", f"trace.dir={run_dir}/trace", "trace.level=stages", "trainer.save_freq=-1",
           *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MINIRL_NO_PROGRESS": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.time() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [r for r in rows if r["step"] >= 1 and "timing_s/step" in r]
    acc_key = "val-core/minirl/arithmetic/acc/mean@1"
    elapsed, val = 0.0, []
    val0 = next((r[acc_key] for r in rows if r["step"] == 0 and acc_key in r), None)
    for r in train:
        elapsed += r["timing_s/step"] - r.get("timing_s/testing", 0.0)
        if acc_key in r:
            val.append((r["step"], round(elapsed, 1), r[acc_key]))
    train_s = sum(r["timing_s/step"] - r.get("timing_s/testing", 0.0) for r in train)

    def series(key):
        return [r[key] for r in train if key in r]

    staleness = series("training/off_policy/trajectory_staleness/mean")
    spans = series("training/off_policy/trajectory_spans/max")
    return {
        "name": name, "overrides": overrides, "process_wall_s": round(wall, 1), "steps": len(train),
        "train_s": round(train_s, 1), "steps_per_min": round(60 * len(train) / train_s, 2),
        "step_s_median": round(sorted(r["timing_s/step"] for r in train)[len(train) // 2], 3),
        "wait_in_sample_s": round(sum(series("timing_s/gen")), 1),
        "val0": val0, "val": val,
        "staleness_mean": round(sum(staleness) / len(staleness), 3) if staleness else None,
        "spans_max": max(spans) if spans else None,
        "evicted_samples": sum(series("training/off_policy/evicted_samples")),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--test-freq", type=int, default=10)
    ap.add_argument("--only", nargs="*", default=None, help=f"a subset of {list(RUNS)}")
    ap.add_argument("--out", default=None)
    ap.add_argument("overrides", nargs="*", help="extra overrides for every run")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="minirl-async-"))
    names = args.only or list(RUNS)
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        raise SystemExit(f"--only: unknown run(s) {unknown}; choose from {list(RUNS)}")
    print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores); output in {out}")
    results = []
    for name in names:
        res = run_one(name, [*RUNS[name], *args.overrides], out, args.steps, args.test_freq)
        results.append(res)
        curve = " ".join(f"step {s} ({t:.0f} s): {a:.3f}" for s, t, a in res["val"])
        print(f"{name:15s} {res['steps_per_min']:6.1f} steps/min (median step {res['step_s_median']:.2f} s, "
              f"gen {res['wait_in_sample_s']:.0f} s) | staleness mean {res['staleness_mean']} "
              f"spans max {res['spans_max']} evicted {res['evicted_samples']:.0f} | acc {res['val0']} -> {curve}",
              flush=True)
    base = next((r for r in results if r["name"] == "sync"), None)
    if base:
        for r in results:
            print(f"{r['name']:15s} speed-up vs sync: {r['steps_per_min'] / base['steps_per_min']:.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    (out / "summary.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
