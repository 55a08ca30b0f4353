"""Tests for the training engine (`minirl/workers/engine/`), single process.

A tiny random Qwen2 (2 layers, hidden 128) is passed in as `model_config.module`. The checks pin the
engine's contracts: log-probs equal a hand-written forward, micro-batching does not change the
gradient, the reported grad norm is torch's, forward-only engines have no optimizer, checkpoints
resume exactly, and the LR schedules give hand-computed values.
"""

import copy
import dataclasses
import math

import pytest
import torch
from omegaconf import OmegaConf
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForTokenClassification

from minirl.protocol import DataProto
from minirl.workers.engine import (
    BaseEngine,
    EngineRegistry,
    FSDPEngineWithLMHead,
    FSDPEngineWithValueHead,
)

PROMPT_LEN, RESPONSE_LEN, VOCAB = 6, 5, 100


def tiny_config(**kwargs) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=384,
        tie_word_embeddings=True,
        **kwargs,
    )


def tiny_lm(seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(tiny_config())


def make_batch(batch_size: int = 8, seed: int = 1, **meta) -> DataProto:
    """Left-padded prompts + right-padded responses, like a rollout's output."""
    g = torch.Generator().manual_seed(seed)
    seq_len = PROMPT_LEN + RESPONSE_LEN
    input_ids = torch.randint(1, VOCAB, (batch_size, seq_len), generator=g)
    attention_mask = torch.ones(batch_size, seq_len, dtype=torch.long)
    response_mask = torch.ones(batch_size, RESPONSE_LEN)
    for i in range(batch_size):
        left_pad = i % 3  # prompts of different lengths
        resp_len = RESPONSE_LEN - (i % 4)  # responses of different lengths
        attention_mask[i, :left_pad] = 0
        attention_mask[i, PROMPT_LEN + resp_len :] = 0
        response_mask[i, resp_len:] = 0
        input_ids[i, :left_pad] = 0
        input_ids[i, PROMPT_LEN + resp_len :] = 0
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    advantages = torch.randn(batch_size, RESPONSE_LEN, generator=g)
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "responses": input_ids[:, PROMPT_LEN:],
        "response_mask": response_mask,
        "advantages": advantages,
    }
    meta_info = {"micro_batch_size": 2, "temperature": 1.0, **meta}
    return DataProto.from_dict(tensors, meta_info=meta_info)


def token_mean_pg_loss(model_output, micro_batch):
    """-mean over ALL response tokens of the mini-batch of A * log pi (verl's token-mean agg_loss)."""
    mask = micro_batch.batch["response_mask"]
    meta = micro_batch.meta_info
    loss_sum = -(model_output["log_probs"] * micro_batch.batch["advantages"] * mask).sum()
    loss = loss_sum / meta["batch_num_tokens"] * meta["dp_size"]
    seen = {"batch_num_tokens": meta["batch_num_tokens"], "global_batch_size": meta["global_batch_size"]}
    return loss, {"pg_loss": loss.detach(), **seen}


def make_engine(module, forward_only=False, cls=FSDPEngineWithLMHead, **optim):
    optim_config = {"lr": 1e-2, "weight_decay": 0.0, "clip_grad": 1e6, **optim}
    engine_config = {"strategy": "fsdp", "forward_only": forward_only, "seed": 0, "device": "cpu"}
    engine = cls({"module": module}, engine_config, optim_config)
    engine.initialize()
    return engine


def manual_forward(module, data: DataProto):
    b = data.batch
    with torch.no_grad():
        return module(
            input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"]
        ).logits


# ----------------------------------------------------------------------------- registry


def test_registry_builds_each_head_and_lists_combos_on_error():
    cfgs = ({"module": tiny_lm()}, {"strategy": "fsdp2"}, {"lr": 1e-3})
    assert type(EngineRegistry.new("language_model", "fsdp", *cfgs)) is FSDPEngineWithLMHead
    assert type(EngineRegistry.new("language_model", "fsdp2", *cfgs)) is FSDPEngineWithLMHead
    assert type(EngineRegistry.new("value_model", "fsdp", *cfgs)) is FSDPEngineWithValueHead
    with pytest.raises(ValueError) as err:
        EngineRegistry.new("language_model", "veomni", *cfgs)
    assert "backend='veomni'" in str(err.value)
    assert "('language_model', 'fsdp', 'cpu')" in str(err.value)
    assert "('value_model', 'fsdp2', 'cuda')" in str(err.value)


def test_register_rejects_a_second_engine_for_the_same_slot():
    class Other(BaseEngine):
        pass

    with pytest.raises(ValueError, match="already registered"):
        EngineRegistry.register("language_model", "fsdp", "cpu")(Other)


# ----------------------------------------------------------------------------- forward


def test_log_probs_and_entropy_equal_a_manual_forward():
    module = tiny_lm()
    engine = make_engine(module, forward_only=True)
    data = make_batch(temperature=0.7, calculate_entropy=True, micro_batch_size=4)
    with engine.eval_mode():
        out = engine.infer_batch(data)

    logits = manual_forward(module, data)[:, PROMPT_LEN - 1 : -1] / 0.7
    log_softmax = torch.log_softmax(logits, dim=-1)
    expected_lp = log_softmax.gather(-1, data.batch["responses"].unsqueeze(-1)).squeeze(-1)
    expected_entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    assert out["log_probs"].shape == (8, RESPONSE_LEN)
    torch.testing.assert_close(out["log_probs"], expected_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(out["entropy"], expected_entropy, atol=1e-5, rtol=0)
    assert not out["log_probs"].requires_grad


def test_forward_only_engine_has_no_optimizer():
    engine = make_engine(tiny_lm(), forward_only=True)
    assert engine.optimizer is None and engine.lr_scheduler is None
    with pytest.raises(RuntimeError, match="forward_only=True"):
        engine.train_batch(make_batch(), token_mean_pg_loss)
    assert set(engine.infer_batch(make_batch())) == {"log_probs"}  # no entropy unless asked


def test_value_head_outputs_the_value_at_the_position_predicting_each_response_token():
    torch.manual_seed(0)
    module = Qwen2ForTokenClassification(tiny_config(num_labels=1, classifier_dropout=0.0))  # as verl sets
    engine = make_engine(module, cls=FSDPEngineWithValueHead)
    data = make_batch()
    values = engine.infer_batch(data)["values"]
    assert values.shape == (8, RESPONSE_LEN)
    expected = manual_forward(module, data).squeeze(-1)[:, PROMPT_LEN - 1 : -1]
    torch.testing.assert_close(values, expected, atol=1e-5, rtol=0)

    def value_loss(model_output, micro_batch):  # a critic-style token-mean loss trains the head
        err = (model_output["values"] - 1.0) ** 2 * micro_batch.batch["response_mask"]
        return err.sum() / micro_batch.meta_info["batch_num_tokens"], {}

    metrics = engine.train_batch(data, value_loss)
    assert metrics["grad_norm"] > 0 and metrics["num_micro_batches"] == 4


def test_engines_load_from_a_hugging_face_directory(tmp_path):
    module = tiny_lm()
    module.save_pretrained(tmp_path)
    data = make_batch(micro_batch_size=8)
    lm = FSDPEngineWithLMHead({"path": str(tmp_path)}, {"forward_only": True, "device": "cpu"}, {"lr": 1e-3})
    lm.initialize()
    torch.testing.assert_close(
        lm.infer_batch(data)["log_probs"], make_engine(module, True).infer_batch(data)["log_probs"]
    )

    engine_config = {"seed": 0, "device": "cpu"}
    critic = EngineRegistry.new("value_model", "fsdp", {"path": str(tmp_path)}, engine_config, {"lr": 1e-3})
    critic.initialize()
    assert type(critic.module).__name__ == "Qwen2ForTokenClassification"
    assert critic.module.score.out_features == 1
    torch.testing.assert_close(critic.module.model.embed_tokens.weight, module.model.embed_tokens.weight)


def test_engine_accepts_omegaconf_and_dataclass_configs():
    @dataclasses.dataclass
    class ModelConfig:
        module: torch.nn.Module
        dtype: str = "fp32"

    engine_config = OmegaConf.create({"strategy": "fsdp2", "forward_only": False, "device": "cpu"})
    optim_config = OmegaConf.create({"lr": 2e-3, "betas": [0.9, 0.95], "weight_decay": 0.1, "clip_grad": 1.0})
    OmegaConf.set_struct(optim_config, True)  # missing optional keys still fall back to defaults
    engine = FSDPEngineWithLMHead(ModelConfig(module=tiny_lm()), engine_config, optim_config)
    engine.initialize()
    group = engine.optimizer.param_groups[0]
    assert (group["lr"], group["betas"], group["weight_decay"]) == (2e-3, (0.9, 0.95), 0.1)
    assert engine.train_batch(make_batch(), token_mean_pg_loss)["num_micro_batches"] == 4


# ----------------------------------------------------------------------------- training


def test_micro_batch_size_does_not_change_gradients_or_the_update():
    base = tiny_lm()
    data = make_batch()
    expected_tokens = int(data.batch["response_mask"].sum())
    grads, weights, losses = {}, {}, {}
    for mbs in (1, 2, 8):
        # Adam's first step is lr * g / (|g| + eps): with the default eps=1e-8, grads of size ~1e-9
        # turn float summation-order noise into a visible share of lr. A larger eps keeps the
        # update proportional to small grads, so equal grads must give equal weights to 1e-6.
        engine = make_engine(copy.deepcopy(base), lr=1e-3, override_optimizer_config={"eps": 1e-4})
        batch = make_batch(micro_batch_size=mbs)
        engine.optimizer_zero_grad()
        outputs = engine.forward_backward_batch(batch, token_mean_pg_loss)
        assert len(outputs) == 8 // mbs
        assert all(o["metrics"]["batch_num_tokens"] == expected_tokens for o in outputs)
        assert all(o["metrics"]["global_batch_size"] == 8 for o in outputs)
        grads[mbs] = {n: p.grad.clone() for n, p in engine.module.named_parameters()}
        metrics = engine.train_batch(batch, token_mean_pg_loss)
        losses[mbs] = metrics["loss"]
        weights[mbs] = {n: p.detach().clone() for n, p in engine.module.named_parameters()}

    for mbs in (1, 2):
        for name in grads[8]:
            torch.testing.assert_close(grads[mbs][name], grads[8][name], atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(weights[mbs][name], weights[8][name], atol=1e-6, rtol=0)
        assert losses[mbs] == pytest.approx(losses[8], abs=1e-6)
    moved = max((weights[8][n] - p).abs().max().item() for n, p in base.named_parameters())
    assert moved > 5e-4  # the update is large compared with the tolerance

    # the loss is the token mean over the whole batch, computed by hand
    logits = manual_forward(base, data)[:, PROMPT_LEN - 1 : -1]
    lp = torch.log_softmax(logits, -1).gather(-1, data.batch["responses"].unsqueeze(-1)).squeeze(-1)
    mask = data.batch["response_mask"]
    hand = -(lp * data.batch["advantages"] * mask).sum() / mask.sum()
    assert losses[8] == pytest.approx(hand.item(), abs=1e-5)


def test_train_batch_reports_loss_metrics_and_lr():
    engine = make_engine(tiny_lm(), lr=3e-3)
    with engine.train_mode():
        metrics = engine.train_batch(make_batch(), token_mean_pg_loss)
        assert all(p.grad is not None for p in engine.module.parameters())
    assert all(p.grad is None for p in engine.module.parameters())  # train_mode clears grads on exit
    assert metrics["lr"] == pytest.approx(3e-3)
    assert metrics["num_micro_batches"] == 4
    assert metrics["batch_num_tokens"] == int(make_batch().batch["response_mask"].sum())
    assert set(metrics) >= {"loss", "grad_norm", "lr", "pg_loss", "num_micro_batches"}


def test_reported_grad_norm_is_torch_global_norm_and_grads_are_clipped():
    engine = make_engine(tiny_lm(), clip_grad=0.01)
    engine.optimizer_zero_grad()
    engine.forward_backward_batch(make_batch(), token_mean_pg_loss)
    grads = [p.grad for p in engine.module.parameters()]
    expected = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()
    assert expected > 0.01  # so clipping happens
    grad_norm = engine.optimizer_step()
    assert grad_norm == pytest.approx(expected, rel=1e-6)
    clipped = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(p.grad) for p in engine.module.parameters()])
    )
    assert clipped.item() == pytest.approx(0.01, rel=1e-4)


def test_non_finite_grad_norm_skips_the_step():
    engine = make_engine(tiny_lm())
    before = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
    engine.optimizer_zero_grad()
    engine.forward_backward_batch(make_batch(), token_mean_pg_loss)
    next(engine.module.parameters()).grad[0, 0] = float("nan")
    assert math.isnan(engine.optimizer_step())
    for n, p in engine.module.named_parameters():
        assert torch.equal(p, before[n]), n


def test_bad_micro_batch_size_is_reported():
    engine = make_engine(tiny_lm())
    with pytest.raises(ValueError, match="micro_batch_size=3 does not divide"):
        engine.train_batch(make_batch(micro_batch_size=3), token_mean_pg_loss)
    data = make_batch()
    del data.meta_info["micro_batch_size"]
    with pytest.raises(ValueError, match="micro_batch_size'] is missing"):
        engine.infer_batch(data)


def test_get_per_tensor_param_gives_hf_names_and_cpu_copies():
    module = tiny_lm()
    engine = make_engine(module)
    params = dict(engine.get_per_tensor_param())
    assert params.keys() == module.state_dict().keys()
    assert "lm_head.weight" in params  # tied weights appear under both names
    for name, tensor in module.state_dict().items():
        assert params[name].device.type == "cpu" and torch.equal(params[name], tensor)
    assert engine.get_data_parallel_rank() == 0 and engine.get_data_parallel_size() == 1


# ----------------------------------------------------------------------------- checkpoint and schedules


def test_checkpoint_resume_continues_exactly(tmp_path):
    base = tiny_lm()
    optim = {"lr_warmup_steps": 3, "weight_decay": 0.01}
    first, second = make_batch(seed=1), make_batch(seed=2)

    engine = make_engine(copy.deepcopy(base), **optim)
    engine.train_batch(first, token_mean_pg_loss)
    engine.lr_scheduler_step()
    engine.save_checkpoint(str(tmp_path / "ckpt"), global_step=1)
    draw_after_save = torch.rand(3)  # the RNG state is part of the checkpoint
    expected = engine.train_batch(second, token_mean_pg_loss)
    expected_weights = {n: p.detach().clone() for n, p in engine.module.named_parameters()}

    resumed = make_engine(copy.deepcopy(base), **optim)
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    assert torch.equal(torch.rand(3), draw_after_save)
    got = resumed.train_batch(second, token_mean_pg_loss)
    assert got["lr"] == pytest.approx(expected["lr"]) == pytest.approx(1e-2 / 3)
    assert got["loss"] == pytest.approx(expected["loss"], abs=1e-6)
    for n, p in resumed.module.named_parameters():
        torch.testing.assert_close(p.detach(), expected_weights[n], atol=1e-6, rtol=0)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_constant_schedule_warms_up_linearly():
    engine = make_engine(tiny_lm(), lr=1.0, lr_warmup_steps=4)
    lrs = [engine.optimizer.param_groups[0]["lr"]] + [engine.lr_scheduler_step() for _ in range(6)]
    assert lrs == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0])


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_cosine_schedule_with_warmup_ratio_and_min_lr():
    # warm-up = int(0.2 * 10) = 2 steps; cosine from 1.0 to min_lr_ratio=0.1 over steps 2..10
    optim = {
        "lr": 1.0,
        "lr_warmup_steps": -1,
        "lr_warmup_steps_ratio": 0.2,
        "total_training_steps": 10,
        "lr_scheduler_type": "cosine",
        "min_lr_ratio": 0.1,
    }
    engine = make_engine(tiny_lm(), **optim)
    lrs = [engine.optimizer.param_groups[0]["lr"]] + [engine.lr_scheduler_step() for _ in range(10)]
    expected = [0.0, 0.5] + [0.55 + 0.45 * math.cos(math.pi * (s - 2) / 8) for s in range(2, 11)]
    assert lrs == pytest.approx(expected)
    assert lrs[6] == pytest.approx(0.55) and lrs[10] == pytest.approx(0.1)


def test_unknown_scheduler_is_reported():
    with pytest.raises(ValueError, match="lr_scheduler_type='linear' is not supported"):
        make_engine(tiny_lm(), lr_scheduler_type="linear")


def test_gradient_checkpointing_gives_the_same_gradients():
    """`model.enable_gradient_checkpointing` recomputes activations in backward; the gradients stay the same."""
    base = tiny_lm()
    grads = {}
    for ckpt in (False, True):
        engine = FSDPEngineWithLMHead({"module": copy.deepcopy(base), "enable_gradient_checkpointing": ckpt},
                                      {"strategy": "fsdp", "seed": 0, "device": "cpu"}, {"lr": 1e-3})
        engine.initialize()
        assert engine.module.is_gradient_checkpointing == ckpt
        with engine.train_mode(zero_grad_on_exit=False):
            engine.optimizer_zero_grad()
            engine.forward_backward_batch(make_batch(), token_mean_pg_loss)
        grads[ckpt] = {n: p.grad.clone() for n, p in engine.module.named_parameters()}
    for name in grads[False]:
        torch.testing.assert_close(grads[True][name], grads[False][name], atol=1e-6, rtol=1e-5)
