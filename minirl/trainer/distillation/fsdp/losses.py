r"""Top-k forward KL from the student's logits: the part of OPD that needs the whole next-token distribution.

verl computes this inside the engine's forward, as a *logits processor*: the FSDP engine calls the loss
function with `student_logits` before it turns the logits into log-probs
(`FSDPEngineWithLMHead.prepare_model_outputs` in `verl/workers/engine/fsdp/transformer_impl.py`), and
the result rides along in `model_output` to the loss proper (`minirl.trainer.distillation.losses`).
Mirrors `compute_forward_kl_topk` (`verl/trainer/distillation/fsdp/losses.py:75`) and `kl_divergence`
(`verl/trainer/distillation/fsdp/losses.py:66`); verl's Megatron engine has its own vocab-parallel
version (`verl/trainer/distillation/megatron/losses.py:264`).

With the teacher's top-$k$ tokens $v_1..v_k$ at position $t$ and their log-probs $\log\nu(v_j)$,
and the student's log-probs $\log\pi_\theta(v_j)$ gathered at the same ids (both optionally clamped
below at `log_prob_min_clamp`):

$$D_t=\sum_{j=1}^{k}\nu(v_j)\,\big(\log\nu(v_j)-\log\pi_\theta(v_j)\big)$$

the forward KL $\mathrm{KL}(\nu\,\|\,\pi_\theta)$ restricted to the teacher's top $k$. Because neither
distribution sums to 1 over $k$ tokens, $D_t$ can be negative (the loss later clamps it at 0). The
diagnostics are the mass each side puts on those $k$ tokens, and the overlap of the teacher's and the
student's own top-$k$ sets (verl follows arXiv:2604.13016 here).

What minirl simplifies: padded `[B, R, ...]` tensors instead of verl's packed (nested) ones, no
sequence-parallel slicing, and no `use_chunked_topk` path (verl: stream the log-softmax in chunks to
save memory at long context).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minirl.utils.config import cfg_get

__all__ = ["compute_forward_kl_topk", "kl_divergence"]


def kl_divergence(log_q: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
    r"""$\sum_v p(v)\,(\log p(v)-\log q(v))$ over the last dimension, in float32.

    Mirrors `kl_divergence` (`verl/trainer/distillation/fsdp/losses.py:66`).
    """
    log_p, log_q = log_p.float(), log_q.float()
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1)


def compute_forward_kl_topk(student_logits: torch.Tensor, teacher_topk_log_probs: torch.Tensor,
                            teacher_topk_ids: torch.Tensor, config, data_format: str = "bshd") -> dict:
    """Per-token top-k forward KL and its diagnostics, all `[B, R]`.

    Args:
        student_logits: `[B, R, V]`, the student's (temperature-scaled) logits at the response positions.
        teacher_topk_log_probs: `[B, R, k]`, the teacher's log-probs of its top-k tokens (rank order).
        teacher_topk_ids: `[B, R, k]`, those tokens' ids.
        config: the `distillation` config (reads `distillation_loss.log_prob_min_clamp`).
        data_format: verl's packing format ("thd" | "bshd"); minirl's tensors are always padded.

    Returns:
        `distillation_losses`, `student_mass`, `teacher_mass`, `overlap_count` (how many of the student's
        own top-k tokens are among the teacher's) and `overlap_token_advantage` (minus the mean per-token
        KL contribution over the overlapping tokens).
    """
    if student_logits.shape[:2] != teacher_topk_ids.shape[:2] or teacher_topk_ids.shape != teacher_topk_log_probs.shape:
        raise ValueError(
            f"compute_forward_kl_topk: student logits {tuple(student_logits.shape)} [B, R, V], teacher ids "
            f"{tuple(teacher_topk_ids.shape)} and log-probs {tuple(teacher_topk_log_probs.shape)} [B, R, k] must "
            "agree on B and R. Fix: store the teacher's top-k for every response token (distillation.distillation_loss.topk).")
    k = teacher_topk_ids.shape[-1]
    student_log_probs = F.log_softmax(student_logits.float(), dim=-1)
    student_topk_ids = torch.topk(student_log_probs, k=k, dim=-1).indices
    student_topk_log_probs = torch.gather(student_log_probs, dim=-1, index=teacher_topk_ids.long())
    teacher_topk_log_probs = teacher_topk_log_probs.float()
    student_mass = student_topk_log_probs.exp().sum(dim=-1)
    teacher_mass = teacher_topk_log_probs.exp().sum(dim=-1)
    min_clamp = cfg_get(cfg_get(config, "distillation_loss"), "log_prob_min_clamp")
    if min_clamp is not None:
        student_topk_log_probs = student_topk_log_probs.clamp_min(float(min_clamp))
        teacher_topk_log_probs = teacher_topk_log_probs.clamp_min(float(min_clamp))
    distillation_losses = kl_divergence(log_q=student_topk_log_probs, log_p=teacher_topk_log_probs)

    # overlap diagnostics: which of the student's own top-k tokens the teacher also ranks in its top-k
    overlap_mask = (teacher_topk_ids.long().unsqueeze(-1) == student_topk_ids.unsqueeze(-2)).any(dim=-1)
    overlap_count = overlap_mask.sum(dim=-1)
    token_kl = teacher_topk_log_probs.exp() * (teacher_topk_log_probs - student_topk_log_probs)
    advantage_sum = (-token_kl * overlap_mask).sum(dim=-1)
    overlap_token_advantage = torch.where(overlap_count > 0, advantage_sum / overlap_count.clamp_min(1),
                                          torch.zeros_like(advantage_sum))
    return {"distillation_losses": distillation_losses, "student_mass": student_mass, "teacher_mass": teacher_mass,
            "overlap_count": overlap_count, "overlap_token_advantage": overlap_token_advantage}
