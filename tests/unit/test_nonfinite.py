"""NaN / inf: the run stops at the stage that produced it (or skips and counts); metrics stay strict JSON.

Quick checks drive `FiniteChecks` with a stand-in trainer and the engine's optimizer step with a
tiny model. The slow ones run the real trainer with a NaN injected at one stage (the stage's own
function is wrapped), through `minirl train`'s entry point: one line naming the step, the stage and
the field, exit 2, nothing trained, and a record left for `minirl doctor` (the `nonfinite` trace
event, the failed step's partial row in metrics.jsonl) also with `trace.level=off`.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf
from transformers import Qwen2Config, Qwen2ForCausalLM

import minirl.trainer.main_ppo
from minirl.protocol import DataProto
from minirl.trace import read_trace
from minirl.trainer.ppo.finite_checks import FiniteChecks, NonFiniteError
from minirl.trainer.ppo.trainer_base import PPOTrainer
from minirl.utils.tracking import json_row
from minirl.workers.engine import FSDPEngineWithLMHead
from minirl.workers.engine_workers import TrainingWorker

BASE = ["actor_rollout_ref.model.path=minirl://tiny-qwen2", "data.train_batch_size=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "data.max_response_length=8",
        "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.logger=[file]"]



@pytest.fixture(autouse=True)
def _no_progress_bar(monkeypatch):
    monkeypatch.setenv("MINIRL_NO_PROGRESS", "1")  # the bar writes to stderr, where the one line must stand alone

def strict_rows(path) -> list[dict]:
    """metrics.jsonl parsed by a strict JSON reader (NaN / Infinity are not JSON)."""
    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")

    return [json.loads(line, parse_constant=refuse) for line in open(path)]


# --------------------------------------------------------------------------------- the check itself
class _Recorder:
    def __init__(self):
        self.events = []

    def event(self, kind, **payload):
        self.events.append({"kind": kind, **payload})


def _trainer(policy="stop"):
    logged = []
    trainer = SimpleNamespace(config=OmegaConf.create({"trainer": {"nonfinite": policy}}), global_steps=3,
                              tracer=_Recorder(),
                              logger=SimpleNamespace(log=lambda metrics, step: logged.append((step, dict(metrics)))))
    return trainer, logged


def _batch(**tensors):
    return DataProto.from_dict(tensors)


def test_stop_names_step_stage_field_and_leaves_a_record():
    trainer, logged = _trainer("stop")
    check = FiniteChecks(trainer)
    scores = torch.zeros(4, 3)
    batch = _batch(rm_scores=scores, responses=torch.ones(4, 3, dtype=torch.long))
    metrics = {"critic/score/mean": 0.0}
    assert check("reward", batch, metrics) is batch  # finite: nothing happens
    batch.batch["advantages"] = torch.tensor([[0.0, 1, 2], [float("nan"), 0, 0], [0, 0, 0], [0, float("inf"), 0]])
    with pytest.raises(NonFiniteError) as err:
        check("advantage", batch, metrics)
    message = str(err.value)
    assert message.startswith("step 3, stage advantage: advantages has 2 non-finite value(s) (NaN/inf) of 12.")
    assert "Fix:" in message and "trainer.nonfinite=skip" in message and "\n" not in message
    (event,) = trainer.tracer.events
    assert event == {"kind": "nonfinite", "step": 3, "stage": "advantage", "field": "advantages", "count": 2,
                     "total": 12, "rows": [1, 3], "policy": "stop"}
    assert logged == [(3, {"critic/score/mean": 0.0, "nonfinite/advantage/advantages": 2})]


def test_each_field_is_attributed_to_the_stage_that_made_it():
    trainer, _ = _trainer("skip")
    check = FiniteChecks(trainer)
    bad = torch.tensor([[float("nan"), 1.0]])
    batch = _batch(rm_scores=bad.clone())
    metrics = {}
    check("reward", batch, metrics)
    batch.batch["old_log_probs"] = torch.zeros(1, 2)
    batch.reorder(torch.tensor([0]))  # balance_batch moves every field: still reported once, at its stage
    check("old_log_prob", batch, metrics)
    batch.batch["old_log_probs"][0, 1] = float("-inf")  # changed in place later: that later stage is named
    metrics.update({"actor/pg_loss": float("nan"), "actor/lr_after_step": float("nan"), "actor/entropy": 0.1})
    check("update_actor", batch, metrics)
    found = [(r["stage"], r["field"]) for r in check.found]
    assert found == [("reward", "rm_scores"), ("update_actor", "old_log_probs"), ("update_actor", "actor/pg_loss")]
    assert metrics["nonfinite/reward/rm_scores"] == 1 and metrics["nonfinite/update_actor/actor/pg_loss"] == 1
    trainer.global_steps = 4  # a new step starts from scratch
    check("reward", _batch(rm_scores=bad.clone()), {})
    assert check.found[-1]["step"] == 4 and check.found[-1]["field"] == "rm_scores"


def test_metrics_rows_are_strict_json_with_a_count():
    row = json_row({"step": 1, "actor/grad_norm": float("nan"), "actor/pg_loss": float("inf"), "x": 0.5})
    assert row == {"step": 1, "actor/grad_norm": None, "actor/pg_loss": None, "x": 0.5, "nonfinite_metrics": 2}
    assert json.loads(json.dumps(row, allow_nan=False)) == row
    assert json_row({"step": 1, "x": 0.5}) == {"step": 1, "x": 0.5}


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="trainer.nonfinite='maybe'"):
        FiniteChecks(_trainer("maybe")[0])


# ------------------------------------------------------------------------- engine and worker counting
def _engine():
    torch.manual_seed(0)
    module = Qwen2ForCausalLM(Qwen2Config(vocab_size=50, hidden_size=128, num_hidden_layers=1, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=256))
    engine = FSDPEngineWithLMHead({"module": module}, {"strategy": "fsdp", "seed": 0, "device": "cpu"},
                                  {"lr": 1e-2, "weight_decay": 0.0, "clip_grad": 1.0})
    engine.initialize()
    return engine


def _train_data(n=8, nan_rows=()):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 50, (n, 7), generator=g)
    adv = torch.randn(n, 3, generator=g)
    for i in nan_rows:
        adv[i, 0] = float("nan")
    tensors = {"input_ids": ids, "attention_mask": torch.ones(n, 7, dtype=torch.long),
               "position_ids": torch.arange(7).expand(n, 7), "responses": ids[:, 4:],
               "response_mask": torch.ones(n, 3), "advantages": adv}
    meta = {"mini_batch_size": 4, "micro_batch_size": 4, "epochs": 1, "temperature": 1.0}
    return DataProto.from_dict(tensors, meta_info=meta)


def _loss(model_output, micro_batch):
    m = micro_batch.meta_info
    loss = -(model_output["log_probs"] * micro_batch.batch["advantages"]).sum() / m["batch_num_tokens"]
    return loss, {"pg_loss": loss.detach()}


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")  # the first step was skipped
def test_a_nonfinite_grad_norm_skips_the_step_and_only_applied_steps_count():
    engine = _engine()
    worker = TrainingWorker(engine, _loss)
    before = {k: v.clone() for k, v in engine.module.state_dict().items()}
    m = worker.train_mini_batch(_train_data(nan_rows=[1]))  # NaN in the first mini-batch only
    assert m["optimizer_steps"] == [1] and m["optimizer_steps_skipped"] == [1]
    assert math.isnan(m["grad_norm"][0]) and math.isfinite(m["grad_norm"][1])
    assert engine.skipped_optimizer_steps == 1
    after = engine.module.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the second, finite step was applied
    engine2 = _engine()
    worker2 = TrainingWorker(engine2, _loss)
    m2 = worker2.train_mini_batch(_train_data(nan_rows=[1, 5]))  # every mini-batch poisoned
    assert m2["optimizer_steps"] == [0] and m2["optimizer_steps_skipped"] == [2]
    assert all(torch.equal(before[k], v) for k, v in engine2.module.state_dict().items())  # nothing moved


# ------------------------------------------------------------------------------- the real trainer
def _inject(monkeypatch, method: str, field: str, steps=(1,)):
    """Wrap the stage method `method` so that its output's `field` gets a NaN (row 1) on `steps`."""
    original = getattr(PPOTrainer, method)

    def poisoned(self, batch, metrics):
        out = original(self, batch, metrics)
        if self.global_steps in steps:
            out.batch[field][1, 0] = float("nan")
        return out

    monkeypatch.setattr(PPOTrainer, method, poisoned)


CLI_CASES = {  # name -> (stage method to poison, field, extra overrides, the line must say)
    "nan_advantage": ("_compute_advantage", "advantages", [],
                      "step 1, stage advantage: advantages has 1 non-finite value(s)"),
    "nan_old_log_prob_trace_off": ("_compute_old_log_prob",
                                   "old_log_probs", ["trace.level=off"],
                                   "step 1, stage old_log_prob: old_log_probs has 1 non-finite value(s)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CLI_CASES))
def test_a_nan_stops_the_run_at_its_stage(name, tmp_path, capsys, monkeypatch):
    target, field, extra, words = CLI_CASES[name]
    _inject(monkeypatch, target, field)
    run = tmp_path / "run"
    code = minirl.trainer.main_ppo.main([*BASE, f"trainer.default_local_dir={run}", "trainer.total_training_steps=2",
                                         *extra])
    assert code == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("(set MINIRL_DEBUG=1")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert words in lines[0] and "Fix:" in lines[0]
    (row,) = strict_rows(run / "metrics.jsonl")  # the failed step's partial row: the record without a trace
    stage = words.split("stage ")[1].split(":")[0]
    assert row["step"] == 1 and row[f"nonfinite/{stage}/{field}"] == 1
    assert "actor/pg_loss" not in row  # it stopped before the update
    if "trace.level=off" not in extra:
        (event,) = [e for e in read_trace(run / "trace") if e["kind"] == "nonfinite"]
        assert (event["step"], event["stage"], event["field"], event["rows"]) == (1, stage, field, [1])
        assert not [e for e in read_trace(run / "trace") if e.get("stage") == "update_actor"]


@pytest.mark.slow
def test_skip_goes_on_and_counts_only_the_applied_optimizer_steps(tmp_path, monkeypatch):
    _inject(monkeypatch, "_compute_advantage", "advantages")
    run = tmp_path / "run"
    assert minirl.trainer.main_ppo.main([*BASE, f"trainer.default_local_dir={run}", "trainer.total_training_steps=2",
                                         "trainer.nonfinite=skip", "trace.level=stages"]) == 0
    first, second = strict_rows(run / "metrics.jsonl")
    assert first["nonfinite/advantage/advantages"] == 1
    # row 1 is in the first of the two mini-batches: its step was skipped, the second one applied
    assert first["actor/optimizer_steps"] == 1 and first["actor/optimizer_steps_skipped"] == 1
    assert first["actor/grad_norm"] is None and first["nonfinite_metrics"] >= 1  # null in the file, counted
    assert second["actor/optimizer_steps"] == 2 and second["actor/optimizer_steps_skipped"] == 0
    assert not any(k.startswith("nonfinite") for k in second)
    events = read_trace(run / "trace")
    found = [(e["stage"], e["field"]) for e in events if e["kind"] == "nonfinite"]
    assert found[0] == ("advantage", "advantages") and ("update_actor", "actor/grad_norm") in found
    upd = [e for e in events if e["kind"] == "stage" and e["stage"] == "update_actor" and e.get("role") == "actor"]
    assert [e["extra"]["optimizer_steps"] for e in upd] == [1, 2]
