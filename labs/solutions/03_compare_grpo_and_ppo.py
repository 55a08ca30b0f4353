"""Worked solutions of lab 03 (compare GRPO and PPO), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (its `globals()`: the parameters of the first
cell, the runs, ...) and returns the answer, reasoned from the config and the code rather than read
off the trace (the check cell reads the trace). The first line of each docstring is printed next to
the answer when solutions are on. Try the exercise before you read its solution.
"""

# The estimators whose `returns` is the advantage tensor itself (they compare scores, no value per
# token): see each function's docstring in minirl/trainer/core_algos.py. The others return the
# reward-to-go (reinforce_plus_plus, remax, the optimal-token baselines) or advantages + values (gae).
SAME_TENSOR = {"grpo", "grpo_vectorized", "gdpo", "grpo_passk", "rloo", "rloo_vectorized", "opo", "gpg",
               "reinforce_plus_plus_baseline"}


def exercise_1(nb):
    """need_critic(gae) adds the critic's two stages: values before the advantage, update_critic after it."""
    return ["values", "update_critic"]


def exercise_2(nb):
    """GAE reads the critic's estimate V[i, t]: the values field, which GRPO never makes."""
    return ["values"]


def exercise_3(nb):
    """returns (advantages + values) is the critic's regression target: update_critic reads it."""
    return "update_critic"


def exercise_4(nb):
    """The critic has its own weights and optimizer, updated once per step: its version is traced too."""
    return "critic"


def exercise_5(nb):
    """PPO runs two more passes per step (the critic's forward, then its forward + backward + step)."""
    return "ppo"


def exercise_6(nb):
    """need_critic is True only for gae (critic.enable unset), and THIRD is not gae."""
    return nb["THIRD"] == "gae"


def exercise_7(nb):
    """Outcome estimators return (advantages, advantages); reward-to-go ones return returns != advantages."""
    return nb["THIRD"] in SAME_TENSOR
