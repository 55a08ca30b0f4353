"""Value checks: every value verl's config dataclasses (or the code behind them) would reject, before any model.

verl checks values in many places: `ActorConfig.__post_init__` (`verl/workers/config/actor.py:197`),
`CriticConfig.__post_init__` (`verl/workers/config/critic.py:103`), `RolloutConfig.__post_init__`
(`verl/workers/config/rollout.py:276`), `FSDPOptimizerConfig.__post_init__`
(`verl/workers/config/optimizer.py:116`), `validate_config` (`verl/utils/config.py:74`), asserts in the
losses (`compute_policy_loss_vanilla` asserts `clip_ratio_c > 1`, `verl/trainer/ppo/core_algos.py:1286`;
`get_kl_controller` asserts a positive horizon, `verl/trainer/ppo/core_algos.py:193`), `Tracking`'s list
of logger backends (`verl/utils/tracking.py:37`) and the reward-manager registry
(`RewardManagerConfig.__post_init__`, `verl/workers/config/reward.py:51`). Many of those fire only when
the code that reads the value runs, after the models are built. minirl checks all of them, and the
ranges an optimizer or sampler needs (a positive learning rate, `top_p` in (0, 1]), at load time;
each problem is one line `key=value <what is wrong>. Fix: <what to set>`.

Where verl accepts a value and minirl mirrors it: a negative `entropy_coeff` (an entropy penalty) and
a critic that runs with an estimator that ignores values (verl's `need_critic` turns it on whenever
`critic.enable=True`; `minirl config explain` says the values go unused).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

MINIRL_LOGGERS = ("console", "file")
"""`trainer.logger` backends minirl implements: a line per step, `metrics.jsonl`."""
VERL_LOGGERS = ("wandb", "mlflow", "swanlab", "vemlp_wandb", "tensorboard", "console", "clearml", "trackio", "file",
                "rl_insight")
"""verl's `Tracking.supported_backend` at the pin (`verl/utils/tracking.py:37`)."""
WORKER_GROUPS = ("auto", "inprocess", "ray")
NONFINITE_POLICIES = ("stop", "skip")  # minirl.trainer.ppo.finite_checks.POLICIES
RESUME_MODES = ("auto", "disable", "resume_path")
DEVICES = ("cpu", "cuda")


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


def reward_manager_names() -> list[str]:
    """The names `@register("...")` gives in `minirl/workers/reward/managers.py`, read without importing torch.

    Managers registered at run time (the module already imported) are added from its registry.
    """
    path = Path(__file__).resolve().parents[1] / "workers" / "reward" / "managers.py"
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register" and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            names.add(node.args[0].value)
    mod = sys.modules.get("minirl.workers.reward.managers")
    names |= set(getattr(mod, "_REGISTRY", {}))
    return sorted(names)


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
    p.check(f"{r}.gpu_memory_utilization", lambda v: 0 < v <= 1, "must be in (0, 1] (a fraction of GPU memory)",
            f"{r}.gpu_memory_utilization=0.5")
    total = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    p.check(f"{r}.max_model_len", lambda v: v >= total, f"is shorter than data.max_prompt_length + "
            f"data.max_response_length = {total} tokens", f"{r}.max_model_len=null (= {total}) or >= {total}")


def _algorithm_problems(p: Problems) -> None:
    from minirl.trainer.ppo.utils import CRITIC_ESTIMATORS

    cfg = p.cfg
    for key in ("algorithm.gamma", "algorithm.lam"):
        _unit(p, key, f"{key}=1.0", " (a discount / GAE lambda)")
    p.check("algorithm.kl_ctrl.kl_coef", lambda v: v >= 0, "must be >= 0 (the in-reward KL coefficient beta)",
            "algorithm.kl_ctrl.kl_coef=0.001")
    if cfg.algorithm.kl_ctrl.type == "adaptive":
        _positive(p, "algorithm.kl_ctrl.horizon", "algorithm.kl_ctrl.horizon=10000",
                  " for the adaptive controller (verl's get_kl_controller asserts it)")
        _positive(p, "algorithm.kl_ctrl.target_kl", "algorithm.kl_ctrl.target_kl=0.1", " for the adaptive controller")
    if cfg.algorithm.adv_estimator in CRITIC_ESTIMATORS and cfg.critic.enable is False:
        p.append(f"algorithm.adv_estimator={cfg.algorithm.adv_estimator} needs the critic's values, but "
                 "critic.enable=False (verl would run without a critic and fail when GAE reads the values). "
                 "Fix: critic.enable=null (on for gae), or an estimator without values, e.g. algorithm.adv_estimator=grpo.")


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


def value_problems(cfg) -> list[str]:
    """Every out-of-range value of `minirl/config/ppo_trainer.yaml`'s keys, one line each."""
    from minirl.trainer.ppo.utils import need_critic

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
    names = reward_manager_names()
    p.check("reward.reward_manager.name", lambda v: v in names, f"is not a registered reward manager (minirl: "
            f"{', '.join(names)}; verl's reward loop also registers gdpo, rate_limited, remote)",
            "reward.reward_manager.name=naive", skip_none=False)
    _reward_problems(p)
    _trainer_problems(p)
    return list(p)


__all__ = [
    "MINIRL_LOGGERS",
    "VERL_LOGGERS",
    "Problems",
    "device_problems",
    "optim_problems",
    "reward_manager_names",
    "show",
    "value_problems",
]
