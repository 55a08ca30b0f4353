"""Every estimator, policy loss, the DAPO pieces and on-policy distillation, at equal wall time, on one task.

    python benchmarks/algorithms.py [--budget-s 150] [--test-freq 10] [--only grpo opd/ dapo/ ...] [--out DIR]
                                    [--figure PNG] [key=value ...]

Each variant (`minirl.notebook.variants.all_variants()`: `grpo`, `estimator/<13 other names>`,
`loss/<11 other names>`, `dapo/<pieces>`, `dapo/recipe`, `opd/<3 settings>`: 33 runs) trains from the same warm start (`minirl://tiny-qwen2-sft`,
held-out greedy accuracy ~0.2) on 2-digit addition with `minirl train`'s defaults plus its overrides,
until its *training* time (the sum of `timing_s/step`: rollout, teacher scoring, DAPO refills, updates,
everything but validation) reaches `--budget-s`; then the held-out greedy accuracy (200 prompts) is
measured once more. Validation also runs every `--test-freq` steps, for the curves.

Printed: one markdown table (the command, then per variant: steps, s/step, held-out accuracy at the
budget, the best seen, the training time at which it first reached the target, the mean actor entropy
of the last 10 steps, and the share of zero-spread groups: groups whose responses all got the same `acc`,
i.e. all-zero GRPO advantages; for DAPO's dynamic sampling, the share of the generated groups it
evicted). The target is the embedded teacher's held-out accuracy (measured first, by the same
validation), so the OPD-vs-GRPO question reads off one column. `--out` keeps `results.json` and
each run's metrics; `--figure` draws accuracy against training time for every variant run.

`--only` takes names or prefixes (`opd/`, `dapo/`, `grpo`). Do NOT run the full set on a shared machine:
it is 33 runs of `--budget-s` each (plus ~20-40 s of start-up and validation per run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MINIRL_NO_PROGRESS", "1")

VAL_KEY = "val-core/minirl/arithmetic/acc/mean@1"
TEACHER = "minirl://tiny-qwen2-teacher"


def zero_spread_share(batch) -> float:
    """Share of the batch's groups (uid) whose responses all have the same `acc` (or summed rm_score)."""
    import numpy as np

    nt = batch.non_tensor_batch
    values = np.asarray(nt["acc"], dtype=float) if "acc" in nt else batch.batch["rm_scores"].sum(-1).numpy()
    groups: dict = {}
    for uid, v in zip(nt["uid"], values):
        groups.setdefault(uid, []).append(float(v))
    return sum(len(set(v)) == 1 for v in groups.values()) / max(1, len(groups))


def run_variant(name: str, overrides: list[str], args, out: str) -> dict:
    """Train one variant until its training time reaches the budget; validate; return its numbers."""
    from minirl.config import load
    from minirl.trainer.main_ppo import TaskRunnerV1

    cfg = load(["actor_rollout_ref.model.path=minirl://tiny-qwen2-sft", "trainer.total_training_steps=100000",
                f"trainer.test_freq={args.test_freq}", f"trainer.default_local_dir={out}/{name.replace('/', '_')}",
                "trainer.logger=[file]", "trace.level=off", "trainer.resume_mode=disable", *overrides, *args.overrides])
    trainer = TaskRunnerV1().build(cfg)
    state = {"train_s": 0.0, "curve": [], "entropy": [], "spread": []}

    def on_step(step, batch, metrics):
        state["train_s"] += float(metrics.get("timing_s/step", 0.0))
        state["entropy"].append(float(metrics.get("actor/entropy", float("nan"))))
        if "training/filter_groups/generated_groups" in metrics:  # DAPO: the groups it evicted, of all generated
            state["spread"].append(metrics["training/filter_groups/evicted_samples"]
                                   / max(1, metrics["training/filter_groups/generated_groups"]))
        else:
            state["spread"].append(zero_spread_share(batch))
        if VAL_KEY in metrics:
            state["curve"].append((state["train_s"], metrics[VAL_KEY]))
        if state["train_s"] >= args.budget_s:  # end after this step (fit checks the bound before the next one)
            trainer.total_training_steps = trainer.global_steps

    trainer.add_step_callback(on_step)
    t0 = time.time()
    try:
        trainer.fit()
        final = trainer._validate()[VAL_KEY]
    finally:
        trainer.close()
    rows = [r for r in trainer.history if "timing_s/step" in r]
    if not state["curve"] or state["curve"][-1][0] != state["train_s"]:
        state["curve"].append((state["train_s"], final))
    before = [r[VAL_KEY] for r in trainer.history if VAL_KEY in r and "timing_s/step" not in r]  # val_before_train
    val0 = before[0] if before else None
    curve = ([(0.0, val0)] if val0 is not None else []) + state["curve"]
    tail = [e for e in state["entropy"][-10:] if not math.isnan(e)]
    return {"name": name, "overrides": overrides, "steps": len(rows), "train_s": state["train_s"],
            "wall_s": time.time() - t0, "s_per_step": state["train_s"] / max(1, len(rows)), "val0": val0,
            "final_acc": final, "best_acc": max(a for _, a in curve), "curve": curve,
            "entropy_last10": sum(tail) / len(tail) if tail else float("nan"),
            "zero_spread_share": sum(state["spread"]) / max(1, len(state["spread"]))}


def teacher_accuracy(out: str) -> float:
    """The embedded teacher's held-out greedy accuracy, by the same validation as the runs (val_only)."""
    from minirl.config import load
    from minirl.trainer.main_ppo import TaskRunnerV1

    cfg = load([f"actor_rollout_ref.model.path={TEACHER}", "trainer.val_only=true", "trace.level=off",
                "trainer.logger=[file]", f"trainer.default_local_dir={out}/teacher_val", "trainer.resume_mode=disable"])
    trainer = TaskRunnerV1().build(cfg)
    try:
        return float(trainer.fit()[VAL_KEY])
    finally:
        trainer.close()


def first_reach(curve, target: float):
    return next((t for t, a in curve if a >= target), None)


def table(results: list[dict], target: float, command: str, source: str = "the teacher's held-out accuracy") -> str:
    lines = [f"`{command}`", "",
             f"target = {source} {target:.3f}; times are training seconds (validation excluded)",
             "", ("| variant | steps | s/step | acc at budget | best acc | reached target at | entropy (last 10) "
                  "| zero-spread groups |"), "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        reach = first_reach(r["curve"], target)
        reached = f"{reach:.0f} s" if reach is not None else "no"
        entropy = "-" if math.isnan(r["entropy_last10"]) else f"{r['entropy_last10']:.3f}"  # bypass: no old-log-prob pass
        lines.append(f"| {r['name']} | {r['steps']} | {r['s_per_step']:.2f} | {r['final_acc']:.3f} | {r['best_acc']:.3f} "
                     f"| {reached} | {entropy} "
                     f"| {r['zero_spread_share']:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-s", type=float, default=150.0, help="training seconds per variant")
    ap.add_argument("--test-freq", type=int, default=10, help="validate every N steps (for the curves)")
    ap.add_argument("--only", nargs="*", default=None, help="variant names or prefixes (e.g. grpo opd/ dapo/)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--figure", default=None, help="PNG: accuracy against training time, every variant run")
    ap.add_argument("--no-teacher", action="store_true", help="skip measuring the teacher (target: 0.9)")
    ap.add_argument("overrides", nargs="*", help="key=value for every run")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from minirl.notebook.variants import all_variants

    variants = all_variants()
    if args.only:
        variants = {k: v for k, v in variants.items() if any(k == o or (o.endswith("/") and k.startswith(o))
                                                              for o in args.only)}
        if not variants:
            raise SystemExit(f"--only {args.only} matches no variant; names: {sorted(all_variants())}")
    out = args.out or tempfile.mkdtemp(prefix="minirl-algorithms-")
    os.makedirs(out, exist_ok=True)
    load0 = os.getloadavg()[0]
    target = 0.9 if args.no_teacher else teacher_accuracy(out)
    source = "assumed, --no-teacher" if args.no_teacher else f"the teacher {TEACHER}"
    print(f"target: {target:.3f} ({source})", flush=True)
    results = []
    for name, overrides in variants.items():
        r = run_variant(name, overrides, args, out)
        results.append(r)
        print(f"{name}: {r['steps']} steps in {r['train_s']:.0f} s training, held-out {r['val0']} -> "
              f"{r['final_acc']:.3f}", flush=True)
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump({"target": target, "budget_s": args.budget_s, "results": results}, f, indent=1)
    command = "python benchmarks/algorithms.py " + " ".join(
        [f"--budget-s {args.budget_s:g}", f"--test-freq {args.test_freq}"]
        + ([f"--only {' '.join(args.only)}"] if args.only else []) + args.overrides)
    print()
    print(table(results, target, command, "an assumed" if args.no_teacher else "the teacher's held-out accuracy"))
    print(f"\nload average {load0:.2f} before, {os.getloadavg()[0]:.2f} after; outputs in {out}")
    if args.figure:
        from minirl.notebook.algorithm_plots import plot_accuracy_by_family

        plot_accuracy_by_family(results, target, args.figure)
        print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
