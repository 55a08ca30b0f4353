"""The config keys minirl accepts but does not implement: one table, and the check that rejects them.

minirl's YAML keeps verl's shape (`verl/trainer/config/_generated_ppo_trainer.yaml`), so a verl
command line reads the same here. Some keys are in the YAML only for that shape: no minirl code
reads them, or minirl implements only their default. Each has one row below, `key -> what verl does
with it`; `unimplemented_problems` rejects a config in which such a key differs from its default,
with one line naming the key, its value and what verl would have done. A key's default is the
value the YAML gives it, evaluated in the config being checked, so `actor_rollout_ref.ref.strategy:
${actor_rollout_ref.actor.strategy}` is reported once, at the actor, when the actor's is changed.

When minirl implements a key, delete its row (and read the key in the code that uses it). How the
list was made: every leaf key of `ppo_trainer.yaml` and `sft_trainer.yaml`, grepped for in `minirl/`
and recorded during small runs (GRPO, GAE with KL, bypass mode, clip_cov, kl_cov, custom reward,
save and resume) by patching `DictConfig`'s accessors, with the workers in the trainer's process
(`trainer.worker_group=inprocess`: Ray workers run the same worker code in other processes). Keys
that the code reads only through a YAML interpolation (`actor.grad_clip` -> `actor.optim.clip_grad`,
`trainer.project_name` -> `trainer.default_local_dir`) count as read, and so do the vLLM rollout's
keys (`gpu_memory_utilization`, `engine_kwargs.vllm`, ...), which the hf rollout ignores.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

_DYN_BSZ = ("packs micro-batches by token count (up to the *_max_token_len_per_gpu budget) instead of a "
            "fixed number of sequences")
_MICRO = ("a deprecated global micro-batch size; its V1 engine workers read only the *_per_gpu key, which "
          "minirl implements")
_STRATEGY = ("chooses the training engine: fsdp (FSDP1), fsdp2, megatron, veomni or torchtitan; minirl "
             "runs fsdp2, torchtitan or megatron, set by the model_engine group (model_engine=megatron)")
_ROLLOUT_N = "a copy of actor_rollout_ref.rollout.n (ActorConfig requires it); set rollout.n instead"
_OPTIMIZER = ("names the optimizer class, imported from optim.optimizer_impl (torch.optim by default, e.g. "
              "torchao's _AdamW); minirl always builds torch.optim.AdamW")
_OPTIM_STEPS = ("overwritten by the trainer with the run's length (trainer.total_training_steps, or epochs "
                "x batches per epoch); set trainer.total_training_steps instead")
_PARAM_OFFLOAD = "keeps the parameters in CPU memory between uses, trading speed for GPU memory"
_OPTIM_OFFLOAD = "keeps the optimizer state in CPU memory between uses"
_FSDP_SIZE = ("sets the GPUs per FSDP shard group (-1: all ranks; a smaller size shards within groups and "
              "replicates across them)")
_SAVE = ("lists what a checkpoint holds: model, optimizer, extra (scheduler, RNG) and optionally hf_model "
         "(a Hugging Face copy); minirl always saves model, optimizer and extra")
_LOAD = "lists what a resume restores (default: the save_contents); minirl always restores all three"
_OVERRIDE = "merges these keys into the Hugging Face model config before the model is built"
_HYBRID_SWITCH = ("lends the trainer's own (hybrid) rollout replicas to generation while the trainer waits, next to "
                  "the standalone servers (PPOTrainerSeparateAsync.switch_to_rollout); minirl's separate_async has "
                  "only the standalone servers")
_CUSTOM_SAMPLER = ("passes keyword arguments to a custom sampler (custom_sampler.path / .name); minirl builds a "
                   "custom ReplayBufferAsync subclass with ReplayBufferAsync's own arguments only")
_REMOVE_PAD = "packs the sequences without padding tokens (flash-attention varlen) for forward and backward"

UNIMPLEMENTED: dict[str, str] = {
    # data
    "data.tokenizer": "a tokenizer class or path (null: inferred from the model); minirl loads the tokenizer "
                      "from actor_rollout_ref.model.tokenizer_path or .path",
    "data.val_batch_size": "sets the validation dataloader's batch size (null: the whole set), and validate_config "
                           "warns that it is deprecated; minirl validates on the whole set at once",
    "data.return_raw_chat": "decides whether the dataset hands the untemplated chat messages (raw_prompt) to the "
                            "agent loop; minirl's agent loop always templates the raw chat itself",
    "data.dataloader_num_workers": "sets the worker processes of the StatefulDataLoader that loads the prompts",
    # actor_rollout_ref
    "actor_rollout_ref.hybrid_engine": "runs actor and rollout on the same GPUs; verl's hybrid trainers need true "
                                       "and its experimental fully-async and one-step-off-policy trainers need false",
    "actor_rollout_ref.model.override_config": _OVERRIDE,
    "actor_rollout_ref.model.use_remove_padding": _REMOVE_PAD,
    "actor_rollout_ref.actor.strategy": _STRATEGY,
    "actor_rollout_ref.actor.rollout_n": _ROLLOUT_N,
    "actor_rollout_ref.actor.ppo_micro_batch_size": _MICRO,
    "actor_rollout_ref.actor.use_dynamic_bsz": _DYN_BSZ,
    "actor_rollout_ref.actor.optim.optimizer": _OPTIMIZER,
    "actor_rollout_ref.actor.optim.total_training_steps": _OPTIM_STEPS,
    "actor_rollout_ref.actor.fsdp_config.param_offload": _PARAM_OFFLOAD,
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": _OPTIM_OFFLOAD,
    "actor_rollout_ref.actor.fsdp_config.fsdp_size": _FSDP_SIZE,
    "actor_rollout_ref.actor.checkpoint.save_contents": _SAVE,
    "actor_rollout_ref.actor.checkpoint.load_contents": _LOAD,
    "actor_rollout_ref.ref.rollout_n": _ROLLOUT_N,
    "actor_rollout_ref.ref.strategy": _STRATEGY,
    "actor_rollout_ref.ref.log_prob_micro_batch_size": _MICRO,
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": _DYN_BSZ,
    "actor_rollout_ref.ref.fsdp_config.param_offload": _PARAM_OFFLOAD,
    "actor_rollout_ref.ref.fsdp_config.optimizer_offload": _OPTIM_OFFLOAD,
    "actor_rollout_ref.ref.fsdp_config.fsdp_size": _FSDP_SIZE,
    "actor_rollout_ref.rollout.mode": "supports only async (rollout servers): sync raises an error, other values warn",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size": _MICRO,
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": _DYN_BSZ,
    "actor_rollout_ref.rollout.multi_turn.function_tool_path": "loads stateless @function_tool functions from this "
                                                               "Python file, their schemas read from signature and "
                                                               "docstring; minirl loads BaseTool classes from "
                                                               "multi_turn.tool_config_path only",
    "actor_rollout_ref.rollout.multi_turn.use_inference_chat_template": "re-renders each turn with the model's "
                                                                        "chat template instead of the recorded ids "
                                                                        "(read only by the legacy SGLang rollout)",
    "actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts": "nothing: MultiTurnConfig declares it but no code "
                                                                "reads it at the pinned commit",
    # critic
    "critic.strategy": _STRATEGY,
    "critic.rollout_n": _ROLLOUT_N,
    "critic.ppo_micro_batch_size": _MICRO,
    "critic.use_dynamic_bsz": _DYN_BSZ,
    "critic.model.tokenizer_path": "loads the critic's tokenizer from here when it differs from the model path; "
                                   "minirl's critic uses the actor's tokenizer",
    "critic.model.override_config": _OVERRIDE,
    "critic.model.use_remove_padding": _REMOVE_PAD,
    "critic.optim.optimizer": _OPTIMIZER,
    "critic.optim.total_training_steps": _OPTIM_STEPS,
    "critic.fsdp.param_offload": _PARAM_OFFLOAD,
    "critic.fsdp.optimizer_offload": _OPTIM_OFFLOAD,
    "critic.fsdp.fsdp_size": _FSDP_SIZE,
    "critic.checkpoint.save_contents": _SAVE,
    "critic.checkpoint.load_contents": _LOAD,
    # reward
    "reward.reward_manager.source": "register looks the manager up by name; importlib loads the class "
                                    "reward_manager.name from the file reward_manager.module.path",
    # trainer
    "trainer.log_val_generations": "logs this many validation (prompt, response, score) samples to the trackers",
    "trainer.max_critic_ckpt_to_keep": "keeps the newest N critic checkpoints; minirl's "
                                       "trainer.max_actor_ckpt_to_keep removes whole global_step_* folders",
    "trainer.use_v1": "false runs the deprecated legacy trainer (TaskRunner of verl/trainer/main_ppo_v0.py); minirl "
                      "has only the V1 trainer",
    "trainer.v1.separate_async.hybrid_rollout.enable_switch": _HYBRID_SWITCH,
    "trainer.v1.separate_async.hybrid_rollout.switch_threshold_ratio": _HYBRID_SWITCH,
    "trainer.v1.separate_async.hybrid_rollout.adaptive_switch_threshold": _HYBRID_SWITCH,
    "trainer.v1.separate_async.hybrid_rollout.switch_threshold_step_up": _HYBRID_SWITCH,
    "trainer.v1.separate_async.hybrid_rollout.switch_threshold_step_down": _HYBRID_SWITCH,
    "trainer.v1.separate_async.hybrid_rollout.switch_threshold_release_steps": _HYBRID_SWITCH,
    "trainer.v1.separate_async.hybrid_rollout.switch_cost_window_size": _HYBRID_SWITCH,
    "trainer.v1.sampler.sync_refill_failed_groups": "replaces a failed group with a new prompt in sync mode (the "
                                                    "async buffers always refill); minirl's sync buffer stops on a "
                                                    "failed group and names its error",
    "trainer.v1.sampler.sampler_kwargs": _CUSTOM_SAMPLER,
    # distillation: the teacher's vLLM-only inference keys (minirl's teacher runs the hf backend)
    **{f"distillation.teacher_models.teacher_model.inference.{k}": v for k, v in {
        "cudagraph_capture_sizes": "the batch sizes vLLM captures CUDA graphs for (null: vLLM's own list)",
        "expert_parallel_size": "spreads a mixture-of-experts teacher's experts over this many GPUs",
        "max_num_batched_tokens": "caps the tokens vLLM schedules in one engine step (8192)",
        "load_format": "how vLLM loads the weights (auto, dummy, safetensors, ...)",
        "limit_images": "caps the images per prompt of a multimodal teacher",
        "enable_chunked_prefill": "lets vLLM split a long prefill over several engine steps",
        "disable_log_stats": "turns off vLLM's periodic throughput logging",
        "skip_tokenizer_init": "starts vLLM without a tokenizer (token ids in and out)",
    }.items()},
}
"""`minirl/config/ppo_trainer.yaml` keys minirl does not implement -> what verl does with them."""

SFT_UNIMPLEMENTED: dict[str, str] = {
    "data.val_files": "validates on this parquet file; minirl's SFT validates on data.val_max_samples held-out "
                      "problems of data.train_files' task",
    "data.builtin.n_val": "no such key (minirl only); minirl's SFT validates on data.val_max_samples held-out "
                          "problems and never reads it",
    "optim.total_training_steps": _OPTIM_STEPS,
}
"""`minirl/config/sft_trainer.yaml` keys minirl's SFT does not implement -> what verl does with them."""

_TABLES = {"ppo_trainer": UNIMPLEMENTED, "sft_trainer": SFT_UNIMPLEMENTED}


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value


def _as_override(value: Any) -> str:
    """A value as a command-line override writes it: null, true, fsdp2, [model,optimizer], {}."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(_as_override(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_as_override(v)}" for k, v in value.items()) + "}"
    return str(value)


def default_of(cfg: DictConfig, key: str, defaults: dict) -> Any:
    """The value `key` would have in `cfg` had nobody set it: its default, interpolations evaluated in `cfg`."""
    raw: Any = defaults
    for part in key.split("."):
        raw = raw[part]
    if isinstance(raw, str) and "${" in raw:
        probe = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
        OmegaConf.update(probe, key, raw, merge=False)
        return _plain(OmegaConf.select(probe, key))
    return raw


_TT_SIZE = "ranks of its {} dimension in torchtitan's mesh; minirl's torchtitan engine runs dp_shard x tp only"
_TORCHTITAN = {"data_parallel_replicate_size": _TT_SIZE.format("HSDP-replica (dp_replicate)"),
               "pipeline_parallel_size": _TT_SIZE.format("pipeline (pp; torch.distributed.pipelining)"),
               "context_parallel_size": _TT_SIZE.format("context-parallel (cp)"),
               "expert_parallel_size": _TT_SIZE.format("expert-parallel (ep)")}
_MEGATRON = {"param_offload": _PARAM_OFFLOAD, "grad_offload": "keeps the gradients in CPU memory between uses",
             "optimizer_offload": _OPTIM_OFFLOAD,
             "expert_model_parallel_size": "splits a mixture-of-experts layer's experts over its ranks (EP)",
             "virtual_pipeline_model_parallel_size": ("gives each pipeline stage several model chunks and runs "
                                                      "megatron-core's interleaved 1F1B schedule, a smaller bubble"),
             "context_parallel_size": "splits each sequence along its tokens over its ranks, attention by ring P2P (CP)",
             "sequence_parallel": ("splits the norms' and dropouts' activations over the TP ranks, turning each TP "
                                   "all-reduce into a reduce-scatter + all-gather"),
             "use_distributed_optimizer": "shards the optimizer state over the data-parallel ranks (ZeRO-1)",
             "use_dist_checkpointing": "saves megatron's dist_checkpointing format instead of Hugging Face names"}
ENGINE_UNIMPLEMENTED: dict[str, dict[str, str]] = {
    "torchtitan": {f"{section}.torchtitan.{key}": text for section in ("actor_rollout_ref.actor", "critic")
                   for key, text in _TORCHTITAN.items()},
    "megatron": {f"{section}.megatron.{key}": text for section in ("actor_rollout_ref.actor", "critic")
                 for key, text in _MEGATRON.items()},
}
"""Per `model_engine` choice: keys of its group files minirl does not implement -> what verl does with them."""


@cache
def _defaults(config_name: str, choices: tuple = ()) -> dict:
    from minirl.config import default_config

    return OmegaConf.to_container(default_config(config_name, choices), resolve=False)


def unimplemented_problems(cfg: DictConfig, config_name: str = "ppo_trainer") -> list[str]:
    """One line per key of the `config_name` table that `cfg` sets to something other than its default.

    Defaults are those of the config's own group choices (`model_engine=torchtitan` makes `torchtitan`
    the default strategy), and the choice's `ENGINE_UNIMPLEMENTED` rows are checked too.
    """
    from minirl.config import group_choices

    choices = group_choices(cfg) if config_name == "ppo_trainer" else ()
    defaults = _defaults(config_name, choices)
    table = dict(_TABLES[config_name])
    for _, choice in choices:
        table.update(ENGINE_UNIMPLEMENTED.get(choice, {}))
    problems = []
    for key, verl_does in table.items():
        value = _plain(OmegaConf.select(cfg, key))
        default = default_of(cfg, key, defaults)
        if value != default:
            problems.append(f"{key}={value!r}: minirl does not implement it (verl: {verl_does}). "
                            f"Fix: drop the override (the default is {key}={_as_override(default)}).")
    return problems


__all__ = ["ENGINE_UNIMPLEMENTED", "SFT_UNIMPLEMENTED", "UNIMPLEMENTED", "default_of", "unimplemented_problems"]
