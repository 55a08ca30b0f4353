"""Value checks: every value verl's config dataclasses (or the code behind them) would reject, before any model.

This module is the one place where `minirl/config/ppo_trainer.yaml`'s values are checked (the SFT
file's checks, `minirl.config.sft`, reuse its helpers; the batch arithmetic is `minirl.config.validate`).
verl checks values in many places: `ActorConfig.__post_init__` (`verl/workers/config/actor.py:197`),
`CriticConfig.__post_init__` (`verl/workers/config/critic.py:103`), `RolloutConfig.__post_init__`
(`verl/workers/config/rollout.py:276`), `FSDPOptimizerConfig.__post_init__`
(`verl/workers/config/optimizer.py:116`), `validate_config` (`verl/utils/config.py:74`), asserts in the
losses (`compute_policy_loss_vanilla` asserts `clip_ratio_c > 1`, `verl/trainer/ppo/core_algos.py:1286`;
`get_kl_controller` asserts a positive horizon, `verl/trainer/ppo/core_algos.py:193`), `Tracking`'s list
of logger backends (`verl/utils/tracking.py:37`), the reward-manager registry
(`RewardManagerConfig.__post_init__`, `verl/workers/config/reward.py:51`), the rollout replicas
(`LLMServerManager._initialize_llm_servers`, `verl/workers/rollout/llm_server.py:518`) and the V1
trainers' asserts (`PPOTrainerSeparateAsync.__init__`, `verl/trainer/ppo/v1/trainer_separate_async.py:50`).
Many of those fire only when the code that reads the value runs, after the models are built. minirl
checks all of them, and the ranges an optimizer or sampler needs (a positive learning rate, `top_p` in
(0, 1]), at load time; each problem is one line `key=value <what is wrong>. Fix: <what to set>`.
The names of registered algorithms come from `minirl.config.registered` (read without importing them).

Where verl accepts a value and minirl mirrors it: a negative `entropy_coeff` (an entropy penalty) and
a critic that runs with an estimator that ignores values (verl's `need_critic` turns it on whenever
`critic.enable=True`; `minirl config explain` says the values go unused).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from minirl.config.derived import CRITIC_ESTIMATORS, need_critic, num_replicas, rollout_world_size
from minirl.config.registered import registered_checkpoint_engines, registered_names
from minirl.config.schema_async import (
    OFF_POLICY_STRATEGIES,
    ROLLOUT_RS_OPTIONS,
    TRAINER_MODES,
    RolloutCorrectionConfig,
    parse_rollout_is_threshold,
    parse_rollout_rs_thresholds,
)
from minirl.config.schema_multi_turn import FORMATS, SANITY_CHECK_MODES, TRUNCATE_SIDES, find_tool_config

MINIRL_LOGGERS = ("console", "file")
"""`trainer.logger` backends minirl implements: a line per step, `metrics.jsonl`."""
VERL_LOGGERS = ("wandb", "mlflow", "swanlab", "vemlp_wandb", "tensorboard", "console", "clearml", "trackio", "file",
                "rl_insight")
"""verl's `Tracking.supported_backend` at the pin (`verl/utils/tracking.py:37`)."""
WORKER_GROUPS = ("auto", "inprocess", "ray")
AGENT_LOOP_PLACEMENTS = ("auto", "process", "ray", "inprocess")
"""`actor_rollout_ref.rollout.agent.placement` (minirl only): where the agent-loop workers run."""
NONFINITE_POLICIES = ("stop", "skip")  # what minirl.trainer.ppo.finite_checks does on a NaN: stop or skip the step
RESUME_MODES = ("auto", "disable", "resume_path")
DEVICES = ("cpu", "cuda")
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
ROLLOUT_NAMES = ("hf", "vllm")
GROUP_ESTIMATORS = ("grpo", "rloo", "grpo_passk")  # need several samples per prompt (uid group)


def show(value: Any) -> str:
    """A value as an override would write it: `0.0`, `'abc'`, `[1, 2]`, `None`."""
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value, resolve=True)
    return repr(value)


class Problems(list):
    """The list of problem lines, with a helper that adds one when a key's value breaks a rule."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def check(self, key: str, ok: Callable[[Any], bool], rule: str, fix: str, skip_none: bool = True) -> None:
        """Add `key=value rule. Fix: fix.` when `ok(value)` is false (a null value passes when `skip_none`)."""
        value = OmegaConf.select(self.cfg, key)
        if value is None and skip_none:
            return
        try:
            good = ok(value)
        except (TypeError, ValueError):
            good = False
        if not good:
            self.append(f"{key}={show(value)} {rule}. Fix: {fix}.")


def _positive(p: Problems, key: str, fix: str, what: str = "") -> None:
    p.check(key, lambda v: v > 0, f"must be > 0{what}", fix)


def _at_least(p: Problems, key: str, low: int, fix: str, what: str = "") -> None:
    p.check(key, lambda v: int(v) >= low and int(v) == v, f"must be an integer >= {low}{what}", fix)


def _unit(p: Problems, key: str, fix: str, what: str = "") -> None:
    p.check(key, lambda v: 0 <= v <= 1, f"must be in [0, 1]{what}", fix)


def _every(p: Problems, key: str, what: str) -> None:
    p.check(key, lambda v: v == -1 or v >= 1, f"must be -1 (never) or a number of steps >= 1 ({what}; verl "
            "treats every value <= 0 as never)", f"{key}=-1 to never {what.split()[0]}, or {key}=10")


def optim_problems(p: Problems, sec: str, lr: str = "1e-4 (minirl's default; verl's GRPO examples mostly use 1e-6)"
                   ) -> None:
    """An AdamW group (`*.optim`): verl's `FSDPOptimizerConfig` plus the ranges AdamW and the schedule need."""
    _positive(p, f"{sec}.lr", f"{sec}.lr={lr}", " (the learning rate: 0 or less never moves the weights toward a lower loss)")
    p.check(f"{sec}.weight_decay", lambda v: v >= 0, "must be >= 0", f"{sec}.weight_decay=0.01")
    p.check(f"{sec}.betas", lambda v: len(v) == 2 and all(0 <= float(b) < 1 for b in v),
            "must be two numbers in [0, 1) (AdamW's moment decays)", f"e.g. {sec}.betas=[0.9,0.999]")
    _positive(p, f"{sec}.clip_grad", f"{sec}.clip_grad=1.0", " (the gradient-norm clip: 0 would zero every update)")
    _unit(p, f"{sec}.lr_warmup_steps_ratio", f"{sec}.lr_warmup_steps_ratio=0.0", " (a fraction of the run)")
    _unit(p, f"{sec}.min_lr_ratio", f"{sec}.min_lr_ratio=0.0", " (the cosine floor as a fraction of lr)")
    p.check(f"{sec}.lr_scheduler_type", lambda v: v in ("constant", "cosine"),
            "is not a schedule (verl's FSDPOptimizerConfig asserts constant or cosine)", f"{sec}.lr_scheduler_type=constant")


def device_problems(p: Problems, key: str = "trainer.device", ranks: int | None = None) -> None:
    """`trainer.device` is cpu or cuda, and cuda needs a CUDA build of torch that sees enough GPUs."""
    device = OmegaConf.select(p.cfg, key)
    if device not in DEVICES:
        p.append(f"{key}={show(device)} is not a device minirl runs on (verl: cuda, or npu on Ascend). "
                 f"Fix: {key}=cpu or {key}=cuda.")
        return
    if device != "cuda":
        return
    import torch

    if torch.version.cuda is None:
        p.append(f"{key}='cuda' but the installed torch {torch.__version__} is a CPU-only build. Fix: {key}=cpu, or "
                 "install a CUDA build of torch (https://pytorch.org/get-started/locally/).")
    elif not torch.cuda.is_available():
        p.append(f"{key}='cuda' but torch {torch.__version__} sees no GPU on this machine. Fix: {key}=cpu, or run "
                 "where `nvidia-smi` lists a GPU (and CUDA_VISIBLE_DEVICES does not hide it).")
    elif ranks is not None and ranks > torch.cuda.device_count():
        p.append(f"trainer.n_gpus_per_node={ranks} but this machine has {torch.cuda.device_count()} GPU(s). "
                 f"Fix: trainer.n_gpus_per_node={torch.cuda.device_count()}.")


def _logger_problems(p: Problems) -> None:
    for name in OmegaConf.select(p.cfg, "trainer.logger") or []:
        if name in MINIRL_LOGGERS:
            continue
        if name in VERL_LOGGERS:
            p.append(f"trainer.logger contains {name!r}: minirl implements console and file (verl's Tracking would "
                     f"also send every step's metrics to {name}). Fix: trainer.logger=[console,file].")
        else:
            p.append(f"trainer.logger contains {name!r}, which is not a logger (verl's Tracking knows "
                     f"{', '.join(VERL_LOGGERS)}; minirl implements console, file). Fix: trainer.logger=[console,file].")


def _actor_problems(p: Problems) -> None:
    a = "actor_rollout_ref.actor"
    mode = OmegaConf.select(p.cfg, f"{a}.policy_loss.loss_mode")
    for key in (f"{a}.clip_ratio", f"{a}.clip_ratio_low"):
        p.check(key, lambda v: 0 <= v < 1, "must be in [0, 1) (the ratio's lower clip bound is 1 - it)", f"{key}=0.2")
    p.check(f"{a}.clip_ratio_high", lambda v: v >= 0, "must be >= 0 (the ratio's upper clip bound is 1 + it)",
            f"{a}.clip_ratio_high=0.2 (DAPO's clip-higher: 0.28)")
    p.check(f"{a}.clip_ratio_c", lambda v: v > 1.0, "must be > 1.0: it bounds the ratio of negative-advantage "
            "tokens from above (dual-clip PPO; verl asserts clip_ratio_c > 1.0)", f"{a}.clip_ratio_c=3.0")
    _positive(p, f"{a}.loss_scale_factor", f"{a}.loss_scale_factor=null (the response length)")
    p.check(f"{a}.kl_loss_coef", lambda v: v >= 0, "must be >= 0 (a negative KL loss pushes away from the reference)",
            f"{a}.kl_loss_coef=0.001")
    if mode == "sapo":
        for key in (f"{a}.tau_pos", f"{a}.tau_neg"):
            _positive(p, key, f"{key}=1.0", " (SAPO's gate divides by it)")
    if mode == "clip_cov":
        _positive(p, f"{a}.policy_loss.clip_cov_ratio", f"{a}.policy_loss.clip_cov_ratio=0.0002",
                  " (verl's compute_policy_loss_clip_cov asserts it)")
    if mode == "kl_cov":
        _positive(p, f"{a}.policy_loss.kl_cov_ratio", f"{a}.policy_loss.kl_cov_ratio=0.0002",
                  " (verl's compute_policy_loss_kl_cov asserts it)")
    optim_problems(p, f"{a}.optim")


def _rollout_problems(p: Problems) -> None:
    r = "actor_rollout_ref.rollout"
    cfg = p.cfg
    if OmegaConf.select(cfg, f"{r}.do_sample"):
        _positive(p, f"{r}.temperature", f"{r}.temperature=1.0", " when sampling (do_sample=True)")
    else:
        _positive(p, f"{r}.temperature", f"{r}.temperature=1.0 (greedy decoding comes from do_sample=False)",
                  " (the actor divides the logits by it when it recomputes log-probs, as verl's does)")
    for sec in (r, f"{r}.val_kwargs"):
        p.check(f"{sec}.top_p", lambda v: 0 < v <= 1, "must be in (0, 1] (1.0: no nucleus filtering)", f"{sec}.top_p=1.0")
        p.check(f"{sec}.top_k", lambda v: int(v) == v and v >= -1, "must be -1 (off) or an integer >= 0",
                f"{sec}.top_k=-1")
    # verl's validate_config checks only rollout.temperature here (above); validation samples with its own
    if OmegaConf.select(cfg, f"{r}.val_kwargs.do_sample") and OmegaConf.select(cfg, f"{r}.temperature") > 0:
        _positive(p, f"{r}.val_kwargs.temperature", f"{r}.val_kwargs.temperature=1.0, or "
                  f"{r}.val_kwargs.do_sample=false (greedy)", " when validation samples (val_kwargs.do_sample=True)")
    _at_least(p, f"{r}.val_kwargs.n", 1, f"{r}.val_kwargs.n=1")
    _at_least(p, f"{r}.max_num_seqs", 1, f"{r}.max_num_seqs=256")
    _at_least(p, f"{r}.tensor_model_parallel_size", 1, f"{r}.tensor_model_parallel_size=1")
    _at_least(p, f"{r}.agent.num_workers", 1, f"{r}.agent.num_workers=1")
    _positive(p, f"{r}.server.timeout", f"{r}.server.timeout=60", " (seconds a silent rollout server is waited for)")
    p.check(f"{r}.nice", lambda v: int(v) == v and 0 <= v <= 19, "must be an integer niceness in 0..19 (or null: auto)",
            f"{r}.nice=null")
    placement = OmegaConf.select(cfg, f"{r}.agent.placement")
    if placement not in AGENT_LOOP_PLACEMENTS:
        p.append(f"{r}.agent.placement={placement!r} is not a placement of the agent-loop workers. "
                 f"Fix: one of {', '.join(AGENT_LOOP_PLACEMENTS)} (auto: ray with Ray workers, else process).")
    elif placement in ("process", "ray") and OmegaConf.select(cfg, "distillation.enabled", default=False):
        p.append(f"{r}.agent.placement={placement} with distillation.enabled=true: minirl keeps the teachers' "
                 "clients in the controller, so distillation's sessions run there (verl gives each agent-loop "
                 f"worker actor the teacher handles). Fix: {r}.agent.placement=auto (or inprocess).")
    p.check(f"{r}.gpu_memory_utilization", lambda v: 0 < v <= 1, "must be in (0, 1] (a fraction of GPU memory)",
            f"{r}.gpu_memory_utilization=0.5")
    total = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    p.check(f"{r}.max_model_len", lambda v: v >= total, f"is shorter than data.max_prompt_length + "
            f"data.max_response_length = {total} tokens", f"{r}.max_model_len=null (= {total}) or >= {total}")


def _algorithm_problems(p: Problems) -> None:
    cfg = p.cfg
    for key in ("algorithm.gamma", "algorithm.lam"):
        _unit(p, key, f"{key}=1.0", " (a discount / GAE lambda)")
    p.check("algorithm.kl_ctrl.kl_coef", lambda v: v >= 0, "must be >= 0 (the in-reward KL coefficient beta)",
            "algorithm.kl_ctrl.kl_coef=0.001")
    if cfg.algorithm.kl_ctrl.type == "adaptive":
        _positive(p, "algorithm.kl_ctrl.horizon", "algorithm.kl_ctrl.horizon=10000",
                  " for the adaptive controller (verl's get_kl_controller asserts it)")
        _positive(p, "algorithm.kl_ctrl.target_kl", "algorithm.kl_ctrl.target_kl=0.1", " for the adaptive controller")
    _filter_groups_problems(p)
    if cfg.algorithm.adv_estimator in CRITIC_ESTIMATORS and cfg.critic.enable is False:
        p.append(f"algorithm.adv_estimator={cfg.algorithm.adv_estimator} needs the critic's values, but "
                 "critic.enable=False (verl would run without a critic and fail when GAE reads the values). "
                 "Fix: critic.enable=null (on for gae), or an estimator without values, e.g. algorithm.adv_estimator=grpo.")


def _filter_groups_problems(p: Problems) -> None:
    """DAPO's dynamic sampling (`algorithm.filter_groups`): verl's `_resolve_filter_groups_metric` checks, and minirl's."""
    cfg, k = p.cfg, "algorithm.filter_groups"
    fg = cfg.algorithm.get("filter_groups")
    if fg is None or not fg.enable:
        return
    if not fg.metric:
        p.append(f"{k}.enable=True needs {k}.metric, the reward_extra_info key whose spread decides (verl raises the "
                 f"same). Fix: {k}.metric=acc.")
    rm = cfg.reward.reward_model
    if rm.enable and not rm.enable_resource_pool:
        p.append(f"{k} needs the reward at sampling time, but a colocated reward model (reward.reward_model.enable=True, "
                 f"enable_resource_pool=False) scores only after sampling (verl asserts it). Fix: "
                 f"reward.reward_model.enable_resource_pool=True, or a rule reward.")
    if str(cfg.trainer.v1.trainer_mode) != "sync":
        p.append(f"{k} in trainer.v1.trainer_mode={cfg.trainer.v1.trainer_mode}: minirl filters groups in the sync "
                 f"buffer only (verl's async buffer evicts k and refills k). Fix: trainer.v1.trainer_mode=sync.")
    if int(cfg.actor_rollout_ref.rollout.n) < 2:
        p.append(f"{k}.enable=True with actor_rollout_ref.rollout.n={cfg.actor_rollout_ref.rollout.n}: a group of one "
                 f"has no spread to test, so nothing would be filtered. Fix: rollout.n >= 2.")
    _at_least(p, f"{k}.max_inflight_gen_batches", 1, f"{k}.max_inflight_gen_batches=1",
              " (train batches refilled at a time)")
    _at_least(p, f"{k}.max_num_gen_batches", 0, f"{k}.max_num_gen_batches=0", " (0: one pass over the prompts)")


def _trainer_problems(p: Problems) -> None:
    t = p.cfg.trainer
    _at_least(p, "trainer.total_epochs", 1, "trainer.total_epochs=1")
    _at_least(p, "trainer.total_training_steps", 1, "trainer.total_training_steps=null (epochs x batches per "
              "epoch) or a number of steps >= 1")
    _every(p, "trainer.save_freq", "save a checkpoint every N steps")
    _every(p, "trainer.test_freq", "validate every N steps")
    _at_least(p, "trainer.critic_warmup", 0, "trainer.critic_warmup=0")
    _at_least(p, "trainer.max_actor_ckpt_to_keep", 1, "trainer.max_actor_ckpt_to_keep=null (keep all)",
              " (null keeps all)")
    _logger_problems(p)
    if t.worker_group not in WORKER_GROUPS:
        p.append(f"trainer.worker_group={show(t.worker_group)} is not a worker group (verl always uses Ray). "
                 f"Fix: one of {', '.join(WORKER_GROUPS)}.")
    if t.nonfinite not in NONFINITE_POLICIES:
        p.append(f"trainer.nonfinite={show(t.nonfinite)} is not a policy for NaN/inf values. "
                 f"Fix: one of {', '.join(NONFINITE_POLICIES)}.")
    ranks = int(t.nnodes) * int(t.n_gpus_per_node)
    if t.worker_group == "inprocess" and ranks > 1:
        p.append(f"trainer.worker_group='inprocess' runs one rank in this process, but trainer.nnodes * "
                 f"trainer.n_gpus_per_node = {ranks}. Fix: trainer.worker_group=ray (or auto), or trainer.n_gpus_per_node=1.")
    local = int(t.nnodes) == 1 and not OmegaConf.select(p.cfg, "ray_kwargs.ray_init.address")
    device_problems(p, "trainer.device", int(t.n_gpus_per_node) if local else None)
    if t.resume_mode not in RESUME_MODES:
        p.append(f"trainer.resume_mode={show(t.resume_mode)} is not a resume mode. Fix: one of {', '.join(RESUME_MODES)}.")
    elif t.resume_mode == "resume_path":
        path = t.resume_from_path
        if not path:
            p.append("trainer.resume_mode='resume_path' needs trainer.resume_from_path. Fix: "
                     "trainer.resume_from_path=<default_local_dir>/global_step_<k>, or trainer.resume_mode=auto.")
        elif "global_step_" not in str(path):
            p.append(f"trainer.resume_from_path={show(path)} must name a global_step_<k> folder (verl asserts it). Fix: "
                     "trainer.resume_from_path=<default_local_dir>/global_step_<k>.")
        elif not Path(str(path)).expanduser().is_dir():
            p.append(f"trainer.resume_from_path={show(path)} does not exist. Fix: give an existing global_step_<k> folder.")
    elif t.resume_from_path:
        p.append(f"trainer.resume_from_path={show(t.resume_from_path)} is read only with trainer.resume_mode=resume_path "
                 f"(as in verl), but resume_mode={show(t.resume_mode)}. Fix: trainer.resume_mode=resume_path, or drop "
                 "resume_from_path.")


def _reward_problems(p: Problems) -> None:
    _at_least(p, "reward.num_workers", 1, "reward.num_workers=1")
    _positive(p, "reward.timeout", "reward.timeout=300", " (seconds one score call may take)")
    rm = p.cfg.reward.reward_model
    if rm.enable and not rm.model_path:
        p.append("reward.reward_model.enable=True needs reward.reward_model.model_path. Fix: "
                 "reward.reward_model.model_path=<dir> (`minirl train-rm --out <dir>` writes one), or enable=False.")
    elif rm.enable and not (Path(str(rm.model_path)).expanduser() / "config.json").is_file():
        p.append(f"reward.reward_model.model_path={show(rm.model_path)} is not a model directory (no config.json). "
                 "Fix: the directory `minirl train-rm --out <dir>` wrote.")


# ------------------------------------------------------------------- names, placement, multi-turn, async


def _name_problems(cfg) -> list[str]:
    p = []
    arr, algo = cfg.actor_rollout_ref, cfg.algorithm
    adv = registered_names("adv_estimator")
    if algo.adv_estimator not in adv:
        p.append(f"algorithm.adv_estimator={algo.adv_estimator!r} is not a registered advantage estimator. "
                 f"Fix: one of them (Valid: {', '.join(adv)}).")
    losses = registered_names("policy_loss")
    if arr.actor.policy_loss.loss_mode not in losses:
        p.append(f"actor_rollout_ref.actor.policy_loss.loss_mode={arr.actor.policy_loss.loss_mode!r} is not a "
                 f"registered policy loss. Fix: one of them (Valid: {', '.join(losses)}).")
    for key, val in [("actor_rollout_ref.actor.loss_agg_mode", arr.actor.loss_agg_mode),
                     ("critic.loss_agg_mode", cfg.critic.loss_agg_mode)]:
        if val not in LOSS_AGG_MODES:
            p.append(f"{key}={val!r} is not a loss aggregation mode. Fix: one of {', '.join(LOSS_AGG_MODES)}.")
    for key, val in [("actor_rollout_ref.actor.kl_loss_type", arr.actor.kl_loss_type),
                     ("algorithm.kl_penalty", algo.kl_penalty)]:
        if str(val).rstrip("+") not in KL_TYPES:
            p.append(f"{key}={val!r} is not a KL estimator. Fix: one of {', '.join(KL_TYPES)} (optionally with '+').")
    if algo.kl_ctrl.type not in ("fixed", "adaptive"):
        p.append(f"algorithm.kl_ctrl.type={algo.kl_ctrl.type!r} is not a KL controller. Fix: fixed or adaptive.")
    if algo.adv_estimator in GROUP_ESTIMATORS and int(arr.rollout.n) < 2:
        p.append(f"algorithm.adv_estimator={algo.adv_estimator} compares responses within a group of "
                 f"actor_rollout_ref.rollout.n samples per prompt, but rollout.n={arr.rollout.n}: every advantage "
                 "would be 0 and nothing would be learned. Fix: actor_rollout_ref.rollout.n=8 (any n >= 2).")
    if arr.rollout.name not in ROLLOUT_NAMES:
        p.append(f"actor_rollout_ref.rollout.name={arr.rollout.name!r} is not a rollout backend minirl has "
                 f"(verl: vllm, sglang, trtllm). Fix: one of {', '.join(ROLLOUT_NAMES)}.")
    if cfg.data.truncation not in ("error", "left", "right"):
        p.append(f"data.truncation={cfg.data.truncation!r} is not a truncation mode. Fix: error, left or right.")
    if cfg.trace.level not in ("off", "stages", "fields"):
        p.append(f"trace.level={cfg.trace.level!r} is not a trace level. Fix: off, stages or fields.")
    if algo.rollout_correction.bypass_mode and not arr.rollout.calculate_log_probs:
        p.append("algorithm.rollout_correction.bypass_mode=True uses the rollout's log-probs as old_log_probs, but "
                 "actor_rollout_ref.rollout.calculate_log_probs=False. Fix: set calculate_log_probs=True.")
    return p


STREAMING_BACKENDS = ("nccl",)
"""Checkpoint-engine backends that reach rollout servers in other processes."""


def _rollout_server_problems(cfg) -> list[str]:
    """Config problems of the rollout placement and the checkpoint engine, one line each."""
    r = cfg.actor_rollout_ref.rollout
    key, ce = "actor_rollout_ref.rollout", r.checkpoint_engine
    p: list[str] = []
    nnodes, gpus = int(r.nnodes), int(r.n_gpus_per_node)
    for name in ("data_parallel_size", "pipeline_model_parallel_size"):
        if int(r[name]) != 1:
            p.append(f"{key}.{name}={r[name]}: minirl's replica is one engine process, so only 1 is implemented "
                     f"(verl runs vLLM/SGLang with that many {name.split('_')[0]} ranks per replica). "
                     f"Fix: {key}.{name}=1.")
    if r.name == "hf" and int(r.tensor_model_parallel_size) != 1:
        p.append(f"{key}.tensor_model_parallel_size={r.tensor_model_parallel_size}: the hf rollout has no tensor "
                 f"parallelism. Fix: {key}.tensor_model_parallel_size=1 (or rollout.name=vllm on GPUs).")
    if nnodes < 0:
        p.append(f"{key}.nnodes={nnodes} must be >= 0 (0: the rollout lives with the trainer). Fix: {key}.nnodes=0.")
    elif nnodes > 1:
        p.append(f"{key}.nnodes={nnodes}: minirl starts rollout servers on this machine only. "
                 f"Fix: {key}.nnodes=1 and {key}.n_gpus_per_node=<servers>.")
    elif nnodes == 1:
        if gpus < 1:
            p.append(f"{key}.n_gpus_per_node={gpus} must be >= 1 with nnodes=1 (devices, on CPU server processes). "
                     f"Fix: {key}.n_gpus_per_node=2.")
        elif num_replicas(r) < 1:
            p.append(f"{key}.nnodes * n_gpus_per_node = {nnodes * gpus} devices cannot hold one replica of "
                     f"tensor * data * pipeline parallel = {rollout_world_size(r)} devices. "
                     f"Fix: raise {key}.n_gpus_per_node or lower the parallel sizes.")
    backend = str(ce.backend)
    # a backend registered in this process (lab 06's) counts when its servers receive as a streaming one does
    streaming = backend in STREAMING_BACKENDS or registered_checkpoint_engines().get(backend) in STREAMING_BACKENDS
    if backend != "naive" and not streaming:
        p.append(f"{key}.checkpoint_engine.backend={backend!r} is not a backend minirl has (naive, "
                 f"{', '.join(STREAMING_BACKENDS)}; verl also nixl, hccl, mooncake, kimi, delta_sharded). "
                 f"Fix: naive (rollout in the trainer) or nccl (rollout servers).")
    elif backend == "naive" and nnodes >= 1:
        p.append(f"{key}.checkpoint_engine.backend=naive hands the tensors over inside one process, but "
                 f"{key}.nnodes={nnodes} starts rollout servers in their own processes (verl's separate_async "
                 f"asserts the same). Fix: {key}.checkpoint_engine.backend=nccl, or {key}.nnodes=0.")
    elif backend != "naive" and nnodes == 0:
        p.append(f"{key}.checkpoint_engine.backend={backend} streams weights to rollout servers in other processes, "
                 f"but {key}.nnodes=0 keeps the rollout in the trainer (verl's hybrid replicas always sync with "
                 f"naive). Fix: {key}.nnodes=1 {key}.n_gpus_per_node=<servers>, or backend=naive.")
    if float(ce.update_weights_bucket_megabytes) <= 0:
        p.append(f"{key}.checkpoint_engine.update_weights_bucket_megabytes={ce.update_weights_bucket_megabytes} "
                 "must be > 0 (MiB per bucket; verl's default 2048). Fix: a positive size.")
    for name in ("debug_skip_sync_steps", "debug_partial_sync_steps"):
        steps = list(ce[name] or [])
        if any(not isinstance(s, int) or s < 1 for s in steps):
            p.append(f"{key}.checkpoint_engine.{name}={steps}: a list of training steps >= 1 (debug only). "
                     f"Fix: {key}.checkpoint_engine.{name}=[] (the default).")
    return p


def _multi_turn_problems(cfg) -> list[str]:
    """One line per bad `rollout.multi_turn` value (names, ranges, the tool config file)."""
    key = "actor_rollout_ref.rollout.multi_turn"
    mt = cfg.actor_rollout_ref.rollout.multi_turn
    p = []
    if mt.format not in FORMATS:
        p.append(f"{key}.format={mt.format!r}: minirl parses {list(FORMATS)} tool calls (verl also has gpt-oss, "
                 f"qwen3_coder, ...). Fix: {key}.format=hermes.")
    if mt.tool_response_truncate_side not in TRUNCATE_SIDES:
        p.append(f"{key}.tool_response_truncate_side={mt.tool_response_truncate_side!r} is not one of "
                 f"{list(TRUNCATE_SIDES)}. Fix: {key}.tool_response_truncate_side=middle.")
    if mt.tokenization_sanity_check_mode not in SANITY_CHECK_MODES:
        p.append(f"{key}.tokenization_sanity_check_mode={mt.tokenization_sanity_check_mode!r} is not one of "
                 f"{list(SANITY_CHECK_MODES)}. Fix: {key}.tokenization_sanity_check_mode=strict.")
    for name in ("max_assistant_turns", "max_user_turns"):
        if mt[name] is not None and int(mt[name]) < 1:
            p.append(f"{key}.{name}={mt[name]} must be >= 1 (or null for no limit). Fix: {key}.{name}=null.")
    for name in ("max_parallel_calls", "max_tool_response_length"):
        if int(mt[name]) < 1:
            p.append(f"{key}.{name}={mt[name]} must be >= 1. Fix: {key}.{name}={1 if 'calls' in name else 256}.")
    if mt.enable and mt.tool_config_path and find_tool_config(mt.tool_config_path) is None:
        p.append(f"{key}.tool_config_path={mt.tool_config_path!r}: tool config {str(mt.tool_config_path)!r} not found. "
                 "Fix: give an existing YAML file, e.g. minirl/tools/config/calculator_tool_config.yaml.")
    if mt.enable and not mt.tool_config_path and not mt.function_tool_path:
        p.append(f"{key}.enable=True but {key}.tool_config_path is null: the model would have no tool, and every "
                 "call it writes would be answered \"Unknown function\". Fix: "
                 f"{key}.tool_config_path=minirl/tools/config/calculator_tool_config.yaml (or your tool YAML), or "
                 f"{key}.enable=False.")
    if mt.tool_timeout is None or not float(mt.tool_timeout) > 0:
        p.append(f"{key}.tool_timeout={mt.tool_timeout!r} must be > 0 (seconds one tool call may take). "
                 f"Fix: {key}.tool_timeout=60.")
    if mt.tool_config_path and not mt.enable:
        p.append(f"{key}.tool_config_path is set but {key}.enable=False, so no tool would load. Fix: "
                 f"{key}.enable=True.")
    return p


def _reward_model_colocated(cfg) -> bool:
    rm = OmegaConf.select(cfg, "reward.reward_model")
    return bool(rm is not None and rm.enable and not rm.enable_resource_pool)


def _trainer_v1_problems(cfg) -> list[str]:
    v1, mode = cfg.trainer.v1, str(cfg.trainer.v1.trainer_mode)
    r = "actor_rollout_ref.rollout"
    key = "trainer.v1.trainer_mode"
    if mode not in TRAINER_MODES:
        return [f"{key}={mode!r} is not a V1 trainer (verl registers {', '.join(TRAINER_MODES)}). Fix: {key}=sync."]
    p: list[str] = []
    s = v1.sampler
    t = s.max_off_policy_threshold
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        p.append(f"trainer.v1.sampler.max_off_policy_threshold={t!r} must be an integer >= 1: the most steps a prompt "
                 "may span from fetch to training, 1 = fetched this step (verl asserts > 0). "
                 "Fix: trainer.v1.sampler.max_off_policy_threshold=1 (no policy lag) or more.")
    if s.max_off_policy_strategy not in OFF_POLICY_STRATEGIES:
        p.append(f"trainer.v1.sampler.max_off_policy_strategy={s.max_off_policy_strategy!r} is not a strategy (verl "
                 "asserts drop or wait). Fix: trainer.v1.sampler.max_off_policy_strategy=drop.")
    for m in ("colocate_async", "separate_async"):
        w = v1[m].num_warmup_batches
        if int(w) < 0:
            p.append(f"trainer.v1.{m}.num_warmup_batches={w} must be >= 0 (batches generated ahead). "
                     f"Fix: trainer.v1.{m}.num_warmup_batches=1.")
    if mode != "sync" and cfg.algorithm.adv_estimator == "remax":
        p.append(f"algorithm.adv_estimator='remax' runs in {key}=sync only: its greedy baselines are sampled with "
                 f"each batch (verl's V1 trainer has no remax), but {key}={mode!r}. "
                 f"Fix: {key}=sync, or another estimator (e.g. algorithm.adv_estimator=grpo).")
    custom, cs = s.get("custom_sampler") or {}, "trainer.v1.sampler.custom_sampler"
    if custom.get("path") or custom.get("name"):
        if mode == "sync":
            p.append(f"{cs} is set, but {key}=sync: minirl loads a custom sampler (a ReplayBufferAsync subclass) in "
                     f"the async trainers only (verl in every mode). Fix: {key}=colocate_async, or unset {cs}.")
        elif not (custom.get("path") and custom.get("name")):
            p.append(f"{cs}: path={show(custom.get('path'))} and name={show(custom.get('name'))}; a custom sampler "
                     f"needs both (verl: load_extern_type(path, name)). Fix: {cs}.path=<file or pkg://module> "
                     f"{cs}.name=<class>.")
    nnodes = int(OmegaConf.select(cfg, f"{r}.nnodes") or 0)
    if mode == "colocate_async" and nnodes != 0:
        p.append(f"{key}='colocate_async' runs the rollout with the trainer (verl: hybrid replicas on the training "
                 f"GPUs; minirl: the in-controller engine), but {r}.nnodes={nnodes} starts standalone servers, which "
                 f"are separate_async's. Fix: {r}.nnodes=0 {r}.checkpoint_engine.backend=naive, or "
                 f"{key}=separate_async.")
    if mode == "separate_async":
        tbs, pmbs = int(cfg.data.train_batch_size), int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size)
        psync = int(v1.separate_async.parameter_sync_step)
        if psync < 1:
            p.append(f"trainer.v1.separate_async.parameter_sync_step={psync} must be >= 1 (local updates per weight "
                     "sync). Fix: trainer.v1.separate_async.parameter_sync_step=1.")
        elif tbs != psync * pmbs:
            fix = f"actor_rollout_ref.actor.ppo_mini_batch_size={tbs // psync}" if tbs % psync == 0 else \
                f"trainer.v1.separate_async.parameter_sync_step={max(1, tbs // pmbs)}"
            p.append(f"{key}='separate_async' needs data.train_batch_size == parameter_sync_step * ppo_mini_batch_size "
                     f"(verl asserts it: each local update is one mini-batch), but {tbs} != {psync} * {pmbs}. "
                     f"Fix: {fix}.")
        if nnodes < 1:
            p.append(f"{key}='separate_async' generates on standalone rollout servers (verl asserts rollout.nnodes > 0 "
                     f"and a streaming checkpoint engine), but {r}.nnodes={nnodes}. Fix: {r}.nnodes=1 "
                     f"{r}.n_gpus_per_node=1 {r}.checkpoint_engine.backend=nccl.")
        if _reward_model_colocated(cfg):
            p.append(f"{key}='separate_async' with reward.reward_model.enable=True needs "
                     "reward.reward_model.enable_resource_pool=True: the standalone rollout never pauses, so a reward "
                     "model colocated with the actor has no time to run (verl asserts it). "
                     "Fix: reward.reward_model.enable_resource_pool=True.")
    return p


def _rollout_correction_problems(cfg) -> list[str]:
    rc = cfg.algorithm.rollout_correction
    key = "algorithm.rollout_correction"
    p: list[str] = []
    if rc.rollout_is is not None and rc.rollout_is not in ("token", "sequence"):
        p.append(f"{key}.rollout_is={rc.rollout_is!r} is not an IS level. Fix: token, sequence or null (none).")
    if rc.loss_type not in ("ppo_clip", "reinforce"):
        p.append(f"{key}.loss_type={rc.loss_type!r} is not a bypass-mode loss. Fix: ppo_clip or reinforce.")
    if rc.rollout_is is not None:
        try:
            parse_rollout_is_threshold(rc.rollout_is_threshold)
        except (TypeError, ValueError) as e:
            p.append(f"{key}.{e}")
    if rc.rollout_rs is not None:
        options = [o.strip() for o in str(rc.rollout_rs).split(",") if o.strip()]
        unknown = [o for o in options if o not in ROLLOUT_RS_OPTIONS]
        if unknown or not options:
            p.append(f"{key}.rollout_rs={rc.rollout_rs!r}: unknown criteria {unknown}. Fix: one or more of "
                     f"{', '.join(ROLLOUT_RS_OPTIONS)}, comma-separated, or null.")
        else:
            try:
                parse_rollout_rs_thresholds(list(dict.fromkeys(options)), rc.rollout_rs_threshold)
            except (TypeError, ValueError) as e:
                p.append(f"{key}.{e}")
    if rc.bypass_mode:
        p += _bypass_problems(cfg)
    if not cfg.actor_rollout_ref.rollout.calculate_log_probs and (rc.rollout_is is not None or rc.rollout_rs is not None):
        p.append(f"{key}.rollout_is / rollout_rs correct towards the rollout's log-probs, but "
                 "actor_rollout_ref.rollout.calculate_log_probs=False (verl then skips the correction silently). "
                 "Fix: actor_rollout_ref.rollout.calculate_log_probs=True.")
    return p


_BYPASS_KEYS = ("rollout_is", "rollout_is_threshold", "rollout_rs", "rollout_rs_threshold", "loss_type",
                "rollout_is_batch_normalize")


def _bypass_problems(cfg) -> list[str]:
    """Bypass mode: the algorithm section's IS / RS / loss_type act only through the actor's bypass_mode loss.

    verl's V1 trainer only swaps `old_log_probs` in bypass mode (`_compute_old_log_prob`,
    `verl/trainer/ppo/v1/trainer_base.py:1529`) and skips the decoupled correction; the loss reads
    `actor.policy_loss.rollout_correction`. Its legacy trainer copies this section there (`apply_bypass_mode`,
    `verl/trainer/ppo/rollout_corr_helper.py:1109`). So a key set here that the actor does not share would be
    silently ignored: minirl says so instead.
    """
    rc, defaults = cfg.algorithm.rollout_correction, RolloutCorrectionConfig()
    actor = cfg.actor_rollout_ref.actor.policy_loss
    asked = {k: rc[k] for k in _BYPASS_KEYS if rc[k] != getattr(defaults, k)}
    if not asked:
        return []
    a = "actor_rollout_ref.actor.policy_loss"
    copy = " ".join(f"{a}.rollout_correction.{k}={v}" for k, v in asked.items())
    if actor.loss_mode != "bypass_mode":
        return [f"algorithm.rollout_correction.{', '.join(asked)} set with bypass_mode=True, but verl's V1 trainer "
                f"applies them only through the actor's bypass_mode loss and {a}.loss_mode={actor.loss_mode!r}. "
                f"Fix: {a}.loss_mode=bypass_mode {copy} (what verl's apply_bypass_mode does).".replace("=None", "=null")]
    differ = [k for k, v in asked.items() if actor.rollout_correction[k] != v]
    if differ:
        return [f"algorithm.rollout_correction.{', '.join(differ)} differ from {a}.rollout_correction, which the "
                f"bypass_mode loss reads. Fix: {copy}.".replace("=None", "=null")]
    return []


def _async_problems(cfg) -> list[str]:
    """One line per bad `trainer.v1` or `algorithm.rollout_correction` value, including verl's asserts."""
    return _trainer_v1_problems(cfg) + _rollout_correction_problems(cfg)


# ------------------------------------------------------------------------------------- distillation

K1_SUPERVISED = ("distillation.distillation_loss.loss_mode=k1 with use_policy_gradient=False back-propagates "
                 "log pi - log nu, whose gradient does not depend on the teacher at all. Fix: "
                 "distillation.distillation_loss.use_policy_gradient=True (k1 as a reward), or loss_mode=k3.")
"""The one-line error for k1 as a supervised loss (verl: `DistillationLossConfig.__post_init__`); the loss
(`minirl.trainer.distillation.losses`) raises it too."""

_D = "distillation"
_L = "distillation.distillation_loss"


def _teacher_world(inference) -> int:
    return int(inference.tensor_model_parallel_size) * int(inference.data_parallel_size)


def _distillation_loss_problems(d) -> list[str]:
    """verl: `DistillationLossConfig.__post_init__` (`verl/workers/config/distillation.py:100`), run whether or not enabled."""
    lc, p = d.distillation_loss, []
    losses = registered_names("distillation_loss")  # read from the source: config imports no stage
    if lc.loss_mode not in losses:
        p.append(f"{_L}.loss_mode={lc.loss_mode!r} is not a distillation loss. Fix: one of {losses}.")
        return p
    if lc.policy_loss_mode != "vanilla":
        p.append(f"{_L}.policy_loss_mode={lc.policy_loss_mode!r}: only vanilla is supported with use_policy_gradient "
                 "(verl raises NotImplementedError). Fix: vanilla.")
    if not lc.use_policy_gradient and lc.loss_mode in ("kl", "k1"):
        p.append(K1_SUPERVISED)
    if lc.loss_mode == "forward_kl_topk" and (lc.topk is None or int(lc.topk) < 1):
        p.append(f"{_L}.topk={lc.topk!r}: forward_kl_topk needs the teacher's top k >= 1 tokens. Fix: topk=32.")
    if lc.loss_max_clamp is not None and float(lc.loss_max_clamp) <= 0:
        p.append(f"{_L}.loss_max_clamp={lc.loss_max_clamp}: the clamp is [-c, c], so c must be > 0. Fix: a positive "
                 "number, or null.")
    if float(lc.distillation_loss_coef) < 0:
        p.append(f"{_L}.distillation_loss_coef={lc.distillation_loss_coef} would push the student away from the "
                 "teacher. Fix: a number >= 0.")
    return p


def _distillation_problems(cfg) -> list[str]:
    """Every problem of `cfg.distillation`, one line each (verl: the `__post_init__`s of its config dataclasses)."""
    d = cfg.get("distillation")
    if d is None:
        return []
    p = _distillation_loss_problems(d)
    if not d.enabled:
        return p
    nodes, gpus = int(d.nnodes), int(d.n_gpus_per_node)
    if nodes <= 0 or gpus <= 0:  # verl: PPOTrainer._setup's ValueErrors
        p.append(f"{_D}.nnodes={nodes} and n_gpus_per_node={gpus}: the teacher pool must have at least one device "
                 f"(verl: 'must be greater than 0'). Fix: {_D}.nnodes=1 {_D}.n_gpus_per_node=1.")
        return p
    if nodes > 1:
        p.append(f"{_D}.nnodes={nodes}: minirl starts the teacher servers on this machine only. Fix: {_D}.nnodes=1.")
    models = d.teacher_models
    if len(models) == 0:
        p.append(f"{_D}.teacher_models is empty. Fix: keep the teacher_model entry.")
        return p
    pool, used = nodes * gpus, 0
    single = len(models) == 1
    if not single and "teacher_model" in models:  # verl drops it: say so if it was configured (its pitfall)
        t = models.teacher_model
        if t.key is not None or t.model_path is not None:
            p.append(f"{_D}.teacher_models.teacher_model is set (key={t.key!r}, model_path={t.model_path!r}) next to "
                     "other teachers, and is dropped then, as in verl. Fix: name every teacher differently "
                     "(teacher_model1, teacher_model2, ...).")
    keys = []
    for name, t in models.items():
        if not single and name == "teacher_model":
            continue
        where = f"{_D}.teacher_models.{name}"
        inf, world = t.inference, _teacher_world(t.inference)
        if inf.name != "hf":
            p.append(f"{where}.inference.name={inf.name!r}: minirl's teacher scores the student's tokens with the hf "
                     f"backend only (verl: vllm or sglang prompt_logprobs). Fix: {where}.inference.name=hf.")
        if int(inf.tensor_model_parallel_size) != 1 or int(inf.data_parallel_size) != 1:
            p.append(f"{where}.inference: tensor_model_parallel_size={inf.tensor_model_parallel_size}, "
                     f"data_parallel_size={inf.data_parallel_size}; the hf backend runs one process per replica. "
                     f"Fix: both 1 (verl's YAML has tensor_model_parallel_size 2 for its vLLM teachers).")
        need = int(inf.prompt_length) + int(inf.response_length) + 1
        if inf.max_model_len is not None and need > int(inf.max_model_len):
            p.append(f"{where}.inference.max_model_len={inf.max_model_len} cannot hold the student's prompt + response "
                     f"+ 1 = {need} tokens. Fix: max_model_len={need} or null.")
        if single:
            if pool % max(1, world):
                p.append(f"{where}: its per-replica world size {world} must divide the teacher pool of {pool} "
                         f"({_D}.nnodes * n_gpus_per_node). Fix: {_D}.n_gpus_per_node={world}.")
            used = pool
        else:
            if t.key is None or t.model_path is None or t.num_replicas is None or int(t.num_replicas) < 1:
                p.append(f"{where}: with several teachers each needs key, model_path and num_replicas >= 1 (got key="
                         f"{t.key!r}, model_path={t.model_path!r}, num_replicas={t.num_replicas!r}).")
            keys.append(t.key)
            used += int(t.num_replicas or 0) * world
    if not single:
        if len(keys) == 0:
            p.append(f"{_D}.teacher_models: no teacher besides the dropped 'teacher_model' entry.")
        dup = sorted({k for k in keys if k is not None and keys.count(k) > 1})
        if dup:
            p.append(f"{_D}.teacher_models: duplicate teacher key(s) {dup}. Fix: one key per teacher.")
        if used != pool:
            p.append(f"{_D}.teacher_models: the teachers need sum(num_replicas * per-replica world) = {used} devices but "
                     f"the pool has {_D}.nnodes * n_gpus_per_node = {pool}. Fix: {_D}.n_gpus_per_node={used}.")
    return p


def value_problems(cfg) -> list[str]:
    """Every out-of-range value of `minirl/config/ppo_trainer.yaml`'s keys, one line each."""
    p = Problems(cfg)
    for key in ("data.max_prompt_length", "data.max_response_length"):
        _at_least(p, key, 1, f"{key}=40" if "prompt" in key else f"{key}=12", " (tokens)")
    for key in ("data.train_max_samples", "data.val_max_samples"):
        p.check(key, lambda v: v == -1 or v >= 1, "must be -1 (all rows) or a number of rows >= 1", f"{key}=-1")
    _actor_problems(p)
    _rollout_problems(p)
    _algorithm_problems(p)
    if need_critic(cfg):
        optim_problems(p, "critic.optim")
        _at_least(p, "critic.ppo_epochs", 1, "critic.ppo_epochs=1")
        p.check("critic.cliprange_value", lambda v: v >= 0, "must be >= 0 (the value clip around the old values)",
                "critic.cliprange_value=0.5")
    names = registered_names("reward_manager")
    p.check("reward.reward_manager.name", lambda v: v in names, f"is not a registered reward manager (minirl: "
            f"{', '.join(names)}; verl's reward loop also registers gdpo, rate_limited, remote)",
            "reward.reward_manager.name=naive", skip_none=False)
    _reward_problems(p)
    _trainer_problems(p)
    p += _name_problems(cfg)
    p += _rollout_server_problems(cfg)  # rollout placement + checkpoint engine
    p += _multi_turn_problems(cfg)
    p += _async_problems(cfg)  # trainer.v1 (verl's async asserts) and algorithm.rollout_correction
    p += _distillation_problems(cfg)  # distillation.* (the schema: minirl.config.schema_distillation)
    return list(p)


__all__ = [
    "K1_SUPERVISED",
    "MINIRL_LOGGERS",
    "VERL_LOGGERS",
    "Problems",
    "device_problems",
    "optim_problems",
    "show",
    "value_problems",
]
