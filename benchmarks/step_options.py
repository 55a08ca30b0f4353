"""What each speed option of the sync step saves: the same run with the options switched off one by one.

    python benchmarks/step_options.py [--rounds 2] [--steps 6]

Settings of benchmarks/side_by_side.py (the SFT warm start, 32 prompts x n=8, 12 new tokens, 1 thread).
Each variant is its own process; rounds are interleaved; the first step of each run is not counted.
Besides the stage times (wall) it reports the process's CPU time per step, which a shared machine
inflates much less than wall time (one torch thread: on an idle machine the two agree).
It prints the median `timing_s/<stage>` per variant and the first steps' scores and pg_loss, which must
be equal across variants (same seeds: the options change the speed, not the numbers). The options:

- `enable_prefix_caching` (`actor_rollout_ref.rollout`): the hf rollout prefills each distinct prompt once;
- `use_prefix_grouper` (`actor_rollout_ref.actor`): the actor's forwards run each distinct prompt once;
- `bypass_mode` (`algorithm.rollout_correction`): no old-log-prob forward (verl's bypass; changes the numbers
  slightly: the PPO anchor is the rollout's log-prob).

The engine's trimming of the prompts' common left padding and its LM head on the scored positions only
(`minirl.workers.engine.forward_layout`) have no switch; their effect was measured against the code
before them (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time

VARIANTS = {
    "no prefix sharing": ["actor_rollout_ref.rollout.enable_prefix_caching=false",
                          "actor_rollout_ref.actor.use_prefix_grouper=false"],
    "+ rollout prefix caching": ["actor_rollout_ref.actor.use_prefix_grouper=false"],
    "+ use_prefix_grouper (defaults)": [],
    "+ bypass_mode": ["algorithm.rollout_correction.bypass_mode=true"],
}
STAGES = ["step", "gen", "old_log_prob", "update_actor"]


def worker(steps: int, overrides: list[str]) -> None:
    import tempfile

    import torch

    torch.set_num_threads(1)
    from minirl.config import load
    from minirl.trainer.main_ppo import TaskRunnerV1

    cfg = load(["data.train_batch_size=32", "actor_rollout_ref.rollout.n=8", "data.max_response_length=12",
                f"trainer.total_training_steps={steps + 1}", "trainer.val_before_train=false", "trainer.test_freq=-1",
                "trainer.save_freq=-1", "trainer.logger=[]", "trainer.resume_mode=disable",
                f"trainer.default_local_dir={tempfile.mkdtemp(prefix='minirl-options-')}", *overrides])
    trainer = TaskRunnerV1().build(cfg)
    cpu = []  # process CPU time at the end of each step: robust to waiting for a core on a shared machine
    trainer.add_step_callback(lambda *a: cpu.append(time.process_time()))
    try:
        trainer.fit()
    finally:
        trainer.close()
    rows = trainer.history[1:]
    print("RESULT " + json.dumps({
        "timing": {k: [r[f"timing_s/{k}"] for r in rows if f"timing_s/{k}" in r] for k in STAGES},
        "cpu_step": [b - a for a, b in itertools.pairwise(cpu)],
        "score": [round(r["critic/score/mean"], 4) for r in trainer.history],
        "pg_loss": [round(r["actor/pg_loss"], 5) for r in trainer.history]}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.steps, args.overrides)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MINIRL_NO_PROGRESS": "1", "HF_HUB_OFFLINE": "1"}
    results = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name, overrides in VARIANTS.items():
            proc = subprocess.run([sys.executable, __file__, "--worker", "--steps", str(args.steps), *overrides],
                                  check=False, env=env, capture_output=True, text=True)
            line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if proc.returncode or not line:
                raise SystemExit(f"{name}: failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            results[name].append(json.loads(line[-1][len("RESULT "):]))
    print(f"load average {os.getloadavg()[0]:.2f} at the end; medians over {args.rounds} x {args.steps} steps (s)\n")
    print("| variant | " + " | ".join(STAGES) + " | CPU s/step | scores (first run) | pg_loss (first run) |")
    print("|---|" + "---:|" * (len(STAGES) + 1) + "---|---|")
    for name, runs in results.items():
        med = [statistics.median(v for run in runs for v in run["timing"][k]) if runs[0]["timing"][k] else 0.0
               for k in STAGES]
        cpu = statistics.median(v for run in runs for v in run["cpu_step"])
        print(f"| {name} | " + " | ".join(f"{m:.3f}" for m in med) +
              f" | {cpu:.3f} | {runs[0]['score'][:4]} | {runs[0]['pg_loss'][:4]} |")


if __name__ == "__main__":
    main()
