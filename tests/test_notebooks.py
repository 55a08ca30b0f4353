"""Chapters and labs are tested source (nbdev/d2l style).

1. Every notebook under chapters/ and labs/ is committed without outputs, and its first code cell is the
   one parameter cell (tagged `parameters`).
2. Every notebook executes top to bottom with nbclient, in its own folder, with the settings of that
   parameter cell (slow: one kernel per notebook; the wall time of each is printed).
3. The pages the site's browser test opens (chapter 01, lab 01) show at least one plot image and one
   HTML table once executed, and a notebook leaves no file behind in the repository.

verl citations inside the notebooks are checked by tests/test_anchors.py (it scans .ipynb files).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(ROOT.glob("chapters/*.ipynb")) + sorted(ROOT.glob("labs/*.ipynb"))
IDS = [str(p.relative_to(ROOT)) for p in NOTEBOOKS]
# Pages whose rendered output the site's browser test inspects for a figure and a trace table.
NEEDS_PLOT_AND_TABLE = {"chapters/01_sync_grpo_run_overview.ipynb", "labs/01_trace_config_and_batch.ipynb"}
PER_NOTEBOOK_LIMIT_S = 150  # the target is < 60 s each on 2 busy cores; this only catches runaways


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def test_the_first_reading_rounds_exist():
    names = {p.name for p in NOTEBOOKS}
    for want in ["01_sync_grpo_run_overview.ipynb", "02_config_and_hydra.ipynb",
                 "03_data_protocol_and_batch_lifecycle.ipynb", "01_trace_config_and_batch.ipynb"]:
        assert want in names, f"{want} is missing from chapters/ or labs/ (found {sorted(names)})"


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


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_executes(path, capsys):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    before = {p.name for p in path.parent.iterdir()}
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=300, allow_errors=False,
                                     resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    client.execute()
    wall = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\n[notebook] {path.relative_to(ROOT)} executed in {wall:.1f} s")
    left = {p.name for p in path.parent.iterdir()} - before
    assert not left, f"{path.name} wrote {sorted(left)} into {path.parent}; write run outputs to a temp dir"
    assert wall < PER_NOTEBOOK_LIMIT_S, f"{path.name} took {wall:.0f} s (target < 60 s with the parameter cell's settings)"
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    if str(path.relative_to(ROOT)) in NEEDS_PLOT_AND_TABLE:
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name}: no plot in the outputs"
        assert any("<table" in o.get("data", {}).get("text/html", "") for o in outputs), \
            f"{path.name}: no HTML table in the outputs"


# ------------------------------------------------------------------ the helpers the notebooks share


def test_check_answer_says_what_to_do_and_what_the_run_did(capsys):
    from minirl.notebook import check_answer

    assert check_answer("q", None, 32, hint="each prompt is sampled n times") is False
    assert "[not answered] q: replace None" in capsys.readouterr().out
    assert check_answer("q", (32, 8), [32, 8]) is True  # a tuple answer matches a list from the trace
    with pytest.raises(AssertionError, match=r"your answer 31 differs from the run's 32\. hint"):
        check_answer("q", 31, 32, hint="hint")


def test_small_overrides_default_to_two_optimizer_steps_and_four_micro_batches():
    from minirl.config import derived_numbers, load
    from minirl.notebook import small_overrides

    ovr = small_overrides(train_batch_size=8, n=4, steps=2)
    assert "actor_rollout_ref.actor.ppo_mini_batch_size=4" in ovr
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4" in ovr
    d = derived_numbers(load(ovr))
    assert (d.sequences_per_step, d.optimizer_steps_per_step, d.micro_batches_per_mini_batch) == (32, 2, 4)


def test_compartment_and_config_changes():
    import numpy as np
    import torch

    from minirl.config import load
    from minirl.notebook import compartment, config_changes
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
    from minirl.notebook import plot_batch_split

    with pytest.raises(ValueError, match="do not split"):
        plot_batch_split(32, 16, 3)
