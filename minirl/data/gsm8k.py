"""Preprocess GSM8K into verl's row format (parquet), from local files: nothing is downloaded.

    python -m minirl.data.gsm8k --input gsm8k/main --output ~/data/gsm8k
    python -m minirl.data.gsm8k --input test.jsonl --output ~/data/gsm8k/test.parquet --split test

The public dataset (`openai/gsm8k`, config `main`) has two columns:
`question` (a word problem) and `answer` (worked reasoning ending in a line `#### 72`). Each row
becomes

    {"data_source": "openai/gsm8k",
     "prompt": [{"role": "user", "content": question + " " + INSTRUCTION}],
     "ability": "math",
     "reward_model": {"style": "rule", "ground_truth": "72"},
     "extra_info": {"split": "train", "index": i, "answer": <the original answer>, "question": question}}

where `INSTRUCTION` asks to think step by step and put the final answer after `####`,
so that `default_compute_score("openai/gsm8k", ...)` scores responses against `ground_truth`.

Mirrors verl's `examples/data_preprocess/gsm8k.py` (`extract_solution` at line 27, `make_map_fn` at
line 60; a script outside the `verl/` package): the same
instruction sentence, the same fields, the ground truth taken from the *first* `#### ` line with commas
removed. verl loads the dataset with `datasets.load_dataset("openai/gsm8k", "main")` (or a local copy)
and writes `train.parquet` / `test.parquet`; minirl reads local parquet / JSON-lines files with
pyarrow (the hub's `main/train-00000-of-00001.parquet` or the original `train.jsonl`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from minirl.data.tasks import write_parquet

__all__ = ["DATA_SOURCE", "INSTRUCTION", "extract_solution", "main", "preprocess", "process_row", "read_rows"]

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_ANSWER = re.compile(r"#### (-?[0-9.,]+)")
_SUFFIXES = (".parquet", ".jsonl", ".json")


def extract_solution(answer: str) -> str:
    """The final answer of a GSM8K solution: the number after the first `#### `, commas removed."""
    match = _ANSWER.search(answer)
    if match is None:
        raise ValueError(f"GSM8K answer has no '#### <number>' line: ...{answer[-120:]!r}")
    return match.group(1).replace(",", "")


def process_row(example: dict, index: int, split: str) -> dict:
    """One public GSM8K row (`question`, `answer`) -> one row in verl's format."""
    for column in ("question", "answer"):
        if column not in example:
            raise KeyError(f"GSM8K row {index} has no {column!r} column (columns: {sorted(example)})")
    question, answer = example["question"], example["answer"]
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": extract_solution(answer)},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def preprocess(rows: list[dict], split: str) -> list[dict]:
    """Map every public row of one split; `index` is the row's position in that split."""
    return [process_row(row, i, split) for i, row in enumerate(rows)]


def read_rows(path: str) -> list[dict]:
    """Rows of a local `.parquet`, `.jsonl` or `.json` (a list of objects) file."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    with open(path, encoding="utf-8") as f:
        if path.endswith(".jsonl"):
            return [json.loads(line) for line in f if line.strip()]
        if path.endswith(".json"):
            return json.load(f)
    raise ValueError(f"unsupported file {path!r}: expected one of {list(_SUFFIXES)}")


def _split_files(directory: str) -> dict[str, str]:
    """Find the train and test files under a directory (e.g. the hub's `main/` folder)."""
    found = {}
    for root, _, files in sorted(os.walk(directory)):
        for name in sorted(files):
            split = "test" if name.startswith("test") else "train" if name.startswith("train") else None
            if split and name.endswith(_SUFFIXES) and split not in found:
                found[split] = os.path.join(root, name)
    if not found:
        raise FileNotFoundError(f"no train*/test* file ending in {list(_SUFFIXES)} under {directory!r}")
    return found


def _infer_split(path: str) -> str:
    return "test" if "test" in os.path.basename(path) else "train"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--input", required=True, help="a GSM8K file (.parquet/.jsonl/.json) or a folder of them"
    )
    parser.add_argument(
        "--output", required=True, help="an output folder, or a .parquet file for one input file"
    )
    parser.add_argument(
        "--split", default=None, help="split name of a single input file (default: from its name)"
    )
    args = parser.parse_args(argv)

    source = os.path.expanduser(args.input)
    output = os.path.expanduser(args.output)
    if os.path.isdir(source):
        if output.endswith(".parquet"):
            parser.error("--input is a folder, so --output must be a folder (train.parquet and test.parquet)")
        inputs = _split_files(source)
    else:
        inputs = {args.split or _infer_split(source): source}
    for split, path in inputs.items():
        rows = preprocess(read_rows(path), split)
        target = output if output.endswith(".parquet") else os.path.join(output, f"{split}.parquet")
        write_parquet(rows, target)
        print(f"{split}: {len(rows)} rows from {path} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
