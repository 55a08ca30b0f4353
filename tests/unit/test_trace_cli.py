"""`minirl trace show|lineage|diff` on files that are not traces: one line on stderr, exit 2.

Each bad file is fed to each of the three commands (diff gets it as its second run, next to the
`grpo` reference trace). The line must name the file, say what it is, and say what was expected; no
traceback. A trace with torn lines (a killed writer) still answers, and the skipped lines are
counted on stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from minirl.cli import main as cli_main
from minirl.trace.reference import reference_path

ROOT = Path(__file__).resolve().parents[2]
GOOD = reference_path("grpo").read_text().splitlines(keepends=True)  # a real trace, one event per line
STAGE = json.loads(next(line for line in GOOD if '"kind":"stage"' in line))


def _stage(**change) -> str:
    return json.dumps({**STAGE, **change}) + "\n"


def _without(key) -> str:
    return json.dumps({k: v for k, v in STAGE.items() if k != key}) + "\n"


# name -> (file name, bytes, what the message must say)
BAD = {
    "binary": ("model.bin", bytes(range(256)) * 4, "is a binary file (1024 bytes, not UTF-8 text)"),
    "png": ("curve.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 32, "is a binary file"),
    "nul_bytes": ("trace.jsonl", b'{"kind": "stage"}\x00\x00\n', "with NUL bytes"),
    "empty": ("trace.jsonl", b"", "is empty"),
    "whitespace": ("trace.jsonl", b"\n  \n\n", "holds only whitespace"),
    "json_list": ("events.json", b'[{"kind": "stage"}, {"kind": "metrics"}]\n', "is a single JSON list (1 line(s))"),
    "pretty_json_object": ("config.json", json.dumps({"data": {"train_batch_size": 8}}, indent=2).encode(),
                           "is a single JSON object (5 line(s))"),
    "json_numbers": ("trace.jsonl", b"1\n2\n3\n", "3 JSON line(s) that are not events (line 1 is a JSON number)"),
    "objects_without_kind": ("trace.jsonl", b'{"a": 1}\n{"b": 2}\n', "line 1 is an object without `kind`"),
    "metrics_log": ("metrics.jsonl", b'{"step": 1, "actor/pg_loss": 0.1}\n{"step": 2, "actor/pg_loss": 0.05}\n',
                    "is a metrics log"),
    "plain_text": ("notes.txt", b"step 1: loss 0.3\nstep 2: loss 0.2\n", "none of its 2 line(s) is JSON"),
    "only_a_torn_line": ("trace.jsonl", b'{"kind": "run_start", "sch', "its one line is torn"),
    "stage_without_step": ("trace.jsonl", (GOOD[0] + _without("step")).encode(),
                           "malformed `stage` event on line 2: no integer `step`"),
    "stage_without_name": ("trace.jsonl", (GOOD[0] + _without("stage")).encode(),
                           "malformed `stage` event on line 2: no `stage` name"),
    "step_is_a_string": ("trace.jsonl", (GOOD[0] + _stage(step="1")).encode(), "no integer `step`"),
    "fields_is_a_list": ("trace.jsonl", (GOOD[0] + _stage(fields=["responses"])).encode(),
                         "`fields` is a JSON list, not an object"),
    "added_is_a_string": ("trace.jsonl", (GOOD[0] + _stage(added="responses")).encode(),
                          "`added` is a JSON string, not a list of field names"),
    "kind_is_a_number": ("trace.jsonl", b'{"kind": 3}\n', "whose `kind` is a JSON number, not a name"),
    "metrics_event_without_row": ("trace.jsonl", (GOOD[0] + '{"kind": "metrics", "step": 1}\n').encode(),
                                  "malformed `metrics` event on line 2"),
    "trace_with_a_foreign_line": ("trace.jsonl", ("".join(GOOD[:3]) + "[1, 2]\n").encode(),
                                  "has 1 line(s) that are not trace events (line 4 is a JSON list)"),
}
COMMANDS = {"show": lambda p: ["show", p], "lineage": lambda p: ["lineage", p, "advantages"],
            "diff": lambda p: ["diff", "grpo", p]}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(BAD))
def test_a_file_that_is_not_a_trace_is_one_line_and_exit_2(case, command, tmp_path, capsys):
    name, data, says = BAD[case]
    path = tmp_path / name
    path.write_bytes(data)
    assert cli_main(["trace", *COMMANDS[command](str(path))]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"minirl trace {command}: {path} "), err
    assert says in err and "expected a minirl trace" in err, err


@pytest.mark.parametrize("layout", ["trace_dir", "run_dir"])
def test_a_bad_trace_inside_a_directory_names_the_file(layout, tmp_path, capsys):
    folder = tmp_path / "run" / "trace"
    folder.mkdir(parents=True)
    (folder / "trace.jsonl").write_bytes(b"\xff\xfe garbage")
    arg = folder if layout == "trace_dir" else folder.parent
    assert cli_main(["trace", "show", str(arg)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{folder / 'trace.jsonl'} is a binary file" in err


def test_metrics_log_message_points_at_the_run_trace(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "critic/score/mean": 0.5}\n')
    assert cli_main(["trace", "show", str(tmp_path / "metrics.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "is a metrics log (trainer.logger=[file]" in err and f"`minirl trace show {tmp_path}`" in err


@pytest.mark.parametrize("where", ["last_line", "terminated_by_the_next_writer"])
def test_torn_lines_are_skipped_counted_and_reported(where, tmp_path, capsys):
    torn = GOOD[5][: len(GOOD[5]) // 2]
    lines = GOOD[:5] + [torn] if where == "last_line" else GOOD[:5] + [torn + "\n"] + GOOD[5:]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(lines))
    assert cli_main(["trace", "show", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "step 0" in out
    kept = 5 if where == "last_line" else len(GOOD)
    assert err == (f"minirl trace show: skipped 1 torn line(s) in {path} (a writer killed mid-line); "
                   f"read the {kept} complete events\n")


def test_the_installed_command_prints_no_traceback(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(bytes(range(256)))
    p = subprocess.run([sys.executable, "-m", "minirl.cli", "trace", "lineage", str(path), "advantages"],
                       check=False, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr and "is a binary file" in p.stderr
