"""`trainer.v1` and `algorithm.rollout_correction`: the async trainers' keys and rollout correction, one docstring each.

verl: the `trainer.v1` block of `verl/trainer/config/_generated_ppo_trainer.yaml` (read by
`PPOTrainer.__init__` / `_build_replay_buffer`, `verl/trainer/ppo/v1/trainer_base.py:125`,
`PPOTrainerSeparateAsync.__init__`, `verl/trainer/ppo/v1/trainer_separate_async.py:50`,
`HybridRolloutSwitchConfig`) and `RolloutCorrectionConfig` (`verl/trainer/config/algorithm.py:63`).
Every key verl has at the pin is here. minirl implements all of them except the separate_async hybrid
switch (`hybrid_rollout.*`), the custom sampler (`sampler.custom_sampler.*`, `sampler_kwargs`) and
`sampler.sync_refill_failed_groups`, which must stay at their defaults (`minirl.config.unimplemented`).
`minirl.config.values` checks the values and verl's asserts at load time. Kept apart from
`minirl.config.schema` so each file stays small; `schema.AlgoConfig` and `schema.TrainerConfig` use it.
The rollout-correction thresholds are strings or numbers: `parse_rollout_is_threshold` and
`parse_rollout_rs_thresholds` say what they mean, for the config check and for the formulas
(`minirl.trainer.ppo.rollout_corr_helper`) alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ROLLOUT_RS_OPTIONS",
    "TRAINER_MODES",
    "ColocateAsyncConfig",
    "HybridRolloutSwitchConfig",
    "RolloutCorrectionConfig",
    "SamplerConfig",
    "SeparateAsyncConfig",
    "TrainerV1Config",
    "parse_rollout_is_threshold",
    "parse_rollout_rs_thresholds",
]

TRAINER_MODES = ("sync", "colocate_async", "separate_async")
"""verl's registered V1 trainers (`register_trainer`), all three implemented by minirl."""
OFF_POLICY_STRATEGIES = ("drop", "wait")


# ----------------------------------------------------------------------------------------- trainer.v1


@dataclass
class ColocateAsyncConfig:
    """`trainer.v1.colocate_async` (verl: read by `PPOTrainerColocateAsync.on_train_begin`)."""

    num_warmup_batches: int = 1
    """Extra batches of `data.train_batch_size` prompts put up for generation before the first step, so the
    rollout always has a batch ahead of the trainer (the source of policy lag)."""


@dataclass
class HybridRolloutSwitchConfig:
    """`trainer.v1.separate_async.hybrid_rollout` (verl: `HybridRolloutSwitchConfig`): lend the trainer's own
    rollout replicas to generation while the trainer idles. Not implemented by minirl (it has no hybrid
    replicas next to its standalone servers): every key must stay at its default (see `minirl.config.unimplemented`)."""

    enable_switch: bool = False
    """verl: switch the hybrid replicas between training and rollout at step boundaries."""
    switch_threshold_ratio: float = 0.4
    """verl: share of train_batch_size that must be sampleable before the hybrid engine goes back to training."""
    adaptive_switch_threshold: bool = True
    """verl: move that ratio up after idle steps and down after calm ones."""
    switch_threshold_step_up: float = 0.05
    """verl: how much one adaptation raises the ratio."""
    switch_threshold_step_down: float = 0.03
    """verl: how much one adaptation lowers the ratio."""
    switch_threshold_release_steps: int = 2
    """verl: consecutive idle (calm) steps before the ratio moves."""
    switch_cost_window_size: int = 3
    """verl: switches averaged to estimate what a switch costs."""


@dataclass
class SeparateAsyncConfig:
    """`trainer.v1.separate_async` (verl: read by `PPOTrainerSeparateAsync` and `PPOTrainer.__init__`)."""

    num_warmup_batches: int = 1
    """Extra batches of prompts put up for generation before the first step (as in colocate_async)."""
    parameter_sync_step: int = 4
    """Local updates per global step: the step samples `train_batch_size / parameter_sync_step` prompts this many
    times, each an optimizer step against the same pi_old, and syncs the weights once at the end. verl asserts
    `train_batch_size == parameter_sync_step * ppo_mini_batch_size`."""
    hybrid_rollout: HybridRolloutSwitchConfig = field(default_factory=HybridRolloutSwitchConfig)
    """verl's hybrid switch (not implemented by minirl)."""


@dataclass
class CustomSamplerConfig:
    """`trainer.v1.sampler.custom_sampler`: a user ReplayBuffer subclass (verl: `_build_replay_buffer`). minirl takes
    a subclass of its `ReplayBufferAsync` (async trainers only), built with that class's arguments."""

    path: str | None = None
    """The Python file holding the class, or `pkg://<module>` (`pkg://__main__`: the notebook's own namespace)."""
    name: str | None = None
    """The class name."""


@dataclass
class SamplerConfig:
    """`trainer.v1.sampler`: how the ReplayBuffer decides what is trainable (verl: `_build_replay_buffer`)."""

    max_off_policy_threshold: int = 8
    """The most steps a prompt may span from its fetch to its training: a group fetched at step g trained at
    step k spans k - g + 1 (1: fetched this step). Must be an integer >= 1 (verl asserts > 0)."""
    max_off_policy_strategy: str = "drop"
    """drop: evict finished groups that span more than the threshold and refill exactly as many new prompts;
    wait: evict nothing, but do not sample while an in-flight prompt has reached the threshold. Async only
    (a no-op in sync mode, as in verl)."""
    sync_refill_failed_groups: bool = False
    """verl: sync mode replaces failed groups with new prompts. Not implemented by minirl: must stay at its
    default (see `minirl.config.unimplemented`)."""
    custom_sampler: CustomSamplerConfig = field(default_factory=CustomSamplerConfig)
    """A custom ReplayBufferAsync subclass loaded by path and name (the async trainers)."""
    sampler_kwargs: dict = field(default_factory=dict)
    """verl: extra keyword arguments for the sampler. Not implemented by minirl: must stay `{}`."""


@dataclass
class TrainerV1Config:
    """`trainer.v1`: which V1 trainer runs the loop, and the async trainers' settings."""

    trainer_mode: str = "sync"
    """sync | colocate_async | separate_async (verl's three V1 trainers)."""
    sync: dict = field(default_factory=dict)
    """The sync trainer has no settings (verl: `{}`)."""
    colocate_async: ColocateAsyncConfig = field(default_factory=ColocateAsyncConfig)
    """Rollout in the trainer's process, generating only while the trainer waits for data."""
    separate_async: SeparateAsyncConfig = field(default_factory=SeparateAsyncConfig)
    """Rollout servers of their own, generating while the trainer optimises."""
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    """The ReplayBuffer's staleness control."""


# ------------------------------------------------------------------------------- rollout correction


@dataclass
class RolloutCorrectionConfig:
    """`algorithm.rollout_correction` (verl: `RolloutCorrectionConfig`, `verl/trainer/config/algorithm.py:63`).

    Two modes. Decoupled (`bypass_mode=False`, three policies: the rollout's $\\pi_{\\text{roll}}$, the
    proximal anchor $\\pi_{\\text{old}}$ recomputed by the actor, the trained $\\pi_\\theta$): after the
    old log-probs, the trainer computes importance weights $\\pi_{\\text{old}}/\\pi_{\\text{roll}}$
    (`rollout_is`) and a rejection mask (`rollout_rs`) once per batch and the policy loss multiplies its
    per-token terms by the weights (`minirl.trainer.ppo.rollout_corr_helper`). Bypass
    (`bypass_mode=True`, two policies): `old_log_probs = rollout_log_probs`, no actor forward; the policy
    loss is the actor's `policy_loss.loss_mode` (`bypass_mode` there reads `policy_loss.rollout_correction`).
    Defaults are the YAML's (verl's YAML too: `rollout_is: null`; the dataclass alone defaults to
    `sequence`). The named presets of verl's class are `minirl.trainer.ppo.rollout_corr_helper.PRESETS`.
    """

    rollout_is: str | None = None
    """IS weight level: token (one weight per token), sequence (the product over the response), or null (none:
    metrics only)."""
    rollout_is_threshold: Any = 2.0
    """A number: truncate the weights at it (TIS); a 'lower_upper' string such as '0.5_5.0': zero the weights
    outside [lower, upper] (IcePop)."""
    rollout_rs: str | None = None
    """Rejection criteria, comma-separated (token_k1, seq_sum_k1, seq_mean_k3, seq_max_k2, ...), or null (none).
    Rejected tokens leave `response_mask`."""
    rollout_rs_threshold: Any = None
    """One bound per criterion (or one shared); k1 criteria take 'lower_upper' ratio bounds."""
    bypass_mode: bool = False
    """True: use the rollout's log-probs as `old_log_probs` instead of recomputing them with the actor
    (saves one forward pass per step; exact only when rollout and actor compute the same numbers, as the
    fp32 hf rollout does)."""
    loss_type: str = "ppo_clip"
    """Bypass mode's loss (ppo_clip | reinforce), read by `loss_mode=bypass_mode` from the actor's
    `policy_loss.rollout_correction`; verl's V1 trainer does not read this copy (its legacy trainer's
    `apply_bypass_mode` copies this section there), so minirl requires the two to agree."""
    rollout_is_batch_normalize: bool = False
    """Divide the weights by their mean over the batch (mean 1)."""


# ------------------------------------------------------------------------- what the thresholds mean

ROLLOUT_RS_OPTIONS = tuple(
    f"{level}_{k}" for level in ("token", "seq_sum", "seq_mean") for k in ("k1", "k2", "k3")
) + ("seq_max_k2", "seq_max_k3")
"""The rejection criteria `rollout_rs` accepts (comma-separated to combine)."""


def parse_rollout_is_threshold(spec: Any) -> tuple[float, float | None]:
    """`rollout_is_threshold` -> (upper, lower or None): a number (or "2.0") truncates, "lower_upper" is IcePop.

    verl: `_parse_rollout_is_threshold` (`verl/trainer/ppo/rollout_corr_helper.py:93`); minirl parses in
    config so that the check at load time and the formula read the value the same way.
    """
    fix = "Fix: use a positive number (e.g. 2.0) or a 'lower_upper' string (e.g. '0.5_2.0')."
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise TypeError(f"rollout_is_threshold={spec!r} is not a threshold. {fix}")
    text = str(spec).strip()
    try:
        lower, upper = (float(x) for x in text.split("_", 1)) if "_" in text else (None, float(text))
    except ValueError as e:
        raise ValueError(f"rollout_is_threshold={spec!r} is not a threshold. {fix}") from e
    if upper <= 0 or (lower is not None and not 0 < lower <= upper):
        raise ValueError(f"rollout_is_threshold={spec!r}: the bounds must satisfy 0 < lower <= upper. {fix}")
    return upper, lower


def parse_rollout_rs_thresholds(options: list[str], spec: Any) -> dict[str, tuple[float | None, float]]:
    """`rollout_rs_threshold` -> {option: (lower or None, upper)}: one entry shared, or one per option.

    verl: `_parse_rollout_rs_thresholds` (`verl/trainer/ppo/rollout_corr_helper.py:132`).
    """
    fix = ("Fix: one positive number shared by all options, or one per option separated by commas; a k1 option "
           "takes 'lower_upper' ratio bounds (e.g. '0.5_2.0').")
    if spec is None:
        raise ValueError(f"rollout_rs={','.join(options)} needs rollout_rs_threshold. {fix}")
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise TypeError(f"rollout_rs_threshold={spec!r} is not a threshold. {fix}")
    parts = [spec] if not isinstance(spec, str) else [x.strip() for x in spec.split(",") if x.strip()]
    if len(parts) not in (1, len(options)):
        raise ValueError(f"rollout_rs_threshold={spec!r} has {len(parts)} entries for {len(options)} options. {fix}")
    parts = parts * len(options) if len(parts) == 1 else parts
    out = {}
    for option, part in zip(options, parts):
        text = str(part)
        try:
            if option.endswith("k1"):  # ratio bounds; one number is the upper one, its inverse the lower
                lower, upper = (float(x) for x in text.split("_", 1)) if "_" in text else (1 / float(text), float(text))
            elif "_" in text:
                raise ValueError
            else:
                lower, upper = None, float(text)
        except (ValueError, ZeroDivisionError) as e:
            raise ValueError(f"rollout_rs_threshold entry {text!r} does not fit option {option!r}. {fix}") from e
        if upper <= 0 or (lower is not None and not 0 < lower <= upper):
            raise ValueError(f"rollout_rs_threshold entry {text!r} for {option!r} must be positive, lower <= upper. "
                             f"{fix}")
        out[option] = (lower, upper)
    return out
