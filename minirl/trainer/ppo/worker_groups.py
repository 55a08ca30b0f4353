"""Where the trainer's workers live: Ray actors (one per rank) or objects in this process.

verl builds its worker groups in `PPOTrainer._setup` (`verl/trainer/ppo/v1/trainer_base.py:229`):
a `ResourcePoolManager` with a `global_pool` of `trainer.nnodes x trainer.n_gpus_per_node` GPUs,
every role (actor+rollout+ref, critic) colocated on it through `create_colocated_worker_cls`, one
`RayWorkerGroup.spawn` per pool. minirl does the same when it uses Ray, and keeps an in-process
path for one rank (`trainer.worker_group`):

- `ray`: one Ray actor per rank, actor, reference and critic colocated in the same processes; with
  more than one rank they form a `torch.distributed` group and the FSDP2 engines shard over it.
- `inprocess`: the workers are objects in this process (`InProcessWorkerGroup`): one rank only, no
  Ray start (which costs 30-40 s and ~1 GB on a small machine), the path a debugger steps through.
- `auto` (default): `ray` when there is more than one rank or `ray_kwargs.ray_init.address` is
  set, else `inprocess` (verl always uses Ray: `run_ppo`, `verl/trainer/main_ppo.py:34`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from minirl.config.derived import worker_group_backend
from minirl.single_controller.base.inprocess import InProcessWorkerGroup
from minirl.single_controller.base.worker_group import ClassWithInitArgs, ResourcePool
from minirl.workers.engine_workers import ActorRolloutRefWorker, CriticWorker

__all__ = ["WorkerGroups", "build_worker_groups", "resolve_worker_group"]


def resolve_worker_group(config) -> str:
    """`trainer.worker_group`: "inprocess" or "ray" ("auto": ray for several ranks or a Ray address);
    computed by `minirl.config.derived.worker_group_backend`."""
    return worker_group_backend(config)


@dataclass
class WorkerGroups:
    """The groups the trainer drives: `actor_rollout_wg` (actor + ref), `critic_wg` (or None)."""

    backend: str
    actor_rollout_wg: Any
    critic_wg: Any = None
    ray_wg: Any = None  # the colocated Ray group behind both, to kill at the end
    owns_ray: bool = False  # this process started Ray (and stops it at the end)

    def init_trace(self, tracer) -> None:
        """Make every worker process write its per-rank events next to the controller's trace (`Worker.init_trace`)."""
        if getattr(tracer, "level", "off") == "off":
            return
        for wg in (self.actor_rollout_wg, self.critic_wg):
            if wg is not None:  # colocated roles share a process: the second call finds its file open
                wg.init_trace(str(tracer.dir), tracer.level, tracer.run_id)

    def shutdown(self) -> None:
        """In-process workers: close their part trace (it lives in this process). Ray workers: kill them.

        A Ray worker is not asked to close its file first: after a crash or a hung collective it could
        not answer, and every line it wrote is complete anyway (the part file just has no `run_end`).
        """
        if self.ray_wg is not None:
            self.ray_wg.kill_workers()
            return
        for wg in (self.actor_rollout_wg, self.critic_wg):
            if wg is not None:
                wg.close_trace()


def build_worker_groups(config, actor_role: str, use_critic: bool, tracer=None) -> WorkerGroups:
    """Spawn the workers for `actor_role` ("actor_rollout" or "actor_rollout_ref") and, if asked, the critic.

    With a `tracer` (the controller's), every worker process also records its calls, one part file per
    rank next to the controller's `trace.jsonl` (`WorkerGroups.init_trace`).
    """
    groups = _spawn_worker_groups(config, actor_role, use_critic)
    if tracer is not None:
        groups.init_trace(tracer)
    return groups


def _spawn_worker_groups(config, actor_role: str, use_critic: bool) -> WorkerGroups:
    backend = resolve_worker_group(config)
    device = config.trainer.device
    ranks = int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)
    if backend == "inprocess":
        if ranks != 1:
            raise ValueError(
                f"trainer.worker_group=inprocess runs the workers in this one process, which can hold one "
                f"torch.distributed rank, but trainer.nnodes * trainer.n_gpus_per_node = {ranks}. "
                "Fix: trainer.worker_group=ray (or auto), or trainer.n_gpus_per_node=1.")
        pool = ResourcePool(process_on_nodes=[1])
        actor = InProcessWorkerGroup(pool, ClassWithInitArgs(ActorRolloutRefWorker, config.actor_rollout_ref,
                                                             role=actor_role, device=device,
                                                             distillation_config=config.get("distillation")))
        critic = InProcessWorkerGroup(pool, ClassWithInitArgs(CriticWorker, config.critic, device=device)) \
            if use_critic else None
        return WorkerGroups("inprocess", actor, critic)
    return _build_ray_worker_groups(config, actor_role, use_critic, ranks)


def ray_num_cpus(pool, requested: int | None = None) -> int:
    """Logical CPUs for a local Ray: `ray_kwargs.ray_init.num_cpus` when set, else every slot of `pool`
    (`max_colocate_count` CPUs each, `RayResourcePool.cpus_needed`) plus head room, at least 8. Logical CPUs
    may exceed the physical cores."""
    return int(requested) if requested else max(8, pool.cpus_needed() + 2)


def _build_ray_worker_groups(config, actor_role: str, use_critic: bool, ranks: int) -> WorkerGroups:
    """One Ray actor per rank hosting every role (verl: `create_colocated_worker_cls` + `spawn` in `_setup`)."""
    from minirl.single_controller.ray import (
        RayClassWithInitArgs,
        RayResourcePool,
        RayWorkerGroup,
        create_colocated_worker_cls,
        init_ray,
    )

    t, device = config.trainer, config.trainer.device
    ray_init = config.ray_kwargs.ray_init
    pool = RayResourcePool(process_on_nodes=[int(t.n_gpus_per_node)] * int(t.nnodes), use_gpu=device == "cuda")
    owns_ray = init_ray(address=ray_init.address, num_cpus=ray_num_cpus(pool, ray_init.num_cpus))
    class_dict = {actor_role: RayClassWithInitArgs(ActorRolloutRefWorker, config.actor_rollout_ref,
                                                   role=actor_role, device=device,
                                                   distillation_config=config.get("distillation"))}
    if use_critic:
        class_dict["critic"] = RayClassWithInitArgs(CriticWorker, config.critic, device=device)
    # CPU ranks: one torch thread each, or two ranks on two cores fight over them
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"} if device == "cpu" else {}
    env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_DISABLE_PROGRESS_BARS="1", TRANSFORMERS_VERBOSITY="error")
    ray_wg = RayWorkerGroup(pool, create_colocated_worker_cls(class_dict), worker_env=env)
    groups = ray_wg.spawn(class_dict.keys())
    return WorkerGroups("ray", groups[actor_role], groups.get("critic"), ray_wg, owns_ray)
