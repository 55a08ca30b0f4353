"""Reward managers: responses in, `rm_scores` out (a score on the last valid response token).

verl: the reward-loop managers in `verl/experimental/reward_loop/reward_manager/` (`NaiveRewardManager`,
`verl/experimental/reward_loop/reward_manager/naive.py:24`) and the legacy ones in
`verl/workers/reward_manager/` (`BatchRewardManager`, `verl/workers/reward_manager/batch.py:26`).
"""

from minirl.workers.reward.managers import (
    BatchRewardManager,
    NaiveRewardManager,
    RewardFunctionError,
    get_custom_reward_fn,
    get_reward_manager_cls,
    load_reward_manager,
    register,
)

__all__ = ["NaiveRewardManager", "BatchRewardManager", "RewardFunctionError", "get_custom_reward_fn",
           "get_reward_manager_cls", "load_reward_manager", "register"]
