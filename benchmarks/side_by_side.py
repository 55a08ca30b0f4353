"""TRL's GRPOTrainer and minirl side by side: the same model, prompts and settings, per-step time and tokens/s.

    bash scripts/trl.sh [--rounds 3] [--steps 5] [--warmup 1]      # builds .venv-trl once, then runs this

or, with a TRL venv of your own: `python benchmarks/side_by_side.py --trl-python <venv>/bin/python`.
Without TRL (no `--trl-python`, or one that cannot `import trl`) it prints why and exits 0: this is a
benchmark, never part of CI.

The same work on both sides:

- model: `minirl://tiny-qwen2-sft` (the SFT warm start of the embedded 0.4M-parameter Qwen2, a plain
  Hugging Face directory that both load with `from_pretrained`);
- prompts: minirl's arithmetic training rows in order (minirl `data.shuffle=false`, TRL
  `shuffle_dataset=False`), chat-templated exactly as minirl's `RLDataset` does; the TRL worker
  checks that its tokenizer gives the same ids, so both sample from the same prompts, and both
  score with minirl's rule (`minirl.utils.reward_score`);
- 32 prompts x n=8 per step, at most 12 new tokens, temperature 1, top-p 1, no top-k;
- one AdamW step per batch: lr 1e-4, betas (0.9, 0.999), weight decay 0.01, clip 1.0, constant LR;
  micro-batches of 64 (TRL: `per_device_train_batch_size=64`, 4 accumulation steps, one generation
  per optimizer step);
- the loss: PPO clip 0.2, no KL (TRL `beta=0`), group-normalised advantages (TRL `scale_rewards="group"`),
  token-mean over the whole batch (verl's `loss_agg_mode=token-mean` with global token counts; TRL's
  `loss_type="dapo"` normalises by the active tokens of the whole generation batch: the same mean);
- 1 torch thread each (`OMP_NUM_THREADS=1`, `torch.set_num_threads(1)`).

TRL does not recompute old log-probs when every batch gets one optimizer step (the ratio's anchor is
the detached current log-prob); verl (and minirl by default) runs a separate forward for them, so
minirl runs twice: with the defaults and with `algorithm.rollout_correction.bypass_mode=true`
(old log-probs = the rollout's), the like-for-like setting.

Each run is its own process (imports and model loading are not timed). Rounds are interleaved
(TRL, minirl, minirl bypass, then the next round in another order) so that a change in the load on
the machine hits all three alike. A step's time is the wall time between the ends of two consecutive
optimizer steps (generation, scoring, forward/backward, optimizer, logging: everything), after
`--warmup` steps; tokens/s counts generated response tokens. The process's CPU time per step is
reported too: on a machine shared with other jobs, wall time also counts the time the process waited
for a core, CPU time mostly does not (both runs use one thread, so on an idle machine the two agree).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N, PROMPTS, RESPONSE_LEN, MICRO, LR = 8, 32, 12, 64, 1e-4
MINIRL_VARIANTS = {"minirl": [], "minirl bypass": ["algorithm.rollout_correction.bypass_mode=true"]}


def _result(payload: dict) -> None:
    payload["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(payload), flush=True)


def _stamp(ends: list) -> None:
    ends.append((time.perf_counter(), time.process_time()))


def _step_times(ends: list, warmup: int, which: int) -> list[float]:
    """Per-step wall (`which=0`) or process CPU (`which=1`) seconds between consecutive step ends."""
    return [b[which] - a[which] for a, b in zip(ends[warmup:], ends[warmup + 1:])]


# ---------------------------------------------------------------------------------------------- workers


def minirl_worker(args) -> None:
    """`minirl train` at the shared settings; the step callback stamps the end of every step."""
    import torch

    torch.set_num_threads(1)
    from minirl.config import load
    from minirl.trainer.main_ppo import TaskRunnerV1

    cfg = load([f"actor_rollout_ref.model.path={args.model}", f"data.train_batch_size={PROMPTS}",
                f"actor_rollout_ref.rollout.n={N}", f"data.max_response_length={RESPONSE_LEN}",
                "actor_rollout_ref.rollout.temperature=1.0", f"actor_rollout_ref.actor.optim.lr={LR}",
                f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
                f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={MICRO}", "data.shuffle=false",
                f"trainer.total_training_steps={args.warmup + args.steps + 1}", "trainer.val_before_train=false",
                "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.logger=[]", "trainer.resume_mode=disable",
                f"trainer.default_local_dir={args.workdir}", *args.overrides])
    trainer = TaskRunnerV1().build(cfg)
    ends, rows = [], []
    trainer.add_step_callback(lambda step, batch, m: (_stamp(ends), rows.append(m)))
    try:
        trainer.fit()
    finally:
        trainer.close()
    _result({"step_s": _step_times(ends, args.warmup, 0), "cpu_s": _step_times(ends, args.warmup, 1),
             "tokens": [r["response_length/mean"] * PROMPTS * N for r in rows[args.warmup + 1:]],
             "score": [r["critic/score/mean"] for r in rows]})


def trl_worker(args) -> None:
    """TRL's GRPOTrainer at the shared settings; a callback stamps the end of every optimizer step."""
    import torch

    torch.set_num_threads(1)
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from minirl.utils.reward_score import default_compute_score  # plain Python: no minirl install needed

    with open(args.prompts) as f:
        rows = json.load(f)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    ids = tokenizer(rows[0]["prompt"])["input_ids"]
    if ids != rows[0]["prompt_ids"]:
        raise SystemExit(f"TRL's tokenizer turns the prompt into other ids than minirl's:\n{ids}\n{rows[0]['prompt_ids']}")

    def arithmetic_reward(prompts, completions, ground_truth, data_source, **kwargs):
        return [float(default_compute_score(src, text, gt)) for text, gt, src in zip(completions, ground_truth, data_source)]

    ends, logged = [], []

    class Stamp(TrainerCallback):
        def on_step_end(self, *a, **k):
            _stamp(ends)

        def on_log(self, *a, logs=None, **k):
            if logs and "reward" in logs:
                logged.append(dict(logs))

    config = GRPOConfig(
        output_dir=args.workdir, use_cpu=True, bf16=False, fp16=False, use_vllm=False, report_to="none",
        per_device_train_batch_size=MICRO, gradient_accumulation_steps=PROMPTS * N // MICRO,
        num_generations=N, max_completion_length=RESPONSE_LEN, temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=LR, adam_beta1=0.9, adam_beta2=0.999, weight_decay=0.01, max_grad_norm=1.0,
        lr_scheduler_type="constant", warmup_steps=0, beta=0.0, loss_type="dapo", scale_rewards="group",
        epsilon=0.2, num_iterations=1, shuffle_dataset=False, max_steps=args.warmup + args.steps + 1,
        logging_steps=1, save_strategy="no", gradient_checkpointing=False, dataloader_num_workers=0,
        disable_tqdm=True, seed=42,
    )
    dataset = Dataset.from_list([{k: r[k] for k in ("prompt", "ground_truth", "data_source")} for r in rows])
    trainer = GRPOTrainer(model=args.model, reward_funcs=arithmetic_reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[Stamp()])
    trainer.train()
    _result({"step_s": _step_times(ends, args.warmup, 0), "cpu_s": _step_times(ends, args.warmup, 1),
             "tokens": [r["completions/mean_length"] * PROMPTS * N for r in logged[args.warmup + 1:]],
             "score": [r["reward"] for r in logged]})


# ---------------------------------------------------------------------------------------------- driver


def _prompts(model_dir: str, count: int, path: str) -> None:
    """minirl's first `count` training prompts, chat-templated and tokenized as `RLDataset` does."""
    import pyarrow.parquet as pq

    from minirl.config import load
    from minirl.data.tasks import resolve_data_files
    from minirl.models import load_tokenizer

    cfg = load([])
    tokenizer = load_tokenizer(model_dir)
    table = pq.read_table(resolve_data_files(cfg.data.train_files, cfg.data.builtin)[0]).slice(0, count).to_pylist()
    rows = []
    for row in table:
        text = tokenizer.apply_chat_template(list(row["prompt"]), add_generation_prompt=True, tokenize=False)
        rows.append({"prompt": text, "prompt_ids": tokenizer(text, add_special_tokens=False)["input_ids"],
                     "ground_truth": str(row["reward_model"]["ground_truth"]), "data_source": row["data_source"]})
    with open(path, "w") as f:
        json.dump(rows, f)


def _run(python: str, worker: str, args, workdir: str, overrides=()) -> dict:
    cmd = [python, os.path.abspath(__file__), "--worker", worker, "--model", args.model, "--prompts", args.prompts,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--workdir", workdir, *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "MINIRL_NO_PROGRESS": "1", "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{worker} worker failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _trl_problem(python: str | None) -> str | None:
    if not python:
        return "no --trl-python given"
    if not os.path.exists(python):
        return f"{python} does not exist"
    check = subprocess.run([python, "-c", "import trl, datasets"], check=False, capture_output=True, text=True)
    return None if check.returncode == 0 else f"{python} cannot import trl: {check.stderr.strip().splitlines()[-1:]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trl-python", default=None, help="python of a venv with trl==1.16.* (scripts/trl.sh builds one)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps at the start of each run")
    ap.add_argument("--out", default=None, help="write the raw results as JSON here")
    ap.add_argument("--worker", choices=["trl", "minirl"], help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--prompts", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        (trl_worker if args.worker == "trl" else minirl_worker)(args)
        return 0
    problem = _trl_problem(args.trl_python)
    if problem:
        print(f"side_by_side: skipped, TRL is not available ({problem}). Run: bash scripts/trl.sh")
        return 0
    import tempfile

    import minirl.trainer.warm_start  # noqa: F401 (registers minirl://tiny-qwen2-sft)
    from minirl.models import resolve_model_path

    work = tempfile.mkdtemp(prefix="minirl-side-by-side-")
    args.model = resolve_model_path("minirl://tiny-qwen2-sft")
    args.prompts = os.path.join(work, "prompts.json")
    _prompts(args.model, PROMPTS * (args.warmup + args.steps + 1), args.prompts)
    names = ["trl", *MINIRL_VARIANTS]
    results: dict[str, list[dict]] = {name: [] for name in names}
    load_before = os.getloadavg()
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:  # rotate the order each round
            workdir = os.path.join(work, f"{name.replace(' ', '_')}-{r}")
            res = _run(args.trl_python, "trl", args, workdir) if name == "trl" else \
                _run(sys.executable, "minirl", args, workdir, MINIRL_VARIANTS[name])
            results[name].append(res)
            print(f"round {r + 1} {name:>14}: " + " ".join(f"{s:.3f}" for s in res["step_s"]) + " s/step; score "
                  + " ".join(f"{s:.2f}" for s in res["score"]), flush=True)
    load_after = os.getloadavg()
    def median(name, key):
        return statistics.median(s for res in results[name] for s in res[key])

    print(f"\n{args.rounds} rounds x {args.steps} timed steps; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after; {time.strftime('%Y-%m-%d')}\n")
    print("| run | s/step (median) | min-max | generated tok/s | x TRL's time | CPU s/step | x TRL's CPU | peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in names:
        steps = [s for res in results[name] for s in res["step_s"]]
        tokens = [t for res in results[name] for t in res["tokens"]]
        med, cpu = median(name, "step_s"), median(name, "cpu_s")
        rss = max(res["peak_rss_mb"] for res in results[name])
        print(f"| {name} | {med:.3f} | {min(steps):.3f}-{max(steps):.3f} | {statistics.mean(tokens) / med:.0f} | "
              f"{med / median('trl', 'step_s'):.2f} | {cpu:.3f} | {cpu / median('trl', 'cpu_s'):.2f} | {rss:.0f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"results": results, "load": [load_before, load_after]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
