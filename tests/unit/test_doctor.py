"""`minirl doctor` and its fault injection (minirl/doctor/).

1. The fault-injection test (slow): one short run per fault, all in this process, plus two clean runs;
   the doctor must name the fault's layer and no other, and nothing for the clean runs. The
   faults x layers confusion table and the wall time of every run are printed.
2. `minirl doctor` on a clean run of the default config prints no finding (slow).
3. Quick checks: what each fault patches is restored afterwards; the doctor reads the trace without
   importing the trainer, the workers or torch; the CLI's one-line errors; checks that no fault run
   reaches (a partial sync, a NaN counted in metrics only, async staleness) on hand-written traces.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minirl.anchors import load_index
from minirl.doctor import LAYERS, diagnose, format_confusion, format_report, layers_named, load_run
from minirl.doctor.findings import VERL

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------ hand-written traces
def _write_trace(tmp_path: Path, events: list[dict], config: dict | None = None) -> Path:
    """A run dir whose trace/trace.jsonl holds `run_start` + `events` (what the tracer would write)."""
    trace = tmp_path / "run" / "trace"
    trace.mkdir(parents=True)
    rows = [{"kind": "run_start", "level": "fields", "config": config or {}}] + events + [{"kind": "run_end"}]
    with open(trace / "trace.jsonl", "w") as f:
        f.writelines(json.dumps({"schema": 2, "run_id": "r1", "seq": i, "t": float(i), **ev}) + "\n" for i, ev in enumerate(rows))
    return trace.parent


def _stage(stage: str, step: int, t: float, **kw) -> dict:
    return {"kind": "stage", "stage": stage, "step": step, "t_start": t, "wall_s": 0.5, "status": "ok",
            "added": [], "removed": [], "changed": [], "read": [], "versions": kw.pop("versions", {}),
            "extra": kw.pop("extra", {}), "fields": kw.pop("fields", {}), **kw}


def _metrics(step: int, **values) -> dict:
    return {"kind": "metrics", "step": step, "metrics": {k.replace("__", "/"): v for k, v in values.items()}}


def test_every_layer_has_a_fault_and_every_citation_is_a_verl_path():
    from minirl.doctor.faults import FAULTS

    assert {f.layer for f in FAULTS.values()} == set(LAYERS), "each of the seven layers needs a fault that breaks it"
    assert len(FAULTS) >= 8
    for fault in FAULTS.values():
        assert fault.overrides or fault.patch, f"{fault.name} neither patches nor overrides anything"
    index = load_index()  # verl's symbols at the pinned commit
    for symbol, where in VERL.values():
        path, line = where.rsplit(":", 1)
        assert index.by_name.get(path, {}).get(symbol) == int(line), f"{symbol} is not defined at {where}"


def test_inject_hooks_only_inside_the_block():
    """Each fault registers filters at documented hook points (`minirl.utils.hooks`) and removes them on exit."""
    from minirl.doctor.faults import inject
    from minirl.utils import hooks
    from minirl.utils.reward_score import gsm8k

    points = {
        "reward_parser_never_matches": ["reward.gsm8k.strict_pattern"],
        "all_equal_groups": ["trainer.before_advantage"],
        "mask_counts_padding": ["trainer.worker_input"],
        "micro_batch_exceeds_rank_share": ["config.batch_problems", "engine.prepare_micro_batches",
                                           "worker.actor_loss_fn"],
        "wrong_position_ids": ["transfer_queue.model_inputs"],
        "reference_moves": ["worker.after_update_actor"],
    }
    assert hooks.registered() == {}
    for name, expected in points.items():
        with inject(name):
            assert sorted(hooks.registered()) == sorted(expected), f"{name} hooked {sorted(hooks.registered())}"
        assert hooks.registered() == {}, f"{name} left a hook behind"
    for name in ("stale_rollout_weights", "exploding_lr"):  # config overrides only
        with inject(name) as fault:
            assert hooks.registered() == {} and fault.overrides
    assert gsm8k.compute_score("#### 46", "46") == 1.0
    with inject("reward_parser_never_matches"):
        assert gsm8k.compute_score("#### 46", "46") == 0.0  # the parser expects \boxed{46}
    with pytest.raises(ValueError, match="unknown fault 'nope'; the faults are: stale_rollout_weights"), inject("nope"):
        pass


def test_wrong_position_ids_count_the_left_padding():
    import torch

    from minirl import transfer_queue
    from minirl.doctor.faults import inject
    from minirl.transfer_queue import build_model_inputs as clean

    prompts, responses = torch.ones(1, 5, dtype=torch.long), torch.ones(1, 3, dtype=torch.long)
    args = (prompts, responses, torch.tensor([2]), torch.tensor([3]))  # 3 pad tokens on the left
    assert clean(*args)["position_ids"].tolist() == [[0, 0, 0, 0, 1, 2, 3, 4]]
    with inject("wrong_position_ids"):
        assert transfer_queue.build_model_inputs(*args)["position_ids"].tolist() == [[0, 0, 0, 0, 1, 5, 6, 7]]


def test_fault_runs_refuse_workers_in_other_processes():
    from minirl.doctor.faults import fault_run

    with pytest.raises(ValueError, match="faults hook this process"):
        fault_run("exploding_lr", ["trainer.n_gpus_per_node=2"])


def test_the_doctor_reads_the_trace_without_the_trainer_workers_or_torch():
    code = ("import sys; from minirl.doctor import diagnose; f = diagnose('grpo'); "
            "bad = sorted(m for m in sys.modules if m.startswith(('minirl.trainer', 'minirl.workers', 'torch')));"
            "print(len(f), bad)")
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "0 []", f"findings / modules the doctor imported: {out.stdout}"


@pytest.mark.parametrize("name", ["grpo", "ppo_gae"])
def test_the_reference_traces_are_healthy(name):
    findings = diagnose(name)
    assert findings == [], format_report(findings)


def test_cli_says_in_one_line_when_there_is_nothing_to_read(tmp_path, capsys):
    from minirl.cli import main

    assert main(["doctor", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("minirl doctor: no trace at") and "\n" not in err
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "critic/score/mean": 0.5}\n')
    assert main(["doctor", str(tmp_path / "metrics.jsonl")]) == 2
    assert "is a metrics log" in capsys.readouterr().err


def test_partial_sync_and_async_staleness(tmp_path):
    phases = [{"phase": "gather", "tensors": 27}, {"phase": "load", "tensors": 14}]
    run = _write_trace(tmp_path, [
        _stage("update_weights", 1, 1.0, extra={"phases": phases, "rollout/policy_version": 1},
               versions_after={"actor": 1}),
        _stage("sample", 2, 2.0, extra={"policy_versions": [1]}, versions={"actor": 1}),
        _metrics(2, training__rollout_actor_logprob_diff_mean=0.4),
    ])
    findings = diagnose(run)
    assert [(f.layer, f.check) for f in findings] == [("weight sync", "partial_weight_sync")], format_report(findings)
    assert "14 at step 1" in findings[0].evidence[0].line()  # the mismatch that follows is explained, not reported
    # async trainers sample from older versions on purpose: not a finding
    async_run = _write_trace(tmp_path / "a", [_stage("sample", 2, 2.0, extra={"policy_versions": [0]},
                                                     versions={"actor": 1})],
                             config={"trainer": {"v1": {"trainer_mode": "colocate_async"}}})
    assert diagnose(async_run) == []


def test_a_nan_counted_only_in_the_metrics_is_read_too(tmp_path, capsys):
    from minirl.cli import main

    run = _write_trace(tmp_path, [
        _stage("update_actor", 1, 1.0, extra={"micro_batch_size_per_rank": [4], "mini_batch_size_per_rank": [16]}),
        _metrics(1, nonfinite__advantage__advantages=3, critic__score__max=1.0, critic__score__min=0.0),
    ], config={"trainer": {"nonfinite": "skip"}})
    findings = diagnose(run)
    assert layers_named(findings) == ["advantage"] and findings[0].stage == "advantage", format_report(findings)
    assert "skipped: trainer.nonfinite=skip" in findings[0].title
    assert main(["doctor", str(run), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out[0]["layer"] == "advantage" and out[0]["evidence"][0]["step"] == 1


def test_a_reference_with_a_version_is_read_from_the_trace(tmp_path):
    run = _write_trace(tmp_path, [_stage("ref_log_prob", 2, 1.0, versions={"actor": 1, "ref": 1})])
    assert [f.check for f in diagnose(run)] == ["reference_moves"]


# ------------------------------------------------------------------------------------ the fault matrix
@pytest.mark.slow
def test_each_fault_is_named_by_its_layer_and_no_other(tmp_path, capsys):
    from minirl.doctor.faults import FAULT_RUN_SETTINGS, FAULTS, fault_run

    runs = {"clean": (None, []), "clean_kl": (None, ["actor_rollout_ref.actor.use_kl_loss=true"])}
    runs.update({name: (name, []) for name in FAULTS})
    results, expected, timing, errors = {}, {}, {}, {}
    t0 = time.perf_counter()
    for name, (fault, overrides) in runs.items():
        run = fault_run(fault, overrides, workdir=str(tmp_path / name))
        timing[name], errors[name] = run.wall_s, run.error
        results[name] = diagnose(run.run_dir)
        expected[name] = FAULTS[fault].layer if fault else None
    total = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\n[doctor] fault matrix: {len(runs)} short runs ({FAULT_RUN_SETTINGS}) in {total:.1f} s, "
              "one process (CI budget 120 s)")
        print("\n".join(f"[doctor]   {name:32s} {timing[name]:5.1f} s  {errors[name] or ''}" for name in runs))
        print(format_confusion(results, expected))
    wrong = {name: layers_named(f) for name, f in results.items() if layers_named(f) != ([expected[name]]
                                                                                          if expected[name] else [])}
    assert not wrong, "runs whose layers the doctor got wrong:\n" + "\n\n".join(
        f"{name} (expected {expected[name]}):\n{format_report(results[name])}" for name in wrong)
    for name in ("exploding_lr", "micro_batch_exceeds_rank_share"):  # a NaN stops the run where it appeared
        assert errors[name] and "stage update_actor" in errors[name], errors[name]
        assert results[name][0].stage == "update_actor" and results[name][0].steps == [int(
            errors[name].split("step ")[1].split(",")[0])]
    assert all(errors[name] is None for name in runs if name not in ("exploding_lr", "micro_batch_exceeds_rank_share"))


@pytest.mark.slow
def test_minirl_doctor_on_a_clean_default_run_prints_no_finding(tmp_path, capsys):
    from minirl.cli import main

    out_dir = tmp_path / "default"
    t0 = time.perf_counter()
    env = {"MINIRL_NO_PROGRESS": os.environ.get("MINIRL_NO_PROGRESS")}
    os.environ["MINIRL_NO_PROGRESS"] = "1"
    try:
        assert main(["train", "trainer.total_training_steps=2", f"trainer.default_local_dir={out_dir}"]) == 0
    finally:
        if env["MINIRL_NO_PROGRESS"] is None:
            os.environ.pop("MINIRL_NO_PROGRESS")
    capsys.readouterr()
    assert main(["doctor", str(out_dir)]) == 0
    out = capsys.readouterr().out
    with capsys.disabled():
        print(f"\n[doctor] default config, 2 steps + doctor: {time.perf_counter() - t0:.1f} s\n{out}")
    assert f"minirl doctor {out_dir}: no finding" in out and load_run(out_dir).steps == [1, 2]


def test_hook_points_are_a_closed_list_applied_in_order():
    from minirl.utils import hooks

    with pytest.raises(ValueError, match="unknown hook point 'trainer.nope'; the points are: reward.gsm8k"):
        hooks.register("trainer.nope", lambda v: v)
    assert hooks.apply("trainer.worker_input", 3, keys=[]) == 3  # nothing registered: the value itself
    with hooks.use("trainer.worker_input", lambda v, keys: v + 1), \
            hooks.use("trainer.worker_input", lambda v, keys: v * len(keys)):
        assert hooks.apply("trainer.worker_input", 3, keys=["a", "b"]) == 8  # (3 + 1) * 2: registration order
    assert hooks.registered() == {}


def test_a_run_that_never_finished_a_step_is_not_called_healthy(tmp_path, capsys):
    """A run killed in its first step (the reference trace cut before step 1's metrics, no run_end): exit 1, one line."""
    from minirl.cli import main

    lines = (ROOT / "traces" / "grpo" / "trace.jsonl").read_text().splitlines()
    cut = next(i for i, line in enumerate(lines)
               if json.loads(line).get("kind") == "metrics" and json.loads(line).get("step", 0) >= 1)
    (tmp_path / "trace.jsonl").write_text("\n".join(lines[:cut]) + "\n")
    assert main(["doctor", str(tmp_path / "trace.jsonl")]) == 1
    out = capsys.readouterr().out.strip()
    assert "\n" not in out and "no finding" not in out, out
    assert "the run never finished a training step: its trace ends in stage update_weights of step 1" in out
    assert "no run_end event (killed?)" in out and "Fix:" in out
    assert main(["doctor", str(tmp_path / "trace.jsonl"), "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["check"] == "never_finished_a_step"
    only_start = [line for line in lines[:cut] if json.loads(line).get("kind") == "run_start"]
    (tmp_path / "start.jsonl").write_text("\n".join(only_start) + "\n")
    assert main(["doctor", str(tmp_path / "start.jsonl")]) == 1
    assert "no training stage ran" in capsys.readouterr().out
