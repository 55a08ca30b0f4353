"""DAPO's dynamic sampling (`algorithm.filter_groups`) in the sync replay buffer, and a DAPO-style run.

The buffer is checked on hand-made groups: which are evicted (no spread in the metric), how many new
prompts are asked for (2 per eviction, verl's "evict k; refill 2k", at most `max_inflight_gen_batches`
train batches at a time), which are trained on (the oldest) and what is dropped (the surplus).
"""

from __future__ import annotations

import json

import pytest
import torch

from minirl.config import ConfigError, load
from minirl.trainer.ppo.replay_buffer import ReplayBuffer, submit_prompts
from minirl.transfer_queue import TransferQueue, uid_of


def put_group(tq: TransferQueue, uid: str, accs: list[float], step: int = 1) -> None:
    submit_prompts(tq, [uid], step)
    for i, acc in enumerate(accs):
        tq.kv_batch_put([f"{uid}_{i}_0"], fields={"responses": [torch.tensor([1, 2])], "reward_extra_info": [{"acc": acc}]},
                        tags=[{"status": "success", "global_steps": step}])
    tq.kv_batch_put([uid], tags=[{"status": "finished"}])


def buffer(tq, refills, spreads, **kw):
    """A buffer whose refill writes new groups with the next accs from `spreads`."""
    def refill(k: int) -> int:
        refills.append(k)
        for _ in range(k):
            put_group(tq, f"r{sum(refills)}-{len(spreads)}", spreads.pop(0))
        return k
    return ReplayBuffer(tq, refill_fn=refill, filter_groups_metric="acc", train_batch_size=4, **kw)


def test_no_spread_groups_are_evicted_without_refill_when_enough_remain():
    tq, refills = TransferQueue(), []
    for uid, accs in [("a", [1, 0]), ("b", [1, 1]), ("c", [0, 0]), ("d", [0, 1]), ("e", [1, 0, 0])]:
        put_group(tq, uid, accs)
    meta, metrics = buffer(tq, refills, []).sample(1, batch_size=2)
    assert sorted({uid_of(k) for k in meta.keys}) == ["a", "d"] and refills == []
    assert metrics["training/filter_groups/evicted_samples"] == 2
    assert metrics["training/filter_groups/discarded_surplus_samples"] == 1  # e: spread, but beyond the batch
    assert metrics["training/filter_groups/filtered_reward_counts/1"] == 1
    assert metrics["training/filter_groups/filtered_reward_counts/0"] == 1
    # evicted and surplus groups left the store; the batch's trajectories stay until the step ends (kv_clear)
    assert sorted(tq.kv_list("train")["train"]) == sorted(meta.keys)


def test_evict_k_refill_2k_until_the_batch_is_full():
    tq, refills = TransferQueue(), []
    for uid, accs in [("a", [1, 0]), ("b", [1, 1]), ("c", [0, 0]), ("d", [0, 0])]:
        put_group(tq, uid, accs)
    # 3 evicted -> 6 credits -> 4 now (the in-flight cap: 1 batch of 4); of those 2 have no spread -> 4 more credits
    spreads = [[1, 1], [0, 1], [0, 0], [1, 0], [1, 0], [0, 1], [1, 0], [0, 1]]
    meta, metrics = buffer(tq, refills, spreads).sample(1, batch_size=4)
    assert refills == [4, 4]
    assert len({uid_of(k) for k in meta.keys}) == 4
    assert metrics["training/filter_groups/evicted_samples"] == 5
    assert metrics["training/filter_groups/generated_groups"] == 12
    assert "a" in {uid_of(k) for k in meta.keys}  # the oldest groups with spread are trained on first


def test_missing_metric_and_hopeless_task_say_what_to_do():
    tq = TransferQueue()
    put_group(tq, "a", [1, 0])
    with pytest.raises(RuntimeError, match="missing DAPO metric 'score'.*has \\['acc'\\]"):
        ReplayBuffer(tq, refill_fn=lambda k: k, filter_groups_metric="score", train_batch_size=1).sample(1, 1)
    tq, refills = TransferQueue(), []
    put_group(tq, "z", [1, 1])
    with pytest.raises(RuntimeError, match="too easy or too hard"):
        buffer(tq, refills, [[1, 1]] * 20, max_refill_prompts=6).sample(1, batch_size=1)
    with pytest.raises(ValueError, match="requires refill_fn"):
        ReplayBuffer(tq, filter_groups_metric="acc")


@pytest.mark.parametrize("overrides,message", [
    (["algorithm.filter_groups.enable=true"], "needs algorithm.filter_groups.metric"),
    (["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc", "actor_rollout_ref.rollout.n=1",
      "algorithm.adv_estimator=reinforce_plus_plus"], "rollout.n >= 2"),
    (["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
      "trainer.v1.trainer_mode=colocate_async"], "sync buffer only"),
])
def test_filter_groups_config_checks(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load(overrides)


DAPO = ["actor_rollout_ref.actor.clip_ratio_low=0.2", "actor_rollout_ref.actor.clip_ratio_high=0.28",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean", "algorithm.filter_groups.enable=true",
        "algorithm.filter_groups.metric=acc", "reward.reward_manager.name=dapo",
        "+reward.reward_kwargs.overlong_buffer_cfg.enable=true", "+reward.reward_kwargs.overlong_buffer_cfg.len=3",
        "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
        "+reward.reward_kwargs.overlong_buffer_cfg.log=true", "+reward.reward_kwargs.max_resp_len=12"]


@pytest.mark.slow
def test_dapo_run_trains_only_on_groups_with_spread(tmp_path):
    from minirl.trainer.main_ppo import TaskRunnerV1

    cfg = load(DAPO + ["data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                       "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
                       "trainer.total_training_steps=2", "trainer.val_before_train=false", "trainer.test_freq=-1",
                       "trainer.logger=[file]", f"trainer.default_local_dir={tmp_path}", "trace.level=stages"])
    kept = {}
    trainer = TaskRunnerV1().build(cfg)
    trainer.add_step_callback(lambda step, batch, m: kept.__setitem__(step, batch))
    try:
        trainer.fit()
    finally:
        trainer.close()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    for step, batch in kept.items():
        accs: dict[str, list[float]] = {}
        nt = batch.non_tensor_batch  # reward_extra_info became columns (collect_reward_info)
        assert "overlong_reward" in nt  # the DAPO reward manager's shaping ran (log=True)
        for uid, acc in zip(nt["uid"], nt["acc"]):
            accs.setdefault(uid, []).append(float(acc))
        assert len(accs) == 4 and all(len(set(v)) > 1 for v in accs.values()), (step, accs)
        row = rows[step - 1]
        assert row["training/filter_groups/generated_groups"] == 4 + row["training/filter_groups/evicted_samples"] \
            + row["training/filter_groups/discarded_surplus_samples"]
