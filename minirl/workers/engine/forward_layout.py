r"""How the engine lays out one micro-batch for the model: padding trimmed, prompts shared by their group.

The batch arrives in the padded layout of the whole step: `[B, P + R]` with prompts left-padded to
`P = data.max_prompt_length` and responses right-padded to `R = data.max_response_length`. The engine
only needs the logits at the `R + 1` positions `P-1 .. P+R-1` (each predicts the next token), and
`model_forward` returns exactly those, as `raw_output.logits` of shape `[B, R + 1, ...]`, so that
`prepare_model_outputs` reads `logits[:, -R-1:-1]` whatever happened here:

1. **Trim the prompts' common left padding.** Columns that are padding in every row (the left
   edge, when every prompt is shorter than `P`: the arithmetic prompts are 33 tokens, `P` is 40)
   change no real token's output: a padded key is masked out of every attention row, and position
   ids come from the batch. They are cut before the forward. (Trailing response columns are kept:
   the engine returns an output at every response position, padding included.) verl removes *all*
   padding instead (`use_remove_padding`: every sequence packed into one row for flash-attention's
   varlen kernel, `verl/workers/utils/padding.py`); on CPU there is no varlen kernel, so minirl
   trims what every row shares.
2. **Logits only where needed.** The LM head runs on the last `R + 1` positions only
   (`logits_to_keep`, transformers' argument for exactly this).
3. **Shared prompts (`use_prefix_grouper=True`, opt-in).** GRPO samples `n` responses per prompt,
   so each prompt appears `n` times in the batch. With prefix sharing the prompt is run once per
   distinct prompt with a KV cache, the cache is repeated for the prompt's rows, and only the
   responses run per row, attending to the shared keys and values; gradients from all `n`
   responses flow back into the one prompt computation. Same numbers as the padded forward up to
   float rounding, `P(n-1)` fewer token positions per group. verl's `actor.use_prefix_grouper`
   (`PrefixGrouper`, `verl/trainer/ppo/prefix_grouper_utils.py:150`, legacy worker path) gets the
   same saving by packing one prompt and its `n` responses into one row with a grouped attention.

Rows are grouped by their prompt tokens (and mask), not by `uid`: two rows share a prefix exactly
when the computation on it would be identical. With prefix sharing the model is always called twice
per micro-batch (prompts, then responses), even when no prompt repeats: under FSDP every call is a
round of collectives, so all ranks must make the same calls whatever their rows are.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

__all__ = ["leading_padding_columns", "model_forward"]


def leading_padding_columns(attention_mask: torch.Tensor, response_length: int) -> int:
    """How many leading prompt columns are padding in every row (never the last prompt column)."""
    prompt_length = attention_mask.shape[1] - response_length
    seen = attention_mask[:, : max(prompt_length - 1, 0)].bool().any(dim=0)
    return int(seen.int().argmax()) if bool(seen.any()) else seen.numel()


def _forward_args(module: nn.Module) -> set:
    return set(inspect.signature(module.forward).parameters)


def _cache_kwargs(args: set, cache) -> dict:
    # transformers 5.x names the KV-cache argument `cache`; 4.x called it `past_key_values`
    return {"cache" if "cache" in args else "past_key_values": cache}


def model_forward(module: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  position_ids: torch.Tensor, response_length: int, share_prefix: bool = False):
    """Run `module` on a padded micro-batch; `out.logits` holds the `response_length + 1` last positions.

    Args:
        module: a Hugging Face causal LM or token-classification model (the critic).
        input_ids, attention_mask, position_ids: `[B, P + R]` in the trainer's padded layout.
        response_length: `R`.
        share_prefix: run each distinct prompt once and continue its rows from a shared KV cache.
    """
    left = leading_padding_columns(attention_mask, response_length)
    ids, mask, pos = input_ids[:, left:], attention_mask[:, left:], position_ids[..., left:]
    args = _forward_args(module)
    if share_prefix and response_length > 0:
        return _shared_prefix_forward(module, args, ids, mask, pos, response_length)
    extra = {"logits_to_keep": response_length + 1} if "logits_to_keep" in args else {}
    out = module(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False, **extra)
    out.logits = out.logits[:, -(response_length + 1):]
    return out


def _shared_prefix_forward(module, args: set, ids, mask, pos, response_length: int):
    """Prompts once per distinct prompt (KV cache), then the responses of every row on top of it."""
    from transformers import DynamicCache

    prompt_length = ids.shape[1] - response_length
    prompts = torch.cat([ids[:, :prompt_length], mask[:, :prompt_length]], dim=1)
    unique, inverse = torch.unique(prompts, dim=0, return_inverse=True)
    rows = torch.arange(ids.shape[0], device=ids.device)
    first = torch.full((unique.shape[0],), ids.shape[0], dtype=rows.dtype, device=ids.device)
    first = first.scatter_reduce(0, inverse, rows, reduce="amin")  # one representative row per prompt
    cache = DynamicCache()
    extra = {"logits_to_keep": 1} if "logits_to_keep" in args else {}
    prefix = module(input_ids=ids[first, :prompt_length], attention_mask=mask[first, :prompt_length],
                    position_ids=pos[first][..., :prompt_length], use_cache=True, **_cache_kwargs(args, cache),
                    **extra)
    cache.batch_select_indices(inverse)  # each row continues from its prompt's keys and values
    suffix = module(input_ids=ids[:, prompt_length:], attention_mask=mask, position_ids=pos[..., prompt_length:],
                    use_cache=True, **_cache_kwargs(args, cache))
    suffix.logits = torch.cat([prefix.logits[:, -1:][inverse], suffix.logits], dim=1)
    return suffix
