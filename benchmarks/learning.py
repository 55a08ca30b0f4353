"""Does minirl's GRPO learn? SFT warm start, then GRPO on 2-digit addition, on CPU.

    python benchmarks/learning.py [--grpo-steps 300] [--test-freq 10] [key=value GRPO overrides ...]

1. SFT (`minirl.trainer.sft_trainer`) until greedy held-out accuracy first reaches 0.2 (it jumps
   suddenly, so evaluate often and stop early: GRPO should start weak but non-zero).
2. GRPO (`minirl train` defaults: 32 prompts x n=8, temperature 1, lr 1e-4, 1 optimizer step per batch)
   from that checkpoint, validating (greedy, 200 held-out prompts) every `--test-freq` steps.
Prints the validation accuracy against GRPO wall time, and when it first reached 0.7.
"""

from __future__ import annotations

import argparse
import json
import os
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
    ap.add_argument("--warm-start", default=None, help="reuse an SFT checkpoint (HF dir) instead of training one")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    from minirl.config import load
    from minirl.trainer.main_ppo import TaskRunner
    from minirl.trainer.sft_trainer import run_sft

    out = args.out or tempfile.mkdtemp(prefix="minirl-learning-")
    t0 = time.time()
    if args.warm_start:
        sft = {"path": args.warm_start}
        print(f"SFT: reusing {args.warm_start}")
    else:
        sft = run_sft([f"trainer.default_local_dir={out}/sft", f"trainer.stop_at_val_score={args.sft_stop}"],
                      quiet=True)
        print(f"SFT: {sft['steps']} steps, {sft['wall_s']:.0f} s, held-out greedy accuracy {sft['val_acc']:.3f}")
    cfg = load([f"actor_rollout_ref.model.path={sft['path']}", f"trainer.total_training_steps={args.grpo_steps}",
                f"trainer.test_freq={args.test_freq}", f"trainer.default_local_dir={out}/grpo",
                "trainer.logger=[file]", "trace.level=stages", "trainer.resume_mode=disable", *args.overrides])
    t1 = time.time()
    TaskRunner().run(cfg)
    grpo_wall = time.time() - t1
    rows = [json.loads(x) for x in open(f"{out}/grpo/metrics.jsonl")]
    key = "val-core/minirl/arithmetic/acc/mean@1"
    elapsed, reached = 0.0, None
    print(f"{'step':>5} {'grpo_s':>7} {'val_acc':>8} {'train_score':>11}")
    for r in rows:
        elapsed += r.get("timing_s/step", 0.0) + r.get("timing_s/testing", 0.0)
        if key in r:
            print(f"{r['step']:>5} {elapsed:>7.0f} {r[key]:>8.3f} {r.get('critic/score/mean', float('nan')):>11.3f}")
            if reached is None and r[key] >= 0.7:
                reached = (r["step"], elapsed)
    steps = [r for r in rows if "timing_s/step" in r]
    print(f"GRPO: {len(steps)} steps, {grpo_wall:.0f} s wall ({grpo_wall / max(1, len(steps)):.2f} s/step incl. validation)")
    print("reached 0.7 at step %d after %.0f s of GRPO" % reached if reached else "did not reach 0.7")
    print(f"total wall {time.time() - t0:.0f} s; outputs in {out}")


if __name__ == "__main__":
    main()
