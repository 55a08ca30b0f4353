"""`RLDataset`: the prompts of an RL run, read from parquet files in verl's row format, and their collate.

One item is one prompt. The dataset does not generate anything: it hands the rollout the chat
messages (`raw_prompt`) and bookkeeping columns (`data_source`, `reward_model`, `extra_info`) that
travel with the prompt to the reward function. `collate_fn` stacks a list of items into one dict:
tensors are stacked, everything else becomes a numpy object array, ready for
`DataProto.from_single_dict` (`collate_to_dataproto` does both).

What `__getitem__` returns (verl's keys first):

| key | what | verl |
|---|---|---|
| the parquet columns | `data_source`, `prompt`, `ability`, `reward_model`, `extra_info` | same |
| `raw_prompt` | the chat messages, untemplated: the agent loop applies the chat template itself | same |
| `dummy_tensor` | `tensor([0], uint8)`, so that the collated batch has at least one tensor | same |
| `index`, `tools_kwargs`, `interaction_kwargs` | from `extra_info` (defaults 0, {}, {}) | same |
| `raw_prompt_ids` | the templated prompt's token ids, after `truncation` | minirl only (older verl had it) |
| `full_prompts` | the templated prompt text, if `return_full_prompt` | older verl |

Config keys read (verl's `data.*` names; defaults as verl's `RLHFDataset`): `prompt_key` ("prompt"),
`max_prompt_length` (1024), `filter_overlong_prompts` (True), `truncation` ("error" | "left" |
"right" | "middle"), `return_full_prompt` (False), `apply_chat_template_kwargs` ({}), `shuffle` and
`seed` (to pick `max_samples` rows), `builtin` (settings of `minirl://<task>/<split>` files).

Mirrors `RLHFDataset` (`verl/utils/dataset/rl_dataset.py:72`) and `collate_fn`
(`verl/utils/dataset/rl_dataset.py:41`). At the pinned commit verl's `__getitem__`
(`verl/utils/dataset/rl_dataset.py:386`) no longer tokenizes: the agent loop builds the prompt ids
from `raw_prompt` and left-truncates them to `rollout.prompt_length` with a warning
(`AgentLoopBase._cap_text_prompt_length`, `verl/experimental/agent_loop/agent_loop.py:407`); verl
reads `data.truncation` but does not use it. minirl also returns `raw_prompt_ids`, cut as
`truncation` says, so an over-long prompt fails here, early, with a message that says what to change.
Overlong filtering tokenizes every prompt once at start-up, as verl's
`maybe_filter_out_long_prompts` (`verl/utils/dataset/rl_dataset.py:197`) does.

Simplified: parquet files are read with pyarrow into a list of dicts (verl: HF `datasets`, with a
local cache and HDFS copy); no multimodal inputs, no tool schemas in the length check, no resume
state, no `split`.
"""

from __future__ import annotations

import copy
import os
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import is_dataclass

import numpy as np
import torch
from torch.utils.data import Dataset

from minirl.data.tasks import resolve_data_files

__all__ = ["RLDataset", "RLHFDataset", "collate_fn", "collate_to_dataproto"]

_TRUNCATIONS = ("error", "left", "right", "middle")


def collate_fn(data_list: list[dict]) -> dict:
    """Stack items into a batch dict: tensors -> `torch.stack` (shape `(B, ...)`), others -> numpy
    object arrays of shape `(B,)` (one Python object per sample: a message list, a dict, a string)."""
    tensors, non_tensors = defaultdict(list), defaultdict(list)
    for item in data_list:
        for key, value in item.items():
            (tensors if isinstance(value, torch.Tensor) else non_tensors)[key].append(value)
    batch = {key: torch.stack(values, dim=0) for key, values in tensors.items()}
    for key, values in non_tensors.items():
        array = np.empty(len(values), dtype=object)
        for i, value in enumerate(values):  # one by one: equal-length lists must not become a 2-D array
            array[i] = value
        batch[key] = array
    return batch


def collate_to_dataproto(data_list: list[dict]):
    """`collate_fn`, then `DataProto.from_single_dict`: what the trainer gets from one dataloader step."""
    from minirl.protocol import DataProto

    return DataProto.from_single_dict(collate_fn(data_list))


def _cfg_get(config, key: str, default=None):
    """Read a key from a dict, an OmegaConf node or a dataclass alike."""
    if config is None:
        return default
    if isinstance(config, Mapping) or (hasattr(config, "get") and not is_dataclass(config)):
        value = config.get(key, default)
    else:
        value = getattr(config, key, default)
    return default if value is None and default is not None else value


class RLDataset(Dataset):
    """Prompts from parquet files in verl's row format (see the module docstring for the item keys).

    Args:
        data_files: one path or a list; `minirl://<task>/<split>` generates a built-in task.
        tokenizer: the policy's tokenizer (its chat template is applied to `prompt`).
        config: the `data` config (dict, OmegaConf or dataclass) with verl's keys.
        processor: accepted for verl's signature; multimodal inputs are not supported.
        max_samples: keep at most this many rows (-1: all); picked at random if `config.shuffle`.
    """

    def __init__(self, data_files, tokenizer, config, processor=None, max_samples: int = -1):
        if processor is not None:
            raise NotImplementedError("minirl's RLDataset handles text prompts only (processor must be None)")
        if isinstance(data_files, (str, os.PathLike)):
            data_files = [data_files]
        self.original_data_files = [str(f) for f in data_files]
        self.tokenizer = tokenizer
        self.config = config
        self.max_samples = max_samples
        self.prompt_key = _cfg_get(config, "prompt_key", "prompt")
        self.max_prompt_length = int(_cfg_get(config, "max_prompt_length", 1024))
        self.filter_overlong_prompts = bool(_cfg_get(config, "filter_overlong_prompts", True))
        self.truncation = _cfg_get(config, "truncation", "error")
        self.return_full_prompt = bool(_cfg_get(config, "return_full_prompt", False))
        self.apply_chat_template_kwargs = dict(_cfg_get(config, "apply_chat_template_kwargs", {}) or {})
        self.shuffle = bool(_cfg_get(config, "shuffle", False))
        self.seed = _cfg_get(config, "seed", None)
        if self.truncation not in _TRUNCATIONS:
            raise ValueError(f"data.truncation must be one of {list(_TRUNCATIONS)}, got {self.truncation!r}")

        self._download()
        self._read_files_and_tokenize()

    # ---------------------------------------------------------------------------------- loading
    def _download(self) -> None:
        """Local paths of the data files (verl copies HDFS files here; minirl builds `minirl://` tasks)."""
        self.data_files = resolve_data_files(
            self.original_data_files, builtin=_cfg_get(self.config, "builtin")
        )

    def _read_files_and_tokenize(self) -> None:
        import pyarrow.parquet as pq

        rows: list[dict] = []
        for path in self.data_files:
            if not path.endswith(".parquet"):
                raise ValueError(f"unsupported data file {path!r}: RLDataset reads .parquet files")
            rows.extend(pq.read_table(path).to_pylist())
        missing = [i for i, row in enumerate(rows) if self.prompt_key not in row]
        if missing:
            raise KeyError(
                f"row {missing[0]} of {self.data_files} has no {self.prompt_key!r} column (columns: "
                f"{sorted(rows[missing[0]])}); set data.prompt_key to the column holding the chat messages"
            )
        total = len(rows)
        if 0 < self.max_samples < total:
            if self.shuffle:
                rng = np.random.default_rng(*(() if self.seed is None else (self.seed,)))
                picked = rng.choice(total, size=self.max_samples, replace=False)
            else:
                picked = np.arange(self.max_samples)
            rows = [rows[i] for i in picked]
        self.rows = self.maybe_filter_out_long_prompts(rows)

    def _templated(self, messages: list[dict]) -> str:
        kwargs = {
            k: v for k, v in self.apply_chat_template_kwargs.items() if k not in ("tokenize", "return_dict")
        }
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **kwargs
        )

    def _encode(self, texts: list[str]) -> list[list[int]]:
        # tokenize=False then encode: the same ids as apply_chat_template(tokenize=True), whose return
        # type changed between transformers 4 (list) and 5 (BatchEncoding).
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    def maybe_filter_out_long_prompts(self, rows: list[dict]) -> list[dict]:
        """Drop rows whose templated prompt is longer than `max_prompt_length` (if filtering is on)."""
        if not self.filter_overlong_prompts or not rows:
            return rows
        lengths = [len(ids) for ids in self._encode([self._templated(r[self.prompt_key]) for r in rows])]
        kept = [row for row, n in zip(rows, lengths) if n <= self.max_prompt_length]
        if not kept:
            raise ValueError(
                f"every one of the {len(rows)} prompts is longer than data.max_prompt_length="
                f"{self.max_prompt_length} tokens (shortest: {min(lengths)}); raise data.max_prompt_length"
            )
        return kept

    # ------------------------------------------------------------------------------------ items
    def __len__(self) -> int:
        return len(self.rows)

    def _truncate(self, ids: list[int], item: int, row: dict) -> list[int]:
        limit = self.max_prompt_length
        if len(ids) <= limit:
            return ids
        if self.truncation == "left":
            return ids[-limit:]
        if self.truncation == "right":
            return ids[:limit]
        if self.truncation == "middle":
            head = limit // 2
            return ids[:head] + ids[len(ids) - (limit - head) :]
        index = (row.get("extra_info") or {}).get("index", item)
        raise ValueError(
            f"prompt {item} (extra_info.index={index}, data_source={row.get('data_source')!r}) is {len(ids)} "
            f"tokens long, more than data.max_prompt_length={limit}. Raise data.max_prompt_length, set "
            f"data.filter_overlong_prompts=True to drop such prompts, or set data.truncation to "
            f"left/right/middle to cut them."
        )

    def __getitem__(self, item: int) -> dict:
        row = copy.deepcopy(self.rows[item])
        messages = row[self.prompt_key]
        row["raw_prompt"] = messages
        text = self._templated(messages)
        row["raw_prompt_ids"] = self._truncate(self._encode([text])[0], item, row)
        if self.return_full_prompt:
            row["full_prompts"] = text
        # verl keeps a dummy tensor so that DataProto.batch is never empty.
        row["dummy_tensor"] = torch.tensor([0], dtype=torch.uint8)

        if row.get("extra_info") is None:
            row["extra_info"] = {}
        extra_info = row["extra_info"]
        row["index"] = extra_info.get("index", 0)
        row["tools_kwargs"] = extra_info.get("tools_kwargs") or {}
        row["interaction_kwargs"] = extra_info.get("interaction_kwargs") or {}
        return row


RLHFDataset = RLDataset  # verl's name
