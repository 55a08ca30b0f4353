"""Bad config input gets one clear line and exit 2, before any model is built.

Each case feeds one bad override to the real entry points, in-process: `minirl config explain`
(`minirl.cli.main`), `minirl train` (`minirl.trainer.main_ppo.main`, with the trainer replaced by a
tripwire so that a run that got past the config would fail the test) and `minirl sft`. The check is
the same for all: exit code 2, no traceback, and exactly one problem line on stderr that names the
key and the value. The table of unimplemented keys (`minirl.config.unimplemented`) is checked row
by row: every row's key exists, and any value but its default is rejected.
"""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

import minirl.cli
import minirl.trainer.main_ppo
from minirl.config import default_config, load
from minirl.config.unimplemented import SFT_UNIMPLEMENTED, UNIMPLEMENTED

GAE = "algorithm.adv_estimator=gae"
A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")

# (id, overrides, what the one problem line must contain: the key, the value)
PPO_CASES = [
    ("lr_zero", [f"{A}.optim.lr=0"], f"{A}.optim.lr", "=0.0"),
    ("lr_negative", [f"{A}.optim.lr=-1e-5"], f"{A}.optim.lr", "=-1e-05"),
    ("critic_lr_zero", [GAE, "critic.optim.lr=0"], "critic.optim.lr", "=0.0"),
    ("weight_decay_negative", [f"{A}.optim.weight_decay=-0.01"], f"{A}.optim.weight_decay", "=-0.01"),
    ("betas_out_of_range", [f"{A}.optim.betas=[0.9,1.5]"], f"{A}.optim.betas", "[0.9, 1.5]"),
    ("scheduler_unknown", [f"{A}.optim.lr_scheduler_type=linear"], f"{A}.optim.lr_scheduler_type", "'linear'"),
    ("clip_ratio_low_ge_1", [f"{A}.clip_ratio_low=1.5"], f"{A}.clip_ratio_low", "=1.5"),
    ("clip_ratio_high_negative", [f"{A}.clip_ratio_high=-0.1"], f"{A}.clip_ratio_high", "=-0.1"),
    ("clip_ratio_c_le_1", [f"{A}.clip_ratio_c=1.0"], f"{A}.clip_ratio_c", "=1.0"),
    ("kl_loss_coef_negative", [f"{A}.kl_loss_coef=-0.1"], f"{A}.kl_loss_coef", "=-0.1"),
    ("loss_scale_factor_zero", [f"{A}.loss_scale_factor=0"], f"{A}.loss_scale_factor", "=0.0"),
    ("sapo_tau_zero", [f"{A}.policy_loss.loss_mode=sapo", f"{A}.tau_neg=0"], f"{A}.tau_neg", "=0.0"),
    ("ppo_epochs_zero", [f"{A}.ppo_epochs=0"], f"{A}.ppo_epochs", "=0"),
    ("temperature_zero_sampling", [f"{R}.temperature=0"], f"{R}.temperature", "=0.0"),
    ("temperature_zero_greedy", [f"{R}.temperature=0", f"{R}.do_sample=false"], f"{R}.temperature", "=0.0"),
    ("top_p_zero", [f"{R}.top_p=0"], f"{R}.top_p", "=0.0"),
    ("top_p_above_1", [f"{R}.top_p=1.5"], f"{R}.top_p", "=1.5"),
    ("top_k_below_minus_1", [f"{R}.top_k=-2"], f"{R}.top_k", "=-2"),
    ("val_top_p_zero", [f"{R}.val_kwargs.top_p=0"], f"{R}.val_kwargs.top_p", "=0.0"),
    ("val_sampling_temperature_zero", [f"{R}.val_kwargs.do_sample=true"], f"{R}.val_kwargs.temperature", "=0.0"),
    ("val_n_zero", [f"{R}.val_kwargs.n=0"], f"{R}.val_kwargs.n", "=0"),
    ("gpu_memory_utilization", [f"{R}.gpu_memory_utilization=1.5"], f"{R}.gpu_memory_utilization", "=1.5"),
    ("max_model_len_short", [f"{R}.max_model_len=10"], f"{R}.max_model_len", "=10"),
    ("response_length_zero", ["data.max_response_length=0"], "data.max_response_length", "=0"),
    ("prompt_length_zero", ["data.max_prompt_length=0"], "data.max_prompt_length", "=0"),
    ("train_max_samples_zero", ["data.train_max_samples=0"], "data.train_max_samples", "=0"),
    ("gamma_above_1", ["algorithm.gamma=1.5"], "algorithm.gamma", "=1.5"),
    ("lam_negative", ["algorithm.lam=-0.1"], "algorithm.lam", "=-0.1"),
    ("kl_coef_negative", ["algorithm.kl_ctrl.kl_coef=-1"], "algorithm.kl_ctrl.kl_coef", "=-1.0"),
    ("adaptive_horizon_zero", ["algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.horizon=0"],
     "algorithm.kl_ctrl.horizon", "=0"),
    ("gae_without_critic", [GAE, "critic.enable=false"], "algorithm.adv_estimator=gae", "critic.enable=False"),
    ("estimator_unknown", ["algorithm.adv_estimator=grpoo"], "algorithm.adv_estimator", "'grpoo'"),
    ("rollout_unknown", [f"{R}.name=sglang"], f"{R}.name", "'sglang'"),
    ("reward_manager_unknown", ["reward.reward_manager.name=nope"], "reward.reward_manager.name", "'nope'"),
    ("logger_of_verl", ["trainer.logger=[console,wandb]"], "trainer.logger", "'wandb'"),
    ("logger_unknown", ["trainer.logger=[fancy]"], "trainer.logger", "'fancy'"),
    ("worker_group_unknown", ["trainer.worker_group=mpi"], "trainer.worker_group", "'mpi'"),
    ("inprocess_two_ranks", ["trainer.worker_group=inprocess", "trainer.n_gpus_per_node=2"],
     "trainer.worker_group", "'inprocess'"),
    pytest.param("device_cuda_without_cuda", ["trainer.device=cuda"], "trainer.device", "'cuda'", marks=NO_CUDA),
    ("device_unknown", ["trainer.device=npu"], "trainer.device", "'npu'"),
    ("total_training_steps_zero", ["trainer.total_training_steps=0"], "trainer.total_training_steps", "=0"),
    ("total_epochs_zero", ["trainer.total_epochs=0"], "trainer.total_epochs", "=0"),
    ("save_freq_zero", ["trainer.save_freq=0"], "trainer.save_freq", "=0"),
    ("test_freq_negative", ["trainer.test_freq=-5"], "trainer.test_freq", "=-5"),
    ("critic_warmup_negative", ["trainer.critic_warmup=-1"], "trainer.critic_warmup", "=-1"),
    ("ckpt_to_keep_zero", ["trainer.max_actor_ckpt_to_keep=0"], "trainer.max_actor_ckpt_to_keep", "=0"),
    ("resume_path_without_path", ["trainer.resume_mode=resume_path"], "trainer.resume_mode", "'resume_path'"),
    ("resume_path_missing", ["trainer.resume_mode=resume_path", "trainer.resume_from_path=/nonexistent/global_step_3"],
     "trainer.resume_from_path", "'/nonexistent/global_step_3'"),
    ("resume_from_path_ignored", ["trainer.resume_from_path=/tmp/global_step_3"], "trainer.resume_from_path",
     "'/tmp/global_step_3'"),
    ("resume_mode_unknown", ["trainer.resume_mode=latest"], "trainer.resume_mode", "'latest'"),
    ("mini_batch_does_not_divide", [f"{A}.ppo_mini_batch_size=24"], f"{A}.ppo_mini_batch_size", "=24"),
    # keys minirl keeps for verl's shape but does not implement
    ("strategy_fsdp1", [f"{A}.strategy=fsdp"], f"{A}.strategy", "'fsdp'"),
    ("rollout_mode_sync", [f"{R}.mode=sync"], f"{R}.mode", "'sync'"),
    ("dynamic_bsz", [f"{A}.use_dynamic_bsz=true"], f"{A}.use_dynamic_bsz", "=True"),
    ("multi_turn_function_tools", [f"{R}.multi_turn.function_tool_path=tools.py"], f"{R}.multi_turn.function_tool_path",
     "'tools.py'"),
    ("multi_turn_format", [f"{R}.multi_turn.format=gpt-oss"], f"{R}.multi_turn.format", "'gpt-oss'"),
    ("multi_turn_tool_config_missing", [f"{R}.multi_turn.enable=true", f"{R}.multi_turn.tool_config_path=nope.yaml"],
     f"{R}.multi_turn.tool_config_path", "'nope.yaml'"),
    ("multi_turn_without_tools", [f"{R}.multi_turn.enable=true"], f"{R}.multi_turn.enable=True",
     "tool_config_path is null"),
    ("tool_timeout_zero", [f"{R}.multi_turn.tool_timeout=0"], f"{R}.multi_turn.tool_timeout", "=0"),
    ("rollout_server_timeout_zero", [f"{R}.server.timeout=0"], f"{R}.server.timeout", "=0.0"),
    ("legacy_trainer", ["trainer.use_v1=false"], "trainer.use_v1", "=False"),
    # verl's asserts for the async trainers (minirl.config.schema_async)
    ("separate_async_batch_sizes", ["trainer.v1.trainer_mode=separate_async", f"{R}.nnodes=1", f"{R}.n_gpus_per_node=1",
                                    f"{R}.checkpoint_engine.backend=nccl"],
     "data.train_batch_size == parameter_sync_step * ppo_mini_batch_size", "32 != 4 * 32"),
    ("separate_async_without_servers", ["trainer.v1.trainer_mode=separate_async", f"{A}.ppo_mini_batch_size=8"],
     f"{R}.nnodes", "nnodes=0"),
    ("off_policy_strategy_unknown", ["trainer.v1.sampler.max_off_policy_strategy=keep"],
     "trainer.v1.sampler.max_off_policy_strategy", "'keep'"),
    ("off_policy_threshold_zero", ["trainer.v1.sampler.max_off_policy_threshold=0"],
     "trainer.v1.sampler.max_off_policy_threshold", "=0"),
    ("remax_async", ["trainer.v1.trainer_mode=colocate_async", "algorithm.adv_estimator=remax"],
     "algorithm.adv_estimator='remax'", "'colocate_async'"),
    ("param_offload", [f"{A}.fsdp_config.param_offload=true"], f"{A}.fsdp_config.param_offload", "=True"),
    ("deprecated_micro_batch", [f"{A}.ppo_micro_batch_size=8"], f"{A}.ppo_micro_batch_size", "=8"),
    ("rollout_n_copy", [f"{A}.rollout_n=3"], f"{A}.rollout_n", "=3"),
    ("checkpoint_engine_nixl", [f"{R}.checkpoint_engine.backend=nixl"], f"{R}.checkpoint_engine.backend", "'nixl'"),
    ("checkpoint_engine_nccl_without_servers", [f"{R}.checkpoint_engine.backend=nccl"], f"{R}.nnodes", "nnodes=0"),
    ("rollout_servers_with_naive", [f"{R}.nnodes=1"], f"{R}.checkpoint_engine.backend", "backend=naive"),
    ("override_config_entry", ["+actor_rollout_ref.model.override_config.rope_theta=1000"],
     "actor_rollout_ref.model.override_config", "'rope_theta': 1000"),
    # keys that do not exist, and wrong types
    ("unknown_key", ["bad.key=1"], "unknown config key 'bad.key'", "ppo_trainer.yaml"),
    ("unknown_new_key", ["+bad.key=1"], "unknown config key 'bad.key'", "ppo_trainer.yaml"),
    ("typo_suggests", [f"{A}.ppo_mini_bach_size=4"], f"'{A}.ppo_mini_bach_size'", f"did you mean '{A}.ppo_mini_batch_size'"),
    ("dict_entry_without_plus", ["actor_rollout_ref.model.override_config.rope_theta=1000"],
     "actor_rollout_ref.model.override_config.rope_theta", "+actor_rollout_ref.model.override_config.rope_theta=1000"),
    ("wrong_type", ["data.train_batch_size=lots"], "data.train_batch_size", "'lots'"),
    ("unparsable", ["data.train_batch_size=[1"], "data.train_batch_size=[1", "could not parse"),
]

SFT_CASES = [
    ("sft_unknown_key", ["bad.key=1"], "unknown config key 'bad.key'", "sft_trainer.yaml"),
    ("sft_typo", ["optim.lrr=1e-3"], "'optim.lrr'", "did you mean 'optim.lr'"),
    ("sft_lr_zero", ["optim.lr=0"], "optim.lr", "=0.0"),
    ("sft_betas", ["optim.betas=[0.9,1.0]"], "optim.betas", "[0.9, 1.0]"),
    ("sft_val_files", ["data.val_files=/data/val.parquet"], "data.val_files", "'/data/val.parquet'"),
    ("sft_parquet_train_files", ["data.train_files=/data/train.parquet"], "data.train_files", "'/data/train.parquet'"),
    ("sft_test_freq_zero", ["trainer.test_freq=0"], "trainer.test_freq", "=0"),
    ("sft_ragged_micro_batch", ["data.micro_batch_size_per_gpu=7"], "data.micro_batch_size_per_gpu", "=7"),
    ("sft_too_few_rows", ["data.builtin.n_train=10"], "data.builtin.n_train", "=10"),
    ("sft_stop_score", ["trainer.stop_at_val_score=2"], "trainer.stop_at_val_score", "=2.0"),
    ("sft_device", ["trainer.device=npu"], "trainer.device", "'npu'"),
    ("sft_wrong_type", ["data.train_batch_size=many"], "data.train_batch_size", "'many'"),
]

HINT = "(set MINIRL_DEBUG=1"


def _one_problem_line(err: str, key: str, value: str, file: str) -> None:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(HINT)]
    assert len(lines) == 1, f"expected one problem line, got {len(lines)}:\n{err}"
    assert key in lines[0] and value in lines[0], f"the line does not name {key!r} and {value!r}:\n{lines[0]}"
    assert file in lines[0] and "Fix" in lines[0], lines[0]


@pytest.fixture
def no_model(monkeypatch):
    """Replace what builds models with a tripwire: a bad config must fail before any of it runs."""
    def tripwire(*args, **kwargs):
        raise AssertionError("a model was built for a config that should have been rejected")

    monkeypatch.setattr(minirl.trainer.main_ppo.TaskRunnerV1, "run", tripwire)
    monkeypatch.setattr("minirl.workers.engine_workers.build_engine", tripwire)
    monkeypatch.setattr("minirl.models.resolve_model_path", tripwire)


def _ids(cases):
    return [c.id if hasattr(c, "id") else c[0] for c in cases]


@pytest.mark.parametrize("name,overrides,key,value", PPO_CASES, ids=_ids(PPO_CASES))
def test_config_explain_rejects(name, overrides, key, value, capsys, no_model):
    assert minirl.cli.main(["config", "explain", *overrides]) == 2
    _one_problem_line(capsys.readouterr().err, key, value, "ppo_trainer.yaml")


TRAIN_SUBSET = ["lr_zero", "multi_turn_without_tools", "temperature_zero_sampling", "gae_without_critic", "logger_of_verl",
                "reward_manager_unknown", "strategy_fsdp1", "unknown_key", "typo_suggests", "resume_path_without_path",
                "separate_async_batch_sizes", "separate_async_without_servers", "off_policy_strategy_unknown",
                "off_policy_threshold_zero", "remax_async"]


TRAIN_CASES = [c for c in PPO_CASES if _ids([c])[0] in TRAIN_SUBSET]


@pytest.mark.parametrize("name,overrides,key,value", TRAIN_CASES, ids=_ids(TRAIN_CASES))
def test_train_rejects_before_any_model(name, overrides, key, value, capsys, no_model):
    assert minirl.trainer.main_ppo.main(overrides) == 2
    _one_problem_line(capsys.readouterr().err, key, value, "ppo_trainer.yaml")


@pytest.mark.parametrize("name,overrides,key,value", SFT_CASES, ids=_ids(SFT_CASES))
def test_sft_rejects_before_any_model(name, overrides, key, value, capsys, no_model):
    assert minirl.cli.main(["sft", *overrides]) == 2
    err = capsys.readouterr().err
    assert err.startswith("minirl sft: ")
    _one_problem_line(err, key, value, "sft_trainer.yaml")


def test_several_problems_are_reported_at_once(capsys):
    assert minirl.cli.main(["config", "explain", f"{A}.optim.lr=0", f"{R}.top_p=0", f"{A}.strategy=fsdp"]) == 2
    err = capsys.readouterr().err
    assert "3 problems" in err and err.count("\n  - ") == 3


def _non_default(cfg, key: str) -> str:
    """An override that sets `key` to something other than its default, in the key's own type."""
    from omegaconf.nodes import BooleanNode, FloatNode, IntegerNode

    node = cfg
    for part in key.split("."):
        node = node._get_node(part)
    default = OmegaConf.select(cfg, key)
    if isinstance(node, BooleanNode):
        return f"{key}={str(not default).lower()}"
    if isinstance(node, IntegerNode):
        return f"{key}={(default or 0) + 2}"
    if isinstance(node, FloatNode):
        return f"{key}={(default or 0.0) + 0.5}"
    if OmegaConf.is_list(node):
        return f"{key}=[model]"
    if OmegaConf.is_dict(node):
        return f"+{key}.some_entry=1"
    return f"{key}=other"


@pytest.mark.parametrize("config_name,table", [("ppo_trainer", UNIMPLEMENTED), ("sft_trainer", SFT_UNIMPLEMENTED)])
def test_every_unimplemented_row_exists_and_rejects_other_values(config_name, table):
    from minirl.config import ConfigError, load_sft

    defaults = default_config(config_name)
    loader = load if config_name == "ppo_trainer" else load_sft
    loader([])  # the defaults themselves pass
    for key in table:
        assert OmegaConf.select(defaults, key, default="missing") != "missing", \
            f"{key}: the row names a key {config_name}.yaml does not have"
        override = _non_default(defaults, key)
        with pytest.raises(ConfigError, match=rf"{key.replace('.', '[.]')}=.*minirl does not implement it \(verl: "):
            loader([override])


def test_interpolated_defaults_follow_their_source():
    # ref.strategy and critic.rollout_n are `${...}` copies: changing the source reports the source only,
    # and setting the copy to the value it would have anyway is accepted
    cfg = load([f"{R}.n=4", f"{A}.rollout_n=4", "critic.rollout_n=4"])
    assert cfg.actor_rollout_ref.ref.rollout_n == 4


def test_critic_with_an_estimator_that_ignores_values_is_allowed_and_explained(capsys):
    # verl's need_critic turns the critic on whenever critic.enable=True; minirl mirrors it and says so
    assert minirl.cli.main(["config", "explain", "critic.enable=true"]) == 0
    assert "wasted work: grpo ignores the values" in capsys.readouterr().out
