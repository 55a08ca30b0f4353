"""`minirl demo`: the README's main job. SFT warm start (cached), then GRPO on the embedded task, on CPU.

1. SFT teaches the `#### <answer>` format until greedy validation accuracy first reaches 0.2
   (accuracy jumps suddenly during SFT; see ENVIRONMENT-FACTS "Learning on 2 CPU cores"). This is the
   embedded default model `minirl://tiny-qwen2-sft` (`minirl.trainer.warm_start`): built once, cached in
   `$MINIRL_CACHE/models/tiny-qwen2-sft`, reused by every later demo and `minirl train`.
2. GRPO (`minirl train`) starts from it; validation accuracy is printed every `trainer.test_freq` steps,
   metrics go to `<default_local_dir>/metrics.jsonl`, the curve to `reward_curve.png`, the trace to
   `<default_local_dir>/trace/trace.jsonl`.

Arguments are overrides for the GRPO run (e.g. `trainer.total_training_steps=20`).
"""

from __future__ import annotations

import sys

DEMO_DEFAULTS = [
    "trainer.total_training_steps=150",
    "trainer.test_freq=25",
    "trainer.experiment_name=demo_grpo",
    "trainer.resume_mode=disable",
]


def warm_start() -> str:
    """The directory of `minirl://tiny-qwen2-sft`, the cached SFT warm start (trained first if missing)."""
    from minirl.trainer.warm_start import build_warm_start

    path = build_warm_start("tiny-qwen2-sft")
    print(f"[demo] SFT warm start: minirl://tiny-qwen2-sft ({path})")
    return path


def main(overrides=()) -> int:
    from minirl.config import ConfigError, load
    from minirl.trainer.main_ppo import TaskRunnerV1

    overrides = list(overrides)
    try:
        load(DEMO_DEFAULTS + overrides)  # fail fast on a bad override, before SFT
    except ConfigError as e:
        print(f"minirl demo: {e}", file=sys.stderr)
        return 2
    from minirl.trainer.main_ppo import run_command

    def run():
        path = warm_start()
        cfg = load(DEMO_DEFAULTS + [f"actor_rollout_ref.model.path={path}"] + overrides)
        print(f"[demo] GRPO on the embedded arithmetic task; outputs in {cfg.trainer.default_local_dir}")
        return TaskRunnerV1().run(cfg), cfg

    ran, code = run_command("minirl demo", run)
    if code is not None:
        return code
    trainer, cfg = ran
    val = [r for r in trainer.history if any(k.startswith("val-core/") and "/acc/" in k for k in r)]
    if val:
        first, last = val[0], val[-1]
        key = next(k for k in last if k.startswith("val-core/") and "/acc/" in k)
        print(f"[demo] validation {key}: {first.get(key, float('nan')):.3f} (step {first['step']}) -> "
              f"{last[key]:.3f} (step {last['step']})")
    print(f"[demo] metrics: {cfg.trainer.default_local_dir}/metrics.jsonl; curve: "
          f"{cfg.trainer.default_local_dir}/reward_curve.png; trace: {cfg.trace.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
