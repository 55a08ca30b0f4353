"""SFT on the same engine: messages -> tokens + loss_mask -> NLL of the answer tokens -> checkpoint.

verl: `SFTTrainer` (`verl/trainer/sft_trainer.py:50`) runs the same `TrainingWorker`/engine as PPO
with `sft_loss` (`verl/workers/utils/losses.py:28`). minirl uses it as the warm start of the demo:
train until the greedy validation accuracy first reaches `trainer.stop_at_val_score`, then save a
Hugging Face directory that `actor_rollout_ref.model.path` can load.

Batch layout is the RL one, so the same engine code runs: `prompts` left-padded, the reference answer
as `responses` right-padded, `response_mask` = the loss mask (1 on answer tokens, 0 on padding).
A row whose `messages` hold tool calls and tool results (the multiply_tool task) is tokenized exactly
as the tool agent loop builds a rollout (`minirl.agent_loop.continuous_token.tokenize_conversation`):
the loss covers the assistant turns, not the tool results or the template tokens around them.

The run is traced with the same `minirl.trace.Tracer` as a GRPO run (`<default_local_dir>/trace`,
level `fields`), one span per stage of each step, so `minirl trace show` reads an SFT run too:

| stage | what it does | verl |
|---|---|---|
| `sft_tokenize` | rows' `messages` -> chat template -> `prompts`, `responses`, `response_mask` (the loss mask), `input_ids`, `attention_mask`, `position_ids` | `MultiTurnSFTDataset.__getitem__` (`verl/utils/dataset/multiturn_sft_dataset.py:291`) |
| `sft_train_batch` | one optimizer step of the engine with `sft_loss` (extras: loss, grad_norm, lr, micro-batches, engine) | `TrainingWorker.train_batch` (`verl/workers/engine_workers.py:342`) in `SFTTrainer.fit` (`verl/trainer/sft_trainer.py:308`) |
| `sft_validate` | greedy accuracy on held-out problems (verl: the validation loss) | `SFTTrainer.fit` |
| `sft_save_checkpoint` | the Hugging Face directory the warm start is loaded from | `CheckpointHandler.save_checkpoint` (`verl/utils/checkpoint/checkpoint_handler.py:90`) |

`trace.level=off|stages|fields` and `trace.dir=...` are read by `run_sft` itself, not by the SFT
config (`minirl/config/sft_trainer.yaml`): where a run's trace goes is observation, not recipe, so the
warm start's recipe fingerprint (`minirl.trainer.warm_start`) does not depend on it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf
from tqdm.auto import tqdm

from minirl.agent_loop.continuous_token import tokenize_conversation
from minirl.protocol import DataProto
from minirl.trace import NullTracer, Tracer
from minirl.transfer_queue import build_model_inputs
from minirl.utils.progress import build_progress
from minirl.utils.tracking import json_row


def tokenize_sft(rows: list[dict], tokenizer, prompt_length: int, response_length: int) -> DataProto:
    """Chat-template the prompt, append the answer + EOS, pad into the RL batch layout."""
    pad = tokenizer.pad_token_id
    B = len(rows)
    prompts = torch.full((B, prompt_length), pad, dtype=torch.long)
    responses = torch.full((B, response_length), pad, dtype=torch.long)
    pmask = torch.zeros((B, prompt_length), dtype=torch.long)
    rmask = torch.zeros((B, response_length), dtype=torch.long)
    response_ids = []
    for i, row in enumerate(rows):
        if _is_multi_turn(row.get("messages")):  # tool calls and results: built as a rollout builds them
            ids = tokenize_conversation(tokenizer, list(row["messages"]))
            p, r, m = ids["prompt_ids"], ids["response_ids"], ids["response_mask"]
        else:
            msgs = list(row["prompt"])
            p = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            p = list(p["input_ids"] if not isinstance(p, list) else p)
            answer = row["response"] if "response" in row else row["messages"][-1]["content"]
            r = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            m = [1] * len(r)
        if len(p) > prompt_length or len(r) > response_length:
            raise ValueError(f"SFT row {i}: prompt {len(p)} / answer {len(r)} tokens exceed "
                             f"data.max_prompt_length={prompt_length} / data.max_response_length={response_length}.")
        response_ids.append(r)
        prompts[i, prompt_length - len(p):] = torch.tensor(p)
        pmask[i, prompt_length - len(p):] = 1
        responses[i, : len(r)] = torch.tensor(r)
        rmask[i, : len(r)] = torch.tensor(m)
    lengths = torch.tensor([len(x) for x in response_ids])
    inputs = build_model_inputs(prompts, responses, pmask.sum(1), lengths)  # the trainer's layout, same builder
    return DataProto.from_dict(tensors={"prompts": prompts, "responses": responses, "response_mask": rmask, **inputs})


def _is_multi_turn(messages) -> bool:
    """A conversation with tool calls or tool results (more than prompt + one assistant answer)."""
    if messages is None:
        return False
    return any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


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


TRACE_KEYS = ("level", "dir")
"""`trace.<key>=value` overrides `run_sft` reads itself (as `minirl train` has `trace.level`, `trace.dir`)."""


def split_trace_overrides(overrides) -> tuple[list[str], dict]:
    """(the SFT config's overrides, {"level": ..., "dir": ...} from the `trace.*` ones); bad ones: ConfigError."""
    from minirl.config import ConfigError
    from minirl.trace.schema import LEVELS

    rest, trace = [], {}
    for item in overrides:
        key, sep, value = str(item).lstrip("+").partition("=")
        if not key.startswith("trace."):
            rest.append(item)
            continue
        name = key[len("trace."):]
        if not sep or name not in TRACE_KEYS:
            raise ConfigError(f"{item!r}: the SFT run reads trace.level=<{'|'.join(LEVELS)}> and trace.dir=<dir> "
                              "(trace.level=off records nothing)")
        if name == "level" and value not in LEVELS:
            raise ConfigError(f"trace.level={value!r} is not a level: use one of {', '.join(LEVELS)}")
        trace[name] = value
    return rest, trace


def _open_tracer(cfg, trace: dict):
    level = trace.get("level", "fields")
    if level == "off":
        return NullTracer()
    trace_dir = trace.get("dir") or str(Path(cfg.trainer.default_local_dir) / "trace")
    return Tracer(trace_dir, level=level, config=OmegaConf.to_container(cfg, resolve=True),
                  meta={"trainer": "sft", "loss": "sft_loss"})


def _traced_tokenize(tracer, step: int, rows: list[dict], tokenizer, cfg) -> DataProto:
    """`sft_tokenize`: the rows' `messages` in, the padded RL layout out (the messages stay, for the trace)."""
    messages = np.empty(len(rows), dtype=object)
    messages[:] = [list(row["messages"]) for row in rows]
    before = DataProto.from_dict(non_tensors={"messages": messages})
    with tracer.span("sft_tokenize", before, step=step, role="trainer", reads=["messages"]) as info:
        data = tokenize_sft(rows, tokenizer, int(cfg.data.max_prompt_length), int(cfg.data.max_response_length))
        data.non_tensor_batch["messages"] = messages
        mask = data.batch["response_mask"]
        info.update(rows=len(rows), loss_tokens=int(mask.sum()),
                    multi_turn_rows=int(sum(_is_multi_turn(r.get("messages")) for r in rows)))
        info["_batch"] = data
    return data


def run_sft(overrides=(), quiet: bool = False, progress: tuple[str, str] | None = None) -> dict:
    """Train; returns {"path": saved HF dir, "val_acc": last accuracy, "steps": steps run, "history": [...],
    "trace_dir": where the trace went (None with `trace.level=off`)}.

    `overrides` are `minirl/config/sft_trainer.yaml` keys (`key=value`), plus `trace.level` / `trace.dir`.
    `quiet` drops the per-evaluation lines and the bar; `progress=(what, about)` shows a build bar anyway
    (`minirl.utils.progress.build_progress`: the warm start and the tool policy, which a notebook waits on).
    """
    import transformers

    from minirl.config import load_sft
    from minirl.data.tasks import make_sft_rows
    from minirl.models import load_checked, load_tokenizer, resolve_model_path
    from minirl.trainer.main_ppo import check_output_dir
    from minirl.workers.engine_workers import build_engine
    from minirl.workers.utils.losses import sft_loss

    transformers.utils.logging.disable_progress_bar()
    overrides, trace = split_trace_overrides(overrides)
    cfg = load_sft(overrides)  # schema + checks of minirl/config/sft_trainer.yaml: ConfigError before any model
    torch.manual_seed(int(cfg.trainer.seed))
    check_output_dir(cfg.trainer.default_local_dir, "trainer.default_local_dir")
    model_path = resolve_model_path(cfg.model.path, "model.path")
    tokenizer = load_checked(load_tokenizer, model_path, "model.path", "tokenizer")
    b = cfg.data.builtin
    task = str(cfg.data.train_files).split("://")[-1].split("/")[0]
    share = b.get("tool_fraction")  # multiply_tool: share of rows that show the tool call
    train_rows = make_sft_rows(task, n=int(b.n_train), seed=int(b.seed), split="train", digits=int(b.digits),
                               tool_fraction=share)
    val_rows = make_sft_rows(task, n=int(cfg.data.val_max_samples), seed=int(b.seed), split="test",
                             digits=int(b.digits), tool_fraction=share)
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
    if progress is not None:
        bar = build_progress(progress[0], steps, progress[1])
    else:
        bar = tqdm(total=steps, desc="SFT", disable=quiet or os.environ.get("MINIRL_NO_PROGRESS") == "1")
    log = open(out_dir / "sft_history.jsonl", "w", buffering=1)  # noqa: SIM115 (appended per step: nothing lost if killed)
    tracer = _open_tracer(cfg, trace)
    reads = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]
    step = 0
    for step in range(1, steps + 1):
        start = ((step - 1) * bs) % (len(order) - bs + 1)
        rows = [train_rows[i] for i in order[start:start + bs]]
        data = _traced_tokenize(tracer, step, rows, tokenizer, cfg)
        data.meta_info = {"micro_batch_size": int(cfg.data.micro_batch_size_per_gpu), "temperature": 1.0}
        with tracer.span("sft_train_batch", data, step=step, role="actor", reads=reads) as info:
            with engine.train_mode():
                m = engine.train_batch(data, loss_fn)
            info.update(engine=type(engine).__name__, loss=m["loss"], grad_norm=m["grad_norm"], lr=m["lr"],
                        micro_batches=m["num_micro_batches"], loss_tokens=int(data.batch["response_mask"].sum()))
        engine.lr_scheduler_step()
        bar.update(1)
        row = {"step": step, "sft/loss": m["loss"], "grad_norm": m["grad_norm"], "time_s": time.time() - t0}
        if step % int(cfg.trainer.test_freq) == 0 or step == steps:
            engine.module.eval()
            with tracer.span("sft_validate", None, step=step, role="rollout") as info:
                acc = greedy_accuracy(engine.module, tokenizer, val_rows, int(cfg.data.max_response_length))
                info.update(val_acc=acc, problems=len(val_rows))
            row["val/acc"] = acc
            bar.set_postfix(loss=f"{m['loss']:.3f}", val_acc=f"{acc:.3f}")
            if not quiet:
                tqdm.write(f"SFT step {step}: loss={m['loss']:.4f} val_acc={acc:.3f} ({row['time_s']:.0f} s)")
        history.append(row)
        log.write(json.dumps(json_row(row), allow_nan=False) + "\n")  # strict JSON: NaN -> null (+ a count)
        tracer.event("metrics", step=step, metrics={k: v for k, v in row.items() if k != "step"})
        stop = cfg.trainer.stop_at_val_score
        if "val/acc" in row and stop is not None and acc >= float(stop):
            break
    bar.close()
    log.close()
    save_dir = out_dir / "hf_model"
    with tracer.span("sft_save_checkpoint", None, step=step, role="actor") as info:
        engine.module.save_pretrained(save_dir)
        tokenizer.save_pretrained(save_dir)
        info.update(path=str(save_dir), files=sorted(p.name for p in save_dir.iterdir()))
    tracer.close()
    trace_dir = None if isinstance(tracer, NullTracer) else str(tracer.dir)
    return {"path": str(save_dir), "val_acc": acc, "steps": step, "history": history, "wall_s": time.time() - t0,
            "trace_dir": trace_dir}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    from minirl.trainer.main_ppo import run_command

    res, code = run_command("minirl sft", lambda: run_sft(argv))  # Ctrl-C or SIGTERM: the history written so far stands
    if code is not None:
        return code
    print(f"SFT: {res['steps']} steps in {res['wall_s']:.0f} s, validation accuracy {res['val_acc']:.3f}; "
          f"model saved to {res['path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
