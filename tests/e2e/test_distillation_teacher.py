"""On-policy distillation's teacher: prompt scoring, the teacher servers, the config, and a run end to end.

The runs use the student's own initial weights as the teacher (`model_path=minirl://tiny-qwen2`): then,
before the first update, the teacher's log-prob of every sampled token must equal the student's, which
checks that the teacher scored the right tokens at the right positions (an off-by-one would not).
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from minirl.config import ConfigError, load
from minirl.models import load_causal_lm, resolve_model_path
from minirl.workers.rollout.base import SamplingParams

TINY = "minirl://tiny-qwen2"


@pytest.fixture(scope="module")
def tiny():
    path = resolve_model_path(TINY)
    return path, load_causal_lm(path).eval()


def _direct(model, seq: list[int]) -> torch.Tensor:
    """log_softmax of one unpadded sequence's logits: row i scores token i + 1."""
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=torch.tensor([seq])).logits[0].float(), -1)


def test_hf_rollout_scores_prompts_like_a_plain_forward(tiny):
    from minirl.workers.rollout.hf_rollout import HFRollout

    path, model = tiny
    rollout = HFRollout({"seed": 0}, path)
    prompts = [[3, 40, 41, 42, 43, 44, 7], [3, 50, 51], [3, 60, 61, 62, 63]]  # different lengths: left padding
    for k in (0, 3):
        outs = rollout.generate(prompts, SamplingParams(max_tokens=1, prompt_logprobs=k, logprobs=False))
        for p, out in zip(prompts, outs):
            ids, lps = torch.tensor(out.extra_fields["prompt_ids"]), torch.tensor(out.extra_fields["prompt_logprobs"])
            assert ids.shape == lps.shape == (len(p), max(k, 1)) and len(out.token_ids) == 1
            ref = _direct(model, p)
            if k == 0:
                assert ids[:-1, 0].tolist() == p[1:]
                torch.testing.assert_close(lps[:-1, 0], ref[:-1].gather(-1, torch.tensor(p[1:])[:, None])[:, 0],
                                           atol=1e-5, rtol=0)
            else:
                vals, top = torch.topk(ref[:-1], k, dim=-1)
                assert torch.equal(ids[:-1], top)
                torch.testing.assert_close(lps[:-1], vals, atol=1e-5, rtol=0)
            assert lps[-1].abs().sum() == 0  # the pad row
    with pytest.raises(ValueError, match="prompt_logprobs must be None or an integer >= 0"):
        SamplingParams(prompt_logprobs=-1)
    with pytest.raises(ValueError, match="more tokens than the vocabulary"):
        rollout.generate(prompts, SamplingParams(max_tokens=1, prompt_logprobs=100000))


def test_teacher_sampling_params_and_routing(capsys):
    from minirl.teacher_loop.teacher_manager import AsyncTeacherLLMServerManager, _get_teacher_sampling_params
    from minirl.teacher_loop.teacher_model import resolve_teacher_models

    sp = _get_teacher_sampling_params({"temperature": 1.0}, {"loss_mode": "k3", "topk": 32})
    assert (sp.max_tokens, sp.temperature, sp.prompt_logprobs) == (1, 1.0, 0)
    assert _get_teacher_sampling_params({"temperature": 0.7}, {"loss_mode": "forward_kl_topk", "topk": 8}).prompt_logprobs == 8
    assert "has no effect on prompt log-probs" in capsys.readouterr().err
    cfg = load(["distillation.enabled=true"])
    (key, single), = resolve_teacher_models(cfg.distillation).items()
    assert key == "default" and single["num_replicas"] == 1
    two = load(["distillation.enabled=true", "distillation.n_gpus_per_node=2"] + [
        f"+distillation.teacher_models.t{i}.{k}={v}" for i in (1, 2)
        for k, v in (("key", f"src{i}"), ("model_path", TINY), ("num_replicas", 1))])
    teachers = resolve_teacher_models(two.distillation)
    assert sorted(teachers) == ["src1", "src2"]
    manager = AsyncTeacherLLMServerManager(two, {"src1": None, "src2": None})
    assert manager._resolve_teacher_key("src2") == "src2"
    with pytest.raises(ValueError, match="no teacher for routing key 'gsm8k'"):
        manager._resolve_teacher_key("gsm8k")
    with pytest.raises(ValueError, match="do not match the teacher routing keys"):
        AsyncTeacherLLMServerManager(two, {"src1": None})


@pytest.mark.parametrize("overrides,message", [
    (["distillation.distillation_loss.loss_mode=k1"], "use_policy_gradient=True"),
    (["distillation.distillation_loss.loss_mode=reverse_kl"], "is not a distillation loss"),
    (["distillation.enabled=true", "distillation.nnodes=0"], "at least one device"),
    (["distillation.enabled=true", "distillation.teacher_models.teacher_model.inference.name=vllm"], "hf backend only"),
    (["distillation.enabled=true", "distillation.distillation_loss.policy_loss_mode=gspo"], "only vanilla"),
    (["distillation.enabled=true", "distillation.distillation_loss.loss_max_clamp=-1"], "must be > 0"),
    (["distillation.enabled=true", "distillation.teacher_models.teacher_model.inference.max_model_len=20"],
     "cannot hold the student's prompt"),
    (["distillation.enabled=true", "distillation.teacher_models.teacher_model.inference.load_format=dummy"],
     "minirl does not implement it"),
])
def test_bad_distillation_configs_say_what_to_fix(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        load(overrides)
    assert "Fix" in str(err.value) or "minirl does not implement" in str(err.value)


@pytest.mark.slow
def test_teacher_server_scores_the_students_tokens(tiny):
    from minirl.teacher_loop import AsyncTeacherLLMServerManager, MultiTeacherModelManager

    _, model = tiny
    cfg = load(["distillation.enabled=true", f"distillation.teacher_models.teacher_model.model_path={TINY}",
                f"actor_rollout_ref.model.path={TINY}", "distillation.distillation_loss.loss_mode=forward_kl_topk",
                "distillation.distillation_loss.topk=5"])
    manager = MultiTeacherModelManager(cfg, wait=True)
    try:
        (address,) = manager.teacher_model_managers["default"].server_addresses
        assert address.startswith("127.0.0.1:")
        client = AsyncTeacherLLMServerManager(cfg, manager.get_client())
        seq = [3, 40, 41, 42, 43, 44, 7, 9]
        ids, lps = asyncio.run(client.compute_teacher_logprobs_single(seq))
        vals, top = torch.topk(_direct(model, seq)[:-1], 5, dim=-1)
        assert ids.shape == (len(seq), 5) and torch.equal(ids[:-1], top)
        torch.testing.assert_close(lps[:-1], vals, atol=1e-5, rtol=0)
    finally:
        manager.shutdown()


SMALL = [f"actor_rollout_ref.model.path={TINY}", "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
         "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
         "data.max_response_length=8", "trainer.logger=[file]", "trainer.val_before_train=false", "trainer.test_freq=-1",
         "distillation.enabled=true", f"distillation.teacher_models.teacher_model.model_path={TINY}"]


@pytest.mark.slow
@pytest.mark.parametrize("loss", [
    ["distillation.distillation_loss.loss_mode=k3"],
    ["distillation.distillation_loss.loss_mode=k1", "distillation.distillation_loss.use_policy_gradient=true",
     "distillation.distillation_loss.use_task_rewards=false"],
    ["distillation.distillation_loss.loss_mode=forward_kl_topk", "distillation.distillation_loss.topk=4",
     "distillation.distillation_loss.use_task_rewards=false"],
])
def test_distillation_run_teacher_scores_what_the_student_sampled(tmp_path, loss):
    from minirl.trace import read_trace
    from minirl.trainer.main_ppo import TaskRunnerV1

    cfg = load(SMALL + loss + ["trainer.total_training_steps=2", f"trainer.default_local_dir={tmp_path}"])
    kept = {}
    trainer = TaskRunnerV1().build(cfg)
    trainer.add_step_callback(lambda step, batch, m: kept.__setitem__(step, batch))
    try:
        trainer.fit()
    finally:
        trainer.close()
    b = kept[1]
    mask = b.batch["response_mask"].bool()
    k = 4 if "forward_kl_topk" in loss[0] else 1
    assert b.batch["teacher_logprobs"].shape == (*mask.shape, k)
    if k == 1:  # teacher = the student's initial weights: same log-prob of every sampled token at step 1
        diff = (b.batch["teacher_logprobs"][..., 0] - b.batch["old_log_probs"])[mask].abs().max()
        assert float(diff) < 1e-4
        assert torch.equal(b.batch["teacher_ids"][..., 0][mask], b.batch["responses"][mask])
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert abs(rows[0]["actor/distillation/loss"]) < 1e-6  # the student starts AS the teacher
    if "use_task_rewards=false" not in " ".join(loss):  # the task reward moved the student away: a signal at step 2
        assert rows[1]["actor/distillation/loss"] > 1e-6
    upd = [e for e in read_trace(cfg.trace.dir) if e.get("stage") == "update_actor"]
    assert "teacher_logprobs" in upd[0]["read"]
    rollout = next(e for e in read_trace(cfg.trace.dir) if e.get("stage") == "rollout")
    assert "teacher_logprobs" in rollout["added"]
    assert trainer.teacher_model_manager is not None


@pytest.mark.slow
def test_no_teacher_path_uses_the_embedded_teacher(tmp_path, monkeypatch, capsys):
    """`distillation.enabled=true` alone works: a null model_path means the embedded teacher (here swapped for the
    random-init preset, so that the test does not build the real one)."""
    from minirl.teacher_loop import teacher_model
    from minirl.trainer.main_ppo import TaskRunnerV1

    monkeypatch.setattr(teacher_model, "EMBEDDED_TEACHER", TINY)
    cfg = load([o for o in SMALL if "model_path" not in o] + ["trainer.total_training_steps=1", "trace.level=off",
                                                             f"trainer.default_local_dir={tmp_path}"])
    assert cfg.distillation.teacher_models.teacher_model.model_path is None
    trainer = TaskRunnerV1().run(cfg)
    assert f"using the embedded teacher {TINY}" in capsys.readouterr().err
    assert trainer.teacher_model_manager.model_paths["default"] == resolve_model_path(TINY)
