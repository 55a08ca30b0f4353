"""The workers the controller drives: `TrainingWorker`, `ActorRolloutRefWorker`, `CriticWorker`.

verl (`verl/workers/engine_workers.py`):
- `TrainingWorker` (`:76`) owns one engine and a loss function; `train_mini_batch` (`:242`) cuts its
  share of the batch into mini-batches (global `ppo_mini_batch_size * n` sequences / dp ranks) and
  runs `ppo_epochs` passes, one optimizer step per mini-batch; `infer_batch` (`:397`) is forward-only.
- `ActorRolloutRefWorker` (`:451`) holds the actor, the reference policy and the rollout in one
  process: the *hybrid engine*. `compute_log_prob` (`:702`), `compute_ref_log_prob` (`:695`),
  `update_actor` (`:712`), `update_weights` (`:727`).
- The critic is a `TrainingWorker` with a value-head engine.

minirl keeps the rollout OUT of this worker: it is a separate replica object that receives weights
through `minirl.checkpoint_engine` (verl: `CheckpointEngineManager`, `verl/checkpoint_engine/base.py:381`),
so the same trainer code works whether the workers live in this process or in Ray actors.
Every method that takes a batch is registered with a dispatch mode, so the controller calls
`wg.compute_log_prob(batch)` as if it were local.

Several ranks: a worker whose group has `WORLD_SIZE > 1` joins the global `torch.distributed`
process group in its constructor (gloo on CPU, NCCL on CUDA), from the RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT its `RayWorkerGroup` gave it, before any engine is built; the FSDP2
engine then sees the group and shards. verl does the same in `TrainingWorker.__init__`
(`verl/workers/engine_workers.py:83`) through `initialize_global_process_group_ray`
(`verl/utils/distributed.py:82`). Roles colocated in one process (actor + critic) share that group.
"""

from __future__ import annotations

import os
from functools import partial

import numpy as np
import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from minirl.protocol import DataProto
from minirl.single_controller.base.decorator import Dispatch, register
from minirl.single_controller.base.worker import Worker
from minirl.workers.engine import EngineRegistry
from minirl.workers.utils.losses import ppo_loss, value_loss

# Metrics that loss functions report as this micro-batch's share of a global mean: summed, not averaged.
SUM_METRICS = ("actor/pg_loss", "actor/entropy_loss", "actor/kl_loss", "critic/vf_loss", "sft/loss")

def _ns(**kw):
    return OmegaConf.create(kw)


def init_distributed(device: str) -> None:
    """Join the global process group once per process when this worker is one of several ranks.

    Reads RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT from the environment (`env://`); a
    single rank (the in-process group) does nothing, and the engine then trains the plain module.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1 or dist.is_initialized():
        return
    backend = "nccl" if device == "cuda" else "gloo"  # verl: "cpu:gloo,cuda:nccl"
    dist.init_process_group(backend=backend, rank=int(os.environ["RANK"]), world_size=world_size)


def build_engine(model_type: str, model_path: str, fsdp_config, optim_config, forward_only: bool, device: str):
    """Build an engine from verl-shaped config sections: the model path, `fsdp_config` and `optim`."""
    model_config = _ns(path=model_path, dtype=str(fsdp_config.get("model_dtype", "fp32")))
    engine_config = _ns(strategy="fsdp2", param_dtype=str(fsdp_config.get("dtype", "float32")),
                        seed=int(fsdp_config.get("seed", 42)), forward_only=forward_only,
                        reshard_after_forward=bool(fsdp_config.get("reshard_after_forward", True)), device=device)
    engine = EngineRegistry.new(model_type, "fsdp2", model_config, engine_config,
                                None if forward_only else optim_config)
    engine.initialize()
    return engine


class TrainingWorker:
    """One engine + one loss function; the mini-batch loop of a training step (verl: `TrainingWorker`)."""

    def __init__(self, engine, loss_fn=None):
        self.engine = engine
        self.loss_fn = loss_fn

    def train_mini_batch(self, data: DataProto) -> dict:
        """Train on this rank's share of a step's batch: `epochs` x (share / per-rank mini-batch) optimizer steps.

        `data.meta_info` carries (set by the trainer): `mini_batch_size` (GLOBAL sequences per optimizer
        step), `micro_batch_size` (per rank), `epochs`, `seed`, `shuffle`, `temperature`.
        Returns metrics lists (one entry per optimizer step) plus the batch-size numbers actually used.
        """
        meta = dict(data.meta_info)
        dp = self.engine.get_data_parallel_size()
        mini_global = int(meta.pop("mini_batch_size"))
        if mini_global % dp:
            raise ValueError(f"global mini-batch of {mini_global} sequences is not divisible by dp size {dp}.")
        mini = mini_global // dp
        if len(data) % mini:
            raise ValueError(f"this rank got {len(data)} sequences, not a multiple of its mini-batch of {mini} "
                             "(= ppo_mini_batch_size * n / dp). Check `minirl config explain`.")
        epochs, seed, shuffle = int(meta.pop("epochs", 1)), int(meta.pop("seed", 42)), bool(meta.pop("shuffle", False))
        gen = torch.Generator().manual_seed(seed + self.engine.get_data_parallel_rank())
        steps, metrics = 0, {}
        n_mini = len(data) // mini
        for epoch in range(epochs):
            order = torch.randperm(len(data), generator=gen) if shuffle else torch.arange(len(data))
            for j in range(n_mini):
                mb = data.select_idxs(order[j * mini:(j + 1) * mini])
                mb.meta_info = dict(meta)
                out = self.engine.train_batch(mb, self.loss_fn)
                k = out.pop("num_micro_batches")
                for key, v in out.items():
                    v = v * k if key in SUM_METRICS else v
                    metrics.setdefault(key, []).append(float(v))
                metrics.setdefault("num_micro_batches", []).append(k)
                metrics.setdefault("mini_batch_size_per_rank", []).append(len(mb))
                metrics.setdefault("micro_batch_size_per_rank", []).append(int(meta["micro_batch_size"]))
                steps += 1
        lr = self.engine.lr_scheduler_step()  # verl steps the scheduler once per training step
        metrics["optimizer_steps"] = [steps]
        metrics["lr_after_step"] = [float(lr) if lr is not None else float("nan")]
        return metrics

    def infer_batch(self, data: DataProto) -> dict:
        with self.engine.eval_mode():
            return self.engine.infer_batch(data)


class ActorRolloutRefWorker(Worker):
    """Actor (+ reference policy) in one worker: the trainable policy and its frozen copy.

    `role` is verl's: "actor", "actor_rollout", "actor_rollout_ref" or "ref".
    `policy_version` counts the optimizer updates applied to the actor (0 before the first).
    """

    def __init__(self, config, role: str = "actor_rollout_ref", device: str = "cpu"):
        super().__init__()
        init_distributed(device)
        self.config = config  # the actor_rollout_ref section
        self.role = role
        self.device = device
        self._is_actor = role in ("actor", "actor_rollout", "actor_rollout_ref")
        self._is_ref = role in ("ref", "actor_rollout_ref")
        self.policy_version = 0
        self.actor = self.ref = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self, model_path: str):
        """Build the actor engine (with optimizer) and the reference engine (forward only)."""
        c = self.config
        if self._is_actor:
            engine = build_engine("language_model", model_path, c.actor.fsdp_config, c.actor.optim, False, self.device)
            self.actor = TrainingWorker(engine, partial(ppo_loss, c.actor))
        if self._is_ref:
            engine = build_engine("language_model", model_path, c.ref.fsdp_config, None, True, self.device)
            self.ref = TrainingWorker(engine)
        return True

    def _infer(self, worker: TrainingWorker, data: DataProto, micro: int, entropy: bool) -> dict:
        micro = _divisor_at_most(len(data), int(micro))
        data.meta_info = {**data.meta_info, "micro_batch_size": micro, "calculate_entropy": entropy}
        return worker.infer_batch(data)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """Actor forward: `log_probs` [B, R] (and `entropy`) of the responses under the current actor."""
        out = self._infer(self.actor, data, self.config.rollout.log_prob_micro_batch_size_per_gpu, True)
        tensors = {"log_probs": out["log_probs"].cpu(), "entropy": out["entropy"].cpu()}
        return DataProto.from_dict(tensors=tensors, meta_info={"actor_version": self.policy_version})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """Reference forward: `ref_log_prob` [B, R] under the frozen initial policy (version 0)."""
        out = self._infer(self.ref, data, self.config.ref.log_prob_micro_batch_size_per_gpu, False)
        return DataProto.from_dict(tensors={"ref_log_prob": out["log_probs"].cpu()})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto) -> DataProto:
        """PPO epochs over mini-batches; returns metrics in `meta_info["metrics"]`; bumps `policy_version`."""
        metrics = self.actor.train_mini_batch(data)
        self.policy_version += 1
        return DataProto.from_dict(tensors={"done": torch.ones(len(data), dtype=torch.bool)},
                                   meta_info={"metrics": metrics, "actor_version": self.policy_version})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def get_per_tensor_param(self):
        """Full (unsharded) actor tensors by HF name, for weight sync, from rank 0; other ranks return [].

        Every rank must run it: under FSDP each full tensor is an all-gather of the shards. Only rank
        0's copy travels back to the controller (verl: the checkpoint engine streams from the trainer
        ranks to the rollout replicas instead of through the controller).
        """
        params = list(self.actor.engine.get_per_tensor_param())
        return params if self.rank == 0 else []

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, global_step: int):
        self.actor.engine.save_checkpoint(local_path, global_step)
        return self.policy_version

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str, policy_version: int):
        self.actor.engine.load_checkpoint(local_path)
        self.policy_version = int(policy_version)
        return True


class CriticWorker(Worker):
    """The value model (verl runs it as a `TrainingWorker` with a value-head engine)."""

    def __init__(self, config, device: str = "cpu"):
        super().__init__()
        init_distributed(device)
        self.config = config  # the critic section
        self.device = device
        self.version = 0

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self, model_path: str):
        c = self.config
        engine = build_engine("value_model", model_path, c.fsdp, c.optim, False, self.device)
        self.critic = TrainingWorker(engine, partial(value_loss, c))
        return True

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_values(self, data: DataProto) -> DataProto:
        """`values` [B, R]: the critic's estimate at each response token."""
        micro = _divisor_at_most(len(data), int(self.config.forward_micro_batch_size_per_gpu))
        data.meta_info = {**data.meta_info, "micro_batch_size": micro}
        out = self.critic.infer_batch(data)
        return DataProto.from_dict(tensors={"values": out["values"].cpu()})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_critic(self, data: DataProto) -> DataProto:
        metrics = self.critic.train_mini_batch(data)
        self.version += 1
        return DataProto.from_dict(tensors={"done": torch.ones(len(data), dtype=torch.bool)},
                                   meta_info={"metrics": metrics, "critic_version": self.version})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, global_step: int):
        self.critic.engine.save_checkpoint(local_path, global_step)
        return True

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str, version: int):
        self.critic.engine.load_checkpoint(local_path)
        self.version = int(version)
        return True


def _divisor_at_most(n: int, k: int) -> int:
    """Forward-only passes take the largest micro-batch <= k that divides this rank's batch
    (verl's infer path splits into chunks of k and lets the last one be smaller)."""
    return max(d for d in range(1, max(1, min(n, k)) + 1) if n % d == 0)


def reduce_metrics(metrics: dict) -> dict:
    """Mean of every metric list (verl: `reduce_metrics`, `verl/utils/metric/utils.py:25`)."""
    return {k: float(np.mean(v)) for k, v in metrics.items() if len(v)}
