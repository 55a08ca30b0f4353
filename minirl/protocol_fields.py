"""Functions on a DataProto's compartments, which verl keeps at module level in `verl/protocol.py`.

`minirl.protocol` holds the `DataProto` class and re-exports every public name here. This module
never sees a DataProto, only its parts (TensorDicts, dicts of arrays, meta dicts):

- Errors: `DataProtoError` and `DataProtoKeyError`, raised where verl uses `assert`.
- Comparing and merging fields: `union_tensor_dict` (`verl/protocol.py:109`), `union_numpy_dict`
  (`verl/protocol.py:188`) and the meta_info merge of `DataProto.concat`.
- Bytes: `DataProto.__getstate__` (`verl/protocol.py:377`) does not pickle the TensorDict tensor
  by tensor. By default it packs every tensor into one buffer (`TensorDict.consolidate`) and
  writes that with `torch.save`. With the environment variable
  `VERL_DATAPROTO_SERIALIZATION_METHOD=numpy` it turns each tensor into a uint8 numpy array
  (`serialize_tensordict`, `verl/protocol.py:247`), which pickle and Ray move as a plain buffer.
- The TensorDict form, which verl's engine workers take instead of a DataProto:
  `DataProto.to_tensordict` (`verl/protocol.py:1102`) stores per-sample objects as a
  `NonTensorStack` and run-level values as `NonTensorData` beside the tensors;
  `DataProto.from_tensordict` (`verl/protocol.py:546`) sorts them back into the compartments.
- Reshaping rows: the bodies of `fold_batch_dim` (`verl/protocol.py:202`), `unfold_batch_dim`
  (`verl/protocol.py:222`) and `DataProto.unfold_column_chunks`.
- The field table behind `DataProto.summary` and `get_data_info`.

Differences from verl: the decoder reads whichever format it is given (torch bytes or the numpy
tuple), where verl decodes by the environment variable at load time; a CUDA tensor is copied to
the CPU before it becomes bytes; an empty tensor round-trips (verl's `torch.frombuffer` rejects
zero bytes).
"""

from __future__ import annotations

import io
import math
import os
from typing import Any

import numpy as np
import tensordict
import torch
from packaging.version import parse as parse_version
from tensordict import NonTensorData, NonTensorStack, TensorDict

__all__ = ["SERIALIZATION_METHOD_ENV", "DataProtoError", "DataProtoKeyError", "deserialize_single_tensor",
           "deserialize_tensordict", "serialize_single_tensor", "serialize_tensordict", "union_numpy_dict",
           "union_tensor_dict"]

SERIALIZATION_METHOD_ENV = "VERL_DATAPROTO_SERIALIZATION_METHOD"
"""Set it to `numpy` to pickle batches as numpy byte arrays instead of `torch.save` bytes (verl's name)."""


# ---------------------------------------------------------------- errors


class DataProtoError(ValueError, AssertionError):
    """Bad input to a DataProto operation: sizes that do not fit, or fields that conflict.

    A ValueError, as minirl raises for bad input, and also an AssertionError, because verl checks
    these conditions with `assert`: code written for verl (`except AssertionError`, or
    `pytest.raises(AssertionError)`) still catches it.
    """


class DataProtoKeyError(KeyError, AssertionError):
    """A named key is not in the DataProto; a KeyError, and an AssertionError as verl's `pop` asserts."""

    def __str__(self) -> str:  # the message itself, not KeyError's quoted repr of it
        return str(self.args[0]) if self.args else ""


# ---------------------------------------------------------------- comparing and merging fields


def _values_equal(a: Any, b: Any, _seen: set | None = None) -> bool:
    """Same value? Tensors and arrays element-wise, NaN equals NaN (`_deep_equal`, `verl/protocol.py:152`).

    Containers are compared recursively; a pair already being compared further up (a container
    that holds itself) counts as equal, so self-referencing values do not recurse forever.
    """
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        both = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
        return both and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, np.ndarray) != isinstance(b, np.ndarray):
        return False
    if isinstance(a, np.ndarray) and a.dtype != object and b.dtype != object:
        return a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc" and b.dtype.kind in "fc")
    if not isinstance(a, (np.ndarray, list, tuple, dict)):
        try:
            return bool(a == b)
        except (TypeError, ValueError, RuntimeError):  # an object whose == does not answer yes or no
            return False
    seen = set() if _seen is None else _seen
    if (id(a), id(b)) in seen:
        return True
    seen.add((id(a), id(b)))
    try:
        if isinstance(a, np.ndarray):
            return a.shape == b.shape and all(_values_equal(x, y, seen) for x, y in zip(a.flat, b.flat))
        if isinstance(a, dict):
            return isinstance(b, dict) and a.keys() == b.keys() and all(_values_equal(a[k], b[k], seen) for k in a)
        return (type(a) is type(b) and len(a) == len(b)
                and all(_values_equal(x, y, seen) for x, y in zip(a, b)))
    finally:
        seen.discard((id(a), id(b)))


def check_union(left, right, compartment: str) -> None:
    """Raise DataProtoError if a key of both `left` and `right` holds different values."""
    for key in right.keys():  # noqa: SIM118 (iterating a TensorDict itself walks its rows)
        if key in left and not _values_equal(left[key], right[key]):
            raise DataProtoError(f"union: {compartment} key {key!r} is on both sides with different values; "
                                 f"rename one side (DataProto.rename) or pop it before the union")


def union_tensor_dict(tensor_dict1: TensorDict, tensor_dict2: TensorDict) -> TensorDict:
    """Add the tensors of `tensor_dict2` to `tensor_dict1` in place and return it (`verl/protocol.py:109`).

    A key on both sides must hold equal tensors (a field computed twice is fine), else DataProtoError.
    """
    if tensor_dict1.batch_size != tensor_dict2.batch_size:
        raise DataProtoError(f"union: batch sizes differ ({list(tensor_dict1.batch_size)} vs "
                             f"{list(tensor_dict2.batch_size)}); union joins fields of the same samples")
    check_union(tensor_dict1, tensor_dict2, "batch")
    tensor_dict1.update(tensor_dict2)
    return tensor_dict1


def union_numpy_dict(tensor_dict1: dict[str, np.ndarray], tensor_dict2: dict[str, np.ndarray]) -> dict:
    """Add the arrays of `tensor_dict2` to `tensor_dict1` in place and return it (`verl/protocol.py:188`).

    A key on both sides must hold equal arrays, else DataProtoError. Equal means same shape and
    values, element by element through object arrays, with NaN equal to NaN.
    """
    check_union(tensor_dict1, tensor_dict2, "non_tensor_batch")
    tensor_dict1.update(tensor_dict2)
    return tensor_dict1


def concat_meta_info(metas: list[dict]) -> dict:
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
                raise DataProtoError(f"DataProto.concat: Conflicting values for meta_info key {key!r} "
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


# ---------------------------------------------------------------- reshaping rows


def as_object_array(values) -> np.ndarray:
    """A 1-d object array, one entry per value (`np.array([[1, 2]], dtype=object)`, as verl does, is 2-d)."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def split_columns(key: str, value, n_split: int):
    """`value` of shape `(rows, columns, ...)` as `(rows * n_split, columns // n_split, ...)`."""
    if value.ndim >= 2:
        rows, columns = value.shape[:2]
        if columns % n_split:
            raise DataProtoError(f"DataProto.unfold_column_chunks: {key!r} has {columns} columns (dim 1), which "
                                 f"do not split into n_split={n_split} equal pieces")
        return value.reshape(rows * n_split, columns // n_split, *value.shape[2:])
    if isinstance(value, np.ndarray) and value.dtype == object:  # one list per sample: cut each list
        pieces = []
        for i, row in enumerate(value):
            if not isinstance(row, (list, tuple, np.ndarray)) or len(row) % n_split:
                raise DataProtoError(f"DataProto.unfold_column_chunks: {key!r}[{i}] is not a list, tuple or "
                                     f"array whose length divides by n_split={n_split}")
            width = len(row) // n_split
            pieces += [row[j * width : (j + 1) * width] for j in range(n_split)]
        return as_object_array(pieces)
    raise DataProtoError(f"DataProto.unfold_column_chunks: {key!r} has shape {tuple(value.shape)}, with no "
                         f"dim 1 to split; name fields of 2 or more dims (or object fields of lists)")


def fold_rows(batch: TensorDict | None, non_tensor_batch: dict, size: int, new_batch_size: int) -> tuple:
    """`fold_batch_dim` on the parts: every field `(size, ...)` as `(new_batch_size, size // new_batch_size, ...)`."""
    if new_batch_size <= 0 or size % new_batch_size:
        raise DataProtoError(f"fold_batch_dim: batch size {size} is not divisible by new_batch_size "
                             f"{new_batch_size}")
    return _reshape_fields(batch, non_tensor_batch, new_batch_size,
                           lambda value: value.reshape(new_batch_size, size // new_batch_size, *value.shape[1:]))


def unfold_rows(batch: TensorDict | None, non_tensor_batch: dict, batch_dims: int) -> tuple:
    """`unfold_batch_dim` on the parts: the first `batch_dims` dims of every field flattened into one."""
    items = [*(batch.items() if batch is not None else []), *non_tensor_batch.items()]
    lead = tuple(items[0][1].shape[:batch_dims]) if items else ()
    for key, value in items:
        if batch_dims < 1 or value.ndim < batch_dims or tuple(value.shape[:batch_dims]) != lead:
            raise DataProtoError(f"unfold_batch_dim: cannot flatten the first {batch_dims} dims of {key!r} "
                                 f"(shape {tuple(value.shape)}); every field must start with {lead}")
    rows = math.prod(lead)
    return _reshape_fields(batch, non_tensor_batch, rows, lambda value: value.reshape(rows, *value.shape[batch_dims:]))


def _reshape_fields(batch: TensorDict | None, non_tensor_batch: dict, rows: int, reshape) -> tuple:
    """`(batch, non_tensor_batch)` with `reshape` applied to every field; the batch gets `rows` rows."""
    new_batch = None if batch is None else TensorDict(
        {key: reshape(value) for key, value in batch.items()}, batch_size=[rows], device=batch.device)
    return new_batch, {key: reshape(value) for key, value in non_tensor_batch.items()}


# ---------------------------------------------------------------- bytes (pickling, save_to_disk)


def _load_device(device: str | None) -> str | None:
    """Where to put loaded tensors: the saved device, or the CPU when this machine has no GPU."""
    return device if device is None or torch.cuda.is_available() else "cpu"


def serialize_single_tensor(obj: torch.Tensor) -> tuple[str, torch.Size, np.ndarray]:
    """One tensor as `(dtype name, shape, its bytes as a uint8 numpy array)` (`verl/protocol.py:241`).

    The bytes are the tensor's memory read as uint8, so every dtype (bfloat16, float8, bool)
    comes back bit for bit. Undo it with `deserialize_single_tensor`.
    """
    flat = obj.detach().reshape(-1).contiguous().cpu()
    return str(obj.dtype).removeprefix("torch."), obj.shape, flat.view(torch.uint8).numpy()


def deserialize_single_tensor(arr: tuple[str, Any, Any]) -> torch.Tensor:
    """Rebuild a tensor from `serialize_single_tensor`'s triple (`verl/protocol.py:262`), on the CPU."""
    dtype_name, shape, data = arr
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        raise DataProtoError(f"deserialize_single_tensor: {dtype_name!r} is not a torch dtype; pass the "
                             f"(dtype, shape, data) triple that serialize_single_tensor returned")
    raw = bytearray(data)  # a private, writable copy: torch.frombuffer shares memory with its buffer
    flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    return flat.view(dtype).reshape(shape)


def serialize_tensordict(batch: TensorDict) -> tuple[tuple[int, ...], str | None, dict[str, tuple]]:
    """A TensorDict as `(batch_size, device, {key: encoded})` of plain Python and numpy values.

    Mirrors `serialize_tensordict` (`verl/protocol.py:247`). A dense tensor is encoded as the
    `serialize_single_tensor` triple; a nested (ragged) tensor as `(layout name, [triple per row])`.
    """
    encoded = {}
    for key, value in batch.items():
        if value.is_nested:
            layout = str(value.layout).removeprefix("torch.")
            encoded[key] = (layout, [serialize_single_tensor(row) for row in value.unbind()])
        else:
            encoded[key] = serialize_single_tensor(value)
    return tuple(batch.batch_size), None if batch.device is None else str(batch.device), encoded


def deserialize_tensordict(arr: tuple) -> TensorDict:
    """Rebuild the TensorDict that `serialize_tensordict` encoded (`verl/protocol.py:275`)."""
    batch_size, device, encoded = arr
    tensors = {}
    for key, value in encoded.items():
        if len(value) == 3:
            tensors[key] = deserialize_single_tensor(value)
        elif len(value) == 2:
            layout, rows = value
            tensors[key] = torch.nested.as_nested_tensor([deserialize_single_tensor(r) for r in rows],
                                                         layout=getattr(torch, layout))
        else:
            raise ValueError(f"deserialize_tensordict: key {key!r} has an encoding of length {len(value)}; "
                             f"expected 3 (a tensor) or 2 (a nested tensor), as serialize_tensordict writes")
    return TensorDict(tensors, batch_size=batch_size, device=_load_device(device))


def batch_to_state(batch: TensorDict | None) -> bytes | tuple | None:
    """The picklable form of `DataProto.batch` (the batch part of `DataProto.__getstate__`)."""
    if os.getenv(SERIALIZATION_METHOD_ENV) == "numpy":
        return None if batch is None else serialize_tensordict(batch)
    if batch is not None and len(batch.keys()) > 0:  # consolidate() cannot pack an empty TensorDict
        batch = batch.contiguous().consolidate()
    buffer = io.BytesIO()
    torch.save(batch, buffer)
    return buffer.getvalue()


def batch_from_state(state: bytes | tuple | None) -> TensorDict | None:
    """`DataProto.batch` back from `batch_to_state`'s output, whichever method wrote it."""
    if state is None or isinstance(state, tuple):
        return None if state is None else deserialize_tensordict(state)
    return torch.load(io.BytesIO(state), weights_only=False,
                      map_location=None if torch.cuda.is_available() else "cpu")


def _require_tensordict_0_10(method: str) -> None:
    if parse_version(tensordict.__version__) < parse_version("0.10"):
        raise RuntimeError(f"DataProto.{method} needs tensordict >= 0.10 (installed: {tensordict.__version__}); "
                           f"upgrade with `pip install -U tensordict`")


def to_tensordict(batch: TensorDict | None, non_tensor_batch: dict, meta_info: dict, size: int) -> TensorDict:
    """One TensorDict of `size` rows: the tensors, each object field as a NonTensorStack, each meta value
    as NonTensorData (the body of `DataProto.to_tensordict`)."""
    _require_tensordict_0_10("to_tensordict")
    source = dict(batch.items()) if batch is not None else {}
    for key, values in non_tensor_batch.items():
        source[key] = NonTensorStack.from_list([NonTensorData(value) for value in values])
    for key, value in meta_info.items():
        source[key] = NonTensorData(value)
    return TensorDict(source, batch_size=[size], device=None if batch is None else batch.device)


def split_tensordict(td: TensorDict) -> tuple[dict, dict, dict]:
    """`(tensors, per-sample lists, meta values)` from a TensorDict (the body of `DataProto.from_tensordict`)."""
    _require_tensordict_0_10("from_tensordict")
    tensors, non_tensors, meta = {}, {}, {}
    for key, value in td.items():
        if isinstance(value, torch.Tensor):
            tensors[key] = value
        elif isinstance(value, NonTensorStack):
            non_tensors[key] = value.tolist()
        elif isinstance(value, NonTensorData):
            meta[key] = value.data
        else:
            raise TypeError(f"DataProto.from_tensordict: {key!r} holds a {type(value).__name__}; expected a "
                            f"tensor, a NonTensorStack (one object per sample) or NonTensorData (one value)")
    return tensors, non_tensors, meta


# ---------------------------------------------------------------- the field table


def summarize_fields(fields: list[tuple[str, str, Any]]) -> list[dict]:
    """`DataProto.summary`: one `{key, storage, shape, dtype, device}` dict per `(storage, key, value)`."""
    rows = []
    for storage, key, value in fields:
        is_array = isinstance(value, (torch.Tensor, np.ndarray))
        device = "cpu" if isinstance(value, np.ndarray) else getattr(value, "device", None)
        rows.append({"key": key, "storage": storage,
                     "shape": tuple(value.shape) if hasattr(value, "shape") else None,
                     "dtype": str(value.dtype) if is_array else type(value).__name__,
                     "device": None if device is None else str(device)})
    return rows


def fields_table(fields: list[tuple[str, str, Any]]) -> str:
    """`DataProto.get_data_info`'s table: a header, then one aligned line per field."""
    table = [["key", "storage", "shape", "dtype", "device"]]
    for row, (storage, _, value) in zip(summarize_fields(fields), fields):
        shape = "-" if row["shape"] is None else str(row["shape"])
        table.append([row["key"], storage, shape, row["dtype"], row["device"] or "-"])
        if storage == "meta_info" and isinstance(value, (int, float, str)) and len(repr(value)) < 40:
            table[-1][-1] += f"   = {value!r}"  # short run-level values, e.g. temperature
    widths = [max(len(line[c]) for line in table) for c in range(4)]
    return "\n  ".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[4]
                       for line in table)
