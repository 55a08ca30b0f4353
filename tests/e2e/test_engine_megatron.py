"""The Megatron-layout engine (TP x PP x DP, 1F1B) trains exactly like one process, in every layout.

Two PPO steps (old log-probs from a forward, then `TrainingWorker.train_mini_batch` with minirl's
`ppo_loss` on a global mini-batch of 8 sequences, micro-batches of 2) run on one process with the
FSDP engine (no mesh: the plain module), then with `model_engine=megatron` on 2 gloo processes as
pp=2 and on 4 as tp=2 x pp=2 and dp=2 x pp=2. Each rank gets the rows of its dp rank (every TP and
PP rank of a dp rank the same rows, as the nd-mesh dispatch does). Both steps' losses and grad norms
and the weights after them (`get_per_tensor_param`: gathered over TP, broadcast over PP) equal the
one-process run within ATOL = 1e-5 (fp32; the layouts sum the same numbers in another order), while
one step moves the weights by more than 50x that.

The checkpoint contract: the FSDP engine saves on dp=2 after step 1; the Megatron engine resumes it
on tp=2 and on pp=2 (and the FSDP engine resumes a pp=2 Megatron checkpoint): the loaded weights equal
the saved ones bit for bit, and step 2 from them gives the one-process step 2's losses and weights.
The weights every layout exports load into a fresh Hugging Face model (`strict=True`).

The per-rank trace records the pipeline schedule: the pp=2 run writes `trace.rank<r>.jsonl` through
`minirl.trace.worker_trace` and each stage's ops are the 1F1B order (stage 0: one warm-up forward).
Process groups come from `torch.multiprocessing` (no Ray); the Ray run of `minirl train
model_engine=megatron` (actor, reference and critic, all pp=2) is the last test.
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from test_engine_torchtitan import ATOL, GLOBAL, ppo_step, tiny_lm

OPTIM = {"lr": 1e-3, "clip_grad": 1.0, "weight_decay": 0.01, "lr_scheduler_type": "cosine",
         "total_training_steps": 4, "override_optimizer_config": {"eps": 1e-4}}


def make_engine(backend: str = "megatron", **sizes):
    from minirl.workers.engine import EngineRegistry

    engine = EngineRegistry.new("language_model", backend, {"module": tiny_lm()},
                                {"strategy": backend, "device": "cpu", "seed": 0, **sizes}, OPTIM)
    engine.initialize()
    return engine


def two_steps(engine) -> dict:
    return {"step1": ppo_step(engine, seed=1), "step2": ppo_step(engine, seed=2)}


# ----------------------------------------------------------------------------- what runs in each process
def _layouts_of_2(rank: int, out_dir: str) -> dict:
    """pp=2 (traced); then the checkpoint contract: FSDP dp=2 saves, Megatron tp=2 and pp=2 resume, and back."""
    from minirl.trace.worker_trace import close_worker_tracer, init_worker_tracer, worker_call

    init_worker_tracer(os.path.join(out_dir, "trace"), "fields", "pp2", rank)
    pp2 = make_engine(pipeline_model_parallel_size=2)
    with worker_call({"rank": rank, "world_size": 2, "method": "update_actor", "role": "actor"}):
        step1 = ppo_step(pp2, seed=1)
    out = {"pp2": {"step1": step1, "step2": ppo_step(pp2, seed=2)}, "pp2_stage": pp2.layout()["stage"],
           "pp2_collect": pp2.is_mp_src_rank_with_outputs(), "pp2_dp_rank": pp2.get_data_parallel_rank()}
    close_worker_tracer()

    ckpt = os.path.join(out_dir, "ckpt_fsdp_dp2")
    dp2 = make_engine("fsdp2")
    out["dp2_step1"] = ppo_step(dp2, seed=1)
    dp2.save_checkpoint(ckpt, global_step=1)
    for name, sizes in (("tp2", {"tensor_model_parallel_size": 2}), ("pp2", {"pipeline_model_parallel_size": 2})):
        resumed = make_engine(**sizes)
        resumed.load_checkpoint(ckpt)
        out[f"{name}_loaded"] = dict(resumed.get_per_tensor_param())
        out[f"{name}_resumed_step2"] = ppo_step(resumed, seed=2)
        if name == "pp2":  # and back: the Megatron pp=2 checkpoint, resumed by the FSDP engine on dp=2
            back = os.path.join(out_dir, "ckpt_megatron_pp2")
            again = make_engine(pipeline_model_parallel_size=2)
            again.load_checkpoint(ckpt)
            again.save_checkpoint(back, global_step=1)
            fsdp = make_engine("fsdp2")
            fsdp.load_checkpoint(back)
            out["fsdp_from_pp2_step2"] = ppo_step(fsdp, seed=2)
    return out


def _layouts_of_4(rank: int, out_dir: str) -> dict:
    out = {}
    for name, sizes in (("tp2_pp2", {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2}),
                        ("dp2_pp2", {"pipeline_model_parallel_size": 2})):
        engine = make_engine(**sizes)
        out[name] = {**two_steps(engine), "dp_rank": engine.get_data_parallel_rank(),
                     "collect": engine.is_mp_src_rank_with_outputs(), "coords": engine.layout()["coords"],
                     "q_local": tuple(next(iter(engine.module.model.layers.values())).self_attn.q_proj.weight
                                      .to_local().shape) if sizes.get("tensor_model_parallel_size") else None,
                     "schedule": [(o["op"], o["micro_batch"]) for o in engine.last_schedule]}
    return out


def _run_rank(rank: int, world: int, port: int, out_dir: str, fn_name: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.save(globals()[fn_name](rank, out_dir), os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _spawn(world: int, fn_name: str, out_dir) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.makedirs(out_dir, exist_ok=True)
    mp.spawn(_run_rank, args=(world, port, str(out_dir), fn_name), nprocs=world, join=True)
    return [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False) for r in range(world)]


# ----------------------------------------------------------------------------- checks
@pytest.fixture(scope="module")
def single():
    torch.set_num_threads(1)
    return two_steps(make_engine("fsdp2"))


def _same_step(got: dict, want: dict, what: str, dp_ranks: list[dict] | None = None) -> None:
    """Same grad norm; the same global pg_loss (each dp rank reports its share x dp: their mean is the global loss)."""
    assert got["metrics"]["grad_norm"][0] == pytest.approx(want["metrics"]["grad_norm"][0], abs=1e-5), what
    losses = [r["metrics"]["actor/pg_loss"][0] for r in (dp_ranks or [got])]
    assert sum(losses) / len(losses) == pytest.approx(want["metrics"]["actor/pg_loss"][0], abs=1e-6), what


def _same_weights(got: dict, want: dict, atol: float = ATOL) -> None:
    assert got.keys() == want.keys()
    for name, tensor in want.items():
        torch.testing.assert_close(got[name], tensor, atol=atol, rtol=0, msg=name)


def test_rank_layout_follows_megatrons_order():
    from minirl.workers.engine.megatron_parallel import layers_of_stage, rank_layout

    ranks = rank_layout(8, tp=2, pp=2)  # dp = 8 / (2 * 2) = 2; tp fastest, then dp, then pp
    assert [(r["tp"], r["dp"], r["pp"]) for r in ranks[:4]] == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]
    assert [r["rank"] for r in ranks if r["reports"]] == [4, 6]  # tp rank 0 of the last stage, one per dp rank
    assert [layers_of_stage(5, 2, s) for s in range(2)] == [[0, 1, 2], [3, 4]]


def test_impossible_layouts_fail_with_one_line():
    from minirl.workers.engine.megatron_parallel import check_layout

    cases = [({"world_size": 3, "tp": 1, "pp": 2}, "does not divide the 3 ranks"),
             ({"world_size": 4, "tp": 1, "pp": 4, "num_layers": 2}, "more than the model's 2 decoder layers"),
             ({"world_size": 2, "tp": 1, "pp": 0}, "must be >= 1"),
             ({"world_size": 2, "tp": 1, "pp": 1, "cp": 2}, "context_parallel_size=2"),
             ({"world_size": 2, "tp": 1, "pp": 1, "vpp": 2}, "virtual_pipeline_model_parallel_size=2"),
             ({"world_size": 3, "tp": 3, "pp": 1, "model_config": tiny_lm().config}, "num_attention_heads=4")]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match) as err:
            check_layout(**kwargs)
        assert "\n" not in str(err.value) and "Fix:" in str(err.value)
    with pytest.raises(ValueError, match="does not divide the 1 ranks"):  # one process cannot hold two stages
        make_engine(pipeline_model_parallel_size=2)


def test_model_engine_group_selects_megatron_and_checks_the_layout():
    from minirl.config import ConfigError, derived_numbers, load

    mg = "actor_rollout_ref.actor.megatron"
    cfg = load(["model_engine=megatron", f"{mg}.tensor_model_parallel_size=2", f"{mg}.pipeline_model_parallel_size=2",
                "trainer.n_gpus_per_node=8"])
    assert (cfg.actor_rollout_ref.actor.strategy, cfg.actor_rollout_ref.ref.strategy, cfg.critic.strategy) == \
        ("megatron",) * 3
    assert cfg.actor_rollout_ref.ref.megatron.pipeline_model_parallel_size == 2  # the reference follows the actor
    assert cfg.critic.megatron.pipeline_model_parallel_size == 1  # the critic has its own layout, as in verl
    assert derived_numbers(cfg).dp_size == 2  # 8 ranks / (tp 2 x pp 2)
    bad = [([f"{mg}.pipeline_model_parallel_size=2"], "exists only with model_engine=megatron"),
           (["model_engine=megatron", f"{mg}.pipeline_model_parallel_size=2", "trainer.n_gpus_per_node=3"],
            "does not divide the 3 ranks"),
           (["model_engine=megatron", f"{mg}.context_parallel_size=2"], "minirl does not implement it"),
           (["model_engine=megatron", f"{mg}.use_distributed_optimizer=true"], "ZeRO-1")]
    for overrides, match in bad:
        with pytest.raises(ConfigError, match=match):
            load(overrides)


def test_one_process_megatron_engine_trains_like_fsdp(single):
    engine = make_engine()
    got = two_steps(engine)
    for step in ("step1", "step2"):
        _same_step(got[step], single[step], step)
        _same_weights(got[step]["params"], single[step]["params"])
    assert engine.layout()["stage"] == {"pp_rank": 0, "layers": [0, 1], "pre_process": True, "post_process": True,
                                        "shared_embedding": False}
    assert [o["op"] for o in engine.last_schedule] == ["forward", "backward"] * (GLOBAL // 2)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("megatron2")
    return _spawn(2, "_layouts_of_2", out), out


@pytest.mark.slow
def test_pp2_trains_like_one_process(single, two_ranks):
    ranks, _ = two_ranks
    start = tiny_lm().state_dict()
    moved = max((single["step1"]["params"][k] - v).abs().max().item() for k, v in start.items())
    assert moved > 50 * ATOL
    assert [r["pp2_stage"]["layers"] for r in ranks] == [[0], [1]]
    assert [r["pp2_stage"]["shared_embedding"] for r in ranks] == [False, True]  # the last stage's copy of the tie
    assert [r["pp2_collect"] for r in ranks] == [False, True] and [r["pp2_dp_rank"] for r in ranks] == [0, 0]
    for r in ranks:
        for step in ("step1", "step2"):
            _same_step(r["pp2"][step], single[step], f"pp2 {step}")
            _same_weights(r["pp2"][step]["params"], single[step]["params"])


@pytest.mark.slow
def test_pp2_trace_records_the_1f1b_schedule(two_ranks):
    from minirl.trace import read_trace
    from minirl.trace.show import worker_events

    _, out = two_ranks
    calls = {e["rank"]: e for e in worker_events(read_trace(out / "trace")) if e["method"] == "update_actor"}
    assert sorted(calls) == [0, 1]
    for rank, call in calls.items():
        infer, train = call["passes"]
        assert infer["pipeline"]["forward_only"] and {o["op"] for o in infer["pipeline"]["ops"]} == {"forward"}
        pipe = train["pipeline"]
        assert (pipe["pp_rank"], pipe["pp_size"], pipe["num_micro_batches"]) == (rank, 2, train["micro_batches"]) \
            == (rank, 2, 4)
        order = [(o["op"][0], o["micro_batch"]) for o in pipe["ops"]]
        warmup = ["F0", "F1"] if rank == 0 else ["F0"]  # stage 0 runs pp - 1 = 1 forward ahead
        assert [f"{op.upper()}{mb}" for op, mb in order[:len(warmup) + 1]] == warmup + ["B0"]
        assert sorted(order) == sorted([("f", i) for i in range(4)] + [("b", i) for i in range(4)])
        assert all(o["t_end"] >= o["t_start"] for o in pipe["ops"]) and pipe["busy_s"] > 0
    # a stage-1 forward of micro-batch i starts after stage 0 has finished it (the hidden states travel)
    f0 = {o["micro_batch"]: o for o in calls[0]["passes"][1]["pipeline"]["ops"] if o["op"] == "forward"}
    f1 = {o["micro_batch"]: o for o in calls[1]["passes"][1]["pipeline"]["ops"] if o["op"] == "forward"}
    assert all(f1[i]["t_start"] >= f0[i]["t_end"] for i in range(4))


@pytest.mark.slow
def test_checkpoint_saved_on_fsdp_dp2_resumes_on_tp2_and_pp2(single, two_ranks):
    ranks, _ = two_ranks
    r0 = ranks[0]
    saved = r0["dp2_step1"]["params"]
    _same_weights(saved, single["step1"]["params"])
    for name in ("tp2", "pp2"):
        _same_weights(r0[f"{name}_loaded"], saved, atol=0.0)  # the same model, bit for bit, in every layout
        for r in ranks:
            _same_step(r[f"{name}_resumed_step2"], single["step2"], f"{name} resumed")
            _same_weights(r[f"{name}_resumed_step2"]["params"], single["step2"]["params"])
        assert r0[f"{name}_resumed_step2"]["metrics"]["lr_after_step"] == \
            pytest.approx(single["step2"]["metrics"]["lr_after_step"])  # the LR schedule came along
    # and back: a pp=2 Megatron checkpoint resumed by the FSDP engine on dp=2 (each dp rank its half of the loss)
    _same_step(r0["fsdp_from_pp2_step2"], single["step2"], "fsdp from pp2", [r["fsdp_from_pp2_step2"] for r in ranks])
    _same_weights(r0["fsdp_from_pp2_step2"]["params"], single["step2"]["params"])
    # the exported weights are a Hugging Face model: they load into a fresh one, every key, nothing left over
    tiny_lm().load_state_dict(r0["pp2_loaded"], strict=True)


@pytest.mark.slow
def test_tp2_x_pp2_and_dp2_x_pp2_on_four_processes_train_like_one_process(single, tmp_path):
    ranks = _spawn(4, "_layouts_of_4", tmp_path / "four")
    # tp fastest, then dp, then pp: (tp, dp, pp) per rank
    assert [tuple(r["tp2_pp2"]["coords"][k] for k in ("tp", "dp", "pp")) for r in ranks] == \
        [(0, 0, 0), (1, 0, 0), (0, 0, 1), (1, 0, 1)]
    assert [tuple(r["dp2_pp2"]["coords"][k] for k in ("tp", "dp", "pp")) for r in ranks] == \
        [(0, 0, 0), (0, 1, 0), (0, 0, 1), (0, 1, 1)]
    assert [r["tp2_pp2"]["collect"] for r in ranks] == [False, False, True, False]
    assert [r["dp2_pp2"]["collect"] for r in ranks] == [False, False, True, True]
    assert ranks[0]["tp2_pp2"]["q_local"] == (64, 128)  # TP: half the query heads on each rank of a stage
    # dp=2 x pp=2: each dp rank runs its 4 rows as 2 micro-batches; tp=2 x pp=2: all 8 rows, 4 micro-batches
    assert ranks[0]["dp2_pp2"]["schedule"] == [("forward", 0), ("forward", 1), ("backward", 0), ("backward", 1)]
    assert len(ranks[0]["tp2_pp2"]["schedule"]) == 2 * GLOBAL // 2
    for name in ("tp2_pp2", "dp2_pp2"):
        for step in ("step1", "step2"):
            dp_ranks = [ranks[2][name][step], ranks[3][name][step]] if name == "dp2_pp2" else None
            _same_step(ranks[2][name][step], single[step], f"{name} {step}", dp_ranks)
            for r in ranks:
                _same_weights(r[name][step]["params"], single[step]["params"])


@pytest.mark.slow
def test_minirl_train_model_engine_megatron_pp2_on_ray_trains_like_one_rank(tmp_path, ray_session):
    """PPO with a critic and a KL loss: actor, reference and critic all pp=2 in the same 2 Ray actors."""
    from test_trainer_ray import overrides, rollout_weights

    from minirl.config import load
    from minirl.trainer.main_ppo import TaskRunnerV1

    single = TaskRunnerV1().run(load(overrides(tmp_path, "one_rank", 1)))
    mg = "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2"
    two = TaskRunnerV1().build(load([*overrides(tmp_path, "pp2", 2), "model_engine=megatron", mg,
                                     "critic.megatron.pipeline_model_parallel_size=2"]))
    try:
        two.fit()
        a, b = single.history[-1], two.history[-1]
        assert a["critic/score/mean"] == b["critic/score/mean"] and a["actor/grad_norm"] > 1e-3
        for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm"):
            assert b[key] == pytest.approx(a[key], abs=1e-5), key
        want, got = rollout_weights(single), rollout_weights(two)  # after the weight sync from the pp=2 stages
        for name, tensor in want.items():
            torch.testing.assert_close(got[name], tensor, atol=ATOL, rtol=0, msg=name)
    finally:
        two.close()


def test_pipeline_schedule_in_one_process_is_forward_then_backward():
    """`get_forward_backward_func(1)`: each micro-batch forward then backward, gradients accumulating."""
    from minirl.workers.engine.pipeline_schedule import (
        ScheduleRecorder,
        bubble_fraction,
        get_forward_backward_func,
    )

    w = torch.ones(3, requires_grad=True)
    recorder = ScheduleRecorder()
    get_forward_backward_func(1)(lambda i, _: (w * (i + 1)).sum(), 3, False, recorder)
    assert [(o["op"], o["micro_batch"]) for o in recorder.ops] == [
        ("forward", 0), ("backward", 0), ("forward", 1), ("backward", 1), ("forward", 2), ("backward", 2)]
    assert w.grad.tolist() == [6.0, 6.0, 6.0]  # 1 + 2 + 3
    assert bubble_fraction(4, 12) == pytest.approx(3 / 15)

