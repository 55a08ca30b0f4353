"""`PPOTrainer`: the single controller's training loop, stage by stage.

verl: `PPOTrainer` (`verl/trainer/ppo/v1/trainer_base.py:118`) with `fit` (`:387`), `step` (`:509`) and
`_step_once` (`:538`), specialised by `PPOTrainerSync` (`verl/trainer/ppo/v1/trainer_sync.py:25`,
here `minirl.trainer.ppo.trainer_sync`). One training step, each stage a method below and a span in
the trace:

| stage | method | adds | verl |
|---|---|---|---|
| rollout | `prepare_step` -> `_submit_batch_to_rollout` | the trajectories, in the TransferQueue | `_submit_batch_to_rollout` (`:1391`) + `AgentLoopWorkerTQ` |
| sample | `_sample` | the padded batch: prompts, responses, response_mask, rollout_log_probs, input_ids, attention_mask, position_ids, uid ... | `ReplayBuffer.sample` in `_step_once` |
| reward | `_compute_reward` (a colocated reward model only) | rm_scores (+ acc ...) | `_compute_reward_colocate` (`:1424`) |
| balance_batch | `_balance_batch` | (the order of the rows) | `_balance_batch` (`:1503`) |
| old_log_prob | `_compute_old_log_prob` | old_log_probs, entropy | `_compute_old_log_prob` (`:1529`) |
| ref_log_prob | `_compute_ref_log_prob` | ref_log_prob (only with a KL option) | `_compute_ref_log_prob` (`:1590`) |
| values | `_compute_values` | values (only with a critic) | `_compute_values` (`:1616`) |
| advantage | `_compute_advantage` | token_level_scores, token_level_rewards, advantages, returns | `_compute_advantage` (`:1638`) |
| update_critic | `_update_critic` | (critic weights) | `_update_critic` (`:1699`) |
| update_actor | `_update_actor` | (actor weights, version + 1) | `_update_actor` (`:1722`) |
| update_weights | `on_step_end` (trainer_sync) | (rollout weights, version + 1) | `PPOTrainerSync.on_step_end` |

Where the data lives (the data plane). The trainer registers each prompt in the TransferQueue
(`minirl.transfer_queue`) under its `uid`; the agent loop (`AgentLoopWorkerTQ`) runs `rollout.n`
sessions per prompt and writes every finished trajectory there itself, unpadded, under
`{uid}_{session_id}_{index}`; `ReplayBuffer.sample` picks whole groups by their tags and returns a
`KVBatchMeta` (keys + tags), and `_get` materialises the padded `DataProto` the stages work on
(`kv_batch_get_padded`, which also builds `input_ids`/`attention_mask`/`position_ids`). From there on
minirl's stages pass that `DataProto` along, each worker call sending only the fields it reads
(`_worker_input`); verl instead has every stage `kv_batch_get` its fields and `kv_batch_put` its
outputs, so that its controller never holds the whole batch and workers on other machines fetch
straight from the store. minirl keeps the DataProto flow after sampling on purpose: its store lives
in the controller process anyway (Ray workers could not reach it), and a `DataProto` is what the
tracer records field by field and what a reader can print at any point between two stages. The
step's keys leave the TransferQueue when it ends (verl: `kv_clear` in `fit`, `:387`).

Where the workers live: `minirl.trainer.ppo.worker_groups` (Ray actors or objects in this process).
The rollout (hf or vLLM) lives in this controller process, or in rollout server processes with
`rollout.nnodes=1` (`minirl.workers.rollout.llm_server`); it gets the actor's weights after every update.
The agent-loop workers are processes of their own (`rollout.agent.placement`: forked processes or Ray
actors, `minirl.agent_loop.worker_process`) that call the rollout and write the TransferQueue themselves;
the controller only splits the prompts among them.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import torch
from omegaconf import OmegaConf
from tqdm.auto import tqdm

from minirl.agent_loop import AgentLoopManagerTQ, multi_turn_metrics, new_uids
from minirl.agent_loop.worker_process import cpu_seconds, prewarm_fork_server, resolve_agent_placement
from minirl.checkpoint_engine import CheckpointEngineManager
from minirl.config.derived import data_parallel_size
from minirl.protocol import DataProto
from minirl.trace import NullTracer, Tracer
from minirl.trainer.ppo import checkpointing, core_algos, finite_checks
from minirl.trainer.ppo.advantage import apply_kl_penalty, compute_advantage
from minirl.trainer.ppo.dataloader import PromptLoader, PromptStream, to_dataproto
from minirl.trainer.ppo.metric_utils import (
    calculate_debug_metrics,
    compute_step_metrics,
    compute_validation_metrics,
    gather_worker_metrics,
    reduce_metrics,
    rollout_mismatch_metrics,
    sample_trace_info,
    update_batch_numbers,
)
from minirl.trainer.ppo.replay_buffer import ReplayBuffer, submit_prompts
from minirl.trainer.ppo.rollout_corr_helper import apply_rollout_correction
from minirl.trainer.ppo.utils import (
    MetricsAggregator,
    need_critic,
    need_reference_policy,
    need_teacher_policy,
)
from minirl.trainer.ppo.worker_groups import build_worker_groups
from minirl.transfer_queue import KVBatchMeta, TransferQueue, TransferQueueView, kv_batch_get_padded, uid_of
from minirl.utils import hooks
from minirl.utils.debug import marked_timer
from minirl.utils.seqlen_balancing import (
    calculate_workload,
    get_seqlen_balanced_partitions,
    log_seqlen_unbalance,
)
from minirl.utils.tracking import Tracking
from minirl.workers.reward import RewardLoopManager, collect_reward_info
from minirl.workers.rollout.llm_server import build_rollout

_TRAINERS: dict[str, type] = {}


def _filter_groups_metric(config) -> str | None:
    """DAPO's group-filtering metric, or None when `algorithm.filter_groups` is off (verl: `_resolve_filter_groups_metric`,
    `verl/trainer/ppo/v1/trainer_base.py:190`; the config check has made sure the metric is set)."""
    fg = config.algorithm.get("filter_groups")
    return str(fg.metric) if fg is not None and fg.get("enable", False) else None


ROLLOUT_READS = ("raw_prompt", "raw_prompt_ids", "tools_kwargs", "interaction_kwargs", "data_source", "reward_model",
                 "extra_info")
"""The prompt fields the `rollout` stage reads: the agent loop's input and the per-session reward's."""


def register_trainer(mode: str):
    """verl: `register_trainer` (`verl/trainer/ppo/v1/trainer_base.py:1888`), keyed by `trainer.v1.trainer_mode`."""

    def deco(cls):
        _TRAINERS[mode] = cls
        return cls

    return deco


def get_trainer_cls(mode: str):
    """verl: `get_trainer_cls` (`verl/trainer/ppo/v1/trainer_base.py:1906`)."""
    if mode not in _TRAINERS:
        raise ValueError(f"trainer.v1.trainer_mode={mode!r} is not a registered trainer. Fix: one of {sorted(_TRAINERS)}.")
    return _TRAINERS[mode]


class PPOTrainer:
    """The controller: owns the config, the data, the worker groups and the loop."""

    def __init__(self, config, tokenizer, train_dataset, val_dataset, collate_fn):
        self.config = config
        self.tokenizer = tokenizer
        self.train_dataset, self.val_dataset, self.collate_fn = train_dataset, val_dataset, collate_fn
        self.reward_loop_manager = None  # minirl.workers.reward.RewardLoopManager, set by init_workers
        self.use_critic = need_critic(config)
        self.use_reference_policy = need_reference_policy(config)
        self.use_teacher_policy = need_teacher_policy(config)  # on-policy distillation (distillation.enabled)
        self.teacher_model_manager = None  # minirl.teacher_loop.MultiTeacherModelManager, set by init_workers
        self.device = config.trainer.device
        self.global_steps = 0
        self.actor_version = 0  # update_actor calls applied to the actor (the worker's count, `actor_updates`)
        self.critic_version = 0
        # the weights' versions in global steps, as verl stamps them (`update_weights(global_steps)`): the step of
        # the last update the actor's / critic's weights include (`versions`, the `version/*` metrics)
        self.actor_step = 0
        self.critic_step = 0
        self.history: list[dict] = []
        self._step_callbacks: list = []  # add_step_callback: fn(step, batch, metrics) after every step
        self.tq = TransferQueue()  # the data plane: trajectories by sample key
        mode = config.trainer.v1.trainer_mode  # verl: parameter_sync_step of trainer.v1.<mode>, 1 if it has none
        self.parameter_sync_step = int(OmegaConf.select(config, f"trainer.v1.{mode}.parameter_sync_step", default=1))
        self.local_trigger_step = 0  # which local update of the step is running (decoupled PPO's fixed pi_old)
        self.replay_buffer = self._build_replay_buffer()
        self.batch_meta: KVBatchMeta | None = None  # the control plane: keys + tags of the current batch
        self.workers = None  # minirl.trainer.ppo.worker_groups.WorkerGroups, set by init_workers
        self.kl_ctrl_in_reward = core_algos.get_kl_controller(config.algorithm.kl_ctrl) \
            if config.algorithm.use_kl_in_reward else None
        # DAPO's refills fetch exactly k prompts (verl: data.gen_batch_size=1 when algorithm.filter_groups is on)
        loader_cls = PromptStream if _filter_groups_metric(config) else PromptLoader
        self.loader = loader_cls(train_dataset, int(config.data.train_batch_size), collate_fn,
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
        # verl: `Tracking` in `fit`; rows go to `history`, metrics.jsonl, the console and the trace
        self.logger = Tracking(config.trainer.logger, config.trainer.default_local_dir, self.tracer, self.history)
        self.finite = finite_checks.FiniteChecks(self)  # NaN/inf after each stage: trainer.nonfinite

    # ------------------------------------------------------------------------------------ set-up
    def init_workers(self):
        """Build worker groups, the rollout replica, the agent loop and the weight-sync manager.

        verl: `PPOTrainer._setup` (`verl/trainer/ppo/v1/trainer_base.py:229`) with Ray resource pools.
        """
        cfg = self.config
        self.agent_loop_placement = resolve_agent_placement(cfg)
        if self.agent_loop_placement == "process":
            prewarm_fork_server()  # the workers' fork server imports while the actor is built
        self.reward_loop_manager = RewardLoopManager(cfg, self.tokenizer)  # first: a bad reward file fails at once
        self.reward_loop_manager.failures.quiet = True  # failed rewards are summed up after each step (check_failures)
        if self.use_teacher_policy:  # the teacher servers start now and come up while the actor is built
            from minirl.teacher_loop import MultiTeacherModelManager

            self.teacher_model_manager = MultiTeacherModelManager(cfg, wait=False)
        self.workers = build_worker_groups(cfg, self._actor_role, self.use_critic, tracer=self.tracer)
        self.worker_group_backend = self.workers.backend
        self.actor_rollout_wg, self.critic_wg = self.workers.actor_rollout_wg, self.workers.critic_wg
        model_path = cfg.actor_rollout_ref.model.path
        self.rollout = self._build_rollout(model_path)  # in the controller, or servers starting now
        self.actor_rollout_wg.init_model(model_path)
        if self.use_critic:
            self.critic_wg.init_model(cfg.critic.model.path)
        handles = self.reward_loop_manager.reward_loop_worker_handles  # given: each session is scored as it ends
        # the agent-loop workers: processes of their own that talk to the rollout and write self.tq (or, with
        # rollout.agent.placement=inprocess, objects here); the controller only schedules them
        self.agent_loop_manager = AgentLoopManagerTQ(cfg, self.tokenizer, self.rollout, tq=self.tq,
                                                     reward_loop_worker_handles=handles,
                                                     teacher_client=self.get_teacher_client(),
                                                     placement=self.agent_loop_placement)
        self.checkpoint_manager = CheckpointEngineManager.for_rollout(cfg, self.actor_rollout_wg, self.rollout)
        self._load_checkpoint()
        self.on_init_end()

    def get_teacher_client(self) -> dict | None:
        """`{key: LLMServerClient}` of the distillation teachers, or None (verl: `get_teacher_client`, `:375`)."""
        return self.teacher_model_manager.get_client() if self.use_teacher_policy else None

    def _build_replay_buffer(self) -> ReplayBuffer:
        """The sync buffer (verl: `_build_replay_buffer`, `:142`; the async trainers return `ReplayBufferAsync`),
        with DAPO's group filtering when `algorithm.filter_groups.enable` (refilling through
        `_add_prompts_to_generate`)."""
        metric = _filter_groups_metric(self.config)
        if metric is None:
            return ReplayBuffer(self.tq, trainer_mode=self.config.trainer.v1.trainer_mode)
        fg = self.config.algorithm.filter_groups
        tbs = int(self.config.data.train_batch_size)
        most = int(fg.max_num_gen_batches) * tbs if int(fg.max_num_gen_batches) > 0 else len(self.train_dataset)
        return ReplayBuffer(self.tq, trainer_mode=self.config.trainer.v1.trainer_mode,
                            refill_fn=self._add_prompts_to_generate, filter_groups_metric=metric, train_batch_size=tbs,
                            max_inflight_gen_batches=int(fg.max_inflight_gen_batches), max_refill_prompts=most)

    def _build_rollout(self, model_path: str):
        """The in-controller engine (`rollout.nnodes=0`) or the rollout servers (`minirl.workers.rollout.llm_server`)."""
        return build_rollout(self.config, model_path, self.device)

    @property
    def _actor_role(self) -> str:
        return "actor_rollout_ref" if self.use_reference_policy else "actor_rollout"

    @property
    def dp_size(self) -> int:
        """Data-parallel ranks: `trainer.nnodes * trainer.n_gpus_per_node` / tensor-parallel size (`data_parallel_size`)."""
        return data_parallel_size(self.config)

    @property
    def versions(self) -> dict:
        """Weight versions now, in global steps in every mode (the `version/*` metrics, minirl's own names).

        - `actor`: the step of the last update the actor's weights include (k once step k has updated it; in
          separate_async from its first local update on);
        - `rollout`: what the rollout replicas hold (the oldest, if they differ): k after step k's weight sync;
        - `old`: the weights behind this batch's `old_log_probs`: k - 1 at step k (separate_async: every local
          update of the step uses the step's first weights); in bypass mode the rollout's own, the newest
          version among the batch's trajectories; None until the stage has run;
        - `ref`: 0 (the reference policy never moves); `critic`: as `actor`, for the critic.

        A trajectory's own versions are its `min_global_steps` / `max_global_steps` (the staleness metrics).
        """
        v = {"actor": self.actor_step, "rollout": self.rollout.policy_version,
             "old": getattr(self, "old_policy_version", None)}
        if self.use_reference_policy:
            v["ref"] = 0
        if self.use_critic:
            v["critic"] = self.critic_step
        return v

    def _span(self, stage, batch, **kw):
        self.tracer.versions = self.versions
        return self.tracer.span(stage, batch, step=self.global_steps, **kw)

    @property
    def _layout(self) -> dict:
        """The padded layout of every batch the stages see (the rollout's prompt and response lengths)."""
        r = self.config.actor_rollout_ref.rollout
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        return {"prompt_length": int(r.prompt_length), "response_length": int(r.response_length), "pad_token_id": pad}

    # ------------------------------------------------------------------------------------- loop
    def fit(self):
        """Validate, then train `total_training_steps` steps with a progress bar; save and validate on schedule."""
        cfg = self.config.trainer
        if cfg.val_before_train and self.val_dataset is not None:
            val = self._validate()
            self.logger.log(val, self.global_steps)
            if cfg.val_only:
                return val
        bar = tqdm(total=self.total_training_steps, initial=self.global_steps, desc="Training Progress",
                   disable=os.environ.get("MINIRL_NO_PROGRESS") == "1")
        self.global_steps += 1
        last_val = None
        self.process_cpu_metrics()  # the CPU counters start here: step 1's row counts from now
        self.on_train_begin()  # verl: after validation, at global_steps 1 (async trainers: warm-up batches)
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
                self.logger.log(metrics, self.global_steps)
                checkpointing.mark_latest(self)  # only now, with the step's row written, is it the latest
                for callback in self._step_callbacks:
                    callback(self.global_steps, batch, metrics)
                bar.set_postfix(score=f"{metrics.get('critic/score/mean', float('nan')):.3f}")
                bar.update(1)
                self.global_steps += 1
        finally:
            bar.close()
            self.on_train_end()
        return last_val

    def step(self, metrics: dict, timing_raw: dict) -> DataProto:
        """One training step: `prepare_step` (submit prompts), then `parameter_sync_step` local updates.

        Each local update (`_step_once`) samples `train_batch_size / parameter_sync_step` prompt groups and
        trains on them; their metrics fold into one row (`MetricsAggregator`). `parameter_sync_step` is 1
        except in separate_async. The step's keys leave the TransferQueue at the end. verl: `step` (`:509`).
        """
        sample_batch_size = int(self.config.data.train_batch_size) // self.parameter_sync_step
        metas, batches, aggregator = [], [], MetricsAggregator()
        try:
            with marked_timer("gen", timing_raw):  # sync: the rollout runs here; async: it only submits
                aggregator.add_step_metrics(self.prepare_step())
            for trigger_idx in range(self.parameter_sync_step):
                self.local_trigger_step = trigger_idx
                iter_metrics: dict = {}
                batches.append(self._step_once(iter_metrics, timing_raw, sample_batch_size))
                metas.append(self.batch_meta)
                aggregator.add_step_metrics(iter_metrics, sample_count=len(batches[-1]))
            metrics.update(aggregator.get_aggregated_metrics())
            return batches[0] if len(batches) == 1 else DataProto.concat(batches)
        finally:
            for meta in [*metas, self.batch_meta]:
                if meta is not None:
                    self.tq.kv_clear(meta.keys, partition_id=meta.partition_id)
            self.batch_meta = None

    def prepare_step(self) -> dict:
        """Put the next batch of prompts up for generation (verl: `PPOTrainer.prepare_step`)."""
        self._add_batch_to_generate()
        return getattr(self, "_rollout_metrics", {})  # multi-turn rollouts: multi_turn/* (agent_loop.multi_turn_stats)

    def _add_batch_to_generate(self) -> None:
        """verl: `PPOTrainer._add_batch_to_generate`: the next prompts, submitted to the rollout."""
        self._greedy_scores = {}  # remax: this step's greedy baselines (refills add theirs)
        self._submit_batch_to_rollout(self._next_train_batch())

    def _add_prompts_to_generate(self, num_prompts: int) -> int:
        """Generate exactly `num_prompts` more prompts' groups: DAPO's refill (verl: `_add_prompts_to_generate`, `:1409`)."""
        return self._submit_batch_to_rollout(self._next_train_batch(num_prompts))

    def _next_train_batch(self, num_prompts: int | None = None) -> DataProto:
        """`num_prompts` prompts (default `data.train_batch_size`), one fresh `uid` each, tagged with this step.

        verl: `_next_train_batch` / `_fetch_one_gen_batch` (uids are `uuid4` strings, one per prompt).
        """
        batch = self.loader.next_prompts(num_prompts) if num_prompts else self.loader.next_batch()
        batch.non_tensor_batch["uid"] = new_uids(len(batch))
        batch.meta_info["global_steps"] = self.global_steps
        return batch

    def _submit_batch_to_rollout(self, batch: DataProto) -> int:
        """Register the prompts (`status: pending`) in the TransferQueue and run their sessions.

        verl: `PPOTrainer._submit_batch_to_rollout` (`verl/trainer/ppo/v1/trainer_base.py:1391`), which
        returns at once while the agent-loop workers generate in the background; minirl's sync trainer waits
        here for its agent-loop workers to finish, so the `rollout` span holds the whole generation (the async
        trainers only submit: `minirl.trainer.ppo.trainer_async`).
        """
        uids = list(batch.non_tensor_batch["uid"])
        # what the agent loop (raw_prompt, tools_kwargs) and the reward loop it calls (data_source, reward_model,
        # extra_info) read from the prompt rows
        reads = [k for k in ROLLOUT_READS if k in batch.non_tensor_batch]
        with self._span("rollout", batch, role="rollout", reads=reads) as info:
            submit_prompts(self.tq, uids, self.global_steps)
            info.update(self.agent_loop_manager.generate_sequences(batch))
            self._rollout_metrics = multi_turn_metrics(info.get("multi_turn"))  # tool calls, turns, failures
            if self.config.algorithm.adv_estimator == "remax":  # its baseline: a greedy response per prompt
                self._greedy_scores = {**getattr(self, "_greedy_scores", {}), **self._compute_greedy_baselines(batch)}
            wanted = set(uids)
            keys = [k for k, tag in self.tq.kv_list("train")["train"].items()
                    if not tag.get("is_prompt") and uid_of(k) in wanted]
            info["prompts"], info["trajectories"] = len(uids), len(keys)
            info["_batch"] = TransferQueueView(self.tq, keys, "train")
        return len(batch)

    def _step_once(self, metrics: dict, timing_raw: dict, sample_batch_size: int | None = None) -> DataProto:
        """sample -> reward -> [balance] -> old_log_prob -> [ref] -> [values] -> advantage -> [critic] -> actor."""
        with marked_timer("gen", timing_raw):
            self.on_sample_begin()
            batch = self.finite("rollout", self._sample(metrics, sample_batch_size), metrics)  # the rollout's fields, now padded
            self.on_sample_end()
        if self.reward_loop_manager.reward_loop_worker_handles is None:  # verl: a colocated reward model only
            with marked_timer("reward", timing_raw):
                batch = self.finite("reward", self._compute_reward(batch, metrics), metrics)
        if self.config.trainer.balance_batch:
            batch = self._balance_batch(batch, metrics)
        with marked_timer("old_log_prob", timing_raw):
            batch = self.finite("old_log_prob", self._compute_old_log_prob(batch, metrics), metrics)
        if self.use_reference_policy:
            with marked_timer("ref", timing_raw):
                batch = self.finite("ref_log_prob", self._compute_ref_log_prob(batch, metrics), metrics)
        if self.use_critic:
            with marked_timer("values", timing_raw):
                batch = self.finite("values", self._compute_values(batch, metrics), metrics)
        with marked_timer("adv", timing_raw):
            batch = self.finite("advantage", self._compute_advantage(batch, metrics), metrics)
        if self.use_critic:
            with marked_timer("update_critic", timing_raw):
                batch = self.finite("update_critic", self._update_critic(batch, metrics), metrics)
        if self.config.trainer.critic_warmup <= self.global_steps:
            with marked_timer("update_actor", timing_raw):
                batch = self.finite("update_actor", self._update_actor(batch, metrics), metrics)
        return batch

    # ------------------------------------------------------------------------------------ stages
    def _sample(self, metrics: dict, batch_size: int | None = None) -> DataProto:
        """`ReplayBuffer.sample` of `batch_size` groups (default `data.train_batch_size`) -> `KVBatchMeta` -> the
        padded `DataProto` of those trajectories."""
        stored = [k for k, tag in self.tq.kv_list("train")["train"].items() if not tag.get("is_prompt")]
        with self._span("sample", TransferQueueView(self.tq, stored, "train"), role="trainer") as info:
            self.batch_meta, buffer_metrics = self.replay_buffer.sample(
                self.global_steps, batch_size=int(batch_size or self.config.data.train_batch_size))
            metrics.update(buffer_metrics)
            self.batch_meta.extra_info["temperature"] = float(self.config.actor_rollout_ref.rollout.temperature)
            batch = self._get(self.batch_meta)
            if "rm_scores" in batch.batch.keys():  # noqa: SIM118 (scored in the rollout: extra columns, metrics)
                metrics.update(collect_reward_info(batch))
                self.reward_loop_manager.check_failures(metrics, len(batch), f"step {self.global_steps}")
            info["_batch"] = batch
            info["sessions"] = len(batch)
            info["policy_versions"] = sorted({int(v) for v in self.batch_meta.tag_values("max_global_steps")})
            info.update(sample_trace_info(batch, self.replay_buffer))  # session times; async: evictions, waits
            info["process_pids"] = self.process_table()  # who ran what: controller, rollout servers, agent-loop workers
            info["transfer_queue"] = {"partition_id": self.batch_meta.partition_id, "keys": len(self.batch_meta),
                                      "fields": self.tq.describe(self.batch_meta.keys)}
        self._check_versions(batch)
        return batch

    def _get(self, batch_meta: KVBatchMeta, fields: list[str] | None = None) -> DataProto:
        """Materialise `fields` (default: every stored field) of the batch as one padded `DataProto`."""
        return kv_batch_get_padded(self.tq, batch_meta, fields=fields, **self._layout)

    def _check_versions(self, batch: DataProto):
        """Sync mode: every trajectory must come from the weights the last sync pushed (`global_steps - 1`).

        Versions count global steps, as verl's `update_weights(global_steps)` stamps them, so this holds
        with `trainer.critic_warmup` too (the actor then is not updated, but the weights are still synced).
        """
        expected = self.global_steps - 1
        seen = {int(v) for v in batch.non_tensor_batch["max_global_steps"]}
        if seen != {expected} and not self.checkpoint_manager.debug_faults:  # a debug fault lets the run go on
            raise RuntimeError(f"sync mode: trajectories were sampled by the weights of step(s) {sorted(seen)} but the "
                               f"rollout should hold step {expected}'s; it missed a weight sync (on_step_end).")

    def _compute_reward(self, batch: DataProto, metrics: dict) -> DataProto:
        """`rm_scores` from a colocated reward model, after sampling (verl: `_compute_reward_colocate`, `:1424`);
        everything else is scored per session in the agent loop (`minirl.workers.reward.reward_loop`)."""
        with self._span("reward", batch, role="reward", reads=["prompts", "responses", "attention_mask",
                                                               "raw_prompt"]) as info:
            rm = self.reward_loop_manager.compute_rm_score(batch)
            info["score_timing"] = rm.meta_info.pop("score_timing")  # per sample: wall-clock start/end
            metrics.update(collect_reward_info(batch.union(rm)))
            self.reward_loop_manager.check_failures(metrics, len(batch), f"step {self.global_steps}")
        return batch

    def _balance_batch(self, batch: DataProto, metrics: dict) -> DataProto:
        """Reorder the rows so each data-parallel rank's chunk carries about the same workload.

        verl: `PPOTrainer._balance_batch` (`verl/trainer/ppo/v1/trainer_base.py:1503`), which also pads the
        batch up to a multiple of the mini-batch sizes (minirl's config check requires that instead).
        The dispatch later cuts the batch into `dp` consecutive chunks, so the order IS the placement.
        """
        with self._span("balance_batch", batch, role="trainer", reads=["attention_mask"]) as info:
            seqlen = batch.batch["attention_mask"].sum(-1)
            parts = get_seqlen_balanced_partitions(calculate_workload(seqlen).tolist(), self.dp_size, equal_size=True)
            order = [i for part in parts for i in part]
            stats = log_seqlen_unbalance(seqlen.tolist(), parts, prefix="global_seqlen")
            metrics.update(stats)
            info.update({"dp_size": self.dp_size, "moved_rows": int(sum(i != j for i, j in enumerate(order))), **stats})
            if order != list(range(len(batch))):
                batch.reorder(torch.tensor(order))
        return batch

    def _worker_input(self, batch: DataProto, keys: list[str], **meta) -> DataProto:
        """What a worker needs and nothing more (verl fetches only `select_fields` from the TransferQueue)."""
        data = batch.select(batch_keys=keys)
        data.meta_info = dict(meta)
        return hooks.apply("trainer.worker_input", data, keys=keys)  # minirl.utils.hooks

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
                # pi_old is pi_rollout: its version is the newest that sampled this batch
                self.old_policy_version = max(int(v) for v in batch.non_tensor_batch["max_global_steps"])
            return batch
        keys = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]
        with self._span("old_log_prob", batch, role="actor", reads=keys) as info:
            temp = float(self.config.actor_rollout_ref.rollout.temperature)
            out = self.actor_rollout_wg.compute_log_prob(self._worker_input(batch, keys, temperature=temp))
            batch.batch["old_log_probs"] = out.batch["log_probs"]
            batch.batch["entropy"] = out.batch["entropy"]
            info["actor_version"] = out.meta_info.get("actor_version")  # the worker's count of update_actor calls
            self.old_policy_version = self.actor_step
            if "sum_pi_squared" in out.batch.keys():  # noqa: SIM118 (actor.calculate_sum_pi_squared: OTB)
                batch.batch["sum_pi_squared"] = out.batch["sum_pi_squared"]
            mask = batch.batch["response_mask"].bool()
            metrics["actor/entropy"] = float(batch.batch["entropy"][mask].mean()) if mask.any() else 0.0
            if self.config.actor_rollout_ref.rollout.calculate_log_probs:  # verl's condition and names (probabilities)
                metrics.update(calculate_debug_metrics(batch))
            metrics.update(rollout_mismatch_metrics(batch))  # minirl's own (log-probs)
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
        batch = hooks.apply("trainer.before_advantage", batch)  # minirl.utils.hooks
        reads = ["rm_scores", "response_mask", "uid"] + (["values"] if self.use_critic else [])
        with self._span("advantage", batch, role="trainer", reads=reads):
            batch.batch["token_level_scores"] = batch.batch["rm_scores"]
            if algo.adv_estimator == "remax":  # the greedy responses' scores, one per row (by uid)
                batch.batch["reward_baselines"] = torch.tensor(
                    [self._greedy_scores[u] for u in batch.non_tensor_batch["uid"]], dtype=torch.float32)
            if algo.use_kl_in_reward:
                batch, kl_metrics = apply_kl_penalty(batch, self.kl_ctrl_in_reward, algo.kl_penalty)
                metrics.update(kl_metrics)
            else:
                batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
            # verl's step 2: decoupled rollout correction (IS weights pi_old/pi_rollout, rejection), not in bypass
            batch = apply_rollout_correction(batch, algo.rollout_correction, metrics)
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
            self.critic_step = self.global_steps
            m = gather_worker_metrics(out)
            info.update(update_batch_numbers(m))
            metrics.update({k if k.startswith("critic/") else f"critic/{k}": v for k, v in reduce_metrics(m).items()})
        return batch

    def _update_actor(self, batch: DataProto, metrics: dict) -> DataProto:
        actor = self.config.actor_rollout_ref.actor
        keys = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask", "old_log_probs", "advantages"]
        if actor.use_kl_loss:
            keys.append("ref_log_prob")
        if "rollout_is_weights" in batch.batch.keys():  # noqa: SIM118 (decoupled rollout correction's weights)
            keys.append("rollout_is_weights")
        distillation = self._distillation_update_info()
        if distillation:  # the teacher's numbers, stored with each trajectory during rollout
            keys += ["teacher_logprobs"] + (["teacher_ids"] if distillation["distillation_use_topk"] else [])
        with self._span("update_actor", batch, role="actor", reads=keys) as info:
            meta = self._update_meta(actor)
            meta.update(distillation)
            meta["calculate_entropy"] = bool(actor.calculate_entropy or float(actor.entropy_coeff) != 0)
            self._check_divisible(batch, "update_actor")
            out = self.actor_rollout_wg.update_actor(self._worker_input(batch, keys, **meta))
            self.actor_version = int(out.meta_info["actor_version"])
            self.actor_step = self.global_steps
            info["actor_updates"] = self.actor_version  # update_actor calls so far (separate_async: P per step)
            m = gather_worker_metrics(out)
            info.update(update_batch_numbers(m))
            metrics.update({k if k.startswith("actor/") else f"actor/{k}": v for k, v in reduce_metrics(m).items()})
        return batch

    def _distillation_update_info(self) -> dict:
        """On-policy distillation's flags for the actor update ({} when off); verl sets the same in `_update_actor`.

        `distillation_use_topk`: the engine runs the loss's top-k logits processor; `distillation_only`:
        only the distillation loss counts (top-k, no task reward, no policy gradient).
        """
        if not self.use_teacher_policy:
            return {}
        from minirl.trainer.distillation import get_distillation_loss_settings

        lc = self.config.distillation.distillation_loss
        use_topk = get_distillation_loss_settings(str(lc.loss_mode)).use_topk
        return {"distillation_use_topk": use_topk,
                "distillation_only": use_topk and not lc.use_task_rewards and not lc.use_policy_gradient}

    # ------------------------------------------------------------------------------------- hooks
    def add_step_callback(self, callback) -> None:
        """Call `callback(step, batch, metrics)` after every training step (minirl only; verl has no such hook).

        `batch` is the `DataProto` the step trained on, with every field its stages added;
        `metrics` is the row just logged. Notebooks keep batches this way
        (`trainer.add_step_callback(lambda step, batch, m: kept.__setitem__(step, batch))`);
        a callback must not change the batch: the next step samples a new one anyway.
        """
        self._step_callbacks.append(callback)

    # The hooks the three trainers override (verl: `PPOTrainer.on_*`); `on_init_end` runs once the workers exist.
    def on_init_end(self): ...
    def on_train_begin(self): ...
    def on_train_end(self): ...
    def on_step_begin(self): ...
    def on_step_end(self): ...
    def on_sample_begin(self): ...
    def on_sample_end(self): ...

    def _update_weights(self, timed: bool = True) -> dict:
        """`checkpoint_manager.update_weights(global_steps)` in an `update_weights` span (timed inside a step)."""
        with marked_timer("update_weights", self.timing_raw) if timed else contextlib.nullcontext(), \
                self._span("update_weights", None, role="rollout") as info:
            info.update(self.checkpoint_manager.update_weights(self.global_steps))
        return info

    # ------------------------------------------------------------------- validation and greedy responses
    def generate_validation_batch(self, data: DataProto, what: str = "validation") -> tuple[DataProto, dict]:
        """Sessions for the prompts of `data` (uids set) on the validation path, sampled back and scored.

        The one path validation and ReMax's greedy baseline share: the prompts are registered in the
        TransferQueue's `val` partition, the agent loop runs their sessions with the validation sampling
        settings (`rollout.val_kwargs`; `data.meta_info["validate"]` is True), `ReplayBuffer.sample(partition_id="val")`
        hands them back as one padded `DataProto`, and rewards come from the rollout (or from a colocated
        reward model, now); failed rewards are reported under `what` (one warning line, never a stop:
        `RewardLoopManager.check_failures`). Returns that batch (with `rm_scores`) and what the agent loop
        reported (its `multi_turn` statistics). The `val` keys leave the TransferQueue before it returns.
        verl: the generation half of `PPOTrainer._validate` (`verl/trainer/ppo/v1/trainer_base.py:961`).
        """
        submit_prompts(self.tq, list(data.non_tensor_batch["uid"]), self.global_steps, partition_id="val")
        gen = self.agent_loop_manager.generate_sequences(data)
        meta, _ = self.replay_buffer.sample(self.global_steps, batch_size=len(data), partition_id="val")
        try:
            out = self._get(meta)
        finally:
            self.tq.kv_clear(meta.keys, partition_id="val")
        reward_metrics = self.reward_loop_manager.score_batch(out)  # rm_scores from the rollout, or scored now
        self.reward_loop_manager.check_failures(reward_metrics, len(out), what, stop=False)
        return out, gen

    def _validate(self) -> dict:
        """Every validation prompt through `generate_validation_batch`, scored: `val-core/<data_source>/<key>/mean@<n>`.

        The prompts get `rollout.val_kwargs.n` sessions each, greedy by default; the metrics are named as
        verl names them (`minirl.trainer.ppo.metric_utils.compute_validation_metrics`), plus the multi-turn
        statistics under `val-aux/multi_turn`. verl: `PPOTrainer._validate` (`verl/trainer/ppo/v1/trainer_base.py:961`).
        """
        ds = self.val_dataset
        data = to_dataproto(self.collate_fn([ds[i] for i in range(len(ds))]))
        data.non_tensor_batch["uid"] = new_uids(len(data))
        data.meta_info.update(validate=True, global_steps=self.global_steps)
        n = int(self.config.actor_rollout_ref.rollout.val_kwargs.n)
        with self._span("validate", data, role="rollout") as info:
            out, gen = self.generate_validation_batch(data)
            info.update({"multi_turn": gen["multi_turn"]} if "multi_turn" in gen else {})
            info["_batch"] = out
        metrics = multi_turn_metrics(gen.get("multi_turn"), prefix="val-aux/multi_turn")
        metrics.update(compute_validation_metrics(out, self.config.data.reward_fn_key, n))
        return metrics

    def _compute_greedy_baselines(self, batch: DataProto) -> dict:
        """ReMax's baseline: `uid -> score` of one greedy response to each prompt of `batch` (the step's prompts).

        `compute_remax_outcome_advantage` (`verl/trainer/ppo/core_algos.py`, registered as `remax`) subtracts
        from each sampled response's score the score of a *greedy* response to the same prompt, the
        `reward_baselines` field. verl's legacy trainer samples that greedy response in the same step
        (`RayPPOTrainer.fit`, `verl/trainer/ppo/ray_trainer.py:1405`); verl's V1 trainer at the pin has no
        such step, so `algorithm.adv_estimator=remax` does not run there. minirl adds it on the V1 path,
        through `generate_validation_batch` (rollout.val_kwargs sampling, one session per prompt).
        """
        data = DataProto.from_dict(non_tensors={k: np.array(v, dtype=object) for k, v in batch.non_tensor_batch.items()},
                                   meta_info={**batch.meta_info, "validate": True})
        train_uids = list(data.non_tensor_batch["uid"])
        data.non_tensor_batch["uid"] = new_uids(len(data))
        data.non_tensor_batch["__rollout_n__"] = np.array([1] * len(data), dtype=object)
        out, _ = self.generate_validation_batch(data, what=f"step {self.global_steps}: ReMax's greedy baseline")
        to_train = dict(zip(data.non_tensor_batch["uid"], train_uids))
        return {to_train[u]: s for u, s in zip(out.non_tensor_batch["uid"], out.batch["rm_scores"].sum(-1).tolist())}

    # ---------------------------------------------------------------------------- metrics, logs
    def _compute_metrics(self, batch: DataProto, metrics: dict):
        """The step's row: data, timing, versions, staleness (`minirl.trainer.ppo.metric_utils.compute_step_metrics`),
        the last weight sync's numbers (bytes, buckets, seconds) and where the CPU went (`process_cpu_metrics`).
        verl: `_compute_metrics` (`:1763`)."""
        metrics.update(compute_step_metrics(batch, use_critic=self.use_critic, timing_raw=self.timing_raw,
                                            global_steps=self.global_steps, epoch=self.loader.epoch,
                                            versions=self.versions))
        metrics.update(self.checkpoint_manager.pop_metrics())
        metrics.update(self.process_cpu_metrics())

    def process_table(self) -> dict[str, int]:
        """The run's processes by role -> pid: `controller` (this one: the trainer, and the rollout engine when
        `rollout.nnodes=0`), `rollout_server_<i>`, `agent_loop_worker_<i>` (none when the agent loop runs here)."""
        table = {"controller": os.getpid()}
        for replica in getattr(self.rollout, "rollout_replicas", []):  # an LLMServerManager's server processes
            if getattr(replica, "pid", None):
                table[f"rollout_server_{replica.replica_rank}"] = replica.pid
        manager = getattr(self, "agent_loop_manager", None)
        for i, pid in enumerate(manager.worker_pids() if hasattr(manager, "worker_pids") else []):
            table[f"agent_loop_worker_{i}"] = pid
        return table

    def process_cpu_metrics(self) -> dict:
        """minirl's own `perf/cpu_s/<process>`: CPU seconds (user + system) each process of the run used since the
        last row, and `perf/cpu_s/all`; on 2 cores a step cannot take less than `all / 2` seconds of wall time.
        Empty where `/proc` is not readable (Linux only, processes on this machine)."""
        now = {role: cpu_seconds(pid) for role, pid in self.process_table().items()}
        last, self._cpu_last = getattr(self, "_cpu_last", {}), now
        out = {f"perf/cpu_s/{role}": now[role] - last[role] for role in now
               if now[role] is not None and last.get(role) is not None}
        if out:
            out["perf/cpu_s/all"] = sum(out.values())
        return out

    # ------------------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self):
        """verl's layout, written atomically (`minirl.trainer.ppo.checkpointing.save_checkpoint`)."""
        return checkpointing.save_checkpoint(self, mark=False)  # fit marks it latest after the step's row

    def _load_checkpoint(self):
        """`trainer.resume_mode`: auto | disable | resume_path (`minirl.trainer.ppo.checkpointing.load_checkpoint`)."""
        return checkpointing.load_checkpoint(self)

    def close(self):
        """Close the trace; stop the rollout servers; kill the Ray workers (and stop Ray if this trainer started it)."""
        self.tracer.close()
        manager = getattr(self, "agent_loop_manager", None)
        if manager is not None:
            manager.shutdown()  # the agent-loop worker processes first: they talk to the rollout
        for owned in (getattr(self, "checkpoint_manager", None), getattr(self, "rollout", None),
                      self.teacher_model_manager):
            getattr(owned, "shutdown", lambda: None)()  # the weight-sync group, the rollout server processes
        if self.reward_loop_manager is not None:
            self.reward_loop_manager.shutdown()  # stops the reward-model server
        w, self.workers = self.workers, None
        if w is not None:
            w.shutdown()  # closes the workers' part traces, kills the Ray workers
        if w is not None and w.owns_ray:
            from minirl.single_controller.ray import shutdown_ray

            shutdown_ray()


__all__ = ["PPOTrainer", "get_trainer_cls", "register_trainer"]
