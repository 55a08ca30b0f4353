"""Tests for minirl.protocol: DataProto's contract with verl (`verl/protocol.py:318`) and its errors."""

import pickle

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from minirl.protocol import (
    SERIALIZATION_METHOD_ENV,
    DataProto,
    DataProtoError,
    DataProtoItem,
    DataProtoKeyError,
    deserialize_single_tensor,
    deserialize_tensordict,
    fold_batch_dim,
    pad_dataproto_to_divisor,
    serialize_single_tensor,
    serialize_tensordict,
    unfold_batch_dim,
    union_numpy_dict,
    union_tensor_dict,
    unpad_dataproto,
)


def make(n=4, meta=None):
    """n samples: obs[i] = [2i, 2i+1], reward[i] = i, uid[i] = 'u{i}'."""
    return DataProto.from_dict(
        tensors={"obs": torch.arange(2 * n).reshape(n, 2), "reward": torch.arange(n, dtype=torch.float32)},
        non_tensors={"uid": [f"u{i}" for i in range(n)]},
        meta_info={"temperature": 1.0} if meta is None else meta,
    )


def rows(data):
    """The sample ids present in data, read from both compartments (they must agree)."""
    from_tensor = data.batch["reward"].long().tolist()
    from_objects = [int(u[1:]) for u in data.non_tensor_batch["uid"]]
    assert from_tensor == from_objects, "batch and non_tensor_batch rows drifted apart"
    return from_tensor


# ---------------------------------------------------------------- construction and consistency


def test_from_dict_builds_three_compartments():
    data = make(3)
    assert len(data) == 3
    assert isinstance(data.batch, TensorDict) and list(data.batch.batch_size) == [3]
    assert data.non_tensor_batch["uid"].dtype == object and data.non_tensor_batch["uid"].shape == (3,)
    assert data.meta_info == {"temperature": 1.0}
    assert rows(data) == [0, 1, 2]


def test_from_dict_keeps_each_list_as_one_object():
    # np.array([[1, 2], [3, 4]], dtype=object) would be 2-d; each sample must keep its own list
    data = DataProto.from_dict(non_tensors={"tools": [[1, 2], [3, 4]]})
    assert data.non_tensor_batch["tools"].shape == (2,)
    assert data.non_tensor_batch["tools"][1] == [3, 4]
    assert len(data) == 2 and data.batch is None


def test_from_dict_rejects_mismatched_tensors():
    with pytest.raises(ValueError, match=r"tensor 'b' has batch size 3 but 'a' has 2"):
        DataProto.from_dict(tensors={"a": torch.zeros(2, 4), "b": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"tensor 'a' is 0-d"):
        DataProto.from_dict(tensors={"a": torch.tensor(1.0)})


def test_from_single_dict_splits_by_type():
    data = DataProto.from_single_dict(
        {"ids": torch.ones(2, 3), "uid": np.array(["a", "b"], dtype=object), "answer": ["1", "2"]},
        meta_info={"step": 7},
    )
    assert list(data.batch.keys()) == ["ids"]
    assert set(data.non_tensor_batch) == {"uid", "answer"}
    assert data.non_tensor_batch["answer"].dtype == object
    assert data.meta_info == {"step": 7}
    with pytest.raises(TypeError, match=r"'x' has type int; expected a torch.Tensor"):
        DataProto.from_single_dict({"ids": torch.ones(2), "x": 3})


def test_empty_dataproto_has_length_zero():
    assert len(DataProto()) == 0
    assert len(DataProto.from_dict(meta_info={"a": 1})) == 0


def test_check_consistency_names_key_length_and_batch_size():
    batch = TensorDict({"obs": torch.zeros(4, 2)}, batch_size=[4])
    with pytest.raises(ValueError, match=r"non_tensor_batch\['uid'\] has length 3 but the batch size is 4"):
        DataProto(batch=batch, non_tensor_batch={"uid": np.array(["a", "b", "c"], dtype=object)})
    with pytest.raises(ValueError, match=r"non_tensor_batch\['uid'\] must be a numpy array .* got list"):
        DataProto(batch=batch, non_tensor_batch={"uid": ["a", "b", "c", "d"]})
    with pytest.raises(ValueError, match=r"exactly 1 batch dimension, got batch_size=\[4, 2\]"):
        DataProto(batch=TensorDict({"obs": torch.zeros(4, 2)}, batch_size=[4, 2]))
    with pytest.raises(TypeError, match="DataProto.batch must be a TensorDict or None, got dict"):
        DataProto(batch={"obs": torch.zeros(4, 2)})
    # without tensors, the first non-tensor field sets the batch size
    with pytest.raises(ValueError, match=r"non_tensor_batch\['b'\] has length 1 but the batch size is 2"):
        DataProto(non_tensor_batch={"a": np.zeros(2), "b": np.zeros(1)})


# ---------------------------------------------------------------- indexing


def test_getitem_int_returns_item():
    data = make(4)
    item = data[2]
    assert isinstance(item, DataProtoItem)
    assert item.batch["obs"].tolist() == [4, 5]
    assert item.non_tensor_batch == {"uid": "u2"}
    assert item.meta_info == {"temperature": 1.0}
    assert data[-1].non_tensor_batch["uid"] == "u3"
    assert data[np.int64(1)].batch["reward"].item() == 1.0


def test_getitem_slice_list_array_and_tensors():
    data = make(6)
    assert rows(data[1:4]) == [1, 2, 3]
    assert rows(data[::2]) == [0, 2, 4]
    assert rows(data[[5, 0, 0]]) == [5, 0, 0]
    assert rows(data[np.array([3, 1])]) == [3, 1]
    assert rows(data[torch.tensor([4, 2])]) == [4, 2]
    assert rows(data[torch.tensor([True, False, True, False, False, True])]) == [0, 2, 5]
    assert rows(data[[True, True, False, False, False, False]]) == [0, 1]
    assert len(data[[]]) == 0
    assert isinstance(data[1:3], DataProto) and data[1:3].meta_info == {"temperature": 1.0}
    with pytest.raises(TypeError, match="cannot be indexed with str"):
        data["obs"]


def test_select_idxs_and_slice_copy_meta_info():
    data = make(4)
    picked = data.select_idxs([1, 1])
    assert rows(picked) == [1, 1]
    picked.meta_info["temperature"] = 0.5
    assert data.meta_info["temperature"] == 1.0  # each result has its own meta dict
    assert rows(data.slice(1, None, 2)) == [1, 3]


def test_reorder_is_in_place():
    data = make(4)
    assert data.reorder(torch.tensor([3, 2, 1, 0])) is None
    assert rows(data) == [3, 2, 1, 0]


def test_to_moves_batch_and_returns_self():
    data = make(2)
    assert data.to("cpu") is data
    assert data.batch.device == torch.device("cpu")


# ---------------------------------------------------------------- fields: select, pop, rename, union


def test_select_keeps_named_keys():
    data = make(4, meta={"temperature": 1.0, "step": 3})
    sub = data.select(batch_keys=["obs"], non_tensor_batch_keys=[], meta_info_keys=["step"])
    assert list(sub.batch.keys()) == ["obs"]
    assert sub.non_tensor_batch == {} and sub.meta_info == {"step": 3}
    assert len(sub) == 4
    everything = data.select()
    everything.batch["new"] = torch.zeros(4)
    assert "new" not in data.batch  # a new TensorDict, even when nothing is dropped
    assert everything.batch["obs"] is data.batch["obs"]  # ... over the same tensors


def test_select_deepcopy_is_independent():
    data = make(2, meta={"cfg": {"lr": 1.0}})
    copied = data.select(deepcopy=True)
    copied.batch["obs"][0, 0] = 100
    copied.non_tensor_batch["uid"][0] = "changed"
    copied.meta_info["cfg"]["lr"] = 2.0
    assert data.batch["obs"][0, 0].item() == 0
    assert data.non_tensor_batch["uid"][0] == "u0"
    assert data.meta_info["cfg"]["lr"] == 1.0


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"batch_keys": ["nope"]}, r"DataProto.select: key 'nope' is not in batch; available keys: \['obs'"),
        ({"non_tensor_batch_keys": ["nope"]}, r"'nope' is not in non_tensor_batch; available keys: \['uid'"),
        ({"meta_info_keys": ["nope"]}, r"'nope' is not in meta_info; available keys: \['temperature'\]"),
    ],
)
def test_select_missing_key(kwargs, pattern):
    with pytest.raises(KeyError, match=pattern):
        make(2).select(**kwargs)


def test_pop_removes_and_returns():
    data = make(3, meta={"temperature": 1.0, "step": 2})
    popped = data.pop(batch_keys=["reward"], non_tensor_batch_keys=["uid"], meta_info_keys=["step"])
    assert popped.batch["reward"].tolist() == [0.0, 1.0, 2.0]
    assert popped.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u2"]
    assert popped.meta_info == {"step": 2}
    assert list(data.batch.keys()) == ["obs"] and data.non_tensor_batch == {}
    assert data.meta_info == {"temperature": 1.0}
    assert len(data) == 3


def test_pop_missing_key_names_available_keys_and_changes_nothing():
    data = make(2)
    pattern = r"DataProto.pop: key 'values' is not in batch; available keys: \['obs', 'reward'\]"
    with pytest.raises(KeyError, match=pattern):
        data.pop(batch_keys=["obs", "values"])
    with pytest.raises(KeyError, match=r"key 'x' is not in meta_info; available keys: \['temperature'\]"):
        data.pop(batch_keys=["obs"], meta_info_keys=["x"])
    assert list(data.batch.keys()) == ["obs", "reward"]  # checked before anything was removed


def test_rename_batch_and_non_tensor_keys():
    data = make(2)
    assert data.rename("reward", "token_level_scores") is data
    assert set(data.batch.keys()) == {"obs", "token_level_scores"}
    data.rename(["obs", "uid"], ["input_ids", "prompt_uid"])
    assert set(data.batch.keys()) == {"input_ids", "token_level_scores"}
    assert list(data.non_tensor_batch) == ["prompt_uid"]
    with pytest.raises(ValueError, match="got 2 old keys but 1 new keys"):
        data.rename(["a", "b"], ["c"])
    with pytest.raises(KeyError, match=r"DataProto.rename: key 'nope' is not in batch or non_tensor_batch"):
        data.rename("nope", "x")
    with pytest.raises(ValueError, match="cannot rename 'input_ids' to 'prompt_uid', which already exists"):
        data.rename("input_ids", "prompt_uid")


def test_union_adds_fields_and_accepts_equal_values():
    data = make(3)
    extra = DataProto.from_dict(
        tensors={"values": torch.ones(3), "reward": torch.arange(3, dtype=torch.float32)},  # equal: fine
        non_tensors={"answer": ["a", "b", "c"], "uid": ["u0", "u1", "u2"]},
        meta_info={"temperature": 1.0, "global_steps": 5},
    )
    assert data.union(extra) is data
    assert set(data.batch.keys()) == {"obs", "reward", "values"}
    assert set(data.non_tensor_batch) == {"uid", "answer"}
    assert data.meta_info == {"temperature": 1.0, "global_steps": 5}
    assert rows(data) == [0, 1, 2]


@pytest.mark.parametrize(
    ("other", "pattern"),
    [
        ({"tensors": {"reward": torch.zeros(3)}}, r"union: batch key 'reward' is on both sides with diff"),
        ({"non_tensors": {"uid": ["x", "y", "z"]}}, r"union: non_tensor_batch key 'uid' is on both sides"),
        ({"meta_info": {"temperature": 0.7}}, r"union: meta_info key 'temperature' is on both sides"),
        ({"tensors": {"values": torch.zeros(2)}}, r"union: batch sizes differ \(\[3\] vs \[2\]\)"),
        ({"non_tensors": {"answer": ["a"]}}, r"\['answer'\] has length 1 but the batch size is 3"),
    ],
)
def test_union_conflicts_raise_and_leave_self_unchanged(other, pattern):
    data = make(3)
    with pytest.raises(ValueError, match=pattern):
        data.union(DataProto.from_dict(**other))
    assert set(data.batch.keys()) == {"obs", "reward"} and set(data.non_tensor_batch) == {"uid"}
    assert data.meta_info == {"temperature": 1.0}


def test_union_into_empty_batch():
    objects = DataProto.from_dict(non_tensors={"uid": ["a", "b"]})
    objects.union(DataProto.from_dict(tensors={"x": torch.zeros(2)}))
    assert list(objects.batch.keys()) == ["x"] and len(objects) == 2


def test_module_level_union_helpers():
    td1 = TensorDict({"a": torch.ones(2)}, batch_size=[2])
    out = union_tensor_dict(td1, TensorDict({"a": torch.ones(2), "b": torch.zeros(2)}, batch_size=[2]))
    assert out is td1 and set(td1.keys()) == {"a", "b"}
    nan = np.array([np.nan, 1.0])
    merged = union_numpy_dict({"f": nan}, {"f": nan.copy(), "g": np.array([1, 2])})  # NaN equals NaN
    assert set(merged) == {"f", "g"}
    with pytest.raises(ValueError, match="non_tensor_batch key 'g'"):
        union_numpy_dict(merged, {"g": np.array([1, 3])})


def test_union_compares_nested_meta_values():
    data = make(2, meta={"cfg": {"w": torch.ones(3), "tags": ["a"]}})
    data.union(DataProto.from_dict(meta_info={"cfg": {"w": torch.ones(3), "tags": ["a"]}}))  # equal: fine
    with pytest.raises(ValueError, match="meta_info key 'cfg'"):
        data.union(DataProto.from_dict(meta_info={"cfg": {"w": torch.zeros(3), "tags": ["a"]}}))


# ---------------------------------------------------------------- chunk, split, concat, padding


def test_chunk_equal_parts():
    parts = make(8).chunk(4)
    assert [rows(p) for p in parts] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert all(p.meta_info == {"temperature": 1.0} for p in parts)


def test_chunk_uneven_names_sizes_and_helpers():
    expected = (
        "DataProto.chunk: batch size 10 is not divisible by 4 chunks; pad first with "
        "pad_dataproto_to_divisor(data, 4) and remove the padding afterwards with "
        "unpad_dataproto(output, pad_size)"
    )
    with pytest.raises(ValueError) as info:
        make(10).chunk(4)
    assert str(info.value) == expected
    with pytest.raises(ValueError, match="chunks must be positive, got 0"):
        make(2).chunk(0)


def test_split_last_piece_smaller():
    assert [rows(p) for p in make(7).split(3)] == [[0, 1, 2], [3, 4, 5], [6]]
    with pytest.raises(ValueError, match="split_size must be positive, got 0"):
        make(2).split(0)


def test_pad_chunk_concat_unpad_round_trip():
    data = make(10)
    padded, pad_size = pad_dataproto_to_divisor(data, 4)
    assert pad_size == 2 and len(padded) == 12
    assert rows(padded) == list(range(10)) + [0, 1]  # padding repeats rows from the start, as verl
    outputs = padded.chunk(4)  # e.g. one chunk per worker
    assert [len(o) for o in outputs] == [3, 3, 3, 3]
    restored = unpad_dataproto(DataProto.concat(outputs), pad_size)
    assert rows(restored) == list(range(10))
    assert torch.equal(restored.batch["obs"], data.batch["obs"])
    assert restored.meta_info == data.meta_info


def test_pad_wraps_around_and_no_op_cases():
    padded, pad_size = pad_dataproto_to_divisor(make(3), 8)
    assert pad_size == 5 and rows(padded) == [0, 1, 2, 0, 1, 2, 0, 1]
    data = make(4, meta={"metrics": [{"loss": 1.0}]})
    same, pad_size = pad_dataproto_to_divisor(data, 2)
    assert same is data and pad_size == 0
    assert pad_dataproto_to_divisor(make(3, meta={"metrics": [{"loss": 1.0}]}), 2)[0].meta_info == {
        "metrics": [{"loss": 1.0}]
    }  # padding leaves meta_info alone
    assert unpad_dataproto(data, 0) is data
    with pytest.raises(ValueError, match="pad_size 5 must be between 0 and the batch size 4"):
        unpad_dataproto(data, 5)
    with pytest.raises(ValueError, match="size_divisor must be positive, got 0"):
        pad_dataproto_to_divisor(data, 0)


def test_concat_rows_and_metrics_gathering():
    a = make(2, meta={"temperature": 1.0, "metrics": {"loss": 0.5, "acc": 0.9}})
    two_workers = [{"loss": 0.6, "acc": 0.8}, {"loss": 0.7, "acc": 0.7}]
    b = make(4, meta={"temperature": 1.0, "metrics": two_workers})[2:]
    c = make(6, meta={"temperature": 1.0, "extra": "x"})[4:]  # no metrics here; new keys are merged
    out = DataProto.concat([a, b, c])
    assert rows(out) == [0, 1, 2, 3, 4, 5]
    assert out.meta_info == {
        "temperature": 1.0,
        "extra": "x",
        "metrics": {"loss": [0.5, 0.6, 0.7], "acc": [0.9, 0.8, 0.7]},
    }
    listed = DataProto.concat([make(1, meta={"metrics": [1.0]}), make(1, meta={"metrics": [2.0]})])
    assert listed.meta_info["metrics"] == [1.0, 2.0]  # metrics that are not dicts stay a flat list


def test_concat_conflicts():
    pattern = r"Conflicting values for meta_info key 'temperature' \(1.0 vs 0.5 in input 1\)"
    with pytest.raises(ValueError, match=pattern):
        DataProto.concat([make(2), make(2, meta={"temperature": 0.5})])
    other = make(2)
    other.pop(batch_keys=["reward"])
    with pytest.raises(ValueError, match=r"input 1 has batch keys \['obs'\] but input 0 has \['obs', 'rew"):
        DataProto.concat([make(2), other])
    with pytest.raises(ValueError, match=r"input 1 has non_tensor_batch keys \[\] but input 0 has \['uid'\]"):
        DataProto.concat([make(2), make(2).select(non_tensor_batch_keys=[])])
    with pytest.raises(ValueError, match="got an empty list"):
        DataProto.concat([])


def test_concat_non_tensor_only():
    parts = [DataProto.from_dict(non_tensors={"a": [1]}), DataProto.from_dict(non_tensors={"a": [2]})]
    out = DataProto.concat(parts)
    assert out.batch is None and out.non_tensor_batch["a"].tolist() == [1, 2]


@pytest.mark.parametrize(
    ("interleave", "expected"), [(True, [0, 0, 0, 1, 1, 1]), (False, [0, 1, 0, 1, 0, 1])]
)
def test_repeat(interleave, expected):
    data = make(2)
    out = data.repeat(repeat_times=3, interleave=interleave)
    assert rows(out) == expected  # checks tensors and non-tensors alike
    assert out.batch["obs"][:, 0].tolist() == [2 * r for r in expected]
    assert out.meta_info == data.meta_info and len(data) == 2


# ---------------------------------------------------------------- save/load, iterator, display


def test_save_load_round_trip(tmp_path):
    data = DataProto.from_dict(
        tensors={"ids": torch.arange(6).reshape(2, 3), "mask": torch.tensor([[1.5], [2.5]]).bfloat16()},
        non_tensors={"uid": ["a", "b"], "tools": [[1, 2], None]},
        meta_info={"temperature": 0.7, "metrics": {"loss": [1.0]}},
    )
    data.save_to_disk(tmp_path / "batch.pt")
    loaded = DataProto.load_from_disk(tmp_path / "batch.pt")
    assert torch.equal(loaded.batch["ids"], data.batch["ids"])
    assert loaded.batch["mask"].dtype == torch.bfloat16
    assert torch.equal(loaded.batch["mask"], data.batch["mask"])
    assert loaded.non_tensor_batch["tools"].dtype == object
    assert loaded.non_tensor_batch["tools"].tolist() == [[1, 2], None]
    assert loaded.non_tensor_batch["uid"].tolist() == ["a", "b"]
    assert loaded.meta_info == data.meta_info
    objects_only = DataProto.from_dict(non_tensors={"a": [1, 2]})
    objects_only.save_to_disk(tmp_path / "objects.pt")
    assert DataProto.load_from_disk(tmp_path / "objects.pt").batch is None


def test_pickle_round_trip():  # how Ray ships a DataProto between processes
    loaded = pickle.loads(pickle.dumps(make(3)))
    assert rows(loaded) == [0, 1, 2] and loaded.meta_info == {"temperature": 1.0}


def test_summary_lists_every_field():
    data = make(4)
    assert data.summary() == [
        {"key": "obs", "storage": "batch", "shape": (4, 2), "dtype": "torch.int64", "device": "cpu"},
        {"key": "reward", "storage": "batch", "shape": (4,), "dtype": "torch.float32", "device": "cpu"},
        {"key": "uid", "storage": "non_tensor_batch", "shape": (4,), "dtype": "object", "device": "cpu"},
        {"key": "temperature", "storage": "meta_info", "shape": None, "dtype": "float", "device": None},
    ]


def test_repr_is_one_line_per_field():
    text = repr(make(4, meta={"temperature": 1.0, "metrics": {"loss": [1.0]}}))
    lines = text.splitlines()
    assert lines[0] == "DataProto with 4 samples"
    assert lines[1].split() == ["key", "storage", "shape", "dtype", "device"]
    assert lines[2].split() == ["obs", "batch", "(4,", "2)", "torch.int64", "cpu"]
    assert lines[4].split() == ["uid", "non_tensor_batch", "(4,)", "object", "cpu"]
    assert lines[5].split() == ["temperature", "meta_info", "-", "float", "-", "=", "1.0"]
    assert lines[6].split() == ["metrics", "meta_info", "-", "dict", "-"]
    assert len(lines) == 7


def test_get_data_info_is_the_repr():
    data = make(2)
    assert data.get_data_info() == repr(data)
    assert repr(DataProto()).splitlines()[0] == "DataProto with 0 samples"


# ---------------------------------------------------------------- verl's contract: errors verl raises by assert


def test_error_classes_are_also_assertion_errors():
    assert issubclass(DataProtoError, ValueError) and issubclass(DataProtoError, AssertionError)
    assert issubclass(DataProtoKeyError, KeyError) and issubclass(DataProtoKeyError, AssertionError)
    with pytest.raises(DataProtoKeyError) as info:
        make(2).pop(batch_keys=["nope"])
    assert str(info.value).startswith("DataProto.pop: key 'nope'")  # the message, not KeyError's repr


@pytest.mark.parametrize(
    ("action", "pattern"),
    [
        (lambda: make(5).chunk(2), "batch size 5 is not divisible by 2 chunks"),
        (lambda: make(3).union(DataProto.from_dict({"reward": torch.ones(3)})), "batch key 'reward'"),
        (lambda: make(3).union(DataProto.from_dict(non_tensors={"uid": list("abc")})), "key 'uid'"),
        (lambda: make(2).union(DataProto.from_dict(meta_info={"temperature": 2.0})), "key 'temperature'"),
        (lambda: DataProto.concat([make(2), make(2, meta={"temperature": 0.1})]), "Conflicting values"),
        (lambda: DataProto.from_dict({"a": torch.zeros(2), "b": torch.zeros(3)}), "has batch size 3"),
    ],
)
def test_assert_sites_raise_something_verl_code_catches(action, pattern):
    with pytest.raises(AssertionError, match=pattern):  # what verl's callers and tests expect
        action()
    with pytest.raises(ValueError, match=pattern):  # what minirl's callers expect
        action()


def test_union_numpy_dict_compares_deep_and_cyclic_values():
    nested = np.array([[[np.array([1, 2])]], [[np.array([3.0, np.nan])]]], dtype=object)
    union_numpy_dict({"x": nested}, {"x": nested.copy()})  # equal, NaN included: fine
    changed = nested.copy()
    changed[1, 0, 0] = np.array([3.0, 4.0])
    with pytest.raises(DataProtoError, match="non_tensor_batch key 'x'"):
        union_numpy_dict({"x": nested}, {"x": changed})
    loop_a, loop_b = np.empty(1, dtype=object), np.empty(1, dtype=object)
    loop_a[0], loop_b[0] = loop_a, loop_b  # each array holds itself
    union_numpy_dict({"x": loop_a}, {"x": loop_b})  # same structure: equal, and no RecursionError
    with pytest.raises(DataProtoError):
        union_numpy_dict({"x": loop_a}, {"x": np.array([None], dtype=object)})


# ---------------------------------------------------------------- construction arguments verl takes


def test_from_dict_num_batch_dims_and_auto_padding():
    tensors = {"obs": torch.zeros(4, 3), "act": torch.zeros(4, 3, 2)}
    assert list(DataProto.from_dict(tensors, num_batch_dims=1).batch.batch_size) == [4]
    for dims in (0, 2):
        with pytest.raises(DataProtoError, match=f"num_batch_dims={dims} is not supported"):
            DataProto.from_dict(tensors, num_batch_dims=dims)
    assert len(DataProto.from_dict(tensors, auto_padding=False)) == 4
    with pytest.raises(ValueError, match="auto_padding=True is not supported in minirl; pad before chunk"):
        DataProto.from_dict(tensors, auto_padding=True)
    with pytest.raises(ValueError, match="auto_padding=True"):
        DataProto.from_single_dict(tensors, auto_padding=True)


def test_len_without_tensors_and_none_compartments():
    objects = DataProto(batch=None, non_tensor_batch={"uid": np.array(list("abc"), dtype=object)})
    assert len(objects) == 3
    empty = DataProto(batch=None, non_tensor_batch=None, meta_info=None)
    assert len(empty) == 0 and empty.non_tensor_batch == {} and empty.meta_info == {}


class Rollout(DataProto):
    """A DataProto subclass, at module level so pickle can find it."""


def test_subclass_survives_every_operation():
    data = Rollout.from_single_dict({"obs": torch.arange(4), "uid": list("abcd")})
    results = [data, data[1:3], data[[0, 1]], data.select(), data.repeat(2),
               data.unfold_column_chunks(2), *data.chunk(2), Rollout.concat(data.chunk(2)), fold_batch_dim(data, 2),
               unfold_batch_dim(fold_batch_dim(data, 2)), Rollout.from_tensordict(data.to_tensordict()),
               pickle.loads(pickle.dumps(data)), data.pop(non_tensor_batch_keys=["uid"])]
    assert all(type(r) is Rollout for r in results)


# ---------------------------------------------------------------- row operations verl has


def test_unfold_column_chunks_splits_named_fields_and_repeats_the_rest():
    data = DataProto.from_dict(
        tensors={"pair": torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]), "ctx": torch.tensor([10, 20]),
                 "grid": torch.arange(16).reshape(2, 4, 2)},
        non_tensors={"uid": ["a", "b"], "steps": [["s1", "s2"], ["t1", "t2"]],
                     "wide": np.array([["x1", "x2"], ["y1", "y2"]], dtype=object)},
        meta_info={"k": 1},
    )
    out = data.unfold_column_chunks(2, split_keys=["pair", "grid", "steps", "wide"])
    assert out.batch["pair"].tolist() == [[1, 2], [3, 4], [5, 6], [7, 8]]
    assert out.batch["grid"].tolist() == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9], [10, 11]], [[12, 13], [14, 15]]]
    assert out.batch["ctx"].tolist() == [10, 10, 20, 20]  # not split: repeated so rows line up
    assert out.non_tensor_batch["uid"].tolist() == ["a", "a", "b", "b"]
    assert out.non_tensor_batch["steps"].tolist() == [["s1"], ["s2"], ["t1"], ["t2"]]  # each list cut
    assert out.non_tensor_batch["wide"].tolist() == [["x1"], ["x2"], ["y1"], ["y2"]]  # 2-d: cut along dim 1
    assert out.meta_info == {"k": 1} and len(data) == 2
    assert rows(make(2).unfold_column_chunks(3)) == [0, 0, 0, 1, 1, 1]  # no split_keys: all repeated


def test_unfold_column_chunks_errors():
    data = make(2)
    with pytest.raises(DataProtoError, match=r"'obs' has 2 columns \(dim 1\), which do not split into n_split=3"):
        data.unfold_column_chunks(3, split_keys=["obs"])
    with pytest.raises(DataProtoError, match="'reward' has shape \\(2,\\), with no dim 1 to split"):
        data.unfold_column_chunks(2, split_keys=["reward"])
    with pytest.raises(DataProtoError, match=r"'uid'\[0\] is not a list, tuple or array"):
        data.unfold_column_chunks(2, split_keys=["uid"])
    with pytest.raises(DataProtoKeyError, match="key 'nope' is not in batch or non_tensor_batch"):
        data.unfold_column_chunks(2, split_keys=["nope"])
    with pytest.raises(DataProtoError, match="n_split must be positive, got 0"):
        data.unfold_column_chunks(0)


def test_fold_groups_rows_and_unfold_undoes_it():
    data = make(3).repeat(2, interleave=True)  # rows 0 0 1 1 2 2: two responses per prompt
    folded = fold_batch_dim(data, new_batch_size=3)
    assert len(folded) == 3 and list(folded.batch.batch_size) == [3]
    assert folded.batch["obs"].shape == (3, 2, 2) and folded.non_tensor_batch["uid"].shape == (3, 2)
    assert folded.non_tensor_batch["uid"].tolist() == [["u0", "u0"], ["u1", "u1"], ["u2", "u2"]]
    folded.reorder(torch.tensor([2, 0, 1]))  # moves whole groups
    flat = unfold_batch_dim(folded, batch_dims=2)
    assert rows(flat) == [2, 2, 0, 0, 1, 1] and flat.non_tensor_batch["uid"].shape == (6,)
    assert flat.meta_info == data.meta_info
    assert rows(data) == [0, 0, 1, 1, 2, 2] and data.non_tensor_batch["uid"].shape == (6,)  # input untouched


def test_fold_unfold_errors():
    with pytest.raises(DataProtoError, match="batch size 4 is not divisible by new_batch_size 3"):
        fold_batch_dim(make(4), 3)
    uneven = DataProto.from_dict(tensors={"a": torch.zeros(2, 3), "b": torch.zeros(2, 4)})
    with pytest.raises(DataProtoError, match=r"first 2 dims of 'b' \(shape \(2, 4\)\); every field must start"):
        unfold_batch_dim(uneven, batch_dims=2)


# ---------------------------------------------------------------- the TensorDict form


def test_to_tensordict_packs_three_compartments():
    from tensordict import NonTensorData, NonTensorStack

    data = DataProto.from_dict(tensors={"obs": torch.arange(3)},
                               non_tensors={"scores": [[], [0.5], [0.1, 0.2]], "info": [{"acc": 1.0}, {}, None]},
                               meta_info={"global_steps": 4})
    td = data.to_tensordict()
    assert list(td.batch_size) == [3] and torch.equal(td["obs"], torch.arange(3))
    assert isinstance(td.get("scores"), NonTensorStack) and isinstance(td.get("global_steps"), NonTensorData)
    assert td.get("scores").tolist() == [[], [0.5], [0.1, 0.2]] and td["global_steps"] == 4
    back = DataProto.from_tensordict(td, meta_info={"extra": True})
    assert torch.equal(back.batch["obs"], data.batch["obs"])
    assert back.non_tensor_batch["scores"].shape == (3,)  # still one list per sample
    assert back.non_tensor_batch["scores"].tolist() == [[], [0.5], [0.1, 0.2]]
    assert back.non_tensor_batch["info"].tolist() == [{"acc": 1.0}, {}, None]
    assert back.meta_info == {"extra": True, "global_steps": 4}


def test_tensordict_form_without_tensors_and_its_errors():
    objects = DataProto.from_dict(non_tensors={"uid": ["a", "b"]})
    back = DataProto.from_tensordict(objects.to_tensordict())
    assert back.batch is None and back.non_tensor_batch["uid"].tolist() == ["a", "b"]
    clash = make(2, meta={"uid": "run"})
    with pytest.raises(DataProtoError, match=r"keys \['uid'\] are in more than one compartment"):
        clash.to_tensordict()
    nested = TensorDict({"sub": TensorDict({"x": torch.zeros(2)}, batch_size=[2])}, batch_size=[2])
    with pytest.raises(TypeError, match="'sub' holds a TensorDict; expected a tensor, a NonTensorStack"):
        DataProto.from_tensordict(nested)


# ---------------------------------------------------------------- bytes: pickling, files, tensor encoding


def test_getstate_stores_batch_as_bytes_and_round_trips():
    data = DataProto.from_dict(tensors={"ids": torch.arange(6).reshape(2, 3)[:, ::2], "h": torch.ones(2).bfloat16()},
                               non_tensors={"uid": ["a", "b"]}, meta_info={"step": 1})
    state = data.__getstate__()
    assert isinstance(state[0], bytes) and state[1] is data.non_tensor_batch and state[2] is data.meta_info
    loaded = pickle.loads(pickle.dumps(data))
    assert torch.equal(loaded.batch["ids"], data.batch["ids"]) and loaded.batch["h"].dtype == torch.bfloat16
    assert loaded.non_tensor_batch["uid"].tolist() == ["a", "b"] and loaded.meta_info == {"step": 1}
    empty = pickle.loads(pickle.dumps(DataProto(batch=TensorDict({}, batch_size=[5]))))
    assert list(empty.batch.keys()) == [] and len(empty) == 5  # an empty TensorDict cannot be consolidated
    assert pickle.loads(pickle.dumps(DataProto.from_dict(non_tensors={"a": [1]}))).batch is None


def test_numpy_serialization_method(monkeypatch):
    data = make(3)
    monkeypatch.setenv(SERIALIZATION_METHOD_ENV, "numpy")
    assert SERIALIZATION_METHOD_ENV == "VERL_DATAPROTO_SERIALIZATION_METHOD"
    batch_size, _device, encoded = data.__getstate__()[0]
    assert batch_size == (3,) and set(encoded) == {"obs", "reward"}
    assert isinstance(encoded["obs"][2], np.ndarray) and encoded["obs"][2].dtype == np.uint8
    blob = pickle.dumps(data)
    monkeypatch.delenv(SERIALIZATION_METHOD_ENV)
    assert rows(pickle.loads(blob)) == [0, 1, 2]  # decoded by its format, whatever the variable says now


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool,
                                   torch.uint8, torch.float8_e4m3fn])
def test_serialize_single_tensor_is_bit_exact(dtype):
    tensor = (torch.randn(3, 4) * 4).to(dtype)
    name, shape, data = serialize_single_tensor(tensor)
    assert name == str(dtype).removeprefix("torch.") and tuple(shape) == (3, 4)
    back = deserialize_single_tensor((name, shape, data))
    assert back.dtype == dtype and torch.equal(back.view(torch.uint8), tensor.view(torch.uint8))


def test_serialize_single_tensor_edge_shapes():
    for tensor in (torch.tensor(2.5), torch.zeros(0, 3), torch.arange(12).reshape(3, 4).t()):  # 0-d, empty, strided
        back = deserialize_single_tensor(serialize_single_tensor(tensor))
        assert back.shape == tensor.shape and torch.equal(back, tensor)
    with pytest.raises(DataProtoError, match="'nope' is not a torch dtype"):
        deserialize_single_tensor(("nope", (1,), np.zeros(4, dtype=np.uint8)))


def test_serialize_tensordict_with_nested_tensor():
    ragged = torch.nested.as_nested_tensor([torch.ones(2), torch.arange(3.0)], layout=torch.jagged)
    td = TensorDict({"ragged": ragged, "dense": torch.zeros(2, 2)}, batch_size=[2], device="cpu")
    back = deserialize_tensordict(serialize_tensordict(td))
    assert back.batch_size == td.batch_size and str(back.device) == "cpu"
    assert back["ragged"].is_nested and back["ragged"].layout == torch.jagged
    assert [t.tolist() for t in back["ragged"].unbind()] == [[1.0, 1.0], [0.0, 1.0, 2.0]]
    with pytest.raises(ValueError, match="key 'x' has an encoding of length 1; expected 3"):
        deserialize_tensordict(((1,), None, {"x": ("bad",)}))


def test_save_to_disk_pickles_and_load_checks_the_type(tmp_path):
    path = tmp_path / "batch.pkl"
    make(2).save_to_disk(path)
    with open(path, "rb") as f:
        assert isinstance(pickle.load(f), DataProto)  # a plain pickle, as verl writes
    (tmp_path / "other.pkl").write_bytes(pickle.dumps({"not": "a batch"}))
    with pytest.raises(TypeError, match="other.pkl holds a dict, not a DataProto"):
        DataProto.load_from_disk(tmp_path / "other.pkl")


