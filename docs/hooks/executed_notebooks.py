"""Executed notebooks, once per run: the copies with outputs that the notebook tests check and the site renders.

Every notebook of the site (chapters/*.ipynb, labs/*.ipynb, docs/**/*.ipynb) executes once per CI
run. Whoever needs it first runs it with nbclient — tests/notebooks/test_notebooks.py, the site build of
tests/site/test_site.py (`build_site()`), or `mkdocs build` / `mkdocs serve` by hand (the hook
docs/hooks/minirl_site.py) — and writes the executed copy to `.cache/executed/<path>.ipynb`
(ignored by git). The site renders that copy with mkdocs-jupyter's execution off.

A copy is reused only while it is fresh: it records a key, the sha256 of the notebook's bytes, of
every file of the `minirl` package, of `traces/`, `labs/solutions/` and `benchmarks/results/` (what a notebook imports
and reads), and of how
it ran (the lab switch below). When the notebook or minirl changed since, the key differs and the
notebook executes again. One test session executes a notebook at most once: `execute_once`
remembers each run, failures included, so a failing notebook is reported by every test that needs
it without running it again; and a copy written under the session id in `MINIRL_EXECUTED_SESSION`
(the tests set it, `start_session()`, and the site build they start inherits it) stays fresh for
that session while the notebook itself is unchanged, even if minirl's files change meanwhile (an
editor saving a file during the run). `mkdocs serve` by hand has no session: it re-executes a
notebook whenever minirl changes.

Labs execute twice, in two modes, each with its own executed copy (and key):
- `reader`: the lab as a reader gets it (`SOLUTION = False`, no solution switch in the kernel's
  environment). It must stop at an unanswered exercise (`ExerciseNotAnswered`, minirl.notebook.checks):
  the copy holds the outputs up to that check, the stop message in it, and no output below. The site's
  lab page renders it (docs/labs/index.md says so); tests/notebooks/test_labs.py checks it holds no answer.
- `solutions`: the kernel gets `MINIRL_LAB_SOLUTIONS=1`, which fills in the worked solutions
  (labs/solutions/<lab>.py); it must run to the end, every check passing, and it writes its scoreboard
  to `<copy>.scoreboard.json`. The copy lives at `.cache/executed/labs/solutions/<lab>.ipynb`, and the
  site renders it as the lab's worked-solutions page, marked as such.
Both copies are decorated for the site (`decorate`): a banner saying what the page is, and links
between the lab and its worked solutions. Chapters and docs notebooks have one mode, `plain`.

No mkdocs import here: the tests import this file as a module too (`docs/hooks` on `sys.path`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = ROOT / ".cache" / "executed"
LAB_SOLUTIONS_ENV = "MINIRL_LAB_SOLUTIONS"  # minirl.notebook.checks.Lab reads it and fills in the solutions
LAB_RECORD_ENV = "MINIRL_LAB_RECORD"  # ... records instead of stopping (`minirl lab check`); never set here
LAB_SCOREBOARD_ENV = "MINIRL_LAB_SCOREBOARD"  # ... writes its scoreboard to this file
STOP_ENAME = "ExerciseNotAnswered"  # the exception an unanswered exercise raises (the reader's state stops on it)
KEY_INPUTS = ("minirl", "traces", "labs/solutions", "benchmarks/results")  # what a notebook's outputs depend on
KEY_VERSION = "2"  # bump when the way notebooks execute changes (kernel, environment, modes, decoration)
META = "minirl_executed"  # notebook metadata entry of an executed copy
SESSION_ENV = "MINIRL_EXECUTED_SESSION"  # a test session's id (start_session); inherited by the site build
DEFAULT_TIMEOUT_S = int(os.environ.get("MINIRL_DOCS_CELL_TIMEOUT", "300"))  # per cell (nbclient's timeout)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Execution:
    """One notebook run: where its executed copy is, how long it took, what it left behind, its error."""

    source: Path
    key: str
    wall_s: float
    mode: str = "plain"
    nb: object = None  # the executed notebook (nbformat.NotebookNode; the copy on disk is decorated), None when it failed
    copy: Path | None = None  # the executed copy on disk (None when it failed)
    left_behind: list[str] = field(default_factory=list)  # files the run wrote next to the notebook
    error: str | None = None  # the failing cell and its traceback, ANSI colours removed
    stopped_at: int | None = None  # reader mode: the index of the cell whose check stopped the lab
    stop: str | None = None  # reader mode: the stop's message (ename: evalue, then its lines), ANSI removed
    probe: object = None  # what `probe(client, nb, stopped_at)` returned (reader mode, same kernel)


_SESSION: dict[tuple[str, str, str], Execution] = {}  # this process's runs, by (source path, notebook sha256, mode)


def start_session() -> str:
    """Give this process (and the processes it starts) a session id, once; returns it."""
    return os.environ.setdefault(SESSION_ENV, uuid.uuid4().hex)


def relpath(path: Path) -> str:
    """The notebook's path inside the repository (`chapters/01_x.ipynb`)."""
    return Path(path).resolve().relative_to(ROOT).as_posix()


def is_lab(path: Path) -> bool:
    return relpath(path).startswith("labs/")


def modes(path: Path) -> tuple[str, ...]:
    """The ways a notebook executes: `("reader", "solutions")` for a lab, `("plain",)` for the rest."""
    return ("reader", "solutions") if is_lab(path) else ("plain",)


def _mode(path: Path, mode: str | None) -> str:
    mode = mode or modes(path)[0]
    if mode not in modes(path):
        raise ValueError(f"{relpath(path)} executes in modes {modes(path)}, not {mode!r}")
    return mode


def kernel_env(path: Path, mode: str | None = None) -> dict:
    """The kernel's environment: this process's without the lab switches, plus the solutions switch in `solutions` mode."""
    mode = _mode(path, mode)
    env = {k: v for k, v in os.environ.items() if k not in (LAB_SOLUTIONS_ENV, LAB_RECORD_ENV, LAB_SCOREBOARD_ENV)}
    if mode == "solutions":
        env[LAB_SOLUTIONS_ENV] = "1"
        env[LAB_SCOREBOARD_ENV] = str(scoreboard_path(path))
    return env


def inputs_digest() -> str:
    """sha256 over the path and bytes of every file under KEY_INPUTS (no `__pycache__`)."""
    h = hashlib.sha256()
    for folder in KEY_INPUTS:
        base = ROOT / folder
        files = sorted(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts) \
            if base.is_dir() else []
        for p in files:
            h.update(p.relative_to(ROOT).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def notebook_sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def key(path: Path, digest: str | None = None, mode: str | None = None) -> str:
    """What an executed copy of `path` in `mode` must record to be fresh (see the module docstring)."""
    h = hashlib.sha256(f"v{KEY_VERSION} mode={_mode(path, mode)}\0".encode())
    h.update(Path(path).read_bytes())
    h.update((digest or inputs_digest()).encode())
    return h.hexdigest()


def copy_path(path: Path, mode: str | None = None) -> Path:
    """Where the executed copy lives: `.cache/executed/<path>`, a lab's solutions run under `labs/solutions/`."""
    if _mode(path, mode) == "solutions":
        return CACHE_DIR / "labs" / "solutions" / Path(path).name
    return CACHE_DIR / relpath(path)


def scoreboard_path(path: Path) -> Path:
    """Where a lab's solutions run writes its scoreboard (JSON: one row per exercise)."""
    return copy_path(path, "solutions").with_suffix(".scoreboard.json")


def fresh_copy(path: Path, digest: str | None = None, mode: str | None = None) -> Path | None:
    """The executed copy of `path` if it is fresh (same key, or this session's run of this notebook), else None."""
    cp = copy_path(path, mode)
    try:
        meta = json.loads(cp.read_text(encoding="utf-8")).get("metadata", {}).get(META, {})
    except (OSError, ValueError):
        return None
    session = os.environ.get(SESSION_ENV)
    if session and meta.get("session") == session and meta.get("notebook_sha256") == notebook_sha(path) \
            and meta.get("mode", "plain") == _mode(path, mode):
        return cp
    return cp if meta.get("key") == key(path, digest, mode) else None


# ------------------------------------------------------------------------------------- site decoration

SOLUTIONS_TITLE = "worked solutions"


def _banner(kind: str, title: str, text: str) -> str:
    return f'<div class="admonition {kind}"><p class="admonition-title">{title}</p><p>{text}</p></div>'


def decorate(nb, path: Path, mode: str) -> None:
    """Mark a lab's executed copy for the site: what the page shows, and the links between lab and solutions.

    Links are the site's directory URLs (`labs/<lab>/`, `labs/solutions/<lab>/`): notebook markdown is
    rendered by nbconvert, and mkdocs does not rewrite links inside it.
    """
    import nbformat

    if mode == "plain":
        return
    stem = Path(path).stem
    solutions_file = f"labs/solutions/{stem}.py"
    first = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), 0)
    if mode == "reader":
        top = _banner("info", "The lab as you get it", (
            "This page is the notebook executed as committed, in the reader's state: it ran up to the first "
            "exercise, whose check stops the notebook until it is answered, so the cells below that check have "
            "no output here. Download the notebook (the link above), answer the exercises in Jupyter, and run "
            f'it; <code>minirl lab check {stem[:2]}</code> prints your scoreboard. The answers are on '
            f'<a href="../solutions/{stem}/">a page of their own</a>.'))
        end = ("## Worked solutions\n\nDone, or stuck? The worked solutions, run and checked against the same runs: "
               f"[Lab {stem[:2]} · worked solutions](../solutions/{stem}/) (the code: `{solutions_file}`).")
        nb.cells.insert(first + 1, nbformat.v4.new_markdown_cell(top))
        nb.cells.append(nbformat.v4.new_markdown_cell(end))
    else:
        head = nb.cells[first]
        src = head.source
        lines = src.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("# "):
                lines[i] = f"{line} · {SOLUTIONS_TITLE}"
                break
        head.source = "\n".join(lines)
        top = _banner("warning", "Worked solutions: the answers are on this page", (
            f"This is the lab run with its worked solutions (<code>{solutions_file}</code>, switched on by "
            "<code>SOLUTION = True</code> or <code>MINIRL_LAB_SOLUTIONS=1</code>): every exercise is filled in, "
            "printed as <code>[solution]</code> and checked against the run. Do the lab first: "
            f'<a href="../../{stem}/">the lab page</a>.'))
        nb.cells.insert(first + 1, nbformat.v4.new_markdown_cell(top))
        code = (ROOT / solutions_file).read_text(encoding="utf-8") if (ROOT / solutions_file).is_file() else ""
        if code:
            nb.cells.append(nbformat.v4.new_markdown_cell(f"## The worked solutions, `{solutions_file}`"))
            nb.cells.append(nbformat.v4.new_code_cell(code))
    for cell in nb.cells:  # nbformat 4.5 wants an id on every cell
        cell.setdefault("id", uuid.uuid4().hex[:8])


# ------------------------------------------------------------------------------------------ execution


def _error_text(e: Exception) -> str:
    return f"{type(e).__name__}: {ANSI.sub('', str(e))}"


def execute(path: Path, timeout: int = DEFAULT_TIMEOUT_S, mode: str | None = None, probe=None) -> Execution:
    """Run `path` top to bottom in its own folder (a fresh `python3` kernel); write the copy if it passed.

    A `plain` or `solutions` run passes when every cell ran without error. A `reader` run passes when
    it stopped at a check with `ExerciseNotAnswered` (a lab that runs to its end unanswered, or stops
    on anything else, fails); then `probe(client, nb, stopped_at)`, if given, runs in the same kernel
    (tests/notebooks/test_labs.py re-runs the stopped exercise with a wrong answer) and its result is kept in
    `Execution.probe`; the copy holds the notebook as it stopped, without the probe's cells.
    """
    import copy as copylib

    import nbclient
    import nbformat
    from nbclient.exceptions import CellExecutionError
    from nbclient.util import ensure_async, run_sync

    path = Path(path).resolve()
    mode = _mode(path, mode)
    k, sha = key(path, mode=mode), notebook_sha(path)
    nb = nbformat.read(path, as_version=4)
    before = {p.name for p in path.parent.iterdir()}
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=timeout, allow_errors=False,
                                     resources={"metadata": {"path": str(path.parent)}})
    if mode == "solutions":
        scoreboard_path(path).parent.mkdir(parents=True, exist_ok=True)
        scoreboard_path(path).unlink(missing_ok=True)
    run = Execution(source=path, key=k, wall_s=0.0, mode=mode)
    t0 = time.perf_counter()
    try:
        client.reset_execution_trackers()
        with client.setup_kernel(env=kernel_env(path, mode)):
            info = client.wait_for_reply(run_sync(ensure_async)(client.kc.kernel_info()))
            if info and "language_info" in info.get("content", {}):
                nb.metadata["language_info"] = info["content"]["language_info"]
            for index, cell in enumerate(nb.cells):
                try:
                    client.execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
                except CellExecutionError as e:
                    if mode == "reader" and e.ename == STOP_ENAME:
                        run.stopped_at, run.stop = index, ANSI.sub("", "\n".join(
                            line for o in cell.get("outputs", []) if o.get("output_type") == "error"
                            for line in o.get("traceback", [])))
                        if probe is not None:
                            saved = copylib.deepcopy(nb)
                            run.probe = probe(client, nb, index)
                            nb = saved
                        break
                    run.error = f"cell {index}: " + _error_text(e)
                    break
    except Exception as e:  # noqa: BLE001 - a timeout, a dead kernel: reported like a failing cell
        run.error = _error_text(e)
    run.wall_s = time.perf_counter() - t0
    if run.error is None and mode == "reader" and run.stopped_at is None:
        run.error = (f"{relpath(path)} ran to its end in the reader's state (SOLUTION = False, no {LAB_SOLUTIONS_ENV}): "
                     "no check stopped it. Its first exercise must hold `None  # YOUR ANSWER` or "
                     "`raise NotImplementedError  # YOUR CODE`, and its check must call lab.check / lab.check_code.")
    run.left_behind = sorted({p.name for p in path.parent.iterdir()} - before)
    if run.error is None:
        nb.metadata[META] = {"key": k, "source": relpath(path), "notebook_sha256": sha, "mode": mode,
                             "session": os.environ.get(SESSION_ENV), "wall_s": round(run.wall_s, 2),
                             "stopped_at": run.stopped_at, "executed_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        site = copylib.deepcopy(nb)  # run.nb keeps the cell indices of the source; the copy is decorated
        decorate(site, path, mode)
        cp = copy_path(path, mode)
        cp.parent.mkdir(parents=True, exist_ok=True)
        tmp = cp.with_name(cp.name + f".{os.getpid()}.tmp")
        nbformat.write(site, tmp)
        os.replace(tmp, cp)  # atomic: a concurrent `mkdocs serve` never reads half a notebook
        run.nb, run.copy = nb, cp
    return run


def execute_once(path: Path, timeout: int = DEFAULT_TIMEOUT_S, mode: str | None = None,
                 probe=None) -> tuple[Execution, bool]:
    """`execute(path, mode=mode)` unless this process already ran this notebook (the same bytes) in that mode.

    Returns the run and whether it happened in this call (False: an earlier caller ran it; then its
    `probe` result is whatever that caller asked for, possibly None).
    """
    path = Path(path).resolve()
    mode = _mode(path, mode)
    memo = (str(path), notebook_sha(path), mode)
    if memo in _SESSION:
        return _SESSION[memo], False
    run = execute(path, timeout, mode, probe)
    _SESSION[memo] = run
    return run, True
