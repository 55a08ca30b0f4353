"""Every verl citation in the project resolves at the pinned commit (file, def line, named symbol)."""
import re
from pathlib import Path

from minirl.anchors import check_project, check_text, load_index

ROOT = Path(__file__).resolve().parents[2]


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


# ------------------------------------------------------------------ minirl anchors check / drift

from minirl.anchors.local import build_index
from minirl.cli import main

MOVED = ("`PPOTrainer` (`verl/trainer/ppo/v1/trainer_base.py:118`)\n"
         "`compute_grpo_outcome_advantage` (`verl/trainer/ppo/core_algos.py:268`)\n"
         "`TaskRunnerV1` (`verl/trainer/main_ppo.py:103`)\n")


def _row(out: str, symbol: str) -> list[str]:
    line = next(ln for ln in out.splitlines() if ln.strip().startswith(symbol + " "))
    return re.split(r"\s{2,}", line.strip())


def test_cli_check_exits_1_naming_each_bad_citation(tmp_path, capsys):
    bad = tmp_path / "chapter.md"
    bad.write_text("fine: `compute_grpo_outcome_advantage` (`verl/trainer/ppo/core_algos.py:268`)\n"
                   "wrong name: `agg_loss` (`verl/trainer/ppo/core_algos.py:268`)\n"
                   "no such file: verl/trainer/ppo/nope.py:3\n")
    assert main(["anchors", "check", str(bad)]) == 1
    out = capsys.readouterr()
    assert f"{bad}:2: verl/trainer/ppo/core_algos.py:268 is ['compute_grpo_outcome_advantage'], not `agg_loss`" in out.out
    assert f"{bad}:3: verl/trainer/ppo/nope.py does not exist at verl 1dda039b9c63" in out.out
    assert "fine" not in out.out and "2 of 3 verl citations do not resolve" in out.err
    good = tmp_path / "docs"
    good.mkdir()
    (good / "page.md").write_text(MOVED)
    assert main(["anchors", "check", str(good)]) == 0
    assert "3 verl citations in 1 files resolve at verl 1dda039b9c63" in capsys.readouterr().out


def test_cli_drift_shows_where_symbols_were_at_the_old_commit(tmp_path, capsys):
    f = tmp_path / "page.md"
    f.write_text(MOVED)
    assert main(["anchors", "drift", str(f)]) == 0
    out = capsys.readouterr().out
    # the V1 trainer lived in main_ppo_sync.py at 9c38b8bb1876 (verl-index README: notable moves)
    assert _row(out, "PPOTrainer") == ["PPOTrainer", "in verl/trainer/main_ppo_sync.py:490", "118"]
    assert _row(out, "compute_grpo_outcome_advantage") == ["compute_grpo_outcome_advantage", "268", "268"]
    assert _row(out, "TaskRunnerV1") == ["TaskRunnerV1", "gone", "103"]
    assert "3 symbols vs 9c38b8bb1876: 1 in the same file, 1 in another file, 1 gone" in out


def _fake_checkout(root):
    """A tiny 'newer verl': core_algos shifted by 2 lines, PPOTrainer moved to v2/, TaskRunnerV1 gone."""
    (root / "verl/trainer/ppo/v2").mkdir(parents=True)
    (root / "verl/trainer/ppo/core_algos.py").write_text(
        '"""doc"""\nimport torch\n\n\n' + "\n" * 263
        + "@register_adv_est('grpo')\n"  # line 268
        + "def compute_grpo_outcome_advantage(token_level_rewards):\n"  # line 269
        + "    return token_level_rewards\n\n\n"
        + "class KLController:\n"  # line 273
        + "    class Config:\n"
        + "        def get(self):\n"
        + "            pass\n\n"
        + "    async def update(self):\n"  # line 278
        + "        pass\n\n\n"
        + "if True:\n"
        + "    def _patched():\n"  # line 283
        + "        pass\n")
    (root / "verl/trainer/ppo/v2/base.py").write_text("\n\nclass PPOTrainer:\n    def fit(self):\n        pass\n")
    (root / "verl/trainer/main_ppo.py").write_text("def main():\n    pass\n")
    (root / "examples").mkdir()
    (root / "examples/run.sh").write_text("#!/bin/sh\necho hi")  # 2 lines, no final newline
    return root


def test_local_checkout_index_reads_defs_with_ast(tmp_path):
    idx = build_index(_fake_checkout(tmp_path))
    assert idx.by_name["verl/trainer/ppo/core_algos.py"] == {
        "compute_grpo_outcome_advantage": 269, "KLController": 273, "KLController.Config": 274,
        "KLController.Config.get": 275, "KLController.update": 278, "_patched": 283}
    assert idx.by_name["verl/trainer/ppo/v2/base.py"] == {"PPOTrainer": 3, "PPOTrainer.fit": 4}
    assert idx.files["examples/run.sh"] == 2 and idx.files["verl/trainer/main_ppo.py"] == 2
    assert idx.label == str(tmp_path.resolve())


def test_cli_against_a_local_checkout(tmp_path, capsys):
    checkout = _fake_checkout(tmp_path / "verl-new")
    f = tmp_path / "page.md"
    f.write_text(MOVED)
    assert main(["anchors", "check", "--verl", str(checkout), str(f)]) == 1
    out = capsys.readouterr().out
    assert f"{f}:2: verl/trainer/ppo/core_algos.py:268 is not the def/class line of any symbol" in out
    assert f"{f}:1: verl/trainer/ppo/v1/trainer_base.py does not exist at verl {checkout.resolve()}" in out
    assert main(["anchors", "drift", "--verl", str(checkout), str(f)]) == 0
    out = capsys.readouterr().out
    assert _row(out, "compute_grpo_outcome_advantage")[1:] == ["268", "268", "269 (+1)"]
    assert _row(out, "PPOTrainer")[1:] == ["in verl/trainer/main_ppo_sync.py:490", "118",
                                           "moved to verl/trainer/ppo/v2/base.py:3"]
    assert _row(out, "TaskRunnerV1")[1:] == ["gone", "103", "gone"]
    assert main(["anchors", "check", "--verl", str(tmp_path / "nowhere")]) == 2
    assert "no verl/ package folder" in capsys.readouterr().err
