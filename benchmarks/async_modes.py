"""sync vs colocate_async vs separate_async on 2 CPU cores: steps per minute, accuracy at equal wall time, and
where each process's CPU goes.

    python benchmarks/async_modes.py [--rounds 3] [--steps 30] [--test-freq 10] [--only NAME ...] [key=value ...]

Every run starts from the same warm start (`minirl://tiny-qwen2-sft`, the default model) with the same
prompts (32 x n=8, the `minirl train` defaults) and is a fresh `minirl train` process. The runs are
interleaved (`--rounds` rounds of every run), so a machine that gets busier half-way slows every mode alike.
Round r seeds the prompt order and the sampler with 42 + r (`data.seed`, `actor_rollout_ref.rollout.seed`;
`--same-seed` keeps 42): sync is deterministic, so rounds of one seed would measure one learning curve three
times, while the async modes vary with the timing of their weight syncs.

| name | mode | what differs |
|---|---|---|
| `sync` | sync | rollout (in the controller's engine thread) and training take turns |
| `colocate_async` | colocate_async | one batch generated ahead; generation pauses while the trainer trains (same cores) |
| `separate_async` | separate_async | a rollout server process generates while the controller trains; `parameter_sync_step=1`: one update of the 32 prompts per sync, the same optimizer work as sync |
| `sync_is`, `colocate_async_is`, `separate_async_is` | each mode | token-level rollout IS (`algorithm.rollout_correction.rollout_is=token`): the stale batches corrected; compared with `sync_is` |
| `sync_bypass`, `colocate_async_bypass`, `separate_async_bypass` | each mode | bypass mode (`algorithm.rollout_correction.bypass_mode=True`): old log-probs are the rollout's, no old-log-prob forward; compared with `sync_bypass` |
| `separate_async_p4` | separate_async | `separate_async` with `parameter_sync_step=4`: 4 local updates of 8 prompts per weight sync |
| `sep_drop_1`, `sep_drop_2`, `sep_drop_4`, `sep_wait_1`, ... | separate_async (p4) | `max_off_policy_threshold` 1, 2, 4 with strategy `drop` / `wait` |

In every mode the agent loop runs in a worker process of its own (`actor_rollout_ref.rollout.agent.placement`,
one worker), so three processes share the 2 cores: the controller (trainer; in sync and colocate_async also the
rollout engine, verl's hybrid replica), the agent-loop worker, and in separate_async the rollout server.

Per run it prints: steps per minute (global steps / training wall time, validation excluded); the held-out
greedy accuracy at each validation with the training wall time it was reached, and interpolated at the same
wall time for every run (the shortest run's training time: equal wall time); the staleness it trained on; the
CPU seconds per step of each process (minirl's `perf/cpu_s/<process>` metrics) and the **ceiling** a perfect
pipeline would reach with that work on 2 cores: a step cannot take less than `max(all processes' CPU / 2, the
busiest process's CPU)` seconds, so

    ceiling steps/min = 60 / max(cpu_all / 2, cpu_busiest process)

(for sync, which cannot overlap by design, the same bound on its own work says what pipelining sync's stages
would give). The load average before and after says whether the machine was shared. `<out>/summary.json`
holds every run's numbers.

Verify the script with a tiny budget (`--rounds 1 --steps 3 --test-freq 3`); the numbers mean something only
on an idle machine.
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

import numpy as np

R = "actor_rollout_ref.rollout"
SEPARATE = ["trainer.v1.trainer_mode=separate_async", f"{R}.nnodes=1", f"{R}.n_gpus_per_node=1",
            f"{R}.checkpoint_engine.backend=nccl"]
P4 = [*SEPARATE, "actor_rollout_ref.actor.ppo_mini_batch_size=8"]  # verl: train_batch_size = P * mini-batch
RUNS: dict[str, list[str]] = {
    "sync": [],
    "colocate_async": ["trainer.v1.trainer_mode=colocate_async"],
    "separate_async": [*SEPARATE, "trainer.v1.separate_async.parameter_sync_step=1"],
    "separate_async_p4": P4,
    **{f"sep_{strategy}_{k}": [*P4, f"trainer.v1.sampler.max_off_policy_threshold={k}",
                               f"trainer.v1.sampler.max_off_policy_strategy={strategy}"]
       for strategy in ("drop", "wait") for k in (1, 2, 4)},
}
# the three modes again with the stale batches corrected, the same correction for every mode (sync: a no-op on
# fresh data up to float noise; bypass also skips the old-log-prob forward): `<mode>_is`, `<mode>_bypass`
CORRECTIONS = {"is": ["algorithm.rollout_correction.rollout_is=token"],
               "bypass": ["algorithm.rollout_correction.bypass_mode=True", f"{R}.calculate_log_probs=True"]}
for _mode in ("sync", "colocate_async", "separate_async"):
    for _suffix, _extra in CORRECTIONS.items():
        RUNS[f"{_mode}_{_suffix}"] = [*RUNS[_mode], *_extra]
DEFAULT = ["sync", "colocate_async", "separate_async"]
ACC = "val-core/minirl/arithmetic/acc/mean@1"


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
    elapsed, val = 0.0, []
    val0 = next((r[ACC] for r in rows if r["step"] == 0 and ACC in r), None)
    for r in train:
        elapsed += r["timing_s/step"] - r.get("timing_s/testing", 0.0)
        if ACC in r:
            val.append((r["step"], round(elapsed, 2), r[ACC]))
    train_s = sum(r["timing_s/step"] - r.get("timing_s/testing", 0.0) for r in train)

    def series(key):
        return [r[key] for r in train if key in r]

    def mean(key):
        v = series(key)
        return round(float(np.mean(v)), 3) if v else None

    # CPU per step by process, after the first step (which pays for start-up); the ceiling on 2 cores
    later = train[1:] or train
    cpu = {k.split("/", 2)[2]: round(float(np.mean([r[k] for r in later if k in r])), 3)
           for k in sorted({k for r in later for k in r if k.startswith("perf/cpu_s/")})}
    busiest = max((v for k, v in cpu.items() if k != "all"), default=0.0)
    ideal_s = max(cpu.get("all", 0.0) / 2, busiest)
    staleness = series("training/off_policy/trajectory_staleness/mean")
    return {
        "name": name, "overrides": overrides, "process_wall_s": round(wall, 1), "steps": len(train),
        "train_s": round(train_s, 2), "steps_per_min": round(60 * len(train) / train_s, 2),
        "step_s_median": round(float(np.median([r["timing_s/step"] - r.get("timing_s/testing", 0.0) for r in train])), 3),
        "gen_s": mean("timing_s/gen"), "old_log_prob_s": mean("timing_s/old_log_prob"),
        "update_actor_s": mean("timing_s/update_actor"), "update_weights_s": mean("timing_s/update_weights"),
        "val0": val0, "val": val, "cpu_s_per_step": cpu,
        "ceiling_steps_per_min": round(60 / ideal_s, 1) if ideal_s else None,
        "staleness_mean": round(float(np.mean(staleness)), 3) if staleness else None,
        "evicted_samples": sum(series("training/off_policy/evicted_samples")),
    }


def acc_at(res: dict, t: float) -> float | None:
    """Held-out accuracy at training wall time `t`, linear between validations (validation 0 at t=0)."""
    if res["val0"] is None or not res["val"]:
        return None
    ts = [0.0] + [v[1] for v in res["val"]]
    accs = [res["val0"]] + [v[2] for v in res["val"]]
    if t > ts[-1]:
        return None
    return round(float(np.interp(t, ts, accs)), 3)


def summarize(results: list[dict]) -> list[dict]:
    """One row per run name over the rounds: medians, the speed-up against sync, accuracy at equal wall time."""
    names = list(dict.fromkeys(r["name"] for r in results))
    by = {n: [r for r in results if r["name"] == n] for n in names}
    equal_t = min(r["train_s"] for r in results)
    rows = []
    for n in names:
        rs = by[n]
        spm = [r["steps_per_min"] for r in rs]
        accs = [a for a in (acc_at(r, equal_t) for r in rs) if a is not None]
        cpu = {k: round(float(np.median([r["cpu_s_per_step"].get(k, 0.0) for r in rs])), 3)
               for k in sorted({k for r in rs for k in r["cpu_s_per_step"]})}
        rows.append({"name": n, "rounds": len(rs), "steps_per_min": [round(x, 1) for x in spm],
                     "steps_per_min_median": round(float(np.median(spm)), 1),
                     "ceiling_median": float(np.median([r["ceiling_steps_per_min"] or 0 for r in rs])),
                     "acc_at_equal_wall_time": round(float(np.mean(accs)), 3) if accs else None,
                     "acc_at_equal_wall_time_rounds": accs,
                     "acc_at_equal_wall_time_se": round(float(np.std(accs, ddof=1) / np.sqrt(len(accs))), 3)
                     if len(accs) > 1 else None,
                     "acc_final": [r["val"][-1][2] for r in rs if r["val"]],
                     "equal_wall_time_s": round(equal_t, 1), "cpu_s_per_step": cpu,
                     "staleness_mean": rs[0]["staleness_mean"]})
    by_name = {r["name"]: r for r in rows}
    for r in rows:  # against sync with the same correction (`separate_async_is` against `sync_is`), else `sync`
        suffix = next((f"_{k}" for k in CORRECTIONS if r["name"].endswith(f"_{k}")), "")
        base = by_name.get(f"sync{suffix}") or by_name.get("sync")
        r["x_sync"] = round(r["steps_per_min_median"] / base["steps_per_min_median"], 2) if base else None
        r["x_sync_of"] = base["name"] if base else None
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every run")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--test-freq", type=int, default=10)
    ap.add_argument("--only", nargs="*", default=None, help=f"a subset of {list(RUNS)} (default {DEFAULT})")
    ap.add_argument("--same-seed", action="store_true",
                    help="every round with seed 42 (default: round r uses data.seed and rollout.seed 42 + r)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--record", default=None, help="also write the runs, the summary and the command to this JSON "
                    "(benchmarks/results/async_modes.json is the one chapter 10 draws)")
    ap.add_argument("overrides", nargs="*", help="extra overrides for every run")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="minirl-async-"))
    names = args.only or DEFAULT
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        raise SystemExit(f"--only: unknown run(s) {unknown}; choose from {list(RUNS)}")
    load_before = os.getloadavg()[0]
    print(f"load average before: {load_before:.2f} ({os.cpu_count()} cores); output in {out}", flush=True)
    results = []
    for rnd in range(args.rounds):
        # a seed per round: sync is deterministic, so rounds of one seed would repeat one learning curve
        seeds = [] if args.same_seed else [f"data.seed={42 + rnd}", f"{R}.seed={42 + rnd}"]
        for name in names:
            res = run_one(name, [*RUNS[name], *seeds, *args.overrides], out / f"round{rnd}", args.steps,
                          args.test_freq)
            res["round"] = rnd
            results.append(res)
            curve = " ".join(f"step {s} ({t:.0f} s): {a:.3f}" for s, t, a in res["val"])
            print(f"round {rnd} {name:18s} {res['steps_per_min']:6.1f} steps/min (median step {res['step_s_median']:.2f} s:"
                  f" gen {res['gen_s']} old_log_prob {res['old_log_prob_s']} update_actor {res['update_actor_s']}) "
                  f"| CPU s/step {res['cpu_s_per_step']} -> ceiling {res['ceiling_steps_per_min']} steps/min "
                  f"| staleness {res['staleness_mean']} | acc {res['val0']} -> {curve} "
                  f"| load {os.getloadavg()[0]:.2f}", flush=True)
    rows = summarize(results)
    print("\nrun                 steps/min (rounds)        median  x sync  ceiling  acc@equal wall time (+-SE; rounds)"
          "  acc at the end  CPU s/step")
    for r in rows:
        print(f"{r['name']:18s}  {r['steps_per_min']!s:24s}  {r['steps_per_min_median']:6.1f}  {r['x_sync']}  "
              f"{r['ceiling_median']:7.1f}  {r['acc_at_equal_wall_time']} +- {r['acc_at_equal_wall_time_se']} "
              f"(at {r['equal_wall_time_s']} s; {r['acc_at_equal_wall_time_rounds']})  {r['acc_final']}  "
              f"{r['cpu_s_per_step']}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    (out / "summary.json").write_text(json.dumps({"runs": results, "summary": rows}, indent=1))
    if args.record:
        write_record(Path(args.record), results, rows, sys.argv[1:], load_before, os.getloadavg()[0])


def write_record(path: Path, results: list[dict], rows: list[dict], argv: list[str], load_before: float,
                 load_after: float) -> None:
    """The recorded comparison: the command, where and when it ran, every run and the summary rows."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1], check=False).stdout.strip() or "?"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "command": " ".join(["python", "benchmarks/async_modes.py", *argv]), "date": time.strftime("%Y-%m-%d"),
        "commit": commit, "machine": f"{os.cpu_count()} CPU cores, load average {load_before:.2f} before, "
                                     f"{load_after:.2f} after, one torch thread per process",
        "results": results, "summary": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
