"""The trace event schema (version 2), and how to find and read a trace.

minirl's own instrument (verl has no counterpart: verl logs metrics per step, not the batch itself).
A trace is a directory holding `trace.jsonl`: one JSON object per line, one line per event, written
append-only by `minirl.trace.Tracer` while the run goes. Read it with `read_trace`, look at it with
`minirl trace show|lineage|diff` or the functions of `minirl.trace.views`.

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
| `kind` | str | `run_start`, `stage`, `metrics` or `run_end` |
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
| `versions` | weight versions when the stage began: `{"actor": 3, "rollout": 3, "ref": 0, "critic": 3}` |
| `versions_after` | the same when the stage ended (only when the trainer gives the tracer a `version_source`) |
| `extra` | stage-specific numbers the stage reports (micro-batch counts, policy versions of the samples ...) |

A field:

| key | meaning |
|---|---|
| `storage` | `batch` (a tensor in the DataProto's TensorDict, first dimension = batch), `non_tensor_batch` (a numpy array, one entry per sample), `meta_info` (run-level metadata, no batch dimension), `transfer_queue` (a field held by key in the data plane, not in the controller's batch) |
| `shape`, `dtype`, `device` | as torch / numpy report them (`device` is `-` for meta_info) |
| `value` | meta_info only: the value itself when it is a number, bool, short string or short list of them |
| `summary` | only where the stage added or changed the field: `mean`, `min`, `max` (7 significant digits) over the valid entries; `masked_by` and `valid` name the mask (`response_mask` for `[B, response_length]` tensors, `attention_mask` for `[B, prompt_length + response_length]`) and count its ones; `nonfinite` counts NaN/inf entries when there are any. Token ids get no summary; masks get the fraction of ones as `mean`; numeric numpy fields get mean/min/max |

## `metrics` and `run_end`

`metrics`: `step` and `metrics` (the row the trainer logs). `run_end`: `events` written and
`overhead_s`, the seconds the tracer itself spent (snapshots, summaries, writing).

## Files and crash safety

The controller writes `trace.jsonl`; a worker process may write `trace.<part>.jsonl` in the same
directory (`Tracer(..., part="actor1")`), and `read_trace` merges them by time. Each event is
one `write` of one complete line to a file opened in append mode, so a killed run leaves every
complete line valid. `read_trace` skips a torn line (and counts it in `read_trace.last_torn`);
a writer that re-opens a file whose last line is torn ends that line first.
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


def read_trace(path, run_id: str | None = None) -> list[dict]:
    """Every complete event of a trace (directory or `.jsonl` file) as plain dicts, in time order.

    `run_id` keeps one run's events when a directory holds several (a resumed run appends). Torn lines
    (a killed writer) are skipped; how many is left in `read_trace.last_torn`.
    """
    files = trace_files(path)
    if not files:
        raise TraceNotFound(f"no trace at {trace_path(path)}: run with trace.level=stages or fields and "
                            "trace.dir=<dir>, or pass a trace dir, .jsonl file or run dir")
    events, torn = [], 0
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                if not line.endswith("\n"):
                    torn += 1  # the last line of a killed writer
                    break
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    torn += 1  # a torn line that a later writer terminated
    read_trace.last_torn = torn
    if len(files) > 1:
        events.sort(key=lambda e: e.get("t", 0.0))  # stable: one writer's events keep their order
    if run_id is not None:
        events = [e for e in events if e.get("run_id") == run_id]
    return events


read_trace.last_torn = 0
