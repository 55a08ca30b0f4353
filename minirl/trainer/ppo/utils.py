"""Which models a run needs, decided from the config alone (verl: `verl/trainer/ppo/utils.py`).

`need_critic` (`verl/trainer/ppo/utils.py:96`) and `need_reference_policy`
(`verl/trainer/ppo/utils.py:75`) are read by the config validator, the trainer and the notebooks,
so the answer to "does this run have a critic / a reference policy?" is written once, here.
This module imports nothing heavy: the config checks use it before torch is loaded.
"""

from __future__ import annotations

CRITIC_ESTIMATORS = ("gae",)
"""Advantage estimators that read `values` (verl: only `AdvantageEstimator.GAE` turns the critic on)."""


def need_critic(config) -> bool:
    """The critic runs when `critic.enable` says so, or (null) when the estimator needs values (gae).

    verl warns when it turns the critic off for a non-GAE estimator; minirl stays quiet (GRPO is its default).
    """
    if config.critic.enable is not None:
        return bool(config.critic.enable)
    return config.algorithm.adv_estimator in CRITIC_ESTIMATORS


def need_reference_policy(config) -> bool:
    """The reference policy runs when a KL option is on: `algorithm.use_kl_in_reward` or `actor.use_kl_loss`."""
    return bool(config.algorithm.get("use_kl_in_reward", False) or config.actor_rollout_ref.actor.use_kl_loss)


def model_parallel_size(config, role: str = "actor") -> int:
    """Ranks that share one data chunk: `torchtitan.tensor_parallel_size` of the role's engine, else 1.

    `role` is `actor` (`actor_rollout_ref.actor`) or `critic`; with `strategy: fsdp2` every rank is
    its own data-parallel rank (minirl: no pipeline or context parallelism, see chapter 07).
    """
    section = config.critic if role == "critic" else config.actor_rollout_ref.actor
    if section.get("strategy") != "torchtitan" or section.get("torchtitan") is None:
        return 1
    return int(section.torchtitan.get("tensor_parallel_size", 1))


def data_parallel_size(config, role: str = "actor") -> int:
    """Data-parallel ranks the batch is split over: `trainer.nnodes * trainer.n_gpus_per_node / tp`.

    verl: the engine's `get_data_parallel_size()` (world / the model-parallel sizes); the nd-mesh
    dispatch cuts every batch into this many chunks.
    """
    world = int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)
    return max(1, world // max(1, model_parallel_size(config, role)))


__all__ = ["CRITIC_ESTIMATORS", "data_parallel_size", "model_parallel_size", "need_critic", "need_reference_policy"]
