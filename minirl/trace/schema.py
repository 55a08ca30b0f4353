"""The trace event schema (version 1) and the JSONL reader.

One line per event. Every event has:

| key | meaning |
|---|---|
| `schema` | schema version (int) |
| `run_id` | id of the run (one trace directory holds one run) |
| `kind` | `run_start`, `stage`, `metrics` or `run_end` |
| `step` | training step (0 before the first step, e.g. validation before training) |
| `stage` | stage name for `kind == "stage"` (sample, reward, old_log_prob, ref_log_prob, values, advantage, update_critic, update_actor, update_weights, validate, ...) |
| `role`, `rank`, `device` | who ran it: the worker role (trainer, actor, rollout, ref, critic, reward), its rank and device |
| `t_start`, `wall_s` | start time (unix seconds) and duration |
| `fields` | level `fields`: `{name: {storage, shape, dtype, device, summary}}` after the stage |
| `added`, `removed`, `changed`, `read` | field names the stage added, removed, modified in place, or declared it reads |
| `versions` | weight versions: `{"actor": 3, "rollout": 3, "ref": 0, "critic": 3}` |
| `extra` | stage-specific numbers (e.g. micro-batch sizes) |

`run_start` also carries `config_fingerprint`, `minirl_version`, `verl_pin` and the level.
A killed run leaves every complete line valid; `read_trace` ignores a torn last line.
"""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA_VERSION = 1
VERL_PIN = "1dda039b9c6311889a9c9a26040677e1254814f9"
TRACE_FILE = "trace.jsonl"


def trace_path(path) -> Path:
    """Accept a trace directory or the JSONL file itself."""
    p = Path(path)
    return p / TRACE_FILE if p.is_dir() else p


def read_trace(path) -> list[dict]:
    """Read every complete event of a trace (a directory or a .jsonl file) as plain dicts."""
    p = trace_path(path)
    if not p.exists():
        raise FileNotFoundError(f"no trace at {p}: run with trace.level=stages or fields and trace.dir=<dir>")
    events = []
    with open(p) as f:
        for line in f:
            if not line.endswith("\n"):
                break  # torn last line of a killed run
            events.append(json.loads(line))
    return events
