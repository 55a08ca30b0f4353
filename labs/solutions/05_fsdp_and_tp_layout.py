"""Worked solutions of lab 05 (FSDP and TP layout), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (its `globals()`: the parameters of the first
cell and `SETTINGS`, the batch sizes and model shapes the three runs share) and returns the answer,
computed from them the way the exercise asks you to reason. The lab's checks call them when
solutions are on (`SOLUTION = True` in the parameter cell, or `MINIRL_LAB_SOLUTIONS=1`, as the test
suite runs labs); the first line of each docstring (the formula, or the reason) is printed next to the
answer. Try the exercise before you read its solution.
"""


def _mini(nb) -> int:
    s = nb["SETTINGS"]
    return s["ppo_mini_batch_size"] * s["rollout_n"]  # the global mini-batch, in sequences


def exercise_1(nb):
    """ppo_mini_batch_size * n / dp with dp = 2: FSDP makes every rank a data-parallel rank."""
    return _mini(nb) // 2


def exercise_2(nb):
    """ppo_mini_batch_size * n / dp with dp = 2 ranks / tp 2 = 1: both TP ranks get the whole mini-batch."""
    return _mini(nb) // 1


def exercise_3(nb):
    """(ppo_mini_batch_size * n / dp) / ppo_micro_batch_size_per_gpu with dp = 1."""
    return _mini(nb) // 1 // nb["SETTINGS"]["ppo_micro_batch_size_per_gpu"]


def exercise_4(nb):
    """[0, 1]: ranks r with r // tp == 0 share data-parallel rank 0, and with it the rows."""
    return [r for r in range(4) if r // 2 == 0]


def exercise_5(nb):
    """[0, 2]: tp rank 0 (r % tp == 0) of each data-parallel rank reports."""
    return [r for r in range(4) if r % 2 == 0]


def exercise_6(nb):
    """4 ranks / tp 2 = 2: the ranks FSDP averages gradients over, hence the loss's dp_size."""
    return 4 // 2


def exercise_7(nb):
    """[vocab - ceil(vocab / 2), hidden]: 259 rows over 2 ranks; rank 0 takes ceil(259 / 2) = 130, rank 1 the other 129."""
    s = nb["SETTINGS"]
    return [s["vocab_size"] - (s["vocab_size"] + 1) // 2, s["hidden_size"]]


def exercise_8(nb):
    """[heads * head_dim / tp, hidden]: column parallel splits the output rows, 2 of the 4 heads per rank."""
    s = nb["SETTINGS"]
    return [s["num_attention_heads"] * s["head_dim"] // 2, s["hidden_size"]]


def exercise_9(nb):
    """[kv_heads * head_dim / tp, hidden]: 1 of the 2 KV heads per rank."""
    s = nb["SETTINGS"]
    return [s["num_key_value_heads"] * s["head_dim"] // 2, s["hidden_size"]]


def exercise_10(nb):
    """[hidden, heads * head_dim / tp]: row parallel splits the input columns (the heads' outputs)."""
    s = nb["SETTINGS"]
    return [s["hidden_size"], s["num_attention_heads"] * s["head_dim"] // 2]


def exercise_11(nb):
    """[vocab, hidden]: the embedding is not in minirl's TP plan, so every TP rank holds all of it."""
    s = nb["SETTINGS"]
    return [s["vocab_size"], s["hidden_size"]]


def exercise_12(nb):
    """[heads * head_dim / tp / dp, hidden]: the TP shard of 64 rows, split again over the 2 dp ranks."""
    s = nb["SETTINGS"]
    return [s["num_attention_heads"] * s["head_dim"] // 2 // 2, s["hidden_size"]]


def exercise_13(nb):
    """["all_gather", "reduce_scatter"]: FSDP2 gathers weight shards before use and reduce-scatters gradients."""
    return ["all_gather", "reduce_scatter"]
