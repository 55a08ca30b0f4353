"""mkdocs hook of the Chinese edition (`hooks:` in mkdocs.zh.yml, after docs/hooks/minirl_site.py). Issue #35.

The Chinese site is the English one (mkdocs.zh.yml inherits mkdocs.yml, and minirl_site.py does its six jobs
here too) with the translations put in place; whatever has no translation stays English, under the Chinese
navigation. Translations live in i18n/zh/ (i18n/README.md; the logic is docs/hooks/i18n.py):

1. Pages: each `i18n/zh/docs/<page>.md` replaces `docs/<page>.md`, its first-line marker removed, while its
   `en_sha1` is the English page's (a translation made from an older English text, or a stub marked stale,
   leaves the English page in place: the build never depends on the translations being fresh, and never shows
   a translation of a text that is gone). A Chinese-only page (`<!-- zh-only -->`, the term table `terms.md`) is
   added; its language switch points at the English glossary.
2. Notebooks, executed once: minirl_site.py (earlier, priority 100) has pointed each notebook page at its
   executed copy (.cache/executed/). Here each notebook with a translation (`i18n/zh/<nb>.ipynb.yml`) is swapped
   for the translated one generated from THAT file (`i18n.translate_notebook`: markdown cells replaced, code
   cells and outputs the English run's, byte for byte). Nothing executes again, and the Chinese page shows the
   English run's outputs. A cell whose translation is stale keeps its English text. A lab's worked-solutions
   page is translated the same way (its first heading keeps the " · worked solutions" mark `decorate` gave it).
   The generated notebooks go to `.cache/i18n/zh/` (ignored by git); so do the pages of 1.
3. Titles: the navigation's notebook entries take the translated first heading, and `[[chapters/01]]` links
   in a page (minirl_site.py's notebook links) get it as their text.
4. The download link of a translated notebook page serves the Chinese notebook without outputs (the committed
   English notebook, translated), as the English page serves the committed notebook.
5. The API reference stays English and is rendered once: mkdocs.zh.yml leaves `api/` out, its navigation links
   the English build's API pages (`minirl-en:api/...`), and a page's Markdown link to `api/<page>.md` is pointed
   there too; `on_post_page` turns each `minirl-en:` link into the relative URL of the English page (the English
   build is one folder up: site/ and site/zh/).
"""

from __future__ import annotations

import functools
import json
import logging
import posixpath
import re
import shutil
import sys
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

if str(Path(__file__).resolve().parent) not in sys.path:  # mkdocs puts it there while loading; the tests do not
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import executed_notebooks  # docs/hooks/executed_notebooks.py

import i18n  # docs/hooks/i18n.py

log = logging.getLogger("mkdocs.hooks.minirl_zh")

LANG = "zh"
ROOT = Path(__file__).resolve().parents[2]
STAGE = ROOT / ".cache" / "i18n" / LANG  # the generated pages (docs/) and notebooks (nb/) the build renders
SOLUTIONS_DIR = "labs/solutions"  # as minirl_site.SOLUTIONS_DIR: a lab's worked-solutions page
SECTION_TITLES = {"Worked solutions": "参考解答"}  # the subsections minirl_site.py adds to the navigation
ZH_ONLY_ALTERNATE = {"terms.md": "glossary/"}
ENGLISH_ONLY = ("api/",)  # pages left out of this build (mkdocs.zh.yml's exclude_docs): links go to the English ones
EN_SCHEME = "minirl-en:"  # a link to the English build's page `minirl-en:api/trainer/` (a scheme: mkdocs leaves it)  # a Chinese-only page -> the English page its language switch opens


def page_translations(root: Path = ROOT) -> tuple[dict[str, str], list[str]]:
    """({site URI: translated text, marker removed} of every page to render in Chinese, [stale pages left English])."""
    root = Path(root)
    pages, stale = {}, []
    for tr_rel in i18n.translation_files(root, LANG):
        en_rel = i18n.english_path(tr_rel, LANG)
        if en_rel is None or not en_rel.startswith("docs/") or not en_rel.endswith(".md"):
            continue  # the READMEs: GitHub shows them, the site does not
        sha, marked_stale, zh_only = i18n.read_page_marker(root / tr_rel)
        if not zh_only and (marked_stale or not (root / en_rel).is_file() or sha != i18n.sha1_file(root / en_rel)):
            stale.append(en_rel)
            continue
        pages[en_rel.removeprefix("docs/")] = i18n.page_body((root / tr_rel).read_text(encoding="utf-8"))
    return pages, stale


def english_notebook(uri: str) -> tuple[str, str] | None:
    """(English notebook relative to the repository, execution mode) of a notebook page's site URI, or None."""
    if uri.startswith(SOLUTIONS_DIR + "/"):
        return f"labs/{uri[len(SOLUTIONS_DIR) + 1:]}", "solutions"
    if uri.startswith(("chapters/", "labs/")) and uri.count("/") == 1 and (ROOT / uri).is_file():
        return uri, executed_notebooks.modes(ROOT / uri)[0]
    return None


@functools.cache
def _translation(en_rel: str) -> dict | None:
    path = ROOT / i18n.translation_path(en_rel, LANG)
    return i18n.load_notebook_translation(path, LANG) if path.is_file() else None


def translated(nb: dict, en_rel: str, translation: dict, solutions: bool = False) -> dict:
    """`nb` (the English notebook or one of its executed copies) with its markdown cells translated.

    A worked-solutions copy's first heading carries `decorate`'s " · worked solutions": it is translated as
    the committed heading, and keeps the mark.
    """
    mark = None
    if solutions:
        committed = dict(i18n.markdown_cells(json.loads((ROOT / en_rel).read_text(encoding="utf-8"))))
        for cell in nb.get("cells", []):
            if cell.get("cell_type") == "markdown" and cell.get("id") in committed:
                if i18n.cell_source(cell) != committed[cell["id"]]:
                    mark = cell["id"]
                    cell["source"] = committed[cell["id"]]
                break
    out, _ = i18n.translate_notebook(nb, translation, LANG)
    for cell in out.get("cells", []):
        if mark is not None and cell.get("id") == mark:
            lines = i18n.cell_source(cell).split("\n")
            for i, line in enumerate(lines):
                if line.startswith("# "):
                    lines[i] = f"{line} · {executed_notebooks.SOLUTIONS_TITLE}"
                    break
            cell["source"] = "\n".join(lines)
    return out


@functools.cache
def title(en_rel: str) -> str | None:
    """The translated first `# ` heading of an English notebook (None: no translation, or that cell is stale)."""
    tr = _translation(en_rel)
    if tr is None:
        return None
    nb = translated(json.loads((ROOT / en_rel).read_text(encoding="utf-8")), en_rel, tr)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in i18n.cell_source(cell).splitlines():
                if line.startswith("# "):
                    return line[2:].strip() if cell.get("metadata", {}).get("lang") == LANG else None
    return None


# ---------------------------------------------------------------------------------------- 3: the navigation


def _translate_nav(nav):
    out = []
    for item in nav:
        if isinstance(item, dict):
            (name, value), = item.items()
            if isinstance(value, list):
                value = _translate_nav(value)
                name = SECTION_TITLES.get(name, name)
            elif isinstance(value, str) and (found := english_notebook(value)):
                zh = title(found[0])
                if zh:
                    name = f"{zh} · {executed_notebooks.SOLUTIONS_TITLE}" if found[1] == "solutions" else zh
            out.append({name: value})
        else:
            out.append(item)
    return out


@event_priority(-10)  # after minirl_site.on_config, which expands the notebook sections
def on_config(config):
    _translation.cache_clear()  # `mkdocs serve -f mkdocs.zh.yml` keeps this module between rebuilds
    title.cache_clear()
    if config.nav:
        config.nav = _translate_nav(config.nav)
    return config


# ---------------------------------------------------------------------------------------- 1 + 2: the files

_DOWNLOADS: dict[str, tuple[str, dict]] = {}  # site URI of a translated notebook page -> (English notebook, translation)


@event_priority(90)  # after minirl_site.on_files (100: notebooks added, executed copies picked), before mkdocs-jupyter (0)
def on_files(files, config):
    shutil.rmtree(STAGE, ignore_errors=True)
    pages, stale = page_translations()
    if stale:
        log.info("zh: %d page(s) left in English, their translation is behind the English page: %s", len(stale),
                 ", ".join(stale))
    for uri, text in pages.items():
        dest = STAGE / "docs" / uri
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text, encoding="utf-8")
        old = files.get_file_from_path(uri)
        if old is not None:
            files.remove(old)
        files.append(File(uri, src_dir=str(STAGE / "docs"), dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls))
    nb_dir = STAGE / "nb"
    for f in [f for f in files if f.src_uri.endswith(".ipynb") and f.abs_src_path]:
        found = english_notebook(f.src_uri)
        tr = _translation(found[0]) if found else None
        if tr is None:
            continue  # no translation: the English page
        en_rel, mode = found
        nb = translated(json.loads(Path(f.abs_src_path).read_text(encoding="utf-8")), en_rel, tr,
                        solutions=mode == "solutions")
        dest = nb_dir / f.src_uri
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        files.remove(f)
        files.append(File(f.src_uri, src_dir=str(nb_dir), dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls, inclusion=f.inclusion))
        _DOWNLOADS[f.src_uri] = (en_rel, tr)
    return files


# ---------------------------------------------------------------------------------------- 3 + the language switch


NB_LINK = re.compile(r"\[\[(chapters|labs)/(\d+)(?:\|([^\]]+))?\]\]")  # as minirl_site.NB_LINK


@event_priority(10)  # before minirl_site.on_page_markdown turns [[chapters/01]] into a link titled in English
def on_page_markdown(markdown, page, config, files):
    alt = ZH_ONLY_ALTERNATE.get(page.file.src_uri)
    if alt is not None:
        page.meta["alternate_url"] = alt

    def sub(m):
        folder, num, text = m.group(1), m.group(2), m.group(3)
        if text:
            return m.group(0)
        found = sorted((ROOT / folder).glob(f"{num}_*.ipynb"))
        zh = title(f"{folder}/{found[0].name}") if found else None
        return f"[[{folder}/{num}|{zh}]]" if zh else m.group(0)

    return english_only_links(NB_LINK.sub(sub, markdown), page.file.src_uri)


MD_LINK = re.compile(r"(\]\(\s*|^\s*\[[^\]]+\]:\s*)([\w./-]+\.md)(#[^)\s]*)?", re.MULTILINE)


def english_only_links(markdown: str, src_uri: str) -> str:
    """`[API](api/index.md#x)` in a page of this build -> `[API](minirl-en:api/#x)`: the English build's page."""
    here = posixpath.dirname(src_uri)

    def sub(m):
        target = posixpath.normpath(posixpath.join(here, m.group(2)))
        if not target.startswith(ENGLISH_ONLY):
            return m.group(0)
        url = target[: -len(".md")] + "/"
        url = url[: -len("index/")] if url.endswith("/index/") or url == "index/" else url
        return f"{m.group(1)}{EN_SCHEME}{url}{m.group(3) or ''}"

    return MD_LINK.sub(sub, markdown)


EN_HREF = re.compile(r'href="' + re.escape(EN_SCHEME) + r'([^"]*)"')


def english_hrefs(html: str, page_url: str) -> str:
    """Each `minirl-en:` link of a page at `page_url` (this build's) becomes the English page's relative URL."""
    up = "../" * page_url.count("/") + "../"  # this build's root, then the English build's (one folder up)
    return EN_HREF.sub(lambda m: f'href="{up}{m.group(1)}"', html)



# ---------------------------------------------------------------------------------------- 4


@event_priority(-110)  # after minirl_site.on_post_page (-100), which copies the committed English notebook there
def on_post_page(output, page, config):
    found = _DOWNLOADS.get(page.file.src_uri)
    if found is not None and getattr(page.file, "abs_dest_path", None):
        en_rel, tr = found
        download = Path(page.file.abs_dest_path).parent / Path(en_rel).name
        if download.is_file():
            nb, _ = i18n.translate_notebook(json.loads((ROOT / en_rel).read_text(encoding="utf-8")), tr, LANG)
            download.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return english_hrefs(output, page.url)


def on_serve(server, config, builder):
    server.watch(str(ROOT / i18n.I18N_DIR))
    return server
