"""verl citations: every `verl/<path>.py:LINE` minirl cites, checked against verl's index at the pinned commit.

The index (`minirl/anchors/data/<commit>/`, copied from the project's shared verl-index: data derived
from Apache-2.0 code, no code) lists every file with its line count and every class, function and
method with its def line. A citation resolves when:

- the file exists at the pinned commit;
- for a `.py` file, LINE is the def/class line of a symbol in that file, and when a backticked name
  stands right before the citation (`` `compute_grpo_outcome_advantage` (`verl/<...>.py:268`) ``), it is
  that symbol (its last dotted part);
- for other files, LINE is within the file.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

PIN = "1dda039b9c63"
OLD = "9c38b8bb1876"
DATA = Path(__file__).parent / "data"
GITHUB = "https://github.com/verl-project/verl/blob/1dda039b9c6311889a9c9a26040677e1254814f9"

CITE = re.compile(r"((?:verl|examples|tests|recipe|docs)/[\w./-]+\.(?:py|yaml|sh|md|rst))(?::(\d+))?")
NAME_BEFORE = re.compile(r"`([A-Za-z_][\w.]*)(?:\(\))?`\s*[(\uff08]?`?\s*$")  # ( or the Chinese edition's full-width （
PLACEHOLDERS = {"verl/path.py", "verl/x.py"}  # how the docs write "a citation" in prose


@dataclass
class Index:
    files: dict  # path -> line count
    symbols: dict  # path -> {line: [qualname, ...]}
    by_name: dict  # path -> {qualname: line}
    label: str = PIN  # what the index describes: a commit, or a local checkout's path


@dataclass
class Citation:
    """One `verl/<path>.py:LINE` found in a text, with the backticked name right before it (if any)."""

    lineno: int  # line of the text it stands on
    path: str
    line: int | None
    name: str | None


def iter_citations(text: str):
    """Every citation in `text` (placeholders such as `verl/<path>.py` and `verl/...` left out)."""
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in CITE.finditer(line):
            path, ln = m.group(1), m.group(2)
            if path in PLACEHOLDERS or "..." in path:
                continue
            nm = NAME_BEFORE.search(line[: m.start()])
            yield Citation(lineno, path, int(ln) if ln else None, nm.group(1) if nm else None)


def _name_matches(name: str, quals: list[str]) -> bool:
    last = name.split(".")[-1]
    return any(q.split(".")[-1] == last or q.endswith("." + name) or q == name for q in quals)


def load_index(commit: str = PIN) -> Index:
    d = DATA / commit
    files, symbols, by_name = {}, {}, {}
    for name in ("verl_files.tsv", "repo_files.tsv"):
        for line in (d / name).read_text().splitlines()[1:]:
            path, _, n = line.partition("\t")
            files[path] = int(n) if n.isdigit() else None
    for line in (d / "verl_symbols.tsv").read_text().splitlines()[1:]:
        path, qual, _kind, n = line.split("\t")
        symbols.setdefault(path, {}).setdefault(int(n), []).append(qual)
        by_name.setdefault(path, {})[qual] = int(n)
    return Index(files, symbols, by_name, label=commit)


def check_text(text: str, index: Index, where: str = "") -> list[str]:
    """Problems with the citations in `text` (empty list: all resolve)."""
    bad = []
    for c in iter_citations(text):
        loc = f"{where}:{c.lineno}"
        if c.path not in index.files:
            if c.path.startswith("verl/"):
                bad.append(f"{loc}: {c.path} does not exist at verl {index.label}")
            continue
        if c.line is None:
            continue
        if c.path.endswith(".py") and c.path in index.symbols:
            quals = index.symbols[c.path].get(c.line)
            if not quals:
                bad.append(f"{loc}: {c.path}:{c.line} is not the def/class line of any symbol")
            elif c.name and not _name_matches(c.name, quals):
                bad.append(f"{loc}: {c.path}:{c.line} is {quals}, not `{c.name}`")
        elif index.files[c.path] is not None and c.line > index.files[c.path]:
            bad.append(f"{loc}: {c.path}:{c.line} is past the end ({index.files[c.path]} lines)")
    return bad


def project_files(root: Path) -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, text=True, check=True).stdout.split()
        files = [root / f for f in out]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (e.g. an sdist): walk the tree
        files = [p for p in root.rglob("*") if p.is_file()]
    keep = (".py", ".md", ".ipynb", ".yaml", ".yml")
    return [f for f in files if f.suffix in keep and "anchors/data" not in str(f) and f.exists()
            and not str(f.relative_to(root)).startswith(("traces/", ".venv", "tests/unit/test_anchors.py"))]


def check_project(root=".", commit: str = PIN) -> list[str]:
    """Check every citation in the project's .py/.md/.ipynb/.yaml files."""
    root = Path(root)
    index = load_index(commit)
    bad = []
    for f in project_files(root):
        bad += check_text(f.read_text(errors="ignore"), index, str(f.relative_to(root)))
    return bad


def link(path: str, line: int | None = None) -> str:
    """GitHub URL of a citation at the pinned commit."""
    return f"{GITHUB}/{path}" + (f"#L{line}" if line else "")
