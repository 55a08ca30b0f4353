"""The `hf` rollout: batched sampling with a KV cache on a plain transformers model (runs anywhere).

This is minirl's inference engine for CPUs and small GPUs. It does what vLLM does for verl, in
about a hundred lines of torch:

1. keep its **own copy** of the policy (like vLLM in verl's hybrid engine), so the weights that
   sample are only those pushed with `update_weights`, and every response is tagged with the
   weight version that produced it;
2. **left-pad** a batch of prompts of different lengths, run the whole batch through the model
   once (*prefill*), which fills the KV cache;
3. **decode** one token per step for every unfinished row, feeding only the new token and reusing
   the cache; a row stops at an EOS/stop token (kept in the response, as vLLM returns it) or when
   its `max_tokens` budget is used (`stop_reason="length"`).

Position ids: with left padding, row i's first real token sits at column `pad_i`, but must get
position 0. Positions are therefore computed from the attention mask (`cumsum(mask) - 1`), in
prefill and in every decode step, exactly as the actor does when it recomputes log-probs.

Mirrors verl's rollout servers (`vLLMHttpServer.generate`,
`verl/workers/rollout/vllm_rollout/vllm_async_server.py:535`: token ids in, `TokenOutput` out)
behind the `BaseRollout` interface (`verl/workers/rollout/base.py:29`). verl still ships a legacy
`HFRollout` (`verl/workers/rollout/hf_rollout.py:39`), but it is not in `get_rollout_class`'s
registry (vllm / sglang / trtllm only): it calls `generate` on the actor's own FSDP module
(no separate copy, so no weight versions), takes and returns a `DataProto`, and reports no
log-probs. minirl's `hf` backend instead behaves like the server rollouts.

What it leaves out (and what vLLM does instead):
- no continuous batching: a sub-batch of at most `rollout.max_num_seqs` requests is prefilled
  together and decoded until its last row finishes (vLLM adds and retires requests every step);
- finished rows keep occupying the batch (vLLM frees their KV blocks at once);
- prefix caching (`rollout.enable_prefix_caching`, on by default as in verl) only shares whole prompts
  that repeat within a sub-batch (the `n` samples of a GRPO group): each distinct prompt is prefilled
  once and its KV cache repeated for its rows; vLLM shares any common prefix, in blocks, across requests;
- no paged attention, CUDA graphs or tensor parallelism.
"""

from __future__ import annotations

import copy
import inspect
import os
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F

from minirl.config.schema import ROLLOUT_DEFAULTS
from minirl.utils.config import cfg_get
from minirl.workers.rollout.base import BaseRollout, SamplingParams, TokenOutput, register_rollout

__all__ = ["HFRollout", "apply_top_k_top_p"]

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


# --------------------------------------------------------------------------------------------------
# Sampling helpers
# --------------------------------------------------------------------------------------------------


def apply_top_k_top_p(logits: torch.Tensor, top_k: int = -1, top_p: float = 1.0) -> torch.Tensor:
    """Set to -inf every logit outside the top-k tokens and outside the top-p nucleus.

    Top-k keeps the `k` largest logits (ties with the k-th are kept too); `top_k <= 0` is off.
    Top-p keeps the smallest set of most likely tokens whose probabilities sum to at least
    `top_p`: a token is dropped when the tokens ranked above it already hold `top_p` of the mass.
    The most likely token is always kept. Same rule as vLLM's `apply_top_k_top_p`.

    Args:
        logits: `(batch, vocab)`, already divided by the temperature.
    """
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth_largest = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(dim=-1)
        mass_above = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop_sorted = mass_above >= top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_next_token(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row from last-position logits `(batch, vocab)`; return `(tokens, log_probs)`.

    Sampling: `logits / T` -> top-k / top-p filter -> softmax -> draw with `generator`.

    The reported log-prob is `log_softmax(logits / T)[token]` over the **full** vocabulary, with no
    top-k/top-p renormalization. That is exactly what the actor computes when it recomputes
    `old_log_probs` (it divides logits by `rollout.temperature`, then log-softmax:
    `FSDPEngineWithLMHead.prepare_model_outputs`, `verl/workers/engine/fsdp/transformer_impl.py:1308`),
    so with the same weights rollout and actor log-probs agree to float precision. vLLM with
    verl's default `logprobs_mode: processed_logprobs` (`RolloutConfig`,
    `verl/workers/config/rollout.py:145`) reports log-probs after temperature *and* top-k/top-p
    processing instead; the two agree when top-k and top-p are off.

    Greedy (`do_sample=False` or `T == 0`): argmax, log-probs of the untempered `log_softmax(logits)`.
    """
    logits = logits.float()
    if params.greedy:
        tokens = logits.argmax(dim=-1)
        log_probs = F.log_softmax(logits, dim=-1)
    else:
        scaled = logits / params.temperature
        log_probs = F.log_softmax(scaled, dim=-1)
        probs = apply_top_k_top_p(scaled, params.top_k, params.top_p).softmax(dim=-1)
        tokens = torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)
    return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)


def left_pad(
    prompts: list[list[int]], pad_token_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack prompts of different lengths into `(input_ids, attention_mask)`, padding on the left."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        attention_mask[row, width - len(prompt) :] = 1
    return input_ids.to(device), attention_mask.to(device)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that start at 0 on each row's first real token: `cumsum(mask) - 1`, pads clamped to 0."""
    return (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)


# --------------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------------


@register_rollout("hf")
class HFRollout(BaseRollout):
    """Batched KV-cache sampling on the rollout's own copy of a transformers causal LM.

    Args:
        config: the `actor_rollout_ref.rollout` section. Keys read: `max_num_seqs` (sub-batch size,
            256), `enable_prefix_caching` (True: a prompt repeated in a sub-batch is prefilled once),
            `seed` (the engine's generator; None: torch's global RNG), `max_model_len`
            (context limit; None: the model's `max_position_embeddings`), `dtype` (off-CPU only;
            CPU always runs float32), and optional `eos_token_id` / `pad_token_id`.
        model_path_or_module: a local model directory (loaded with
            `AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)`) or an `nn.Module`
            (deep-copied, so later changes to the caller's model do not leak in).
        device: where the rollout model lives and runs.

    EOS: responses stop on `config.eos_token_id`, else the model's `generation_config.eos_token_id`,
    else `model.config.eos_token_id` (for a ChatML model, `<|im_end|>`), plus any
    `SamplingParams.stop_token_ids`. A model with no EOS id stops only at `max_tokens`.
    """

    def __init__(self, config: Any, model_path_or_module: Any, device: str | torch.device = "cpu") -> None:
        super().__init__(config, model_path_or_module, device)
        self.module = _load_model(model_path_or_module, self.device, self._compute_dtype())
        self.max_num_seqs = int(cfg_get(self.config, "max_num_seqs", ROLLOUT_DEFAULTS.max_num_seqs))
        self.prefix_caching = bool(cfg_get(self.config, "enable_prefix_caching", ROLLOUT_DEFAULTS.enable_prefix_caching))
        self.max_model_len = int(
            cfg_get(self.config, "max_model_len")
            or getattr(self.module.config, "max_position_embeddings", 10**9)
        )
        self.vocab_size = self.module.get_input_embeddings().num_embeddings
        self.eos_token_ids = _resolve_eos_ids(self.config, self.module)
        pad = cfg_get(self.config, "pad_token_id", getattr(self.module.config, "pad_token_id", None))
        self.pad_token_id = int(pad if pad is not None else (self.eos_token_ids or [0])[0])
        seed = cfg_get(self.config, "seed")
        # vLLM seeds its engine once from rollout.seed; each call then draws fresh samples.
        self.generator = None if seed is None else torch.Generator(device=self.device).manual_seed(int(seed))
        forward_args = inspect.signature(self.module.forward).parameters
        # transformers 5.x names the KV-cache argument `cache`; 4.x called it `past_key_values`.
        self._cache_arg = "cache" if "cache" in forward_args else "past_key_values"
        self._has_logits_to_keep = "logits_to_keep" in forward_args

    def _compute_dtype(self) -> torch.dtype:
        if self.device.type == "cpu":
            # bf16 matmuls on CPU are slow and would make log-probs drift from the actor's
            return torch.float32
        name = str(cfg_get(self.config, "dtype", ROLLOUT_DEFAULTS.dtype))
        if name not in _DTYPES:
            raise ValueError(f"rollout.dtype={name!r} is not supported; use one of {sorted(_DTYPES)}.")
        return _DTYPES[name]

    # ---------------------------------------------------------------------------------- generate

    def generate(self, prompts: list[list[int]], sampling_params: SamplingParams) -> list[TokenOutput]:
        """Sample one response per prompt (independent requests of any lengths), in sub-batches of
        at most `max_num_seqs`. Same `sampling_params.seed` and same prompts -> same tokens.

        When `abort_event` is set (a rollout server aborting for a weight sync), decoding stops after
        the current token: unfinished rows come back with what they have and `stop_reason="aborted"`,
        sub-batches not started yet come back empty (verl: vLLM's `pause_generation`)."""
        sampling_params.validate()
        prompts = self._check_prompts(prompts)
        if sampling_params.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(int(sampling_params.seed))
        else:
            generator = self.generator
        outputs: list[TokenOutput] = []
        for start in range(0, len(prompts), self.max_num_seqs):
            chunk = prompts[start : start + self.max_num_seqs]
            if self.abort_event.is_set():  # aborted before this sub-batch started: nothing generated
                outputs.extend(TokenOutput([], [] if sampling_params.logprobs else None, "aborted",
                                           self.policy_version) for _ in chunk)
                continue
            outputs.extend(self._generate_batch(chunk, sampling_params, generator))
        return outputs


    def _forward(self, input_ids, attention_mask, cache):
        """One model call; returns (last-position logits, cache). `cache=None` starts one (prefill)."""
        kwargs = {
            "use_cache": True,
            "position_ids": position_ids_from_mask(attention_mask)[:, -input_ids.shape[1] :],
        }
        if cache is not None:
            kwargs[self._cache_arg] = cache
        if self._has_logits_to_keep:
            kwargs["logits_to_keep"] = 1  # only the last position's logits are needed
        out = self.module(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        new_cache = out.get("cache", None)
        if new_cache is None:
            new_cache = out.get("past_key_values", None)
        return out.logits[:, -1, :], new_cache

    @torch.inference_mode()
    def _generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, generator: torch.Generator | None
    ) -> list[TokenOutput]:
        """Prefill a left-padded batch once, then decode token by token with the KV cache."""
        input_ids, attention_mask = left_pad(prompts, self.pad_token_id, self.device)
        batch = len(prompts)
        # Per-row budget: max_tokens, cut where the context would overflow (vLLM clamps the same way).
        budgets = torch.tensor(
            [min(params.max_tokens, self.max_model_len - len(p)) for p in prompts], device=self.device
        )
        stop_ids = torch.tensor(self._stop_ids(params), dtype=torch.long, device=self.device)

        scored = None
        if params.prompt_logprobs is not None:  # the whole prompt scored in the same prefill (an OPD teacher)
            logits, cache, scored = self._prefill_scored(prompts, input_ids, attention_mask, int(params.prompt_logprobs))
        else:
            logits, cache = self._prefill(prompts, input_ids, attention_mask)
        finished = torch.zeros(batch, dtype=torch.bool, device=self.device)
        hit_stop = torch.zeros_like(finished)
        lengths = torch.zeros(batch, dtype=torch.long, device=self.device)
        step_tokens, step_log_probs = [], []
        for _ in range(int(budgets.max())):
            tokens, log_probs = sample_next_token(logits, params, generator)
            active = ~finished
            tokens = tokens.masked_fill(finished, self.pad_token_id)  # finished rows only carry pads
            step_tokens.append(tokens)
            step_log_probs.append(log_probs)
            lengths += active.long()
            stopped = active & torch.isin(tokens, stop_ids)
            hit_stop |= stopped
            finished |= stopped | (active & (lengths >= budgets))
            if bool(finished.all()) or self.abort_event.is_set():  # abort: keep what each row has so far
                break
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(batch, 1)], dim=-1)
            logits, cache = self._forward(tokens[:, None], attention_mask, cache)
        outputs = self._to_outputs(step_tokens, step_log_probs, lengths, hit_stop, finished, params)
        for out, (ids, lps) in zip(outputs, scored or []):
            out.extra_fields.update(prompt_ids=ids, prompt_logprobs=lps)
        return outputs

    def _prefill_scored(self, prompts: list[list[int]], input_ids, attention_mask, k: int):
        """Prefill with the logits of EVERY position kept, to score the prompts (`SamplingParams.prompt_logprobs`).

        Row `i` of a prompt's result scores its token `i + 1` from the untempered `log_softmax` of the
        logits at position `i`: the token itself (`k = 0`) or the `k` most likely tokens, most likely
        first; a zero row pads the end, so there is one row per prompt token. That is verl's layout of
        vLLM's `prompt_logprobs` (`extract_prompt_logprobs`, `verl/workers/rollout/vllm_rollout/utils.py:494`),
        except that vLLM adds the actual token's log-prob when it is not among the top k (verl drops it).
        Returns (last-position logits, KV cache, [(ids, log-probs) per prompt, as lists of lists]).
        """
        if k > self.vocab_size:
            raise ValueError(f"prompt_logprobs={k} asks for more tokens than the vocabulary has ({self.vocab_size}); "
                             "lower distillation.distillation_loss.topk.")
        kwargs = {"use_cache": True, "position_ids": position_ids_from_mask(attention_mask)}
        out = self.module(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        cache = out.get("cache", None)
        if cache is None:
            cache = out.get("past_key_values", None)
        log_probs = F.log_softmax(out.logits.float(), dim=-1)
        width, rows = input_ids.shape[1], []
        for row, prompt in enumerate(prompts):
            start = width - len(prompt)
            lp = log_probs[row, start:width - 1]  # position j predicts token j + 1
            if k == 0:
                ids = input_ids[row, start + 1:width, None]
                vals = lp.gather(-1, ids)
            else:
                vals, ids = torch.topk(lp, k, dim=-1)
            pad = max(k, 1)
            rows.append((ids.tolist() + [[0] * pad], vals.tolist() + [[0.0] * pad]))
        return out.logits[:, -1, :], cache, rows

    def _prefill(self, prompts: list[list[int]], input_ids, attention_mask):
        """Prefill: last-position logits and KV cache of every row, each distinct prompt computed once."""
        index: dict[tuple, int] = {}
        inverse = [index.setdefault(tuple(p), len(index)) for p in prompts]
        if not self.prefix_caching or len(index) == len(prompts):
            return self._forward(input_ids, attention_mask, cache=None)
        unique_ids, unique_mask = left_pad([list(p) for p in index], self.pad_token_id, self.device)
        logits, cache = self._forward(unique_ids, unique_mask, cache=None)  # same width: the longest is unique
        rows = torch.tensor(inverse, device=self.device)
        cache.batch_select_indices(rows)  # every row continues from its prompt's keys and values
        return logits[rows], cache

    def _stop_ids(self, params: SamplingParams) -> list[int]:
        """EOS ids (unless `ignore_eos`) plus the request's `stop_token_ids`."""
        eos = [] if params.ignore_eos else list(self.eos_token_ids)
        return sorted(set(eos) | set(params.stop_token_ids or []))

    def _to_outputs(self, step_tokens, step_log_probs, lengths, hit_stop, finished, params) -> list[TokenOutput]:
        tokens = torch.stack(step_tokens, dim=1).tolist()
        log_probs = torch.stack(step_log_probs, dim=1).tolist()
        outputs = []
        for row, n in enumerate(lengths.tolist()):
            outputs.append(
                TokenOutput(
                    token_ids=tokens[row][:n],
                    log_probs=log_probs[row][:n] if params.logprobs else None,
                    stop_reason="eos" if bool(hit_stop[row]) else ("length" if bool(finished[row]) else "aborted"),
                    policy_version=self.policy_version,
                )
            )
        return outputs

    # ---------------------------------------------------------------------------------- weights

    @torch.no_grad()
    def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Copy full tensors, by parameter name, into the rollout's model; then `policy_version = version`.

        Names are the model's own (`model.layers.0.self_attn.q_proj.weight`, ...), as in the
        actor's full state dict; a subset is fine (only those tensors change). vLLM does the same
        through `load_weights` after receiving bucketed tensors over CUDA IPC or shared memory.
        """
        targets = dict(self.module.named_parameters(remove_duplicate=False))
        targets.update(self.module.named_buffers(remove_duplicate=False))
        loaded = 0
        for name, tensor in weights:
            target = targets.get(name)
            if target is None:
                raise KeyError(
                    f"update_weights: the rollout model has no parameter named {name!r} "
                    f"(it has e.g. {list(targets)[:3]}); send the actor's unwrapped full state dict names."
                )
            if tuple(tensor.shape) != tuple(target.shape):
                raise ValueError(
                    f"update_weights: {name!r} has shape {tuple(tensor.shape)} but the rollout expects "
                    f"{tuple(target.shape)}; send full (unsharded) tensors."
                )
            target.copy_(tensor.detach().to(device=target.device, dtype=target.dtype))
            loaded += 1
        if loaded == 0:
            raise ValueError(
                "update_weights received no tensors; was the weights generator already consumed?"
            )
        self.policy_version = int(version)

    async def resume(self, tags: list[str]) -> None:
        """No-op here. vLLM (verl `ServerAdapter.resume`,
        `verl/workers/rollout/vllm_rollout/vllm_rollout.py:194`)
        wakes the engine from sleep mode: `"weights"` re-allocates GPU memory for the weights before
        a sync, `"kv_cache"` re-allocates the KV cache before generation. The hf model stays put."""

    async def release(self) -> None:
        """No-op here. vLLM (verl `ServerAdapter.release`,
        `verl/workers/rollout/vllm_rollout/vllm_rollout.py:203`)
        puts the engine to sleep, freeing weights and KV cache so the actor can train in that GPU memory."""


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


def _load_model(source: Any, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """The rollout's own model: a deep copy of a module, or a fresh load from a directory."""
    if isinstance(source, torch.nn.Module):
        module = copy.deepcopy(source)
    elif isinstance(source, (str, os.PathLike)):
        from transformers import AutoModelForCausalLM  # slow import, only when loading from disk

        try:
            module = AutoModelForCausalLM.from_pretrained(os.fspath(source), dtype=torch.float32)
        except OSError as err:
            raise FileNotFoundError(
                f"HFRollout could not load a model from {os.fspath(source)!r}: {err}. Pass a local directory "
                "with config.json and weights (as written by save_pretrained), or an nn.Module."
            ) from err
    else:
        raise TypeError(f"HFRollout needs a model directory or an nn.Module, got {type(source).__name__}.")
    module.to(device=device, dtype=dtype)
    module.eval()
    module.requires_grad_(False)
    return module


def _resolve_eos_ids(config: Any, module: torch.nn.Module) -> list[int]:
    """EOS ids from the config, else the model's generation config, else its model config."""
    eos = cfg_get(config, "eos_token_id")
    if eos is None:
        eos = getattr(getattr(module, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = getattr(module.config, "eos_token_id", None)
    if eos is None:
        return []
    return [int(e) for e in eos] if isinstance(eos, (list, tuple)) else [int(eos)]
