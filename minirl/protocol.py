"""DataProto: the one batch object that every stage of a training step reads and writes.

Mirrors `DataProto` (`verl/protocol.py:318`). The trainer never hands a stage a loose dict: the
rollout returns a DataProto, the reward stage adds fields to it, the actor reads fields from it, and
the single controller splits it across workers (`chunk`) and gathers their answers (`concat`).
Its three compartments say what they hold:

- `batch`: a `tensordict.TensorDict` whose tensors share the first (batch) axis, e.g. `input_ids`
  `(batch, seq_len)` or `token_level_scores` `(batch, response_len)`.
- `non_tensor_batch`: 1-d numpy object arrays, one Python object per sample, e.g. `uid` (the
  prompt group GRPO normalises over) or the ground-truth answer.
- `meta_info`: a plain dict of run-level values shared by all samples (temperature, global step,
  the metrics a worker measured).

Row operations (index, slice, chunk, repeat, concat) act on `batch` and `non_tensor_batch` together,
so sample i's tensors and objects never drift apart; `meta_info` travels along unchanged.

Left out (verl has them): the auto-padding mode (`DataProtoConfig`, `verl/protocol.py:67`; here
`chunk` needs an exact split, pad with `pad_dataproto_to_divisor`), `DataProtoFuture`
(`verl/protocol.py:1174`), batch-dim folding, custom pickling (`DataProto.__getstate__`,
`verl/protocol.py:377`), TensorDict conversion and `sample_level_repeat`. Bad inputs raise
ValueError / KeyError with a message saying how to fix them, where verl asserts.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

__all__ = ["DataProto", "DataProtoItem", "pad_dataproto_to_divisor", "union_numpy_dict",
           "union_tensor_dict", "unpad_dataproto"]


def _values_equal(a: Any, b: Any) -> bool:
    """Same value? Tensors and arrays element-wise, NaN equals NaN (`_deep_equal`, `verl/protocol.py:152`)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        both = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
        return both and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.shape != b.shape:
            return False
        if a.dtype == object or b.dtype == object:
            return all(_values_equal(x, y) for x, y in zip(a.flat, b.flat))
        return np.array_equal(a, b, equal_nan=a.dtype.kind in "fc" and b.dtype.kind in "fc")
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (list, tuple)) and type(a) is type(b):
        return len(a) == len(b) and all(map(_values_equal, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_values_equal(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except (TypeError, ValueError, RuntimeError):  # an object whose == does not answer yes or no
        return False


def _as_object_array(values) -> np.ndarray:
    """A 1-d object array, one entry per value (`np.array([[1, 2]], dtype=object)`, as verl does, is 2-d)."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def _index_array(idxs) -> np.ndarray:
    """Row numbers or a boolean mask (list, numpy array or tensor) as a 1-d numpy index."""
    idx = np.asarray(idxs.detach().cpu() if isinstance(idxs, torch.Tensor) else idxs)
    idx = idx if idx.dtype == bool else idx.astype(np.int64)  # an empty list would be float64
    if idx.ndim != 1:
        raise ValueError(f"DataProto index must be 1-d (row numbers or a mask), got shape {idx.shape}")
    return idx


def _require_keys(method: str, compartment: str, keys, available) -> None:
    """Raise KeyError naming the first of `keys` that is not in `available`, and what is."""
    for key in keys:
        if key not in available:
            raise KeyError(f"DataProto.{method}: key {key!r} is not in {compartment}; "
                           f"available keys: {sorted(available)}")


def _subset(values: dict, keys, method: str, compartment: str) -> dict:
    """A new dict with `keys` of `values` (all when keys is None); a missing key raises KeyError."""
    _require_keys(method, compartment, keys or [], values)
    return dict(values) if keys is None else {key: values[key] for key in keys}


def _check_union(left, right, compartment: str) -> None:
    """Raise ValueError if a key of both `left` and `right` holds different values."""
    for key in right.keys():  # noqa: SIM118 (iterating a TensorDict itself walks its rows)
        if key in left and not _values_equal(left[key], right[key]):
            raise ValueError(f"union: {compartment} key {key!r} is on both sides with different values; "
                             f"rename one side (DataProto.rename) or pop it before the union")


def union_tensor_dict(tensor_dict1: TensorDict, tensor_dict2: TensorDict) -> TensorDict:
    """Add the tensors of `tensor_dict2` to `tensor_dict1` in place and return it (`verl/protocol.py:109`).

    A key on both sides must hold equal tensors (a field computed twice is fine), else ValueError.
    """
    if tensor_dict1.batch_size != tensor_dict2.batch_size:
        raise ValueError(f"union: batch sizes differ ({list(tensor_dict1.batch_size)} vs "
                         f"{list(tensor_dict2.batch_size)}); union joins fields of the same samples")
    _check_union(tensor_dict1, tensor_dict2, "batch")
    tensor_dict1.update(tensor_dict2)
    return tensor_dict1


def union_numpy_dict(tensor_dict1: dict[str, np.ndarray], tensor_dict2: dict[str, np.ndarray]) -> dict:
    """Add the arrays of `tensor_dict2` to `tensor_dict1` in place and return it (`verl/protocol.py:188`).

    A key on both sides must hold equal arrays, else ValueError.
    """
    _check_union(tensor_dict1, tensor_dict2, "non_tensor_batch")
    tensor_dict1.update(tensor_dict2)
    return tensor_dict1


def _concat_meta_info(metas: list[dict]) -> dict:
    """Merge the meta_info of `DataProto.concat`'s inputs.

    `metrics` (a dict, or a list of dicts, per input: what each worker measured) is gathered into a
    dict of lists, `{"loss": [worker0, worker1, ...]}`, as verl does with
    `list_of_dict_to_dict_of_list` (`verl/utils/py_functional.py:359`). Other keys must agree.
    """
    merged, gathered = {}, []
    for i, meta in enumerate(metas):
        for key, value in meta.items():
            if key == "metrics":
                if value is not None:
                    gathered += value if isinstance(value, list) else [value]
            elif key in merged and not _values_equal(merged[key], value):
                raise ValueError(f"DataProto.concat: meta_info[{key!r}] differs between inputs "
                                 f"({merged[key]!r} vs {value!r} in input {i}); run-level values must "
                                 f"agree, per-sample ones belong in non_tensor_batch")
            else:
                merged.setdefault(key, value)
    if gathered and all(isinstance(m, dict) for m in gathered):
        merged["metrics"] = {}
        for m in gathered:
            for name, value in m.items():
                merged["metrics"].setdefault(name, []).append(value)
    elif gathered:  # minirl keeps metrics that are not dicts as one flat list; verl requires dicts
        merged["metrics"] = gathered
    return merged


@dataclass
class DataProtoItem:
    """One sample, `data[i]` (`verl/protocol.py:310`): its tensors (no batch axis), objects, and meta_info."""

    batch: TensorDict | None = None
    non_tensor_batch: dict = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)


@dataclass(eq=False)  # == on TensorDicts is element-wise, so a generated __eq__ could not say yes or no
class DataProto:
    """A batch of samples in three compartments: `batch`, `non_tensor_batch`, `meta_info`.

    Mirrors `DataProto` (`verl/protocol.py:318`). Build one with `from_dict` or `from_single_dict`;
    construction checks that every field has one entry per sample.

    Example:
        >>> data = DataProto.from_dict(tensors={"input_ids": torch.zeros(4, 8, dtype=torch.long)},
        ...                            non_tensors={"uid": ["a", "a", "b", "b"]},
        ...                            meta_info={"temperature": 1.0})
        >>> len(data), data[2].non_tensor_batch["uid"]
        (4, 'b')
    """

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)

    def __post_init__(self):
        """Validate on construction (`DataProto.__post_init__`, `verl/protocol.py:330`)."""
        self.check_consistency()

    def check_consistency(self) -> None:
        """Raise ValueError unless every field has one entry per sample (`verl/protocol.py:454`)."""
        if self.batch is not None and not isinstance(self.batch, TensorDict):
            raise TypeError(f"DataProto.batch must be a TensorDict or None, got {type(self.batch).__name__}")
        if self.batch is not None and self.batch.batch_dims != 1:
            raise ValueError(f"DataProto.batch must have exactly 1 batch dimension, got batch_size="
                             f"{list(self.batch.batch_size)}; build it with "
                             f"TensorDict(source, batch_size=[n])")
        if not isinstance(self.non_tensor_batch, dict) or not isinstance(self.meta_info, dict):
            raise TypeError("DataProto.non_tensor_batch and DataProto.meta_info must be dicts")
        for key, value in self.non_tensor_batch.items():
            if not isinstance(value, np.ndarray) or value.ndim == 0:
                raise ValueError(f"non_tensor_batch[{key!r}] must be a numpy array with one entry per "
                                 f"sample, got {type(value).__name__}; wrap it with np.array(values, "
                                 f"dtype=object) or pass a list to DataProto.from_dict, which converts it")
        for key, value in self.non_tensor_batch.items():
            if len(value) != len(self):
                raise ValueError(f"non_tensor_batch[{key!r}] has length {len(value)} but the batch size is "
                                 f"{len(self)}; every field needs exactly one entry per sample")

    @classmethod
    def from_dict(cls, tensors: dict | None = None, non_tensors: dict | None = None,
                  meta_info: dict | None = None) -> DataProto:
        """Build from a dict of tensors, a dict of per-sample values and a meta dict.

        Mirrors `DataProto.from_dict` (`verl/protocol.py:496`). Every tensor's first axis is the
        batch axis and must have the same length; lists in `non_tensors` become object arrays.
        """
        tensors, pivot = tensors or {}, None
        for key, tensor in tensors.items():
            if tensor.dim() == 0:
                raise ValueError(f"DataProto.from_dict: tensor {key!r} is 0-d; tensors need a batch axis")
            pivot = key if pivot is None else pivot
            if tensor.shape[0] != tensors[pivot].shape[0]:
                raise ValueError(f"DataProto.from_dict: tensor {key!r} has batch size {tensor.shape[0]} but "
                                 f"{pivot!r} has {tensors[pivot].shape[0]}; all tensors must share their "
                                 f"first (batch) dimension")
        non_tensors = {key: value if isinstance(value, np.ndarray) else _as_object_array(value)
                       for key, value in (non_tensors or {}).items()}
        batch = TensorDict(dict(tensors), batch_size=[tensors[pivot].shape[0]]) if tensors else None
        return cls(batch=batch, non_tensor_batch=non_tensors, meta_info=dict(meta_info or {}))

    @classmethod
    def from_single_dict(cls, data: dict, meta_info: dict | None = None) -> DataProto:
        """Build from one dict: tensors go to `batch`, numpy arrays and lists to `non_tensor_batch`.

        Mirrors `DataProto.from_single_dict` (`verl/protocol.py:480`), which rejects lists.
        """
        tensors, non_tensors = {}, {}
        for key, value in data.items():
            if isinstance(value, torch.Tensor):
                tensors[key] = value
            elif isinstance(value, (np.ndarray, list, tuple)):
                non_tensors[key] = value
            else:
                raise TypeError(f"DataProto.from_single_dict: {key!r} has type {type(value).__name__}; "
                                f"expected a torch.Tensor (goes to batch) or a numpy array / list (goes "
                                f"to non_tensor_batch)")
        return cls.from_dict(tensors, non_tensors, meta_info)

    def __len__(self) -> int:
        """Number of samples (`DataProto.__len__`, `verl/protocol.py:334`)."""
        if self.batch is not None:
            return int(self.batch.batch_size[0])
        return len(next(iter(self.non_tensor_batch.values()))) if self.non_tensor_batch else 0

    def __getitem__(self, item) -> DataProto | DataProtoItem:
        """`data[i]` is one sample (a DataProtoItem); a slice, list, array, tensor or mask gives a DataProto.

        Mirrors `DataProto.__getitem__` (`verl/protocol.py:343`).
        """
        if isinstance(item, slice):
            return self.slice(item.start, item.stop, item.step)
        if isinstance(item, (list, np.ndarray, torch.Tensor)):
            return self.select_idxs(item)
        if isinstance(item, (int, np.integer)):
            batch = self.batch[item] if self.batch is not None else None
            non_tensor = {key: value[item] for key, value in self.non_tensor_batch.items()}
            return DataProtoItem(batch=batch, non_tensor_batch=non_tensor, meta_info=self.meta_info)
        raise TypeError(f"DataProto cannot be indexed with {type(item).__name__}; use an int, slice or list")

    def select_idxs(self, idxs) -> DataProto:
        """The rows `idxs` (numbers, repeats allowed, or a mask) as a DataProto (`verl/protocol.py:635`)."""
        idx = _index_array(idxs)
        batch = self.batch[torch.from_numpy(idx)] if self.batch is not None else None
        non_tensor = {key: value[idx] for key, value in self.non_tensor_batch.items()}
        return DataProto(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(self.meta_info))

    def slice(self, start=None, end=None, step=None) -> DataProto:
        """Rows `start:end:step`, a view sharing memory with self (`verl/protocol.py:675`)."""
        rows = slice(start, end, step)
        batch = self.batch[rows] if self.batch is not None else None
        non_tensor = {key: value[rows] for key, value in self.non_tensor_batch.items()}
        return DataProto(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(self.meta_info))

    def reorder(self, indices) -> None:
        """Put the rows in the order `indices`, in place (`DataProto.reorder`, `verl/protocol.py:963`)."""
        reordered = self.select_idxs(indices)
        self.batch, self.non_tensor_batch = reordered.batch, reordered.non_tensor_batch

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        """Each row `repeat_times` times: rows `a,a,b,b` when `interleave`, else `a,b,a,b`.

        Mirrors `DataProto.repeat` (`verl/protocol.py:971`). The trainer repeats each prompt
        `rollout.n` times with `interleave=True`, so one prompt's samples sit side by side. minirl
        builds the row order once and indexes both compartments; verl repeats each field separately.
        """
        rows = np.arange(len(self))
        return self.select_idxs(np.repeat(rows, repeat_times) if interleave else np.tile(rows, repeat_times))

    def to(self, device) -> DataProto:
        """Move `batch` to `device` in place and return self (`DataProto.to`, `verl/protocol.py:586`)."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    def select(self, batch_keys=None, non_tensor_batch_keys=None, meta_info_keys=None,
               deepcopy=False) -> DataProto:
        """A new DataProto with only the named keys; None keeps a whole compartment.

        Mirrors `DataProto.select` (`verl/protocol.py:600`). Values are shared with self unless
        `deepcopy`. A missing key raises KeyError in every compartment (verl ignores missing
        non-tensor and meta keys, and its `deepcopy` leaves the tensors shared).
        """
        _require_keys("select", "batch", batch_keys or [], self._batch_keys())
        batch = self.batch if batch_keys is None or self.batch is None else self.batch.select(*batch_keys)
        batch = batch.copy() if batch is not None else None  # a new TensorDict over the same tensors
        non_tensor = _subset(self.non_tensor_batch, non_tensor_batch_keys, "select", "non_tensor_batch")
        meta = _subset(self.meta_info, meta_info_keys, "select", "meta_info")
        if deepcopy:
            batch = batch.clone() if batch is not None else None
            non_tensor, meta = copy.deepcopy(non_tensor), copy.deepcopy(meta)
        return DataProto(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)

    def pop(self, batch_keys=None, non_tensor_batch_keys=None, meta_info_keys=None) -> DataProto:
        """Remove the named keys from self and return them as a new DataProto.

        Mirrors `DataProto.pop` (`verl/protocol.py:721`). Every key is checked before anything is
        removed, so a KeyError leaves self unchanged.
        """
        batch_keys, non_tensor_keys = batch_keys or [], non_tensor_batch_keys or []
        _require_keys("pop", "batch", batch_keys, self._batch_keys())
        _require_keys("pop", "non_tensor_batch", non_tensor_keys, self.non_tensor_batch)
        _require_keys("pop", "meta_info", meta_info_keys or [], self.meta_info)
        tensors = {key: self.batch.pop(key) for key in batch_keys}
        non_tensors = {key: self.non_tensor_batch.pop(key) for key in non_tensor_keys}
        meta = {key: self.meta_info.pop(key) for key in meta_info_keys or []}
        return DataProto.from_dict(tensors, non_tensors, meta)

    def rename(self, old_keys, new_keys) -> DataProto:
        """Rename fields in place and return self; each argument is a key or a list of keys.

        Mirrors `DataProto.rename` (`verl/protocol.py:754`), which renames `batch` keys only;
        minirl also renames `non_tensor_batch` keys, and refuses to overwrite an existing key.
        """
        old_keys = [old_keys] if isinstance(old_keys, str) else list(old_keys)
        new_keys = [new_keys] if isinstance(new_keys, str) else list(new_keys)
        if len(old_keys) != len(new_keys):
            raise ValueError(f"DataProto.rename: got {len(old_keys)} old keys but {len(new_keys)} new keys")
        for old, new in zip(old_keys, new_keys):
            taken = self._batch_keys() + list(self.non_tensor_batch)
            _require_keys("rename", "batch or non_tensor_batch", [old], taken)
            if new in taken and new != old:
                raise ValueError(f"DataProto.rename: cannot rename {old!r} to {new!r}, which already exists")
            if old in self._batch_keys():
                self.batch.rename_key_(old, new)
            else:
                self.non_tensor_batch[new] = self.non_tensor_batch.pop(old)
        return self

    def union(self, other: DataProto) -> DataProto:
        """Add the fields of `other` (the same samples, new fields) to self, and return self.

        Mirrors `DataProto.union` (`verl/protocol.py:781`): the trainer unions each stage's output
        (log-probs, values, rewards) into the step's batch. A key on both sides must hold equal
        values, else ValueError (meta_info too, as `union_two_dict`, `verl/utils/py_functional.py:151`);
        self changes only if the whole union succeeds.
        """
        if self.batch is None or other.batch is None:
            batch = self.batch if other.batch is None else other.batch.copy()
        else:
            batch = union_tensor_dict(self.batch.copy(), other.batch)
        non_tensor = union_numpy_dict(dict(self.non_tensor_batch), other.non_tensor_batch)
        _check_union(self.meta_info, other.meta_info, "meta_info")
        merged = DataProto(batch, non_tensor, {**self.meta_info, **other.meta_info})  # checks lengths
        self.batch, self.non_tensor_batch, self.meta_info = merged.batch, non_tensor, merged.meta_info
        return self

    def _batch_keys(self) -> list[str]:
        return list(self.batch.keys()) if self.batch is not None else []

    def chunk(self, chunks: int) -> list[DataProto]:
        """Split into `chunks` equal parts, e.g. one per data-parallel worker.

        Mirrors `DataProto.chunk` (`verl/protocol.py:864`). The size must divide evenly; verl can
        instead pad on the fly in auto-padding mode (`DataProto.padding`, `verl/protocol.py:849`).
        """
        if chunks <= 0:
            raise ValueError(f"DataProto.chunk: chunks must be positive, got {chunks}")
        if len(self) % chunks != 0:
            raise ValueError(f"DataProto.chunk: batch size {len(self)} is not divisible by {chunks} "
                             f"chunks; pad first with pad_dataproto_to_divisor(data, {chunks}) and remove "
                             f"the padding afterwards with unpad_dataproto(output, pad_size)")
        size = len(self) // chunks
        return [self.slice(i * size, (i + 1) * size) for i in range(chunks)]

    def split(self, split_size: int) -> list[DataProto]:
        """Pieces of `split_size` rows, the last maybe smaller (`verl/protocol.py:905`)."""
        if split_size <= 0:
            raise ValueError(f"DataProto.split: split_size must be positive, got {split_size}")
        return [self.slice(start, start + split_size) for start in range(0, len(self), split_size)]

    @staticmethod
    def concat(data: list[DataProto]) -> DataProto:
        """Stack DataProtos row-wise, e.g. the workers' outputs (`DataProto.concat`, `verl/protocol.py:917`).

        All inputs need the same keys. `meta_info["metrics"]` is gathered from every input into a
        dict of lists; every other meta key must agree across the inputs.
        """
        if not data:
            raise ValueError("DataProto.concat: got an empty list; pass at least one DataProto")
        first, object_keys = data[0], list(data[0].non_tensor_batch)
        for i, d in enumerate(data):
            for name, keys, expected in (("batch", d._batch_keys(), first._batch_keys()),
                                         ("non_tensor_batch", list(d.non_tensor_batch), object_keys)):
                if set(keys) != set(expected):
                    raise ValueError(f"DataProto.concat: input {i} has {name} keys {sorted(keys)} but "
                                     f"input 0 has {sorted(expected)}; every input needs the same fields")
        batches = [d.batch for d in data]
        batch = torch.cat(batches, dim=0) if all(b is not None for b in batches) else None
        non_tensor = {key: np.concatenate([d.non_tensor_batch[key] for d in data]) for key in object_keys}
        return DataProto(batch, non_tensor, _concat_meta_info([d.meta_info for d in data]))

    def make_iterator(self, mini_batch_size: int, epochs: int, seed: int | None = None) -> Iterator:
        """Yield mini-batches of `mini_batch_size` rows, `epochs` times over; shuffled when `seed` is set.

        Mirrors `DataProto.make_iterator` (`verl/protocol.py:800`), which wraps a torch DataLoader
        (shuffling when `dataloader_kwargs={"shuffle": True}`, seeded by `seed`). Each epoch draws a
        new permutation from one generator, so one seed always gives the same mini-batches.
        """
        if mini_batch_size <= 0 or len(self) % mini_batch_size != 0:
            raise ValueError(f"DataProto.make_iterator: batch size {len(self)} is not divisible by "
                             f"mini_batch_size {mini_batch_size}")
        n, generator = len(self), torch.Generator().manual_seed(seed) if seed is not None else None

        def mini_batches():
            for _ in range(epochs):
                order = torch.arange(n) if generator is None else torch.randperm(n, generator=generator)
                for start in range(0, n, mini_batch_size):
                    yield self.select_idxs(order[start : start + mini_batch_size])

        return mini_batches()

    def save_to_disk(self, filepath) -> None:
        """Write with `torch.save` (`DataProto.save_to_disk`, `verl/protocol.py:426`).

        minirl saves plain dicts of tensors, arrays and meta_info; verl pickles the object.
        """
        batch = None if self.batch is None else {"tensors": self.batch.to_dict(), "size": len(self)}
        torch.save({"batch": batch, "non_tensor_batch": self.non_tensor_batch, "meta_info": self.meta_info},
                   filepath)

    @staticmethod
    def load_from_disk(filepath) -> DataProto:
        """Read what `save_to_disk` wrote, tensors on CPU (`verl/protocol.py:431`).

        This unpickles (numpy object arrays need it): only load files you trust.
        """
        state = torch.load(filepath, map_location="cpu", weights_only=False)
        saved = state["batch"]
        batch = None if saved is None else TensorDict(saved["tensors"], batch_size=[saved["size"]])
        return DataProto(batch, state["non_tensor_batch"], state["meta_info"])

    def _fields(self) -> list[tuple[str, str, Any]]:
        """`(storage, key, value)` for every field, compartment by compartment."""
        tensors = self.batch.items() if self.batch is not None else []
        return ([("batch", key, value) for key, value in tensors]
                + [("non_tensor_batch", key, value) for key, value in self.non_tensor_batch.items()]
                + [("meta_info", key, value) for key, value in self.meta_info.items()])

    def summary(self) -> list[dict]:
        """One plain dict per field, `{key, storage, shape, dtype, device}`, for the tracer to record.

        shape is a tuple or None; dtype is the tensor/array dtype or else the Python type name;
        device is the tensor's device, "cpu" for numpy arrays, None for other Python values.
        """
        rows = []
        for storage, key, value in self._fields():
            is_array = isinstance(value, (torch.Tensor, np.ndarray))
            device = "cpu" if isinstance(value, np.ndarray) else getattr(value, "device", None)
            rows.append({"key": key, "storage": storage,
                         "shape": tuple(value.shape) if hasattr(value, "shape") else None,
                         "dtype": str(value.dtype) if is_array else type(value).__name__,
                         "device": None if device is None else str(device)})
        return rows

    def get_data_info(self) -> str:
        """A table, one line per field: key, compartment, shape, dtype, device (and short meta values).

        Mirrors `DataProto.get_data_info` (`verl/protocol.py:1128`); `repr(data)` prints it.
        """
        table = [["key", "storage", "shape", "dtype", "device"]]
        for row, (storage, _, value) in zip(self.summary(), self._fields()):
            shape = "-" if row["shape"] is None else str(row["shape"])
            table.append([row["key"], storage, shape, row["dtype"], row["device"] or "-"])
            if storage == "meta_info" and isinstance(value, (int, float, str)) and len(repr(value)) < 40:
                table[-1][-1] += f"   = {value!r}"  # short run-level values, e.g. temperature
        widths = [max(len(line[c]) for line in table) for c in range(4)]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[4] for line in table]
        return f"DataProto with {len(self)} samples\n  " + "\n  ".join(lines)

    def __repr__(self) -> str:
        return self.get_data_info()


def pad_dataproto_to_divisor(data: DataProto, size_divisor: int) -> tuple[DataProto, int]:
    """Append copies of the first rows until the size divides by `size_divisor`; return `(padded, pad_size)`.

    Mirrors `pad_dataproto_to_divisor` (`verl/protocol.py:74`): 10 rows padded to a divisor of 4
    become rows 0..9 then 0, 1 (pad_size 2), wrapping around again if pad_size exceeds the size.
    Undo it with `unpad_dataproto(output, pad_size)` once the padded batch has been processed.
    """
    if size_divisor <= 0:
        raise ValueError(f"pad_dataproto_to_divisor: size_divisor must be positive, got {size_divisor}")
    pad_size = -len(data) % size_divisor
    if pad_size == 0:
        return data, 0
    return data.select_idxs(np.concatenate([np.arange(len(data)), np.arange(pad_size) % len(data)])), pad_size


def unpad_dataproto(data: DataProto, pad_size: int) -> DataProto:
    """Drop the last `pad_size` rows that `pad_dataproto_to_divisor` added (`verl/protocol.py:102`)."""
    if not 0 <= pad_size <= len(data):
        raise ValueError(f"unpad_dataproto: pad_size {pad_size} must be between 0 and the batch size "
                         f"{len(data)}")
    return data.slice(0, len(data) - pad_size) if pad_size else data
