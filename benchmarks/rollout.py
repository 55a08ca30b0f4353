"""hf vs vllm rollout, side by side: sampling tokens/s at the same settings, and weight-sync time per step.

    bash scripts/vllm.sh                 # once: builds .venv-vllm (vLLM needs its own venv on CPU), runs its tests
    VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 OMP_NUM_THREADS=1 \\
        .venv-vllm/bin/python benchmarks/rollout.py [--prompts 32] [--n 8] [--response-length 32]

Both backends get the same `actor_rollout_ref.rollout` settings and the same requests: `--prompts`
chat-formatted arithmetic questions, each sent `--n` times (the agent loop's `rollout.n` sessions), in
one `generate` call, temperature 1, `--response-length` new tokens each (`ignore_eos`, so both
generate exactly the same number of tokens; `--eos` lets responses stop early instead). One warm-up
call each, then `--repeats` timed calls. Weight sync: the time `update_weights` takes to load a full
set of actor tensors (what `CheckpointEngineManager.update_weights` hands over every step), median of
`--syncs` pushes. Without vLLM installed only the hf row is printed.

The model is the embedded `minirl://tiny-qwen2` (0.4M parameters) unless `--model` says otherwise: at
this size per-step overheads dominate, so the ratio says little about real models on GPUs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def build_prompts(tokenizer, count: int, seed: int = 0) -> list[list[int]]:
    """`count` chat-formatted "What is a+b?" prompts, tokenized with the model's chat template."""
    import random

    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        ids = tokenizer.apply_chat_template([{"role": "user", "content": f"What is {a}+{b}?"}],
                                            add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        prompts.append(list(ids))
    return prompts


def actor_weights(model_path: str):
    """A full set of actor tensors by HF name (the checkpoint's, nudged so that the sync changes something)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    return [(k, v.detach() + 1e-3 * torch.randn(v.shape, generator=gen)) for k, v in model.state_dict().items()]


def bench(rollout, requests, params, repeats: int, weights, syncs: int) -> dict:
    rollout.generate(requests, params)  # warm-up
    times, tokens = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        outs = rollout.generate(requests, params)
        times.append(time.perf_counter() - t0)
        tokens += sum(len(o.token_ids) for o in outs)
    sync = []
    for version in range(1, syncs + 1):
        t0 = time.perf_counter()
        rollout.update_weights(iter(weights), version=version)
        sync.append(time.perf_counter() - t0)
    return {"tokens_per_s": tokens / sum(times), "s_per_call": statistics.median(times),
            "tokens_per_call": tokens // repeats, "sync_ms": 1e3 * statistics.median(sync)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minirl://tiny-qwen2")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--response-length", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--syncs", type=int, default=5)
    ap.add_argument("--eos", action="store_true", help="stop at EOS (token counts then differ per backend)")
    args = ap.parse_args()

    import torch

    import minirl.trainer.warm_start  # noqa: F401 (registers minirl://tiny-qwen2-sft)
    from minirl.models import load_tokenizer, resolve_model_path
    from minirl.workers.rollout.base import SamplingParams, get_rollout_class

    torch.set_num_threads(1)
    model_path = resolve_model_path(args.model)
    prompts = build_prompts(load_tokenizer(model_path), args.prompts)
    requests = [p for p in prompts for _ in range(args.n)]
    prompt_length = max(len(p) for p in prompts)
    config = {"prompt_length": prompt_length, "response_length": args.response_length, "seed": 0,
              "max_num_seqs": 256, "free_cache_engine": True, "dtype": "float32"}
    params = SamplingParams(temperature=args.temperature, max_tokens=args.response_length, ignore_eos=not args.eos)
    weights = actor_weights(model_path)
    print(f"model {args.model} | {args.prompts} prompts x n={args.n} = {len(requests)} requests | "
          f"prompt {prompt_length} tokens | {args.response_length} new tokens | T={args.temperature} | "
          f"ignore_eos={not args.eos} | torch threads {torch.get_num_threads()}")

    rows = {}
    try:
        vllm_rollout = get_rollout_class("vllm")(config, model_path)
    except ImportError as err:
        print(f"vllm: skipped ({err})")
    else:
        rows["vllm"] = bench(vllm_rollout, requests, params, args.repeats, weights, args.syncs)
        del vllm_rollout
    rows["hf"] = bench(get_rollout_class("hf")(config, model_path), requests, params, args.repeats, weights,
                       args.syncs)

    print(f"{'backend':<8} {'tokens/s':>10} {'s/call':>8} {'tokens/call':>12} {'sync ms/step':>13}")
    for name in ("hf", "vllm"):
        if name in rows:
            r = rows[name]
            print(f"{name:<8} {r['tokens_per_s']:>10.0f} {r['s_per_call']:>8.3f} {r['tokens_per_call']:>12d} "
                  f"{r['sync_ms']:>13.1f}")
    if "vllm" in rows:
        print(f"vllm/hf tokens/s ratio: {rows['vllm']['tokens_per_s'] / rows['hf']['tokens_per_s']:.2f}x  |  "
              f"sync time ratio vllm/hf: {rows['vllm']['sync_ms'] / rows['hf']['sync_ms']:.2f}x")


if __name__ == "__main__":
    main()
