"""Built-in tasks, generated locally in verl's row format: arithmetic (GSM8K answer format) and countdown.

verl trains on parquet files that a preprocessing script writes once (for example
`examples/data_preprocess/gsm8k.py`). Each row is one prompt:

    {"data_source": "minirl/arithmetic",                      # selects the score function
     "prompt": [{"role": "user", "content": "What is 12+34?"}],  # chat messages, no template yet
     "ability": "math",
     "reward_model": {"style": "rule", "ground_truth": "46"},   # what the scorer compares with
     "extra_info": {"split": "train", "index": 0, ...}}

This module generates such rows for two tasks small enough for a tiny model on a laptop:

- **arithmetic** ("What is 12+34?" -> `#### 46`): the answer uses GSM8K's `#### <answer>` format,
  so verl's GSM8K scorer applies unchanged (`minirl.utils.reward_score.arithmetic`).
- **countdown** (TinyZero's task, github.com/Jiayi-Pan/TinyZero `examples/data_preprocess/countdown.py`):
  reach a target with the given numbers, each used once, answer in `<answer>...</answer>`.
  TinyZero reads a prepared hub dataset; minirl generates solvable problems itself.
- **multiply_tool** ("What is 347*56?" -> `#### 19432`, with a calculator): multiplication too hard for
  the tiny model to do in its head; each row names the tool agent loop (`agent_name: tool_agent`, as
  verl's multi-turn datasets do), so with `rollout.multi_turn.enable=True` the model may call `calc`.
  Its SFT rows show the tool call on a share of the problems and the bare answer on the others.

Train and held-out problems never overlap: every problem has a stable hash bucket (0-99), and the
buckets below `HOLDOUT_PERCENT` form the held-out ("test") pool whatever the seed or the sizes.
Rows within a split are distinct problems as long as the pool has enough of them; if more rows are
asked for than the pool holds, the distinct problems are repeated (reshuffled) and a warning says so:
a task with only a few hundred problems is memorised, not learned. (2-digit addition has 8100 ordered
problems: 7320 train, 780 held out.)

`write_task_parquet` writes `train.parquet` and `test.parquet`; `resolve_data_files` turns the
config's `minirl://<task>/<split>` into such files (cached under `$MINIRL_CACHE/data/`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import random
import tempfile
import warnings
from collections.abc import Callable

from minirl.data.errors import DataError

__all__ = [
    "ARITHMETIC_DATA_SOURCE",
    "COUNTDOWN_DATA_SOURCE",
    "HOLDOUT_PERCENT",
    "MULTIPLY_TOOL_DATA_SOURCE",
    "TASKS",
    "make_arithmetic_rows",
    "make_countdown_rows",
    "make_multiply_tool_rows",
    "make_sft_rows",
    "reference_response",
    "resolve_data_files",
    "split_of",
    "write_parquet",
    "write_task_parquet",
]

ARITHMETIC_DATA_SOURCE = "minirl/arithmetic"
COUNTDOWN_DATA_SOURCE = "minirl/countdown"
MULTIPLY_TOOL_DATA_SOURCE = "minirl/multiply_tool"
HOLDOUT_PERCENT = 10  # share of all problems reserved for the held-out split
DATA_SCHEME = "minirl://"
_SPLITS = {"train": "train", "test": "test", "val": "test", "validation": "test"}


# ------------------------------------------------------------------------------- splits and sampling


def _normalize_split(split: str) -> str:
    if split not in _SPLITS:
        raise ValueError(f"split must be one of {sorted(_SPLITS)}, got {split!r}")
    return _SPLITS[split]


def split_of(problem_key: str) -> str:
    """`"test"` if the problem's stable hash bucket is held out, else `"train"` (independent of any seed)."""
    bucket = int(hashlib.sha256(problem_key.encode()).hexdigest()[:8], 16) % 100
    return "test" if bucket < HOLDOUT_PERCENT else "train"


def _sample_problems(
    n: int,
    seed: int,
    split: str,
    draw: Callable,
    key_of: Callable,
    task: str,
    enumerate_all: Callable | None = None,
) -> list:
    """Draw `n` problems of `split`, distinct until the pool runs dry, then repeated (with a warning).

    `key_of(problem)` returns `(identity, split_key)`: rows are distinct by identity, and the split is
    decided by `split_key` (so that `12+34` and `34+12` land in the same split). When the task can
    list all its problems (`enumerate_all()`, used for small tasks) the pool is exact and shuffled;
    otherwise `draw(rng)` samples random problems (None: retry) until `n` distinct ones are found or
    a budget of draws (about 10 per row wanted, scaled by the split's share of problems) is spent.
    """
    rng = random.Random(seed)
    if enumerate_all is not None:
        pool = [p for p in enumerate_all() if split_of(key_of(p)[1]) == split]
        rng.shuffle(pool)
        problems = pool[:n]
    else:
        seen, problems, split_cache = set(), [], {}
        share = HOLDOUT_PERCENT if split == "test" else 100 - HOLDOUT_PERCENT
        for _ in range((10 * n + 10_000) * 100 // share):
            if len(problems) == n:
                break
            problem = draw(rng)
            if problem is None:
                continue
            key, split_key = key_of(problem)
            if split_key not in split_cache:
                split_cache[split_key] = split_of(split_key)
            if key not in seen and split_cache[split_key] == split:
                seen.add(key)
                problems.append(problem)
    if not problems:
        raise ValueError(f"{task}: no problem of split {split!r} could be generated; widen the task's ranges")
    if len(problems) < n:
        warnings.warn(
            f"{task}: found only {len(problems)} distinct {split} problems for these settings, fewer than the "
            f"{n} rows asked for; repeating them. Ask for fewer rows or make the task larger.",
            stacklevel=3,
        )
        distinct = list(problems)
        while len(problems) < n:
            rng.shuffle(distinct)
            problems.extend(distinct[: n - len(problems)])
    return problems


def _row(data_source: str, content: str, ground_truth, split: str, index: int, **extra) -> dict:
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": content}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index, **extra},
    }


# ----------------------------------------------------------------------------------------- arithmetic

_ENUMERATE_LIMIT = 200_000  # list every problem when there are at most this many (exact pools)
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def make_arithmetic_rows(
    n: int, seed: int, split: str, digits: int = 2, op: str = "+", digits_b: int | None = None
) -> list[dict]:
    """`n` rows "What is a<op>b?" with `a` of `digits` digits and `b` of `digits_b` (default: `digits`).

    The ground truth is the result as a string; the expected response is `#### <result>`
    (`extra_info["answer"]`). For `+` and `*`, `a op b` and `b op a` share a split.
    """
    if op not in _OPS:
        raise ValueError(f"op must be one of {sorted(_OPS)}, got {op!r}")
    split_name = split
    split = _normalize_split(split)
    digits_b = digits if digits_b is None else digits_b
    lo_a, hi_a = 10 ** (digits - 1), 10**digits - 1
    lo_b, hi_b = 10 ** (digits_b - 1), 10**digits_b - 1

    def draw(rng):
        return rng.randint(lo_a, hi_a), rng.randint(lo_b, hi_b)

    def key_of(problem):
        a, b = problem
        lo, hi = sorted(problem) if op in "+*" else problem
        return f"{a}{op}{b}", f"{lo}{op}{hi}"

    def enumerate_all():
        return [(a, b) for a in range(lo_a, hi_a + 1) for b in range(lo_b, hi_b + 1)]

    small = (hi_a - lo_a + 1) * (hi_b - lo_b + 1) <= _ENUMERATE_LIMIT
    problems = _sample_problems(
        n, seed, split, draw, key_of, task="arithmetic", enumerate_all=enumerate_all if small else None
    )
    rows = []
    for index, (a, b) in enumerate(problems):
        question, answer = f"{a}{op}{b}", _OPS[op](a, b)
        rows.append(
            _row(
                ARITHMETIC_DATA_SOURCE,
                f"What is {question}?",
                str(answer),
                split_name,
                index,
                question=question,
                answer=f"#### {answer}",
            )
        )
    return rows


# ------------------------------------------------------------------------------------------ countdown


def _random_solution(rng: random.Random, numbers: list[int], ops: str) -> tuple[str, int | None]:
    """Combine `numbers` left to right in a random order with random ops; return (equation, value)."""
    order = list(numbers)
    rng.shuffle(order)
    equation, value = str(order[0]), order[0]
    for x in order[1:]:
        op = rng.choice(ops)
        if op == "/" and (x == 0 or value % x != 0):
            return equation, None  # keep every intermediate an integer
        if op in "*/" and ("+" in equation or "-" in equation):
            equation = f"({equation})"
        equation = f"{equation}{op}{x}"
        value = {"+": value + x, "-": value - x, "*": value * x, "/": value // x}[op]
    return equation, value


def make_countdown_rows(
    n: int,
    seed: int,
    split: str,
    num_numbers: int = 3,
    min_number: int = 1,
    max_number: int = 30,
    max_target: int = 100,
    ops: str = "+-*/",
) -> list[dict]:
    """`n` solvable countdown rows: reach a target in [1, max_target] with `num_numbers` numbers.

    The ground truth is `{"target": int, "numbers": list[int]}` (TinyZero's format); one solution is
    kept in `extra_info["solution"]`. A problem is its multiset of numbers plus its target. With the
    embedded byte-level tokenizer a templated prompt is ~100-110 tokens: use `data.max_prompt_length=128`.
    """
    split_name = split
    split = _normalize_split(split)

    def draw(rng):
        numbers = [rng.randint(min_number, max_number) for _ in range(num_numbers)]
        solution, target = _random_solution(rng, numbers, ops)
        if target is None or not 1 <= target <= max_target:
            return None
        return numbers, target, solution

    def key_of(problem):
        numbers, target, _ = problem
        key = f"{sorted(numbers)}->{target}"
        return key, key

    problems = _sample_problems(n, seed, split, draw, key_of, task="countdown")
    rows = []
    for index, (numbers, target, solution) in enumerate(problems):
        listed = " ".join(str(x) for x in numbers)
        content = f"Make {target} from {listed} using + - * / once each. Answer <answer>equation</answer>."
        rows.append(
            _row(
                COUNTDOWN_DATA_SOURCE,
                content,
                {"target": target, "numbers": numbers},
                split_name,
                index,
                solution=solution,
            )
        )
    return rows


# ------------------------------------------------------------------------------------- multiply_tool

CALC_TOOL = ("calc", "expr")
"""The calculator's function name and argument (minirl/tools/config/calculator_tool_config.yaml)."""
MULTIPLY_TOOL_SFT_FRACTION = 0.5
"""Share of the multiply_tool SFT rows that show the tool call (the others answer directly)."""


def make_multiply_tool_rows(n: int, seed: int, split: str, digits: int = 3, digits_b: int = 2) -> list[dict]:
    """`n` rows "What is a*b?" (`a` of `digits` digits, `b` of `digits_b`) for the tool agent loop.

    The arithmetic task's rows (same problems, same split rule) with `data_source` `minirl/multiply_tool`
    and `agent_name` `tool_agent`: the rollout runs `ToolAgentLoop` for them. 3-digit x 2-digit has
    81,000 ordered problems (about 72,900 train / 8,100 held out).
    """
    rows = make_arithmetic_rows(n, seed, split, digits=digits, op="*", digits_b=digits_b)
    for row in rows:
        row["data_source"] = MULTIPLY_TOOL_DATA_SOURCE
        row["agent_name"] = "tool_agent"
    return rows


def tool_messages(row: dict) -> list[dict]:
    """The multiply_tool demonstration: call `calc`, read its answer, write `#### <answer>`."""
    from minirl.tools.calculator import evaluate

    name, argument = CALC_TOOL
    question = row["extra_info"]["question"]
    call = {"type": "function", "function": {"name": name, "arguments": {argument: question}}}
    return list(row["prompt"]) + [{"role": "assistant", "content": "", "tool_calls": [call]},
                                  {"role": "tool", "content": evaluate(question)},
                                  {"role": "assistant", "content": row["extra_info"]["answer"]}]


TASKS: dict[str, Callable[..., list[dict]]] = {
    "arithmetic": make_arithmetic_rows,
    "countdown": make_countdown_rows,
    "multiply_tool": make_multiply_tool_rows,
}


# ------------------------------------------------------------------------------------------------ SFT


def reference_response(row: dict) -> str:
    """The correct response for a built-in task row: `#### 46` or `<answer>(3+5)*2</answer>`."""
    if row["data_source"] in (ARITHMETIC_DATA_SOURCE, MULTIPLY_TOOL_DATA_SOURCE):
        return row["extra_info"]["answer"]
    if row["data_source"] == COUNTDOWN_DATA_SOURCE:
        return f"<answer>{row['extra_info']['solution']}</answer>"
    raise ValueError(f"no reference response for data_source={row['data_source']!r}; known: {sorted(TASKS)}")


def make_sft_rows(
    task: str = "arithmetic", n: int = 1000, seed: int = 0, split: str = "train", tool_fraction: float | None = None,
    **task_kwargs,
):
    """Rows for the SFT warm start: the RL row plus `messages` = prompt + the reference assistant turn(s).

    `messages` is the column verl's multi-turn SFT dataset reads (`data.messages_key`, default
    `"messages"`); the loss is taken on the assistant turns only. For multiply_tool, a share
    `tool_fraction` (default `MULTIPLY_TOOL_SFT_FRACTION`; ignored by other tasks) of the rows, picked by
    a stable hash of seed and problem, show the whole tool episode (`tool_messages`); the rest answer directly.
    """
    rows = _task_fn(task)(n, seed, split, **task_kwargs)
    share = MULTIPLY_TOOL_SFT_FRACTION if tool_fraction is None else float(tool_fraction)
    for row in rows:
        key = f"{seed}:{row['extra_info'].get('question', '')}"
        if task == "multiply_tool" and int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 16**8 < share:
            row["messages"] = tool_messages(row)
        else:
            row["messages"] = row["prompt"] + [{"role": "assistant", "content": reference_response(row)}]
    return rows


# ------------------------------------------------------------------------------------------- parquet


def _task_fn(task: str) -> Callable[..., list[dict]]:
    if task not in TASKS:
        raise ValueError(f"unknown built-in task {task!r}; known tasks: {sorted(TASKS)}")
    return TASKS[task]


def write_parquet(rows: list[dict], path: str) -> str:
    """Write rows to a parquet file atomically (temporary file, then rename); return the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.path.abspath(os.path.expanduser(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".parquet", dir=os.path.dirname(path))
    os.close(fd)
    try:
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def write_task_parquet(task: str, out_dir: str, n_train: int, n_val: int, seed: int = 0, **task_kwargs):
    """Generate a built-in task and write `<out_dir>/train.parquet` and `<out_dir>/test.parquet`.

    Returns `(train_path, val_path)`. The two splits share no problem (see `split_of`).
    """
    make_rows = _task_fn(task)
    train = write_parquet(
        make_rows(n_train, seed, "train", **task_kwargs), os.path.join(out_dir, "train.parquet")
    )
    val = write_parquet(make_rows(n_val, seed, "test", **task_kwargs), os.path.join(out_dir, "test.parquet"))
    return train, val


def _task_kwargs(task: str, builtin) -> dict:
    """The settings of `builtin` (a dict or config) that `task` understands, plus sizes and seed."""
    if builtin is None:
        builtin = {}
    get = builtin.get if hasattr(builtin, "get") else lambda k, d=None: getattr(builtin, k, d)
    accepted = set(inspect.signature(_task_fn(task)).parameters) - {"n", "seed", "split"}
    kwargs = {k: get(k) for k in accepted if get(k, None) is not None}
    sizes = {
        "n_train": int(get("n_train", 20000)),
        "n_val": int(get("n_val", 500)),
        "seed": int(get("seed", 0)),
    }
    return {**sizes, **kwargs}


def resolve_data_files(data_files, builtin=None) -> list[str]:
    """Turn `minirl://<task>/<split>` entries into local parquet paths (generated once), expand the rest.

    `builtin` holds the generator settings (the config's `data.builtin`: `n_train`, `n_val`, `seed`,
    and task options such as `digits`). Files are cached under
    `$MINIRL_CACHE/data/<task>-<hash of the settings>/` and reused.
    """
    from minirl.models.tiny import default_cache_dir

    if isinstance(data_files, (str, os.PathLike)):
        data_files = [data_files]
    resolved = []
    for entry in data_files:
        entry = str(entry)
        if not entry.startswith(DATA_SCHEME):
            resolved.append(os.path.expanduser(entry))
            continue
        task, _, split = entry[len(DATA_SCHEME) :].partition("/")
        try:
            split = _normalize_split(split or "train")
            kwargs = _task_kwargs(task, builtin)
        except ValueError as e:  # an unknown task or split: one line naming the entry
            raise DataError(f"{entry}: {e}. Fix: minirl://<task>/<split>, e.g. minirl://arithmetic/train.") from None
        digest = hashlib.sha256(json.dumps(kwargs, sort_keys=True).encode()).hexdigest()[:12]
        out_dir = os.path.join(default_cache_dir(), "data", f"{task}-{digest}")
        paths = {
            "train": os.path.join(out_dir, "train.parquet"),
            "test": os.path.join(out_dir, "test.parquet"),
        }
        if not all(os.path.isfile(p) for p in paths.values()):
            write_task_parquet(task, out_dir, **kwargs)
        resolved.append(paths[split])
    return resolved
