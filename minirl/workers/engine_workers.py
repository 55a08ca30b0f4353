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
`wg.compute_log_prob(batch)` as if it were local. As in verl, the batch methods use the nd-mesh
dispatch (`make_nd_compute_dataproto_dispatch_fn`, meshes `actor`, `ref`, `critic`): after building
an engine each worker registers its data-parallel rank and whether it reports (`register_mesh`), so
the same methods serve FSDP (every rank its own chunk) and tensor parallelism (the `tp` ranks of a
group share one chunk, one of them reports).

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

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from minirl.protocol import DataProto
from minirl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from minirl.single_controller.base.worker import Worker
from minirl.trace.worker_trace import note_engine_layout
from minirl.utils.config import cfg_get
from minirl.utils.distributed import init_process_group
from minirl.workers.engine import EngineRegistry
from minirl.workers.utils.losses import ppo_loss, value_loss

# Metrics that loss functions report as this micro-batch's share of a global mean: summed, not averaged.
SUM_METRICS = ("actor/pg_loss", "actor/entropy_loss", "actor/kl_loss", "critic/vf_loss", "sft/loss")

def _local(p: torch.Tensor) -> torch.Tensor:
    """This rank's part of a parameter: the local shard of a DTensor (a view that shares its storage), else itself."""
    return p.to_local() if hasattr(p, "to_local") else p


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
    init_process_group(backend, int(os.environ["RANK"]), world_size)  # on loopback: listens on loopback only


def build_engine(model_type: str, model_path: str, fsdp_config, optim_config, forward_only: bool, device: str,
                 model_section=None, use_prefix_grouper: bool = False, engine_section=None):
    """Build an engine from verl-shaped config sections: the model path, `fsdp_config`, `optim` and `model`.

    `model_section` (`actor_rollout_ref.model` / `critic.model`) contributes `enable_gradient_checkpointing`
    and `trust_remote_code`, which the engine applies when it loads the Hugging Face model;
    `use_prefix_grouper` (the actor's key) makes its forwards run each distinct prompt once.
    `engine_section` (`actor_rollout_ref.actor` / `.ref` / `critic`) picks the backend by its `strategy`,
    as verl's `TrainingWorker` does (`EngineRegistry.new(backend=engine_config.strategy)`): `torchtitan`
    (`model_engine=torchtitan`) builds the TP x FSDP2 engine from the section's `torchtitan` keys.
    The engine's layout (mesh, coordinates, parameter shards) goes into this rank's trace.
    """
    model_config = _ns(path=model_path, dtype=str(fsdp_config.get("model_dtype", "fp32")),
                       enable_gradient_checkpointing=bool(cfg_get(model_section, "enable_gradient_checkpointing", False)),
                       trust_remote_code=bool(cfg_get(model_section, "trust_remote_code", False)))
    engine_config = _ns(strategy="fsdp2", param_dtype=str(fsdp_config.get("dtype", "float32")),
                        seed=int(fsdp_config.get("seed", 42)), forward_only=forward_only,
                        reshard_after_forward=bool(fsdp_config.get("reshard_after_forward", True)), device=device,
                        use_prefix_grouper=bool(use_prefix_grouper))
    backend = str(cfg_get(engine_section, "strategy", "fsdp2"))
    if backend == "torchtitan":
        tt = cfg_get(engine_section, "torchtitan", None) or {}
        engine_config = _ns(**{**OmegaConf.to_container(engine_config), **_plain(tt), "strategy": "torchtitan",
                               "param_dtype": str(cfg_get(tt, "dtype", "float32")),
                               "seed": int(cfg_get(tt, "seed", 42)), "forward_only": forward_only, "device": device})
    engine = EngineRegistry.new(model_type, backend, model_config, engine_config,
                                None if forward_only else optim_config)
    engine.initialize()
    note_engine_layout(engine.layout())
    return engine


def _plain(section) -> dict:
    return OmegaConf.to_container(section, resolve=True) if OmegaConf.is_config(section) else dict(section)


def register_mesh(worker: Worker, mesh_name: str, engine) -> None:
    """Tell the nd-mesh dispatch this rank's dp rank and whether it reports (verl: `set_dispatch_collect`).

    FSDP: dp rank = rank, every rank reports. TorchTitan: the `tp` ranks of a group share a dp rank and
    only tp rank 0 reports (`engine.is_mp_src_rank_with_outputs()`).
    """
    worker._register_dispatch_collect_info(mesh_name, dp_rank=engine.get_data_parallel_rank(),
                                           is_collect=engine.is_mp_src_rank_with_outputs())


class TrainingWorker:
    """One engine + one loss function; the mini-batch loop of a training step (verl: `TrainingWorker`)."""

    def __init__(self, engine, loss_fn=None):
        self.engine = engine
        self.loss_fn = loss_fn

    def train_mini_batch(self, data: DataProto) -> dict:
        """Train on this rank's share of a step's batch: `epochs` x (share / per-rank mini-batch) optimizer steps.

        `data.meta_info` carries (set by the trainer): `mini_batch_size` (GLOBAL sequences per optimizer
        step), `micro_batch_size` (per rank), `epochs`, `seed`, `shuffle`, `temperature`.
        Returns metrics lists (one entry per optimizer step) plus the batch-size numbers actually used;
        `optimizer_steps` counts the steps applied, `optimizer_steps_skipped` those the engine skipped
        for a non-finite gradient norm.
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
        skipped_before = getattr(self.engine, "skipped_optimizer_steps", 0)
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
        skipped = getattr(self.engine, "skipped_optimizer_steps", 0) - skipped_before
        metrics["optimizer_steps"] = [steps - skipped]
        metrics["optimizer_steps_skipped"] = [skipped]
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
            engine = build_engine("language_model", model_path, c.actor.fsdp_config, c.actor.optim, False, self.device,
                                  model_section=c.model, use_prefix_grouper=cfg_get(c.actor, "use_prefix_grouper", False),
                                  engine_section=c.actor)
            self.actor = TrainingWorker(engine, partial(ppo_loss, c.actor))
            register_mesh(self, "actor", engine)
        if self._is_ref:
            engine = build_engine("language_model", model_path, c.ref.fsdp_config, None, True, self.device,
                                  model_section=c.model, engine_section=c.ref)
            self.ref = TrainingWorker(engine)
            register_mesh(self, "ref", engine)
        return True

    def _infer(self, worker: TrainingWorker, data: DataProto, micro: int, entropy: bool) -> dict:
        micro = _divisor_at_most(len(data), int(micro))
        data.meta_info = {**data.meta_info, "micro_batch_size": micro, "calculate_entropy": entropy}
        return worker.infer_batch(data)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """Actor forward: `log_probs` [B, R] (and `entropy`) of the responses under the current actor.

        With `actor.calculate_sum_pi_squared` also `sum_pi_squared` [B, R] (for the optimal-token-baseline
        estimators), as verl's `_compute_old_log_prob` asks for (`verl/trainer/ppo/ray_trainer.py:1290`).
        """
        data.meta_info["calculate_sum_pi_squared"] = bool(cfg_get(self.config.actor, "calculate_sum_pi_squared", False))
        out = self._infer(self.actor, data, self.config.rollout.log_prob_micro_batch_size_per_gpu, True)
        tensors = {"log_probs": out["log_probs"].cpu(), "entropy": out["entropy"].cpu()}
        if "sum_pi_squared" in out:
            tensors["sum_pi_squared"] = out["sum_pi_squared"].cpu()
        return DataProto.from_dict(tensors=tensors, meta_info={"actor_version": self.policy_version})

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="ref"))
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """Reference forward: `ref_log_prob` [B, R] under the frozen initial policy (version 0)."""
        out = self._infer(self.ref, data, self.config.ref.log_prob_micro_batch_size_per_gpu, False)
        return DataProto.from_dict(tensors={"ref_log_prob": out["log_probs"].cpu()})

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
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
    def save_model_to_cpu(self, n: int):
        """Keep a CPU copy of this rank's actor parameters (its shards) and version under `n`.

        Decoupled PPO in separate_async: the cycle's pi_old is saved at its first local update and swapped
        back in for the later old-log-prob forwards (verl: `DetachActorWorker.save_model_to_cpu`,
        `verl/experimental/separation/engine_workers.py:123`). The optimizer state is not touched.
        """
        saved = {name: _local(p).detach().to("cpu", copy=True) for name, p in self.actor.engine.module.named_parameters()}
        self._cpu_models = {**getattr(self, "_cpu_models", {}), n: (saved, self.policy_version)}
        return True

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def restore_model_from_cpu(self, n: int):
        """Copy the parameters saved under `n` back into the actor, in place; its version goes back too."""
        saved, version = self._cpu_models[n]
        with torch.no_grad():
            for name, p in self.actor.engine.module.named_parameters():
                _local(p).copy_(saved[name])
        self.policy_version = version
        return True

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def clear_cpu_model(self, n: int):
        """Forget the copy saved under `n` (verl: `clear_cpu_model`)."""
        getattr(self, "_cpu_models", {}).pop(n, None)
        return True

    @register(dispatch_mode=Dispatch.DP_COMPUTE)
    def execute_checkpoint_engine(self, method: str, kwargs: dict):
        """A group method (`prepare`, `init_process_group`, `finalize`) of this rank's checkpoint engine
        (`minirl.checkpoint_engine.worker`; verl: `execute_checkpoint_engine`, `verl/checkpoint_engine/base.py:364`)."""
        from minirl.checkpoint_engine.worker import execute_checkpoint_engine

        return execute_checkpoint_engine(self, method, kwargs)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def update_weights(self, global_steps: int, partial: bool = False) -> dict:
        """Streaming sync: every rank gathers, rank 0 sends the buckets to the rollout servers
        (`minirl.checkpoint_engine.worker.send_actor_weights`; verl: `update_weights`, `verl/workers/engine_workers.py:727`)."""
        from minirl.checkpoint_engine.worker import send_actor_weights

        return send_actor_weights(self, global_steps, partial)

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
        self.role = "critic"
        self.device = device
        self.version = 0

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self, model_path: str):
        c = self.config
        engine = build_engine("value_model", model_path, c.fsdp, c.optim, False, self.device, model_section=c.model,
                              engine_section=c)
        self.critic = TrainingWorker(engine, partial(value_loss, c))
        register_mesh(self, "critic", engine)
        return True

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="critic"))
    def compute_values(self, data: DataProto) -> DataProto:
        """`values` [B, R]: the critic's estimate at each response token."""
        micro = _divisor_at_most(len(data), int(self.config.forward_micro_batch_size_per_gpu))
        data.meta_info = {**data.meta_info, "micro_batch_size": micro}
        out = self.critic.infer_batch(data)
        return DataProto.from_dict(tensors={"values": out["values"].cpu()})

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="critic"))
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

