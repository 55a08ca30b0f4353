"""The reading site: `mkdocs build --strict` passes with every notebook executed, and the hook's pieces work.

The build (slow: it executes the smoke notebook, every chapter and every lab) happens once per test
session, in a temporary site dir; tests/test_browser.py serves that same build (`build_site()`).
The hook's functions (citation links, the offline guard, nav and notebook links) are tested on
their own, fast.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT_S = int(os.environ.get("MINIRL_SITE_BUILD_TIMEOUT", "1800"))
_BUILD: dict = {}


def _load_hook():
    spec = importlib.util.spec_from_file_location("minirl_site_hook", ROOT / "docs/hooks/minirl_site.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


hook = _load_hook()


def build_site() -> Path:
    """Build the site once per session (`mkdocs build --strict`, notebooks executed, no cache); return its dir."""
    if "site" in _BUILD:
        return _BUILD["site"]
    if "error" in _BUILD:
        pytest.fail(_BUILD["error"])
    site = Path(tempfile.mkdtemp(prefix="minirl-site-")) / "site"
    atexit.register(shutil.rmtree, site.parent, True)  # the session's tests share it; gone at exit
    env = dict(os.environ, MINIRL_DOCS_EXECUTE="true", MINIRL_DOCS_CACHE="false", NO_MKDOCS_2_WARNING="1")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                              check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        _BUILD["error"] = f"mkdocs build --strict ran past {BUILD_TIMEOUT_S} s (MINIRL_SITE_BUILD_TIMEOUT)"
        raise AssertionError(_BUILD["error"]) from e
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        log = re.sub(r"\x1b\[[0-9;]*m", "", proc.stderr)  # nbclient's tracebacks are ANSI-coloured
        _BUILD["error"] = f"mkdocs build --strict failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{log[-8000:]}"
        pytest.fail(_BUILD["error"])
    _BUILD.update(site=site, wall_s=wall, log=proc.stderr)
    art = ROOT / "artifacts"
    art.mkdir(exist_ok=True)
    (art / "site_build.txt").write_text(f"mkdocs build --strict: {wall:.1f} s\n\n{proc.stderr}")
    return site


def notebook_pages() -> list[tuple[str, Path]]:
    """(site URL path, source) of every notebook the site renders."""
    out = [("_smoke/smoke/", ROOT / "docs/_smoke/smoke.ipynb")]
    for folder in hook.NOTEBOOK_DIRS:
        out += [(f"{folder}/{nb.stem}/", nb) for nb in hook.notebooks(folder)]
    return out


# --------------------------------------------------------------------------------- the real build


@pytest.mark.slow
def test_site_builds_strict_with_notebooks_executed():
    site = build_site()
    print(f"mkdocs build --strict took {_BUILD['wall_s']:.1f} s")
    for page in ["index.html", "glossary/index.html", "trace-schema/index.html", "citations/index.html",
                 "api/protocol/index.html", "api/core_algos/index.html", "api/anchors/index.html",
                 "chapters/index.html", "labs/index.html"]:
        assert (site / page).is_file(), f"{page} missing from the built site"
    # every notebook rendered, executed: outputs present, no error output, no Python traceback
    for url, src in notebook_pages():
        html = (site / url / "index.html").read_text()
        assert "jp-OutputArea-output" in html, f"{src.name}: no cell output on {url} (not executed?)"
        assert "Traceback (most recent call last)" not in html, f"{src.name}: a traceback in the outputs"
        assert hook.notebook_title(src) in html
    smoke = (site / "_smoke/smoke/index.html").read_text()
    assert re.search(r'<img[^>]+src="data:image/png;base64,', smoke), "the smoke notebook's plot is missing"
    assert 'class="trace-table"' in smoke and "advantages" in smoke
    # the API reference comes from the docstrings, with verl citations turned into pinned links
    api = (site / "api/core_algos/index.html").read_text()
    assert "compute_grpo_outcome_advantage" in api
    assert 'href="https://github.com/verl-project/verl/blob/1dda039b9c6311889a9c9a26040677e1254814f9/' \
           'verl/trainer/ppo/core_algos.py#L268"' in api
    # the glossary defines the words the chapters lean on
    gloss = (site / "glossary/index.html").read_text()
    for term in ["Policy", "Reward", "KL", "Advantage", "Rollout", "DataProto", "uid", "response_mask"]:
        assert re.search(rf"<dt>(<code>)?{re.escape(term)}", gloss), f"glossary has no entry {term!r}"
    # offline: no page loads anything from another host (the hook also refuses to write one)
    for page in site.rglob("*.html"):
        assert hook.remote_loads(page.read_text()) == [], page
    assert "cdnjs" not in smoke and "fonts.googleapis" not in (site / "index.html").read_text()


@pytest.mark.slow
def test_nav_lists_every_notebook_and_guide():
    site = build_site()
    home = (site / "index.html").read_text()
    for url, src in notebook_pages()[1:]:
        assert f'href="{url}"' in home or f'href="./{url}"' in home, f"{src.name} is not in the nav"
    for md in sorted((ROOT / "docs/guide").glob("*.md")):
        url = "guide/" if md.name == "index.md" else f"guide/{md.stem}/"
        assert url in home, f"docs/guide/{md.name} is not in the nav"


# --------------------------------------------------------------------------------- the hook, fast


def test_citation_code_spans_become_pinned_links():
    html = ("<p><code>verl/trainer/ppo/core_algos.py:268</code> and <code>verl/protocol.py</code>, "
            "not <code>x = 1</code>, not <code>verl/...py:268</code>, "
            '<a href="u"><code>verl/protocol.py:318</code></a></p>')
    out = hook.link_citations(html)
    pin = "https://github.com/verl-project/verl/blob/1dda039b9c6311889a9c9a26040677e1254814f9"
    assert f'<a class="verl-cite" href="{pin}/verl/trainer/ppo/core_algos.py#L268"' in out
    assert f'href="{pin}/verl/protocol.py"' in out
    assert "<code>x = 1</code>" in out and out.count("verl-cite") == 2
    assert '<a href="u"><code>verl/protocol.py:318</code></a>' in out  # an existing link is left alone


def test_offline_guard_flags_remote_loads_only():
    bad = ['<script src="https://cdn.example.org/x.js"></script>',
           '<link rel="stylesheet" href="//fonts.googleapis.com/css?family=Roboto">',
           '<img alt="" src="http://example.org/a.png">',
           '<div style="background: url(https://example.org/bg.png)"></div>',
           '<script>const m = await import("https://cdnjs.cloudflare.com/m.mjs")</script>']
    for snippet in bad:
        assert hook.remote_loads(snippet), snippet
    ok = ['<a href="https://github.com/verl-project/verl">verl</a>', '<script src="../assets/x.js"></script>',
          '<img src="data:image/png;base64,AAAA">', '<link rel="canonical" href="https://example.org/">',
          '<svg xmlns="http://www.w3.org/2000/svg"></svg>']
    for snippet in ok:
        assert hook.remote_loads(snippet) == [], snippet
    # nbconvert's MathJax tag (pointed at the sentinel by mkdocs.yml) and mermaid loader are removed
    page = type("P", (), {"file": type("F", (), {"src_uri": "x.ipynb"})()})()
    nb_head = (f'<script src="{hook.MATHJAX_SENTINEL}"> </script>\n<script type="module">\n'
               'document.addEventListener("DOMContentLoaded", async () => {\n'
               'const diagrams = document.querySelectorAll(".jp-Mermaid > pre.mermaid");\n'
               'const mermaid = (await import("https://cdnjs.cloudflare.com/m.mjs")).default;\n});\n</script>')
    assert hook.on_post_page(nb_head, page, None).strip() == ""
    with pytest.raises(Exception, match="would load from another host"):
        hook.on_post_page(bad[0], page, None)


def test_mkdocs_yml_is_offline_and_strict():
    text = "\n".join(line.split("#")[0] for line in (ROOT / "mkdocs.yml").read_text().splitlines())
    assert re.search(r"^\s*font:\s*false", text, re.MULTILINE)
    assert re.search(r"^strict:\s*true", text, re.MULTILINE)
    assert re.search(r"allow_errors:\s*false", text)
    assert re.search(r"execute:\s*!ENV \[MINIRL_DOCS_EXECUTE, true\]", text)
    for plugin in ("privacy", "social"):
        assert not re.search(rf"^\s*-\s*{plugin}\b", text, re.MULTILINE), f"Material's {plugin} plugin downloads at build"
    assert "repo_url" not in text  # Material's repo widget calls the GitHub API from the page
    assert "mathjax" not in text.lower().replace("custom_mathjax_url", "").replace("no-mathjax", "")


def test_nav_sections_follow_the_files(tmp_path, monkeypatch):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "labs").mkdir()
    nb = {"cells": [{"cell_type": "markdown", "source": ["# 01 Sync GRPO run overview\n", "text"]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "chapters/01_sync_grpo.ipynb").write_text(json.dumps(nb))
    (tmp_path / "chapters/02_config.ipynb").write_text(json.dumps({"cells": [], "metadata": {}}))
    docs = tmp_path / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "guide/index.md").write_text("# Guides")
    (docs / "guide/vllm.md").write_text("# vLLM")
    monkeypatch.setattr(hook, "ROOT", tmp_path)
    nav = hook._expand_nav([{"Home": "index.md"}, {"Chapters": "chapters/index.md"}, {"Labs": "labs/index.md"},
                            {"Guides": "guide/index.md"}, {"Reference": [{"Glossary": "glossary.md"}]}], docs)
    assert nav == [{"Home": "index.md"},
                   {"Chapters": ["chapters/index.md", {"01 Sync GRPO run overview": "chapters/01_sync_grpo.ipynb"},
                                 {"02 config": "chapters/02_config.ipynb"}]},
                   {"Labs": ["labs/index.md"]},
                   {"Guides": ["guide/index.md", "guide/vllm.md"]},
                   {"Reference": [{"Glossary": "glossary.md"}]}]
    # [[chapters/NN|text]] links the notebook when it exists, else says it is not written yet
    page = type("P", (), {"file": type("F", (), {"src_uri": "chapters/index.md"})()})()
    md = hook.on_page_markdown("[[chapters/01|01 Overview]] / [[labs/01|Lab 01]] / [[chapters/02]]", page, None, None)
    assert md == ("[01 Overview](01_sync_grpo.ipynb) / Lab 01 <small>(not written yet)</small> / "
                  "[02 config](02_config.ipynb)")
