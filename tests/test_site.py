"""The reading site: `mkdocs build --strict` passes with every notebook executed, and the hook's pieces work.

The build happens once per test session, in a temporary site dir; tests/test_browser.py serves that
same build (`build_site()`). Each notebook executes once per session: `build_site()` first runs every
notebook the site renders (the smoke notebook, every chapter and lab) through
docs/hooks/executed_notebooks.py, reusing the runs that tests/test_notebooks.py already made (and
the other way round), and the build then renders those executed copies without running them again.
The hook's functions (citation links, the offline guard, nav and notebook links, executed-copy
freshness, the vendored MathJax) are tested on their own, fast.
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
executed = hook.executed_notebooks  # the module tests/test_notebooks.py runs notebooks with (one per session)
executed.start_session()  # the build below renders this session's executed copies


def execute_notebooks() -> list[str]:
    """Every notebook the site renders, executed once this session (reused if test_notebooks ran it); a line each."""
    lines = []
    for _, src in notebook_pages():
        run, ran_now = executed.execute_once(src)
        rel = executed.relpath(src)
        if run.error:
            _BUILD["error"] = f"{rel} failed to execute, so the site cannot build:\n{run.error[-8000:]}"
            pytest.fail(_BUILD["error"])
        lines.append(f"{rel}: {run.wall_s:.1f} s" + ("" if ran_now else " (run earlier this session)"))
    return lines


def build_site() -> Path:
    """Build the site once per session (`mkdocs build --strict` on executed copies, no HTML cache); return its dir."""
    if "site" in _BUILD:
        return _BUILD["site"]
    if "error" in _BUILD:
        pytest.fail(_BUILD["error"])
    t_exec = time.perf_counter()
    runs = execute_notebooks()
    exec_wall = time.perf_counter() - t_exec
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
    _BUILD.update(site=site, wall_s=wall, log=proc.stderr, executed_by_build=re.findall(
        r"notebook (\S+\.ipynb): executing", proc.stderr))
    art = ROOT / "artifacts"
    art.mkdir(exist_ok=True)
    (art / "site_build.txt").write_text(f"notebooks executed (or reused) first: {exec_wall:.1f} s\n  " + "\n  ".join(runs)
                                        + f"\nmkdocs build --strict: {wall:.1f} s\n\n{proc.stderr}")
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
        # the download link serves the committed notebook (no outputs), not the executed copy
        assert (site / url / src.name).read_bytes() == src.read_bytes(), f"{url}{src.name} is not the committed notebook"
    # executed once: the build rendered this session's executed copies and ran none again (unless the
    # notebook or minirl changed while the session ran, which makes the copy stale)
    again = [rel for rel in _BUILD["executed_by_build"] if executed.fresh_copy(ROOT / rel) is None]
    twice = sorted(set(_BUILD["executed_by_build"]) - set(again))
    assert not twice, f"the site build executed {twice} again although their executed copies were fresh"
    # math: MathJax is served from the site, and every page loads it from there
    assert (site / hook.MATHJAX_URI / "tex-chtml.js").is_file() and (site / hook.MATHJAX_URI / "LICENSE").is_file()
    for page in ["api/core_algos/index.html", "_smoke/smoke/index.html"]:
        assert f'src="../../{hook.MATHJAX_URI}/tex-chtml.js"' in (site / page).read_text(), page
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
    # nbconvert's MathJax 2 tag (pointed at the sentinel by mkdocs.yml), its inert MathJax 2 config and
    # the mermaid loader are removed
    page = type("P", (), {"file": type("F", (), {"src_uri": "x.ipynb"})()})()
    nb_head = (f'<script src="{hook.MATHJAX_SENTINEL}"> </script>\n'
               '<script type="text/x-mathjax-config">\ninit_mathjax = function() {};\n</script>\n<script type="module">\n'
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
    assert re.search(r"^\s*execute:\s*false", text, re.MULTILINE)  # the hook executes, once; mkdocs-jupyter renders
    for plugin in ("privacy", "social"):
        assert not re.search(rf"^\s*-\s*{plugin}\b", text, re.MULTILINE), f"Material's {plugin} plugin downloads at build"
    assert "repo_url" not in text  # Material's repo widget calls the GitHub API from the page
    assert not re.search(r"https?:|//", text.split("extra_javascript:")[1].split("markdown_extensions:")[0])
    assert f"- {hook.MATHJAX_URI}/tex-chtml.js" in text and "- javascripts/mathjax.js" in text
    assert (ROOT / "docs/javascripts/mathjax.js").is_file()
    # the notebooks' markdown cells are typeset too: the selector covers arithmatex and notebook markdown
    js = (ROOT / "docs/javascripts/mathjax.js").read_text()
    assert '".arithmatex, .jp-MarkdownCell .jp-RenderedMarkdown"' in js and "typeset: false" in js


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


def test_executed_copy_is_fresh_only_for_the_same_notebook_and_minirl(tmp_path, monkeypatch):
    import nbformat

    monkeypatch.setattr(executed, "ROOT", tmp_path)
    monkeypatch.setattr(executed, "CACHE_DIR", tmp_path / ".cache/executed")
    (tmp_path / "minirl").mkdir()
    (tmp_path / "minirl/a.py").write_text("x = 1\n")
    (tmp_path / "chapters").mkdir()
    (tmp_path / "labs").mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    chapter, lab = tmp_path / "chapters/01_a.ipynb", tmp_path / "labs/01_a.ipynb"
    nbformat.write(nb, chapter)
    nbformat.write(nb, lab)
    assert executed.fresh_copy(chapter) is None  # never executed
    assert executed.key(chapter) != executed.key(lab)  # a lab runs with its solutions: not the same run

    def write_copy(src):
        done = nbformat.read(src, as_version=4)
        done.metadata[executed.META] = {"key": executed.key(src)}
        cp = executed.copy_path(src)
        cp.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(done, cp)
        return cp

    assert write_copy(chapter) == tmp_path / ".cache/executed/chapters/01_a.ipynb"
    assert executed.fresh_copy(chapter) == executed.copy_path(chapter)
    (tmp_path / "minirl/a.py").write_text("x = 2\n")  # minirl changed: stale
    assert executed.fresh_copy(chapter) is None
    write_copy(chapter)
    (tmp_path / "minirl/__pycache__").mkdir()
    (tmp_path / "minirl/__pycache__/a.cpython-311.pyc").write_bytes(b"\0")  # byte code does not count
    assert executed.fresh_copy(chapter) is not None
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(2)")]), chapter)
    assert executed.fresh_copy(chapter) is None  # the notebook changed: stale
    # a test session's own copy stays fresh while minirl changes under it, not in another session
    monkeypatch.setenv(executed.SESSION_ENV, "session-1")
    cp = write_copy(chapter)
    done = nbformat.read(cp, as_version=4)
    done.metadata[executed.META].update(session="session-1", notebook_sha256=executed.notebook_sha(chapter))
    nbformat.write(done, cp)
    (tmp_path / "minirl/a.py").write_text("x = 3\n")
    assert executed.fresh_copy(chapter) == cp
    monkeypatch.setenv(executed.SESSION_ENV, "session-2")
    assert executed.fresh_copy(chapter) is None
    # the lab's kernel gets the solutions switch, a chapter's does not set it
    monkeypatch.delenv(executed.LAB_SOLUTIONS_ENV, raising=False)
    assert executed.kernel_env(lab)[executed.LAB_SOLUTIONS_ENV] == "1"
    assert executed.LAB_SOLUTIONS_ENV not in executed.kernel_env(chapter)


def test_hook_fails_clearly_when_mathjax_is_missing(monkeypatch):
    import importlib.metadata

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(hook.importlib.metadata, "distribution", missing)
    with pytest.raises(Exception, match=r"MathJax is missing: .*django-static-mathjax.*pip install -e '\.\[docs\]'"):
        hook.mathjax_files()


def test_mathjax_is_vendored_from_the_docs_extra():
    uris = dict(hook.mathjax_files())
    assert f"{hook.MATHJAX_URI}/tex-chtml.js" in uris and f"{hook.MATHJAX_URI}/LICENSE" in uris
    assert any(u.startswith(f"{hook.MATHJAX_URI}/output/chtml/fonts/woff-v2/") for u in uris)  # the fonts it loads
    assert any(u.startswith(f"{hook.MATHJAX_URI}/input/tex/extensions/") for u in uris)  # what \require autoloads
    docs_extra = re.search(r"^docs\s*=\s*\[(.*)\]", (ROOT / "pyproject.toml").read_text(), re.MULTILINE).group(1)
    assert hook.MATHJAX_DIST in docs_extra  # pip install -e '.[docs]' brings it
