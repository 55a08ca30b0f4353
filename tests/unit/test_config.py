"""Config: Hydra overrides, schema checks, batch-size arithmetic and every clear-error case."""
import subprocess
import sys

import pytest

from minirl.config import ConfigError, derived_numbers, explain, load
from minirl.config.validate import check_model_length
from minirl.trainer.ppo.utils import need_critic, need_reference_policy

# verl's GSM8K GRPO example: examples/grpo_trainer/run_qwen3_4b_fsdp.sh (train 512, mini 256, micro 2, n 5, 8 GPUs)
VERL_GSM8K = [
    "data.train_batch_size=512",
    "actor_rollout_ref.actor.ppo_mini_batch_size=256",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.n=5",
    "trainer.n_gpus_per_node=8",
]


def test_default_config_loads_and_resolves():
    cfg = load()
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.actor_rollout_ref.rollout.response_length == cfg.data.max_response_length
    assert cfg.actor_rollout_ref.actor.rollout_n == cfg.actor_rollout_ref.rollout.n
    assert "${" not in str(cfg.trace.dir)


def test_overrides_apply_and_interpolations_follow():
    cfg = load(["actor_rollout_ref.rollout.n=4", "data.max_response_length=7", "algorithm.adv_estimator=rloo"])
    assert cfg.actor_rollout_ref.rollout.n == 4
    assert cfg.critic.rollout_n == 4
    assert cfg.actor_rollout_ref.rollout.response_length == 7
    assert cfg.algorithm.adv_estimator == "rloo"


def test_gsm8k_example_numbers():
    d = derived_numbers(load(VERL_GSM8K))
    assert d.sequences_per_step == 2560
    assert d.global_mini_batch_sequences == 1280
    assert d.per_rank_mini_batch == 160
    assert d.micro_batches_per_mini_batch == 80
    assert d.optimizer_steps_per_step == 2
    text = explain(load(VERL_GSM8K))
    assert "optimizer steps per step" in text and "2560" in text


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match="actor_rollout_ref.actor.ppo_mini_bach_size"):
        load(["+actor_rollout_ref.actor.ppo_mini_bach_size=4"])
    # without '+' Hydra refuses the key; minirl names it in one line and suggests the closest known key
    with pytest.raises(ConfigError, match=r"unknown config key 'actor_rollout_ref.actor.ppo_mini_bach_size'.*"
                                          r"did you mean 'actor_rollout_ref.actor.ppo_mini_batch_size'\?"):
        load(["actor_rollout_ref.actor.ppo_mini_bach_size=4"])


def test_wrong_type_is_named():
    with pytest.raises(ConfigError, match="data.train_batch_size"):
        load(["data.train_batch_size=lots"])


def test_train_batch_vs_mini_batch():
    with pytest.raises(ConfigError, match=r"data.train_batch_size=32 prompts cannot be split .*ppo_mini_batch_size=12"):
        load(["actor_rollout_ref.actor.ppo_mini_batch_size=12"])
    with pytest.raises(ConfigError, match="must be a multiple"):
        load(["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=16"])


def test_mini_batch_vs_dp():
    with pytest.raises(ConfigError, match=r"global mini-batch .* = 3 \* 1 = 3 sequences cannot be split over 2"):
        load(["data.train_batch_size=6", "actor_rollout_ref.actor.ppo_mini_batch_size=3",
              "actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=reinforce_plus_plus",
              "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"])


def test_micro_batch_vs_per_rank():
    with pytest.raises(ConfigError, match=r"ppo_micro_batch_size_per_gpu=48 does not divide the per-rank mini-batch of 128"):
        load(["trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=48"])
    with pytest.raises(ConfigError, match=r"2505"):
        load(["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=512"])


def test_group_estimators_need_n():
    with pytest.raises(ConfigError, match=r"rollout.n=1.*Fix: actor_rollout_ref.rollout.n=8"):
        load(["actor_rollout_ref.rollout.n=1"])
    with pytest.raises(ConfigError, match="rloo"):
        load(["actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=rloo"])


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ConfigError, match=r"adv_estimator='grpoo'.*Valid: .*gae.*grpo"):
        load(["algorithm.adv_estimator=grpoo"])
    with pytest.raises(ConfigError, match=r"loss_mode='ppo'.*Valid: .*vanilla"):
        load(["actor_rollout_ref.actor.policy_loss.loss_mode=ppo"])
    with pytest.raises(ConfigError, match=r"loss_agg_mode='mean'.*token-mean"):
        load(["actor_rollout_ref.actor.loss_agg_mode=mean"])
    with pytest.raises(ConfigError, match=r"kl_loss_type='k9'"):
        load(["actor_rollout_ref.actor.kl_loss_type=k9"])
    with pytest.raises(ConfigError, match=r"rollout.name='sglang'.*hf, vllm"):
        load(["actor_rollout_ref.rollout.name=sglang"])


def test_all_problems_reported_at_once():
    with pytest.raises(ConfigError, match=r"5 problems"):
        load(["algorithm.adv_estimator=nope", "actor_rollout_ref.actor.loss_agg_mode=nope",
              "actor_rollout_ref.actor.ppo_mini_batch_size=5"])


def test_response_length_vs_model():
    cfg = load()
    check_model_length(cfg, 52)
    with pytest.raises(ConfigError, match=r"40 \+ 12 = 52 tokens exceeds the model.s max_position_embeddings=50"):
        check_model_length(cfg, 50)


def test_critic_and_ref_switches():
    assert not need_critic(load())
    assert need_critic(load(["algorithm.adv_estimator=gae"]))
    assert need_reference_policy(load(["actor_rollout_ref.actor.use_kl_loss=true"]))
    assert not need_reference_policy(load())
    with pytest.raises(ConfigError, match="critic.ppo_micro_batch_size_per_gpu=48"):
        load(["algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=48"])


def test_cli_explain_and_error():
    ok = subprocess.run([sys.executable, "-m", "minirl.cli", "config", "explain", *VERL_GSM8K],
                        capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "micro-batches per mini-batch" in ok.stdout and " 80" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "minirl.cli", "config", "explain", "algorithm.adv_estimator=x"],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2
    assert "Valid:" in bad.stderr and "Traceback" not in bad.stderr


def test_registered_names_read_from_source_match_the_live_registries():
    """`minirl.config.registered` reads the names without importing the stages; they must be what the stages register."""
    from minirl.config import registered as reg
    from minirl.data import tasks
    from minirl.trainer.distillation import losses as distillation_losses
    from minirl.trainer.ppo import core_algos
    from minirl.workers.reward import managers

    live = {"adv_estimator": core_algos.ADV_ESTIMATOR_REGISTRY, "policy_loss": core_algos.POLICY_LOSS_REGISTRY,
            "reward_manager": managers.REWARD_MANAGER_REGISTRY, "task": tasks.TASKS,
            "distillation_loss": distillation_losses.DISTILLATION_LOSS_REGISTRY}
    for kind, registry in live.items():
        path, _module, decorator, name = reg.REGISTRIES[kind]
        assert sorted(reg._source_names(path, decorator, name)) == sorted(str(getattr(k, "value", k)) for k in registry)
    try:  # a name registered at run time (a lab's own loss) passes the check once its module is imported
        core_algos.register_policy_loss("my_lab_loss")(core_algos.compute_policy_loss_vanilla)
        assert "my_lab_loss" in reg.registered_names("policy_loss")
        load(["actor_rollout_ref.actor.policy_loss.loss_mode=my_lab_loss"])
    finally:
        core_algos.POLICY_LOSS_REGISTRY.pop("my_lab_loss", None)


def test_engines_read_typed_sections_with_the_schema_defaults():
    """An engine reads `OptimConfig` / `EngineConfig` (defaults from the schema); a key the schema lacks is an error."""
    from minirl.config.schema_engine import EngineConfig, OptimConfig
    from minirl.utils.config import omega_conf_to_dataclass

    optim = omega_conf_to_dataclass({"lr": 2e-3}, OptimConfig)
    assert (optim.lr, optim.weight_decay, optim.clip_grad, optim.lr_scheduler_type) == (2e-3, 0.01, 1.0, "constant")
    assert optim.weight_decay == load().actor_rollout_ref.actor.optim.weight_decay
    with pytest.raises(ValueError, match=r"OptimConfig has no key 'grad_clip'; its keys are optimizer, lr"):
        omega_conf_to_dataclass({"grad_clip": 1.0}, OptimConfig)  # verl's deprecated name: no silent fallback
    assert omega_conf_to_dataclass(None, EngineConfig).seed == load().actor_rollout_ref.actor.fsdp_config.seed
