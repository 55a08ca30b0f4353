"""Bad input through `minirl train`: one clear line, exit code 2, no traceback, before any step runs.

Each case writes one bad input into a temporary directory (a data file, a checkpoint, a path) and
feeds it to the real entry point in this process (`minirl.trainer.main_ppo.main`, what `minirl train`
runs). The check is the same for all: exit code 2, no traceback, exactly one problem line on stderr
(besides the `MINIRL_DEBUG` hint) that contains what the case names (the file, the row or column)
and a `Fix:`; and nothing trained: data cases fail before any worker is built, checkpoint cases
before the first step.

The suite's other bad-input tables count towards the same goal (at least 40 distinct bad inputs,
each answered in one line with exit code 2): bad config values (`tests/unit/test_bad_config.py`), files
given to `minirl trace` (`tests/unit/test_trace_cli.py`), reward functions (`tests/unit/test_reward_inputs.py`)
and NaN/inf during a run (`tests/unit/test_nonfinite.py`); `test_the_suite_feeds_at_least_40_bad_inputs`
counts them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import minirl.trainer.main_ppo
from minirl.data.tasks import make_arithmetic_rows, write_parquet

ROOT = Path(__file__).resolve().parents[2]
HINT = "(set MINIRL_DEBUG=1"
BASE = ["actor_rollout_ref.model.path=minirl://tiny-qwen2", "data.train_batch_size=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "data.max_response_length=8",
        "data.val_files=null", "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.logger=[]",
        "trace.level=off"]



@pytest.fixture(autouse=True)
def _no_progress_bar(monkeypatch):
    monkeypatch.setenv("MINIRL_NO_PROGRESS", "1")  # the bar writes to stderr, where the one line must stand alone

def one_problem_line(err: str, *parts: str) -> str:
    """The single problem line of `err`; it must contain every one of `parts` and a `Fix:`."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(HINT)]
    assert len(lines) == 1, f"expected one problem line, got {len(lines)}:\n{err}"
    for part in (*parts, "Fix"):
        assert part in lines[0], f"{part!r} is not in the line:\n{lines[0]}"
    return lines[0]


def rows(n: int = 16, **change) -> list[dict]:
    """`n` good arithmetic rows in verl's format, with `change` applied to each (None deletes a column)."""
    out = make_arithmetic_rows(n, seed=0, split="train")
    for row in out:
        for key, value in change.items():
            if value is None:
                row.pop(key)
            else:
                row[key] = value
    return out


def good_file(d: Path, name: str = "good.parquet") -> str:
    return write_parquet(rows(), str(d / name))


# ---------------------------------------------------------------------------------------------- data
def _directory(d):
    (d / "data").mkdir()
    return ["data.train_files=" + str(d / "data")], [str(d / "data"), "is a directory"]


def _jsonl(d):
    (d / "train.jsonl").write_text('{"prompt": "What is 1+1?"}\n')
    return [f"data.train_files={d / 'train.jsonl'}"], ["train.jsonl", "reads .parquet files, not .jsonl"]


def _csv_named_parquet(d):
    (d / "train.parquet").write_text("data_source,prompt\nminirl/arithmetic,What is 1+1?\n")
    return [f"data.train_files={d / 'train.parquet'}"], ["train.parquet", "not a parquet file (it starts with b'data'"]


def _empty(d):
    (d / "train.parquet").write_bytes(b"")
    return [f"data.train_files={d / 'train.parquet'}"], ["train.parquet", "the file is empty (0 bytes)"]


def _truncated(d):
    data = Path(good_file(d)).read_bytes()
    (d / "cut.parquet").write_bytes(data[: len(data) // 2])
    return [f"data.train_files={d / 'cut.parquet'}"], ["cut.parquet", "truncated or corrupt parquet"]


def _unreadable(d):
    path = good_file(d)
    os.chmod(path, 0)
    return [f"data.train_files={path}"], ["good.parquet", "cannot be read (Permission denied)"]


def _no_rows(d):
    pq.write_table(pa.Table.from_pylist(rows(1)).slice(0, 0), str(d / "none.parquet"))
    return [f"data.train_files={d / 'none.parquet'}"], ["none.parquet", "has no rows"]


def _columns(d, name, **change):
    path = write_parquet(rows(**change), str(d / name))
    return [f"data.train_files={path}"]


def _missing_prompt(d):
    return _columns(d, "q.parquet", prompt=None), ["q.parquet", "no 'prompt' column", "data.prompt_key"]


def _prompt_key_typo(d):
    return [f"data.train_files={good_file(d)}", "data.prompt_key=question"], ["no 'question' column"]


def _missing_data_source(d):
    return _columns(d, "n.parquet", data_source=None), ["n.parquet", "no 'data_source' column", "data.reward_fn_key"]


def _missing_reward_model(d):
    return _columns(d, "n.parquet", reward_model=None), ["n.parquet", "no 'reward_model' column", "ground_truth"]


def _no_ground_truth(d):
    return _columns(d, "g.parquet", reward_model={"style": "rule"}), \
        ["g.parquet", "row 0: reward_model is {'style': 'rule'}, not a dict with 'ground_truth'"]


def _prompt_is_text(d):
    return _columns(d, "t.parquet", prompt="What is 1+1?"), ["t.parquet", "row 0: 'prompt' is a string"]


def _message_without_role(d):
    return _columns(d, "r.parquet", prompt=[{"content": "What is 1+1?"}]), ["r.parquet", "row 0: 'prompt' message 0"]


def _empty_prompt(d):
    bad = rows()
    bad[5]["prompt"] = []
    return [f"data.train_files={write_parquet(bad, str(d / 'e.parquet'))}"], ["e.parquet", "row 5", "non-empty list"]


def _fewer_rows_than_a_batch(d):
    path = write_parquet(rows(3), str(d / "three.parquet"))
    return [f"data.train_files={path}"], ["three.parquet", "3 prompts, fewer than one batch", "data.train_batch_size=8"]


def _overlong_prompt(d):
    bad = rows()
    bad[4]["prompt"] = [{"role": "user", "content": "x" * 60}]
    path = write_parquet(bad, str(d / "long.parquet"))
    return [f"data.train_files={path}"], ["long.parquet", "row 4", "-token prompt, more than data.max_prompt_length=40"]


def _every_prompt_overlong(d):
    path = _columns(d, "long.parquet", prompt=[{"role": "user", "content": "x" * 60}])
    return [*path, "data.filter_overlong_prompts=true"], ["every one of the 16 prompts is longer"]


def _filtered_below_a_batch(d):
    bad = rows(10)
    for row in bad[:4]:
        row["prompt"] = [{"role": "user", "content": "x" * 60}]
    path = write_parquet(bad, str(d / "some_long.parquet"))
    return [f"data.train_files={path}", "data.filter_overlong_prompts=true"], \
        ["6 prompts after dropping 4 over-long prompts, fewer than one batch"]


def _second_file_bad(d):
    (d / "b.parquet").write_bytes(b"PAR1" + b"\x00" * 64)
    return [f"data.train_files=[{good_file(d)},{d / 'b.parquet'}]"], ["b.parquet", "truncated or corrupt"]


def _bad_val_file(d):
    (d / "val.parquet").write_text("not parquet")
    return [f"data.train_files={good_file(d)}", f"data.val_files={d / 'val.parquet'}"], ["val.parquet", "not a parquet"]


def _missing_train_file(d):
    return [f"data.train_files={d / 'nope.parquet'}"], ["data.train_files: no such file", "nope.parquet"]


def _missing_val_file(d):
    return [f"data.train_files={good_file(d)}", f"data.val_files={d / 'nope.parquet'}"], \
        ["data.val_files: no such file"]


def _missing_model(d):
    return [f"actor_rollout_ref.model.path={d / 'no_model'}"], ["no_model", "does not exist"]


def _model_empty_dir(d):
    (d / "empty_model").mkdir()
    return [f"actor_rollout_ref.model.path={d / 'empty_model'}"], ["empty_model", "has no config.json"]


def _model_bad_config(d):
    (d / "m").mkdir()
    (d / "m" / "config.json").write_text("{not json")
    return [f"actor_rollout_ref.model.path={d / 'm'}"], ["config.json cannot be read (JSONDecodeError"]


def _model_without_weights(d):
    (d / "m").mkdir()
    (d / "m" / "config.json").write_text('{"model_type": "qwen2"}')
    return [f"actor_rollout_ref.model.path={d / 'm'}"], ["has a config.json but no weights"]


def _model_unknown_preset(d):
    return ["actor_rollout_ref.model.path=minirl://tiny-llama"], ["'minirl://tiny-llama': no such embedded model"]


def _model_hub_id_offline(d):  # the suite runs with HF_HUB_OFFLINE=1 (tests/conftest.py): no hub to ask
    return ["actor_rollout_ref.model.path=nobody-here/no-such-model"], \
        ["actor_rollout_ref.model.path='nobody-here/no-such-model': its tokenizer cannot be loaded", "HF_HUB_OFFLINE=1"]


def _model_path_is_a_file(d):
    (d / "model.safetensors").write_bytes(b"x")
    return [f"actor_rollout_ref.model.path={d / 'model.safetensors'}"], ["is a file, not a model directory"]


def _output_dir_under_a_file(d):
    (d / "a_file").write_text("x")
    return [f"trainer.default_local_dir={d / 'a_file' / 'run'}"], ["trainer.default_local_dir=", "is a file"]


def _ray_address_unreachable(d):
    import socket

    with socket.socket() as s:  # a free port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [f"ray_kwargs.ray_init.address=127.0.0.1:{port}"], [f"nothing answers at 127.0.0.1:{port}",
                                                                 "ray_kwargs.ray_init.address=null"]


def _warmup_larger_than_the_data(d):
    return [f"data.train_files={good_file(d)}", "trainer.v1.trainer_mode=colocate_async",
            "trainer.v1.colocate_async.num_warmup_batches=2"], \
        ["trainer.v1.colocate_async.num_warmup_batches=2", "holds 16 prompts, 2 batch(es)"]


def _unknown_builtin_task(d):
    return ["data.train_files=minirl://sudoku/train"], ["unknown built-in task 'sudoku'"]


SETUP_CASES = {
    "data_directory": _directory,
    "data_jsonl": _jsonl,
    "data_csv_named_parquet": _csv_named_parquet,
    "data_empty_file": _empty,
    "data_truncated_file": _truncated,
    "data_unreadable_file": pytest.param(_unreadable, marks=pytest.mark.skipif(
        os.geteuid() == 0, reason="root reads any file")),
    "data_no_rows": _no_rows,
    "data_missing_prompt_column": _missing_prompt,
    "data_prompt_key_typo": _prompt_key_typo,
    "data_missing_data_source": _missing_data_source,
    "data_missing_reward_model": _missing_reward_model,
    "data_no_ground_truth": _no_ground_truth,
    "data_prompt_is_text": _prompt_is_text,
    "data_message_without_role": _message_without_role,
    "data_empty_prompt": _empty_prompt,
    "data_fewer_rows_than_a_batch": _fewer_rows_than_a_batch,
    "data_overlong_prompt": _overlong_prompt,
    "data_every_prompt_overlong": _every_prompt_overlong,
    "data_filtered_below_a_batch": _filtered_below_a_batch,
    "data_second_file_bad": _second_file_bad,
    "data_bad_val_file": _bad_val_file,
    "data_missing_train_file": _missing_train_file,
    "data_missing_val_file": _missing_val_file,
    "data_unknown_builtin_task": _unknown_builtin_task,
    "model_missing": _missing_model,
    "model_empty_dir": _model_empty_dir,
    "model_bad_config_json": _model_bad_config,
    "model_without_weights": _model_without_weights,
    "model_unknown_preset": _model_unknown_preset,
    "model_path_is_a_file": _model_path_is_a_file,
    "model_hub_id_offline": _model_hub_id_offline,
    "output_dir_under_a_file": _output_dir_under_a_file,
    "ray_address_unreachable": _ray_address_unreachable,
    "async_warmup_larger_than_the_data": _warmup_larger_than_the_data,
}


@pytest.fixture
def no_workers(monkeypatch):
    """A tripwire on the first thing that builds models: set-up errors must come before it."""
    def tripwire(self):
        raise AssertionError("workers were built for a run that should have been rejected")

    monkeypatch.setattr("minirl.trainer.ppo.trainer_base.PPOTrainer.init_workers", tripwire)


@pytest.mark.parametrize("make", list(SETUP_CASES.values()), ids=list(SETUP_CASES))
def test_bad_setup_input_is_one_line_and_exit_2(make, tmp_path, capsys, no_workers):
    overrides, parts = make(tmp_path)
    code = minirl.trainer.main_ppo.main([*BASE, f"trainer.default_local_dir={tmp_path / 'run'}", *overrides])
    assert code == 2
    one_problem_line(capsys.readouterr().err, *parts)


def test_minirl_debug_keeps_the_traceback(tmp_path, monkeypatch):
    from minirl.data import DataError

    overrides, _ = _truncated(tmp_path)
    monkeypatch.setenv("MINIRL_DEBUG", "1")
    with pytest.raises(DataError, match="truncated or corrupt"):
        minirl.trainer.main_ppo.main([*BASE, f"trainer.default_local_dir={tmp_path / 'run'}", *overrides])


def test_the_installed_command_prints_one_line(tmp_path):
    overrides, _ = _no_ground_truth(tmp_path)
    env = {**os.environ, "MINIRL_NO_PROGRESS": "1"}
    env.pop("MINIRL_DEBUG", None)
    out = subprocess.run([sys.executable, "-m", "minirl.trainer.main_ppo", *BASE,
                          f"trainer.default_local_dir={tmp_path / 'run'}", *overrides],
                         check=False, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert out.returncode == 2, out.stderr
    line = one_problem_line(out.stderr, "g.parquet", "row 0")
    assert line.startswith("minirl train: ")


# --------------------------------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """One step of a real run with a checkpoint (global_step_1, marked latest)."""
    root = tmp_path_factory.mktemp("saved") / "run"
    good = good_file(root.parent)
    assert minirl.trainer.main_ppo.main([*BASE, f"data.train_files={good}", f"trainer.default_local_dir={root}",
                                         "trainer.total_training_steps=1", "trainer.save_freq=1"]) == 0
    assert (root / "latest_checkpointed_iteration.txt").read_text() == "1"
    return root, good


def _truncate(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _zero(path: Path) -> Path:
    path.write_bytes(b"\x00" * path.stat().st_size)  # same size: only the load itself can tell
    return path


def _latest(run: Path, text: str) -> Path:
    (run / "latest_checkpointed_iteration.txt").write_text(text)
    return run / "latest_checkpointed_iteration.txt"


def _latest_points_nowhere(run):
    _latest(run, "7")
    return run / "global_step_7", "no checkpoint to resume from (the folder does not exist)"


def _latest_not_a_number(run):
    return _latest(run, "1\x00x"), "not a step number"


def _truncated_trainer_state(run):
    return _truncate(run / "global_step_1" / "trainer_state.pt"), "the file is truncated"


def _truncated_engine_shard(run):
    return _truncate(next((run / "global_step_1" / "actor").glob("*.distcp"))), "the file is truncated"


def _missing_engine_file(run):
    extra = next((run / "global_step_1" / "actor").glob("extra_state*"))
    extra.unlink()
    return extra, "missing from the checkpoint"


def _corrupt_trainer_state(run):
    return _zero(run / "global_step_1" / "trainer_state.pt"), "cannot be loaded"


def _corrupt_engine_metadata(run):
    return _zero(run / "global_step_1" / "actor" / ".metadata"), "cannot be loaded"


def _engine_state_of_another_model(run):
    """Every file whole and readable, but not this model's: only the engine's own load can tell."""
    import torch.distributed.checkpoint as dcp

    actor = run / "global_step_1" / "actor"
    for p in actor.glob("*.distcp"):
        p.unlink()
    (actor / ".metadata").unlink()
    (run / "global_step_1" / "manifest.json").unlink()  # as a checkpoint from before manifests
    dcp.save({"model": {"w": torch.zeros(3)}}, checkpoint_id=str(actor), no_dist=True)
    return actor, "the engine state cannot be loaded"


CHECKPOINT_CASES = {  # name -> damage(run dir) -> (the path the line must name, what else it must say)
    "ckpt_latest_points_nowhere": _latest_points_nowhere,
    "ckpt_latest_not_a_number": _latest_not_a_number,
    "ckpt_truncated_trainer_state": _truncated_trainer_state,
    "ckpt_truncated_engine_shard": _truncated_engine_shard,
    "ckpt_missing_engine_file": _missing_engine_file,
    "ckpt_corrupt_trainer_state_same_size": _corrupt_trainer_state,
    "ckpt_corrupt_engine_metadata_same_size": _corrupt_engine_metadata,
    "ckpt_engine_state_of_another_model": _engine_state_of_another_model,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CHECKPOINT_CASES))
def test_a_damaged_checkpoint_is_named_in_one_line(name, saved_run, tmp_path, capsys, monkeypatch):
    src, good = saved_run
    run = tmp_path / "run"
    shutil.copytree(src, run)
    named, words = CHECKPOINT_CASES[name](run)
    monkeypatch.setattr("minirl.trainer.ppo.trainer_base.PPOTrainer.fit",
                        lambda self: pytest.fail("a run resumed from a damaged checkpoint"))
    code = minirl.trainer.main_ppo.main([*BASE, f"data.train_files={good}", f"trainer.default_local_dir={run}",
                                         "trainer.total_training_steps=2"])
    assert code == 2
    one_problem_line(capsys.readouterr().err, str(named), words)


# ---------------------------------------------------------------------------------------- tool configs
TOOL_YAML = """tools:
  - class_name: {module}.{cls}
    config: {{type: native}}
    tool_schema:
      type: function
      function: {{name: calc, description: d, parameters: {{type: object, properties: {{}}}}}}
"""


def _tool(d, module: str, module_source: str, cls: str = "T"):
    (d / f"{module}.py").write_text(module_source)
    (d / "tools.yaml").write_text(TOOL_YAML.format(module=module, cls=cls))
    return ["actor_rollout_ref.rollout.multi_turn.enable=true",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={d / 'tools.yaml'}"]


_TOOL_HEAD = "from minirl.tools import BaseTool\nclass T(BaseTool):\n    def __init__(self, config, tool_schema=None):\n"
TOOL_CASES = {  # name -> (module source, class, what the line must say); the module is tools_<name>.py
    "init_raises_runtime_error": (_TOOL_HEAD + "        raise RuntimeError('sandbox unreachable')\n", "T",
                                  ["tools[0]", "T(config=..., tool_schema=...) raised RuntimeError: sandbox unreachable",
                                   "tools_init_raises_runtime_error.py:4"]),
    "init_raises_key_error": (_TOOL_HEAD + "        super().__init__(config, tool_schema)\n"
                              "        self.url = config['url']\n", "T",
                              ["raised KeyError: 'url'", "tools_init_raises_key_error.py:5"]),
    "module_raises_at_import": ("x = 1 / 0\n", "T", ["raised ZeroDivisionError", "tools_module_raises_at_import.py:1"]),
    "class_is_not_a_tool": ("class T:\n    pass\n", "T", ["has no BaseTool subclass 'T'"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TOOL_CASES))
def test_a_tool_that_does_not_build_is_one_line(name, tmp_path, capsys, monkeypatch):
    source, cls, parts = TOOL_CASES[name]
    monkeypatch.syspath_prepend(str(tmp_path))
    overrides = _tool(tmp_path, f"tools_{name}", source, cls)
    code = minirl.trainer.main_ppo.main([*BASE, f"trainer.default_local_dir={tmp_path / 'run'}", *overrides])
    assert code == 2
    line = one_problem_line(capsys.readouterr().err, "tool config", *parts)
    assert line.startswith("minirl train: ")


# ------------------------------------------------------------------------------------ the whole suite
def _table(test_file: str, *names: str) -> list:
    spec = importlib.util.spec_from_file_location(f"_bad_inputs_{Path(test_file).stem}", ROOT / "tests" / "unit" / test_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [case for name in names for case in getattr(module, name)]


def test_the_suite_feeds_at_least_40_bad_inputs():
    """Distinct bad inputs, each answered with one line and exit 2 by a parametrised test of the suite."""
    counts = {"setup (this file)": len(SETUP_CASES), "checkpoints (this file)": len(CHECKPOINT_CASES),
              "tool configs (this file)": len(TOOL_CASES),
              "config": len(_table("test_bad_config.py", "PPO_CASES", "SFT_CASES")),
              "trace files": len(_table("test_trace_cli.py", "BAD"))}
    for test_file, names in (("test_reward_inputs.py", ("STARTUP", "CONTAINED", "BATCH")),
                             ("test_nonfinite.py", ("CLI_CASES",))):
        if (ROOT / "tests" / "unit" / test_file).exists():
            try:
                counts[test_file] = len(_table(test_file, *names))
            except AttributeError:
                pass  # that file names its table differently: not counted here
    assert sum(counts.values()) >= 40, counts
