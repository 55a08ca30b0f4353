"""The torchtitan engine (DTensor TP x FSDP2) trains exactly like one process, in every layout.

One PPO step (old log-probs from a forward, then `TrainingWorker.train_mini_batch` with minirl's
`ppo_loss` on one global mini-batch of 8 sequences) runs on one process, then on 2 gloo processes as
(dp=2, tp=1) and (dp=1, tp=2), and on 4 as (dp=2, tp=2). Each rank gets the rows of its dp rank (the
TP ranks of a group the same rows, as the nd-mesh dispatch does). After the step the full weights
(`get_per_tensor_param`, all-gathered over both mesh dimensions) equal the one-process weights
within ATOL = 1e-5 (fp32; the layouts sum the same numbers in another order, ~1e-7 apart), while the
step itself moved them by more than 100x that. The checkpoint saved on dp=2 loads on tp=2 (DCP
reshards by global offsets): the loaded weights equal the saved ones exactly, and a second step from
them equals the one-process second step, which also checks the AdamW moments and the LR schedule.

Process groups are started directly with `torch.multiprocessing` (no Ray): the (dp=2) and (tp=2)
layouts share one 2-process group, the 4-process layout is the slow test. The `minirl train` runs
through Ray are the reference traces `traces/tp_2rank` and `traces/dp2_tp2`. The fast tests check
how `model_engine=torchtitan` selects the engine and what the config and the engine refuse.
"""

from __future__ import annotations

import os
import socket
from functools import cache, partial

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import Qwen2Config, Qwen2ForCausalLM

from minirl.protocol import DataProto

PROMPT, RESPONSE, VOCAB, GLOBAL = 6, 5, 259, 8
ATOL = 1e-5


def tiny_lm() -> Qwen2ForCausalLM:
    torch.manual_seed(0)  # the embedded preset's shape: 4 heads, 2 KV heads, MLP 384, tied embeddings
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=384, tie_word_embeddings=True))


def global_batch(seed: int) -> DataProto:
    """8 sequences with responses of different lengths and random advantages."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (GLOBAL, PROMPT + RESPONSE), generator=g)
    attention = torch.ones_like(ids)
    response_mask = torch.ones(GLOBAL, RESPONSE)
    for i in range(GLOBAL):
        n = RESPONSE - i % RESPONSE
        attention[i, PROMPT + n:] = 0
        response_mask[i, n:] = 0
    return DataProto.from_dict({
        "input_ids": ids, "attention_mask": attention, "position_ids": (attention.cumsum(-1) - 1).clamp(min=0),
        "responses": ids[:, PROMPT:], "response_mask": response_mask,
        "advantages": torch.randn(GLOBAL, RESPONSE, generator=g)})


def make_engine(tp: int):
    from minirl.workers.engine import TorchTitanEngineWithLMHead

    optim = {"lr": 1e-3, "clip_grad": 1.0, "weight_decay": 0.01, "lr_scheduler_type": "cosine",
             "total_training_steps": 4, "override_optimizer_config": {"eps": 1e-4}}
    engine = TorchTitanEngineWithLMHead({"module": tiny_lm()}, {"strategy": "torchtitan", "tensor_parallel_size": tp,
                                                               "device": "cpu", "seed": 0}, optim)
    engine.initialize()
    return engine


@cache
def actor_config():
    """minirl's default actor section (vanilla PPO clip, token-mean): what `ppo_loss` reads."""
    from minirl.config import load

    return load([]).actor_rollout_ref.actor


def ppo_step(engine, seed: int) -> dict:
    """old_log_probs by a forward, then one optimizer step on this rank's rows of the global mini-batch."""
    from minirl.workers.engine_workers import TrainingWorker
    from minirl.workers.utils.losses import ppo_loss

    dp, dp_rank = engine.get_data_parallel_size(), engine.get_data_parallel_rank()
    data = global_batch(seed).chunk(dp)[dp_rank]
    data.meta_info = {"micro_batch_size": 2, "temperature": 1.0}
    with engine.eval_mode():
        data.batch["old_log_probs"] = engine.infer_batch(data)["log_probs"] + 0.05  # a ratio != 1
    data.meta_info = {"mini_batch_size": GLOBAL, "micro_batch_size": 2, "epochs": 1, "temperature": 1.0}
    worker = TrainingWorker(engine, partial(ppo_loss, actor_config()))
    with engine.train_mode():
        metrics = worker.train_mini_batch(data)
    return {"metrics": metrics, "params": dict(engine.get_per_tensor_param())}  # every rank gathers


def one_process() -> dict:
    engine = make_engine(tp=1)
    step1 = ppo_step(engine, seed=1)
    step2 = ppo_step(engine, seed=2)
    return {"step1": step1, "step2": step2}


def _layouts_of_2(rank: int, out_dir: str) -> dict:
    """(dp=2, tp=1): a step, then save. (dp=1, tp=2): a step; a fresh tp=2 engine loads dp=2's checkpoint, steps."""
    ckpt = os.path.join(out_dir, "ckpt_dp2")
    dp2 = make_engine(tp=1)
    dp2_step = ppo_step(dp2, seed=1)
    shard = dp2.module.model.embed_tokens.weight.to_local().shape
    dp2.save_checkpoint(ckpt, global_step=1)
    tp2 = make_engine(tp=2)
    tp2_step = ppo_step(tp2, seed=1)
    q_shard = tp2.module.model.layers[0].self_attn.q_proj.weight.to_local().shape
    resumed = make_engine(tp=2)
    resumed.load_checkpoint(ckpt)
    loaded = dict(resumed.get_per_tensor_param())
    step2 = ppo_step(resumed, seed=2)
    return {"dp2": dp2_step, "tp2": tp2_step, "loaded": loaded, "resumed_step2": step2,
            "dp2_embed_shard": tuple(shard), "tp2_q_shard": tuple(q_shard)}


def _layout_2x2(rank: int, out_dir: str) -> dict:
    engine = make_engine(tp=2)
    q = engine.module.model.layers[0].self_attn.q_proj.weight
    return {"step1": ppo_step(engine, seed=1), "q_local": tuple(q.to_local().shape),
            "dp_rank": engine.get_data_parallel_rank(), "collect": engine.is_mp_src_rank_with_outputs()}


def _run_rank(rank: int, world: int, port: int, out_dir: str, fn_name: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = globals()[fn_name](rank, out_dir)
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _spawn(world: int, fn_name: str, out_dir) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.makedirs(out_dir, exist_ok=True)
    mp.spawn(_run_rank, args=(world, port, str(out_dir), fn_name), nprocs=world, join=True)
    return [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False) for r in range(world)]


@pytest.fixture(scope="module")
def single():
    torch.set_num_threads(1)
    return one_process()


def _assert_same_weights(got: dict, want: dict, atol: float = ATOL) -> None:
    assert got.keys() == want.keys()
    for name, tensor in want.items():
        torch.testing.assert_close(got[name], tensor, atol=atol, rtol=0, msg=name)


def test_one_step_moves_the_weights_far_more_than_the_tolerance(single):
    start = tiny_lm().state_dict()
    moved = max((single["step1"]["params"][k] - v).abs().max().item() for k, v in start.items())
    assert moved > 50 * ATOL  # Adam moves each weight by about lr = 1e-3


@pytest.mark.slow
def test_dp2_and_tp2_train_like_one_process_and_share_checkpoints(single, tmp_path):
    ranks = _spawn(2, "_layouts_of_2", tmp_path / "two")
    r0 = ranks[0]
    assert r0["dp2_embed_shard"] == ((VOCAB + 1) // 2, 128)  # FSDP: half the embedding rows (259 -> 130 + 129)
    assert r0["tp2_q_shard"] == (64, 128)  # TP: half the query heads (2 of 4, 32 dims each)
    for layout in ("dp2", "tp2"):
        _assert_same_weights(r0[layout]["params"], single["step1"]["params"])
        want = single["step1"]["metrics"]
        # the global grad norm: the same number on every rank
        for r in ranks:
            assert r[layout]["metrics"]["grad_norm"][0] == pytest.approx(want["grad_norm"][0], abs=1e-5), layout
        # each rank's pg_loss is scaled by dp_size (FSDP averages gradients): the dp-rank mean is the global loss
        mean = sum(r[layout]["metrics"]["actor/pg_loss"][0] for r in ranks) / len(ranks)
        assert mean == pytest.approx(want["actor/pg_loss"][0], abs=1e-5), layout
    # the two TP ranks computed the same loss on the same rows
    assert ranks[0]["tp2"]["metrics"]["actor/pg_loss"] == pytest.approx(ranks[1]["tp2"]["metrics"]["actor/pg_loss"])
    # saved on dp=2, loaded on tp=2: the same weights, bit for bit; then the same second step as one process
    _assert_same_weights(r0["loaded"], r0["dp2"]["params"], atol=0.0)
    _assert_same_weights(r0["resumed_step2"]["params"], single["step2"]["params"])
    assert r0["resumed_step2"]["metrics"]["lr_after_step"] == pytest.approx(single["step2"]["metrics"]["lr_after_step"])


@pytest.mark.slow
def test_dp2_x_tp2_on_four_processes_trains_like_one_process(single, tmp_path):
    ranks = _spawn(4, "_layout_2x2", tmp_path / "four")
    # rank r sits at (dp, tp) = divmod(r, 2): ranks 0, 1 share dp rank 0, and only tp rank 0 reports
    assert [r["dp_rank"] for r in ranks] == [0, 0, 1, 1]
    assert [r["collect"] for r in ranks] == [True, False, True, False]
    assert ranks[0]["q_local"] == (32, 128)  # 128 query rows / tp 2 / dp 2
    _assert_same_weights(ranks[0]["step1"]["params"], single["step1"]["params"])
    for r in ranks:
        assert r["step1"]["metrics"]["grad_norm"][0] == pytest.approx(single["step1"]["metrics"]["grad_norm"][0],
                                                                      abs=1e-5)


def test_model_engine_group_selects_torchtitan_and_checks_the_mesh():
    from minirl.config import ConfigError, derived_numbers, load

    tt = "actor_rollout_ref.actor.torchtitan"
    cfg = load(["model_engine=torchtitan", f"{tt}.tensor_parallel_size=2", "trainer.n_gpus_per_node=4"])
    assert (cfg.model_engine, cfg.actor_rollout_ref.actor.strategy, cfg.critic.strategy) == ("torchtitan",) * 3
    assert cfg.actor_rollout_ref.ref.torchtitan.tensor_parallel_size == 2  # the reference policy follows the actor
    assert derived_numbers(cfg).dp_size == 2  # 4 ranks / tp 2
    assert load([]).actor_rollout_ref.actor.get("torchtitan") is None  # model_engine=dp: no torchtitan keys
    bad = [
        ([f"{tt}.tensor_parallel_size=2"], "exists only with model_engine=torchtitan"),
        (["model_engine=veomni"], "minirl has dp, torchtitan, megatron"),
        (["model_engine=torchtitan", f"{tt}.tensor_parallel_size=2", "trainer.n_gpus_per_node=3"], "must divide the 3 ranks"),
        (["model_engine=torchtitan", f"{tt}.tensor_parallel_size=2", f"{tt}.data_parallel_shard_size=1",
          "trainer.n_gpus_per_node=4"], "data_parallel_shard_size=2"),
        (["model_engine=torchtitan", f"{tt}.pipeline_parallel_size=2"], "minirl does not implement it"),
    ]
    for overrides, match in bad:
        with pytest.raises(ConfigError, match=match):
            load(overrides)


def test_tensor_parallel_size_must_split_whole_heads():
    engine = make_engine(tp=1)
    engine.tp_size = 3  # as if built on 3 ranks: 4 query heads, 2 KV heads cannot be split 3 ways
    with pytest.raises(ValueError, match="does not divide the model's num_attention_heads=4"):
        engine._check_divisible_by_tp(engine.module)
