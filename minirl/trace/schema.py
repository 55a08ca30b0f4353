"""The trace event schema (version 2), and how to find and read a trace.

minirl's own instrument (verl has no counterpart: verl logs metrics per step, not the batch itself).
A trace is a directory holding `trace.jsonl`: one JSON object per line, one line per event, written
append-only by `minirl.trace.Tracer` while the run goes. Read it with `read_trace`, look at it with
`minirl trace show|lineage|diff` or the functions of `minirl.trace.show`, `.lineage` and `.diff`.

## Levels (`trace.level`, `trace.dir` in the run config)

| level | what a stage event holds | cost |
|---|---|---|
| `off` | nothing is written | none |
| `stages` | stage, who ran it, wall time, weight versions, the *names* of the fields added / removed / changed / read and of every field present after the stage (`present`) | a few dict look-ups per stage |
| `fields` (default) | all of `stages`, plus `fields`: every field's storage, shape, dtype and device, and a masked summary of each field the stage added or changed | one reduction per new field, one device sync per stage |

## Every event

| key | type | meaning |
|---|---|---|
| `schema` | int | this schema's version (`SCHEMA_VERSION`) |
| `run_id` | str | id of the run; a resumed run appends to the same file under a new id |
| `kind` | str | `run_start`, `stage`, `metrics`, `worker` (a worker rank's call, in `trace.rank<r>.jsonl`), `nonfinite` (a NaN/inf a stage produced: `step`, `stage`, `field`, `count`, `total`, `rows`, `policy`; written by the trainer's non-finite checks) or `run_end` |
| `seq` | int | event number within this writer (0 = `run_start`) |
| `t` | float | wall-clock time the event was written (unix seconds) |

## `run_start`

`level`; `config` (the resolved run config); `config_fingerprint` (16 hex digits of a sha256 over
the config with absolute paths masked, so the same overrides give the same fingerprint on any
machine); `minirl_version`; `verl_pin` (the verl commit minirl mirrors); `torch_version`; `pid`;
plus what the trainer passes as `meta` (e.g. `adv_estimator`, `rollout`).

## `stage` (one per stage of the training step, written when the stage ends)

| key | meaning |
|---|---|
| `stage` | `sample`, `reward`, `old_log_prob`, `ref_log_prob`, `values`, `advantage`, `update_critic`, `update_actor`, `update_weights`, `validate` (see `minirl.trace.stages.STAGE_INFO` for the method and the verl symbol behind each) |
| `step` | training step (`trainer.global_steps`): 0 before the first update (initial weight sync, validation before training) |
| `role`, `rank` | the worker role that ran the stage (`rollout`, `reward`, `actor`, `ref`, `critic`, `trainer` for the controller itself) and its rank |
| `device` | the devices of the batch's tensors after the stage (`cpu`, `cuda:0`, ...) |
| `t_start`, `wall_s` | start (unix seconds) and duration of the stage |
| `status` | `ok`, or `error` with `error` = the exception, when the stage raised |
| `added`, `removed`, `changed` | field names the stage added to the batch, took out of it, or gave new values |
| `changes` | why each changed field counts as changed: `values`, `values (in place)`, `shape [8] -> [32]`, `dtype ...`, `device ...`, `storage ...` |
| `read` | the fields the stage declares it reads (the trainer passes `reads=`: what it sends to the worker) |
| `removed_fields` | level `fields`: the records of the removed fields as they were before the stage |
| `present` | level `stages`: names of every field in the batch after the stage |
| `fields` | level `fields`: `{name: field}` for every field after the stage (below) |
| `versions` | weight versions when the stage began: `{"actor": 3, "rollout": 3, "old": 3, "ref": 0, "critic": 3}` (`rollout`: what the replicas hold; `old`: the policy behind this batch's `old_log_probs`, null until the `old_log_prob` stage) |
| `versions_after` | the same when the stage ended (only when the trainer gives the tracer a `version_source`) |
| `extra` | stage-specific numbers the stage reports (micro-batch counts, policy versions of the samples ...) |

A field:

| key | meaning |
|---|---|
| `storage` | `batch` (a tensor in the DataProto's TensorDict, first dimension = batch), `non_tensor_batch` (a numpy array, one entry per sample), `meta_info` (run-level metadata, no batch dimension), `transfer_queue` (a field held by key in the data plane, not in the controller's batch) |
| `shape`, `dtype`, `device` | as torch / numpy report them (`device` is `-` for meta_info) |
| `value` | meta_info only: the value itself when it is a number, bool, short string or short list of them |
| `summary` | only where the stage added or changed the field: `mean`, `min`, `max` (7 significant digits) over the valid entries; `masked_by` and `valid` name the mask (`response_mask` for `[B, response_length]` tensors, `attention_mask` for `[B, prompt_length + response_length]`) and count its ones; `nonfinite` counts NaN/inf entries when there are any. Token ids get no summary; masks get the fraction of ones as `mean`; numeric numpy fields get mean/min/max |

## `worker` (one per registered method call on a worker rank; written by that rank's process)

Each worker process writes `trace.rank<r>.jsonl` (`minirl.trace.worker_trace`; `Worker.init_trace`
opens it). A call belongs to the controller stage whose span holds its `t_start`.

| key | meaning |
|---|---|
| `rank`, `world_size` | the worker's rank in its group and the group size |
| `worker`, `role`, `method` | the worker class, its role (`actor_rollout_ref`, `critic` ...) and the method called |
| `dispatch`, `execute`, `collect` | how the call was split (`ONE_TO_ALL`, `DP_COMPUTE_PROTO`, `nd_mesh:<mesh>` ...), who ran it (`ALL`, `RANK_ZERO`) and how the controller gathers the outputs (`list`, `concat`, `concat_collect_ranks`) |
| `dp_rank`, `collected` | nd-mesh: the data-parallel rank whose chunk this rank got; whether its output reaches the controller (one rank per dp rank) |
| `inputs`, `output` | what the rank received and returned: a DataProto as `rows` + the shape of every `batch` tensor (+ the names in `non_tensor_batch` and `meta_info`); other values by type |
| `engines` | `init_model`: each engine built on this rank: `engine`, `mesh` (`{"dp_shard": 2, "tp": 2}`), `coords`, `dp_rank`, `dp_size`, `is_collect`, `params` (`{name: {"local", "global", "placements"}}`: this rank's shard of every parameter) |
| `passes` | each engine pass (`train` = one optimizer step, `infer` = a forward-only batch): `micro_batches`, `sizes` (rows), `tokens` (attention-mask ones), `response_tokens`, the global `dp_size` / `global_batch_size` / `batch_num_tokens` the loss normalises with, and `collectives` (`{phase: [{"op", "group_size", "group_ranks", "calls"}]}`: each collective with the global ranks of its process group, counted with several ranks only) |
| `t_start`, `wall_s`, `status`, `error` | as for stages |

## `metrics` and `run_end`

`metrics`: `step` and `metrics` (the row the trainer logs). `run_end`: `events` written and
`overhead_s`, the seconds the tracer itself spent (snapshots, summaries, writing).

## Files and crash safety

The controller writes `trace.jsonl`; every worker process writes `trace.rank<r>.jsonl` in the same
directory (`Tracer(..., part="rank1")`), and `read_trace` merges them by time. Each event is
one `write` of one complete line to a file opened in append mode, so a killed run leaves every
complete line valid. `read_trace` skips a torn line (and counts it in `read_trace.last_torn`;
`minirl trace ...` reports the count on stderr); a writer that re-opens a file whose last line is
torn ends that line first. A file that is not a trace at all (binary, empty, one JSON document,
JSON lines that are not events, a `metrics.jsonl`, a `stage` event without its `stage` or `step`)
raises `TraceFormatError`, one line saying what the file is and what was expected.
"""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA_VERSION = 2
VERL_PIN = "1dda039b9c6311889a9c9a26040677e1254814f9"
TRACE_FILE = "trace.jsonl"
LEVELS = ("off", "stages", "fields")
STORAGES = ("batch", "non_tensor_batch", "meta_info", "transfer_queue")


class TraceNotFound(FileNotFoundError):
    """No trace where the caller pointed; the message lists what exists instead."""


def default_traces_root() -> Path:
    """The repository's `traces/` folder (reference traces), or `./traces` outside a checkout."""
    here = Path(__file__).resolve().parents[2] / "traces"
    return here if here.is_dir() else Path.cwd() / "traces"


def available_traces(root=None) -> list[str]:
    """Names of the recorded traces under `root` (default: the repository's `traces/`)."""
    root = Path(root) if root else default_traces_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / TRACE_FILE).exists())


def trace_files(path) -> list[Path]:
    """The JSONL files of a trace: a `.jsonl` file itself, or `trace.jsonl` + `trace.*.jsonl` in a directory."""
    p = Path(path)
    if p.is_dir():
        main = [p / TRACE_FILE] if (p / TRACE_FILE).exists() else []
        return main + sorted(q for q in p.glob("trace.*.jsonl"))
    return [p] if p.exists() else []


def trace_path(path) -> Path:
    """Accept a trace directory or the JSONL file itself; returns the main JSONL file."""
    p = Path(path)
    return p / TRACE_FILE if p.is_dir() else p


def resolve_run(run, traces_root=None) -> Path:
    """Where the trace of `run` is: a trace dir, a `.jsonl` file, a run dir (with `trace/`) or a name in `traces/`.

    Raises `TraceNotFound` with one line saying what was tried and which reference traces exist.
    """
    p = Path(str(run)).expanduser()
    for cand in (p, p / "trace"):
        if trace_files(cand):
            return cand
    root = Path(traces_root) if traces_root else default_traces_root()
    if (root / str(run) / TRACE_FILE).exists():
        return root / str(run)
    names = available_traces(root)
    raise TraceNotFound(
        f"no trace at {str(run)!r}: not a trace dir, a trace .jsonl, a run dir with trace/, or a name in "
        f"{root} (recorded there: {', '.join(names) or 'none'})")


_EXPECTED = "expected a minirl trace: trace.jsonl, one JSON event per line, as the tracer writes it under trace.dir"


class TraceFormatError(ValueError):
    """A file that is not a minirl trace; the one-line message says what the file is and what was expected."""


def _not_a_trace(path: Path, what: str) -> TraceFormatError:
    return TraceFormatError(f"{path} {what}; {_EXPECTED}")


def _json_kind(value) -> str:
    """`list`, `number` ...: what a parsed JSON value is, for a message."""
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number"}.get(
        type(value), "null")


def _check_event(ev: dict, path: Path, lineno: int) -> None:
    """Raise `TraceFormatError` naming the line when an event lacks what the views rely on."""
    def bad(what):
        return _not_a_trace(path, f"has a malformed `{ev['kind']}` event on line {lineno}: {what}")

    if not isinstance(ev["kind"], str):
        raise _not_a_trace(path, f"has an event on line {lineno} whose `kind` is a JSON {_json_kind(ev['kind'])}, not a name")
    if ev["kind"] == "stage":
        if not isinstance(ev.get("stage"), str):
            raise bad("no `stage` name")
        if not isinstance(ev.get("step"), int) or isinstance(ev.get("step"), bool):
            raise bad("no integer `step`")
        for key in ("added", "removed", "changed", "read", "present"):
            if not isinstance(ev.get(key, []), list):
                raise bad(f"`{key}` is a JSON {_json_kind(ev[key])}, not a list of field names")
        for key in ("fields", "removed_fields", "versions", "extra"):
            if not isinstance(ev.get(key, {}), dict):
                raise bad(f"`{key}` is a JSON {_json_kind(ev[key])}, not an object")
    elif ev["kind"] == "worker" and not (isinstance(ev.get("method"), str) and isinstance(ev.get("rank"), int)):
        raise bad("it needs a `method` name and an integer `rank`")
    elif ev["kind"] == "metrics" and not (isinstance(ev.get("step"), int) and isinstance(ev.get("metrics"), dict)):
        raise bad("it needs an integer `step` and a `metrics` object")


def _first_row(rows: list) -> str:
    """`line 3 is a JSON list`: the first JSON line that is not an event."""
    lineno, value = rows[0]
    return f"line {lineno} is " + ("an object without `kind`" if isinstance(value, dict) else f"a JSON {_json_kind(value)}")


def _what_it_is(text: str, rows: list, torn: int, f: Path) -> str:
    """What a UTF-8 file without a single trace event holds, as the middle of a one-line message."""
    n = text.count("\n") + (not text.endswith("\n"))
    if rows and all(isinstance(v, dict) and "step" in v for _, v in rows):
        return ("is a metrics log (trainer.logger=[file]: one row of numbers per line, no event `kind`), not a "
                f"trace; that run's trace is in trace/ next to it (`minirl trace show {f.parent}`)")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = f  # a sentinel: not one JSON document
    if whole is not f:
        return f"is a single JSON {_json_kind(whole)} ({n} line(s)), not JSON lines of events"
    if rows:
        return f"has no trace event: {len(rows)} JSON line(s) that are not events ({_first_row(rows)})"
    if torn and n == 1:
        return "has no complete event: its one line is torn (a writer killed mid-line)"
    return f"has no trace event: none of its {n} line(s) is JSON"


def _read_file(f: Path) -> tuple[list[dict], int]:
    """The events of one JSONL file and the number of torn lines skipped; `TraceFormatError` if it is no trace."""
    data = f.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _not_a_trace(f, f"is a binary file ({len(data)} bytes, not UTF-8 text)") from None
    if "\x00" in text:
        raise _not_a_trace(f, f"is a binary file ({len(data)} bytes with NUL bytes)")
    if not text.strip():
        raise _not_a_trace(f, "is empty" if not data else "holds only whitespace")
    events, torn, rows = [], 0, []  # rows: lines that parse but are not events (for the message)
    lines = text.split("\n")  # JSON escapes every control character, so only "\n" ends an event
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if lineno == len(lines):
            torn += 1  # no "\n" after it: the last line of a killed writer
            break
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            torn += 1  # a torn line that a later writer terminated
            continue
        if isinstance(value, dict) and "kind" in value:
            _check_event(value, f, lineno)
            events.append(value)
        else:
            rows.append((lineno, value))
    if events and rows:
        raise _not_a_trace(f, f"has {len(rows)} line(s) that are not trace events ({_first_row(rows)})")
    if not events:
        raise _not_a_trace(f, _what_it_is(text, rows, torn, f))
    return events, torn


def read_trace(path, run_id: str | None = None) -> list[dict]:
    """Every complete event of a trace (directory or `.jsonl` file) as plain dicts, in time order.

    `run_id` keeps one run's events when a directory holds several (a resumed run appends). Torn lines
    (a killed writer) are skipped; how many is left in `read_trace.last_torn`. A file that is not a
    trace (binary, empty, JSON that is not one event per line, a metrics log, an event missing its
    `stage` or `step`) raises `TraceFormatError` saying what the file is.
    """
    files = trace_files(path)
    if not files:
        raise TraceNotFound(f"no trace at {trace_path(path)}: run with trace.level=stages or fields and "
                            "trace.dir=<dir>, or pass a trace dir, .jsonl file or run dir")
    events, torn = [], 0
    for f in files:
        evs, n = _read_file(f)
        events += evs
        torn += n
    read_trace.last_torn = torn
    if len(files) > 1:
        events.sort(key=lambda e: e.get("t", 0.0))  # stable: one writer's events keep their order
    if run_id is not None:
        events = [e for e in events if e.get("run_id") == run_id]
    return events


read_trace.last_torn = 0
