"""`PPOTrainer`: the single controller's training loop, stage by stage.

verl: `PPOTrainer` (`verl/trainer/ppo/v1/trainer_base.py:118`) with `fit` (`:387`), `step` (`:509`) and
`_step_once` (`:538`), specialised by `PPOTrainerSync` (`verl/trainer/ppo/v1/trainer_sync.py:25`).
One training step (`_step_once`), each stage a method below and a span in the trace:

| stage | method | adds to the batch | verl |
|---|---|---|---|
| sample | `_sample` | prompts, responses, response_mask, input_ids, attention_mask, position_ids, rollout_log_probs, uid | `ReplayBuffer.sample` + agent loop |
| reward | `_compute_reward` | rm_scores (+ acc ...) | `_compute_reward_colocate` (`:1424`) |
| old_log_prob | `_compute_old_log_prob` | old_log_probs, entropy | `_compute_old_log_prob` (`:1529`) |
| ref_log_prob | `_compute_ref_log_prob` | ref_log_prob (only with a KL option) | `_compute_ref_log_prob` (`:1590`) |
| values | `_compute_values` | values (only with a critic) | `_compute_values` (`:1616`) |
| advantage | `_compute_advantage` | token_level_scores, token_level_rewards, advantages, returns | `_compute_advantage` (`:1638`) |
| update_critic | `_update_critic` | (critic weights) | `_update_critic` (`:1699`) |
| update_actor | `_update_actor` | (actor weights, version + 1) | `_update_actor` (`:1722`) |
| update_weights | `on_step_end` | (rollout weights, version + 1) | `PPOTrainerSync.on_step_end` |

Where the data lives. The sample stage follows verl's V1 path: the agent loop's trajectories are
stored per sample key, without padding, in a `TransferQueue` (`minirl.transfer_queue`), the
`ReplayBuffer` picks whole GRPO groups by their tags and returns a `BatchMeta` (keys + tags), and
`self._get(batch_meta)` materialises the padded `DataProto` the stages work on. From there on the
stages pass that `DataProto` along and each worker call sends only the fields it reads
(`_worker_input`); verl instead has every stage `kv_batch_get` its fields from the TransferQueue and
`kv_batch_put` its outputs back, so the controller never holds the whole batch. minirl keeps the
DataProto flow for the stages because it is what the trace records field by field and what a reader
can print at any point; the trade-off is that the controller holds the batch (fine on one machine,
and it is the controller that scatters it to the workers anyway). The TransferQueue is emptied at
the end of every step (verl: `kv_clear` at the end of `fit`'s step, `:387`).

Where the workers live (`trainer.worker_group`):

- `ray`: one Ray actor per rank (`trainer.nnodes * trainer.n_gpus_per_node` ranks; on a CPU-only
  machine each rank is a process), actor, reference and critic colocated in the same processes
  (`create_colocated_worker_cls`, as verl's `_setup` does for its `global_pool`); with more than one
  rank they form a `torch.distributed` group and the FSDP2 engines shard over it. verl always uses
  Ray (`verl/trainer/main_ppo.py:34`).
- `inprocess`: the workers are objects in this process (`InProcessWorkerGroup`): one rank only, no
  Ray start (which costs 30-40 s and ~1 GB on a small machine), the path a debugger steps through.
- `auto` (default): `ray` when there is more than one rank or `ray_kwargs.ray_init.address` is set,
  else `inprocess`.

Either way the rollout (hf) lives in this controller process and receives the actor's weights from
rank 0 after every update (verl runs rollout replicas as separate inference servers).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from omegaconf import OmegaConf
from tqdm.auto import tqdm

from minirl.agent_loop import AgentLoopManager
from minirl.agent_loop.agent_loop import new_uids
from minirl.checkpoint_engine import CheckpointEngineManager
from minirl.config.validate import derived_numbers, use_critic, use_reference_policy
from minirl.protocol import DataProto
from minirl.single_controller.base.inprocess import InProcessWorkerGroup
from minirl.single_controller.base.worker_group import ClassWithInitArgs, ResourcePool
from minirl.trace import NullTracer, Tracer
from minirl.trainer import core_algos
from minirl.trainer.ppo.advantage import apply_kl_penalty, compute_advantage
from minirl.trainer.ppo.dataloader import PromptLoader, to_dataproto
from minirl.trainer.ppo.metric_utils import compute_data_metrics, rollout_mismatch_metrics
from minirl.trainer.ppo.replay_buffer import ReplayBuffer, set_prompt_status, submit_prompts, trajectory_key
from minirl.transfer_queue import BatchMeta, TransferQueue, nested_to_padded, padded_to_nested
from minirl.workers.engine_workers import ActorRolloutRefWorker, CriticWorker, reduce_metrics
from minirl.workers.rollout.base import get_rollout_class

_TRAINERS: dict[str, type] = {}


def register_trainer(mode: str):
    """verl: `register_trainer` (`verl/trainer/ppo/v1/trainer_base.py:1888`), keyed by `trainer.v1.trainer_mode`."""

    def deco(cls):
        _TRAINERS[mode] = cls
        return cls

    return deco


def get_trainer_cls(mode: str):
    """verl: `get_trainer_cls` (`verl/trainer/ppo/v1/trainer_base.py:1906`)."""
    if mode not in _TRAINERS:
        raise ValueError(f"trainer.v1.trainer_mode={mode!r}: minirl implements {sorted(_TRAINERS)} "
                         "(verl also has colocate_async and separate_async).")
    return _TRAINERS[mode]


def resolve_worker_group(config) -> str:
    """`trainer.worker_group`: "inprocess" or "ray" ("auto": ray for several ranks or a Ray address)."""
    choice = str(config.trainer.get("worker_group", "auto"))
    if choice not in ("auto", "inprocess", "ray"):
        raise ValueError(f"trainer.worker_group={choice!r}: use auto, inprocess or ray.")
    if choice != "auto":
        return choice
    ranks = int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)
    address = config.get("ray_kwargs", {}).get("ray_init", {}).get("address")
    return "ray" if ranks > 1 or address else "inprocess"


@contextmanager
def marked_timer(name: str, timing: dict):
    """verl: `marked_timer` in `verl/utils/debug`: accumulate wall time per stage into `timing_s/<name>`."""
    t0 = time.perf_counter()
    yield
    timing[name] = timing.get(name, 0.0) + time.perf_counter() - t0


class PPOTrainer:
    """The controller: owns the config, the data, the worker groups and the loop."""

    def __init__(self, config, tokenizer, train_dataset, val_dataset, collate_fn, reward_fn, val_reward_fn=None):
        self.config = config
        self.tokenizer = tokenizer
        self.train_dataset, self.val_dataset, self.collate_fn = train_dataset, val_dataset, collate_fn
        self.reward_fn = reward_fn
        self.val_reward_fn = val_reward_fn or reward_fn
        self.use_critic = use_critic(config)
        self.use_reference_policy = use_reference_policy(config)
        self.device = config.trainer.device
        self.global_steps = 0
        self.actor_version = 0  # optimizer updates applied to the actor (reported back by update_actor)
        self.critic_version = 0
        self.history: list[dict] = []
        self.tq = TransferQueue()  # the data plane: trajectories by sample key
        self.replay_buffer = ReplayBuffer(self.tq, trainer_mode=config.trainer.v1.trainer_mode)
        self.batch_meta: BatchMeta | None = None  # the control plane: keys + tags of the current batch
        self._ray_wg = None  # the colocated Ray group behind actor_rollout_wg / critic_wg, if any
        self._owns_ray = False
        self.kl_ctrl_in_reward = core_algos.get_kl_controller(config.algorithm.kl_ctrl) \
            if config.algorithm.use_kl_in_reward else None
        self.loader = PromptLoader(train_dataset, int(config.data.train_batch_size), collate_fn,
                                   shuffle=bool(config.data.shuffle), seed=int(config.data.seed or 42))
        total = len(self.loader) * int(config.trainer.total_epochs)
        if config.trainer.total_training_steps is not None:
            total = int(config.trainer.total_training_steps)
        self.total_training_steps = total
        self.steps_per_epoch = len(self.loader)
        for sec in (config.actor_rollout_ref.actor.optim, config.critic.optim):
            sec.total_training_steps = total
        level = config.trace.level
        self.tracer = NullTracer() if level == "off" else Tracer(
            config.trace.dir, level=level, config=OmegaConf.to_container(config, resolve=True),
            meta={"adv_estimator": config.algorithm.adv_estimator, "rollout": config.actor_rollout_ref.rollout.name})
        # every span also records the versions after the stage (update_actor: actor v -> v+1)
        self.tracer.version_source = lambda: self.versions

    # ------------------------------------------------------------------------------------ set-up
    def init_workers(self):
        """Build worker groups, the rollout replica, the agent loop and the weight-sync manager.

        verl: `PPOTrainer._setup` (`verl/trainer/ppo/v1/trainer_base.py:229`) with Ray resource pools.
        """
        cfg = self.config
        self.worker_group_backend = resolve_worker_group(cfg)
        if self.worker_group_backend == "ray":
            self._init_ray_worker_groups()
        else:
            self._init_inprocess_worker_groups()
        model_path = cfg.actor_rollout_ref.model.path
        self.actor_rollout_wg.init_model(model_path)
        if self.use_critic:
            self.critic_wg.init_model(cfg.critic.model.path)
        rollout_cls = get_rollout_class(cfg.actor_rollout_ref.rollout.name)
        self.rollout = rollout_cls(cfg.actor_rollout_ref.rollout, model_path, device=self.device)
        self.agent_loop_manager = AgentLoopManager(cfg, self.tokenizer, self.rollout)
        self.checkpoint_manager = CheckpointEngineManager(
            self.actor_rollout_wg, [self.rollout], backend=cfg.actor_rollout_ref.rollout.checkpoint_engine.backend)
        self._load_checkpoint()
        self.on_init_end()

    @property
    def _actor_role(self) -> str:
        return "actor_rollout_ref" if self.use_reference_policy else "actor_rollout"

    @property
    def dp_size(self) -> int:
        """Data-parallel ranks: `trainer.nnodes * trainer.n_gpus_per_node`."""
        return int(self.config.trainer.nnodes) * int(self.config.trainer.n_gpus_per_node)

    def _init_inprocess_worker_groups(self):
        """One rank, workers as objects in this process (no Ray)."""
        cfg = self.config
        if self.dp_size != 1:
            raise ValueError(
                f"trainer.worker_group=inprocess runs the workers in this one process, which can hold one "
                f"torch.distributed rank, but trainer.nnodes * trainer.n_gpus_per_node = {self.dp_size}. "
                "Fix: trainer.worker_group=ray (or auto), or trainer.n_gpus_per_node=1.")
        pool = ResourcePool(process_on_nodes=[1])
        self.actor_rollout_wg = InProcessWorkerGroup(
            pool, ClassWithInitArgs(ActorRolloutRefWorker, cfg.actor_rollout_ref, role=self._actor_role,
                                    device=self.device))
        if self.use_critic:
            self.critic_wg = InProcessWorkerGroup(pool, ClassWithInitArgs(CriticWorker, cfg.critic, device=self.device))

    def _init_ray_worker_groups(self):
        """One Ray actor per rank hosting every role (verl: `create_colocated_worker_cls` + `spawn` in `_setup`)."""
        from minirl.single_controller.ray import (
            RayClassWithInitArgs,
            RayResourcePool,
            RayWorkerGroup,
            create_colocated_worker_cls,
            init_ray,
        )

        cfg, t = self.config, self.config.trainer
        ray_init = cfg.ray_kwargs.ray_init
        # logical CPUs: one placement-group slot per rank plus head room (they may exceed physical cores)
        self._owns_ray = init_ray(address=ray_init.address, num_cpus=ray_init.num_cpus or max(8, self.dp_size + 2))
        pool = RayResourcePool(process_on_nodes=[int(t.n_gpus_per_node)] * int(t.nnodes), use_gpu=self.device == "cuda")
        class_dict = {self._actor_role: RayClassWithInitArgs(ActorRolloutRefWorker, cfg.actor_rollout_ref,
                                                             role=self._actor_role, device=self.device)}
        if self.use_critic:
            class_dict["critic"] = RayClassWithInitArgs(CriticWorker, cfg.critic, device=self.device)
        # CPU ranks: one torch thread each, or two ranks on two cores fight over them
        env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"} if self.device == "cpu" else {}
        env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_DISABLE_PROGRESS_BARS="1", TRANSFORMERS_VERBOSITY="error")
        self._ray_wg = RayWorkerGroup(pool, create_colocated_worker_cls(class_dict), worker_env=env)
        groups = self._ray_wg.spawn(class_dict.keys())
        self.actor_rollout_wg = groups[self._actor_role]
        self.critic_wg = groups.get("critic")

    @property
    def versions(self) -> dict:
        v = {"actor": self.actor_version, "rollout": self.rollout.policy_version}
        if self.use_reference_policy:
            v["ref"] = 0
        if self.use_critic:
            v["critic"] = self.critic_version
        return v

    def _span(self, stage, batch, **kw):
        self.tracer.versions = self.versions
        return self.tracer.span(stage, batch, step=self.global_steps, **kw)

    # ------------------------------------------------------------------------------------- loop
    def fit(self):
        """Validate, then train `total_training_steps` steps with a progress bar; save and validate on schedule."""
        cfg = self.config.trainer
        self.on_train_begin()
        if cfg.val_before_train and self.val_dataset is not None:
            val = self._validate()
            self._log(val, self.global_steps)
            if cfg.val_only:
                return val
        bar = tqdm(total=self.total_training_steps, initial=self.global_steps, desc="Training Progress",
                   disable=os.environ.get("MINIRL_NO_PROGRESS") == "1")
        self.global_steps += 1
        last_val = None
        try:
            while self.global_steps <= self.total_training_steps:
                is_last = self.global_steps >= self.total_training_steps
                metrics, self.timing_raw = {}, {}
                with marked_timer("step", self.timing_raw):
                    self.on_step_begin()
                    batch = self.step(metrics, self.timing_raw)
                    if cfg.save_freq > 0 and (is_last or self.global_steps % cfg.save_freq == 0):
                        with marked_timer("save_checkpoint", self.timing_raw):
                            self._save_checkpoint()
                    self.on_step_end()
                if self.val_dataset is not None and cfg.test_freq > 0 and (is_last or self.global_steps % cfg.test_freq == 0):
                    with marked_timer("testing", self.timing_raw):
                        last_val = self._validate()
                    metrics.update(last_val)
                self._compute_metrics(batch, metrics)
                self._log(metrics, self.global_steps)
                bar.set_postfix(score=f"{metrics.get('critic/score/mean', float('nan')):.3f}")
                bar.update(1)
                self.global_steps += 1
        finally:
            bar.close()
            self.on_train_end()
        return last_val

    def step(self, metrics: dict, timing_raw: dict) -> DataProto:
        """One training step (verl splits it into `parameter_sync_step` local updates; sync mode has one).

        The step's trajectories leave the TransferQueue when it ends (verl: `kv_clear` in `fit`).
        """
        try:
            return self._step_once(metrics, timing_raw)
        finally:
            if self.batch_meta is not None:
                self.tq.kv_clear(self.batch_meta.keys, partition_id=self.batch_meta.partition_id)

    def _step_once(self, metrics: dict, timing_raw: dict) -> DataProto:
        """sample -> reward -> old_log_prob -> [ref] -> [values] -> advantage -> [update_critic] -> update_actor."""
        with marked_timer("gen", timing_raw):
            self.on_sample_begin()
            batch = self._sample(metrics)
            self.on_sample_end()
        with marked_timer("reward", timing_raw):
            batch = self._compute_reward(batch, metrics)
        with marked_timer("old_log_prob", timing_raw):
            batch = self._compute_old_log_prob(batch, metrics)
        if self.use_reference_policy:
            with marked_timer("ref", timing_raw):
                batch = self._compute_ref_log_prob(batch, metrics)
        if self.use_critic:
            with marked_timer("values", timing_raw):
                batch = self._compute_values(batch, metrics)
        with marked_timer("adv", timing_raw):
            batch = self._compute_advantage(batch, metrics)
        if self.use_critic:
            with marked_timer("update_critic", timing_raw):
                batch = self._update_critic(batch, metrics)
        if self.config.trainer.critic_warmup <= self.global_steps:
            with marked_timer("update_actor", timing_raw):
                batch = self._update_actor(batch, metrics)
        return batch

    # ------------------------------------------------------------------------------------ stages
    def _sample(self, metrics: dict) -> DataProto:
        """Prompts -> agent loop -> TransferQueue -> ReplayBuffer.sample -> BatchMeta -> padded DataProto.

        One uid per prompt; `rollout.n` sessions per prompt (interleaved); verl registers the
        prompts (`_submit_batch_to_rollout`, `verl/trainer/ppo/v1/trainer_base.py:1391`), its
        agent-loop workers write the trajectories, and `_step_once` samples them (`:538`).
        """
        n = int(self.config.actor_rollout_ref.rollout.n)
        prompts = self.loader.next_batch()
        with self._span("sample", prompts, role="rollout") as info:
            uids = new_uids(len(prompts))
            prompts.non_tensor_batch["uid"] = uids
            submit_prompts(self.tq, uids, self.global_steps)
            set_prompt_status(self.tq, uids, "running")
            out = self.agent_loop_manager.generate_sequences(prompts.repeat(repeat_times=n, interleave=True))
            self._put_trajectories(out)
            set_prompt_status(self.tq, uids, "finished")
            self.batch_meta, buffer_metrics = self.replay_buffer.sample(self.global_steps, batch_size=len(prompts))
            self.batch_meta.extra_info.update(out.meta_info)  # run-level: rollout batch sizes, timing
            metrics.update(buffer_metrics)
            batch = self._get(self.batch_meta)
            info["_batch"] = batch
            info["prompts"] = len(prompts)
            info["sessions"] = len(batch)
            info["rollout_batches"] = batch.meta_info.get("rollout_batches")
            info["policy_versions"] = sorted({int(v) for v in self.batch_meta.tag_values("max_global_steps")})
            info["transfer_queue"] = {"partition_id": self.batch_meta.partition_id, "keys": len(self.batch_meta),
                                      "fields": self.tq.describe(self.batch_meta.keys)}
        self._check_versions(batch)
        return batch

    # Fields the agent loop produces padded; the TransferQueue stores them unpadded (prompts: left side).
    _NESTED_FIELDS: ClassVar[dict] = {"prompts": "left", "responses": "right", "response_mask": "right",
                                      "rollout_log_probs": "right"}
    # Fields rebuilt from prompts + responses when a stage asks for them (never stored).
    _DERIVED_FIELDS = ("input_ids", "attention_mask", "position_ids")

    def _put_trajectories(self, out: DataProto) -> None:
        """Agent-loop output (padded) -> one TransferQueue entry per trajectory (unpadded), with tags.

        verl's agent-loop workers write each finished trajectory themselves (`AgentLoopWorkerTQ`);
        minirl's trainer does it for them. Run-level `meta_info` rides in `BatchMeta.extra_info`.
        """
        P = int(self.config.actor_rollout_ref.rollout.prompt_length)
        attn = out.batch["attention_mask"]
        masks = {"left": attn[:, :P], "right": attn[:, P:]}
        fields = {name: padded_to_nested(out.batch[name], masks[side], side=side)
                  for name, side in self._NESTED_FIELDS.items() if name in out.batch.keys()}
        fields.update(out.non_tensor_batch)
        uids = out.non_tensor_batch["uid"]
        sessions_so_far: dict[str, int] = {}
        keys, tags = [], []
        for i, uid in enumerate(uids):
            session = sessions_so_far.get(uid, 0)  # the n rows of one uid are sessions 0..n-1
            sessions_so_far[uid] = session + 1
            keys.append(trajectory_key(uid, session))
            tags.append({"uid": uid, "session_id": session, "status": "finished", "global_steps": self.global_steps,
                         "min_global_steps": int(out.non_tensor_batch["min_global_steps"][i]),
                         "max_global_steps": int(out.non_tensor_batch["max_global_steps"][i]),
                         "is_padding": False, "seq_len": int(attn[i].sum())})
        self.tq.kv_batch_put(keys, fields=fields, tags=tags)

    def _get(self, batch_meta: BatchMeta, fields: list[str] | None = None) -> DataProto:
        """Materialise `fields` (default: every stored field) of the batch's samples as one padded DataProto.

        Unpadded -> padded explicitly (`_to_padded`); `input_ids`, `attention_mask` and
        `position_ids` are never stored but rebuilt from the prompt and response lengths
        (`_model_inputs`), exactly as the agent loop built them. verl: `tq.kv_batch_get(keys,
        select_fields=...)` followed by `to_padded_tensor` in each stage.
        """
        if fields is None:
            stored = self.tq.fields_of(batch_meta.keys[0], batch_meta.partition_id)
            fields = [f for f in self._NESTED_FIELDS if f in stored] + list(self._DERIVED_FIELDS) + \
                [f for f in stored if f not in self._NESTED_FIELDS]
        derived = [f for f in fields if f in self._DERIVED_FIELDS]
        select = [f for f in fields if f not in self._DERIVED_FIELDS]
        select += [f for f in ("prompts", "responses") if derived and f not in select]
        data = self.tq.kv_batch_get(batch_meta.keys, batch_meta.partition_id, select_fields=select)
        tensors = {name: self._to_padded(name, v) for name, v in data.items() if isinstance(v, torch.Tensor)}
        non_tensors = {name: v for name, v in data.items() if not isinstance(v, torch.Tensor)}
        if derived:
            tensors.update(self._model_inputs(data["prompts"], data["responses"], tensors))
        tensors = {f: tensors[f] for f in fields if f in tensors}  # what was asked for, in that order
        return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=dict(batch_meta.extra_info))

    def _to_padded(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """Prompts LEFT-padded to `rollout.prompt_length` with the pad token; response-aligned fields
        RIGHT-padded to `rollout.response_length` (token ids with the pad token, the rest with 0)."""
        if name not in self._NESTED_FIELDS:
            return value  # one number per sample
        r = self.config.actor_rollout_ref.rollout
        side = self._NESTED_FIELDS[name]
        width = int(r.prompt_length) if side == "left" else int(r.response_length)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        return nested_to_padded(value, width, side=side, pad_value=pad if name in ("prompts", "responses") else 0)

    @staticmethod
    def _model_inputs(prompts: torch.Tensor, responses: torch.Tensor, padded: dict) -> dict:
        """`input_ids` = [prompt | response], `attention_mask` from the two lengths, `position_ids` from the mask."""
        P, R = padded["prompts"].shape[1], padded["responses"].shape[1]
        prompt_len, response_len = prompts.offsets().diff(), responses.offsets().diff()
        attn = torch.cat([torch.arange(P) >= P - prompt_len[:, None], torch.arange(R) < response_len[:, None]], dim=1)
        attn = attn.long()
        return {"input_ids": torch.cat([padded["prompts"], padded["responses"]], dim=1), "attention_mask": attn,
                "position_ids": (attn.cumsum(dim=1) - 1).clamp(min=0) * attn}

    def _check_versions(self, batch: DataProto):
        """Sync mode: every trajectory must come from the actor's current weights."""
        actor_v = self.actor_version
        seen = {int(v) for v in batch.non_tensor_batch["max_global_steps"]}
        if seen != {actor_v}:
            raise RuntimeError(f"sync mode: trajectories were sampled by policy versions {sorted(seen)} but the actor "
                               f"is at version {actor_v}; the rollout missed a weight sync (on_step_end).")

    def _compute_reward(self, batch: DataProto, metrics: dict) -> DataProto:
        with self._span("reward", batch, role="reward", reads=["responses", "attention_mask", "data_source", "reward_model"]):
            rm = self.reward_fn(batch)
            batch.union(rm)
            for k in rm.meta_info.get("reward_extra_keys", []):
                try:
                    metrics[f"reward/{k}/mean"] = float(np.mean(np.asarray(rm.non_tensor_batch[k], dtype=float)))
                except (TypeError, ValueError):
                    pass
        return batch

    def _worker_input(self, batch: DataProto, keys: list[str], **meta) -> DataProto:
        """What a worker needs and nothing more (verl fetches only `select_fields` from the TransferQueue)."""
        data = batch.select(batch_keys=keys)
        data.meta_info = dict(meta)
        return data

    def _compute_old_log_prob(self, batch: DataProto, metrics: dict) -> DataProto:
        """`old_log_probs`: the proximal anchor of the PPO ratio, from the actor's current weights.

        With `algorithm.rollout_correction.bypass_mode=True` the rollout's own log-probs are used instead
        and the actor forward is skipped, as verl's bypass mode does (`PPOTrainer._compute_old_log_prob`,
        `verl/trainer/ppo/v1/trainer_base.py:1529`).
        """
        if self.config.algorithm.rollout_correction.bypass_mode:
            with self._span("old_log_prob", batch, role="trainer", reads=["rollout_log_probs"]) as info:
                batch.batch["old_log_probs"] = batch.batch["rollout_log_probs"].clone()
                info["bypass_mode"] = True
                info["actor_version"] = self.actor_version
            return batch
        keys = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]
        with self._span("old_log_prob", batch, role="actor", reads=keys) as info:
            temp = float(self.config.actor_rollout_ref.rollout.temperature)
            out = self.actor_rollout_wg.compute_log_prob(self._worker_input(batch, keys, temperature=temp))
            batch.batch["old_log_probs"] = out.batch["log_probs"]
            batch.batch["entropy"] = out.batch["entropy"]
            info["actor_version"] = out.meta_info.get("actor_version")
            mask = batch.batch["response_mask"].bool()
            metrics["actor/entropy"] = float(batch.batch["entropy"][mask].mean()) if mask.any() else 0.0
            metrics.update(rollout_mismatch_metrics(batch))
        return batch

    def _compute_ref_log_prob(self, batch: DataProto, metrics: dict) -> DataProto:
        keys = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]
        with self._span("ref_log_prob", batch, role="ref", reads=keys):
            temp = float(self.config.actor_rollout_ref.rollout.temperature)
            out = self.actor_rollout_wg.compute_ref_log_prob(self._worker_input(batch, keys, temperature=temp))
            batch.batch["ref_log_prob"] = out.batch["ref_log_prob"]
        return batch

    def _compute_values(self, batch: DataProto, metrics: dict) -> DataProto:
        keys = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]
        with self._span("values", batch, role="critic", reads=keys):
            out = self.critic_wg.compute_values(self._worker_input(batch, keys))
            batch.batch["values"] = out.batch["values"]
        return batch

    def _compute_advantage(self, batch: DataProto, metrics: dict) -> DataProto:
        algo = self.config.algorithm
        reads = ["rm_scores", "response_mask", "uid"] + (["values"] if self.use_critic else [])
        with self._span("advantage", batch, role="trainer", reads=reads):
            batch.batch["token_level_scores"] = batch.batch["rm_scores"]
            if algo.use_kl_in_reward:
                batch, kl_metrics = apply_kl_penalty(batch, self.kl_ctrl_in_reward, algo.kl_penalty)
                metrics.update(kl_metrics)
            else:
                batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
            batch = compute_advantage(batch, algo.adv_estimator, gamma=float(algo.gamma), lam=float(algo.lam),
                                      norm_adv_by_std_in_grpo=bool(algo.norm_adv_by_std_in_grpo), config=algo)
        return batch

    def _update_meta(self, section) -> dict:
        n = int(self.config.actor_rollout_ref.rollout.n)
        return {"mini_batch_size": int(section.ppo_mini_batch_size) * n,
                "micro_batch_size": int(section.ppo_micro_batch_size_per_gpu), "epochs": int(section.ppo_epochs),
                "seed": int(section.data_loader_seed), "shuffle": bool(section.shuffle),
                "temperature": float(self.config.actor_rollout_ref.rollout.temperature)}

    def _check_divisible(self, batch: DataProto, stage: str):
        """A training batch must split evenly over the ranks: the group's auto-padding would repeat rows
        into the loss (harmless for forward-only stages, whose padded outputs are dropped). The config
        validator already demands `train_batch_size * n` and the global mini-batch divisible by dp."""
        if len(batch) % self.dp_size:
            raise RuntimeError(f"{stage}: {len(batch)} sequences do not split over {self.dp_size} data-parallel "
                               "ranks; padding would repeat samples in the loss. Fix: make data.train_batch_size * "
                               "rollout.n a multiple of trainer.nnodes * trainer.n_gpus_per_node.")

    def _update_critic(self, batch: DataProto, metrics: dict) -> DataProto:
        keys = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask", "values", "returns"]
        with self._span("update_critic", batch, role="critic", reads=keys) as info:
            self._check_divisible(batch, "update_critic")
            out = self.critic_wg.update_critic(self._worker_input(batch, keys, **self._update_meta(self.config.critic)))
            self.critic_version = int(out.meta_info["critic_version"])
            m = _gather_metrics(out)
            info.update(_batch_numbers(m))
            metrics.update({k if k.startswith("critic/") else f"critic/{k}": v for k, v in reduce_metrics(m).items()})
        return batch

    def _update_actor(self, batch: DataProto, metrics: dict) -> DataProto:
        actor = self.config.actor_rollout_ref.actor
        keys = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask", "old_log_probs", "advantages"]
        if actor.use_kl_loss:
            keys.append("ref_log_prob")
        with self._span("update_actor", batch, role="actor", reads=keys) as info:
            meta = self._update_meta(actor)
            meta["calculate_entropy"] = bool(actor.calculate_entropy or float(actor.entropy_coeff) != 0)
            self._check_divisible(batch, "update_actor")
            out = self.actor_rollout_wg.update_actor(self._worker_input(batch, keys, **meta))
            self.actor_version = int(out.meta_info["actor_version"])
            m = _gather_metrics(out)
            info.update(_batch_numbers(m))
            metrics.update({k if k.startswith("actor/") else f"actor/{k}": v for k, v in reduce_metrics(m).items()})
        return batch

    # ------------------------------------------------------------------------------------- hooks
    def on_init_end(self):
        """Called once the workers exist (verl: `PPOTrainer.on_init_end`)."""

    def on_train_begin(self):
        pass

    def on_train_end(self):
        pass

    def on_step_begin(self):
        pass

    def on_step_end(self):
        pass

    def on_sample_begin(self):
        pass

    def on_sample_end(self):
        pass

    # -------------------------------------------------------------------------------- validation
    def _validate(self) -> dict:
        """Greedy (`rollout.val_kwargs`) responses to every validation prompt; mean reward per data_source.

        verl: `PPOTrainer._validate` (`verl/trainer/ppo/v1/trainer_base.py:961`); metric names
        `val-core/<data_source>/<key>/mean@<n>`.
        """
        ds = self.val_dataset
        data = to_dataproto(self.collate_fn([ds[i] for i in range(len(ds))]))
        data.non_tensor_batch["uid"] = new_uids(len(data))
        n = int(self.config.actor_rollout_ref.rollout.val_kwargs.n)
        data = data.repeat(repeat_times=n, interleave=True)
        data.meta_info["validate"] = True
        with self._span("validate", data, role="rollout") as info:
            out = self.agent_loop_manager.generate_sequences(data)
            rm = self.val_reward_fn(out)
            info["_batch"] = out
        scores = rm.batch["rm_scores"].sum(-1).numpy()
        sources = np.asarray(out.non_tensor_batch.get(self.config.data.reward_fn_key, ["unknown"] * len(out)))
        metrics = {}
        for src in sorted(set(sources.tolist())):
            sel = sources == src
            metrics[f"val-core/{src}/reward/mean@{n}"] = float(scores[sel].mean())
            if "acc" in rm.non_tensor_batch:
                metrics[f"val-core/{src}/acc/mean@{n}"] = float(np.asarray(rm.non_tensor_batch["acc"], dtype=float)[sel].mean())
        return metrics

    # ---------------------------------------------------------------------------- metrics, logs
    def _compute_metrics(self, batch: DataProto, metrics: dict):
        metrics.update(compute_data_metrics(batch, self.use_critic))
        for k, v in self.timing_raw.items():
            metrics[f"timing_s/{k}"] = v
        metrics["training/global_step"] = self.global_steps
        metrics["training/epoch"] = self.loader.epoch
        for k, v in self.versions.items():
            metrics[f"version/{k}"] = v

    def _log(self, metrics: dict, step: int):
        row = {"step": step, **{k: v for k, v in metrics.items() if isinstance(v, (int, float))}}
        self.history.append(row)
        loggers = list(self.config.trainer.logger)
        if "file" in loggers:
            out = Path(self.config.trainer.default_local_dir)
            out.mkdir(parents=True, exist_ok=True)
            with open(out / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
        if "console" in loggers:
            keys = [k for k in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "response_length/mean",
                                "timing_s/step") if k in row]
            keys += [k for k in row if k.startswith("val-core/") and k.endswith("/acc/mean@1")]
            tqdm.write(f"step {step}: " + " ".join(f"{k}={row[k]:.4g}" for k in keys))
        self.tracer.event("metrics", step=step, metrics=row)

    # ------------------------------------------------------------------------------ checkpoints
    def _ckpt_root(self) -> Path:
        return Path(self.config.trainer.default_local_dir)

    def _save_checkpoint(self):
        """`global_step_<k>/{actor,critic,trainer_state.pt}` + `latest_checkpointed_iteration.txt` (verl's layout)."""
        root = self._ckpt_root()
        d = root / f"global_step_{self.global_steps}"
        tmp = root / f".tmp_global_step_{self.global_steps}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.actor_rollout_wg.save_checkpoint(str(tmp / "actor"), self.global_steps)
        if self.use_critic:
            self.critic_wg.save_checkpoint(str(tmp / "critic"), self.global_steps)
        state = {"global_steps": self.global_steps, "loader": self.loader.state_dict(),
                 "actor_version": self.actor_version,
                 "critic_version": self.critic_version if self.use_critic else None,
                 "kl_coef": getattr(self.kl_ctrl_in_reward, "value", None),
                 "rollout_rng": _rollout_rng_state(self.rollout), "torch_rng": torch.get_rng_state(),
                 "numpy_rng": np.random.get_state()}
        torch.save(state, tmp / "trainer_state.pt")
        shutil.rmtree(d, ignore_errors=True)
        os.replace(tmp, d)  # a killed save never leaves a half checkpoint behind
        (root / "latest_checkpointed_iteration.txt").write_text(str(self.global_steps))
        keep = self.config.trainer.max_actor_ckpt_to_keep
        if keep:
            olds = sorted(root.glob("global_step_*"), key=lambda p: int(p.name.split("_")[-1]))[:-int(keep)]
            for p in olds:
                shutil.rmtree(p, ignore_errors=True)

    def _load_checkpoint(self):
        """`trainer.resume_mode`: auto (latest in default_local_dir, if any) | disable | resume_path."""
        cfg = self.config.trainer
        if cfg.resume_mode == "disable":
            return
        if cfg.resume_mode == "resume_path":
            if not cfg.resume_from_path:
                raise ValueError("trainer.resume_mode=resume_path needs trainer.resume_from_path=<global_step_k dir>.")
            d = Path(cfg.resume_from_path)
        else:
            latest = self._ckpt_root() / "latest_checkpointed_iteration.txt"
            if not latest.exists():
                return
            d = self._ckpt_root() / f"global_step_{int(latest.read_text().strip())}"
        if not (d / "trainer_state.pt").exists():
            raise FileNotFoundError(f"no checkpoint at {d} (trainer_state.pt missing).")
        state = torch.load(d / "trainer_state.pt", weights_only=False)
        self.actor_rollout_wg.load_checkpoint(str(d / "actor"), state["actor_version"])
        self.actor_version = int(state["actor_version"])
        if self.use_critic:
            self.critic_wg.load_checkpoint(str(d / "critic"), state["critic_version"])
            self.critic_version = int(state["critic_version"])
        self.global_steps = int(state["global_steps"])
        self.loader.load_state_dict(state["loader"])
        if self.kl_ctrl_in_reward is not None and state.get("kl_coef") is not None:
            self.kl_ctrl_in_reward.value = state["kl_coef"]
        _set_rollout_rng_state(self.rollout, state.get("rollout_rng"))
        torch.set_rng_state(state["torch_rng"])
        np.random.set_state(state["numpy_rng"])
        tqdm.write(f"resumed from {d} at global step {self.global_steps}")

    def close(self):
        """Close the trace; kill the Ray workers (and stop Ray if this trainer started it)."""
        self.tracer.close()
        if self._ray_wg is not None:
            self._ray_wg.kill_workers()
            self._ray_wg = None
        if self._owns_ray:
            from minirl.single_controller.ray import shutdown_ray

            shutdown_ray()
            self._owns_ray = False


@register_trainer("sync")
class PPOTrainerSync(PPOTrainer):
    """Sync mode: rollout and actor take turns; weights move after every actor update.

    verl: `PPOTrainerSync` (`verl/trainer/ppo/v1/trainer_sync.py:25`).
    """

    def on_init_end(self):
        """Give the rollout the actor's (possibly resumed) weights, version = global_steps."""
        with self._span("update_weights", None, role="rollout"):
            self.checkpoint_manager.update_weights(self.global_steps)

    def on_step_end(self):
        with marked_timer("update_weights", self.timing_raw):
            with self._span("update_weights", None, role="rollout") as info:
                info.update(self.checkpoint_manager.update_weights(self.global_steps))

    def on_sample_end(self):
        self.checkpoint_manager.sleep_replicas()


def _gather_metrics(out: DataProto) -> dict:
    """Metric lists from one rank, or from several (DataProto.concat makes `{key: [rank0 list, rank1 list]}`)."""
    m = out.meta_info.get("metrics", {})
    if isinstance(m, list):
        m = {k: [d[k] for d in m if k in d] for k in {k for d in m for k in d}}
    merged = {}
    for k, v in m.items():
        flat = []
        for x in v:
            flat.extend(x if isinstance(x, list) else [x])
        merged[k] = flat
    return merged


def _batch_numbers(m: dict) -> dict:
    # every rank steps its shard of the same global optimizer step: count one rank, not the sum
    return {"optimizer_steps": int(max(m.get("optimizer_steps", [0]))),
            "mini_batch_size_per_rank": sorted(set(m.get("mini_batch_size_per_rank", []))),
            "micro_batch_size_per_rank": sorted(set(m.get("micro_batch_size_per_rank", []))),
            "micro_batches_per_mini_batch": sorted(set(m.get("num_micro_batches", [])))}


def _rollout_rng_state(rollout):
    gen = getattr(rollout, "generator", None) or getattr(rollout, "_generator", None)
    return gen.get_state() if isinstance(gen, torch.Generator) else None


def _set_rollout_rng_state(rollout, state):
    gen = getattr(rollout, "generator", None) or getattr(rollout, "_generator", None)
    if state is not None and isinstance(gen, torch.Generator):
        gen.set_state(state)


__all__ = ["PPOTrainer", "PPOTrainerSync", "register_trainer", "get_trainer_cls", "derived_numbers"]
