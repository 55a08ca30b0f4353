"""The TransferQueue: trajectories stored field by field, per sample key (the data plane).

In verl's V1 trainer the controller does not hold the batch. Every trajectory lives in a key-value
store, TransferQueue (the `transfer_queue` package, a Ray-hosted store), under a *sample key*
such as `"<uid>_<session>_<index>"`; each key has

- **fields**: the sample's data, one entry per field name (`prompts`, `responses`,
  `response_mask`, `rollout_log_probs`, `old_log_probs`, ...), each stored *without padding*:
  a 1-D tensor as long as that sample's own response;
- a **tag**: a small dict of metadata the controller reasons about (`status`, the policy
  versions that sampled it, `seq_len` ...). Prompts have keys too (their `uid`), tag-only: the
  `status` of their group (`PROMPT_STATUSES`).

Who writes what: the trainer registers prompts (`status: pending`); the agent loop
(`minirl.agent_loop.agent_loop_tq.AgentLoopWorkerTQ`) marks them running, writes one trajectory
per finished session under `trajectory_key(uid, session_id, index)` and marks the group finished;
the `ReplayBuffer` reads only tags to pick the next batch.

What moves through the controller is a `KVBatchMeta` (verl: `KVBatchMeta`, a class of the
TransferQueue package; verl's stand-in when the package is missing is
`KVBatchMeta`, `verl/utils/transferqueue_utils.py:47`): the keys of a batch, their tags and the
partition ("train" or "val"). That is the *control plane*: cheap to pass around, no tensors. A
stage that needs data calls `kv_batch_get(keys, select_fields=[...])` and receives only those
fields; it writes its results back with `kv_batch_put` (verl: `tq.kv_batch_get` /
`tq.kv_batch_put` throughout `verl/trainer/ppo/v1/trainer_base.py`, e.g. `_compute_advantage`,
`verl/trainer/ppo/v1/trainer_base.py:1638`).

Padded and unpadded ("nested", jagged) forms are converted explicitly, never silently:

- `padded_to_nested(tensor, mask, side)`: a `[B, L]` padded tensor -> B 1-D tensors (verl:
  `response_to_nested`, `verl/workers/utils/padding.py:213`);
- `nested_to_padded(values, width, side, pad_value)`: B 1-D tensors -> `[B, width]` (verl:
  `to_padded_tensor` on the nested tensors TransferQueue returns, and `no_padding_2_padding`,
  `verl/workers/utils/padding.py:97`).

`kv_batch_put` refuses a padded `[B, L]` tensor and says which conversion to call, so a reader
always sees where padding is added or removed. `kv_batch_get_padded` reads a batch out in the one
padded layout every stage and engine uses (prompts left-padded, per-token response fields
right-padded) and builds `input_ids` / `attention_mask` / `position_ids` with `build_model_inputs`,
the only place minirl builds them (SFT uses it too).

Whether stages `kv_batch_get`/`kv_batch_put` their fields (verl) or pass a `DataProto` (minirl after
`sample`) is explained in `minirl.trainer.ppo.trainer_base`: minirl's stages pass the DataProto.

What minirl simplifies: the store is a dict in the controller's process (verl: storage units and a
metadata server in Ray actors, reachable from every worker, so workers can fetch fields directly),
there is one store per trainer instead of a process-global client (`tq.init()`); agent-loop worker
processes reach it through `minirl.agent_loop.worker_process.TransferQueueServer` (puts only); a
checkpoint of an async run saves the training partition (`save_checkpoint`), sync mode has nothing to save
(it empties the store after every step).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from minirl.utils import hooks

__all__ = ["PROMPT_STATUSES", "TERMINAL_STATUSES", "KVBatchMeta", "TransferQueue", "TransferQueueView",
           "build_model_inputs", "kv_batch_get_padded", "lengths_of", "nested_to_padded", "padded_to_nested",
           "trajectory_key", "uid_of"]


# ----------------------------------------------------------------------------------------- keys


PROMPT_STATUSES = ("pending", "running", "finished", "failure")
"""A prompt key's `status` tag: sampled from the dataset -> its sessions running -> all done (or one failed)."""
TERMINAL_STATUSES = ("finished", "failure")


def trajectory_key(uid: str, session_id: int, index: int = 0) -> str:
    """`{uid}_{session_id}_{index}`: the key of one agent-loop output (verl's "[Trajectories storage format]").

    `session_id` is 0..n-1 for the `rollout.n` sessions of one prompt; `index` counts the outputs of
    one session (always 0 for the single-turn loop).
    """
    return f"{uid}_{int(session_id)}_{int(index)}"


def uid_of(key: str) -> str:
    """The prompt uid a trajectory key belongs to (uids are uuid4 strings: no underscores)."""
    return key.split("_")[0]


# ------------------------------------------------------------------------------------- control plane


@dataclass
class KVBatchMeta:
    """A batch as the controller sees it: sample keys, one tag dict per key, the partition.

    Mirrors TransferQueue's `KVBatchMeta` (fields `keys`, `tags`, `partition_id`, `extra_info`).
    `extra_info` carries run-level values for the stages (verl puts `temperature` there).
    """

    keys: list[str]
    tags: list[dict]
    partition_id: str = "train"
    extra_info: dict = field(default_factory=dict)

    def __post_init__(self):
        if len(self.keys) != len(self.tags):
            raise ValueError(f"KVBatchMeta: {len(self.keys)} keys but {len(self.tags)} tags; give one tag dict per key.")

    def __len__(self) -> int:
        return len(self.keys)

    def tag_values(self, name: str, default: Any = None) -> list:
        """The tag `name` of every sample, in key order (`default` where a tag lacks it)."""
        return [tag.get(name, default) for tag in self.tags]

    def select_idxs(self, idxs: Sequence[int]) -> KVBatchMeta:
        """The samples at positions `idxs`, in that order."""
        idxs = [int(i) for i in idxs]
        return KVBatchMeta([self.keys[i] for i in idxs], [self.tags[i] for i in idxs], self.partition_id,
                         dict(self.extra_info))


# ------------------------------------------------------------------------------- padding conversions


def _check_side(fn: str, side: str) -> None:
    if side not in ("left", "right"):
        raise ValueError(f"{fn}: side must be 'left' or 'right', got {side!r}.")


def lengths_of(mask: torch.Tensor) -> torch.Tensor:
    """Valid tokens per row of a 0/1 `[B, L]` mask."""
    return mask.to(torch.long).sum(dim=-1)


def padded_to_nested(tensor: torch.Tensor, mask: torch.Tensor, side: str = "right") -> list[torch.Tensor]:
    """Cut the padding off every row: `[B, L]` (+ a `[B, L]` 0/1 mask) -> B tensors of their own lengths.

    `side="right"` keeps each row's first `mask.sum()` entries (responses: right-padded);
    `side="left"` keeps the last ones (prompts: left-padded). The mask must be contiguous on that
    side, as the agent loop builds it; a hole in the middle raises, because the row's length would
    not say which entries are real.
    """
    if tensor.shape[:2] != mask.shape[:2]:
        raise ValueError(f"padded_to_nested: tensor of shape {tuple(tensor.shape)} and mask of shape "
                         f"{tuple(mask.shape)} differ in [B, L]; pass the mask of this tensor.")
    _check_side("padded_to_nested", side)
    lengths = lengths_of(mask)
    width = mask.shape[1]
    rows = []
    for i, n in enumerate(lengths.tolist()):
        span = slice(0, n) if side == "right" else slice(width - n, width)
        if int(mask[i, span].sum()) != n:
            raise ValueError(f"padded_to_nested: row {i} of the mask is not contiguous on the {side} "
                             f"({mask[i].tolist()}); build the rows with padding on one side only.")
        rows.append(tensor[i, span].clone())
    return rows


def nested_to_padded(values: Iterable[torch.Tensor], width: int | None = None, side: str = "right",
                     pad_value: float = 0) -> torch.Tensor:
    """Pad B 1-D (or `[len, ...]`) tensors to `[B, width, ...]` with `pad_value`; `side` as in `padded_to_nested`.

    `width` defaults to the longest row; a row longer than `width` raises (padding never truncates).
    Accepts a list of tensors or a jagged nested tensor.
    """
    _check_side("nested_to_padded", side)
    rows = list(values.unbind()) if isinstance(values, torch.Tensor) and values.is_nested else list(values)
    if not rows:
        raise ValueError("nested_to_padded: no rows to pad.")
    longest = max(int(r.shape[0]) for r in rows)
    width = longest if width is None else int(width)
    if longest > width:
        raise ValueError(f"nested_to_padded: a row has {longest} entries but width={width}; raise the width "
                         "(e.g. rollout.response_length) instead of truncating.")
    first = rows[0]
    out = torch.full((len(rows), width, *first.shape[1:]), pad_value, dtype=first.dtype, device=first.device)
    for i, r in enumerate(rows):
        n = int(r.shape[0])
        if n:
            span = slice(0, n) if side == "right" else slice(width - n, width)
            out[i, span] = r
    return out


def build_model_inputs(prompts: torch.Tensor, responses: torch.Tensor, prompt_lengths: torch.Tensor,
                       response_lengths: torch.Tensor) -> dict[str, torch.Tensor]:
    """What the model reads, from the padded prompt/response layout: `input_ids`, `attention_mask`, `position_ids`.

    `prompts` `[B, P]` are LEFT-padded, `responses` `[B, R]` RIGHT-padded; the lengths say how many
    entries of each row are real. Then `input_ids = [prompts | responses]` `[B, P + R]`, the
    attention mask is 1 on the real tokens of both halves, and `position_ids` count real tokens from 0
    at each row's first prompt token (`cumsum(mask) - 1`, 0 on padding), so a left-padded prompt
    gets the same positions as an unpadded one. This is the one place minirl builds them: the
    trainer (from the TransferQueue) and SFT (from its own rows) both call it. verl keeps
    `input_ids`/`position_ids` per trajectory without padding (`AgentLoopWorkerTQ._agent_loop_postprocess`,
    `verl/trainer/ppo/v1/agent_loop_tq.py:150`) and its engines read them as nested tensors.
    The result passes the hook point `transfer_queue.model_inputs` (`minirl.utils.hooks`).
    """
    P, R = prompts.shape[1], responses.shape[1]
    prompt_lengths, response_lengths = torch.as_tensor(prompt_lengths), torch.as_tensor(response_lengths)
    attn = torch.cat([torch.arange(P) >= P - prompt_lengths[:, None], torch.arange(R) < response_lengths[:, None]],
                     dim=1).long()
    out = {"input_ids": torch.cat([prompts, responses], dim=1), "attention_mask": attn,
           "position_ids": (attn.cumsum(dim=1) - 1).clamp(min=0) * attn}
    return hooks.apply("transfer_queue.model_inputs", out, prompts=prompts, responses=responses,
                       prompt_lengths=prompt_lengths, response_lengths=response_lengths)


PROMPT_SIDE_FIELDS = ("prompts",)
"""Per-token fields aligned with the prompt (left-padded); every other per-token field follows the response."""
TOKEN_ID_FIELDS = ("prompts", "responses")
"""Fields padded with the tokenizer's pad token; all other fields are padded with 0."""
MODEL_INPUT_FIELDS = ("input_ids", "attention_mask", "position_ids")
"""Built from `prompts` + `responses` by `build_model_inputs` when asked for; never stored."""


def kv_batch_get_padded(tq: TransferQueue, batch_meta: KVBatchMeta, prompt_length: int, response_length: int,
                        pad_token_id: int, fields: Sequence[str] | None = None):
    """Read `fields` of a batch from the TransferQueue as one padded `DataProto` (the stages' layout).

    - per-token fields (stored unpadded, one length per sample): `prompts` LEFT-padded to
      `prompt_length`, every other one RIGHT-padded to `response_length` (token ids with
      `pad_token_id`, the rest with 0);
    - one number per sample: a `[B]` tensor; Python objects: numpy object arrays (`non_tensor_batch`);
    - `input_ids`, `attention_mask`, `position_ids` are never stored: they are built from the prompt and
      response lengths (`build_model_inputs`), exactly as the rollout saw the sequence.

    `fields=None` reads every stored field of the first key plus the model inputs. The batch's
    `extra_info` becomes the DataProto's `meta_info`. verl: `tq.kv_batch_get(keys, select_fields=...)`
    followed by `to_padded_tensor` in each stage of `PPOTrainer` (`verl/trainer/ppo/v1/trainer_base.py:118`).
    """
    from minirl.protocol import DataProto  # the data plane hands stages the one batch type they all read

    asked = list(fields) if fields is not None else None
    if asked is None:
        select = tq.fields_of(batch_meta.keys[0], batch_meta.partition_id) if len(batch_meta) else []
    else:
        select = [f for f in asked if f not in MODEL_INPUT_FIELDS]
    derived = MODEL_INPUT_FIELDS if asked is None else [f for f in asked if f in MODEL_INPUT_FIELDS]
    select += [f for f in ("prompts", "responses") if derived and f not in select]
    data = tq.kv_batch_get(batch_meta.keys, batch_meta.partition_id, select_fields=select)
    tensors, non_tensors = {}, {}
    for name, value in data.items():
        if not isinstance(value, torch.Tensor):
            non_tensors[name] = value
        elif not value.is_nested:
            tensors[name] = value  # one number per sample
        else:
            left = name in PROMPT_SIDE_FIELDS
            tensors[name] = nested_to_padded(value, prompt_length if left else response_length,
                                             side="left" if left else "right",
                                             pad_value=pad_token_id if name in TOKEN_ID_FIELDS else 0)
    if derived:
        tensors.update(build_model_inputs(tensors["prompts"], tensors["responses"],
                                          data["prompts"].offsets().diff(), data["responses"].offsets().diff()))
    if asked is None:  # per-token fields, then the model inputs, then one-number-per-sample fields
        per_token = [f for f in select if f in tensors and tensors[f].dim() > 1]
        asked = per_token + list(MODEL_INPUT_FIELDS) + [f for f in select if f not in per_token]
    tensors = {f: tensors[f] for f in asked if f in tensors}  # what was asked for, in that order
    non_tensors = {f: non_tensors[f] for f in asked if f in non_tensors}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=dict(batch_meta.extra_info))


def _as_nested(rows: list[torch.Tensor]) -> torch.Tensor:
    """A jagged nested tensor (what verl's TransferQueue hands back for variable-length fields)."""
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


# ----------------------------------------------------------------------------------------- data plane


class TransferQueue:
    """An in-process key-value store of trajectories: `{partition: {key: {"tag": {...}, "fields": {...}}}}`.

    Mirrors the client calls verl makes on the `transfer_queue` package: `kv_batch_put`,
    `kv_batch_get`, `kv_list`, `kv_clear`. Keys keep the order they were first put in, so a
    batch read back comes out in the order it was written.
    """

    def __init__(self) -> None:
        self._partitions: dict[str, dict[str, dict]] = {}
        # the async trainers' agent loop writes from a background thread while the trainer reads
        self._lock = threading.RLock()

    # -- writing -------------------------------------------------------------------------------
    def kv_batch_put(self, keys: Sequence[str], partition_id: str = "train", fields: dict | None = None,
                     tags: Sequence[dict] | None = None) -> KVBatchMeta:
        """Create or update `keys`: store their `fields` (one value per key) and merge their `tags`.

        A field value may be a list of per-sample tensors (any lengths), a jagged nested tensor, a
        1-D tensor `[B]` (one number per sample), or a list / numpy array of Python objects.
        A padded `[B, L]` tensor is refused: convert it with `padded_to_nested` first.
        Returns the `KVBatchMeta` of the keys (with their merged tags).
        """
        keys = [str(k) for k in keys]
        per_key = {name: self._split(name, value, len(keys)) for name, value in (fields or {}).items()}
        if tags is not None and len(tags) != len(keys):
            raise ValueError(f"kv_batch_put: {len(keys)} keys but {len(tags)} tags; give one tag dict per key.")
        with self._lock:
            part = self._partitions.setdefault(partition_id, {})
            for i, key in enumerate(keys):
                entry = part.setdefault(key, {"tag": {}, "fields": {}})
                if tags is not None:
                    entry["tag"].update(tags[i])
                for name, values in per_key.items():
                    entry["fields"][name] = values[i]
            return KVBatchMeta(keys, [dict(part[k]["tag"]) for k in keys], partition_id)

    @staticmethod
    def _split(name: str, value, n: int) -> list:
        """One stored value per sample; explicit about what is and is not accepted."""
        if isinstance(value, torch.Tensor):
            if value.is_nested:
                rows = list(value.unbind())
            elif value.dim() == 1:
                rows = list(value.unbind())  # one number per sample: stored as 0-d tensors
            else:
                raise ValueError(
                    f"kv_batch_put: field '{name}' is a padded tensor of shape {tuple(value.shape)}. The "
                    "TransferQueue stores each sample without padding; convert explicitly with "
                    f"padded_to_nested({name}, mask, side='right'|'left') (or pass a list of per-sample tensors).")
        elif isinstance(value, (list, tuple, np.ndarray)):
            rows = list(value)
        else:
            raise TypeError(f"kv_batch_put: field '{name}' is a {type(value).__name__}; pass one value per key "
                            "(a list, a numpy array, a 1-D tensor or a nested tensor).")
        if len(rows) != n:
            raise ValueError(f"kv_batch_put: field '{name}' has {len(rows)} values for {n} keys; give one per key.")
        return rows

    # -- reading -------------------------------------------------------------------------------
    def kv_batch_get(self, keys: Sequence[str], partition_id: str = "train",
                     select_fields: Sequence[str] | None = None) -> dict[str, Any]:
        """The `select_fields` of `keys`, in key order: `{field: values}`.

        Tensor fields whose samples have a length come back as one jagged nested tensor (convert
        with `nested_to_padded`); 0-d tensors come back stacked as `[B]`; anything else as a numpy
        object array. `select_fields=None` returns every field of the first key.
        """
        with self._lock:
            part = self._partition(partition_id)
            entries = []
            for key in keys:
                if key not in part:
                    raise KeyError(f"kv_batch_get: no key {key!r} in partition {partition_id!r} "
                                   f"({len(part)} keys stored); was it cleared or never put?")
                entries.append((key, part[key]))
        if select_fields is None:
            select_fields = list(entries[0][1]["fields"]) if entries else []
        out = {}
        for name in select_fields:
            values = []
            for key, entry in entries:
                if name not in entry["fields"]:
                    raise KeyError(f"kv_batch_get: key {key!r} has no field {name!r}; it has "
                                   f"{sorted(entry['fields'])}. Which stage should have written it?")
                values.append(entry["fields"][name])
            out[name] = self._join(values)
        return out

    @staticmethod
    def _join(values: list):
        if values and all(isinstance(v, torch.Tensor) for v in values):
            if all(v.dim() == 0 for v in values):
                return torch.stack(values)
            return _as_nested(values)
        if values and all(isinstance(v, np.generic) for v in values):
            return np.array(values)  # numpy scalars (e.g. int32 turn counts) keep their dtype
        arr = np.empty(len(values), dtype=object)
        for i, v in enumerate(values):  # one by one: equal-length lists must stay objects, not a 2-D array
            arr[i] = v
        return arr

    def kv_list(self, partition_id: str | None = None) -> dict[str, dict[str, dict]]:
        """`{partition: {key: tag}}` (copies), for one partition or all (verl: `tq.kv_list`)."""
        with self._lock:
            parts = [partition_id] if partition_id is not None else list(self._partitions)
            return {p: {k: copy.copy(e["tag"]) for k, e in self._partitions.get(p, {}).items()} for p in parts}

    def fields_of(self, key: str, partition_id: str = "train") -> list[str]:
        """The field names stored under `key`."""
        with self._lock:
            return list(self._partition(partition_id)[key]["fields"])

    def _partition(self, partition_id: str) -> dict:
        if partition_id not in self._partitions:
            raise KeyError(f"no partition {partition_id!r} in the TransferQueue; partitions: {sorted(self._partitions)}.")
        return self._partitions[partition_id]

    # -- clearing ------------------------------------------------------------------------------
    def kv_clear(self, keys: Sequence[str], partition_id: str = "train") -> None:
        """Forget `keys` (fields and tags); keys that are not there are ignored (verl: `tq.kv_clear`)."""
        with self._lock:
            part = self._partitions.get(partition_id, {})
            for key in keys:
                part.pop(str(key), None)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(p) for p in self._partitions.values())

    # -- checkpoints ---------------------------------------------------------------------------
    def save_checkpoint(self, path: str, partition_ids: Sequence[str] = ("train",), metadata: dict | None = None) -> int:
        """Write the tags and fields of `partition_ids` to `path` (one `torch.save` file), as one consistent
        snapshot taken under the store's lock while writers may still be putting; returns the keys written.

        verl: `tq.save_checkpoint(path, metadata=...)` in `PPOTrainer._save_checkpoint`
        (`verl/trainer/ppo/v1/trainer_base.py:887`), async modes only: the prompts already fetched from the
        dataloader but not yet trained survive a restart (`load_checkpoint`, then the trainer re-issues the
        unfinished ones).
        """
        with self._lock:
            parts = {p: {k: {"tag": dict(e["tag"]), "fields": dict(e["fields"])} for k, e in self._partitions.get(p, {}).items()}
                     for p in partition_ids}
        torch.save({"partitions": parts, "metadata": dict(metadata or {})}, path)
        return sum(len(p) for p in parts.values())

    def load_checkpoint(self, path: str) -> dict:
        """Replace the saved partitions with the snapshot at `path`; returns its metadata (verl: `tq.load_checkpoint`)."""
        state = torch.load(path, weights_only=False)
        with self._lock:
            for p, entries in state["partitions"].items():
                self._partitions[p] = dict(entries)
        return state.get("metadata", {})

    def describe(self, keys: Sequence[str], partition_id: str = "train") -> dict:
        """What the store holds for `keys`, per field: storage, layout, dtype and min/max length (for the trace)."""
        with self._lock:
            part = self._partition(partition_id)
            items = [(name, v) for key in keys for name, v in part[key]["fields"].items()]
        out: dict[str, dict] = {}
        for name, v in items:
            d = out.setdefault(name, {"storage": "transfer_queue"})
            if isinstance(v, torch.Tensor):
                d["dtype"] = str(v.dtype).replace("torch.", "")
                d["layout"] = "nested" if v.dim() else "scalar"
                if v.dim():
                    n = int(v.shape[0])
                    lo, hi = d.get("lengths", [n, n])
                    d["lengths"] = [min(lo, n), max(hi, n)]
            else:
                d["layout"], d["dtype"] = "object", type(v).__name__
        return out


class TransferQueueView:
    """A set of keys as they sit in the TransferQueue, for the tracer (no data is read).

    `trace_fields()` describes each stored field of `keys` the way the trace records a field:
    storage `transfer_queue`, shape `[samples, longest]` for per-token fields (stored jagged, without
    padding) or `[samples]` for one value per sample, dtype and device. The trainer hands one to a
    span where a stage's result lives in the store rather than in a `DataProto` (the `rollout` stage
    writes the trajectories; `sample` reads them out padded).
    """

    def __init__(self, tq: TransferQueue, keys: Sequence[str], partition_id: str = "train"):
        self.tq, self.keys, self.partition_id = tq, list(keys), partition_id

    def trace_fields(self) -> dict[str, dict]:
        if not self.keys:
            return {}
        out = {}
        for name, d in self.tq.describe(self.keys, self.partition_id).items():
            shape = [len(self.keys), d["lengths"][1]] if d.get("layout") == "nested" else [len(self.keys)]
            out[name] = {"storage": "transfer_queue", "shape": shape, "dtype": d.get("dtype", "-"), "device": "cpu",
                         "_id": ("transfer_queue", id(self.tq), self.partition_id, name)}
        return out

