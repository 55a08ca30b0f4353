"""FSDP2 across 2 CPU processes (gloo) must train exactly like one process on the whole batch.

Two ranks are spawned with `torch.multiprocessing`; each takes its half of the same global batch
and runs one `train_batch`. Because the engine all-reduces `batch_num_tokens` and the loss function
multiplies by `dp_size`, the FSDP gradient average equals the one-process token mean: the reported
loss, the grad norm and the updated (all-gathered) weights must match a single-process run. The
sharded checkpoint must also resume exactly.
"""

import math
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import Qwen2Config, Qwen2ForCausalLM

from minirl.protocol import DataProto
from minirl.workers.engine import FSDPEngineWithLMHead

PROMPT_LEN, RESPONSE_LEN, VOCAB, GLOBAL_BATCH, WORLD_SIZE = 5, 4, 100, 8, 2


def tiny_lm() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=384,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config)


def make_batch(seed: int) -> DataProto:
    """The global batch: responses of different lengths, so ranks hold different token counts."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, VOCAB, (GLOBAL_BATCH, PROMPT_LEN + RESPONSE_LEN), generator=g)
    attention_mask = torch.ones_like(input_ids)
    response_mask = torch.ones(GLOBAL_BATCH, RESPONSE_LEN)
    for i in range(GLOBAL_BATCH):
        resp_len = RESPONSE_LEN - (i * 3) % RESPONSE_LEN
        attention_mask[i, PROMPT_LEN + resp_len :] = 0
        response_mask[i, resp_len:] = 0
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "responses": input_ids[:, PROMPT_LEN:],
        "response_mask": response_mask,
        "advantages": torch.randn(GLOBAL_BATCH, RESPONSE_LEN, generator=g),
    }
    return DataProto.from_dict(tensors, meta_info={"micro_batch_size": 2, "temperature": 1.0})


def token_mean_pg_loss(model_output, micro_batch):
    mask, meta = micro_batch.batch["response_mask"], micro_batch.meta_info
    loss_sum = -(model_output["log_probs"] * micro_batch.batch["advantages"] * mask).sum()
    return loss_sum / meta["batch_num_tokens"] * meta["dp_size"], {
        "batch_num_tokens": meta["batch_num_tokens"]
    }


def make_engine() -> FSDPEngineWithLMHead:
    # eps=1e-4: Adam's first step stays proportional to tiny grads, so reduction-order noise stays tiny
    optim = {
        "lr": 1e-3,
        "weight_decay": 0.01,
        "clip_grad": 1.0,
        "lr_scheduler_type": "cosine",
        "total_training_steps": 4,
        "override_optimizer_config": {"eps": 1e-4},
    }
    engine = FSDPEngineWithLMHead(
        {"module": tiny_lm()}, {"strategy": "fsdp2", "device": "cpu", "seed": 0}, optim
    )
    engine.initialize()
    return engine


def two_steps_with_a_checkpoint(rank: int, world_size: int, ckpt_dir: str) -> dict:
    """Step on batch 1, save, step on batch 2; then a fresh engine loads and repeats step 2."""
    per_rank = GLOBAL_BATCH // world_size
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    first, second = make_batch(seed=1)[rows], make_batch(seed=2)[rows]

    engine = make_engine()
    metrics = engine.train_batch(first, token_mean_pg_loss)
    engine.lr_scheduler_step()
    params = dict(engine.get_per_tensor_param())  # every rank iterates: full_tensor() is a collective
    embed = engine.module.model.embed_tokens.weight
    local_shape = tuple(embed.to_local().shape) if hasattr(embed, "to_local") else tuple(embed.shape)
    engine.save_checkpoint(ckpt_dir, global_step=1)
    step2 = engine.train_batch(second, token_mean_pg_loss)
    params2 = dict(engine.get_per_tensor_param())

    resumed = make_engine()
    resumed.load_checkpoint(ckpt_dir)
    step2_resumed = resumed.train_batch(second, token_mean_pg_loss)
    params2_resumed = dict(resumed.get_per_tensor_param())
    with resumed.eval_mode():  # forward-only under FSDP, then the root reshards on exit
        log_probs = resumed.infer_batch(second)["log_probs"]
    return {
        "metrics": metrics,
        "params": params,
        "local_shape": local_shape,
        "step2": step2,
        "params2": params2,
        "step2_resumed": step2_resumed,
        "params2_resumed": params2_resumed,
        "log_probs": log_probs,
    }


def _run_rank(rank: int, world_size: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        result = two_steps_with_a_checkpoint(rank, world_size, os.path.join(out_dir, "ckpt"))
        if rank == 0:
            torch.save(result, os.path.join(out_dir, "rank0.pt"))
        dist.barrier()  # no rank tears gloo down while another is still at work (seen: SIGABRT at a rank's exit)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_gloo_ranks_train_like_one_process(tmp_path):
    mp.spawn(_run_rank, args=(WORLD_SIZE, _free_port(), str(tmp_path / "fsdp")), nprocs=WORLD_SIZE, join=True)
    fsdp = torch.load(tmp_path / "fsdp" / "rank0.pt", weights_only=False)
    single = two_steps_with_a_checkpoint(rank=0, world_size=1, ckpt_dir=str(tmp_path / "single"))

    # the weights really were sharded: rank 0 held half of the embedding rows...
    assert fsdp["local_shape"] == (VOCAB // WORLD_SIZE, 128)
    # ...and get_per_tensor_param gathered full tensors, in HF naming
    assert {k: v.shape for k, v in fsdp["params"].items()} == {
        k: v.shape for k, v in single["params"].items()
    }
    assert fsdp["params"]["model.embed_tokens.weight"].shape == (VOCAB, 128)

    # the engine all-reduced the token count: each rank saw the global one
    total_tokens = int(make_batch(seed=1).batch["response_mask"].sum())
    assert fsdp["metrics"]["batch_num_tokens"] == single["metrics"]["batch_num_tokens"] == total_tokens

    for key in ("loss", "grad_norm"):
        assert fsdp["metrics"][key] == pytest.approx(single["metrics"][key], abs=1e-5), key
        assert fsdp["step2"][key] == pytest.approx(single["step2"][key], abs=1e-5), key
    for name, tensor in single["params"].items():
        torch.testing.assert_close(fsdp["params"][name], tensor, atol=1e-5, rtol=0, msg=name)
        torch.testing.assert_close(
            fsdp["params2"][name], single["params2"][name], atol=1e-5, rtol=0, msg=name
        )

    moved = max((single["params"][k] - v).abs().max().item() for k, v in tiny_lm().state_dict().items())
    assert moved > 5e-4  # one step moved the weights far more than the tolerance

    # forward-only under FSDP: rank 0's log-probs are the first half of the one-process ones
    assert fsdp["log_probs"].shape == (GLOBAL_BATCH // WORLD_SIZE, RESPONSE_LEN)
    torch.testing.assert_close(
        fsdp["log_probs"], single["log_probs"][: GLOBAL_BATCH // WORLD_SIZE], atol=1e-5, rtol=0
    )

    # the sharded checkpoint resumes exactly
    assert fsdp["step2_resumed"]["loss"] == pytest.approx(fsdp["step2"]["loss"], abs=1e-6)
    cosine_lr_at_step_1 = 1e-3 * (0.5 + 0.5 * math.cos(math.pi / 4))
    assert (
        fsdp["step2_resumed"]["lr"]
        == pytest.approx(fsdp["step2"]["lr"])
        == pytest.approx(cosine_lr_at_step_1)
    )
    for name, tensor in fsdp["params2"].items():
        torch.testing.assert_close(fsdp["params2_resumed"][name], tensor, atol=1e-6, rtol=0, msg=name)
