"""Lab 09's checks: a reader's policy loss against minirl's, saying *where* they differ, never what to return.

No verl counterpart (verl has no labs). `policy_loss_disagreements(fn, "cispo", config)` calls the
reader's function with `core_algos`'s policy-loss signature on probe inputs and compares the loss and
its gradient with the registered function of that name. Each probe isolates one thing (tokens inside
the clip window, above it, below it, each sign of the advantage; every `loss_agg_mode`; with
`rollout_is_weights`), so a mismatch is reported as a sentence about the region or the option where
it happens, e.g. "the gradient differs where rho > 1 + clip_ratio_high and A > 0". Numbers are
not shown: the reader fixes the formula, not a constant. A function that raises `NotImplementedError`
(the exercise cell as committed) is passed on, so that the lab's check reports it as not answered.

`gspo_log_ratio_disagreements(fn, config)` does the same for a function returning GSPO's per-token
log-ratio $\\log s_{i,t}$, plugged into GSPO's clipped loss.
"""

from __future__ import annotations

import math

import torch

from minirl.trainer.ppo import core_algos

__all__ = ["gspo_log_ratio_disagreements", "policy_loss_disagreements"]

_REGIONS = {  # (ratio, advantage) probes; one token each
    "inside the clip window (A > 0)": (1.05, 1.0), "inside the clip window (A < 0)": (0.95, -1.0),
    "where rho > 1 + clip_ratio_high and A > 0": (1.8, 1.0), "where rho > 1 + clip_ratio_high and A < 0": (1.8, -1.0),
    "where rho < 1 - clip_ratio_low and A > 0": (0.4, 1.0), "where rho < 1 - clip_ratio_low and A < 0": (0.4, -1.0),
}


def _call(fn, old, lp, adv, mask, mode, config, weights=None):
    out = fn(old_log_prob=old, log_prob=lp, advantages=adv, response_mask=mask, loss_agg_mode=mode, config=config,
             rollout_is_weights=weights)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f"returned {type(out).__name__}; return a pair (loss, metrics)")
    loss = out[0]
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
        raise TypeError("the loss must be a 0-d tensor (one number for the whole batch)")
    return loss


def _value_and_grad(fn, old, lp0, adv, mask, mode, config, weights=None):
    lp = lp0.clone().requires_grad_(True)
    loss = _call(fn, old, lp, adv, mask, mode, config, weights)
    if not loss.requires_grad:
        raise TypeError("the loss has no gradient: compute it from log_prob (the one input that requires grad)")
    loss.backward()
    return float(loss.detach()), lp.grad


def _close(a, b, tol=1e-5) -> bool:
    if isinstance(a, torch.Tensor):
        return bool(torch.allclose(a, b, atol=tol, rtol=1e-4, equal_nan=True))
    return math.isclose(a, b, rel_tol=1e-4, abs_tol=tol)


def _random_batch(seed: int, bs: int = 6, T: int = 7):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (bs,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).float()
    mask[0, 0] = 0.0 if lengths[0] > 1 else 1.0  # a hole (a tool observation)
    old = -3 * torch.rand(bs, T, generator=g)
    lp = old + 0.6 * torch.randn(bs, T, generator=g)  # ratios well inside and well outside the window
    adv = torch.randn(bs, T, generator=g)
    return old, lp, adv, mask, 0.5 + torch.rand(bs, T, generator=g)


def policy_loss_disagreements(fn, reference: str, config) -> list[str]:
    """Where `fn` and the registered loss `reference` disagree: [] when they agree on every probe.

    Probes: one token in each region of `_REGIONS` (loss value and gradient), then random batches
    under every `loss_agg_mode`, then with `rollout_is_weights`.
    """
    ref = core_algos.get_policy_loss_fn(reference)
    problems: list[str] = []
    try:
        for where, (r, a) in _REGIONS.items():
            old = torch.tensor([[math.log(0.3)]])
            lp = torch.tensor([[math.log(0.3 * r)]])
            adv, mask = torch.tensor([[a]]), torch.ones(1, 1)
            v_ref, g_ref = _value_and_grad(ref, old, lp, adv, mask, "token-mean", config)
            v, g = _value_and_grad(fn, old, lp, adv, mask, "token-mean", config)
            if not _close(v, v_ref):
                problems.append(f"the per-token loss differs {where}")
            elif not _close(g, g_ref):
                problems.append(f"the loss agrees but its gradient differs {where}: which factor must not carry a "
                                "gradient (.detach())?")
        if problems:
            return problems
        for mode in core_algos.LOSS_AGG_MODES:
            for seed in (0, 1):
                batch = _random_batch(seed)
                v_ref, g_ref = _value_and_grad(ref, *batch[:4], mode, config)
                v, g = _value_and_grad(fn, *batch[:4], mode, config)
                if not (_close(v, v_ref) and _close(g, g_ref)):
                    problems.append(f"differs under loss_agg_mode={mode!r} on a batch with padding: reduce the per-token "
                                    "losses with core_algos.agg_loss(loss_mat, response_mask, loss_agg_mode, "
                                    "**config.global_batch_info)")
                    break
        batch = _random_batch(2)
        if not problems:
            v_ref, g_ref = _value_and_grad(ref, *batch[:4], "token-mean", config, batch[4])
            v, g = _value_and_grad(fn, *batch[:4], "token-mean", config, batch[4])
            if not (_close(v, v_ref) and _close(g, g_ref)):
                problems.append("differs when rollout_is_weights is given: multiply the per-token losses by them "
                                "before aggregating (None means no weights)")
    except NotImplementedError:  # not written yet: the lab's check says "not answered" (minirl.notebook.checks)
        raise
    except Exception as e:  # noqa: BLE001 (the reader's code: report it in one line)
        problems.append(f"your function raised {type(e).__name__}: {e} (it is called with keyword arguments "
                        "old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights)")
    return problems


def gspo_log_ratio_disagreements(fn, config) -> list[str]:
    """Where GSPO's loss built on `fn(log_prob, old_log_prob, response_mask) -> log s [B, T]` differs from minirl's gspo."""

    def gspo_with(log_prob, old, adv, mask):
        clip_low, clip_high = core_algos._clip_range(config)
        s = torch.exp(torch.clamp(fn(log_prob, old, mask), max=10.0))
        losses = torch.maximum(-adv * s, -adv * torch.clamp(s, 1 - clip_low, 1 + clip_high))
        return core_algos.agg_loss(losses, mask, "seq-mean-token-mean")

    problems: list[str] = []
    try:
        for seed in (0, 1, 2):
            old, lp0, adv, mask, _ = _random_batch(seed)
            adv = adv[:, :1].expand_as(adv).contiguous()  # one advantage per response, as GRPO gives
            out = fn(lp0, old, mask)
            if not (isinstance(out, torch.Tensor) and out.shape == lp0.shape):
                return [f"return one log-ratio per token, a tensor shaped like log_prob {tuple(lp0.shape)}"]
            lp_a, lp_b = lp0.clone().requires_grad_(True), lp0.clone().requires_grad_(True)
            mine = gspo_with(lp_a, old, adv, mask)
            ref, _ = core_algos.compute_policy_loss_gspo(old, lp_b, adv, mask, "seq-mean-token-mean", config)
            m = mask.bool()
            if not _close(float(mine.detach()), float(ref.detach())):
                per_row = [torch.unique(out.detach()[i][m[i]].round(decimals=5)).numel() for i in range(len(m))]
                if any(n > 1 for n in per_row):
                    problems.append("the log-ratio is not the same for every token of a response: GSPO's ratio is "
                                    "one number per sequence")
                else:
                    problems.append("the value of the sequence log-ratio is wrong: average log pi - log pi_old over "
                                    "the response's unmasked tokens")
                break
            mine.backward()
            ref.backward()
            if not _close(lp_a.grad, lp_b.grad):
                problems.append("the value agrees but the gradient differs: each token's gradient must flow through "
                                "its own log pi only (sg[log s_i] + log pi - sg[log pi])")
                break
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001
        problems.append(f"your function raised {type(e).__name__}: {e} (it is called as fn(log_prob, old_log_prob, "
                        "response_mask))")
    return problems
