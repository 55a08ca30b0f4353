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

minirl simplifications: the batch is one `DataProto` held by the controller (verl keeps trajectories in
a TransferQueue and passes `KVBatchMeta` keys; see DESIGN.md), no replay buffer in sync mode (verl
samples a fresh batch through `ReplayBuffer.sample`), and worker groups run in this process.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

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
        self.history: list[dict] = []
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

    # ------------------------------------------------------------------------------------ set-up
    def init_workers(self):
        """Build worker groups, the rollout replica, the agent loop and the weight-sync manager.

        verl: `PPOTrainer._setup` (`verl/trainer/ppo/v1/trainer_base.py:229`) with Ray resource pools.
        """
        cfg = self.config
        dp = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
        if dp != 1:
            raise NotImplementedError(
                f"trainer.n_gpus_per_node * trainer.nnodes = {dp}: several ranks need the Ray worker group, "
                "which this build of minirl's trainer does not use yet. Fix: trainer.n_gpus_per_node=1.")
        pool = ResourcePool(process_on_nodes=[1])
        role = "actor_rollout_ref" if self.use_reference_policy else "actor_rollout"
        model_path = cfg.actor_rollout_ref.model.path
        self.actor_rollout_wg = InProcessWorkerGroup(
            pool, ClassWithInitArgs(ActorRolloutRefWorker, cfg.actor_rollout_ref, role=role, device=self.device))
        self.actor_rollout_wg.init_model(model_path)
        if self.use_critic:
            self.critic_wg = InProcessWorkerGroup(pool, ClassWithInitArgs(CriticWorker, cfg.critic, device=self.device))
            self.critic_wg.init_model(cfg.critic.model.path)
        rollout_cls = get_rollout_class(cfg.actor_rollout_ref.rollout.name)
        self.rollout = rollout_cls(cfg.actor_rollout_ref.rollout, model_path, device=self.device)
        self.agent_loop_manager = AgentLoopManager(cfg, self.tokenizer, self.rollout)
        self.checkpoint_manager = CheckpointEngineManager(
            self.actor_rollout_wg, [self.rollout], backend=cfg.actor_rollout_ref.rollout.checkpoint_engine.backend)
        self._load_checkpoint()
        self.on_init_end()

    @property
    def versions(self) -> dict:
        v = {"actor": self.actor_rollout_wg.workers[0].policy_version, "rollout": self.rollout.policy_version}
        if self.use_reference_policy:
            v["ref"] = 0
        if self.use_critic:
            v["critic"] = self.critic_wg.workers[0].version
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
        """One training step (verl splits it into `parameter_sync_step` local updates; sync mode has one)."""
        return self._step_once(metrics, timing_raw)

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
        """Next prompts -> one uid per prompt -> repeat n (interleaved) -> agent loop sessions."""
        n = int(self.config.actor_rollout_ref.rollout.n)
        prompts = self.loader.next_batch()
        with self._span("sample", prompts, role="rollout") as info:
            prompts.non_tensor_batch["uid"] = new_uids(len(prompts))
            gen_batch = prompts.repeat(repeat_times=n, interleave=True)
            batch = self.agent_loop_manager.generate_sequences(gen_batch)
            info["_batch"] = batch
            info["prompts"] = len(prompts)
            info["sessions"] = len(batch)
            info["rollout_batches"] = batch.meta_info.get("rollout_batches")
            info["policy_versions"] = sorted(set(int(v) for v in batch.non_tensor_batch["max_global_steps"]))
        self._check_versions(batch)
        return batch

    def _check_versions(self, batch: DataProto):
        """Sync mode: every trajectory must come from the actor's current weights."""
        actor_v = self.actor_rollout_wg.workers[0].policy_version
        seen = set(int(v) for v in batch.non_tensor_batch["max_global_steps"])
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

    def _update_critic(self, batch: DataProto, metrics: dict) -> DataProto:
        keys = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask", "values", "returns"]
        with self._span("update_critic", batch, role="critic", reads=keys) as info:
            out = self.critic_wg.update_critic(self._worker_input(batch, keys, **self._update_meta(self.config.critic)))
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
            out = self.actor_rollout_wg.update_actor(self._worker_input(batch, keys, **meta))
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
                 "actor_version": self.actor_rollout_wg.workers[0].policy_version,
                 "critic_version": self.critic_wg.workers[0].version if self.use_critic else None,
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
        if self.use_critic:
            self.critic_wg.load_checkpoint(str(d / "critic"), state["critic_version"])
        self.global_steps = int(state["global_steps"])
        self.loader.load_state_dict(state["loader"])
        if self.kl_ctrl_in_reward is not None and state.get("kl_coef") is not None:
            self.kl_ctrl_in_reward.value = state["kl_coef"]
        _set_rollout_rng_state(self.rollout, state.get("rollout_rng"))
        torch.set_rng_state(state["torch_rng"])
        np.random.set_state(state["numpy_rng"])
        tqdm.write(f"resumed from {d} at global step {self.global_steps}")

    def close(self):
        self.tracer.close()


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
    return {"optimizer_steps": int(sum(m.get("optimizer_steps", [0]))),
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
