"""Why one version of staleness without a correction biases GRPO: the trained batches of separate_async, read.

    python benchmarks/staleness_bias.py [--steps 30] [--out FILE.json]

One `separate_async` run with the `minirl train` defaults and the benchmark's settings
(`benchmarks/async_modes.py`: the warm start, 32 prompts x n=8, `parameter_sync_step=1`), with token-level
rollout IS on and its threshold so high that no weight is truncated, so every trained batch carries
$w_{i,t}=\\pi_{\\text{old}}/\\pi_{\\text{roll}}$ for every response token. For each step it prints what the
weights do to that batch's policy gradient, token by token ($x=\\log\\pi_{\\text{old}}-\\log\\pi_{\\text{roll}}$,
$A$ the GRPO advantage, $m$ the response mask):

| column | what it is | the reading |
|---|---|---|
| `corr(x, A)` | Pearson correlation of $x$ and $A$ over the response tokens | > 0: the stale sampler drew too *few* of the tokens with positive advantage (the last update had raised them) and too many of the others |
| `w | A>0`, `w | A<0` | mean weight of the tokens with positive / negative advantage | what the correction scales each side by |
| `sum A`, `sum wA` | $\\sum m A$ as sampled, $\\sum m\\,w A$ reweighted to $\\pi_{\\text{old}}$ | the net push of the batch's token-mean loss: < 0 pushes the sampled tokens down overall |
| `|x|>0.05` | share of tokens whose two log-probs differ by more than 0.05 | how much of the batch the lag touches |

Without the correction (verl's default `algorithm.rollout_correction.rollout_is=null`) the loss uses `sum A`'s weighting: the bias has a
sign, the same sign step after step, so it accumulates. `benchmarks/README.md` (async_modes) has the
learning curves with and without the correction; this script shows the sign. Numbers mean something only on
a run of the benchmark's settings; `--steps 3` verifies the script.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

R = "actor_rollout_ref.rollout"
OVERRIDES = ["trainer.v1.trainer_mode=separate_async", f"{R}.nnodes=1", f"{R}.n_gpus_per_node=1",
             f"{R}.checkpoint_engine.backend=nccl", "trainer.v1.separate_async.parameter_sync_step=1",
             "algorithm.rollout_correction.rollout_is=token",
             "algorithm.rollout_correction.rollout_is_threshold=1000"]  # no truncation: the raw pi_old/pi_roll


def _f(v: float | None, places: int = 4) -> str:
    return "-" if v is None else f"{v:.{places}f}"


def batch_bias(batch) -> dict:
    """What the IS weights change in one trained batch (see the table in the module docstring)."""
    from minirl.trainer.ppo.rollout_corr_helper import lag_advantage_bias

    b = batch.batch
    out = lag_advantage_bias(b["old_log_probs"], b["rollout_log_probs"], b["advantages"], b["response_mask"])
    x = (b["old_log_probs"] - b["rollout_log_probs"])[b["response_mask"].bool()]
    return {"tokens": out["tokens"], "corr(x, A)": out["corr_x_adv"], "w | A>0": out["w_pos"],
            "w | A<0": out["w_neg"], "sum A": out["sum_adv"], "sum wA": out["sum_w_adv"],
            "|x|>0.05": float((x.abs() > 0.05).double().mean())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", default=None, help="write every step's row and the summary as JSON "
                    "(benchmarks/results/staleness_bias.json is the one chapter 10 draws)")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from minirl.notebook import small_run

    # the `minirl train` defaults: 32 prompts x 8, 12 response tokens, one mini-batch of 32 prompts per step
    run = small_run(OVERRIDES, steps=args.steps, train_batch_size=32, n=8, response_length=12,
                    ppo_mini_batch_size=32, micro_batch_size=64, model="minirl://tiny-qwen2-sft")
    rows = []
    print("step  tokens  corr(x,A)  w|A>0   w|A<0   sum A    sum wA   |x|>0.05  staleness")
    for step, batch in sorted(run.batches.items()):
        row = {"step": step, **batch_bias(batch),
               "staleness": next((h.get("training/off_policy/trajectory_staleness/mean") for h in run.trainer.history
                                  if h["step"] == step), None)}
        rows.append(row)
        print(f"{step:4d}  {row['tokens']:6d}  {_f(row['corr(x, A)']):>9s}  {_f(row['w | A>0']):6s}  "
              f"{_f(row['w | A<0']):6s}  {_f(row['sum A'], 2):>7s}  {_f(row['sum wA'], 2):>7s}  "
              f"{_f(row['|x|>0.05'], 3):>8s}  {_f(row['staleness'], 2)}", flush=True)
    stale = [r for r in rows if (r["staleness"] or 0) > 0]
    summary = {"steps": len(rows), "stale_steps": len(stale),
               "corr_positive_steps": sum(r["corr(x, A)"] > 0 for r in stale),
               "corr_mean": sum(r["corr(x, A)"] for r in stale) / max(1, len(stale)),
               "sum_A_mean": sum(r["sum A"] for r in stale) / max(1, len(stale)),
               "sum_wA_mean": sum(r["sum wA"] for r in stale) / max(1, len(stale)),
               "wA_above_A_steps": sum(r["sum wA"] > r["sum A"] for r in stale)}
    print(f"\nstale steps: {summary['stale_steps']} of {summary['steps']}; corr(x, A) > 0 in "
          f"{summary['corr_positive_steps']} (mean {summary['corr_mean']:.4f}); mean sum A {summary['sum_A_mean']:.2f}"
          f" as sampled, {summary['sum_wA_mean']:.2f} reweighted (larger in {summary['wA_above_A_steps']} steps)")
    if args.out:
        import subprocess
        import time

        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                                check=False).stdout.strip() or "?"
        Path(args.out).write_text(json.dumps({
            "command": " ".join(["python", "benchmarks/staleness_bias.py", *(argv if argv is not None else sys.argv[1:])]),
            "date": time.strftime("%Y-%m-%d"), "commit": commit, "overrides": OVERRIDES, "rows": rows,
            "summary": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
