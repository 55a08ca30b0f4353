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
`truncation` says, and the agent loop sends exactly those ids to the rollout
(`SingleTurnAgentLoop.run`), so `data.truncation=left|right|middle` decides what the policy sees.
Every prompt is tokenized once when the dataset loads, as verl's `maybe_filter_out_long_prompts`
(`verl/utils/dataset/rl_dataset.py:197`) does when filtering: over-long prompts are dropped
(`filter_overlong_prompts=True`), or, with `truncation=error`, the first one fails the load, before any
step runs, naming its file and row.

Bad data is a `DataError` (a `ValueError`), one line that names the file, the row or column and the
fix: a directory or a file that is not parquet, an empty, truncated or unreadable file, a file
without rows, a missing prompt column (`data.prompt_key`), a missing `data.reward_fn_key` or
`reward_model` column or a row without `reward_model.ground_truth` (verl's reward manager reads
both), a prompt that is not a list of `{"role", "content"}` messages. `minirl train` prints it and
exits with code 2.

Simplified: parquet files are read with pyarrow into a list of dicts (verl: HF `datasets`, with a
local cache and HDFS copy); no multimodal inputs, no tool schemas in the length check, no resume
state, no `split`.
"""

from __future__ import annotations

import copy
import os
from collections import defaultdict

import numpy as np
import torch
from torch.utils.data import Dataset

from minirl.data.errors import DataError
from minirl.data.tasks import resolve_data_files
from minirl.utils.config import cfg_get

__all__ = ["DataError", "RLDataset", "RLHFDataset", "collate_fn", "collate_to_dataproto"]

_TRUNCATIONS = ("error", "left", "right", "middle")
_FORMAT_HINT = "verl's row format: see `python -m minirl.data.gsm8k --help` or minirl.data.tasks"


def _short(value, n: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def read_parquet_rows(path: str) -> list[dict]:
    """The rows of one parquet file as dicts; a `DataError` naming the file for anything unreadable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if os.path.isdir(path):
        raise DataError(f"{path}: is a directory, not a parquet file. Fix: list the .parquet files inside it "
                        "(data.train_files=[<dir>/train.parquet, ...]).")
    if not path.endswith(".parquet"):
        ext = os.path.splitext(path)[1] or "no extension"
        raise DataError(f"{path}: RLDataset reads .parquet files, not {ext}. Fix: convert it to parquet in "
                        f"{_FORMAT_HINT} (e.g. pandas.read_json(path, lines=True).to_parquet(...)).")
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror or e}). Fix: give this user read access "
                        "(chmod a+r) or copy the file somewhere readable.") from None
    if size == 0:
        raise DataError(f"{path}: the file is empty (0 bytes). Fix: write it again (a killed writer leaves "
                        "empty files), or drop it from the data files.")
    if head != b"PAR1":
        raise DataError(f"{path}: not a parquet file (it starts with {head!r}, parquet starts with b'PAR1'). "
                        f"Fix: convert it to parquet in {_FORMAT_HINT}.")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        reason = str(e).splitlines()[0].replace(f"'{path}'", "").replace(path, "").strip(": ")
        raise DataError(f"{path}: a truncated or corrupt parquet file ({reason}). Fix: write it again "
                        "(pyarrow.parquet.write_table or DataFrame.to_parquet).") from None
    if table.num_rows == 0:
        raise DataError(f"{path}: the file has no rows (columns: {table.column_names}). Fix: write the prompts "
                        "into it, or drop it from the data files.")
    return table.to_pylist()


def chat_form_problem(messages) -> str | None:
    """Why `messages` is not a chat prompt (a non-empty list of `{"role": str, "content": str}`), or None."""
    if isinstance(messages, str):
        return f"is a string ({_short(messages, 40)}), not a list of chat messages"
    if not isinstance(messages, (list, tuple)) or not messages:
        return f"is {_short(messages, 40)}, not a non-empty list of chat messages"
    for j, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) \
                or not isinstance(message.get("content"), str):
            return f"message {j} is {_short(message, 50)}, not {{'role': str, 'content': str}}"
    return None


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
        # The fallbacks are verl's (`RLHFDataset.__init__`, `verl/utils/dataset/rl_dataset.py:89`), for a partial
        # config; the trainer passes the whole `data` section, so a run always reads the YAML's values.
        self.prompt_key = cfg_get(config, "prompt_key", "prompt")
        self.max_prompt_length = int(cfg_get(config, "max_prompt_length", 1024))
        self.filter_overlong_prompts = bool(cfg_get(config, "filter_overlong_prompts", True))
        self.truncation = cfg_get(config, "truncation", "error")
        self.return_full_prompt = bool(cfg_get(config, "return_full_prompt", False))
        self.apply_chat_template_kwargs = dict(cfg_get(config, "apply_chat_template_kwargs", {}) or {})
        self.shuffle = bool(cfg_get(config, "shuffle", False))
        self.seed = cfg_get(config, "seed", None)
        if self.truncation not in _TRUNCATIONS:
            raise DataError(f"data.truncation must be one of {list(_TRUNCATIONS)}, got {self.truncation!r}")

        self._download()
        self._read_files_and_tokenize()

    # ---------------------------------------------------------------------------------- loading
    def _download(self) -> None:
        """Local paths of the data files (verl copies HDFS files here; minirl builds `minirl://` tasks)."""
        self.data_files = resolve_data_files(
            self.original_data_files, builtin=cfg_get(self.config, "builtin")
        )

    def _read_files_and_tokenize(self) -> None:
        """Read every file, check its columns and rows, pick `max_samples`, then check prompt lengths."""
        rows: list[dict] = []
        self.origins: list[tuple[str, int]] = []  # (file, row in that file) of every kept row, for messages
        for path in self.data_files:
            file_rows = read_parquet_rows(path)
            self._check_columns(path, file_rows)
            rows.extend(file_rows)
            self.origins.extend((path, i) for i in range(len(file_rows)))
        total = len(rows)
        if 0 < self.max_samples < total:
            if self.shuffle:
                rng = np.random.default_rng(*(() if self.seed is None else (self.seed,)))
                picked = rng.choice(total, size=self.max_samples, replace=False)
            else:
                picked = np.arange(self.max_samples)
            rows = [rows[i] for i in picked]
            self.origins = [self.origins[i] for i in picked]
        self.rows = self.maybe_filter_out_long_prompts(rows)

    def _check_columns(self, path: str, rows: list[dict]) -> None:
        """The prompt column in chat form, and the two columns verl's reward manager reads."""
        columns = sorted(rows[0])
        reward_fn_key = cfg_get(self.config, "reward_fn_key", "data_source")
        if self.prompt_key not in rows[0]:
            raise DataError(f"{path}: no {self.prompt_key!r} column (columns: {columns}). Fix: set "
                            "data.prompt_key to the column that holds the chat messages.")
        for key, why in ((reward_fn_key, "data.reward_fn_key names it: it picks the score function"),
                         ("reward_model", "the reward manager passes reward_model['ground_truth'] to the score function")):
            if key not in rows[0]:
                raise DataError(f"{path}: no {key!r} column ({why}; columns: {columns}). Fix: add it to every row "
                                f"({_FORMAT_HINT}).")
        for i, row in enumerate(rows):
            problem = chat_form_problem(row[self.prompt_key])
            if problem:
                raise DataError(f"{path}: row {i}: {self.prompt_key!r} {problem}. Fix: store prompts as "
                                "[{'role': 'user', 'content': <text>}] (verl's chat format).")
            reward = row["reward_model"]
            if not isinstance(reward, dict) or "ground_truth" not in reward:
                raise DataError(f"{path}: row {i}: reward_model is {_short(reward)}, not a dict with 'ground_truth'. "
                                "Fix: reward_model={'style': 'rule', 'ground_truth': <answer>} in every row.")

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
        """Drop rows whose templated prompt is longer than `max_prompt_length` (`filter_overlong_prompts`), or,
        with `truncation=error`, fail on the first one now rather than when its batch comes up."""
        self.dropped_overlong = 0
        if not rows or not (self.filter_overlong_prompts or self.truncation == "error"):
            return rows
        lengths = [len(ids) for ids in self._encode([self._templated(r[self.prompt_key]) for r in rows])]
        limit = self.max_prompt_length
        if not self.filter_overlong_prompts:
            over = [i for i, n in enumerate(lengths) if n > limit]
            if over:
                i = over[0]
                path, row_in_file = self.origins[i]
                index = (rows[i].get("extra_info") or {}).get("index", i)
                raise DataError(
                    f"{path}: row {row_in_file} (extra_info.index={index}) is a {lengths[i]}-token prompt, more than "
                    f"data.max_prompt_length={limit} ({len(over)} of {len(rows)} prompts are). Fix: raise "
                    "data.max_prompt_length, set data.filter_overlong_prompts=True to drop such prompts, or "
                    "data.truncation=left|right|middle to cut them.")
            return rows
        keep = [n <= limit for n in lengths]
        if not any(keep):
            raise DataError(
                f"{self.data_files}: every one of the {len(rows)} prompts is longer than data.max_prompt_length="
                f"{limit} tokens (shortest: {min(lengths)}). Fix: raise data.max_prompt_length.")
        self.dropped_overlong = keep.count(False)
        self.origins = [o for o, k in zip(self.origins, keep) if k]
        return [row for row, k in zip(rows, keep) if k]

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
        path, row_in_file = self.origins[item]  # the load checked every prompt: only a changed tokenizer gets here
        raise DataError(f"{path}: row {row_in_file} is a {len(ids)}-token prompt, more than data.max_prompt_length="
                        f"{limit}. Fix: raise data.max_prompt_length or set data.truncation=left|right|middle.")

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
