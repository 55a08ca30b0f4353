"""Profile one sync GRPO step with torch.profiler: where the time goes, by stage and by operator.

    python benchmarks/profile_step.py [--warmup 2] [--rows 15] [key=value overrides ...]

The settings are the side-by-side benchmark's (benchmarks/side_by_side.py: the SFT warm start,
32 prompts x n=8, 12 new tokens, 1 thread). After `--warmup` untimed steps, one step runs under
`torch.profiler.profile` (CPU activities); it prints the step's stage times (`timing_s/<stage>`) and the
operators with the most self time, as a Markdown table for benchmarks/README.md. Overrides switch the
speed options off to see what each saves, e.g. `actor_rollout_ref.actor.use_prefix_grouper=false` or
`actor_rollout_ref.rollout.enable_prefix_caching=false`.
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MINIRL_NO_PROGRESS", "1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rows", type=int, default=15)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    from minirl.config import load
    from minirl.trainer.main_ppo import TaskRunnerV1

    cfg = load(["data.train_batch_size=32", "actor_rollout_ref.rollout.n=8", "data.max_response_length=12",
                "trainer.total_training_steps=1000", "trainer.val_before_train=false", "trainer.test_freq=-1",
                "trainer.save_freq=-1", "trainer.logger=[]", "trainer.resume_mode=disable",
                f"trainer.default_local_dir={tempfile.mkdtemp(prefix='minirl-profile-')}", *args.overrides])
    trainer = TaskRunnerV1().build(cfg)
    trainer.global_steps = 1

    def one_step() -> dict:
        metrics, trainer.timing_raw = {}, {}
        trainer.step(metrics, trainer.timing_raw)
        trainer.on_step_end()  # the weight sync
        trainer.global_steps += 1
        return trainer.timing_raw

    try:
        for _ in range(args.warmup):
            one_step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            timing = one_step()
    finally:
        trainer.close()
    print("stage times (s): " + ", ".join(f"{k} {v:.3f}" for k, v in timing.items()) +
          f"; sum {sum(timing.values()):.3f}")
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    print("\n| operator | self CPU ms | share | calls |\n|---|---:|---:|---:|")
    for e in events[: args.rows]:
        print(f"| `{e.key}` | {e.self_cpu_time_total / 1e3:.1f} | {100 * e.self_cpu_time_total / total:.1f}% | {e.count} |")
    print(f"| (all operators) | {total / 1e3:.1f} | 100% | |")


if __name__ == "__main__":
    main()
