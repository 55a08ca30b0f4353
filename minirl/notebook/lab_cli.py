"""`minirl lab list` and `minirl lab check NN`: the labs from a shell, and a headless run of your copy of one.

No verl counterpart (verl has no labs). `minirl lab check 03` (a number, or a notebook's path) runs the lab
top to bottom in a fresh Jupyter kernel (nbclient), in its own folder, with `MINIRL_LAB_RECORD=1`: every
check records its verdict instead of stopping the notebook, and the lab carries on with the worked solution
where an answer is missing or wrong (so the checks further down still run). Then it prints the scoreboard:
each exercise with `ok`, `not answered` or `wrong`, what is wrong, and the hint. Nothing of the run is kept:
the executed notebook is not written anywhere, and no answer is printed.

    minirl lab list                 # every lab: number, title, what you write
    minirl lab check 03             # labs/03_*.ipynb, your edited copy, headless: the scoreboard
    minirl lab check path/to/03_compare_grpo_and_ppo.ipynb

Exit status: 0 when every exercise is ok, 1 otherwise, 2 when the lab cannot be found or run.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from minirl.notebook.checks import RECORD_ENV, SCOREBOARD_ENV, SOLUTIONS_ENV

__all__ = ["find_lab", "lab_summary", "labs_dir", "register_lab_cli", "run_lab_check"]

HEADING = re.compile(r"^## Exercise (\d+): (.*)$", re.MULTILINE)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def labs_dir() -> Path:
    """`labs/` of the checkout minirl runs from, else `./labs`."""
    repo = Path(__file__).resolve().parents[2] / "labs"
    return repo if repo.is_dir() else Path.cwd() / "labs"


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def lab_summary(path: Path) -> dict:
    """number, title, what you write (the intro's "What you write:" paragraph) and the exercises of a lab."""
    md = [_source(c) for c in _cells(path) if c.get("cell_type") == "markdown"]
    text = "\n".join(md)
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), path.stem)
    m = re.search(r"What you write: (.*?)(?:\n\n|\Z)", text, re.DOTALL)
    writes = " ".join(m.group(1).split()).split(". Read")[0].rstrip(".") if m else ""
    return {"number": path.stem.split("_")[0], "file": path.name, "title": title, "you write": writes,
            "exercises": [(int(n), t.strip()) for n, t in HEADING.findall(text)]}


def find_lab(which: str) -> Path:
    """A lab notebook by number (`3`, `03`) or path; FileNotFoundError naming the labs there are."""
    p = Path(which).expanduser()
    if p.suffix == ".ipynb":
        if not p.is_file():
            raise FileNotFoundError(f"{p}: no such notebook")
        return p.resolve()
    folder = labs_dir()
    if which.isdigit():
        found = sorted(folder.glob(f"{int(which):02d}_*.ipynb"))
        if found:
            return found[0]
    known = ", ".join(x.stem for x in sorted(folder.glob("*.ipynb"))) or "none"
    raise FileNotFoundError(f"no lab {which!r} in {folder} (labs there: {known}). Fix: a lab number (01) or the path "
                            "of a lab notebook")


def run_lab_check(path: Path, timeout: int = 600) -> dict:
    """Run `path` headless, recording; returns {"rows": scoreboard rows, "stopped": why it stopped early or None,
    "solutions": whether the copy has its solutions on, "wall_s": seconds}."""
    import nbclient
    import nbformat
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="minirl-lab-check-") as tmp:
        board = Path(tmp) / "scoreboard.json"
        env = {k: v for k, v in os.environ.items() if k != SOLUTIONS_ENV}
        env.update({RECORD_ENV: "1", SCOREBOARD_ENV: str(board)})
        client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=timeout, allow_errors=False,
                                         resources={"metadata": {"path": str(path.parent)}})
        stopped, t0 = None, time.perf_counter()
        try:
            client.execute(env=env)
        except CellExecutionError as e:
            lines = [line for line in ANSI.sub("", str(e)).splitlines() if line.strip()]
            stopped = f"{e.ename}: {lines[-1] if lines else ''}"[:300]
        except Exception as e:  # noqa: BLE001 - a timeout or a dead kernel: said in one line
            stopped = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        data = json.loads(board.read_text()) if board.is_file() else {"rows": [], "solutions": False}
    return {"rows": data["rows"], "stopped": stopped, "solutions": data.get("solutions", False),
            "wall_s": time.perf_counter() - t0}


def _list(args) -> int:
    labs = sorted(labs_dir().glob("*.ipynb"))
    if not labs:
        print(f"minirl lab: no labs in {labs_dir()}", file=sys.stderr)
        return 2
    for path in labs:
        s = lab_summary(path)
        print(f"{s['number']}  {s['title']}  ({len(s['exercises'])} exercises)\n    you write: {s['you write']}")
    print("\nminirl lab check NN   runs your copy of lab NN headless and prints your scoreboard")
    return 0


def _check(args) -> int:
    try:
        path = find_lab(args.lab)
    except FileNotFoundError as e:
        print(f"minirl lab check: {e}", file=sys.stderr)
        return 2
    summary = lab_summary(path)
    print(f"minirl lab check: running {path} headless (recording: the lab carries on past open exercises)...",
          flush=True)
    result = run_lab_check(path, timeout=args.timeout)
    rows = {r["exercise"]: r for r in result["rows"]}
    width = max([len(t) for _, t in summary["exercises"]] + [8])
    print(f"\n{summary['title']}: scoreboard ({result['wall_s']:.0f} s)\n")
    for number, title in summary["exercises"]:
        row = rows.get(number, {"result": "not reached"})
        print(f"  {number:>2}  {title:<{width}}  {row['result']}")
        if row.get("what is wrong"):
            print(f"      what is wrong: {row['what is wrong']}")
        if row.get("hint") and row["result"] != "ok":
            print(f"      hint: {row['hint']}")
    ok = sum(rows.get(n, {}).get("result") == "ok" for n, _ in summary["exercises"])
    print(f"\n{ok} of {len(summary['exercises'])} exercises ok.")
    if result["solutions"]:
        print("Your copy has SOLUTION = True: the worked solutions filled in the exercises marked 'solution'.")
    if result["stopped"]:
        print(f"The lab stopped early: {result['stopped']}")
        return 2 if not rows else 1
    return 0 if ok == len(summary["exercises"]) else 1


def register_lab_cli(sub) -> None:
    """Add `minirl lab list|check` to the `minirl` command's subparsers."""
    p = sub.add_parser("lab", help="the labs: list them, or check your copy of one headless (its scoreboard)")
    s = p.add_subparsers(dest="lab_command", required=True)
    s.add_parser("list", help="every lab: number, title, what you write").set_defaults(fn=_list)
    c = s.add_parser("check", help="run your copy of a lab headless and print the scoreboard")
    c.add_argument("lab", help="the lab's number (03) or its notebook's path")
    c.add_argument("--timeout", type=int, default=600, help="seconds one cell may take (default 600)")
    c.set_defaults(fn=_check)
