"""Translations of the reading site (the Chinese edition): stubs, check, build, diff.

    python scripts/i18n.py stubs chapters/01_sync_grpo_run_overview.ipynb docs/glossary.md
        write or update the translation files so every markdown cell has an entry (new or changed cells are
        marked `stale: true`; a changed cell keeps its old translation); a page without a translation gets the
        English text under a `stale` marker
    python scripts/i18n.py check [--strict]
        list stale / untranslated / missing / orphan entries of every translation file, then the coverage.
        Exit 1 when a translation has a problem; with --strict also when an English file has no translation
    python scripts/i18n.py build OUTDIR [--pages]
        generate the translated notebooks from the English ones (the fresh executed copies under
        .cache/executed/ when there are any: the outputs are the English run's), and with --pages the
        translated pages, into OUTDIR (same layout as the repository)
    python scripts/i18n.py diff docs/glossary.md | chapters/01_sync_grpo_run_overview.ipynb
        what changed in an English page, or in each changed cell of a notebook, since its translation was made
        (the old English text is found in git history by its sha1)

The logic lives in docs/hooks/i18n.py (the site's hooks and the tests use it too); the file format is described
in i18n/README.md.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("minirl_site_i18n", ROOT / "docs" / "hooks" / "i18n.py")
i18n = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = i18n  # dataclasses look their module up by name
_spec.loader.exec_module(i18n)


def _rel(path: str, root: Path) -> str:
    p = Path(path)
    p = (p if p.is_absolute() else Path.cwd() / p).resolve()
    try:
        return p.relative_to(root).as_posix()
    except ValueError:
        sys.exit(f"error: {path} is not inside the repository {root}")


def cmd_stubs(args) -> int:
    notebooks, pages = i18n.english_files(args.root)
    for path in args.paths:
        rel = _rel(path, args.root)
        if rel in notebooks:
            try:
                tr, counts = i18n.stub_notebook(rel, args.root, args.lang)
            except i18n.TranslationError as e:
                print(f"error: {e}", file=sys.stderr)
                return 1
            print(f"{tr}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
        elif rel in pages:
            tr, what = i18n.stub_page(rel, args.root, args.lang)
            print(f"{tr}: {what}")
        else:
            print(f"error: {rel} is not a page or notebook of the site (notebooks: {', '.join(i18n.NOTEBOOK_GLOBS)}; "
                  f"pages: {', '.join(i18n.PAGE_GLOBS)})", file=sys.stderr)
            return 1
    return 0


def cmd_check(args) -> int:
    report = i18n.check(args.root, args.lang)
    for p in report.problems:
        print(p)
    if report.problems:
        print(f"{len(report.problems)} problem(s) in the {args.lang} translation")
    for line in i18n.coverage_lines(report):
        print(line)
    missing = [c for c in report.coverage if not c.exists]
    return 1 if report.problems or (args.strict and missing) else 0


def cmd_build(args) -> int:
    out = Path(args.outdir)
    done = i18n.build(out, args.root, args.lang, pages=args.pages)
    for d in done:
        note = ""
        if "executed" in d:
            note = " (outputs of the executed English copy)" if d["executed"] else \
                " (no fresh executed English copy: no outputs; run the notebook tests or mkdocs build first)"
            if d["english_cells"]:
                note += f"; English kept in cells {', '.join(d['english_cells'])}"
        print(f"{d['dest']}{note}")
    print(f"{len(done)} file(s) written under {out}")
    return 0


def cmd_diff(args) -> int:
    rel = _rel(args.path, args.root)
    if rel.endswith(".ipynb"):
        rows = i18n.english_cells_at_translation(rel, args.root, args.lang)
        for cid, old, new in rows:
            if old is None:
                print(f"cell {cid}: the English text it was translated from is not in git history; now:\n{new}\n")
                continue
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                       f"{rel} cell {cid} (translated)", f"{rel} cell {cid} (now)"))
            print()
        print(f"{len(rows)} cell(s) behind the English text")
        return 0
    commit, old = i18n.english_at_translation(rel, args.root, args.lang)
    if old is None:
        print(f"error: no version of {rel} in git history has the en_sha1 of {i18n.translation_path(rel, args.lang)}",
              file=sys.stderr)
        return 1
    new = (args.root / rel).read_text(encoding="utf-8")
    sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                               f"{rel} (translated, {commit[:12]})", f"{rel} (now)"))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/i18n.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--lang", default="zh", choices=i18n.LANGS)
    ap.add_argument("--root", type=lambda p: Path(p).resolve(), default=ROOT,
                    help="the repository to work on (default: the one this script is in)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stubs", help="write or update translation files (missing or changed cells marked stale)")
    s.add_argument("paths", nargs="+", help="English notebooks or pages")
    s.set_defaults(func=cmd_stubs)
    c = sub.add_parser("check", help="list stale/untranslated/missing/orphan entries and the coverage")
    c.add_argument("--strict", action="store_true", help="also fail when an English file has no translation")
    c.set_defaults(func=cmd_check)
    b = sub.add_parser("build", help="generate the translated notebooks (and pages) into OUTDIR")
    b.add_argument("outdir")
    b.add_argument("--pages", action="store_true", help="also write the translated pages (marker removed)")
    b.set_defaults(func=cmd_build)
    d = sub.add_parser("diff", help="what changed in an English page or notebook since its translation was made")
    d.add_argument("path")
    d.set_defaults(func=cmd_diff)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
