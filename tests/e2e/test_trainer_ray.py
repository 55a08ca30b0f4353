"""The trainer on Ray worker groups: 2 FSDP ranks train exactly like 1 rank; a dead worker is a clear error.

One Ray trainer (PPO with a critic and a KL loss, so actor, reference and critic are all colocated
in the 2 rank processes) runs one step and is compared with the same step in-process on 1 rank:
same sampled batch (the hf rollout lives in the controller, seeded), same loss, same updated
weights. Then a worker is killed in the middle of the next step and the trainer must fail with
an error naming the worker and the method, quickly.

One mini-batch per step (`ppo_mini_batch_size = train_batch_size`): each rank cuts ITS half of the
batch into mini-batches (verl's `TrainingWorker.train_mini_batch` does the same), so with several
mini-batches the k-th optimizer step on 2 ranks sees rows from both halves, not the k-th slice of the
1-rank batch, and the runs legitimately part ways after the first optimizer step.

Tolerance: AdamW's first step is lr * g / (|g| + eps); with verl's eps = 1e-8 an element whose
gradient is ~1e-9 flips sign under reduction-order noise and moves by 2 * lr, so both runs use
`optim.override_optimizer_config={eps: 1e-4}` (the update then changes by at most lr/eps times the
gradient noise, ~1e-9).
"""
import time

import pytest
import ray
import torch

from minirl.config import load
from minirl.single_controller.ray import WorkerGroupError
from minirl.trace import read_trace
from minirl.trainer.main_ppo import TaskRunnerV1

pytestmark = pytest.mark.slow

REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return (len(solution_str) % 3) / 2.0   # varied within a group, so advantages and gradients are not zero
"""


def overrides(tmp_path, name, ranks):
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    return [
        "actor_rollout_ref.model.path=minirl://tiny-qwen2",
        "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "data.max_response_length=8",
        "algorithm.adv_estimator=gae", "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.optim.override_optimizer_config={eps: 1.0e-4}",
        "critic.optim.override_optimizer_config={eps: 1.0e-4}",
        f"reward.custom_reward_function.path={reward}", "trainer.total_training_steps=1",
        "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.logger=[]", "trace.level=stages",
        f"trainer.n_gpus_per_node={ranks}", f"trainer.default_local_dir={tmp_path / name}",
    ]


def rollout_weights(trainer):
    """The rollout's copy of the actor after the step's weight sync (= the updated actor)."""
    return {k: v.detach().clone() for k, v in trainer.rollout.module.state_dict().items()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, ray_session):
    tmp = tmp_path_factory.mktemp("ray_trainer")
    single = TaskRunnerV1().run(load(overrides(tmp, "one_rank", 1)))
    assert single.worker_group_backend == "inprocess"
    cfg = load(overrides(tmp, "two_ranks", 2))
    two = TaskRunnerV1().build(cfg)  # built, not run: the kill test below reuses its workers
    yield single, two, cfg
    two.close()


def test_two_fsdp_ranks_on_ray_train_like_one_rank(runs):
    single, two, cfg = runs
    assert two.worker_group_backend == "ray" and two.actor_rollout_wg.world_size == 2
    assert two.critic_wg.workers == two.actor_rollout_wg.workers  # colocated: the same 2 processes
    # the agent loop follows the trainer's workers: a Ray actor of its own (verl's AgentLoopWorker), not this process
    assert two.agent_loop_manager.placement == "ray" and single.agent_loop_manager.placement == "process"
    assert two.agent_loop_manager.worker_pids()[0] not in (0, two.process_table()["controller"])
    two.fit()
    a, b = single.history[-1], two.history[-1]
    assert a["step"] == b["step"] == 1
    assert a["critic/score/mean"] == b["critic/score/mean"]  # the same sampled batch
    # a real gradient (the loss itself is ~0 at ratio 1 with whitened GAE advantages)
    assert a["actor/grad_norm"] > 1e-3 and a["critic/vf_loss"] > 1e-3
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm",
                "critic/values/mean", "critic/advantages/mean"):
        assert b[key] == pytest.approx(a[key], rel=1e-6, abs=1e-5), key  # grad norms are ~20
    wa, wb = rollout_weights(single), rollout_weights(two)
    assert wa.keys() == wb.keys()
    moved = max((wa[k] - single_initial(single, k)).abs().max().item() for k in wa)
    assert moved > 1e-6  # the update changed the weights...
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-5, rtol=0), k  # ...identically on 1 and on 2 ranks
    # the work really was split: each rank trained on half of every mini-batch
    events = [e for e in read_trace(cfg.trace.dir) if e.get("kind") == "stage"]
    upd = next(e for e in events if e["stage"] == "update_actor")
    assert upd["extra"]["mini_batch_size_per_rank"] == [16]  # 8 prompts * 4 samples / 2 ranks
    assert upd["extra"]["optimizer_steps"] == 1  # both ranks step their shards of one global step
    sample = next(e for e in events if e["stage"] == "sample")
    tq = sample["extra"]["transfer_queue"]
    assert tq["keys"] == 32 and tq["fields"]["responses"]["layout"] == "nested"
    assert len(two.tq) == 0  # the step's trajectories left the TransferQueue


def single_initial(trainer, key):
    """The initial actor weights: the reference policy never trains."""
    ref = trainer.actor_rollout_wg.workers[0].ref.engine.module
    return dict(ref.state_dict())[key]


def test_a_worker_killed_mid_step_is_a_clear_error(runs):
    _, two, _ = runs
    victim = two.actor_rollout_wg.workers[1]
    two.global_steps = max(two.global_steps, 1)  # as fit() counts: the first step is 1 (this fixture may be fresh)
    two.on_sample_end = lambda: ray.kill(victim)  # between sampling and the first worker call
    t0 = time.monotonic()
    with pytest.raises(WorkerGroupError, match=r"worker rank 1 of 2 .*running 'actor_rollout_ref_\w+'.* died"):
        two.step({}, {})
    assert time.monotonic() - t0 < 60
