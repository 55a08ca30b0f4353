"""Chapters and labs are tested source (nbdev/d2l style).

1. Every notebook under chapters/ and labs/ is committed without outputs, and its first code cell is the
   one parameter cell (tagged `parameters`).
2. Every notebook executes top to bottom with nbclient, in its own folder, with the settings of that
   parameter cell (slow: one kernel per notebook; the wall time of each is printed). Labs run here with
   `MINIRL_LAB_SOLUTIONS=1` (their `solutions` mode, which fills in the worked solutions); they are
   committed with `SOLUTION = False`, and tests/notebooks/test_labs.py also runs them in the reader's state and
   with a wrong answer.
   Each notebook executes once per pytest session: the run (docs/hooks/executed_notebooks.py) writes
   the executed copy that the site build renders (tests/site/test_site.py), and whichever of the two
   needs a notebook first runs it, the other reuses that run.
3. The pages the site's browser test opens (chapter 01, lab 01's worked solutions) show at least one plot image and one
   HTML table once executed, and a notebook leaves no file behind in the repository.

verl citations inside the notebooks are checked by tests/unit/test_anchors.py (it scans .ipynb files).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import executed_notebooks as executed  # runs a notebook once, keeps the executed copy

executed.start_session()  # this session's executed copies serve the site build it starts (tests/site/test_site.py)
NOTEBOOKS = sorted(ROOT.glob("chapters/*.ipynb")) + sorted(ROOT.glob("labs/*.ipynb"))
IDS = [str(p.relative_to(ROOT)) for p in NOTEBOOKS]
# Pages whose rendered output the site's browser test inspects for a figure and a trace table.
NEEDS_PLOT_AND_TABLE = {"chapters/01_sync_grpo_run_overview.ipynb", "labs/01_trace_config_and_batch.ipynb"}
# Wall time is not asserted (no timed tests): each executed copy records it, `python benchmarks/notebooks.py`
# tabulates it against the < 60 s target.
LABS = [p for p in NOTEBOOKS if p.parent.name == "labs"]
SOLUTION_ON = re.compile(r"^\s*SOLUTION\s*=\s*True\b", re.MULTILINE)


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def test_the_first_reading_rounds_exist():
    names = {p.name for p in NOTEBOOKS}
    for want in ["01_sync_grpo_run_overview.ipynb", "02_config_and_hydra.ipynb",
                 "03_data_protocol_and_batch_lifecycle.ipynb", "01_trace_config_and_batch.ipynb"]:
        assert want in names, f"{want} is missing from chapters/ or labs/ (found {sorted(names)})"


def test_notebooks_run_in_one_xdist_worker(request):
    """Under `--dist loadgroup` (scripts/test.sh) this file's tests carry the `site` group, so that the
    notebooks and the site build share one worker and each notebook executes once (tests/conftest.py)."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run with pytest-xdist --dist loadgroup")
    assert request.node.nodeid.endswith("@site"), (
        f"{request.node.nodeid}: the xdist group was not applied (pytest {pytest.__version__}); pytest 9.2 + "
        "pytest-xdist 3.8 drop it, see the dev extra's pin in pyproject.toml")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    dirty = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
             and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, (f"{path.name}: code cells {dirty} carry outputs or an execution count. Strip them before "
                       "committing: jupyter nbconvert --clear-output --inplace " + str(path.relative_to(ROOT)))
    assert "widgets" not in nb.get("metadata", {}), f"{path.name}: widget state in the metadata; clear it"
    code = _code_cells(nb)
    assert code, f"{path.name} has no code cell"
    assert "parameters" in code[0].get("metadata", {}).get("tags", []), (
        f"{path.name}: the first code cell must be the parameter cell, tagged `parameters` "
        "(cell metadata {\"tags\": [\"parameters\"]}).")
    assert sum("parameters" in c.get("metadata", {}).get("tags", []) for c in code) == 1, \
        f"{path.name}: more than one cell is tagged `parameters`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_section_is_there(path):
    """CleanRL-style fixed sections: a question, the verl files to read, what minirl simplifies; chapters
    also name the minirl counterpart and ask check questions."""
    text = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown")
    wanted = ["verl files to read", "What minirl simplifies"]
    wanted += ["**The question.**", "The minirl counterpart", "Check questions"] if path.parent.name == "chapters" \
        else ["Exercise"]
    missing = [w for w in wanted if w not in text]
    assert not missing, f"{path.name}: missing section(s) {missing}"
    assert "verl/" in text and ".py:" in text, f"{path.name}: no `verl/<path>.py:LINE` citation in the prose"


@pytest.mark.parametrize("path", LABS, ids=[str(p.relative_to(ROOT)) for p in LABS])
def test_lab_committed_without_solutions(path):
    cells = [i for i, c in enumerate(json.loads(path.read_text())["cells"])
             if c["cell_type"] == "code" and SOLUTION_ON.search("".join(c["source"]))]
    assert not cells, (f"{path.name}: cell(s) {cells} set SOLUTION = True; commit labs with SOLUTION = False "
                       f"(the reader's copy shows no answers; CI runs them with {executed.LAB_SOLUTIONS_ENV}=1)")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_executes(path, capsys):
    pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    run, ran_now = executed.execute_once(path, mode="solutions" if executed.is_lab(path) else None)
    how = f" with {executed.LAB_SOLUTIONS_ENV}=1" if executed.is_lab(path) else ""
    who = "" if ran_now else " (earlier in this session, for the site build)"
    with capsys.disabled():
        print(f"\n[notebook] {path.relative_to(ROOT)} executed{how} in {run.wall_s:.1f} s{who}")
    assert run.error is None, f"{path.name} failed to execute:\n{run.error[-8000:]}"
    left = run.left_behind
    assert not left, f"{path.name} wrote {left} into {path.parent}; write run outputs to a temp dir"
    nb = run.nb
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    if str(path.relative_to(ROOT)) in NEEDS_PLOT_AND_TABLE:
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name}: no plot in the outputs"
        assert any("<table" in o.get("data", {}).get("text/html", "") for o in outputs), \
            f"{path.name}: no HTML table in the outputs"


# ------------------------------------------------------------------ the helpers the notebooks share


def test_small_overrides_default_to_two_optimizer_steps_and_four_micro_batches():
    from minirl.config import derived_numbers, load
    from minirl.notebook import small_overrides

    ovr = small_overrides(train_batch_size=8, n=4, steps=2)
    assert "actor_rollout_ref.actor.ppo_mini_batch_size=4" in ovr
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4" in ovr
    d = derived_numbers(load(ovr))
    assert (d.sequences_per_step, d.optimizer_steps_per_step, d.micro_batches_per_mini_batch) == (32, 2, 4)


@pytest.mark.slow
def test_small_run_works_inside_a_running_event_loop():
    """A Jupyter kernel runs cells inside an asyncio loop; the trainer's coroutines must still run."""
    import asyncio

    from minirl.config.introspect import config_readers
    from minirl.notebook import small_run

    async def cell():
        asyncio.get_running_loop()  # as in a notebook cell
        return small_run(train_batch_size=2, n=2, response_length=4, steps=1)

    run = asyncio.run(cell())
    assert sorted(run.batches) == [1] and len(run.batches[1]) == 4  # kept by the step callback
    assert run.stage("update_actor", step=1)["extra"]["optimizer_steps"] >= 1
    assert "trainer (controller)" in config_readers(run.config_reads, "data.train_batch_size")
    assert "actor / critic worker" in config_readers(run.config_reads, "actor_rollout_ref.actor.optim.lr")


def test_compartment_and_config_changes():
    import numpy as np
    import torch

    from minirl.config import load
    from minirl.config.introspect import config_changes
    from minirl.notebook import compartment
    from minirl.protocol import DataProto

    data = DataProto.from_dict(tensors={"responses": torch.zeros(2, 3)}, non_tensors={"uid": np.array(["a", "a"])},
                               meta_info={"temperature": 1.0})
    assert [compartment(data, k) for k in ("responses", "uid", "temperature")] == ["batch", "non_tensor_batch", "meta_info"]
    with pytest.raises(KeyError, match="in no compartment"):
        compartment(data, "advantages")
    default = load([])
    old = default.data.max_response_length
    ovr = [f"data.max_response_length={old + 4}"]
    rows = config_changes(default, load(ovr), ovr)
    assert {"key": "data.max_response_length", "default": old, "now": old + 4, "why": "override"} in rows
    assert {"key": "actor_rollout_ref.rollout.response_length", "default": old, "now": old + 4,
            "why": "interpolation (${...})"} in rows


def test_plot_batch_split_rejects_a_split_that_does_not_divide():
    from minirl.trace.plots import plot_batch_split

    with pytest.raises(ValueError, match="do not split"):
        plot_batch_split(32, 16, 3)
    ax = plot_batch_split(32, 16, 4, dp=2).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1"]
    assert len(ax.patches) == 2 * 2  # 2 mini-batches x 2 ranks
    assert ax.get_title() == "32 sequences -> 2 mini-batches of 16 -> 8 per rank -> 2 micro-batches"
