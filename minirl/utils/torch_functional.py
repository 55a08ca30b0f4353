r"""Tensor helpers every room needs: masked statistics, clipping, log-probs and entropy from logits.

Mirrors `verl/utils/torch_functional.py` at the pinned commit: `masked_sum` (`:273`), `masked_mean`
(`:294`), `masked_var` (`:311`), `masked_whiten` (`:329`), `clip_by_value` (`:210`),
`entropy_from_logits` (`:231`) and `logprobs_from_logits` (`:73`). The formulas of
`minirl.trainer.ppo.core_algos` use the masked statistics, the engines use the log-prob and entropy
functions; neither imports the other, both import this module (it imports torch only).

Simplified: `logprobs_from_logits` is plain `log_softmax` + `gather` (verl picks flash-attn's fused
cross-entropy or an NPU kernel when available, and has a chunked entropy for long vocabularies).
"""

from __future__ import annotations

import torch

__all__ = ["clip_by_value", "entropy_from_logits", "logprobs_from_logits", "masked_mean", "masked_sum",
           "masked_var", "masked_whiten"]


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    r"""$\log \pi(y_t)$ = `log_softmax(logits)[..., labels]`: logits `[..., V]`, labels `[...]` -> `[...]`.

    Computed in float32 whatever the logits' dtype (verl: `logprobs_from_logits_v2` for bf16 logits).
    """
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return log_probs.gather(dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)


def masked_sum(
    values: torch.Tensor, mask: torch.Tensor, axis: int | tuple[int, ...] | None = None
) -> torch.Tensor:
    r"""Sum of `values` where `mask` is non-zero: $\sum m\,x$.

    Entries outside the mask are replaced by 0 before multiplying, so a NaN or inf in padding cannot
    leak into the sum ($0\cdot\infty$ would be NaN). Mirrors `masked_sum`
    (`verl/utils/torch_functional.py:273`).
    """
    kept = torch.where(mask.bool(), values, 0.0)
    return (kept * mask).sum(axis=axis)


def masked_mean(
    values: torch.Tensor, mask: torch.Tensor, axis: int | tuple[int, ...] | None = None
) -> torch.Tensor:
    r"""Mean over the unmasked entries: $\operatorname{mean}_m(x)=\dfrac{\sum m\,x}{\sum m + 10^{-8}}$.

    The $10^{-8}$ makes an all-masked input give 0 instead of NaN. Mirrors `masked_mean`
    (`verl/utils/torch_functional.py:294`).
    """
    return masked_sum(values, mask, axis) / (mask.sum(axis=axis) + 1e-8)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    r"""Variance over all unmasked entries, with Bessel's correction by default.

    $$\operatorname{var}_m(x)=\operatorname{mean}_m\big((x-\operatorname{mean}_m(x))^2\big)\cdot\frac{N}{N-1},
    \qquad N=\textstyle\sum m$$

    Mirrors `masked_var` (`verl/utils/torch_functional.py:311`).
    """
    centered = values - masked_mean(values, mask)
    variance = masked_mean(centered**2, mask)
    if not unbiased:
        return variance
    n = mask.sum()
    if n <= 1:
        raise ValueError(
            f"masked_var(unbiased=True) needs at least 2 unmasked elements, got {int(n.item())} "
            "(Bessel's correction divides by N-1). Fix: pass a batch with more unmasked tokens, "
            "or unbiased=False."
        )
    bessel = n / (n - 1)
    return variance * bessel


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    r"""Normalise with the masked mean and variance.

    $$\operatorname{whiten}_m(x)=\frac{x-\operatorname{mean}_m(x)}{\sqrt{\operatorname{var}_m(x)+10^{-8}}}$$

    Statistics come from the unmasked entries only, but every entry is transformed (masked ones too:
    callers multiply by the mask afterwards where they need zeros). With `shift_mean=False` the mean
    is added back. Mirrors `masked_whiten` (`verl/utils/torch_functional.py:329`).
    """
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean


def clip_by_value(x: torch.Tensor, tensor_min: torch.Tensor, tensor_max: torch.Tensor) -> torch.Tensor:
    """`torch.clamp` with tensor bounds: $\\min(\\max(x, lo), hi)$ elementwise.

    Mirrors `clip_by_value` (`verl/utils/torch_functional.py:210`).
    """
    return torch.max(torch.min(x, tensor_max), tensor_min)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    r"""Entropy of the softmax of `logits` over the last axis: $H=\log\sum_v e^{z_v}-\sum_v p_v z_v$.

    This is $-\sum_v p_v\log p_v$ rewritten with $\log p_v = z_v-\operatorname{logsumexp}(z)$, which
    stays finite for large logits. `(..., vocab)` -> `(...)`. Mirrors `entropy_from_logits`
    (`verl/utils/torch_functional.py:231`).
    """
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def calculate_sum_pi_squared_from_logits(logits: torch.Tensor) -> torch.Tensor:
    r"""$\sum_v\pi_v^2$ of the softmax of `logits` over the last axis, in log space: $e^{\operatorname{logsumexp}(2z)-2\operatorname{logsumexp}(z)}$.

    1 for a one-hot distribution, $1/V$ for a uniform one. The optimal-token-baseline estimators
    read it (`sum_pi_squared`). `(..., vocab)` -> `(...)`. Mirrors `calculate_sum_pi_squared_from_logits`
    (`verl/utils/torch_functional.py:690`).
    """
    return torch.exp(torch.logsumexp(2.0 * logits, dim=-1) - 2.0 * torch.logsumexp(logits, dim=-1))
