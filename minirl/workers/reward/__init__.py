"""Rewards: where each is computed (the reward loop), how (the reward managers), and the reward-model server.

Mirrors `verl/experimental/reward_loop/` at the pinned commit:

| module | what it does | verl |
|---|---|---|
| `reward_loop` | `RewardLoopWorker` (scores one session), `RewardLoopManager` (workers, server, where rewards run) | `reward_loop.py` |
| `managers` | `naive`, `dapo`, `batch`: decode, call the score function, `assemble_rm_scores` | `reward_manager/` |
| `loading` | load and check the custom reward function at start-up; `load_reward_manager` | `verl/trainer/ppo/reward.py` |
| `scoring` | one safe call: daemon thread, timeout, result checked, failures contained | (verl: `run_in_executor`) |
| `reward_model` | `RewardModelManager` (the server process) and the HTTP client | `reward_model.py` |
| `rm_server` | the server: a sequence classifier behind `/classify` on 127.0.0.1 | (verl: vLLM/SGLang) |
"""

from minirl.workers.reward.loading import (
    RewardFunctionError,
    check_signature,
    get_custom_reward_fn,
    load_reward_manager,
)
from minirl.workers.reward.managers import (
    BatchRewardManager,
    DAPORewardManager,
    NaiveRewardManager,
    RewardManagerBase,
    get_reward_manager_cls,
    register,
)
from minirl.workers.reward.reward_loop import RewardLoopManager, RewardLoopWorker, collect_reward_info
from minirl.workers.reward.reward_model import (
    RewardModelManager,
    RewardModelServerError,
    post_request,
    rm_input_text,
)
from minirl.workers.reward.scoring import BadRewardOutput, FailureLog, parse_score

__all__ = ["BadRewardOutput", "BatchRewardManager", "DAPORewardManager", "FailureLog", "NaiveRewardManager",
           "RewardFunctionError", "RewardLoopManager", "RewardLoopWorker", "RewardManagerBase", "RewardModelManager",
           "RewardModelServerError", "check_signature", "collect_reward_info", "get_custom_reward_fn",
           "get_reward_manager_cls", "load_reward_manager", "parse_score", "post_request", "register",
           "rm_input_text"]
