"""Worked solutions of lab 06 (weight sync), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (`run`, `tensors`, the parameters ...) and returns the
answer: a packing function, overrides, or a value found the way the exercise asks, from the run's metrics and
trace. The first line of each docstring is printed next to the answer. Try the exercise before you read its
solution.
"""

import math

from minirl.checkpoint_engine.base import bucket_size_bytes, plan_buckets


def in_order(chunks, bucket_size):
    """Yield (bucket, length) per bucket: chunks in order, a new bucket when the next chunk would overflow."""
    bucket, offset = [], 0
    for meta, data in chunks:
        if bucket and offset + meta.chunk_size > bucket_size:
            yield bucket, offset
            bucket, offset = [], 0
        meta.offset = offset
        bucket.append((meta, data))
        offset += meta.chunk_size
    if bucket:
        yield bucket, offset


def exercise_1(nb):
    """A running offset; a new bucket when offset + chunk_size would pass bucket_size (and the bucket is not empty)."""
    return in_order


def exercise_2(nb):
    """The largest bucket size (in steps of 1/1024 MiB) at which plan_buckets makes TARGET_BUCKETS buckets."""
    sizes = [(t["name"], t["bytes"]) for t in nb["tensors"]]
    for kib in range(4096, 0, -1):
        if len(plan_buckets(sizes, bucket_size_bytes(kib / 1024))) == nb["TARGET_BUCKETS"]:
            return [f"actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes={kib / 1024}"]
    raise ValueError("no bucket size gives TARGET_BUCKETS buckets")


def first_fit_decreasing(chunks, bucket_size):
    """Whole tensors largest first, each split tensor's chunks kept together, each unit into the first bucket with room."""
    units = {}
    for meta, data in chunks:  # a unit: a whole tensor, or all the chunks of a split one, in order
        units.setdefault(meta.name, []).append((meta, data))
    buckets = []  # [used bytes, [(meta, data), ...]]
    for unit in sorted(units.values(), key=lambda u: -sum(m.chunk_size for m, _ in u)):
        if len(unit) > 1:  # a split tensor: its full chunks fill fresh buckets, in order, its tail follows
            for meta, data in unit:
                buckets.append([meta.chunk_size, [(meta, data)]])
            continue
        meta, data = unit[0]
        for b in buckets:
            if b[0] + meta.chunk_size <= bucket_size:
                b[0] += meta.chunk_size
                b[1].append((meta, data))
                break
        else:
            buckets.append([meta.chunk_size, [(meta, data)]])
    for _, bucket in buckets:
        offset = 0
        for meta, _ in bucket:
            meta.offset = offset
            offset += meta.chunk_size
        yield bucket, offset


def exercise_3(nb):
    """First-fit decreasing over whole tensors (split tensors' chunks in fresh buckets, in order)."""
    return first_fit_decreasing


def exercise_4(nb):
    """The step whose sync moved 0 bytes (its update_weights left the rollout at the old version)."""
    return next(r["step"] for r in nb["run"].trainer.history if r["perf/update_weights_bytes"] == 0)


def exercise_5(nb):
    """The bytes of the first ceil(n/2) tensors of the table."""
    tensors = nb["tensors"]
    return sum(t["bytes"] for t in tensors[: math.ceil(len(tensors) / 2)])
