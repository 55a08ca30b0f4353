"""The tracer: what a span records, crash safety, the views (show, lineage, diff), plots, CLI, comparison.

Runs on small hand-built batches and on the reference traces committed in traces/ (no training run;
tests/e2e/test_trace_regression.py re-runs those).
"""
import ast
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from minirl.cli import main as cli_main
from minirl.protocol import DataProto
from minirl.trace import STAGE_INFO, NullTracer, Tracer, diff, lineage, query, read_trace, show
from minirl.trace.compare import ATOL, RTOL, compare_traces
from minirl.trace.recorder import config_fingerprint, tensor_summary
from minirl.trace.reference import load_manifest, reference_path
from minirl.trace.schema import SCHEMA_VERSION, TraceNotFound, resolve_run

ROOT = Path(__file__).resolve().parents[2]


def small_batch():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    return DataProto.from_dict(
        tensors={"responses": torch.tensor([[5, 6, 0], [7, 0, 0]]), "response_mask": mask,
                 "old_log_probs": torch.tensor([[-1.0, -2.0, -9.0], [-4.0, -9.0, -9.0]])},
        non_tensors={"uid": np.array(["a", "b"], dtype=object)}, meta_info={"temperature": 1.0})


def stage_events(path):
    return [e for e in read_trace(path) if e["kind"] == "stage"]


# ------------------------------------------------------------------------------------------- recorder
def test_span_records_added_changed_removed_read_with_shapes_and_masked_summary(tmp_path):
    tr = Tracer(tmp_path, level="fields", config={"a": 1}, meta={"adv_estimator": "grpo"})
    tr.versions = {"actor": 3, "rollout": 3}
    b = small_batch()
    with tr.span("advantage", b, step=2, role="trainer", reads=["response_mask", "uid"]) as info:
        b.batch["advantages"] = torch.tensor([[1.0, 2.0, 50.0], [4.0, 60.0, 70.0]])
        b.batch["old_log_probs"].mul_(2)  # in place
        b.batch["responses"] = b.batch["responses"].clone()  # a copy with the same values: not a change
        b.non_tensor_batch.pop("uid")
        info["note"] = 7
    tr.close()
    start, ev = read_trace(tmp_path)[0], stage_events(tmp_path)[0]
    assert start["kind"] == "run_start" and start["schema"] == SCHEMA_VERSION and start["adv_estimator"] == "grpo"
    assert (ev["stage"], ev["step"], ev["role"], ev["rank"], ev["device"]) == ("advantage", 2, "trainer", 0, "cpu")
    assert ev["added"] == ["advantages"] and ev["removed"] == ["uid"] and ev["read"] == ["response_mask", "uid"]
    assert ev["changed"] == ["old_log_probs"] and ev["changes"] == {"old_log_probs": "values (in place)"}
    assert ev["versions"] == {"actor": 3, "rollout": 3} and ev["extra"] == {"note": 7} and ev["status"] == "ok"
    adv = ev["fields"]["advantages"]
    assert (adv["storage"], adv["shape"], adv["dtype"], adv["device"]) == ("batch", [2, 3], "float32", "cpu")
    # over the 3 valid tokens only (1, 2, 4): the 50/60/70 in padding never enter the summary
    assert adv["summary"] == {"masked_by": "response_mask", "valid": 3, "mean": pytest.approx(7 / 3), "min": 1.0, "max": 4.0}
    assert ev["fields"]["old_log_probs"]["summary"]["mean"] == pytest.approx((-2 - 4 - 8) / 3)
    assert "summary" not in ev["fields"]["responses"]  # unchanged fields carry no summary
    assert ev["fields"]["temperature"] == {"storage": "meta_info", "shape": [], "dtype": "float", "device": "-", "value": 1.0}
    assert ev["removed_fields"]["uid"]["storage"] == "non_tensor_batch"
    assert read_trace(tmp_path)[-1]["kind"] == "run_end"


def test_summary_counts_nonfinite_valid_entries_only():
    mask = torch.tensor([[1, 1, 0]])
    v = torch.tensor([[float("nan"), 3.0, float("nan")]])
    s = tensor_summary("x", v, {"response_mask": mask})
    assert s["valid"] == 2 and s["nonfinite"] == 1 and math.isnan(s["mean"])
    assert tensor_summary("response_mask", mask.float(), {"response_mask": mask})["mean"] == pytest.approx(2 / 3)
    assert tensor_summary("x", torch.tensor([1.0, 3.0]), {}) == {"mean": 2.0, "min": 1.0, "max": 3.0}


def test_new_batch_via_info_and_stages_level(tmp_path):
    tr = Tracer(tmp_path, level="stages")
    b = small_batch()
    with tr.span("sample", b, step=1, role="rollout") as info:
        info["_batch"] = b.repeat(repeat_times=2, interleave=True)
    tr.close()
    ev = stage_events(tmp_path)[0]
    assert "fields" not in ev and sorted(ev["present"]) == sorted(["responses", "response_mask", "old_log_probs",
                                                                  "uid", "temperature"])
    assert ev["changes"]["uid"] == "shape [2] -> [4]" and ev["changes"]["responses"] == "shape [2, 3] -> [4, 3]"
    assert "temperature" not in ev["changed"]  # same value, new dict: not a change


def test_versions_after_error_status_and_bad_level(tmp_path):
    state = {"actor": 0}
    tr = Tracer(tmp_path, level="fields")
    tr.version_source = lambda: dict(state)
    with tr.span("update_actor", None, step=1, role="actor"):
        state["actor"] = 1
    with pytest.raises(RuntimeError, match="boom"), tr.span("reward", small_batch(), step=1, role="reward"):
        raise RuntimeError("boom")
    tr.close()
    upd, bad = stage_events(tmp_path)
    assert upd["versions"] == {"actor": 0} and upd["versions_after"] == {"actor": 1}
    assert bad["status"] == "error" and bad["error"] == "RuntimeError: boom"
    with pytest.raises(ValueError, match="use one of off, stages, fields"):
        Tracer(tmp_path, level="everything")
    with NullTracer().span("x", None, extra={"k": 1}) as info:
        assert info == {"k": 1}
    off = Tracer(tmp_path / "off", level="off")
    with off.span("x", small_batch(), extra={"k": 2}) as info:
        assert info == {"k": 2}
    off.close()
    assert not (tmp_path / "off").exists()  # level off writes nothing, not even a directory


def test_config_fingerprint_ignores_machine_paths():
    a = {"trainer": {"default_local_dir": "/tmp/x", "seed": 1}, "model": {"path": "/home/u/.cache/m"}}
    b = {"trainer": {"default_local_dir": "/scratch/y", "seed": 1}, "model": {"path": "/opt/m"}}
    assert config_fingerprint(a) == config_fingerprint(b)
    assert config_fingerprint(a) != config_fingerprint({**a, "trainer": {"default_local_dir": "/tmp/x", "seed": 2}})


# ------------------------------------------------------------------------------------- crash safety
def test_torn_line_is_skipped_and_ended_by_the_next_writer(tmp_path):
    tr = Tracer(tmp_path, level="stages", run_id="first")
    with tr.span("reward", small_batch(), step=1):
        pass
    tr._write({"kind": "never"})  # stand-in for a killed write: cut the last line in half below
    os.close(tr._fd)
    path = tmp_path / "trace.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 8])
    assert [e["kind"] for e in read_trace(tmp_path)] == ["run_start", "stage"] and read_trace.last_torn == 1
    tr2 = Tracer(tmp_path, level="stages", run_id="second")  # a resumed run appends to the same file
    tr2.close()
    events = read_trace(tmp_path)
    assert [(e["run_id"], e["kind"]) for e in events] == [("first", "run_start"), ("first", "stage"),
                                                          ("second", "run_start"), ("second", "run_end")]
    assert read_trace.last_torn == 1 and [e["kind"] for e in read_trace(tmp_path, run_id="second")] == ["run_start", "run_end"]


def test_killed_writer_leaves_a_valid_trace(tmp_path):
    code = ("import torch, sys\nfrom minirl.trace import Tracer\n"
            "tr = Tracer(sys.argv[1], level='fields')\nb = {'x': torch.randn(64, 256)}\n"
            "print('ready', flush=True)\ni = 0\n"
            "while True:\n    i += 1\n    with tr.span('stage', b, step=i) as info:\n        b['x'] = b['x'] + 1\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    p.send_signal(signal.SIGKILL)
    p.wait()
    events = read_trace(tmp_path)  # parses: every complete line is a valid event
    steps = [e["step"] for e in events if e["kind"] == "stage"]
    assert len(steps) > 5 and steps == list(range(1, len(steps) + 1)) and read_trace.last_torn <= 1


# ---------------------------------------------------------------------------------------- stage table
def test_stage_info_cites_verl_symbols_and_minirl_methods_that_exist():
    from minirl.anchors import load_index

    idx = load_index()
    for stage, info in STAGE_INFO.items():
        for qual, where in info.verl:
            path, line = where.rsplit(":", 1)
            assert idx.by_name[path][qual] == int(line), (stage, qual, where)
    defs = set()
    for module in ("trainer_base", "trainer_sync"):
        tree = ast.parse((ROOT / f"minirl/trainer/ppo/{module}.py").read_text())
        defs |= {f"{c.name}.{f.name}" for c in tree.body if isinstance(c, ast.ClassDef)
                 for f in c.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for stage, info in STAGE_INFO.items():
        assert info.minirl in defs, (stage, info.minirl)


# -------------------------------------------------------------------------------- views on references
@pytest.fixture(scope="module")
def grpo():
    return query.load("grpo")


@pytest.fixture(scope="module")
def ppo():
    return query.load("ppo_gae")


def test_lineage_of_advantages_in_the_grpo_reference(grpo):
    lin = lineage.lineage(grpo, "advantages")
    assert [p["stage"] for p in lin["producers"]] == ["advantage"]
    assert "compute_advantage" in lin["producers"][0]["text"]
    assert [c["stage"] for c in lin["consumers"]] == ["update_actor"]
    assert lin["shape_symbolic"] == "(B, response_length)" and lin["storage"] == "batch"
    assert lin["shape"] == [lin["dims"]["B"], lin["dims"]["response_length"]] and lin["mask"] == "response_mask"
    assert "last read by `update_actor`" in lin["lifetime"] and "end of the step" in lin["lifetime"]
    text = lineage.format_lineage(lin)
    assert "producer  advantage" in text and "verl/trainer/ppo/ray_trainer.py:187" in text


def test_diff_grpo_vs_ppo_lists_values_returns_and_critic_stages(grpo, ppo):
    d = diff.diff(grpo, ppo)
    assert d["stages"]["only_a"] == [] and d["stages"]["only_b"] == ["values", "update_critic"]
    assert all("critic" in b["runs_when"] for b in d["branches"])
    assert d["fields"]["only_b"] == ["values"] and d["fields"]["only_a"] == []
    assert {"field": "returns", "what": "consumers", "a": [], "b": ["update_critic"]} in d["flow"]
    assert d["versions"]["models_only_b"] == ["critic"]
    assert ("algorithm.adv_estimator", "grpo", "gae") in d["config"]
    text = diff.format_diff(d, "grpo", "ppo_gae")
    assert "only in B: values" in text and "only in B: update_critic" in text and "returns: consumers" in text


def test_show_table_cells(grpo):
    t = show.show_table(grpo, 1)
    stages = [s["stage"] for s in t["stages"]]
    # the reward is scored per session inside the rollout (verl V1: the reward loop), so no reward stage follows
    assert stages[:3] == ["rollout", "sample", "balance_batch"] and "reward" not in stages and "update_actor" in stages
    row = {r["name"]: dict(zip(stages, r["cells"])) for r in t["fields"]}
    assert row["advantages"]["advantage"] == "+" and row["advantages"]["update_actor"] == "r"
    # the agent loop writes responses into the TransferQueue (rollout); sample materialises them (changed storage)
    assert row["advantages"]["sample"] == "" and row["responses"]["rollout"] == "+" and row["responses"]["sample"] == "~"
    assert row["old_log_probs"]["old_log_prob"] == "+" and row["rm_scores"]["rollout"] == "+"
    assert row["rm_scores"]["advantage"] == "r"  # the score enters the advantage, not a later reward stage
    with pytest.raises(query.TraceQueryError, match=r"steps recorded: \[0, 1, 2\]"):
        show.show_table(grpo, 99)


def test_plots_carry_the_stage_and_field_labels(grpo):
    from minirl.trace import plots

    fig = plots.lifecycle_timeline(grpo, step=1)
    ax = fig.axes[0]
    ylabels = [t.get_text() for t in ax.get_yticklabels()]
    assert ylabels[:3] == ["rollout (rollout)", "sample (trainer)", "balance_batch (trainer)"] and "advantage (trainer)" in ylabels
    assert ax.get_title() == "step 1: stage timeline" and len(ax.patches) == len(ylabels)
    assert any("advantages" in t.get_text() for t in ax.texts)
    fig = plots.field_lineage_chart(grpo, "advantages")
    ax = fig.axes[0]
    xlabels = [t.get_text() for t in ax.get_xticklabels()]
    assert xlabels.index("advantage") < xlabels.index("update_actor")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["step 1", "step 2"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["added", "read"]
    assert "(B, response_length)" in ax.get_title()


def test_field_lineage_rows_and_the_lineage_plot_of_one_step(grpo):
    from minirl.trace import plots

    rows = {r["field"]: r for r in lineage.field_lineage(grpo, step=1)}
    assert rows["advantages"]["made_by"] == "advantage" and rows["advantages"]["read_by"] == "update_actor"
    assert rows["data_source"]["made_by"] == "dataset" and rows["data_source"]["read_by"] == "rollout"  # the reward loop
    assert rows["uid"]["made_by"] == "dataset" and rows["uid"]["storage"] == "non_tensor_batch"  # the trainer's uid
    assert rows["responses"]["made_by"] == "rollout" and rows["responses"]["storage"] == "transfer_queue"
    assert rows["input_ids"]["made_by"] == "sample"  # built by the data plane when the batch is read out
    assert rows["old_log_probs"]["shape (symbolic)"] == "(B, response_length)"
    ax = plots.plot_lineage(grpo, step=1, fields=["responses", "advantages"]).axes[0]
    xlabels = [t.get_text() for t in ax.get_xticklabels()]
    assert xlabels[0] == "dataset" and "update_weights" not in xlabels and "advantage" in xlabels
    assert [t.get_text() for t in ax.get_yticklabels()] == ["responses", "advantages"]
    assert ax.get_title() == "field lineage, step 1"


def test_stage_events_are_in_start_order_and_versions_per_stage(grpo):
    late_written = [dict(e) for e in grpo]  # the same events, stage events written in reverse
    stages = [e for e in late_written if e.get("kind") == "stage"]
    late_written = [e for e in late_written if e.get("kind") != "stage"] + stages[::-1]
    assert [(e["step"], e["stage"]) for e in query.stage_events(late_written)] == \
        [(e["step"], e["stage"]) for e in query.stage_events(grpo)]
    hist = diff.version_history(grpo)
    sample2 = next(h for h in hist if h["step"] == 2 and h["stage"] == "sample")
    assert sample2["actor"] == sample2["rollout"] == 1  # step 1's update reached the rollout before step 2


# ------------------------------------------------------------------------------------------------ CLI
def test_cli_lineage_show_diff_and_one_line_errors(capsys, tmp_path):
    assert cli_main(["trace", "lineage", "grpo", "advantages"]) == 0
    out = capsys.readouterr().out
    assert "producer  advantage" in out and "compute_advantage" in out and "consumers update_actor" in out
    assert "(B, response_length)" in out
    assert cli_main(["trace", "show", "grpo", "--step", "1"]) == 0
    assert "step 1" in capsys.readouterr().out
    assert cli_main(["trace", "diff", "grpo", "ppo_gae"]) == 0
    assert "only in B: values" in capsys.readouterr().out
    assert cli_main(["trace", "show", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no trace at" in err and "grpo" in err
    assert cli_main(["trace", "lineage", "grpo", "advantage"]) == 2
    err = capsys.readouterr().err
    assert "no field 'advantage'" in err and "advantages" in err
    assert cli_main(["trace", "show", "grpo", "--step", "9"]) == 2


def test_resolve_run_accepts_dir_file_run_dir_and_name(tmp_path):
    Tracer(tmp_path / "run" / "trace", level="stages").close()
    for run in (tmp_path / "run", tmp_path / "run" / "trace", tmp_path / "run" / "trace" / "trace.jsonl"):
        assert read_trace(resolve_run(run))[0]["kind"] == "run_start"
    assert resolve_run("grpo") == reference_path("grpo").parent
    with pytest.raises(TraceNotFound, match="recorded there: .*grpo"):
        resolve_run(tmp_path / "missing")


# ----------------------------------------------------------------------------------------- comparison
def test_compare_traces_tolerates_noise_and_catches_changes(grpo):
    assert compare_traces(grpo, grpo) == []

    def perturbed(fn):
        ev = json.loads(json.dumps(grpo))
        fn(next(e for e in ev if e.get("stage") == "advantage" and e["step"] == 1))
        return ev

    def scale(f):
        return lambda e: e["fields"]["advantages"]["summary"].update(max=e["fields"]["advantages"]["summary"]["max"] * f)

    assert compare_traces(grpo, perturbed(scale(1 + 1e-6))) == []  # float noise of another CPU
    bad = compare_traces(grpo, perturbed(scale(1.01)))
    assert len(bad) == 1 and "advantages summary" in bad[0] and bad[0].startswith("step 1 advantage")
    bad = compare_traces(grpo, perturbed(lambda e: e["fields"]["advantages"].update(shape=[1, 1])))
    assert bad == ["step 1 advantage: fields advantages shape [16, 8] -> [1, 1]"]
    bad = compare_traces(grpo, perturbed(lambda e: e.update(versions={"actor": 9, "rollout": 0})))
    assert len(bad) == 1 and "versions" in bad[0]
    swapped = [e for e in grpo if e.get("stage") != "balance_batch"]
    assert "stage sequence differs" in compare_traces(grpo, swapped)[0]


def test_manifest_tolerance_and_recorded_traces_are_small():
    man = load_manifest()
    assert man["tolerance"] == {"rtol": RTOL, "atol": ATOL}
    for name, entry in man["traces"].items():
        assert entry["overrides"] and isinstance(entry["requires"], list), name
        p = reference_path(name)
        if p.exists():
            assert p.stat().st_size < 200_000, name
            assert read_trace(p)[0]["config"]["trainer"]["default_local_dir"] == "<path>"  # no machine paths
    assert reference_path("grpo").exists() and reference_path("ppo_gae").exists()
