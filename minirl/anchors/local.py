"""Build a citation index from a local verl checkout, in the same format as `minirl/anchors/data/`.

The shipped index covers two commits (the pin and 9c38b8bb1876). A reader who tracks a newer verl
points `minirl anchors check --verl PATH` or `minirl anchors drift --verl PATH` at a checkout, and
this module builds the same three tables on the fly from its files, with Python's `ast`:

- every file of the checkout (`git ls-files` when it is a git work tree, else a walk that skips
  dot-folders) with its line count;
- every top-level class and function and every method (through nested classes) of each `.py` file
  under `verl/`, with the 1-based line of its `def`/`class` keyword (decorators sit above it).

A file that does not parse (a newer syntax than this Python's) keeps its line count and has no
symbols; the citations into it then fail with "not the def/class line of any symbol".
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from minirl.anchors import Index


def _defs(body):
    """The class/def statements of a block, looking through if/try/with/for/while (`if TYPE_CHECKING:` ...)."""
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node
        elif isinstance(node, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)) or (
                hasattr(ast, "TryStar") and isinstance(node, ast.TryStar)):
            for block in ("body", "orelse", "finalbody"):
                yield from _defs(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                yield from _defs(handler.body)


def _symbols(tree: ast.Module) -> list[tuple[str, str, int]]:
    """(qualname, kind, line) for top-level defs and methods through nested classes, as the shipped index."""
    out = []

    def walk_class(node: ast.ClassDef, prefix: str, nested: bool):
        qual = f"{prefix}{node.name}"
        out.append((qual, "nested_class" if nested else "class", node.lineno))
        for child in _defs(node.body):
            if isinstance(child, ast.ClassDef):
                walk_class(child, qual + ".", True)
            else:
                kind = "async_method" if isinstance(child, ast.AsyncFunctionDef) else "method"
                out.append((f"{qual}.{child.name}", kind, child.lineno))

    for node in _defs(tree.body):
        if isinstance(node, ast.ClassDef):
            walk_class(node, "", False)
        else:
            kind = "async_function" if isinstance(node, ast.AsyncFunctionDef) else "function"
            out.append((node.name, kind, node.lineno))
    return out


def _list_files(root: Path) -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
        files = [f for f in out.decode(errors="replace").split("\0") if f]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    return [str(p.relative_to(root)) for p in root.rglob("*")
            if (p.is_file() or p.is_symlink()) and ".git" not in p.relative_to(root).parts]


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)  # a last line without "\n" counts


def build_index(checkout, label: str | None = None) -> Index:
    """Index a verl checkout (the folder that holds `verl/`), as `load_index` reads the shipped data."""
    root = Path(checkout).expanduser().resolve()
    if not (root / "verl").is_dir():
        raise FileNotFoundError(
            f"--verl {checkout}: no verl/ package folder under {root}; pass the root of a verl clone "
            "(the folder that holds verl/, examples/, tests/)")
    files, symbols, by_name = {}, {}, {}
    for rel in sorted(_list_files(root)):
        p = root / rel
        if p.is_symlink() or not p.is_file():
            files[rel] = 0 if p.is_symlink() else None
            continue
        data = p.read_bytes()
        files[rel] = _line_count(data)
        if not (rel.startswith("verl/") and rel.endswith(".py")):
            continue
        try:
            tree = ast.parse(data, filename=rel)
        except (SyntaxError, ValueError):
            continue
        for qual, _kind, line in _symbols(tree):
            symbols.setdefault(rel, {}).setdefault(line, []).append(qual)
            by_name.setdefault(rel, {})[qual] = line
    return Index(files, symbols, by_name, label=label or _describe(root))


def _describe(root: Path) -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        return f"{root} ({head})"
    except (OSError, subprocess.CalledProcessError):
        return str(root)
