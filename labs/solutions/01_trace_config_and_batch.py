"""Worked solutions of lab 01 (trace config and batch), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (its `globals()`: the parameters of the first
cell, `run`, ...) and returns the answer, computed from the parameters the way the exercise asks
you to reason. The lab's checks call them when solutions are on (`SOLUTION = True` in the
parameter cell, or `MINIRL_LAB_SOLUTIONS=1`, as the test suite runs labs); the first line of each
docstring (the formula, or the reason) is printed next to the answer. Try the exercise before you read its solution.
"""


def exercise_1(nb):
    """TRAIN_BATCH_SIZE * ROLLOUT_N: each prompt becomes rollout.n sessions, one sequence each."""
    return nb["TRAIN_BATCH_SIZE"] * nb["ROLLOUT_N"]


def exercise_2(nb):
    """PPO_MINI_BATCH_SIZE * ROLLOUT_N // 1: the mini-batch counts prompts; in sequences, over 1 rank."""
    return nb["PPO_MINI_BATCH_SIZE"] * nb["ROLLOUT_N"] // 1


def exercise_3(nb):
    """PPO_MINI_BATCH_SIZE * ROLLOUT_N // 2: the same global mini-batch, split evenly over 2 ranks."""
    return nb["PPO_MINI_BATCH_SIZE"] * nb["ROLLOUT_N"] // 2


def exercise_4(nb):
    """PPO_MINI_BATCH_SIZE * ROLLOUT_N // MICRO_BATCH_SIZE: the per-rank mini-batch cut into micro-batches."""
    return nb["PPO_MINI_BATCH_SIZE"] * nb["ROLLOUT_N"] // nb["MICRO_BATCH_SIZE"]


def exercise_5(nb):
    """TRAIN_BATCH_SIZE // PPO_MINI_BATCH_SIZE * PPO_EPOCHS: one optimizer step per mini-batch, per epoch."""
    return nb["TRAIN_BATCH_SIZE"] // nb["PPO_MINI_BATCH_SIZE"] * nb["PPO_EPOCHS"]


def exercise_6(nb):
    """[TRAIN_BATCH_SIZE * ROLLOUT_N, RESPONSE_LENGTH]: one advantage per response token of every sequence."""
    return [nb["TRAIN_BATCH_SIZE"] * nb["ROLLOUT_N"], nb["RESPONSE_LENGTH"]]


def exercise_7(nb):
    """A uid is a string per sample, not a tensor and not run-level."""
    return "non_tensor_batch"


def exercise_8(nb):
    """The actor, before its update, recomputes the log-probs of the sampled tokens."""
    return "old_log_prob"


def exercise_9(nb):
    """In sync mode step 1's update (version 0 -> 1) reaches the rollout before step 2 samples."""
    return 1


def exercise_10(nb):
    """256 * 5 // 8 // 2: 1280 sequences per mini-batch, 160 per GPU, in micro-batches of 2."""
    return 256 * 5 // 8 // 2

