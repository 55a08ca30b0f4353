"""mkdocs hook of the minirl site (`hooks:` in mkdocs.yml). Five small jobs:

1. Notebooks from outside `docs/`: the chapters and labs live in `chapters/*.ipynb` and
   `labs/*.ipynb` at the repository root (where Jupyter and the notebook tests use them), not under
   `docs/`. `on_files` adds each one as a site file whose source is the root copy, before
   mkdocs-jupyter wraps notebooks (hence the higher event priority), so nothing is copied or
   symlinked and the site always renders the notebooks that the tests run.
2. Navigation that follows the files: the nav entries `chapters/index.md`, `labs/index.md` and
   `guide/index.md` become sections holding that page plus every notebook (or guide page) found,
   titled by the notebook's first `# ` heading; a notebook added later appears without editing
   mkdocs.yml, and a missing one cannot break `--strict`.
3. Notebook links that follow the files: `[[chapters/01]]` or `[[labs/02|Lab 02: Custom reward]]`
   in a Markdown page becomes a link to `chapters/01_*.ipynb` when that notebook exists, and plain
   text (with a "not written yet" mark) when it does not.
4. verl citations become links: a code span that is exactly a citation (`verl/<file>.py:LINE`, or a
   file path alone) links to that line on GitHub at the pinned commit (`minirl.anchors.link`).
   That the line is right is `minirl anchors check`'s job (tests/test_anchors.py).
5. Offline pages: nbconvert's notebook template loads MathJax from a CDN (and mermaid.js when a
   notebook draws a mermaid diagram). The hook removes both tags and then refuses to write a page
   that still loads anything from another host (script, stylesheet, image, frame, font, CSS
   `url()`, JS `import()`), naming it; the browser test checks the same thing from the network side.
   Math stays as TeX source (`$...$`): rendering it would need MathJax/KaTeX vendored.

Notebook execution is bounded: every cell has `MINIRL_DOCS_CELL_TIMEOUT` seconds (default 300),
set through a jupyter config file that this hook puts on `JUPYTER_CONFIG_PATH` (nbclient's
`NotebookClient.timeout`; mkdocs-jupyter has no option for it).
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import tempfile
import time
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

from minirl.anchors import CITE, link

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


def _cell_timeout_config() -> None:
    seconds = int(os.environ.get("MINIRL_DOCS_CELL_TIMEOUT", "300"))
    d = Path(tempfile.mkdtemp(prefix="minirl-docs-jupyter-"))
    (d / "jupyter_nbconvert_config.json").write_text(json.dumps({"NotebookClient": {"timeout": seconds}}))
    paths = os.environ.get("JUPYTER_CONFIG_PATH", "")
    os.environ["JUPYTER_CONFIG_PATH"] = os.pathsep.join([str(d)] + ([paths] if paths else []))


def _section(index_uri: str, folder: str, docs_dir: Path) -> list:
    entries: list = [index_uri]
    if folder in NOTEBOOK_DIRS:
        entries += [{notebook_title(nb): f"{folder}/{nb.name}"} for nb in notebooks(folder)]
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
    _cell_timeout_config()
    if config.nav:
        config.nav = _expand_nav(config.nav, Path(config.docs_dir))
    return config


@event_priority(100)  # before mkdocs-jupyter's on_files turns .ipynb files into pages
def on_files(files, config):
    for folder in NOTEBOOK_DIRS:
        for nb in notebooks(folder):
            uri = f"{folder}/{nb.name}"
            if files.get_file_from_path(uri) is None:
                files.append(File(uri, src_dir=str(ROOT), dest_dir=config.site_dir,
                                  use_directory_urls=config.use_directory_urls))
    return files


def on_serve(server, config, builder):
    for folder in NOTEBOOK_DIRS:
        if (ROOT / folder).is_dir():
            server.watch(str(ROOT / folder))
    server.watch(str(ROOT / "minirl"))
    return server


# ---------------------------------------------------------------------------------------- 3

NB_LINK = re.compile(r"\[\[(chapters|labs)/(\d+)(?:\|([^\]]+))?\]\]")


def on_page_markdown(markdown, page, config, files):
    _render_started[page.file.src_uri] = time.perf_counter()  # a notebook executes in page.render, next

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


_render_started: dict = {}


def on_page_content(html, page, config, files):
    t0 = _render_started.pop(page.file.src_uri, None)
    if t0 is not None and page.file.src_uri.endswith(".ipynb"):
        log.info("notebook %s rendered (executed) in %.1f s", page.file.src_uri, time.perf_counter() - t0)
    return link_citations(html)


# ---------------------------------------------------------------------------------------- 5

MATHJAX_TAG = re.compile(r'<script src="' + re.escape(MATHJAX_SENTINEL) + r'">\s*</script>')
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


def on_post_page(output, page, config):
    output = MERMAID_LOADER.sub("", MATHJAX_TAG.sub("", output))
    bad = remote_loads(output)
    if bad:
        raise PluginError(f"{page.file.src_uri}: the page would load from another host (the site must work "
                          f"offline; vendor the file or drop it): " + "; ".join(bad))
    return output
