"""The TorchTitan-style engine: tensor parallelism (DTensor) x FSDP2 on a 2-D device mesh `(dp_shard, tp)`.

Mirrors `TorchTitanEngine` (`verl/workers/engine/torchtitan/transformer_impl.py:97`) and
`TorchTitanEngineWithLMHead` (`verl/workers/engine/torchtitan/transformer_impl.py:718`), configured
by verl's `torchtitan` engine group (`verl/trainer/config/engine/torchtitan.yaml`:
`data_parallel_shard_size`, `tensor_parallel_size`, ...) and selected by `model_engine=torchtitan`.

How one global mini-batch maps onto `W = dp x tp` ranks (chapter 07):

1. The ranks form a 2-D mesh: rank `r` sits at `(dp_rank, tp_rank) = divmod(r, tp)`, so the `tp`
   ranks of one tensor-parallel group are neighbours (on a GPU node: one NVLink island).
2. **Tensor parallelism** (`parallelize_module`, torch's `ColwiseParallel` / `RowwiseParallel`):
   in every decoder layer `q/k/v_proj` and `gate/up_proj` are split by output rows over the `tp`
   ranks (each rank computes `1/tp` of the attention heads and of the MLP width) and `o_proj` /
   `down_proj` by input columns, whose partial outputs are summed by an all-reduce: two all-reduces
   per layer forward, two more in backward. The ranks of one TP group therefore need the *same*
   micro-batch; the data-parallel size the batch is split by is `W / tp`.
3. **FSDP2** (`fully_shard` on the mesh's `dp_shard` dimension) then shards every parameter, TP
   shards included, over the `dp` ranks, exactly as the FSDP engine does over all ranks.
4. The worker registers `(dp_rank, is_collect = tp_rank == 0)` for its mesh, and the nd-mesh
   dispatch (`make_nd_compute_dataproto_dispatch_fn`) sends chunk `dp_rank` to both TP ranks and
   returns only tp rank 0's outputs (`is_mp_src_rank_with_outputs`).
5. Embeddings, norms and the (tied) LM head stay whole on every TP rank; their gradients are equal
   on the TP ranks because the TP layers all-reduce the gradients they pass back. The global grad
   norm therefore counts each element once: `sum(local shard^2) / replicas`, one all-reduce over
   all ranks (`global_grad_norm`).

With one process there is no mesh and the plain module trains, as in the FSDP engine. Everything
else (micro-batching, loss normalisation, LR schedule, DCP checkpoints, weight export) is the FSDP
engine's, on the data-parallel group instead of the world: a checkpoint saved with one layout
(dp=2) loads into another (tp=2), because DCP stores each tensor's global shape and offsets.

What minirl simplifies (verl does instead):

- the Hugging Face module itself is parallelised; verl converts the model to torchtitan's own
  implementation (`torchtitan.models`, via `derive_torchtitan_name_and_flavor`) and builds it
  with torchtitan's `Trainer`, which also shards embeddings and the LM head over TP (vocab-parallel,
  loss parallel) and applies sequence parallelism to the norms;
- no pipeline (`pipeline_parallel_size`), context (`context_parallel_size`), expert parallelism or
  HSDP replicas (`data_parallel_replicate_size`): each must stay 1. Pipeline stages with a 1F1B
  schedule are in the Megatron-layout engine (`megatron_engine.py`, `model_engine=megatron`);
- no torch.compile, activation checkpointing or offload; fp32 by default (verl: bfloat16);
- a value-head variant (`TorchTitanEngineWithValueHead`) for the critic; verl registers only the
  LM head at the pin.
"""

from __future__ import annotations

import logging
import math

import torch
import torch.distributed as dist
from torch import nn

from minirl.workers.engine.base import EngineRegistry
from minirl.workers.engine.fsdp_engine import FSDPEngine, FSDPEngineWithLMHead, FSDPEngineWithValueHead

__all__ = ["TorchTitanEngine", "TorchTitanEngineWithLMHead", "TorchTitanEngineWithValueHead",
           "global_grad_norm", "tensor_parallel_plan"]

logger = logging.getLogger(__name__)

# decoder-layer submodule -> how it is split over the TP ranks (Megatron's column / row parallel linears)
COLWISE = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
ROWWISE = ("self_attn.o_proj", "mlp.down_proj")
# the parallelisms verl's torchtitan engine offers and minirl's does not: each must stay 1
UNSUPPORTED_SIZES = ("data_parallel_replicate_size", "pipeline_parallel_size", "context_parallel_size",
                     "expert_parallel_size")


def tensor_parallel_plan(layer: nn.Module) -> dict:
    """`{submodule name: ColwiseParallel() | RowwiseParallel()}` for the projections `layer` has."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    names = {name for name, _ in layer.named_modules()}
    plan = {name: ColwiseParallel() for name in COLWISE if name in names}
    plan.update({name: RowwiseParallel() for name in ROWWISE if name in names})
    return plan


def _replicas(tensor) -> int:
    """How many ranks hold a copy of each element of `tensor` (a DTensor shard, or a plain tensor)."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    placements = getattr(tensor, "placements", None)
    if placements is None:
        return world  # a plain tensor: the same on every rank
    shards = math.prod(tensor.device_mesh.size(i) for i, p in enumerate(placements) if not p.is_replicate())
    return world // shards


def global_grad_norm(params) -> torch.Tensor:
    r"""The L2 norm of all gradients, each element counted once: one all-reduce over every rank.

    $$\|g\| = \sqrt{\textstyle\sum_{r} \sum_{p} \|g_{p,r}\|^2 / c_p}$$

    where $g_{p,r}$ is rank $r$'s local shard of parameter $p$'s gradient and $c_p$ the number of ranks
    holding a copy of each of its elements (`_replicas`): 1 for a parameter sharded over both mesh
    dimensions, `tp` for one sharded over `dp_shard` only, `W` for a plain tensor. torch's
    `clip_grad_norm_` cannot stack DTensors that live on different meshes (the 2-D TP x FSDP shards
    and the 1-D FSDP shards of the embeddings), so the engine sums local squares itself.
    """
    params = [p for p in params if p.grad is not None]
    device = params[0].grad.device if params else torch.device("cpu")
    total = torch.zeros((), dtype=torch.float64, device=device)
    for p in params:
        grad = p.grad
        local = grad.to_local() if hasattr(grad, "to_local") else grad
        total += local.detach().double().pow(2).sum() / _replicas(grad)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(total)
    return total.sqrt().float()


class TorchTitanEngine(FSDPEngine):
    """FSDP2 over `dp_shard` ranks x DTensor tensor parallelism over `tp` ranks, on one 2-D mesh.

    `engine_config` holds the FSDP engine's keys plus verl's torchtitan ones: `tensor_parallel_size`
    (default 1), `data_parallel_shard_size` (-1: world / tp), and `data_parallel_replicate_size`,
    `pipeline_parallel_size`, `context_parallel_size`, `expert_parallel_size` (must be 1).
    """

    STRATEGIES = ("torchtitan",)

    def __init__(self, model_config, engine_config, optimizer_config, checkpoint_config=None):
        super().__init__(model_config, engine_config, optimizer_config, checkpoint_config)
        for key in UNSUPPORTED_SIZES:
            if int(getattr(self.engine_config, key)) != 1:
                raise ValueError(f"torchtitan.{key}={getattr(self.engine_config, key)}: minirl's torchtitan engine "
                                 "runs dp_shard x tp only. Fix: leave it at 1.")
        self.tp_size = int(self.engine_config.tensor_parallel_size)
        shard = int(self.engine_config.data_parallel_shard_size)
        if self.tp_size < 1 or self.world_size % self.tp_size:
            raise ValueError(f"torchtitan.tensor_parallel_size={self.tp_size} must divide the {self.world_size} "
                             "ranks (trainer.nnodes * trainer.n_gpus_per_node). Fix: a divisor of the rank count.")
        self.dp_size = self.world_size // self.tp_size
        if shard not in (-1, self.dp_size):
            raise ValueError(f"torchtitan.data_parallel_shard_size={shard} x tensor_parallel_size={self.tp_size} "
                             f"must equal the {self.world_size} ranks. Fix: data_parallel_shard_size={self.dp_size} "
                             "(or -1, which infers it).")
        self.dp_rank, self.tp_rank = divmod(self.rank, self.tp_size)
        self.use_fsdp = self.dp_size > 1  # FSDP wraps (and reshards) only with several dp ranks

    # ================================================================== building
    def _build_fsdp_module(self, module: nn.Module) -> nn.Module:
        """Mesh `(dp_shard, tp)`, TP plan on every decoder layer, then `fully_shard` on `dp_shard`."""
        if self.world_size == 1:
            return module
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        from torch.distributed.tensor.parallel import parallelize_module

        self.device_mesh = init_device_mesh(self.device.type, (self.dp_size, self.tp_size),
                                            mesh_dim_names=("dp_shard", "tp"))
        self._sync_module_states(module)  # every rank starts from rank 0's weights
        layers = self._decoder_layers(module)
        if self.tp_size > 1:
            self._check_divisible_by_tp(module)
            for layer in layers:
                parallelize_module(layer, self.device_mesh["tp"], tensor_parallel_plan(layer))
        if self.use_fsdp:
            reshard = self.engine_config.reshard_after_forward
            kwargs = {"mesh": self.device_mesh["dp_shard"],
                      "reshard_after_forward": reshard not in ("never", False),
                      "mp_policy": MixedPrecisionPolicy(
                          param_dtype=None if self.param_dtype == torch.float32 else self.param_dtype,
                          reduce_dtype=self.reduce_dtype)}
            for layer in layers:
                fully_shard(layer, **kwargs)
            fully_shard(module, **kwargs)
        return module

    @staticmethod
    def _decoder_layers(module: nn.Module) -> list[nn.Module]:
        names = set(getattr(module, "_no_split_modules", None) or [])
        return [m for m in module.modules() if type(m).__name__ in names]

    def _check_divisible_by_tp(self, module: nn.Module) -> None:
        """Each TP rank must get whole attention heads, whole KV heads and an equal slice of the MLP."""
        config = getattr(module, "config", None)
        for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
            value = getattr(config, key, None)
            if value is not None and value % self.tp_size:
                raise ValueError(f"torchtitan.tensor_parallel_size={self.tp_size} does not divide the model's "
                                 f"{key}={value}: a TP rank would hold part of a head (or of the MLP). Fix: a "
                                 f"tensor_parallel_size that divides {key}.")

    # ================================================================== ranks
    def get_data_parallel_size(self) -> int:
        return self.dp_size

    def get_data_parallel_rank(self) -> int:
        return self.dp_rank

    def get_data_parallel_group(self):
        return self.device_mesh["dp_shard"].get_group() if self.dp_size > 1 else None

    def is_mp_src_rank_with_outputs(self) -> bool:
        """Only TP rank 0 of each group reports (verl: `TorchTitanEngine.is_mp_src_rank_with_outputs`)."""
        return self.tp_rank == 0

    # ================================================================== weights for the rollout
    def get_per_tensor_param(self):
        """Full weights as the FSDP engine gives them; a 2-D shard is gathered over both mesh dimensions.

        torch warns once per such tensor that it gathers `(StridedShard, Shard)` in two all-gathers; that
        is the expected cost of a TP x FSDP shard, so the warning is silenced here.
        """
        log = logging.getLogger("torch.distributed.tensor._redistribute")
        level = log.level
        log.setLevel(logging.ERROR)
        try:
            yield from super().get_per_tensor_param()
        finally:
            log.setLevel(level)

    # ================================================================== optimizer
    def _build_optimizer(self, module: nn.Module) -> torch.optim.Optimizer:
        """AdamW as in the FSDP engine, one parameter at a time: the fused path cannot mix device meshes."""
        optimizer = super()._build_optimizer(module)
        for group in optimizer.param_groups:
            group["foreach"] = False
        return optimizer

    def optimizer_step(self) -> float:
        """Clip by the global grad norm (`global_grad_norm`), step AdamW; skip a non-finite step."""
        max_norm = self.optimizer_config.clip_grad
        params = [p for p in self.module.parameters() if p.grad is not None]
        grad_norm = global_grad_norm(params)
        if not torch.isfinite(grad_norm):
            logger.warning("grad_norm is not finite (%s): skipping this optimizer step.", grad_norm.item())
            self.optimizer.zero_grad(set_to_none=True)
            return grad_norm.item()
        coef = float(max_norm) / (grad_norm.item() + 1e-6)
        if coef < 1.0:  # the same rule as torch.nn.utils.clip_grad_norm_
            for p in params:
                p.grad.mul_(coef)
        self.optimizer.step()
        return grad_norm.item()


@EngineRegistry.register(model_type="language_model", backend="torchtitan", device=["cpu", "cuda"])
class TorchTitanEngineWithLMHead(TorchTitanEngine, FSDPEngineWithLMHead):
    """Actor, reference policy: `log_probs` (and `entropy`) of the response tokens, as the FSDP LM head."""


@EngineRegistry.register(model_type="value_model", backend="torchtitan", device=["cpu", "cuda"])
class TorchTitanEngineWithValueHead(TorchTitanEngine, FSDPEngineWithValueHead):
    """Critic: `values` per response token, as the FSDP value head (verl has no torchtitan value engine)."""
