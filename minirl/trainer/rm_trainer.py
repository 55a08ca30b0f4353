"""`minirl train-rm`: train a reward model on the policy's own samples, judged by the task's rule.

A reward model here is a learned judge, not a rule in disguise: an `AutoModelForSequenceClassification`
(the tiny Qwen2 with a 2-class head, its backbone started from the policy) that reads the chat
`prompt + response` and outputs P(correct). Its training data are the SFT warm start's samples on the
embedded arithmetic task, each labelled by the rule (`default_compute_score`): the judge sees exactly
the kind of responses GRPO will ask it about, mistakes included. Then

    minirl train-rm --out <dir>                   # ~1 minute on 2 cores; prints the held-out accuracy
    minirl train reward.reward_model.enable=True reward.reward_model.model_path=<dir>

`train_reward_model` does the work: sample (`HFRollout`, temperature 1), label, train with class-
weighted cross-entropy (correct answers are the minority), evaluate on problems of the held-out split
(accuracy, balanced accuracy, AUC, against the base rate), save an HF directory with `rm_report.json`.
The text the model reads is `rm_input_text` and its encoding `rm_server.encode`: the same code the
reward loop and the server use. `build_reward_model()` caches a smaller one under
`$MINIRL_CACHE/models/tiny-qwen2-rm` for notebooks and tests (built once, ~10-30 s).

verl has no reward-model trainer in its RL path: its reward models are checkpoints trained elsewhere
(its `verl/trainer/sft_trainer.py` trains causal LMs), served by `RewardModelManager`
(`verl/experimental/reward_loop/reward_model.py:27`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time

__all__ = ["RM_DEFAULTS", "add_arguments", "build_reward_model", "evaluate", "main", "run_args", "sample_pairs",
           "train_reward_model"]

RM_DEFAULTS = {"policy": "minirl://tiny-qwen2-sft", "prompts": 1024, "samples": 8, "heldout": 200, "epochs": 4,
               "lr": 1e-3, "batch_size": 64, "response_length": 12, "seed": 0}
"""`minirl train-rm`'s settings (each a `--flag`)."""
_CACHED = {"prompts": 256, "heldout": 100, "epochs": 3}  # build_reward_model: smaller, for notebooks and tests
_BUILD_VERSION = 1


def sample_pairs(policy_dir: str, tokenizer, rows: list[dict], samples: int, response_length: int, seed: int):
    """`samples` responses per row from the policy (temperature 1), each as `{"text", "label", "response"}`.

    `label` is the rule's verdict (1 = correct); `text` is what the reward model reads.
    """
    import torch

    from minirl.utils.reward_score import default_compute_score
    from minirl.workers.reward.reward_model import rm_input_text
    from minirl.workers.rollout.base import SamplingParams
    from minirl.workers.rollout.hf_rollout import HFRollout

    rollout = HFRollout({"max_num_seqs": 256, "seed": seed}, policy_dir)
    prompts = []
    for row in rows:
        ids = tokenizer.apply_chat_template(list(row["prompt"]), add_generation_prompt=True, tokenize=True)
        prompts += [list(ids["input_ids"] if not isinstance(ids, list) else ids)] * samples
    sp = SamplingParams(temperature=1.0, max_tokens=response_length, stop_token_ids=[tokenizer.eos_token_id])
    with torch.random.fork_rng(devices=[]):
        outs = rollout.generate(prompts, sp)
    pairs = []
    for k, out in enumerate(outs):
        row = rows[k // samples]
        response = tokenizer.decode(out.token_ids, skip_special_tokens=True)
        score = default_compute_score(row["data_source"], response, row["reward_model"]["ground_truth"])
        pairs.append({"text": rm_input_text(tokenizer, row["prompt"], response), "response": response,
                      "label": int(float(score) > 0.5)})
    return pairs


def _auc(scores: list[float], labels: list[int]) -> float:
    """Area under the ROC curve: P(a correct response scores above a wrong one), ties counted half."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    if not pos or not neg:
        return float("nan")
    order = sorted(range(len(scores)), key=scores.__getitem__)
    ranks, i = [0.0] * len(scores), 0
    while i < len(order):  # average ranks over ties
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    rank_pos = sum(r for r, y in zip(ranks, labels) if y)
    return (rank_pos - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))


def evaluate(model, tokenizer, pairs: list[dict], batch_size: int = 256) -> dict:
    """The judge on labelled pairs: accuracy at 0.5, balanced accuracy, AUC, base rate of 'correct'."""
    import torch

    from minirl.workers.reward.rm_server import encode

    model.eval()
    probs = []
    with torch.inference_mode():
        for i in range(0, len(pairs), batch_size):
            inputs = encode(tokenizer, [p["text"] for p in pairs[i:i + batch_size]], 2048)
            probs += torch.softmax(model(**inputs).logits.float(), -1)[:, -1].tolist()
    labels = [p["label"] for p in pairs]
    hits = [(pr > 0.5) == bool(y) for pr, y in zip(probs, labels)]
    tpr = [h for h, y in zip(hits, labels) if y]
    tnr = [h for h, y in zip(hits, labels) if not y]
    rate = (lambda xs: sum(xs) / len(xs) if xs else float("nan"))
    return {"pairs": len(pairs), "accuracy": rate(hits), "balanced_accuracy": (rate(tpr) + rate(tnr)) / 2,
            "true_positive_rate": rate(tpr), "true_negative_rate": rate(tnr), "auc": _auc(probs, labels),
            "base_rate_correct": rate(labels), "majority_accuracy": max(rate(labels), 1 - rate(labels))}


def _train(model, tokenizer, pairs: list[dict], epochs: int, lr: float, batch_size: int, seed: int,
           on_epoch=None) -> list[float]:
    import torch

    from minirl.workers.reward.rm_server import encode

    gen = torch.Generator().manual_seed(seed)
    positives = sum(p["label"] for p in pairs)
    # class weights: each class carries half the loss, whatever its share
    weight = torch.tensor([len(pairs) / (2 * max(1, len(pairs) - positives)), len(pairs) / (2 * max(1, positives))])
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    steps = epochs * ((len(pairs) + batch_size - 1) // batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / max(1, steps))
    losses = []
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(pairs), generator=gen).tolist()
        for i in range(0, len(order), batch_size):
            chunk = [pairs[j] for j in order[i:i + batch_size]]
            inputs = encode(tokenizer, [p["text"] for p in chunk], 2048)
            labels = torch.tensor([p["label"] for p in chunk])
            loss = torch.nn.functional.cross_entropy(model(**inputs).logits.float(), labels, weight=weight)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
        if on_epoch is not None:
            on_epoch()
    return losses


_MINIMUM = {"prompts": 1, "samples": 1, "heldout": 1, "epochs": 1, "batch_size": 1, "response_length": 1}
_MEANING = {"prompts": "training problems", "samples": "responses sampled per problem", "heldout": "held-out problems",
            "epochs": "passes over the pairs", "batch_size": "pairs per optimizer step",
            "response_length": "tokens per sampled response", "lr": "the learning rate"}


def settings_problems(cfg: dict, flags: bool = True) -> list[str]:
    """One line per bad setting, named as the user wrote it (`--batch-size` for the CLI, `batch_size=` in Python)."""
    import math

    def name(key):
        return f"--{key.replace('_', '-')}" if flags else key

    def sep():
        return " " if flags else "="

    problems = []
    for key, low in _MINIMUM.items():
        value = cfg[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            problems.append(f"{name(key)}{sep()}{value!r} must be an integer >= {low} ({_MEANING[key]}). "
                            f"Fix: {name(key)}{sep()}{RM_DEFAULTS[key]} (the default).")
    lr = cfg["lr"]
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        problems.append(f"{name('lr')}{sep()}{lr!r} must be a finite number > 0 ({_MEANING['lr']}). "
                        f"Fix: {name('lr')}{sep()}{RM_DEFAULTS['lr']} (the default).")
    return problems


def train_reward_model(out_dir: str, quiet: bool = False, progress: str | None = None, **settings) -> dict:
    """Sample, label, train and evaluate a reward model; save it to `out_dir`. Returns the report.

    `settings` override `RM_DEFAULTS` (policy, prompts, samples, heldout, epochs, lr, batch_size,
    response_length, seed). The report (also `out_dir/rm_report.json`) has the settings, the data
    counts, the held-out metrics (`evaluate`) and the wall time. `progress` names the build for a bar
    over its phases (sample, sample held-out, each epoch, evaluate; `minirl.utils.progress`).
    """
    import torch
    import transformers
    from transformers import AutoModelForSequenceClassification

    from minirl.data.tasks import make_arithmetic_rows
    from minirl.models import load_checked, load_tokenizer, resolve_model_path
    from minirl.trainer.warm_start import build_warm_start  # noqa: F401 (registers minirl://tiny-qwen2-sft)

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()  # the new score head is expected
    cfg = {**RM_DEFAULTS, **{k: v for k, v in settings.items() if v is not None}}
    unknown = set(cfg) - set(RM_DEFAULTS)
    if unknown:
        raise TypeError(f"train_reward_model: unknown settings {sorted(unknown)}; known: {sorted(RM_DEFAULTS)}")
    problems = settings_problems(cfg, flags=False)
    if problems:
        raise ValueError("train_reward_model: " + "; ".join(problems))
    t0 = time.time()
    say = (lambda msg: None) if quiet else (lambda msg: print(f"[train-rm] {msg}", flush=True))
    policy = resolve_model_path(cfg["policy"], "policy")
    tokenizer = load_checked(load_tokenizer, policy, "policy", "tokenizer")
    seed = int(cfg["seed"])
    train_rows = make_arithmetic_rows(int(cfg["prompts"]), seed=seed, split="train")
    test_rows = make_arithmetic_rows(int(cfg["heldout"]), seed=seed, split="test")
    from minirl.utils.progress import build_progress

    epochs = int(cfg["epochs"])
    bar = build_progress(progress or "reward model", epochs + 3, f"sample {int(cfg['prompts']) * int(cfg['samples'])} "
                         f"responses, label them by the rule, train {epochs} epochs; about 10-60 s on 2 cores",
                         unit="phase", disable=progress is None and quiet)
    bar.set_postfix_str("sampling the policy")
    train = sample_pairs(policy, tokenizer, train_rows, int(cfg["samples"]), int(cfg["response_length"]), seed)
    bar.update(1)
    test = sample_pairs(policy, tokenizer, test_rows, int(cfg["samples"]), int(cfg["response_length"]), seed + 1)
    bar.update(1)
    bar.set_postfix_str("training")
    say(f"{len(train)} training pairs from {policy} ({sum(p['label'] for p in train)} correct), "
        f"{len(test)} held-out pairs ({time.time() - t0:.0f} s)")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForSequenceClassification.from_pretrained(policy, num_labels=2, dtype=torch.float32)
        model.config.pad_token_id = tokenizer.pad_token_id
        losses = _train(model, tokenizer, train, epochs, float(cfg["lr"]), int(cfg["batch_size"]), seed,
                        on_epoch=lambda: bar.update(1))
    bar.set_postfix_str("evaluating")
    metrics = evaluate(model, tokenizer, test)
    bar.update(1)
    bar.close()
    report = {"settings": cfg, "policy_dir": policy, "train_pairs": len(train),
              "train_correct": sum(p["label"] for p in train), "final_loss": sum(losses[-10:]) / max(1, len(losses[-10:])),
              "heldout": metrics, "wall_s": round(time.time() - t0, 1)}
    os.makedirs(out_dir, exist_ok=True)
    model.config.id2label, model.config.label2id = {0: "wrong", 1: "correct"}, {"wrong": 0, "correct": 1}
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "rm_report.json"), "w") as f:
        json.dump(report, f, indent=2)
    say(f"held-out: accuracy {metrics['accuracy']:.3f} (always 'wrong' would get {metrics['majority_accuracy']:.3f}), "
        f"balanced accuracy {metrics['balanced_accuracy']:.3f}, AUC {metrics['auc']:.3f} on {metrics['pairs']} "
        f"pairs; saved to {out_dir} ({report['wall_s']:.0f} s)")
    return report


def build_reward_model(name: str = "tiny-qwen2-rm") -> str:
    """A reward model for notebooks and tests, built once (smaller settings) and cached in `$MINIRL_CACHE/models`."""
    from minirl.models.tiny import MARKER_FILE, default_cache_dir, is_complete_build
    from minirl.utils.py_functional import file_lock

    settings = {**RM_DEFAULTS, **_CACHED}
    fingerprint = hashlib.sha256(json.dumps({"settings": settings, "v": _BUILD_VERSION}, sort_keys=True)
                                 .encode()).hexdigest()[:16]
    out = os.path.join(default_cache_dir(), "models", name)

    def current() -> bool:
        if not is_complete_build(out):
            return False
        with open(os.path.join(out, MARKER_FILE)) as f:
            return json.load(f).get("fingerprint") == fingerprint

    if current():
        return out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with file_lock(os.path.join(os.path.dirname(out), f".{name}.lock")):
        if current():
            return out
        print(f"[minirl] building the reward model {name} once (cached in {out}): minirl train-rm "
              + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in _CACHED.items()), file=sys.stderr, flush=True)
        tmp = tempfile.mkdtemp(prefix=f".{name}.building-", dir=os.path.dirname(out))
        try:
            state = random.getstate()
            report = train_reward_model(tmp, quiet=True, progress=f"building the reward model {name}", **_CACHED)
            random.setstate(state)
            with open(os.path.join(tmp, MARKER_FILE), "w") as f:
                json.dump({"preset": name, "fingerprint": fingerprint, "heldout": report["heldout"]}, f, indent=2)
            if os.path.exists(out):
                shutil.rmtree(out)
            os.rename(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`--out` and one `--flag` per `RM_DEFAULTS` key (the parser of `minirl train-rm`)."""
    p.description = ("Train a reward model on the arithmetic task from the policy's own samples, labelled by the rule; "
                     "print its held-out accuracy.")
    p.add_argument("--out", default="checkpoints/minirl/reward_model", help="where to save the HF directory")
    for key, value in RM_DEFAULTS.items():
        p.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=value, dest=key, help=f"default {value}")
    return p


def check_args(args: dict) -> str:
    """`minirl train-rm`'s own checks, before any work: the flags' values, `--policy`, `--out`; '' when all pass."""
    from minirl.models import MODEL_PRESETS, ModelPathError, check_model_dir, resolve_model_path
    from minirl.models.loading import MINIRL_SCHEME
    from minirl.trainer.warm_start import build_warm_start  # noqa: F401 (registers minirl://tiny-qwen2-sft)

    problems = settings_problems({**RM_DEFAULTS, **{k: v for k, v in args.items() if k in RM_DEFAULTS}})
    policy = str(args.get("policy", RM_DEFAULTS["policy"]))
    local = os.path.expanduser(policy)
    try:  # what resolve_model_path would say, without building a preset
        if policy.startswith(MINIRL_SCHEME):
            if policy[len(MINIRL_SCHEME):].strip("/") not in MODEL_PRESETS:
                resolve_model_path(policy, "--policy")  # raises, naming the known presets
        elif os.path.isdir(local):
            check_model_dir(local, "--policy")
        elif os.path.exists(local) or policy.startswith(("/", "./", "../", "~")):
            raise ModelPathError(f"--policy {policy}: no such model directory. Fix: --policy "
                                 f"{RM_DEFAULTS['policy']} (the default), or a directory with config.json and weights.")
    except ModelPathError as e:
        problems.append(str(e).replace("--policy=", "--policy "))
    out = os.path.abspath(os.path.expanduser(str(args.get("out"))))
    probe = out
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        problems.append(f"--out {out}: {probe} is a file, so the model cannot be saved there. Fix: --out <a directory>.")
    elif not os.access(probe, os.W_OK | os.X_OK):
        problems.append(f"--out {out}: {probe} is not writable. Fix: --out <a directory you can write>.")
    return " | ".join(problems)


def run_args(args: dict) -> int:
    """Run `minirl train-rm` with parsed arguments; exit code 2 (one line) on a bad flag or path, before any work."""
    from minirl.utils.interrupt import stop_on_signals, stopped_line

    args = {k: v for k, v in args.items() if k == "out" or k in RM_DEFAULTS}
    problem = check_args(args)
    if problem:
        print(f"minirl train-rm: {problem}", file=sys.stderr)
        return 2
    out = os.path.abspath(os.path.expanduser(args.pop("out")))
    try:
        with stop_on_signals():
            train_reward_model(out, **args)
    except KeyboardInterrupt as e:
        line, code = stopped_line("minirl train-rm", e)
        print(line.split(";")[0] + f"; nothing was saved unless {out} has rm_report.json.", file=sys.stderr)
        return code
    except (FileNotFoundError, ValueError, OSError) as e:
        if os.environ.get("MINIRL_DEBUG") == "1":
            raise
        print(f"minirl train-rm: {e}", file=sys.stderr)
        return 2
    print(f"use it: minirl train reward.reward_model.enable=True reward.reward_model.model_path={out}")
    return 0


def main(argv=None) -> int:
    """`python -m minirl.trainer.rm_trainer [--out DIR] [--policy PATH] ...` (= `minirl train-rm`)."""
    return run_args(vars(add_arguments(argparse.ArgumentParser(prog="minirl train-rm")).parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
