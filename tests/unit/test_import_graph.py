"""The house rules of DESIGN.md section 6, checked on the package's own imports (`scripts/import_graph.py`).

A room is a top-level module or folder of `minirl/` (`workers/` split into engine, rollout, reward, and
`trainer/ppo/core_algos.py` and `trainer/distillation/` rooms of their own). An import that breaks a rule (config importing a stage,
models importing the trainer, the doctor importing a worker, ...) or that closes a circle between rooms
fails here, with the file and line of the import.
"""
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
import_graph = importlib.util.module_from_spec(spec)
spec.loader.exec_module(import_graph)


def test_no_import_breaks_a_rule_of_the_house():
    bad = import_graph.violations()
    assert not bad, "imports against DESIGN.md section 6:\n" + "\n".join(bad)


def test_no_circle_between_rooms():
    circles = import_graph.cycles()
    assert not circles, "rooms that import each other: " + "; ".join(" <-> ".join(c) for c in circles)


def test_the_checker_sees_a_violation(tmp_path, monkeypatch):
    """The rule table is not vacuous: a config module importing the trainer is reported with its line."""
    pkg = tmp_path / "minirl"
    (pkg / "config").mkdir(parents=True)
    (pkg / "trainer" / "ppo").mkdir(parents=True)
    (pkg / "config" / "bad.py").write_text("import os\n\ndef f():\n    from minirl.trainer.ppo import trainer_base\n")
    (pkg / "trainer" / "ppo" / "trainer_base.py").write_text("from minirl.config import bad\n")
    monkeypatch.setattr(import_graph, "ROOT", tmp_path)
    monkeypatch.setattr(import_graph, "PKG", pkg)
    bad = import_graph.violations()
    assert bad == [("minirl/config/bad.py:4: minirl.config -> minirl.trainer.ppo.trainer_base  "
                    "(config is a leaf: it imports no stage)")], bad
    assert import_graph.cycles() == [["minirl.config", "minirl.trainer.ppo"]]


def test_config_loads_without_any_stage_or_torch():
    """`minirl.config.load` imports only config and utils: no trainer, worker, agent loop, and no torch."""
    code = ("import sys; import minirl.config as c; c.load(['algorithm.adv_estimator=gae']); "
            "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('minirl.')}), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "['config', 'utils'] False", out
