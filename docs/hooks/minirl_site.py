"""mkdocs hook of the minirl site (`hooks:` in mkdocs.yml). Seven small jobs (and links inside notebooks):

1. Notebooks from outside `docs/`, executed once: the chapters and labs live in `chapters/*.ipynb`
   and `labs/*.ipynb` at the repository root (where Jupyter and the notebook tests use them), not
   under `docs/`. `on_files` adds each one as a site page, before mkdocs-jupyter wraps notebooks
   (hence the higher event priority). Every notebook page (these and docs/**/*.ipynb) renders the
   notebook's executed copy, `.cache/executed/<path>.ipynb` (docs/hooks/executed_notebooks.py):
   the one tests/notebooks/test_notebooks.py or an earlier build wrote, while it is fresh (same notebook,
   same minirl), else the hook executes the notebook first and writes it. mkdocs-jupyter only
   renders (`execute: false`), so a CI run executes each notebook once. `MINIRL_DOCS_EXECUTE=false`
   skips executing (stale or missing copies render the notebook without outputs). The page's
   download link is the committed notebook (no outputs), not the executed copy.
   A lab has two pages: `labs/<lab>/` renders its `reader` run (the lab as committed, stopped at
   its first unanswered exercise: no answers), and `labs/solutions/<lab>/` its `solutions` run
   (every exercise filled in with labs/solutions/<lab>.py), marked as worked solutions and linked
   from the end of the lab (executed_notebooks.decorate).
2. Navigation that follows the files: the nav entries `chapters/index.md`, `labs/index.md` and
   `guide/index.md` become sections holding that page plus every notebook (or guide page) found
   (the labs section ends with a "Worked solutions" subsection, one page per lab),
   titled by the notebook's first `# ` heading; a notebook added later appears without editing
   mkdocs.yml, and a missing one cannot break `--strict`.
3. Notebook links that follow the files: `[[chapters/01]]` or `[[labs/02|Lab 02: Custom reward]]`
   in a Markdown page becomes a link to `chapters/01_*.ipynb` when that notebook exists, and plain
   text (with a "not written yet" mark) when it does not. The other way round, a notebook's own links
   (`../docs/glossary.md#policy`, `01_sync_grpo_run_overview.ipynb`, written to work in Jupyter) point
   at the site's pages (`notebook_links`).
4. verl citations become links: a code span that is exactly a citation (`verl/<file>.py:LINE`, or a
   file path alone) links to that line on GitHub at the pinned commit (`minirl.anchors.link`).
   That the line is right is `minirl anchors check`'s job (tests/unit/test_anchors.py).
5. Offline pages: nbconvert's notebook template loads MathJax 2 from a CDN (and mermaid.js when a
   notebook draws a mermaid diagram). The hook removes both tags and then refuses to write a page
   that still loads anything from another host (script, stylesheet, image, frame, font, CSS
   `url()`, JS `import()`), naming it; the browser test checks the same thing from the network side.
6. Math, offline: MathJax 3 (the browser build that the PyPI package `django-static-mathjax` ships,
   in minirl's `docs` extra) is copied into the site under `assets/mathjax/`; mkdocs.yml loads it
   after `javascripts/mathjax.js`, which says what to typeset: pymdownx.arithmatex's output on
   Markdown pages and docstrings, and the `$...$` of notebook markdown cells. The build fails with
   the install command when the package is missing.

Notebook execution is bounded: every cell has `MINIRL_DOCS_CELL_TIMEOUT` seconds (default 300).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import posixpath
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File
from mkdocs.utils import get_relative_url

from minirl.anchors import CITE, link

if str(Path(__file__).resolve().parent) not in sys.path:  # mkdocs puts it there while loading; the tests do not
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import executed_notebooks  # docs/hooks/executed_notebooks.py
import minirl_zh  # docs/hooks/minirl_zh.py (the Chinese edition's hook; this build reads which pages it leaves out)

log = logging.getLogger("mkdocs.hooks.minirl_site")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIRS = ("chapters", "labs")  # repository folders whose notebooks become pages
SECTIONS = {"chapters/index.md": "chapters", "labs/index.md": "labs", "guide/index.md": "guide"}
MATHJAX_SENTINEL = "minirl-offline:no-mathjax"  # mkdocs.yml gives it as mkdocs-jupyter's custom_mathjax_url


def notebooks(folder: str) -> list[Path]:
    """The notebooks of a repository folder, in file-name order (01_..., 02_...)."""
    d = ROOT / folder
    return sorted(p for p in d.glob("*.ipynb") if p.is_file()) if d.is_dir() else []


def notebook_title(path: Path) -> str:
    """The first `# ` heading of the notebook's markdown cells, else the file name made readable."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        cells = []
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            src = cell.get("source", "")
            src = "".join(src) if isinstance(src, list) else src
            for line in src.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem.replace("_", " ")


# ---------------------------------------------------------------------------------------- 1 + 2


def _executing() -> bool:
    return os.environ.get("MINIRL_DOCS_EXECUTE", "true").strip().lower() not in ("0", "false", "no", "off")


def executed_copy(source: Path, mode: str | None = None) -> Path:
    """The executed copy of a notebook (in `mode`, see executed_notebooks.modes) to render: fresh on disk, or made now.

    With `MINIRL_DOCS_EXECUTE=false` nothing executes: a stale or missing copy renders the committed
    notebook (no outputs; a lab's solutions page then renders an unexecuted copy marked as such). A
    notebook that fails to execute fails the build, naming it.
    """
    rel = executed_notebooks.relpath(source)
    mode = mode or executed_notebooks.modes(source)[0]
    cp = executed_notebooks.fresh_copy(source, mode=mode)
    if cp is not None:
        log.info("notebook %s (%s): rendering its executed copy %s (fresh)", rel, mode, cp.relative_to(ROOT))
        return cp
    if not _executing():
        log.info("notebook %s (%s): not executed (MINIRL_DOCS_EXECUTE=false), rendered without outputs", rel, mode)
        if mode != "solutions":
            return source
        import nbformat

        nb = nbformat.read(source, as_version=4)
        executed_notebooks.decorate(nb, source, mode)
        cp = executed_notebooks.copy_path(source, mode)
        cp.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, cp)
        return cp
    log.info("notebook %s (%s): executing (no fresh executed copy)", rel, mode)
    run, _ = executed_notebooks.execute_once(source, mode=mode)
    if run.error:
        raise PluginError(f"notebook {rel} ({mode}) failed to execute (run it in Jupyter to see the cell):\n"
                          f"{run.error[-6000:]}")
    log.info("notebook %s (%s): executed in %.1f s -> %s", rel, mode, run.wall_s, run.copy.relative_to(ROOT))
    return run.copy


SOLUTIONS_DIR = "labs/solutions"  # site folder of the labs' worked-solutions pages


def solutions_uri(lab: Path) -> str:
    """The site URI of a lab's worked-solutions page (`labs/solutions/<lab>.ipynb`)."""
    return f"{SOLUTIONS_DIR}/{lab.name}"


def solutions_title(lab: Path) -> str:
    return f"{notebook_title(lab)} · {executed_notebooks.SOLUTIONS_TITLE}"


def _section(index_uri: str, folder: str, docs_dir: Path) -> list:
    entries: list = [index_uri]
    if folder in NOTEBOOK_DIRS:
        entries += [{notebook_title(nb): f"{folder}/{nb.name}"} for nb in notebooks(folder)]
    if folder == "labs" and notebooks(folder):
        entries.append({"Worked solutions": [{solutions_title(nb): solutions_uri(nb)} for nb in notebooks(folder)]})
    for md in sorted((docs_dir / folder).glob("*.md")):
        if md.name != "index.md":
            entries.append(f"{folder}/{md.name}")
    return entries


def _expand_nav(nav, docs_dir: Path):
    out = []
    for item in nav:
        if isinstance(item, dict):
            (title, value), = item.items()
            if isinstance(value, str) and value in SECTIONS:
                value = _section(value, SECTIONS[value], docs_dir)
            elif isinstance(value, list):
                value = _expand_nav(value, docs_dir)
            out.append({title: value})
        else:
            out.append(item)
    return out


def on_config(config):
    jupyter = config.plugins.get("mkdocs-jupyter")
    if jupyter is not None and jupyter.config.get("execute"):
        raise PluginError("mkdocs.yml: mkdocs-jupyter must have `execute: false`: the hook executes every notebook "
                          "once and renders its executed copy (MINIRL_DOCS_EXECUTE=false skips executing)")
    if config.nav:
        config.nav = _expand_nav(config.nav, Path(config.docs_dir))
    return config


_SOURCES: dict[str, Path] = {}  # site URI of a notebook page -> the committed notebook (the download link)


@event_priority(100)  # before mkdocs-jupyter's on_files turns .ipynb files into pages
def on_files(files, config):
    for folder in NOTEBOOK_DIRS:
        for nb in notebooks(folder):
            uri = f"{folder}/{nb.name}"
            if files.get_file_from_path(uri) is None:
                files.append(File(uri, src_dir=str(ROOT), dest_dir=config.site_dir,
                                  use_directory_urls=config.use_directory_urls))
    for f in [f for f in files if f.src_uri.endswith(".ipynb") and f.abs_src_path]:
        source = Path(f.abs_src_path).resolve()
        _SOURCES[f.src_uri] = source
        rendered = executed_copy(source).as_posix()
        if rendered != source.as_posix():
            # a File rooted where the copy's path ends in the same URI (not File.generated: mkdocs-jupyter's
            # NotebookFile wrapper recomputes abs_src_path from src_dir)
            assert rendered.endswith("/" + f.src_uri), (rendered, f.src_uri)
            files.remove(f)
            files.append(File(f.src_uri, src_dir=rendered[: -len(f.src_uri)], dest_dir=config.site_dir,
                              use_directory_urls=config.use_directory_urls, inclusion=f.inclusion))
    for lab in notebooks("labs"):  # each lab's worked-solutions page: its solutions run
        uri = solutions_uri(lab)
        rendered = executed_copy(lab, mode="solutions").as_posix()
        assert rendered.endswith("/" + uri), (rendered, uri)
        _SOURCES[uri] = lab
        files.append(File(uri, src_dir=rendered[: -len(uri)], dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls))
    for uri, path in mathjax_files():
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_serve(server, config, builder):
    for folder in NOTEBOOK_DIRS:
        if (ROOT / folder).is_dir():
            server.watch(str(ROOT / folder))
    server.watch(str(ROOT / "minirl"))
    if _zh_build_wanted(config) and (ROOT / "i18n").is_dir():
        server.watch(str(ROOT / "i18n"))
    return server


# ---------------------------------------------------------------------------------------- 3

NB_LINK = re.compile(r"\[\[(chapters|labs)/(\d+)(?:\|([^\]]+))?\]\]")


def on_page_markdown(markdown, page, config, files):
    if config is not None and config.theme["language"] == "en" and page.file.src_uri.startswith(minirl_zh.ENGLISH_ONLY):
        page.meta["alternate_url"] = ""  # not in the Chinese build: its language switch opens the Chinese home page

    def sub(m):
        folder, num, text = m.group(1), m.group(2), m.group(3)
        found = [nb for nb in notebooks(folder) if nb.name.startswith(num + "_")]
        if not found:
            return f"{text or f'{folder[:-1]} {num}'.capitalize()} <small>(not written yet)</small>"
        target = f"{folder}/{found[0].name}"
        rel = posixpath.relpath(target, posixpath.dirname(page.file.src_uri) or ".")
        return f"[{text or notebook_title(found[0])}]({rel})"

    return NB_LINK.sub(sub, markdown)


# ---------------------------------------------------------------------------------------- 4

CODE_SPAN = re.compile(r"(<a\b[^>]*>\s*)?<code>([^<>]+)</code>")


def link_citations(html: str) -> str:
    """Wrap every `<code>` that is exactly a verl citation in a link to the pinned commit."""

    def sub(m):
        if m.group(1):
            return m.group(0)  # already a link
        c = CITE.fullmatch(m.group(2).strip())
        if not c or "..." in c.group(1) or not c.group(1).startswith("verl/"):
            return m.group(0)
        url = link(c.group(1), int(c.group(2)) if c.group(2) else None)
        return f'<a class="verl-cite" href="{url}" title="verl at the pinned commit">{m.group(0)}</a>'

    return CODE_SPAN.sub(sub, html)


NB_HREF = re.compile(r'href="((?:\.\./)?(?:docs/|chapters/|labs/)?[\w./-]+\.(?:md|ipynb))(#[^"]*)?"')


def notebook_links(html: str, page, files) -> str:
    """In a notebook page, links written for Jupyter become links between site pages.

    A chapter's markdown links `../docs/glossary.md#policy` or `01_sync_grpo_run_overview.ipynb`: right
    in Jupyter and on GitHub (chapters/, labs/ and docs/ are siblings), wrong on the site, where mkdocs
    does not rewrite a notebook's links. Each one that names a page of the site is pointed at that page's URL;
    anything else is left as it is.
    """
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    here = posixpath.dirname(page.file.src_uri)

    def sub(m):
        target = posixpath.normpath(posixpath.join(here, m.group(1)))
        target = target.removeprefix("docs/")
        f = files.get_file_from_path(target)
        if f is None:
            return m.group(0)
        return f'href="{get_relative_url(f.url, page.url)}{m.group(2) or ""}"'

    return NB_HREF.sub(sub, html)


def on_page_content(html, page, config, files):
    return link_citations(notebook_links(html, page, files))


# ---------------------------------------------------------------------------------------- 5

MATHJAX_TAG = re.compile(r'<script src="' + re.escape(MATHJAX_SENTINEL) + r'">\s*</script>')
MATHJAX2_CONFIG = re.compile(r'<script type="text/x-mathjax-config">(?:(?!</script>).)*?</script>', re.DOTALL)
MERMAID_LOADER = re.compile(r'<script type="module">(?:(?!</script>).)*?\.jp-Mermaid(?:(?!</script>).)*?</script>', re.DOTALL)
REMOTE = [
    re.compile(r"<(?:script|img|iframe|audio|video|source|embed|track|input|object)\b[^>]*?\s"
               r"(?:src|srcset|poster|data)\s*=\s*[\"']?\s*(?:https?:)?//[^\s\"'>]+", re.IGNORECASE),
    re.compile(r"<link\b(?=[^>]*\brel\s*=\s*[\"']?(?:stylesheet|icon|shortcut icon|preload|modulepreload|prefetch|"
               r"preconnect|dns-prefetch|manifest|apple-touch-icon)\b)[^>]*?\shref\s*=\s*[\"']?\s*(?:https?:)?//[^\s\"'>]+",
               re.IGNORECASE),
    re.compile(r"url\(\s*[\"']?\s*(?:https?:)?//[^)\s\"']+", re.IGNORECASE),
    re.compile(r"@import\s+[\"']\s*(?:https?:)?//[^\"']+", re.IGNORECASE),
    re.compile(r"\bimport\(\s*[\"']\s*(?:https?:)?//[^\"']+", re.IGNORECASE),
]


def remote_loads(html: str) -> list[str]:
    """Every place where the page would load something from another host."""
    return [m.group(0)[:200] for pat in REMOTE for m in pat.finditer(html)]


@event_priority(-100)  # after mkdocs-jupyter's on_post_page, which copies the rendered file as the download
def on_post_page(output, page, config):
    source = _SOURCES.get(page.file.src_uri)
    if source is not None and getattr(page.file, "abs_dest_path", None):
        download = Path(page.file.abs_dest_path).parent / source.name
        if download.is_file():
            shutil.copyfile(source, download)  # the committed notebook, not the executed copy
    output = MERMAID_LOADER.sub("", MATHJAX2_CONFIG.sub("", MATHJAX_TAG.sub("", output)))
    bad = remote_loads(output)
    if bad:
        raise PluginError(f"{page.file.src_uri}: the page would load from another host (the site must work "
                          f"offline; vendor the file or drop it): " + "; ".join(bad))
    return output


# ---------------------------------------------------------------------------------------- 6

MATHJAX_DIST = "django-static-mathjax"  # PyPI; its wheel carries MathJax 3's browser build (es5/)
MATHJAX_URI = "assets/mathjax"  # where the site serves it; mkdocs.yml's extra_javascript loads tex-chtml.js
# MathJax's TeX + CommonHTML bundle, what it loads on demand (TeX extensions, fonts, menu,
# accessibility) and its licence: no other output or input format.
MATHJAX_PARTS = ("tex-chtml.js", "input/tex/extensions", "output/chtml/fonts/woff-v2", "ui", "a11y", "sre")


def mathjax_dir() -> Path:
    """MathJax 3's `es5/` folder inside the installed `django-static-mathjax`; a clear error when it is missing."""
    fix = ("the site typesets formulas with MathJax 3 from the PyPI package django-static-mathjax (minirl's docs "
           "extra); install it: .venv/bin/pip install -e '.[docs]'  (or: pip install django-static-mathjax)")
    try:
        es5 = Path(importlib.metadata.distribution(MATHJAX_DIST).locate_file("mathjax/static/mathjax/es5"))
    except importlib.metadata.PackageNotFoundError:
        raise PluginError(f"MathJax is missing: {fix}") from None
    if not (es5 / "tex-chtml.js").is_file():
        raise PluginError(f"MathJax is incomplete: {es5 / 'tex-chtml.js'} not found; {fix}")
    return es5


def mathjax_files() -> list[tuple[str, Path]]:
    """(site URI, file) of every MathJax file the site serves."""
    es5 = mathjax_dir()
    out = [(f"{MATHJAX_URI}/LICENSE", es5.parent / "LICENSE")]
    for part in MATHJAX_PARTS:
        p = es5 / part
        for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
            if f.is_file():
                out.append((f"{MATHJAX_URI}/{f.relative_to(es5).as_posix()}", f))
    return out


# ---------------------------------------------------------------------------------------- 7

ZH_CONFIG = "mkdocs.zh.yml"  # the Chinese edition; it inherits mkdocs.yml
ZH_SUBDIR = "zh"  # where it goes in this build's site dir (mkdocs.yml's extra.alternate links there)


def _zh_build_wanted(config) -> bool:
    if os.environ.get("MINIRL_DOCS_ZH", "true").strip().lower() in ("0", "false", "no", "off"):
        return False
    return config.theme["language"] == "en" and (ROOT / ZH_CONFIG).is_file()  # the English build only


def zh_build_command(config) -> list[str]:
    """The command that builds the Chinese edition into this build's `<site_dir>/zh/`."""
    cmd = [sys.executable, "-m", "mkdocs", "build", "-f", str(ROOT / ZH_CONFIG),
           "--site-dir", str(Path(config.site_dir) / ZH_SUBDIR)]
    return cmd + (["--strict"] if config.strict else []) + (["--quiet"] if not log.isEnabledFor(logging.INFO) else [])


def on_post_build(config):
    if not _zh_build_wanted(config):
        return
    t0 = time.perf_counter()
    log.info("building the Chinese edition (%s) into %s/", ZH_CONFIG, Path(config.site_dir) / ZH_SUBDIR)
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(zh_build_command(config), cwd=ROOT, env=env, check=False)  # its log goes to ours
    if proc.returncode != 0:
        raise PluginError(f"the Chinese edition failed to build (exit {proc.returncode}; its log is above): "
                          f"mkdocs build -f {ZH_CONFIG}{' --strict' if config.strict else ''}; "
                          "MINIRL_DOCS_ZH=false builds the English site alone")
    log.info("the Chinese edition built in %.1f s", time.perf_counter() - t0)
