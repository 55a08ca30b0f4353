"""Balance a batch's tokens over data-parallel ranks (verl: `verl/utils/seqlen_balancing.py`).

With `trainer.balance_batch=True` the trainer reorders the batch before the actor and critic see it
(`PPOTrainer._balance_batch`, `verl/trainer/ppo/v1/trainer_base.py:1503`): the dispatch cuts the
batch into `dp` equal consecutive chunks, one per rank, so if the long responses all sat in one chunk
that rank would work longest and every other rank would wait for it at the gradient all-reduce.
Reordering so that each chunk gets about the same *workload* evens that out.

The workload of a sequence of length $L$ is `calculate_workload` (`verl/utils/seqlen_balancing.py:27`):
$24576\\,L + L^2$, the FLOPs of a dense transformer layer up to a constant (a linear part for the
matmuls, a quadratic one for attention), calibrated by verl on a 7B model.

minirl simplification: the partition is the greedy "longest first into the lightest rank that still
has room" (LPT) with equal sizes; verl uses the Karmarkar-Karp largest differencing method
(`karmarkar_karp`, `verl/utils/seqlen_balancing.py:49`), which gets closer to perfect balance.
"""

from __future__ import annotations

import torch

__all__ = ["calculate_workload", "get_seqlen_balanced_partitions", "log_seqlen_unbalance"]


def calculate_workload(seqlen_list: torch.Tensor) -> torch.Tensor:
    r"""Relative cost of each sequence: $24576\,L + L^2$ for length $L$ (verl's constants)."""
    return 24576 * seqlen_list + seqlen_list**2


def get_seqlen_balanced_partitions(workloads: list[int], k_partitions: int, equal_size: bool = True) -> list[list[int]]:
    """Split item indices into `k_partitions` lists of equal size whose workload sums are close.

    Longest first: each item goes to the partition with the smallest sum among those not yet full.
    Each partition's indices come back sorted (as verl's). `equal_size=False` is not implemented.
    """
    n = len(workloads)
    if not equal_size:
        raise NotImplementedError("minirl balances into equal-size partitions only (verl: equal_size=True in the trainer)")
    if k_partitions < 1 or n < k_partitions or n % k_partitions:
        raise ValueError(f"cannot split {n} sequences into {k_partitions} equal partitions: the batch must be a "
                         "positive multiple of the data-parallel size (see `minirl config explain`).")
    size = n // k_partitions
    sums, parts = [0] * k_partitions, [[] for _ in range(k_partitions)]
    for i in sorted(range(n), key=lambda j: (-int(workloads[j]), j)):
        j = min((p for p in range(k_partitions) if len(parts[p]) < size), key=lambda p: (sums[p], p))
        parts[j].append(i)
        sums[j] += int(workloads[i])
    return [sorted(p) for p in parts]


def log_seqlen_unbalance(seqlen_list: list[int], partitions: list[list[int]], prefix: str) -> dict:
    """Token sums per rank before (consecutive chunks) and after (the partitions) balancing.

    Keys as verl's (`log_seqlen_unbalance`, `verl/utils/seqlen_balancing.py:257`): `<prefix>/min`,
    `/max`, `/minmax_diff` (consecutive chunks), `/balanced_min`, `/balanced_max`, `/mean`.
    """
    k = len(partitions)
    size = len(seqlen_list) // k
    chunks = [sum(seqlen_list[i:i + size]) for i in range(0, size * k, size)]
    balanced = [sum(seqlen_list[i] for i in p) for p in partitions]
    return {f"{prefix}/min": min(chunks), f"{prefix}/max": max(chunks), f"{prefix}/minmax_diff": max(chunks) - min(chunks),
            f"{prefix}/balanced_min": min(balanced), f"{prefix}/balanced_max": max(balanced),
            f"{prefix}/mean": sum(chunks) / k}
