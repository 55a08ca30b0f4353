"""What the tracer costs: the same GRPO run with `trace.level=off`, `stages` and `fields`, side by side.

    python benchmarks/trace_overhead.py                 # defaults: embedded GRPO config, 6 steps per level
    python benchmarks/trace_overhead.py --steps 10 data.train_batch_size=16

Three trainers with the same config and seeds are built in this process, one per level, and their
`fit()` loops take turns step by step (level order rotated every step), so a slow patch of a shared
machine hits all three alike. Two numbers per level:

- the median step time and its ratio to `off` (what a user feels, but noisy: a few % on a busy box);
- the tracer's own time per step (`Tracer.overhead_s`: snapshots, comparisons, summaries, JSON,
  writes) over the step time: the precise figure, which must stay under 3 % at the default level.

The script prints both and exits 1 when the default level's own-time ratio exceeds `--max-overhead`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MINIRL_NO_PROGRESS", "1")

LEVELS = ("off", "stages", "fields")


class Turns:
    """Lets one trainer thread run a training step at a time, in a rotating order."""

    def __init__(self, n: int):
        self.cond = threading.Condition()
        self.n, self.round, self.pos, self.done = n, 0, 0, set()

    def order(self) -> list[int]:
        return [(self.round + k) % self.n for k in range(self.n)]

    def wait(self, i: int):
        with self.cond:
            self.cond.wait_for(lambda: self.order()[self.pos] == i or i in self.done)

    def release(self):
        with self.cond:
            self.pos += 1
            if self.pos == self.n:
                self.pos, self.round = 0, self.round + 1
            while self.pos < self.n and self.order()[self.pos] in self.done:  # skip finished trainers
                self.pos += 1
                if self.pos == self.n:
                    self.pos, self.round = 0, self.round + 1
                if len(self.done) == self.n:
                    break
            self.cond.notify_all()

    def finish(self, i: int):
        with self.cond:
            self.done.add(i)
        self.release()


def instrument(trainer, i: int, turns: Turns, rows: list):
    """Wrap the trainer's step hooks: wait for the turn, time the step, note the tracer's own time."""
    begin, end, train_end = trainer.on_step_begin, trainer.on_step_end, trainer.on_train_end
    state = {"holding": False}

    def on_step_begin():
        if state["holding"]:
            turns.release()
        turns.wait(i)
        state["holding"] = True
        state["t0"], state["o0"] = time.perf_counter(), trainer.tracer.overhead_s
        begin()

    def on_step_end():
        end()
        rows.append({"step": trainer.global_steps, "wall": time.perf_counter() - state["t0"],
                     "own": trainer.tracer.overhead_s - state["o0"]})

    def on_train_end():
        train_end()
        turns.finish(i)

    trainer.on_step_begin, trainer.on_step_end, trainer.on_train_end = on_step_begin, on_step_end, on_train_end


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--max-overhead", type=float, default=0.03, help="fail above this own-time ratio at level fields")
    ap.add_argument("overrides", nargs="*", help="extra key=value overrides (same for every level)")
    args = ap.parse_args(argv)

    import torch

    from minirl.config import load
    from minirl.trainer.main_ppo import TaskRunnerV1

    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="minirl-trace-overhead-")
    trainers = []
    for level in LEVELS:
        cfg = load([f"trainer.total_training_steps={args.steps}", "trainer.val_before_train=false",
                    "trainer.test_freq=-1", "trainer.logger=[]", "trainer.save_freq=-1", "trainer.resume_mode=disable",
                    f"trainer.default_local_dir={tmp}/{level}", f"trace.level={level}", *args.overrides])
        trainers.append(TaskRunnerV1().build(cfg))
    turns, rows = Turns(len(trainers)), {lv: [] for lv in LEVELS}
    for i, (lv, tr) in enumerate(zip(LEVELS, trainers)):
        instrument(tr, i, turns, rows[lv])
    errors = []

    def run(tr):
        try:
            tr.fit()
        except BaseException as e:  # report, and let the other threads finish
            errors.append(e)
            raise
        finally:
            tr.close()

    threads = [threading.Thread(target=run, args=(tr,)) for tr in trainers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        print(f"a run failed: {errors[0]!r}", file=sys.stderr)
        return 2

    cfg = trainers[0].config
    print(f"trace overhead: GRPO, {args.steps} steps per level, interleaved; train_batch_size="
          f"{cfg.data.train_batch_size} x n={cfg.actor_rollout_ref.rollout.n}, "
          f"max_response_length={cfg.data.max_response_length}, torch threads {torch.get_num_threads()}")
    print("(the first step of each level is dropped: it includes warm-up)")
    base = statistics.median(r["wall"] for r in rows["off"][1:])
    print(f"{'level':8} {'median step s':>14} {'vs off':>8} {'tracer s/step':>14} {'tracer/step':>12}")
    ratio_default = 0.0
    for lv in LEVELS:
        rs = rows[lv][1:] or rows[lv]
        med = statistics.median(r["wall"] for r in rs)
        own = statistics.median(r["own"] for r in rs)
        frac = statistics.median(r["own"] / r["wall"] for r in rs)
        if lv == "fields":
            ratio_default = frac
        print(f"{lv:8} {med:14.3f} {med / base:8.3f} {own:14.4f} {100 * frac:11.2f}%")
    ok = ratio_default <= args.max_overhead
    print(f"default level (fields): the tracer takes {100 * ratio_default:.2f}% of the step time "
          f"({'under' if ok else 'OVER'} the {100 * args.max_overhead:.0f}% budget)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
