"""The `reward:` group: which function or model scores a response, and where that runs.

verl: `RewardConfig`, `RewardManagerConfig` and `RewardModelConfig` (`verl/workers/config/reward.py`),
with the `reward:` block of `verl/trainer/config/_generated_ppo_trainer.yaml`. Where the reward is
computed follows from `reward.reward_model` (`RewardLoopManager.reward_loop_worker_handles`,
`verl/experimental/reward_loop/reward_loop.py:313`): without a reward model, or with one that has its
own resources, every session is scored in the agent loop as it ends; a reward model colocated with
the actor scores the sampled batch in the trainer's `reward` stage (`minirl.workers.reward.reward_loop`).

minirl leaves out verl's `reward.reward_model.{n_gpus_per_node, nnodes, rollout}` (the model's own
inference servers) and `reward.sandbox_fusion`; `reward.reward_manager.source` must stay `register`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CustomRewardFunctionConfig:
    """`reward.custom_reward_function`: a user's score function loaded from a file."""

    path: str | None = None
    """Python file defining the function (null: the built-in scorer chosen by data_source). It is imported and its
    signature checked at start-up, before any step."""
    name: str = "compute_score"
    """Function name in that file: `fn(data_source, solution_str, ground_truth, extra_info) -> float | dict` (the
    `batch` manager: `fn(data_sources, solution_strs, ground_truths, extra_infos) -> list`)."""
    reward_kwargs: dict = field(default_factory=dict)
    """Keyword arguments bound to the function on every call (`+reward.custom_reward_function.reward_kwargs.width=20`).
    verl reads them too (`get_custom_reward_fn`, `verl/trainer/ppo/reward.py:50`), but its YAML lacks the key: a
    leading '+' adds it there as here."""


@dataclass
class RewardManagerConfig:
    """`reward.reward_manager`: which reward manager turns responses into scores."""

    source: str = "register"
    """register: a manager registered by name (verl also: importlib). Not implemented by minirl: must stay at its
    default (see `minirl.config.unimplemented`)."""
    name: str = "naive"
    """naive (one call per sample) | dapo (naive + DAPO's overlong penalty, `reward.reward_kwargs`) | batch (one
    call of a function of lists for the sessions that end together)."""


@dataclass
class RewardModelConfig:
    """`reward.reward_model`: a learned reward model instead of the rule (verl: `RewardModelConfig`)."""

    enable: bool = False
    """Score with the reward model at `model_path` (an `AutoModelForSequenceClassification`, e.g. one that
    `minirl train-rm` wrote), served on 127.0.0.1 by a process the run starts and stops. A custom reward function,
    if set, still takes precedence (it may query the model itself: it receives `reward_router_address`)."""
    enable_resource_pool: bool = False
    """True: the model has resources of its own, so each session is scored during rollout, as it ends. False
    (verl's default): it is colocated with the actor and scores the sampled batch in the trainer's `reward` stage."""
    model_path: str | None = None
    """Directory of the reward model and its tokenizer (required when `enable`)."""


@dataclass
class RewardConfig:
    """`reward`: how responses are scored (verl: `RewardConfig`, `verl/workers/config/reward.py`)."""

    num_workers: int = 1
    """Reward-loop workers that score concurrently (verl: Ray actors, verl's default `reward.num_workers=8`; minirl:
    objects, running minirl's own rule scorers inline and a user's score function in a daemon thread per call).
    The trainer's `RewardLoopManager` holds this many (a colocated reward model scores there); when the agent loop
    runs in worker processes, each worker scores its own sessions with one of its own."""
    timeout: float = 300.0
    """Seconds one score-function call (or one reward-model request) may take; a call that overruns scores 0 and
    is counted in `reward/failures`. verl reads it (same default) only in its `rate_limited` manager, and its YAML
    lacks it ('+reward.timeout=...' there)."""
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    """User score function."""
    reward_manager: RewardManagerConfig = field(default_factory=RewardManagerConfig)
    """Reward manager."""
    reward_kwargs: dict = field(default_factory=dict)
    """Settings of the reward manager: `dapo` reads `overlong_buffer_cfg` (`enable`, `len`, `penalty_factor`, `log`)
    and `max_resp_len`. A dict: new entries take a leading '+', as on verl's command line
    (`+reward.reward_kwargs.overlong_buffer_cfg.enable=True`)."""
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    """The reward model, if any."""


__all__ = ["CustomRewardFunctionConfig", "RewardConfig", "RewardManagerConfig", "RewardModelConfig"]
