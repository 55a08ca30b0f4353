"""`minirl demo`: the README's main job. SFT warm start (cached), then GRPO on the embedded task, on CPU.

1. SFT teaches the `#### <answer>` format until greedy validation accuracy first reaches 0.2
   (accuracy jumps suddenly during SFT; see ENVIRONMENT-FACTS "Learning on 2 CPU cores"). The result is
   cached in `$MINIRL_CACHE/warmstart/` and reused by later demos.
2. GRPO (`minirl train`) starts from it; validation accuracy is printed every `trainer.test_freq` steps,
   metrics go to `<default_local_dir>/metrics.jsonl`, the curve to `reward_curve.png`, the trace to
   `<default_local_dir>/trace/trace.jsonl`.

Arguments are overrides for the GRPO run (e.g. `trainer.total_training_steps=20`).
"""

from __future__ import annotations

import os
import sys

from minirl.models.tiny import default_cache_dir

DEMO_DEFAULTS = [
    "trainer.total_training_steps=150",
    "trainer.test_freq=25",
    "trainer.experiment_name=demo_grpo",
    "trainer.resume_mode=disable",
]


def warm_start(stop_at: float = 0.2) -> str:
    """Return the path of the cached SFT warm start, training it first if needed."""
    from minirl.trainer.sft_trainer import run_sft

    out = os.path.join(default_cache_dir(), "warmstart", f"arithmetic-stop{stop_at}")
    model_dir = os.path.join(out, "hf_model")
    if os.path.isfile(os.path.join(model_dir, "config.json")):
        print(f"[demo] using the cached SFT warm start {model_dir}")
        return model_dir
    print("[demo] SFT warm start: training until greedy validation accuracy >= "
          f"{stop_at} (about 2-4 minutes on 2 cores)")
    res = run_sft([f"trainer.default_local_dir={out}", f"trainer.stop_at_val_score={stop_at}"])
    print(f"[demo] SFT done: {res['steps']} steps, {res['wall_s']:.0f} s, val acc {res['val_acc']:.3f}")
    return res["path"]


def main(overrides=()) -> int:
    from minirl.config import ConfigError, load
    from minirl.trainer.main_ppo import TaskRunner

    overrides = list(overrides)
    try:
        load(DEMO_DEFAULTS + overrides)  # fail fast on a bad override, before SFT
    except ConfigError as e:
        print(f"minirl demo: {e}", file=sys.stderr)
        return 2
    from minirl.trainer.main_ppo import USER_ERRORS

    try:
        path = warm_start()
        cfg = load(DEMO_DEFAULTS + [f"actor_rollout_ref.model.path={path}"] + overrides)
        print(f"[demo] GRPO on the embedded arithmetic task; outputs in {cfg.trainer.default_local_dir}")
        trainer = TaskRunner().run(cfg)
    except USER_ERRORS as e:
        if os.environ.get("MINIRL_DEBUG") == "1":
            raise
        print(f"minirl demo: {e}", file=sys.stderr)
        return 2
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
