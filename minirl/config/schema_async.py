"""`trainer.v1` and `algorithm.rollout_correction`: the async trainers' keys and rollout correction, one docstring each.

verl: the `trainer.v1` block of `verl/trainer/config/_generated_ppo_trainer.yaml` (read by
`PPOTrainer.__init__` / `_build_replay_buffer`, `verl/trainer/ppo/v1/trainer_base.py:125`,
`PPOTrainerSeparateAsync.__init__`, `verl/trainer/ppo/v1/trainer_separate_async.py:50`,
`HybridRolloutSwitchConfig`) and `RolloutCorrectionConfig` (`verl/trainer/config/algorithm.py:63`).
Every key verl has at the pin is here. minirl implements all of them except the separate_async hybrid
switch (`hybrid_rollout.*`), the custom sampler (`sampler.custom_sampler.*`, `sampler_kwargs`) and
`sampler.sync_refill_failed_groups`, which must stay at their defaults (`minirl.config.unimplemented`).
`async_problems` checks the values and verl's asserts at load time. Kept apart from
`minirl.config.schema` so each file stays small; `schema.AlgoConfig` and `schema.TrainerConfig` use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf

__all__ = ["TRAINER_MODES", "ColocateAsyncConfig", "HybridRolloutSwitchConfig", "RolloutCorrectionConfig",
           "SamplerConfig", "SeparateAsyncConfig", "TrainerV1Config", "async_problems"]

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
    """`trainer.v1.sampler.custom_sampler`: a user ReplayBuffer subclass. Not implemented by minirl: must stay at
    its default (see `minirl.config.unimplemented`)."""

    path: str | None = None
    """verl: the Python file holding the class."""
    name: str | None = None
    """verl: the class name."""


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
    """verl: a custom ReplayBuffer class (not implemented by minirl)."""
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


# ------------------------------------------------------------------------------------------ checks


def _reward_model_colocated(cfg) -> bool:
    rm = OmegaConf.select(cfg, "reward.reward_model")
    return bool(rm is not None and rm.enable and not rm.enable_resource_pool)


def _trainer_v1_problems(cfg) -> list[str]:
    v1, mode = cfg.trainer.v1, str(cfg.trainer.v1.trainer_mode)
    r = "actor_rollout_ref.rollout"
    key = "trainer.v1.trainer_mode"
    if mode not in TRAINER_MODES:
        return [f"{key}={mode!r} is not a V1 trainer (verl registers {', '.join(TRAINER_MODES)}). Fix: {key}=sync."]
    p: list[str] = []
    s = v1.sampler
    t = s.max_off_policy_threshold
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        p.append(f"trainer.v1.sampler.max_off_policy_threshold={t!r} must be an integer >= 1: the most steps a prompt "
                 "may span from fetch to training, 1 = fetched this step (verl asserts > 0). "
                 "Fix: trainer.v1.sampler.max_off_policy_threshold=1 (no policy lag) or more.")
    if s.max_off_policy_strategy not in OFF_POLICY_STRATEGIES:
        p.append(f"trainer.v1.sampler.max_off_policy_strategy={s.max_off_policy_strategy!r} is not a strategy (verl "
                 "asserts drop or wait). Fix: trainer.v1.sampler.max_off_policy_strategy=drop.")
    for m in ("colocate_async", "separate_async"):
        w = v1[m].num_warmup_batches
        if int(w) < 0:
            p.append(f"trainer.v1.{m}.num_warmup_batches={w} must be >= 0 (batches generated ahead). "
                     f"Fix: trainer.v1.{m}.num_warmup_batches=1.")
    if mode != "sync" and cfg.algorithm.adv_estimator == "remax":
        p.append(f"algorithm.adv_estimator='remax' runs in {key}=sync only: its greedy baselines are sampled with "
                 f"each batch (verl's V1 trainer has no remax), but {key}={mode!r}. "
                 f"Fix: {key}=sync, or another estimator (e.g. algorithm.adv_estimator=grpo).")
    nnodes = int(OmegaConf.select(cfg, f"{r}.nnodes") or 0)
    if mode == "colocate_async" and nnodes != 0:
        p.append(f"{key}='colocate_async' runs the rollout with the trainer (verl: hybrid replicas on the training "
                 f"GPUs; minirl: the in-controller engine), but {r}.nnodes={nnodes} starts standalone servers, which "
                 f"are separate_async's. Fix: {r}.nnodes=0 {r}.checkpoint_engine.backend=naive, or "
                 f"{key}=separate_async.")
    if mode == "separate_async":
        tbs, pmbs = int(cfg.data.train_batch_size), int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size)
        psync = int(v1.separate_async.parameter_sync_step)
        if psync < 1:
            p.append(f"trainer.v1.separate_async.parameter_sync_step={psync} must be >= 1 (local updates per weight "
                     "sync). Fix: trainer.v1.separate_async.parameter_sync_step=1.")
        elif tbs != psync * pmbs:
            fix = f"actor_rollout_ref.actor.ppo_mini_batch_size={tbs // psync}" if tbs % psync == 0 else \
                f"trainer.v1.separate_async.parameter_sync_step={max(1, tbs // pmbs)}"
            p.append(f"{key}='separate_async' needs data.train_batch_size == parameter_sync_step * ppo_mini_batch_size "
                     f"(verl asserts it: each local update is one mini-batch), but {tbs} != {psync} * {pmbs}. "
                     f"Fix: {fix}.")
        if nnodes < 1:
            p.append(f"{key}='separate_async' generates on standalone rollout servers (verl asserts rollout.nnodes > 0 "
                     f"and a streaming checkpoint engine), but {r}.nnodes={nnodes}. Fix: {r}.nnodes=1 "
                     f"{r}.n_gpus_per_node=1 {r}.checkpoint_engine.backend=nccl.")
        if _reward_model_colocated(cfg):
            p.append(f"{key}='separate_async' with reward.reward_model.enable=True needs "
                     "reward.reward_model.enable_resource_pool=True: the standalone rollout never pauses, so a reward "
                     "model colocated with the actor has no time to run (verl asserts it). "
                     "Fix: reward.reward_model.enable_resource_pool=True.")
    return p


def _rollout_correction_problems(cfg) -> list[str]:
    rc = cfg.algorithm.rollout_correction
    key = "algorithm.rollout_correction"
    p: list[str] = []
    if rc.rollout_is is not None and rc.rollout_is not in ("token", "sequence"):
        p.append(f"{key}.rollout_is={rc.rollout_is!r} is not an IS level. Fix: token, sequence or null (none).")
    if rc.loss_type not in ("ppo_clip", "reinforce"):
        p.append(f"{key}.loss_type={rc.loss_type!r} is not a bypass-mode loss. Fix: ppo_clip or reinforce.")
    from minirl.trainer.core_algos import _parse_is_threshold, _parse_rs_thresholds

    if rc.rollout_is is not None:
        try:
            _parse_is_threshold(rc.rollout_is_threshold)
        except (TypeError, ValueError) as e:
            p.append(f"{key}.{e}")
    if rc.rollout_rs is not None:
        from minirl.trainer.core_algos import ROLLOUT_RS_OPTIONS

        options = [o.strip() for o in str(rc.rollout_rs).split(",") if o.strip()]
        unknown = [o for o in options if o not in ROLLOUT_RS_OPTIONS]
        if unknown or not options:
            p.append(f"{key}.rollout_rs={rc.rollout_rs!r}: unknown criteria {unknown}. Fix: one or more of "
                     f"{', '.join(ROLLOUT_RS_OPTIONS)}, comma-separated, or null.")
        else:
            try:
                _parse_rs_thresholds(list(dict.fromkeys(options)), rc.rollout_rs_threshold)
            except (TypeError, ValueError) as e:
                p.append(f"{key}.{e}")
    if rc.bypass_mode:
        p += _bypass_problems(cfg)
    if not cfg.actor_rollout_ref.rollout.calculate_log_probs and (rc.rollout_is is not None or rc.rollout_rs is not None):
        p.append(f"{key}.rollout_is / rollout_rs correct towards the rollout's log-probs, but "
                 "actor_rollout_ref.rollout.calculate_log_probs=False (verl then skips the correction silently). "
                 "Fix: actor_rollout_ref.rollout.calculate_log_probs=True.")
    return p


_BYPASS_KEYS = ("rollout_is", "rollout_is_threshold", "rollout_rs", "rollout_rs_threshold", "loss_type",
                "rollout_is_batch_normalize")


def _bypass_problems(cfg) -> list[str]:
    """Bypass mode: the algorithm section's IS / RS / loss_type act only through the actor's bypass_mode loss.

    verl's V1 trainer only swaps `old_log_probs` in bypass mode (`_compute_old_log_prob`,
    `verl/trainer/ppo/v1/trainer_base.py:1529`) and skips the decoupled correction; the loss reads
    `actor.policy_loss.rollout_correction`. Its legacy trainer copies this section there (`apply_bypass_mode`,
    `verl/trainer/ppo/rollout_corr_helper.py:1109`). So a key set here that the actor does not share would be
    silently ignored: minirl says so instead.
    """
    rc, defaults = cfg.algorithm.rollout_correction, RolloutCorrectionConfig()
    actor = cfg.actor_rollout_ref.actor.policy_loss
    asked = {k: rc[k] for k in _BYPASS_KEYS if rc[k] != getattr(defaults, k)}
    if not asked:
        return []
    a = "actor_rollout_ref.actor.policy_loss"
    copy = " ".join(f"{a}.rollout_correction.{k}={v}" for k, v in asked.items())
    if actor.loss_mode != "bypass_mode":
        return [f"algorithm.rollout_correction.{', '.join(asked)} set with bypass_mode=True, but verl's V1 trainer "
                f"applies them only through the actor's bypass_mode loss and {a}.loss_mode={actor.loss_mode!r}. "
                f"Fix: {a}.loss_mode=bypass_mode {copy} (what verl's apply_bypass_mode does).".replace("=None", "=null")]
    differ = [k for k, v in asked.items() if actor.rollout_correction[k] != v]
    if differ:
        return [f"algorithm.rollout_correction.{', '.join(differ)} differ from {a}.rollout_correction, which the "
                f"bypass_mode loss reads. Fix: {copy}.".replace("=None", "=null")]
    return []


def async_problems(cfg) -> list[str]:
    """One line per bad `trainer.v1` or `algorithm.rollout_correction` value, including verl's asserts."""
    return _trainer_v1_problems(cfg) + _rollout_correction_problems(cfg)
