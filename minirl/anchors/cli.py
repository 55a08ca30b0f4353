"""`minirl anchors check` and `minirl anchors drift`: the verl citations on the command line.

    minirl anchors check [--verl PATH] [paths ...]   every verl/<file>.py:LINE resolves (exit 1 lists the ones that don't)
    minirl anchors drift [--verl PATH] [paths ...]   where each cited symbol is at 9c38b8bb1876, the pin, a checkout

Without paths both read the whole project (chapters, labs, docs, minirl's docstrings). `--verl PATH`
indexes a local verl clone with `ast` (see `minirl.anchors.local`): `check` then tests the
citations against that checkout instead of the pin, and `drift` adds a column for it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from minirl.anchors import OLD, PIN, check_text, iter_citations, load_index, project_files

KEEP = (".py", ".md", ".ipynb", ".yaml", ".yml")


def project_root() -> Path:
    """The minirl checkout: the first folder up from cwd with minirl's pyproject, else the package's parent."""
    for d in [Path.cwd(), *Path.cwd().parents]:
        py = d / "pyproject.toml"
        if py.is_file() and 'name = "minirl-verl"' in py.read_text(errors="ignore"):  # the distribution's name
            return d
    return Path(__file__).resolve().parents[2]


def expand(paths) -> list[Path]:
    """Files to read: the given files, the citable files under the given folders, else the project's."""
    if not paths:
        return project_files(project_root())
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in KEEP
                          and ".ipynb_checkpoints" not in f.parts)
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"minirl anchors: {p} is neither a file nor a folder")
    return out


def _index(verl_path):
    if verl_path is None:
        return load_index(PIN)
    from minirl.anchors.local import build_index

    return build_index(verl_path)


def _show(f: Path) -> str:
    try:
        return str(f.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(f)


def check_cmd(args) -> int:
    try:
        files = expand(args.paths)
        index = _index(args.verl)
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2
    bad, n, n_files = [], 0, 0
    for f in files:
        text = f.read_text(errors="ignore")
        k = sum(1 for _ in iter_citations(text))
        n += k
        n_files += bool(k)
        bad += check_text(text, index, _show(f))
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} of {n} verl citations do not resolve at verl {index.label}", file=sys.stderr)
        return 1
    print(f"{n} verl citations in {n_files} files resolve at verl {index.label}")
    return 0


def drift_cmd(args) -> int:
    from minirl.anchors.drift import cited_symbols, drift_table

    try:
        files = expand(args.paths)
        new = _index(args.verl) if args.verl else None
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2
    pin = load_index(PIN)
    print(drift_table(cited_symbols(files, pin), load_index(OLD), pin, new))
    return 0


def register_anchors_cli(sub) -> None:
    """Add `anchors check` and `anchors drift` to minirl's argparse subcommands."""
    a = sub.add_parser("anchors", help="check the verl citations; show where cited symbols moved")
    asub = a.add_subparsers(dest="anchors_command", required=True)
    c = asub.add_parser("check", help=f"every verl/<file>.py:LINE resolves at the pin {PIN} (or at --verl PATH)")
    c.add_argument("--verl", metavar="PATH", help="a local verl clone to check against instead of the pin")
    c.add_argument("paths", nargs="*", help="files or folders (default: the whole project)")
    c.set_defaults(fn=check_cmd)
    d = asub.add_parser("drift", help=f"where each cited symbol is at {OLD}, at the pin, and in --verl PATH")
    d.add_argument("--verl", metavar="PATH", help="a local verl clone (adds a column)")
    d.add_argument("paths", nargs="*", help="files or folders (default: the whole project)")
    d.set_defaults(fn=drift_cmd)
