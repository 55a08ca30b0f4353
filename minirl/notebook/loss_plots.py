"""Pictures of the policy loss: PPO's clip region, computed by the loss function itself.

No verl counterpart (verl has no notebooks). `vanilla_loss_per_token` evaluates
`minirl.trainer.ppo.core_algos.compute_policy_loss_vanilla` (the function the trainer calls) one token at a
time, so the curve a chapter draws is the code's, not a re-derivation; `clip_region` draws it:

    from minirl.notebook import loss_plots
    ratio = torch.linspace(0.05, 4.5, 400)
    curves = {adv: loss_plots.vanilla_loss_per_token(actor_cfg, adv, ratio) for adv in (1.0, -1.0)}
    loss_plots.clip_region(ratio, curves, eps_low=0.2, eps_high=0.2, clip_c=3.0)
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from matplotlib.figure import Figure

from minirl.trainer.ppo import core_algos

__all__ = ["clip_region", "vanilla_loss_per_token"]


def vanilla_loss_per_token(actor_cfg, advantage: float, ratio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(loss, gradient)` of one token at each ratio, from `compute_policy_loss_vanilla` with `actor_cfg`.

    Each ratio is its own one-token batch (`token-sum`, old log-prob 0, so log-prob = log ratio); the
    gradient is $\\partial\\ell/\\partial\\log\\pi_\\theta$, by autograd.
    """
    losses, grads = [], []
    for r in ratio.tolist():
        log_prob = torch.tensor([[r]]).log().requires_grad_()
        loss, _ = core_algos.compute_policy_loss_vanilla(torch.zeros(1, 1), log_prob, torch.full((1, 1), advantage),
                                                         torch.ones(1, 1), "token-sum", actor_cfg)
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append(float(log_prob.grad[0, 0]))
    return torch.tensor(losses), torch.tensor(grads)


def clip_region(ratio: torch.Tensor, curves: Mapping[float, tuple[torch.Tensor, torch.Tensor]], eps_low: float,
                eps_high: float, clip_c: float) -> Figure:
    """One panel per advantage: the unclipped $-A\\rho$, the loss the code computes, its gradient, the clip window
    $[1-\\varepsilon_{low}, 1+\\varepsilon_{high}]$ and (for $A<0$) the dual-clip bound $c$."""
    fig = Figure(figsize=(11, 3.8))
    axes = fig.subplots(1, len(curves), sharex=True, squeeze=False)[0]
    for ax, (adv, (loss, grad)) in zip(axes, curves.items()):
        ax.plot(ratio, -adv * ratio, ":", color="grey", label=r"unclipped $-A\rho$")
        ax.plot(ratio, loss, lw=2, label="vanilla loss (clip + dual clip)")
        ax.plot(ratio, grad, "--", label=r"gradient $\partial\ell/\partial\log\pi_\theta$")
        ax.axvspan(1 - eps_low, 1 + eps_high, color="tab:green", alpha=0.12,
                   label=r"window $[1-\varepsilon, 1+\varepsilon]$")
        if adv < 0:
            ax.axvline(clip_c, color="tab:red", lw=1, label=f"dual clip: rho > c = {clip_c:g}")
        ax.axhline(0, color="k", lw=0.5)
        ax.set_title(f"A = {adv:+g}")
        ax.set_xlabel(r"ratio $\rho=\pi_\theta/\pi_{old}$")
        ax.set_ylabel("per-token loss")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
