"""Executed notebooks, once per run: the copies with outputs that the notebook tests check and the site renders.

Every notebook of the site (chapters/*.ipynb, labs/*.ipynb, docs/**/*.ipynb) executes once per CI
run. Whoever needs it first runs it with nbclient — tests/test_notebooks.py, the site build of
tests/test_site.py (`build_site()`), or `mkdocs build` / `mkdocs serve` by hand (the hook
docs/hooks/minirl_site.py) — and writes the executed copy to `.cache/executed/<path>.ipynb`
(ignored by git). The site renders that copy with mkdocs-jupyter's execution off.

A copy is reused only while it is fresh: it records a key, the sha256 of the notebook's bytes, of
every file of the `minirl` package, of `traces/` and of `labs/solutions/` (what a notebook imports
and reads), and of how
it ran (the lab switch below). When the notebook or minirl changed since, the key differs and the
notebook executes again. One test session executes a notebook at most once: `execute_once`
remembers each run, failures included, so a failing notebook is reported by every test that needs
it without running it again; and a copy written under the session id in `MINIRL_EXECUTED_SESSION`
(the tests set it, `start_session()`, and the site build they start inherits it) stays fresh for
that session while the notebook itself is unchanged, even if minirl's files change meanwhile (an
editor saving a file during the run). `mkdocs serve` by hand has no session: it re-executes a
notebook whenever minirl changes.

Labs are committed with `SOLUTION = False` (the reader's copy shows no answers). Under labs/ the
kernel runs with `MINIRL_LAB_SOLUTIONS=1` in its environment, which fills in the worked solutions:
CI checks the solutions against the run, and the site shows the lab run with them.

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
KEY_INPUTS = ("minirl", "traces", "labs/solutions")  # folders whose files a notebook's outputs depend on
KEY_VERSION = "1"  # bump when the way notebooks execute changes (kernel, environment)
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
    nb: object = None  # the executed notebook (nbformat.NotebookNode), None when it failed
    copy: Path | None = None  # the executed copy on disk (None when it failed)
    left_behind: list[str] = field(default_factory=list)  # files the run wrote next to the notebook
    error: str | None = None  # the failing cell and its traceback, ANSI colours removed


_SESSION: dict[tuple[str, str], Execution] = {}  # this process's runs, by (source path, notebook sha256)


def start_session() -> str:
    """Give this process (and the processes it starts) a session id, once; returns it."""
    return os.environ.setdefault(SESSION_ENV, uuid.uuid4().hex)


def relpath(path: Path) -> str:
    """The notebook's path inside the repository (`chapters/01_x.ipynb`)."""
    return Path(path).resolve().relative_to(ROOT).as_posix()


def is_lab(path: Path) -> bool:
    return relpath(path).startswith("labs/")


def kernel_env(path: Path) -> dict:
    """The kernel's environment: this process's, plus `MINIRL_LAB_SOLUTIONS=1` for a lab."""
    env = dict(os.environ)
    if is_lab(path):
        env[LAB_SOLUTIONS_ENV] = "1"
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


def key(path: Path, digest: str | None = None) -> str:
    """What an executed copy of `path` must record to be fresh (see the module docstring)."""
    h = hashlib.sha256(f"v{KEY_VERSION} lab_solutions={is_lab(path)}\0".encode())
    h.update(Path(path).read_bytes())
    h.update((digest or inputs_digest()).encode())
    return h.hexdigest()


def copy_path(path: Path) -> Path:
    """Where the executed copy of `path` lives: `.cache/executed/<path inside the repository>`."""
    return CACHE_DIR / relpath(path)


def fresh_copy(path: Path, digest: str | None = None) -> Path | None:
    """The executed copy of `path` if it is fresh (same key, or this session's run of this notebook), else None."""
    cp = copy_path(path)
    try:
        meta = json.loads(cp.read_text(encoding="utf-8")).get("metadata", {}).get(META, {})
    except (OSError, ValueError):
        return None
    session = os.environ.get(SESSION_ENV)
    if session and meta.get("session") == session and meta.get("notebook_sha256") == notebook_sha(path):
        return cp
    return cp if meta.get("key") == key(path, digest) else None


def execute(path: Path, timeout: int = DEFAULT_TIMEOUT_S) -> Execution:
    """Run `path` top to bottom in its own folder (a fresh `python3` kernel); write the copy if it passed."""
    import nbclient
    import nbformat

    path = Path(path).resolve()
    k, sha = key(path), notebook_sha(path)
    nb = nbformat.read(path, as_version=4)
    before = {p.name for p in path.parent.iterdir()}
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=timeout, allow_errors=False,
                                     resources={"metadata": {"path": str(path.parent)}})
    error = None
    t0 = time.perf_counter()
    try:
        client.execute(env=kernel_env(path))
    except Exception as e:  # noqa: BLE001 - a failing cell, a timeout, a dead kernel: all reported the same way
        error = f"{type(e).__name__}: {ANSI.sub('', str(e))}"
    wall = time.perf_counter() - t0
    left = sorted({p.name for p in path.parent.iterdir()} - before)
    run = Execution(source=path, key=k, wall_s=wall, left_behind=left, error=error)
    if error is None:
        nb.metadata[META] = {"key": k, "source": relpath(path), "notebook_sha256": sha,
                             "session": os.environ.get(SESSION_ENV), "wall_s": round(wall, 2),
                             "lab_solutions": is_lab(path), "executed_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        cp = copy_path(path)
        cp.parent.mkdir(parents=True, exist_ok=True)
        tmp = cp.with_name(cp.name + f".{os.getpid()}.tmp")
        nbformat.write(nb, tmp)
        os.replace(tmp, cp)  # atomic: a concurrent `mkdocs serve` never reads half a notebook
        run.nb, run.copy = nb, cp
    return run


def execute_once(path: Path, timeout: int = DEFAULT_TIMEOUT_S) -> tuple[Execution, bool]:
    """`execute(path)` unless this process already ran this notebook (the same bytes).

    Returns the run and whether it happened in this call (False: an earlier caller ran it).
    """
    path = Path(path).resolve()
    memo = (str(path), notebook_sha(path))
    if memo in _SESSION:
        return _SESSION[memo], False
    run = execute(path, timeout)
    _SESSION[memo] = run
    return run, True
