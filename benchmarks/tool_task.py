"""Does GRPO learn to use a tool? SFT warm start, then GRPO with the calculator on 3-digit x 2-digit products.

    python benchmarks/tool_task.py [--sft-steps 600] [--tool-fraction 0.5] [--grpo-steps 100] [--test-freq 10]
                                   [--warm-start DIR] [--out DIR] [key=value GRPO overrides ...]

The task (`minirl://multiply_tool/...`, `data.builtin.digits=3`) asks "What is 347*56?"; the reward is 1 for
`#### 19432`. The tiny model cannot multiply in its head; it can call `calc` (`rollout.multi_turn`, the tool
agent loop) and copy the answer.

1. SFT (`minirl sft`): a share `--tool-fraction` of the rows show the tool episode (call, result, answer), the
   rest answer directly. Fixed steps (the SFT's own validation is single-turn: it cannot see the tool).
2. GRPO (`minirl train` with `multi_turn.enable=True` and the calculator's tool config), validating greedily
   with the tool on 200 held-out problems every `--test-freq` steps.

Prints, per validation: held-out accuracy, the share of episodes that called the tool, tool calls per
episode, assistant turns, and the training batch's own rates at that step (sampled, temperature 1).
Writes `<out>/tool_curve.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MINIRL_NO_PROGRESS", "1")

TASK = ["data.builtin.digits=3", "data.max_prompt_length=40", "data.max_response_length=128"]
VAL = "val-core/minirl/multiply_tool/acc/mean@1"


def warm_start(out: str, steps: int, tool_fraction: float) -> dict:
    from minirl.trainer.sft_trainer import run_sft

    return run_sft([f"trainer.default_local_dir={out}/sft", "data.train_files=minirl://multiply_tool/train",
                    f"data.builtin.tool_fraction={tool_fraction}", "trainer.stop_at_val_score=null",
                    f"trainer.total_training_steps={steps}", f"trainer.test_freq={steps}", "data.val_max_samples=100",
                    *TASK], quiet=True)


def grpo_overrides(model: str, out: str, steps: int, test_freq: int) -> list[str]:
    from minirl.tools import CALCULATOR_TOOL_CONFIG

    return [f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.rollout.multi_turn.enable=True",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={CALCULATOR_TOOL_CONFIG}",
            "data.train_files=minirl://multiply_tool/train", "data.val_files=minirl://multiply_tool/val", *TASK,
            f"trainer.total_training_steps={steps}", f"trainer.test_freq={test_freq}",
            f"trainer.default_local_dir={out}/grpo", "trainer.logger=[file]", "trace.level=stages",
            "trainer.resume_mode=disable"]


def curve(rows: list[dict]) -> list[dict]:
    """One point per validation: accuracy, tool use (greedy, held out) and the training batch's rates."""
    points, elapsed, last_train = [], 0.0, {}
    for r in rows:
        elapsed += r.get("timing_s/step", 0.0) + r.get("timing_s/testing", 0.0)
        if "multi_turn/tool_call_rate" in r:
            last_train = r
        if VAL in r:
            points.append({"step": r["step"], "grpo_s": round(elapsed, 1), "val_acc": r[VAL],
                           "val_tool_call_rate": r.get("val-aux/multi_turn/tool_call_rate", 0.0),
                           "val_tool_calls": r.get("val-aux/multi_turn/tool_calls/mean", 0.0),
                           "val_assistant_turns": r.get("val-aux/multi_turn/assistant_turns/mean", 0.0),
                           "val_failures": r.get("val-aux/multi_turn/failures/total", 0.0),
                           "train_score": last_train.get("critic/score/mean"),
                           "train_tool_call_rate": last_train.get("multi_turn/tool_call_rate"),
                           "train_num_turns": last_train.get("training/num_turns/mean")})
    return points


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sft-steps", type=int, default=600)
    ap.add_argument("--tool-fraction", type=float, default=0.5)
    ap.add_argument("--grpo-steps", type=int, default=100)
    ap.add_argument("--test-freq", type=int, default=10)
    ap.add_argument("--out", default=None)
    ap.add_argument("--warm-start", default=None, help="reuse an SFT checkpoint (HF dir) instead of training one")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    from minirl.config import load
    from minirl.trainer.main_ppo import TaskRunnerV1

    out = args.out or tempfile.mkdtemp(prefix="minirl-tool-")
    t0 = time.time()
    if args.warm_start:
        model = args.warm_start
        print(f"SFT: reusing {model}")
    else:
        sft = warm_start(out, args.sft_steps, args.tool_fraction)
        model = sft["path"]
        print(f"SFT: {sft['steps']} steps, {sft['wall_s']:.0f} s, tool fraction {args.tool_fraction}, single-turn "
              f"greedy accuracy (no tool) {sft['val_acc']:.3f}")
    cfg = load(grpo_overrides(model, out, args.grpo_steps, args.test_freq) + list(args.overrides))
    t1 = time.time()
    TaskRunnerV1().run(cfg)
    grpo_wall = time.time() - t1
    with open(f"{out}/grpo/metrics.jsonl") as f:
        rows = [json.loads(x) for x in f]
    points = curve(rows)
    print(f"{'step':>4} {'grpo_s':>7} {'val_acc':>7} {'val_tool':>8} {'calls':>5} {'turns':>5} "
          f"{'train_score':>11} {'train_tool':>10}")
    for p in points:
        print(f"{p['step']:>4} {p['grpo_s']:>7.0f} {p['val_acc']:>7.3f} {p['val_tool_call_rate']:>8.3f} "
              f"{p['val_tool_calls']:>5.2f} {p['val_assistant_turns']:>5.2f} {p['train_score'] or float('nan'):>11.3f} "
              f"{p['train_tool_call_rate'] or float('nan'):>10.3f}")
    steps = [r for r in rows if "timing_s/step" in r]
    per_step = sorted(r["timing_s/step"] for r in steps)
    median = per_step[len(per_step) // 2] if per_step else float("nan")
    print(f"GRPO: {len(steps)} steps, {grpo_wall:.0f} s wall, median {median:.2f} s/step; "
          f"total {time.time() - t0:.0f} s; outputs in {out}")
    with open(os.path.join(out, "tool_curve.json"), "w") as f:
        json.dump({"model": model, "args": vars(args), "points": points, "median_step_s": median}, f, indent=1)


if __name__ == "__main__":
    main()
