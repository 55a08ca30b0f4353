"""Worked solutions of lab 01 (trace config and batch), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (its `globals()`: the parameters of the first
cell, `run`, ...) and returns the answer: a function, a list of overrides, or a value. The lab's checks
call them when solutions are on (`SOLUTION = True` in the parameter cell, or `MINIRL_LAB_SOLUTIONS=1`);
the first line of each docstring is printed next to the answer. Try the exercise before you read its
solution.
"""


def batch_numbers(cfg, dp_size: int) -> dict:
    """The split of one training step of `cfg` on `dp_size` data-parallel ranks."""
    arr = cfg.actor_rollout_ref
    n = int(arr.rollout.n)
    prompts, mini_prompts = int(cfg.data.train_batch_size), int(arr.actor.ppo_mini_batch_size)
    per_rank_mini = mini_prompts * n // dp_size  # the global mini-batch, in sequences, split over the ranks
    return {
        "sequences_per_step": prompts * n,
        "per_rank_mini_batch": per_rank_mini,
        "micro_batches_per_mini_batch": per_rank_mini // int(arr.actor.ppo_micro_batch_size_per_gpu),
        "optimizer_steps_per_step": prompts // mini_prompts * int(arr.actor.ppo_epochs),
    }


def exercise_1(nb):
    """prompts * n; mini-batch prompts * n / dp; that / micro; prompts / mini-batch prompts * epochs."""
    return batch_numbers


def exercise_2(nb):
    """n=2, micro 2, 4 micro-batches -> 8 sequences = 4 prompts per mini-batch; 12 prompts -> 3 mini-batches."""
    return ["data.train_batch_size=12", "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.ppo_epochs=1"]


def to_rl_rows(problems) -> list[dict]:
    """One verl RL-dataset row per (a, b) problem."""
    return [{"data_source": "minirl/arithmetic",
             "prompt": [{"role": "user", "content": f"What is {a}+{b}?"}],
             "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": str(a + b)},
             "extra_info": {"split": "train", "index": i}}
            for i, (a, b) in enumerate(problems)]


def exercise_3(nb):
    """verl's five columns per row, the ground truth as a string, extra_info indexed from 0."""
    return to_rl_rows


def exercise_4(nb):
    """4 prompts x 2 steps: a uid is drawn per fetched prompt (uuid4), so every step's 4 groups are new."""
    return 4 * 2


def exercise_5(nb):
    """[TRAIN_BATCH_SIZE * ROLLOUT_N, RESPONSE_LENGTH]: one advantage per response position of every sequence."""
    return [nb["TRAIN_BATCH_SIZE"] * nb["ROLLOUT_N"], nb["RESPONSE_LENGTH"]]
