"""Where rewards run: per session inside the rollout (rule, custom function), overlapping generation;
the reward managers (naive, batch, dapo) and a dict-returning function's extra columns and metrics."""
import textwrap

import pytest
import torch

from minirl.config import load
from minirl.notebook import small_run
from minirl.workers.reward import RewardLoopManager, collect_reward_info
from tests.unit.test_reward_inputs import RESPONSES, TRUTHS, make_batch

TINY = ["actor_rollout_ref.model.path=minirl://tiny-qwen2"]


@pytest.fixture(scope="module")
def tokenizer():
    from minirl.models import build_tokenizer

    return build_tokenizer()


def write(tmp_path, source, name="reward_fn.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


def stages(run, step):
    return [e["stage"] for e in run.events if e.get("kind") == "stage" and e["step"] == step]


@pytest.mark.slow
def test_default_run_scores_each_session_inside_the_rollout_span(tmp_path):
    """verl V1 without a reward model: no reward stage; every session scored before the rollout span ends."""
    run = small_run(TINY + ["trainer.val_before_train=true"], steps=1, toy_reward=True, workdir=str(tmp_path))
    assert "reward" not in stages(run, 1) and "rollout" in stages(run, 1)
    rollout = run.stage("rollout", step=1)
    assert "rm_scores" in rollout["added"] and rollout["fields"]["rm_scores"]["storage"] == "transfer_queue"
    end = rollout["t_start"] + rollout["wall_s"]
    timing = rollout["extra"]["session_timing"]
    assert len(timing) == 32 and all(rollout["t_start"] <= t["score_start"] <= t["score_end"] <= end for t in timing)
    assert all(t["score_end"] <= t["end"] for t in timing)  # scored, then written to the TransferQueue
    batch = run.batches[1]
    # the toy function returns {"score", "acc"}: both become columns and metrics; nothing failed
    assert batch.meta_info["reward_extra_keys"] == ["score", "acc"] and "reward_extra_info" not in batch.non_tensor_batch
    scores = batch.batch["rm_scores"].sum(-1)
    assert torch.allclose(scores, torch.tensor([float(x) for x in batch.non_tensor_batch["score"]]))
    row = run.trainer.history[-1]
    assert row["reward/failures"] == 0 and row["reward/score/mean"] == pytest.approx(float(scores.mean()), abs=1e-6)
    assert "val-core/minirl/arithmetic/acc/mean@1" in run.trainer.history[0]  # validation used the stored scores


@pytest.mark.slow
def test_reward_overlaps_generation(tmp_path):
    """With 4 rollout calls of 8, the first sessions are being scored before the last ones finish generating."""
    source = """
    import time
    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        time.sleep(0.02)  # a judge that takes a moment
        return 0.0
    """
    run = small_run(TINY + ["actor_rollout_ref.rollout.max_num_seqs=8",
                            f"reward.custom_reward_function.path={write(tmp_path, source)}"],
                    steps=1, workdir=str(tmp_path))
    rollout = run.stage("rollout", step=1)
    assert rollout["extra"]["rollout_batches"] == [8, 8, 8, 8]
    timing = rollout["extra"]["session_timing"]
    generated = [t["start"] + t["generate_sequences"] for t in timing]
    assert min(t["score_start"] for t in timing) < max(generated)


def test_batch_manager_scores_the_sessions_that_end_together_in_one_call(tokenizer, tmp_path):
    source = """
    def compute_score(data_sources, solution_strs, ground_truths, extra_infos):
        return [{"score": float(len(solution_strs)), "n": len(solution_strs)} for _ in solution_strs]
    """
    cfg = load(TINY + [f"reward.custom_reward_function.path={write(tmp_path, source)}"])
    manager = RewardLoopManager(cfg, tokenizer)
    assert type(manager.reward_loop_workers[0].reward_manager).__name__ == "BatchRewardManager"
    data = make_batch(tokenizer, RESPONSES * 2, TRUTHS * 2)
    data.union(manager.compute_rm_score(data))
    metrics = collect_reward_info(data)
    assert data.batch["rm_scores"].sum(-1).tolist() == [6.0] * 6 and metrics["reward/n/mean"] == 6.0


def test_dapo_overlong_penalty(tokenizer):
    """verl's DAPORewardManager: min(0, -(L - (max_resp_len - len)) / len * penalty_factor) added to the score."""
    cfg = load(TINY + ["reward.reward_manager.name=dapo", "+reward.reward_kwargs.max_resp_len=8",
                       "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
                       "+reward.reward_kwargs.overlong_buffer_cfg.len=4",
                       "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
                       "+reward.reward_kwargs.overlong_buffer_cfg.log=true"])
    manager = RewardLoopManager(cfg, tokenizer)
    data = make_batch(tokenizer, ["#### 12", "#### 7 xx", "## 30"], ["12", "7", "30"])  # 7, 9, 5 tokens
    data.union(manager.compute_rm_score(data))
    collect_reward_info(data)
    rule = [1.0, 1.0, 0.0]
    lengths = [7, 9, 5]
    expected = [r + min(0.0, -(n - 4) / 4) for r, n in zip(rule, lengths)]
    assert data.batch["rm_scores"].sum(-1).tolist() == pytest.approx(expected)
    assert list(data.non_tensor_batch["overlong"]) == [True, True, True]
    assert list(data.non_tensor_batch["overlong_reward"]) == pytest.approx([-0.75, -1.25, -0.25])


def test_where_rewards_run_follows_verls_rule(tokenizer, tmp_path):
    """reward_loop_worker_handles: workers (score during rollout) unless the reward model is colocated."""
    cfg = load(TINY + ["reward.num_workers=3"])
    manager = RewardLoopManager(cfg, tokenizer)
    assert len(manager.reward_loop_worker_handles) == 3 and manager.reward_model_manager is None
