"""DataProto: the one batch object that every stage of a training step reads and writes.

Mirrors `DataProto` (`verl/protocol.py:318`). The trainer never hands a stage a loose dict: the
rollout returns a DataProto, the reward stage adds fields to it, the actor reads fields from it, and
the single controller splits it across workers (`chunk`) and gathers their answers (`concat`).
Its three compartments say what they hold:

- `batch`: a `tensordict.TensorDict` whose tensors share the first (batch) axis, e.g. `input_ids`
  `(batch, seq_len)` or `token_level_scores` `(batch, response_len)`.
- `non_tensor_batch`: numpy object arrays, one Python object per sample, e.g. `uid` (the
  prompt group GRPO normalises over) or the ground-truth answer.
- `meta_info`: a plain dict of run-level values shared by all samples (temperature, global step,
  the metrics a worker measured).

Row operations (index, slice, chunk, repeat, concat) act on `batch` and `non_tensor_batch` together,
so sample i's tensors and objects never drift apart; `meta_info` travels along unchanged. The functions
on the compartments (comparing and merging fields, bytes for pickling, the TensorDict form, the
field table) live in `minirl.protocol_fields`; every public name there is importable from here.

Errors: bad input raises `DataProtoError` where verl uses `assert` (uneven `chunk`, conflicting
`union` or `concat`, mismatched sizes, wrong `num_batch_dims`); it is a ValueError and also an
AssertionError, so code written for verl that catches AssertionError still catches it. A missing
key raises `DataProtoKeyError`, a KeyError that is also an AssertionError (verl's `pop` asserts).

Left out on purpose (what verl does instead):

- Auto-padding (`DataProtoConfig`, `verl/protocol.py:67`): verl can pad an uneven `chunk` on the
  fly; here `auto_padding=True` raises and you pad with `pad_dataproto_to_divisor`, visibly.
- `DataProtoFuture` (`verl/protocol.py:1174`), `BatchData` (`verl/protocol.py:1231`): verl's lazy
  Ray results and dispatch wrapper; minirl's worker group has its own futures.
- `all_gather_data_proto` (`verl/protocol.py:1334`): verl all-gathers a DataProto over a process
  group; minirl's controller gathers worker outputs with `concat`.
- `make_iterator` (`verl/protocol.py:800`) and `sample_level_repeat` (`verl/protocol.py:1054`): no stage
  of verl's V1 path calls them (its workers cut mini-batches with `tensordict_utils.make_iterator`;
  minirl's with `minirl.workers.engine.utils.prepare_micro_batches` and `split`).
- `print_size` (`verl/protocol.py:436`): `summary()` / `get_data_info()` (a table, not verl's
  type tree) show each field's shape, dtype and device.
- 2-d lists: verl's `from_dict` turns equal-length lists into a 2-d array; minirl keeps a 1-d array
  so `non_tensor_batch[k][i]` is the list you passed (`unfold_column_chunks` cuts each list).
- Silent skips: verl's `select` ignores a missing non-tensor or meta key (`unfold_column_chunks` a
  missing split key); minirl raises DataProtoKeyError naming the available keys.
- `union_numpy_dict`'s message: verl's says "`key` in tensor_dict1 and tensor_dict2 are not the
  same object."; minirl's names the compartment and says how to resolve the conflict.
"""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from minirl import protocol_fields as fields
from minirl.protocol_fields import (  # re-exported: verl defines its functions in verl/protocol.py
    SERIALIZATION_METHOD_ENV,
    DataProtoError,
    DataProtoKeyError,
    deserialize_single_tensor,
    deserialize_tensordict,
    serialize_single_tensor,
    serialize_tensordict,
    union_numpy_dict,
    union_tensor_dict,
)

__all__ = ["SERIALIZATION_METHOD_ENV", "DataProto", "DataProtoError", "DataProtoItem", "DataProtoKeyError",
           "deserialize_single_tensor", "deserialize_tensordict", "fold_batch_dim", "pad_dataproto_to_divisor",
           "serialize_single_tensor", "serialize_tensordict", "unfold_batch_dim", "union_numpy_dict",
           "union_tensor_dict", "unpad_dataproto"]


def _index_array(idxs) -> np.ndarray:
    """Row numbers or a boolean mask (list, numpy array or tensor) as a 1-d numpy index."""
    idx = np.asarray(idxs.detach().cpu() if isinstance(idxs, torch.Tensor) else idxs)
    idx = idx if idx.dtype == bool else idx.astype(np.int64)  # an empty list would be float64
    if idx.ndim != 1:
        raise ValueError(f"DataProto index must be 1-d (row numbers or a mask), got shape {idx.shape}")
    return idx


def _require_keys(method: str, compartment: str, keys, available) -> None:
    """Raise DataProtoKeyError naming the first of `keys` that is not in `available`, and what is."""
    for key in keys:
        if key not in available:
            raise DataProtoKeyError(f"DataProto.{method}: key {key!r} is not in {compartment}; "
                                    f"available keys: {sorted(available)}")


def _subset(values: dict, keys, method: str, compartment: str) -> dict:
    """A new dict with `keys` of `values` (all when keys is None); a missing key raises KeyError."""
    _require_keys(method, compartment, keys or [], values)
    return dict(values) if keys is None else {key: values[key] for key in keys}


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
    construction checks that every field has one entry per sample. Operations that return a new
    DataProto build it with `type(self)`, so a subclass stays a subclass, as in verl.

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
        """Validate on construction (`DataProto.__post_init__`, `verl/protocol.py:330`); None means empty."""
        self.non_tensor_batch = {} if self.non_tensor_batch is None else self.non_tensor_batch
        self.meta_info = {} if self.meta_info is None else self.meta_info
        self.check_consistency()

    def check_consistency(self) -> None:
        """Raise DataProtoError unless every field has one entry per sample (`verl/protocol.py:454`)."""
        if self.batch is not None and not isinstance(self.batch, TensorDict):
            raise TypeError(f"DataProto.batch must be a TensorDict or None, got {type(self.batch).__name__}")
        if self.batch is not None and self.batch.batch_dims != 1:
            raise DataProtoError(f"DataProto.batch must have exactly 1 batch dimension, got batch_size="
                                 f"{list(self.batch.batch_size)}; build it with "
                                 f"TensorDict(source, batch_size=[n])")
        if not isinstance(self.non_tensor_batch, dict) or not isinstance(self.meta_info, dict):
            raise TypeError("DataProto.non_tensor_batch and DataProto.meta_info must be dicts")
        for key, value in self.non_tensor_batch.items():
            if not isinstance(value, np.ndarray) or value.ndim == 0:
                raise DataProtoError(f"non_tensor_batch[{key!r}] must be a numpy array with one entry per "
                                     f"sample, got {type(value).__name__}; wrap it with np.array(values, "
                                     f"dtype=object) or pass a list to DataProto.from_dict, which converts it")
        for key, value in self.non_tensor_batch.items():
            if len(value) != len(self):
                raise DataProtoError(f"non_tensor_batch[{key!r}] has length {len(value)} but the batch size "
                                     f"is {len(self)}; every field needs exactly one entry per sample")

    @classmethod
    def from_dict(cls, tensors: dict | None = None, non_tensors: dict | None = None,
                  meta_info: dict | None = None, num_batch_dims: int = 1, auto_padding: bool = False) -> DataProto:
        """Build from a dict of tensors, a dict of per-sample values and a meta dict.

        Mirrors `DataProto.from_dict` (`verl/protocol.py:496`). Every tensor's first axis is the
        batch axis and must have the same length; lists in `non_tensors` become 1-d object arrays.
        `num_batch_dims` must be 1: verl accepts more but its `check_consistency` then rejects the
        result, so any other value raises DataProtoError here. `auto_padding=True` raises (minirl
        has no auto-padding mode; pad with `pad_dataproto_to_divisor`).
        """
        if num_batch_dims != 1:
            raise DataProtoError(f"DataProto.from_dict: num_batch_dims={num_batch_dims} is not supported; a "
                                 f"DataProto has exactly 1 batch dimension (group rows with fold_batch_dim)")
        if auto_padding:
            raise ValueError("DataProto.from_dict: auto_padding=True is not supported in minirl; pad before "
                             "chunk with pad_dataproto_to_divisor(data, n) and undo it with unpad_dataproto")
        tensors, pivot = tensors or {}, None
        for key, tensor in tensors.items():
            if tensor.dim() == 0:
                raise DataProtoError(f"DataProto.from_dict: tensor {key!r} is 0-d; tensors need a batch axis")
            pivot = key if pivot is None else pivot
            if tensor.shape[0] != tensors[pivot].shape[0]:
                raise DataProtoError(f"DataProto.from_dict: tensor {key!r} has batch size {tensor.shape[0]} "
                                     f"but {pivot!r} has {tensors[pivot].shape[0]}; all tensors must share "
                                     f"their first (batch) dimension")
        non_tensors = {key: value if isinstance(value, np.ndarray) else fields.as_object_array(value)
                       for key, value in (non_tensors or {}).items()}
        batch = TensorDict(dict(tensors), batch_size=[tensors[pivot].shape[0]]) if tensors else None
        return cls(batch=batch, non_tensor_batch=non_tensors, meta_info=dict(meta_info or {}))

    @classmethod
    def from_single_dict(cls, data: dict, meta_info: dict | None = None, auto_padding: bool = False) -> DataProto:
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
        return cls.from_dict(tensors, non_tensors, meta_info, auto_padding=auto_padding)

    @classmethod
    def from_tensordict(cls, tensor_dict: TensorDict, meta_info: dict | None = None,
                        num_batch_dims: int = 1) -> DataProto:
        """Build from the TensorDict form that `to_tensordict` writes (`verl/protocol.py:546`).

        Tensors go to `batch`, each `NonTensorStack` (one object per sample) to `non_tensor_batch`,
        each `NonTensorData` (one value) to `meta_info`, on top of the `meta_info` given.
        """
        tensors, non_tensors, meta = fields.split_tensordict(tensor_dict)
        return cls.from_dict(tensors, non_tensors, {**(meta_info or {}), **meta}, num_batch_dims=num_batch_dims)

    def to_tensordict(self) -> TensorDict:
        """The whole DataProto as one TensorDict, the input verl's engine workers take (`verl/protocol.py:1102`).

        Tensors stay tensors, each `non_tensor_batch` field becomes a `NonTensorStack` and each
        `meta_info` value a `NonTensorData`; `from_tensordict` undoes it. A TensorDict has one set
        of keys, so a key used in two compartments raises DataProtoError.
        """
        keys = [*self._batch_keys(), *self.non_tensor_batch, *self.meta_info]
        shared = sorted({key for key in keys if keys.count(key) > 1})
        if shared:
            raise DataProtoError(f"DataProto.to_tensordict: keys {shared} are in more than one compartment; "
                                 f"rename them first (DataProto.rename, or pop the meta value)")
        return fields.to_tensordict(self.batch, self.non_tensor_batch, self.meta_info, len(self))

    def __getstate__(self) -> tuple:
        """What pickle and Ray store: `(batch as bytes, non_tensor_batch, meta_info)` (`verl/protocol.py:377`).

        The batch is one consolidated `torch.save` buffer, or numpy byte arrays when
        `VERL_DATAPROTO_SERIALIZATION_METHOD=numpy` (see `minirl.protocol_fields`).
        """
        return fields.batch_to_state(self.batch), self.non_tensor_batch, self.meta_info

    def __setstate__(self, state: tuple) -> None:
        """Restore from `__getstate__`'s tuple (`verl/protocol.py:404`); tensors go to the CPU without a GPU."""
        batch, self.non_tensor_batch, self.meta_info = state
        self.batch = fields.batch_from_state(batch)

    def __len__(self) -> int:
        """Number of samples (`DataProto.__len__`, `verl/protocol.py:334`): rows of `batch`, else of the
        first `non_tensor_batch` field, else 0."""
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

    def _new(self, batch, non_tensor_batch, meta_info=None) -> DataProto:
        """A DataProto of self's type over new fields, with its own copy of self's meta dict by default."""
        return type(self)(batch, non_tensor_batch, dict(self.meta_info) if meta_info is None else meta_info)

    def select_idxs(self, idxs) -> DataProto:
        """The rows `idxs` (numbers, repeats allowed, or a mask) as a DataProto (`verl/protocol.py:635`)."""
        idx = _index_array(idxs)
        batch = self.batch[torch.from_numpy(idx)] if self.batch is not None else None
        return self._new(batch, {key: value[idx] for key, value in self.non_tensor_batch.items()})

    def slice(self, start=None, end=None, step=None) -> DataProto:
        """Rows `start:end:step`, a view sharing memory with self (`verl/protocol.py:675`).

        What `data[start:end]` does; verl's legacy trainer calls it to take a copy-free view of a batch
        (`RayPPOTrainer.fit`, `verl/trainer/ppo/ray_trainer.py:1405`: `gen_batch.slice(0, None)` for ReMax).
        """
        rows = slice(start, end, step)
        batch = self.batch[rows] if self.batch is not None else None
        return self._new(batch, {key: value[rows] for key, value in self.non_tensor_batch.items()})

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

    def unfold_column_chunks(self, n_split: int, split_keys: list[str] | None = None) -> DataProto:
        """Cut each row of the `split_keys` fields into `n_split` pieces along dim 1, one new row per piece.

        Mirrors `DataProto.unfold_column_chunks` (`verl/protocol.py:1015`). With `n_split=2`, a row
        whose `obs` is `[1, 2, 3, 4]` becomes two rows, `[1, 2]` and `[3, 4]`, and every field not in
        `split_keys` is repeated (as `repeat(2, interleave=True)`) so the rows still line up. A
        group of values can so travel as one row (through a shuffle) and be unfolded afterwards.
        A 1-d object field (minirl keeps each sample's list as one object) is cut list by list.
        Without `split_keys` every field is repeated.
        """
        if n_split <= 0:
            raise DataProtoError(f"DataProto.unfold_column_chunks: n_split must be positive, got {n_split}")
        split_keys = list(split_keys or [])
        _require_keys("unfold_column_chunks", "batch or non_tensor_batch", split_keys,
                      self._batch_keys() + list(self.non_tensor_batch))
        out = self.repeat(n_split, interleave=True)
        for key in split_keys:
            in_batch = key in self._batch_keys()
            value = self.batch[key] if in_batch else self.non_tensor_batch[key]
            pieces = fields.split_columns(key, value, n_split)
            if in_batch:
                out.batch[key] = pieces
            else:
                out.non_tensor_batch[key] = pieces
        return out

    def to(self, device) -> DataProto:
        """Move `batch` to `device` in place and return self (`DataProto.to`, `verl/protocol.py:586`)."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    def select(self, batch_keys=None, non_tensor_batch_keys=None, meta_info_keys=None,
               deepcopy=False) -> DataProto:
        """A new DataProto with only the named keys; None keeps a whole compartment.

        Mirrors `DataProto.select` (`verl/protocol.py:600`). Values are shared with self unless
        `deepcopy`. A missing key raises DataProtoKeyError in every compartment (verl ignores
        missing non-tensor and meta keys, and its `deepcopy` leaves the tensors shared).
        """
        _require_keys("select", "batch", batch_keys or [], self._batch_keys())
        batch = self.batch if batch_keys is None or self.batch is None else self.batch.select(*batch_keys)
        batch = batch.copy() if batch is not None else None  # a new TensorDict over the same tensors
        non_tensor = _subset(self.non_tensor_batch, non_tensor_batch_keys, "select", "non_tensor_batch")
        meta = _subset(self.meta_info, meta_info_keys, "select", "meta_info")
        if deepcopy:
            batch = batch.clone() if batch is not None else None
            non_tensor, meta = copy.deepcopy(non_tensor), copy.deepcopy(meta)
        return self._new(batch, non_tensor, meta)

    def pop(self, batch_keys=None, non_tensor_batch_keys=None, meta_info_keys=None) -> DataProto:
        """Remove the named keys from self and return them as a new DataProto.

        Mirrors `DataProto.pop` (`verl/protocol.py:721`). Every key is checked before anything is
        removed, so a DataProtoKeyError leaves self unchanged.
        """
        batch_keys, non_tensor_keys = batch_keys or [], non_tensor_batch_keys or []
        _require_keys("pop", "batch", batch_keys, self._batch_keys())
        _require_keys("pop", "non_tensor_batch", non_tensor_keys, self.non_tensor_batch)
        _require_keys("pop", "meta_info", meta_info_keys or [], self.meta_info)
        tensors = {key: self.batch.pop(key) for key in batch_keys}
        non_tensors = {key: self.non_tensor_batch.pop(key) for key in non_tensor_keys}
        meta = {key: self.meta_info.pop(key) for key in meta_info_keys or []}
        return type(self).from_dict(tensors, non_tensors, meta)

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
        values, else DataProtoError (meta_info too, as `union_two_dict`,
        `verl/utils/py_functional.py:151`); self changes only if the whole union succeeds.
        """
        if self.batch is None or other.batch is None:
            batch = self.batch if other.batch is None else other.batch.copy()
        else:
            batch = union_tensor_dict(self.batch.copy(), other.batch)
        non_tensor = union_numpy_dict(dict(self.non_tensor_batch), other.non_tensor_batch)
        fields.check_union(self.meta_info, other.meta_info, "meta_info")
        merged = DataProto(batch, non_tensor, {**self.meta_info, **other.meta_info})  # checks lengths
        self.batch, self.non_tensor_batch, self.meta_info = merged.batch, non_tensor, merged.meta_info
        return self

    def _batch_keys(self) -> list[str]:
        return list(self.batch.keys()) if self.batch is not None else []

    def chunk(self, chunks: int) -> list[DataProto]:
        """Split into `chunks` equal parts, e.g. one per data-parallel worker.

        Mirrors `DataProto.chunk` (`verl/protocol.py:864`). The size must divide evenly, else
        DataProtoError (verl asserts; in auto-padding mode it pads instead, `verl/protocol.py:849`).
        """
        if chunks <= 0:
            raise DataProtoError(f"DataProto.chunk: chunks must be positive, got {chunks}")
        if len(self) % chunks != 0:
            raise DataProtoError(f"DataProto.chunk: batch size {len(self)} is not divisible by {chunks} "
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
        dict of lists; every other meta key must agree across the inputs, else DataProtoError. The
        result has the type of `data[0]`.
        """
        if not data:
            raise ValueError("DataProto.concat: got an empty list; pass at least one DataProto")
        first, object_keys = data[0], list(data[0].non_tensor_batch)
        for i, d in enumerate(data):
            for name, keys, expected in (("batch", d._batch_keys(), first._batch_keys()),
                                         ("non_tensor_batch", list(d.non_tensor_batch), object_keys)):
                if set(keys) != set(expected):
                    raise DataProtoError(f"DataProto.concat: input {i} has {name} keys {sorted(keys)} but "
                                         f"input 0 has {sorted(expected)}; every input needs the same fields")
        batches = [d.batch for d in data]
        batch = torch.cat(batches, dim=0) if all(b is not None for b in batches) else None
        non_tensor = {key: np.concatenate([d.non_tensor_batch[key] for d in data]) for key in object_keys}
        return type(first)(batch, non_tensor, fields.concat_meta_info([d.meta_info for d in data]))

    def save_to_disk(self, filepath) -> None:
        """Pickle self to `filepath` (`DataProto.save_to_disk`, `verl/protocol.py:426`), via `__getstate__`.

        For a reader who wants to keep a batch between two stages and look at it later; verl uses the
        pair to replay a rollout instead of generating it again (`verl/utils/skip/rollout_skip.py`).
        """
        with open(filepath, "wb") as f:
            pickle.dump(self, f)

    @staticmethod
    def load_from_disk(filepath) -> DataProto:
        """Read what `save_to_disk` wrote (`verl/protocol.py:431`); tensors go to the CPU without a GPU.

        This unpickles: only load files you trust.
        """
        with open(filepath, "rb") as f:
            data = pickle.load(f)
        if not isinstance(data, DataProto):
            raise TypeError(f"DataProto.load_from_disk: {filepath} holds a {type(data).__name__}, not a "
                            f"DataProto; write it with DataProto.save_to_disk")
        return data

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
        return fields.summarize_fields(self._fields())

    def get_data_info(self) -> str:
        """A table, one line per field: key, compartment, shape, dtype, device (and short meta values).

        Mirrors `DataProto.get_data_info` (`verl/protocol.py:1128`); `repr(data)` prints it.
        """
        return f"DataProto with {len(self)} samples\n  " + fields.fields_table(self._fields())

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


def fold_batch_dim(data: DataProto, new_batch_size: int) -> DataProto:
    """Group consecutive rows: `bsz` rows become `new_batch_size` rows of `bsz // new_batch_size` samples.

    Mirrors `fold_batch_dim` (`verl/protocol.py:202`). Every field of shape `(bsz, ...)` becomes
    `(new_batch_size, bsz // new_batch_size, ...)`, non-tensor arrays too. After
    `repeat(n, interleave=True)`, folding to the prompt count puts each prompt's n responses in one
    row, so `reorder` or `chunk` then move whole groups; `unfold_batch_dim` undoes it. Unlike verl,
    the input DataProto is left unchanged (verl reshapes its non-tensor arrays in place).
    """
    return data._new(*fields.fold_rows(data.batch, data.non_tensor_batch, len(data), new_batch_size))


def unfold_batch_dim(data: DataProto, batch_dims: int = 2) -> DataProto:
    """Flatten the first `batch_dims` dims of every field into one batch dim; undoes `fold_batch_dim`.

    Mirrors `unfold_batch_dim` (`verl/protocol.py:222`): fields of shape `(a, b, ...)` become
    `(a * b, ...)` with `batch_dims=2`. Every field must share those leading dims.
    """
    return data._new(*fields.unfold_rows(data.batch, data.non_tensor_batch, batch_dims))
