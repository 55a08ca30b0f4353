"""Does minirl's GRPO learn? SFT warm start, then GRPO on 2-digit addition, on CPU.

    python benchmarks/learning.py [--grpo-steps 300] [--test-freq 10] [--warm-start fresh|DIR] [--curve FILE] [key=value ...]

1. The SFT warm start: by default `minirl://tiny-qwen2-sft`, the cached default model (built once by
   `minirl.trainer.warm_start`: SFT until greedy held-out accuracy first reaches 0.2); `--warm-start fresh`
   trains a new one into the output folder (`minirl.trainer.sft_trainer`, stopping at `--sft-stop`).
2. GRPO (`minirl train` defaults: 32 prompts x n=8, temperature 1, lr 1e-4, 1 optimizer step per batch)
   from that checkpoint, validating (greedy, 200 held-out prompts) every `--test-freq` steps.
Prints the validation accuracy against GRPO wall time, when it first reached 0.7, the load average
before and after (the machine may be shared) and the run's peak RSS. `--curve FILE` also writes the curve
as a small JSON file (the command, the warm start, and per step: cumulative GRPO seconds, the train score,
the held-out accuracy where validated): chapter 01 draws `benchmarks/results/learning_curve.json` beside
its live run (`minirl.notebook.learning.plot_learning_curves`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MINIRL_NO_PROGRESS", "1")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grpo-steps", type=int, default=300)
    ap.add_argument("--test-freq", type=int, default=10)
    ap.add_argument("--sft-stop", type=float, default=0.2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--warm-start", default="minirl://tiny-qwen2-sft",
                    help="an SFT checkpoint (HF dir or minirl:// preset), or 'fresh' to train one")
    ap.add_argument("--curve", default=None, help="also write the curve to this JSON file (chapter 01 draws it)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    import minirl.trainer.warm_start  # noqa: F401 (registers minirl://tiny-qwen2-sft)
    from minirl.config import load
    from minirl.models import resolve_model_path
    from minirl.trainer.main_ppo import TaskRunnerV1
    from minirl.trainer.sft_trainer import run_sft

    out = args.out or tempfile.mkdtemp(prefix="minirl-learning-")
    t0 = time.time()
    load_before = os.getloadavg()
    if args.warm_start != "fresh":
        sft = {"path": resolve_model_path(args.warm_start)}
        print(f"SFT: reusing {args.warm_start} ({sft['path']})")
    else:
        sft = run_sft([f"trainer.default_local_dir={out}/sft", f"trainer.stop_at_val_score={args.sft_stop}"],
                      quiet=True)
        print(f"SFT: {sft['steps']} steps, {sft['wall_s']:.0f} s, held-out greedy accuracy {sft['val_acc']:.3f}")
    cfg = load([f"actor_rollout_ref.model.path={sft['path']}", f"trainer.total_training_steps={args.grpo_steps}",
                f"trainer.test_freq={args.test_freq}", f"trainer.default_local_dir={out}/grpo",
                "trainer.logger=[file]", "trace.level=stages", "trainer.resume_mode=disable", *args.overrides])
    t1 = time.time()
    TaskRunnerV1().run(cfg)
    grpo_wall = time.time() - t1
    with open(f"{out}/grpo/metrics.jsonl") as f:
        rows = [json.loads(x) for x in f]
    key = "val-core/minirl/arithmetic/acc/mean@1"
    elapsed, reached, curve = 0.0, None, []
    print(f"{'step':>5} {'grpo_s':>7} {'val_acc':>8} {'train_score':>11}")
    for r in rows:
        elapsed += r.get("timing_s/step", 0.0) + r.get("timing_s/testing", 0.0)
        curve.append({"step": r["step"], "grpo_s": round(elapsed, 1), "train_score": r.get("critic/score/mean"),
                      "val_acc": r.get(key)})
        if key in r:
            print(f"{r['step']:>5} {elapsed:>7.0f} {r[key]:>8.3f} {r.get('critic/score/mean', float('nan')):>11.3f}")
            if reached is None and r[key] >= 0.7:
                reached = (r["step"], elapsed)
    steps = [r for r in rows if "timing_s/step" in r]
    print(f"GRPO: {len(steps)} steps, {grpo_wall:.0f} s wall ({grpo_wall / max(1, len(steps)):.2f} s/step incl. validation)")
    print(f"reached 0.7 at step {reached[0]} after {reached[1]:.0f} s of GRPO" if reached else "did not reach 0.7")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.curve:
        with open(args.curve, "w") as f:
            json.dump({"command": "python benchmarks/learning.py " + " ".join(sys.argv[1:]), "warm_start": args.warm_start,
                       "date": time.strftime("%Y-%m-%d"), "load_average_before_after": [load_before[0], os.getloadavg()[0]],
                       "val_metric": key, "rows": curve}, f, indent=1)
        print(f"curve written to {args.curve}")
    print(f"total wall {time.time() - t0:.0f} s; load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} "
          f"after; peak RSS {rss:.0f} MB; outputs in {out}")


if __name__ == "__main__":
    main()
