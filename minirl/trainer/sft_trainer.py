"""SFT on the same engine: messages -> tokens + loss_mask -> NLL of the answer tokens -> checkpoint.

verl: `SFTTrainer` (`verl/trainer/sft_trainer.py:50`) runs the same `TrainingWorker`/engine as PPO
with `sft_loss` (`verl/workers/utils/losses.py:28`). minirl uses it as the warm start of the demo:
train until the greedy validation accuracy first reaches `trainer.stop_at_val_score`, then save a
Hugging Face directory that `actor_rollout_ref.model.path` can load.

Batch layout is the RL one, so the same engine code runs: `prompts` left-padded, the reference answer
as `responses` right-padded, `response_mask` = the loss mask (1 on answer tokens, 0 on padding).
"""

from __future__ import annotations

import json
import os
import sys
import time
from functools import partial
from pathlib import Path

import torch
from omegaconf import OmegaConf
from tqdm.auto import tqdm

from minirl.protocol import DataProto


def tokenize_sft(rows: list[dict], tokenizer, prompt_length: int, response_length: int) -> DataProto:
    """Chat-template the prompt, append the answer + EOS, pad into the RL batch layout."""
    pad = tokenizer.pad_token_id
    B = len(rows)
    prompts = torch.full((B, prompt_length), pad, dtype=torch.long)
    responses = torch.full((B, response_length), pad, dtype=torch.long)
    pmask = torch.zeros((B, prompt_length), dtype=torch.long)
    rmask = torch.zeros((B, response_length), dtype=torch.long)
    for i, row in enumerate(rows):
        msgs = list(row["prompt"])
        p = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        p = list(p["input_ids"] if not isinstance(p, list) else p)
        answer = row["response"] if "response" in row else row["messages"][-1]["content"]
        r = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        if len(p) > prompt_length or len(r) > response_length:
            raise ValueError(f"SFT row {i}: prompt {len(p)} / answer {len(r)} tokens exceed "
                             f"data.max_prompt_length={prompt_length} / data.max_response_length={response_length}.")
        prompts[i, prompt_length - len(p):] = torch.tensor(p)
        pmask[i, prompt_length - len(p):] = 1
        responses[i, : len(r)] = torch.tensor(r)
        rmask[i, : len(r)] = 1
    attn = torch.cat([pmask, rmask], 1)
    return DataProto.from_dict(tensors={
        "prompts": prompts, "responses": responses, "response_mask": rmask, "attention_mask": attn,
        "input_ids": torch.cat([prompts, responses], 1),
        "position_ids": (attn.cumsum(1) - 1).clamp(min=0) * attn})


def greedy_accuracy(model_dir_or_module, tokenizer, rows: list[dict], response_length: int) -> float:
    """Share of `rows` whose greedy answer scores 1 with the built-in scorer (validation of the warm start)."""
    from minirl.utils.reward_score import default_compute_score
    from minirl.workers.rollout.base import SamplingParams
    from minirl.workers.rollout.hf_rollout import HFRollout

    rollout = HFRollout({"max_num_seqs": 256}, model_dir_or_module)
    prompts = []
    for row in rows:
        p = tokenizer.apply_chat_template(list(row["prompt"]), add_generation_prompt=True, tokenize=True)
        prompts.append(list(p["input_ids"] if not isinstance(p, list) else p))
    sp = SamplingParams(do_sample=False, temperature=0, max_tokens=response_length,
                        stop_token_ids=[tokenizer.eos_token_id])
    outs = rollout.generate(prompts, sp)
    hits = 0.0
    for row, out in zip(rows, outs):
        text = tokenizer.decode(out.token_ids, skip_special_tokens=True)
        s = default_compute_score(row["data_source"], text, row["reward_model"]["ground_truth"], row.get("extra_info"))
        hits += float(s["score"] if isinstance(s, dict) else s)
    return hits / max(1, len(rows))


def run_sft(overrides=(), quiet: bool = False) -> dict:
    """Train; returns {"path": saved HF dir, "val_acc": last accuracy, "steps": steps run, "history": [...]}."""
    from minirl.config import compose
    from minirl.data.tasks import make_sft_rows
    from minirl.models import load_tokenizer, resolve_model_path
    from minirl.workers.engine_workers import build_engine
    from minirl.workers.utils.losses import sft_loss

    import transformers

    transformers.utils.logging.disable_progress_bar()
    cfg = compose(overrides, config_name="sft_trainer")
    OmegaConf.resolve(cfg)
    torch.manual_seed(int(cfg.trainer.seed))
    model_path = resolve_model_path(cfg.model.path)
    tokenizer = load_tokenizer(model_path)
    b = cfg.data.builtin
    task = str(cfg.data.train_files).split("://")[-1].split("/")[0]
    train_rows = make_sft_rows(task, n=int(b.n_train), seed=int(b.seed), split="train", digits=int(b.digits))
    val_rows = make_sft_rows(task, n=int(cfg.data.val_max_samples), seed=int(b.seed), split="test", digits=int(b.digits))
    optim = OmegaConf.create(OmegaConf.to_container(cfg.optim))
    optim.total_training_steps = int(cfg.trainer.total_training_steps)
    fsdp = OmegaConf.create({"model_dtype": "fp32", "dtype": "float32", "seed": int(cfg.trainer.seed)})
    engine = build_engine("language_model", model_path, fsdp, optim, False, cfg.trainer.device)
    loss_fn = partial(sft_loss, None)
    out_dir = Path(cfg.trainer.default_local_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    bs, steps = int(cfg.data.train_batch_size), int(cfg.trainer.total_training_steps)
    gen = torch.Generator().manual_seed(int(cfg.trainer.seed))
    history, acc, t0 = [], 0.0, time.time()
    order = torch.randperm(len(train_rows), generator=gen).tolist()
    bar = tqdm(total=steps, desc="SFT", disable=quiet or os.environ.get("MINIRL_NO_PROGRESS") == "1")
    log = open(out_dir / "sft_history.jsonl", "w", buffering=1)  # appended per step: nothing lost if killed
    step = 0
    for step in range(1, steps + 1):
        start = ((step - 1) * bs) % (len(order) - bs + 1)
        rows = [train_rows[i] for i in order[start:start + bs]]
        data = tokenize_sft(rows, tokenizer, int(cfg.data.max_prompt_length), int(cfg.data.max_response_length))
        data.meta_info = {"micro_batch_size": int(cfg.data.micro_batch_size_per_gpu), "temperature": 1.0}
        with engine.train_mode():
            m = engine.train_batch(data, loss_fn)
        engine.lr_scheduler_step()
        bar.update(1)
        row = {"step": step, "sft/loss": m["loss"], "grad_norm": m["grad_norm"], "time_s": time.time() - t0}
        if step % int(cfg.trainer.test_freq) == 0 or step == steps:
            engine.module.eval()
            acc = greedy_accuracy(engine.module, tokenizer, val_rows, int(cfg.data.max_response_length))
            row["val/acc"] = acc
            bar.set_postfix(loss=f"{m['loss']:.3f}", val_acc=f"{acc:.3f}")
            if not quiet:
                tqdm.write(f"SFT step {step}: loss={m['loss']:.4f} val_acc={acc:.3f} ({row['time_s']:.0f} s)")
        history.append(row)
        log.write(json.dumps(row) + "\n")
        stop = cfg.trainer.stop_at_val_score
        if "val/acc" in row and stop is not None and acc >= float(stop):
            break
    bar.close()
    log.close()
    save_dir = out_dir / "hf_model"
    engine.module.save_pretrained(save_dir)
    tokenizer.save_pretrained(save_dir)
    return {"path": str(save_dir), "val_acc": acc, "steps": step, "history": history, "wall_s": time.time() - t0}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    from minirl.config import ConfigError

    try:
        res = run_sft(argv)
    except (ConfigError, FileNotFoundError) as e:
        if os.environ.get("MINIRL_DEBUG") == "1":
            raise
        print(f"minirl sft: {e}", file=sys.stderr)
        return 2
    print(f"SFT: {res['steps']} steps in {res['wall_s']:.0f} s, validation accuracy {res['val_acc']:.3f}; "
          f"model saved to {res['path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
