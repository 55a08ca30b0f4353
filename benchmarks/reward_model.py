"""GRPO with a learned reward model vs with the rule: what does the policy learn from each?

    python benchmarks/reward_model.py [--rm DIR] [--grpo-steps 60] [--eval-every 10] [--out DIR] [key=value ...]

1. The reward model: `--rm DIR` (a directory `minirl train-rm` wrote), or a new one trained with
   `minirl train-rm`'s defaults into `<out>/rm` (the SFT warm start's own samples, labelled by the rule).
   Its held-out judge metrics (accuracy, balanced accuracy, AUC, against always answering "wrong")
   come from its `rm_report.json`.
2. Two GRPO runs from the same warm start (`minirl://tiny-qwen2-sft`) with the same seeds and
   `minirl train` defaults otherwise: one rewarded by the rule, one by the reward model
   (`reward.reward_model.enable=True`, colocated as verl's default; the server runs on 127.0.0.1).
3. Every `--eval-every` steps, both policies answer the same 200 held-out prompts greedily and the
   RULE grades them (the reward model never grades the evaluation). For the reward-model run it also
   prints, per step, the mean reward-model score of the training samples next to the share of them
   the rule says are right: the gap is what the policy learned to please the judge without being
   right.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MINIRL_NO_PROGRESS", "1")


def run_grpo(name, overrides, eval_rows, eval_every, tokenizer):
    from minirl.config import load
    from minirl.trainer.main_ppo import TaskRunnerV1
    from minirl.trainer.sft_trainer import greedy_accuracy
    from minirl.utils.reward_score import default_compute_score

    cfg = load(overrides)
    trainer = TaskRunnerV1().build(cfg)
    R = int(cfg.data.max_response_length)
    rows = [{"step": 0, "val_acc": greedy_accuracy(trainer.rollout.module, tokenizer, eval_rows, R)}]

    def after_step(step, batch, metrics):
        texts = [tokenizer.decode(batch.batch["responses"][i, :int(batch.batch["response_mask"][i].sum())].tolist(),
                                  skip_special_tokens=True) for i in range(len(batch))]
        truths = [x["ground_truth"] for x in batch.non_tensor_batch["reward_model"]]
        rule = [float(default_compute_score("minirl/arithmetic", t, g)) for t, g in zip(texts, truths)]
        row = {"step": step, "train_reward": metrics["critic/score/mean"], "train_rule_acc": sum(rule) / len(rule),
               "reward_failures": metrics.get("reward/failures", 0), "step_s": metrics.get("timing_s/step")}
        if step % eval_every == 0:
            row["val_acc"] = greedy_accuracy(trainer.rollout.module, tokenizer, eval_rows, R)
        rows.append(row)

    trainer.add_step_callback(after_step)
    t0 = time.time()
    try:
        trainer.fit()
    finally:
        trainer.close()
    failures = sum(r.get("reward_failures", 0) for r in rows)
    print(f"{name}: {len(rows) - 1} steps in {time.time() - t0:.0f} s; {failures} samples whose reward failed")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rm", default=None, help="a reward-model directory (default: train one with minirl train-rm)")
    ap.add_argument("--grpo-steps", type=int, default=60)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--out", default=None)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    import minirl.trainer.warm_start  # noqa: F401 (registers minirl://tiny-qwen2-sft)
    from minirl.data.tasks import make_arithmetic_rows
    from minirl.models import load_tokenizer, resolve_model_path
    from minirl.trainer.rm_trainer import train_reward_model

    out = args.out or tempfile.mkdtemp(prefix="minirl-rm-bench-")
    os.makedirs(out, exist_ok=True)
    load_before = os.getloadavg()
    rm_dir = args.rm or os.path.join(out, "rm")
    if args.rm is None:
        train_reward_model(rm_dir)
    with open(os.path.join(rm_dir, "rm_report.json")) as f:
        judge = json.load(f)["heldout"]
    print("reward model (held-out pairs of the warm start's samples): " + ", ".join(
        f"{k} {judge[k]:.3f}" for k in ("accuracy", "majority_accuracy", "balanced_accuracy", "auc", "base_rate_correct")))
    policy = resolve_model_path("minirl://tiny-qwen2-sft")
    tokenizer = load_tokenizer(policy)
    eval_rows = make_arithmetic_rows(200, seed=1, split="test")
    common = [f"actor_rollout_ref.model.path={policy}", f"trainer.total_training_steps={args.grpo_steps}",
              "trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.logger=[]", "trace.level=off",
              "trainer.resume_mode=disable", *args.overrides]
    results = {}
    for name, extra in (("rule", []), ("reward model", ["reward.reward_model.enable=true",
                                                        f"reward.reward_model.model_path={rm_dir}"])):
        results[name] = run_grpo(name, common + extra + [f"trainer.default_local_dir={out}/{name.replace(' ', '_')}"],
                                 eval_rows, args.eval_every, tokenizer)
    print(f"\n{'step':>5} | {'rule: val acc':>13} | {'RM: val acc':>11} {'RM: train RM score':>18} "
          f"{'RM: train rule acc':>18}")
    rm_rows = {r["step"]: r for r in results["reward model"]}
    for r in results["rule"]:
        if "val_acc" not in r:
            continue
        m = rm_rows.get(r["step"], {})
        print(f"{r['step']:>5} | {r['val_acc']:>13.3f} | {m.get('val_acc', float('nan')):>11.3f} "
              f"{m.get('train_reward', float('nan')):>18.3f} {m.get('train_rule_acc', float('nan')):>18.3f}")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"judge": judge, "runs": results}, f, indent=1)
    print(f"load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after; results in {out}/results.json")


if __name__ == "__main__":
    main()
