"""Every verl citation in the project resolves at the pinned commit (file, def line, named symbol)."""
from pathlib import Path

from minirl.anchors import check_project, check_text, load_index

ROOT = Path(__file__).resolve().parents[1]


def test_checker_catches_wrong_lines_and_names():
    idx = load_index()
    good = "`compute_grpo_outcome_advantage` (`verl/trainer/ppo/core_algos.py:268`)"
    assert check_text(good, idx) == []
    assert check_text("`compute_grpo_outcome_advantage` (`verl/trainer/ppo/core_algos.py:267`)", idx)
    assert "not `agg_loss`" in check_text("`agg_loss` (`verl/trainer/ppo/core_algos.py:268`)", idx)[0]
    assert "does not exist" in check_text("see verl/trainer/ppo/nope.py:3", idx)[0]
    assert "past the end" in check_text("verl/trainer/config/ppo_trainer.yaml:99999", idx)[0]


def test_every_citation_in_the_project_resolves():
    bad = check_project(ROOT)
    assert bad == [], "unresolved verl citations:\n" + "\n".join(bad)
