"""The translations (i18n/zh/, README.zh-CN.md) against the English files, and the generated notebooks.

1. On tiny hand-made fixtures: `check` names the notebook and the cell when an English markdown cell changed
   after its translation, when a cell has no entry and when an entry names no cell; it reports a Markdown
   page whose `en_sha1` is stale; `stubs` writes entries that read back and are marked until translated.
2. One source for code: a generated notebook's code cells (sources, outputs, execution counts) and its
   metadata are the English executed copy's; only markdown sources change.
3. The repository: every translation file that exists is fresh (a partial translation is fine: an English
   file without a translation only counts against coverage, `python scripts/i18n.py check` lists them),
   and every translated notebook generated from the English one keeps its code cells.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import i18n  # docs/hooks/i18n.py

NB = "chapters/01_tiny.ipynb"


def _notebook(cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    for kind, cid, src in cells:
        cell = nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src)
        cell["id"] = cid
        nb.cells.append(cell)
    return nb


@pytest.fixture
def repo(tmp_path):
    """A tiny repository: one notebook (two markdown cells, one code cell), one docs page, both translated."""
    (tmp_path / "chapters").mkdir()
    nb = _notebook([("md", "m-0", "# 01 · Tiny\n\nThe **advantage** of a token."),
                    ("code", "c-0", "x = 1 + 1\nprint(x)"),
                    ("md", "m-1", "The value printed above is `x`.")])
    nbformat.write(nb, tmp_path / NB)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "glossary.md").write_text("# Glossary\n\nPolicy\n:   The model.\n", encoding="utf-8")
    tr = {"m-0": {"en_sha1": i18n.sha1_text(nb.cells[0].source), "zh": "# 01 · 微型示例\n\n一个 token 的**优势（advantage）**。\n"},
          "m-1": {"en_sha1": i18n.sha1_text(nb.cells[2].source), "zh": "上面打印的值是 `x`。\n"}}
    path = tmp_path / i18n.translation_path(NB)
    path.parent.mkdir(parents=True)
    path.write_text(i18n.dump_notebook_translation(NB, tr), encoding="utf-8")
    page = tmp_path / "i18n" / "zh" / "docs" / "glossary.md"
    page.parent.mkdir(parents=True)
    page.write_text(f"<!-- en_sha1: {i18n.sha1_file(tmp_path / 'docs' / 'glossary.md')} -->\n# 术语表\n", encoding="utf-8")
    return tmp_path


def _problems(root):
    return [(p.kind, p.path, p.cell) for p in i18n.check(root).problems]


def _edit_cell(root, cid, text):
    nb = nbformat.read(root / NB, as_version=4)
    next(c for c in nb.cells if c.id == cid).source = text
    nbformat.write(nb, root / NB)


def test_fresh_translations_have_no_problem_and_count_as_covered(repo):
    report = i18n.check(repo)
    assert report.ok, [str(p) for p in report.problems]
    cov = {c.path: (c.exists, c.fresh, c.total) for c in report.coverage}
    assert cov == {NB: (True, 2, 2), "docs/glossary.md": (True, 1, 1)}


def test_a_changed_english_cell_is_stale_naming_notebook_and_cell(repo):
    _edit_cell(repo, "m-1", "The value printed above is `x`, which is 2.")
    report = i18n.check(repo)
    assert _problems(repo) == [("stale", NB, "m-1")]
    msg = str(report.problems[0])
    assert NB in msg and "m-1" in msg and "changed" in msg


def test_a_markdown_cell_without_entry_is_missing(repo):
    nb = nbformat.read(repo / NB, as_version=4)
    new = nbformat.v4.new_markdown_cell("A new paragraph.")
    new["id"] = "m-2"
    nb.cells.append(new)
    nbformat.write(nb, repo / NB)
    assert _problems(repo) == [("missing", NB, "m-2")]


def test_an_entry_for_no_cell_or_a_code_cell_is_an_orphan(repo):
    path = repo / i18n.translation_path(NB)
    text = path.read_text(encoding="utf-8")
    extra = f"  gone:\n    en_sha1: {'a' * 40}\n    zh: 旧的\n  c-0:\n    en_sha1: {'b' * 40}\n    zh: 代码\n"
    path.write_text(text + extra, encoding="utf-8")
    report = i18n.check(repo)
    assert _problems(repo) == [("orphan", NB, "gone"), ("orphan", NB, "c-0")]
    assert "a code cell" in str(report.problems[1])


def test_a_page_whose_english_changed_is_stale(repo):
    (repo / "docs" / "glossary.md").write_text("# Glossary\n\nPolicy\n:   The model being trained.\n", encoding="utf-8")
    report = i18n.check(repo)
    assert _problems(repo) == [("stale", "docs/glossary.md", None)]
    assert "docs/glossary.md changed" in str(report.problems[0])


def test_a_page_without_marker_and_a_translation_of_nothing_are_reported(repo):
    page = repo / "i18n" / "zh" / "docs" / "glossary.md"
    page.write_text("# 术语表\n", encoding="utf-8")
    (repo / "i18n" / "zh" / "docs" / "nowhere.md").write_text(f"<!-- en_sha1: {'a' * 40} -->\n# 无\n", encoding="utf-8")
    (repo / "i18n" / "zh" / "docs" / "terms.md").write_text("<!-- zh-only -->\n# 术语对照\n", encoding="utf-8")
    assert _problems(repo) == [("invalid", "docs/glossary.md", None), ("orphan", "i18n/zh/docs/nowhere.md", None)]


def test_broken_yaml_is_invalid_with_the_file_named(repo):
    path = repo / i18n.translation_path(NB)
    path.write_text("source: chapters/01_tiny.ipynb\ncells:\n  m-0:\n    zh: [unclosed\n", encoding="utf-8")
    report = i18n.check(repo)
    assert [(p.kind, p.path) for p in report.problems] == [("invalid", NB)]
    assert str(path) in report.problems[0].message


def test_an_english_file_without_translation_only_counts_against_coverage(repo):
    nbformat.write(_notebook([("md", "a", "# 02 · Other")]), repo / "chapters" / "02_other.ipynb")
    report = i18n.check(repo)
    assert report.ok
    assert any("not translated yet: chapters/02_other.ipynb" in line for line in i18n.coverage_lines(report))


def test_stubs_marks_new_and_changed_cells_and_keeps_old_translations(repo):
    _edit_cell(repo, "m-1", "Changed English.")
    nb = nbformat.read(repo / NB, as_version=4)
    new = nbformat.v4.new_markdown_cell("  starts with blanks\n\nand ends with two newlines\n\n")
    new["id"] = "m-2"
    nb.cells.append(new)
    nbformat.write(nb, repo / NB)
    _, counts = i18n.stub_notebook(NB, repo)
    assert counts == {"new": 1, "changed": 1, "kept": 1, "dropped": 0}
    tr = i18n.load_notebook_translation(repo / i18n.translation_path(NB))["cells"]
    assert list(tr) == ["m-0", "m-1", "m-2"]
    assert tr["m-1"]["zh"] == "上面打印的值是 `x`。\n" and tr["m-1"]["stale"] is True  # the old translation, marked
    assert tr["m-1"]["translated_from"] == i18n.sha1_text("The value printed above is `x`.")  # for `diff`
    assert tr["m-2"]["zh"] == "  starts with blanks\n\nand ends with two newlines\n\n" and tr["m-2"]["stale"] is True
    assert "stale" not in tr["m-0"]
    assert _problems(repo) == [("untranslated", NB, "m-1"), ("untranslated", NB, "m-2")]


def test_diff_finds_the_english_a_translation_was_made_from_in_git_history(repo):
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                       capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "translated")
    _edit_cell(repo, "m-1", "The value printed above is `x`, which is 2.")
    (repo / "docs" / "glossary.md").write_text("# Glossary\n\nPolicy\n:   The model being trained.\n", encoding="utf-8")
    git("commit", "-qam", "English changed")
    i18n.stub_notebook(NB, repo)
    assert i18n.english_cells_at_translation(NB, repo) == [
        ("m-1", "The value printed above is `x`.", "The value printed above is `x`, which is 2.")]
    commit, old = i18n.english_at_translation("docs/glossary.md", repo)
    assert old == "# Glossary\n\nPolicy\n:   The model.\n" and len(commit) == 40
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "i18n.py"), "--root", str(repo), "diff", str(repo / NB)],
                          check=False, capture_output=True, text=True)
    assert "-The value printed above is `x`." in proc.stdout and "+The value printed above is `x`, which is 2." in proc.stdout


def test_stubs_writes_a_missing_page_marked_stale(repo):
    (repo / "docs" / "index.md").write_text("# minirl\n", encoding="utf-8")
    tr_rel, what = i18n.stub_page("docs/index.md", repo)
    assert tr_rel == "i18n/zh/docs/index.md" and what.startswith("written")
    assert _problems(repo) == [("untranslated", "docs/index.md", None)]


def test_the_generated_notebook_keeps_the_executed_english_code_cells_and_outputs(repo, tmp_path_factory):
    executed = nbformat.read(repo / NB, as_version=4)
    code = executed.cells[1]
    code.execution_count = 1
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="2\n"),
                    nbformat.v4.new_output("display_data", data={"text/html": "<table><tr><td>2</td></tr></table>",
                                                                 "text/plain": "2"})]
    executed.metadata["minirl_executed"] = {"key": "k"}
    copy_dir = tmp_path_factory.mktemp("executed")
    (copy_dir / "chapters").mkdir()
    nbformat.write(executed, copy_dir / NB)
    out = tmp_path_factory.mktemp("zh")
    done = i18n.build(out, repo, english_copy=lambda p: (copy_dir / NB, True))
    assert [d["path"] for d in done] == [NB] and done[0]["executed"] and done[0]["english_cells"] == []
    en = json.loads((copy_dir / NB).read_text(encoding="utf-8"))
    zh = json.loads((out / NB).read_text(encoding="utf-8"))
    assert [c for c in zh["cells"] if c["cell_type"] == "code"] == [c for c in en["cells"] if c["cell_type"] == "code"]
    assert [c["id"] for c in zh["cells"]] == [c["id"] for c in en["cells"]]
    assert i18n.cell_source(zh["cells"][0]) == "# 01 · 微型示例\n\n一个 token 的**优势（advantage）**。"
    assert zh["metadata"]["minirl_executed"] == {"key": "k"}
    assert zh["metadata"]["minirl_i18n"]["lang"] == "zh"
    nbformat.validate(nbformat.reads(json.dumps(zh), as_version=4))


def test_a_stale_cell_is_built_in_english(repo, tmp_path):
    _edit_cell(repo, "m-1", "Changed English.")
    out, kept = i18n.translate_notebook(json.loads((repo / NB).read_text()), i18n.load_notebook_translation(
        repo / i18n.translation_path(NB)))
    assert kept == ["m-1"]
    assert i18n.cell_source(out["cells"][2]) == "Changed English."


def test_the_cli_check_exits_nonzero_on_a_stale_translation(repo):
    _edit_cell(repo, "m-0", "# 01 · Tiny, renamed")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "i18n.py"), "--root", str(repo), "check"],
                          check=False, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"stale        {NB} cell m-0" in proc.stdout
    assert "notebooks: 1/1 translated, 0 of them fully fresh, 1/2 markdown cells fresh" in proc.stdout


# ------------------------------------------------------------------------------------------------ the repository


def test_every_translation_in_the_repository_is_fresh():
    report = i18n.check(ROOT)
    assert report.ok, ("translations out of date with the English files (python scripts/i18n.py check; "
                       "stubs marks what to update):\n" + "\n".join(map(str, report.problems)))


TRANSLATED = [p for p in i18n.english_files(ROOT)[0] if (ROOT / i18n.translation_path(p)).is_file()]


@pytest.mark.parametrize("en_rel", TRANSLATED)
def test_a_translated_notebook_has_the_english_code_cells(en_rel, tmp_path):
    """Generated from the committed English notebook and, when there is one, from its fresh executed copy."""
    sources = [(ROOT / en_rel, False)]
    executed_copy, executed = i18n.default_english_copy(ROOT / en_rel)
    if executed:
        sources.append((executed_copy, True))
    for src, _ in sources:
        i18n.build_notebook(en_rel, tmp_path, ROOT, english_copy=lambda p, src=src: (src, False))
        en = json.loads(src.read_text(encoding="utf-8"))
        zh = json.loads((tmp_path / en_rel).read_text(encoding="utf-8"))
        assert [c for c in zh["cells"] if c["cell_type"] != "markdown"] == \
            [c for c in en["cells"] if c["cell_type"] != "markdown"], f"{en_rel}: code cells differ from {src}"
        changed = [c["id"] for c, e in zip(zh["cells"], en["cells"]) if c["cell_type"] == "markdown"
                   and c["source"] != e["source"]]
        assert changed, f"{en_rel}: no markdown cell was translated"
