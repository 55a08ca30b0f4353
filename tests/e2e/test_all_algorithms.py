"""Every advantage estimator and every policy loss verl registers, chosen by verl's config key, trains 2 steps.

One parametrised slow test: `algorithm.adv_estimator=<each of the 14>` with the vanilla loss, then
`actor_rollout_ref.actor.policy_loss.loss_mode=<each of the 12>` with GRPO. Tiny settings (4 prompts x 4
responses of at most 6 tokens, no validation, no trace) keep a run at about half a second after the
first; all run in this one pytest process. The reward is a custom `compute_score` with two components
(`printable`, `letters`) so the random-init model gets varied scores (the built-in arithmetic reward is 0 for it,
which would make every advantage 0) and gdpo has columns to normalise.
"""

import json
import math

import pytest
import torch

from minirl.config import load
from minirl.trainer.ppo import core_algos
from minirl.trainer.main_ppo import TaskRunnerV1

pytestmark = pytest.mark.slow

REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Two components a random byte-level model hits with varying frequency: printable and ASCII-letter shares."""
    n = max(len(solution_str), 1)
    printable = sum(c.isascii() and c.isprintable() for c in solution_str) / n
    letters = sum(c.isascii() and c.isalpha() for c in solution_str) / n
    return {"score": printable + letters, "printable": printable, "letters": letters}
'''

TINY = ["actor_rollout_ref.model.path=minirl://tiny-qwen2",  # random init: the formulas are under test, not learning
        "data.train_batch_size=4", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "data.max_response_length=6",
        "trainer.total_training_steps=2", "trainer.val_before_train=false", "trainer.test_freq=-1",
        "trainer.logger=[file]", "trace.level=off"]

# what an estimator or loss needs beyond the defaults (the keys verl uses for them)
EXTRA = {
    "gdpo": ["algorithm.gdpo_reward_keys=[printable,letters]", "algorithm.gdpo_reward_weights=[1.0,0.5]"],
    "optimal_token_baseline": ["actor_rollout_ref.actor.calculate_sum_pi_squared=true"],
    "tir_optimal_token_baseline": ["actor_rollout_ref.actor.calculate_sum_pi_squared=true"],
    "dro": ["actor_rollout_ref.actor.policy_loss.dro_beta=0.1"],
    "bypass_mode": ["algorithm.rollout_correction.bypass_mode=true",
                    "actor_rollout_ref.actor.policy_loss.rollout_correction.rollout_rs=token_k1",
                    "actor_rollout_ref.actor.policy_loss.rollout_correction.rollout_rs_threshold=0.5_2.0"],
}
# metrics only the named loss logs, as a check that the configured function ran
SIGNATURE = {"bypass_mode": "actor/rollout_corr/kl", "clip_cov": "actor/pg_clipfrac", "kl_cov": "actor/ppo_kl"}


def _cases():
    for name in sorted(core_algos.ADV_ESTIMATOR_REGISTRY):
        yield pytest.param("algorithm.adv_estimator", name, id=f"adv-{name}")
    for name in sorted(core_algos.POLICY_LOSS_REGISTRY):
        yield pytest.param("actor_rollout_ref.actor.policy_loss.loss_mode", name, id=f"loss-{name}")


@pytest.fixture(scope="module")
def reward_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("reward") / "two_components.py"
    path.write_text(REWARD)
    return path


def test_every_name_is_covered():
    assert len(core_algos.ADV_ESTIMATOR_REGISTRY) == 14 and len(core_algos.POLICY_LOSS_REGISTRY) == 12


@pytest.mark.parametrize("key,name", list(_cases()))
def test_two_training_steps(key, name, reward_file, tmp_path):
    cfg = load(TINY + [f"{key}={name}", f"reward.custom_reward_function.path={reward_file}",
                       f"trainer.default_local_dir={tmp_path}"] + EXTRA.get(name, []))
    trainer, kept = TaskRunnerV1().build(cfg), {}
    trainer.add_step_callback(lambda step, batch, metrics: kept.__setitem__(step, batch))
    try:
        trainer.fit()
    finally:
        trainer.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(math.isfinite(r["actor/pg_loss"]) and math.isfinite(r["actor/grad_norm"]) for r in rows)
    if name in SIGNATURE:
        assert SIGNATURE[name] in rows[-1], sorted(rows[-1])
    adv, mask = kept[2].batch["advantages"], kept[2].batch["response_mask"].bool()
    assert adv.shape == (16, 6) and torch.isfinite(adv).all()
    assert adv[mask].abs().sum() > 0, "every advantage is 0: the step had no learning signal"
    assert rows[-1]["actor/pg_loss"] != 0.0
    if name != "gae":  # GAE whitens the masked positions too; every other estimator zeroes them
        assert (adv[~mask] == 0).all()
