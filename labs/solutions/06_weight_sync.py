"""Worked solutions of lab 06 (weight sync), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (`run`, `diff`, `tensors`, the parameters) and
returns the answer, found the way the exercise asks: from the run's metrics and trace, or by packing the
tensor sizes by hand. The first line of each docstring is printed next to the answer. Try the exercise
before you read its solution.
"""

import math


def _history(nb):
    return {r["step"]: r for r in nb["run"].trainer.history}


def _pack(sizes, bucket):
    """Count buckets: chunks of at most `bucket` bytes, packed in order, a new bucket when one would overflow."""
    buckets, used = 0, None
    for size in sizes:
        chunks = [bucket] * (size // bucket) + ([size % bucket] if size % bucket else [])
        for chunk in chunks or [0]:
            if used is None or used + chunk > bucket:
                buckets, used = buckets + 1, 0
            used += chunk
    return buckets


def exercise_1(nb):
    """The steps whose logprob diff is above 1e-4: the step after each broken sync."""
    return sorted(s for s, v in nb["diff"].items() if v > 1e-4)


def exercise_2(nb):
    """The step whose sync moved 0 bytes (its update_weights left the rollout at the old version)."""
    return next(s for s, r in sorted(_history(nb).items()) if r["perf/update_weights_bytes"] == 0)


def exercise_3(nb):
    """The step whose sync moved more than 0 but fewer bytes than the others (the version still advanced)."""
    rows = _history(nb)
    full = max(r["perf/update_weights_bytes"] for r in rows.values())
    return next(s for s, r in sorted(rows.items()) if 0 < r["perf/update_weights_bytes"] < full)


def exercise_4(nb):
    """sum of the bytes of the first ceil(n/2) tensors."""
    tensors = nb["tensors"]
    return sum(t["bytes"] for t in tensors[: math.ceil(len(tensors) / 2)])


def exercise_5(nb):
    """Chunk every tensor into bucket-sized pieces, then pack the chunks in order (see _pack)."""
    return _pack([t["bytes"] for t in nb["tensors"]], int(nb["BUCKET_MB"] * 2**20))


def exercise_6(nb):
    """The same packing over the first ceil(n/2) tensors."""
    tensors = nb["tensors"]
    return _pack([t["bytes"] for t in tensors[: math.ceil(len(tensors) / 2)]], int(nb["BUCKET_MB"] * 2**20))


def exercise_7(nb):
    """The same packing at 1 MiB and at 2048 MiB (everything fits in one bucket)."""
    sizes = [t["bytes"] for t in nb["tensors"]]
    return [_pack(sizes, 1 << 20), _pack(sizes, 2048 << 20)]
