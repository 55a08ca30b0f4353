"""Data: the RL prompt dataset, built-in tasks with rule rewards, and GSM8K preprocessing.

- `minirl.data.rl_dataset`: `RLDataset` (verl's `RLHFDataset`, `verl/utils/dataset/rl_dataset.py:72`),
  `collate_fn` (`verl/utils/dataset/rl_dataset.py:41`), `collate_to_dataproto`.
- `minirl.data.tasks`: arithmetic and countdown generated locally in verl's row format;
  `write_task_parquet`, `resolve_data_files` (`minirl://<task>/<split>`), `make_sft_rows`.
- `minirl.data.gsm8k`: `python -m minirl.data.gsm8k --input X --output Y` (verl's
  `examples/data_preprocess/gsm8k.py`, on local files).
"""

from minirl.data.rl_dataset import DataError, RLDataset, RLHFDataset, collate_fn, collate_to_dataproto
from minirl.data.tasks import (
    TASKS,
    make_arithmetic_rows,
    make_countdown_rows,
    make_sft_rows,
    resolve_data_files,
    write_parquet,
    write_task_parquet,
)

__all__ = [
    "TASKS",
    "DataError",
    "RLDataset",
    "RLHFDataset",
    "collate_fn",
    "collate_to_dataproto",
    "make_arithmetic_rows",
    "make_countdown_rows",
    "make_sft_rows",
    "resolve_data_files",
    "write_parquet",
    "write_task_parquet",
]
