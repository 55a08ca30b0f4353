"""On-policy distillation: the losses (`losses`) and the top-k logits processor (`fsdp.losses`).

verl: `verl/trainer/distillation/` (`__init__.py` re-exports the same names). The teacher server the
losses read from lives in `minirl.workers.teacher` (verl: `verl/experimental/teacher_loop/`).
"""

from minirl.trainer.distillation.losses import (
    DISTILLATION_LOSS_REGISTRY,
    DistillationLossSettings,
    distillation_loss,
    distillation_ppo_loss,
    get_distillation_loss_fn,
    get_distillation_loss_settings,
    is_distillation_enabled,
    register_distillation_loss,
)

__all__ = [
    "DISTILLATION_LOSS_REGISTRY",
    "DistillationLossSettings",
    "distillation_loss",
    "distillation_ppo_loss",
    "get_distillation_loss_fn",
    "get_distillation_loss_settings",
    "is_distillation_enabled",
    "register_distillation_loss",
]
