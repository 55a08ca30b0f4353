"""Worked solutions of lab 05 (FSDP and TP layout), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (its `globals()`: the parameters, `DP`, `TP`, the live
layouts ...) and returns the answer: functions, overrides or a value. The lab's checks call them when
solutions are on (`SOLUTION = True`, or `MINIRL_LAB_SOLUTIONS=1`); the first line of each docstring is printed
next to the answer. Try the exercise before you read its solution.
"""

import math

from minirl.protocol import DataProto

COLWISE = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
ROWWISE = ("o_proj", "down_proj")


def exercise_1(nb):
    """dispatch: chunk dp_rank(r) = r // TP for every worker r; collect: outputs[r] for r % TP == 0, concatenated."""
    dp, tp = nb["DP"], nb["TP"]

    def dispatch(worker_group, data):
        chunks = data.chunk(dp)
        return ([chunks[r // tp] for r in range(worker_group.world_size)],), {}

    def collect(worker_group, outputs):
        return DataProto.concat([outputs[r] for r in range(worker_group.world_size) if r % tp == 0])

    return dispatch, collect


def local_shape(name, full_shape, rank, dp, tp):
    """The shape of parameter `name` on `rank` of a dp x tp mesh."""
    shape = list(full_shape)
    dp_rank = rank // tp  # (dp_rank, tp_rank) = divmod(rank, tp)
    module = name.split(".")[-2]
    if tp > 1 and module in COLWISE:
        shape[0] //= tp
    elif tp > 1 and module in ROWWISE and len(shape) > 1:
        shape[1] //= tp
    if dp > 1:
        part = math.ceil(shape[0] / dp)  # torch.chunk: ceil-sized parts, the last ones smaller (or empty)
        shape[0] = max(0, min(part, shape[0] - part * dp_rank))
    return shape


def exercise_3(nb):
    """TP: column-parallel splits dim 0, row-parallel dim 1; then FSDP2 chunks dim 0 in ceil(size / dp) parts."""
    return local_shape


def exercise_2(nb):
    """torchtitan with tp = RANKS (one dp rank), micro 1; 4 sequences = 2 prompts x n per mini-batch."""
    n = nb["ROLLOUT_N"]
    return ["model_engine=torchtitan", f"actor_rollout_ref.actor.torchtitan.tensor_parallel_size={nb['RANKS']}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={4 // n}", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            f"data.train_batch_size={2 * (4 // n)}"]


def _shares(nb, dp, tp, rank):
    params = next(iter(nb["shards"].values()))[0]["params"]
    total = held = 0
    for name, p in params.items():
        total += math.prod(p["global"])
        held += math.prod(local_shape(name, p["global"], rank, dp, tp))
    return held / total


def exercise_4(nb):
    """Projections split in tp parts, embedding (259 x 128, the largest) and norms whole: a bit over 1/tp."""
    return _shares(nb, 1, nb["RANKS"], 0)


def exercise_5(nb):
    """Every parameter's rows split in ceil parts: the last rank gets slightly less than 1/dp (259 = 130 + 129)."""
    return _shares(nb, nb["RANKS"], 1, nb["RANKS"] - 1)
