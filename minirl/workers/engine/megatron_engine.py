r"""The Megatron-layout engine: tensor x pipeline x data parallelism (TP x PP x DP) on CPU, over gloo.

Mirrors `MegatronEngine` (`verl/workers/engine/megatron/transformer_impl.py:164`),
`MegatronEngineWithLMHead` (`verl/workers/engine/megatron/transformer_impl.py:1164`) and
`MegatronEngineWithValueHead` (`verl/workers/engine/megatron/transformer_impl.py:1498`), configured by
verl's `megatron` engine group (`verl/trainer/config/engine/megatron.yaml`: `tensor_model_parallel_size`,
`pipeline_model_parallel_size`, ...) and selected by `model_engine=megatron`.

**What it is built on.** verl's engine is megatron-core: `mpu.initialize_model_parallel` for the
process groups, a `GPTModel` built by Megatron-Bridge from the Hugging Face weights, megatron's DDP
(gradient buffers, reduce-scatter, the distributed optimizer) and `get_forward_backward_func()` for the
pipeline schedule. megatron-core's groups run over gloo, but its pipeline schedule allocates CUDA
tensors, so a forward-backward with pp > 1 cannot run on a CPU-only torch (ENVIRONMENT-FACTS). This
engine is plain torch with megatron's names instead:

- the rank layout and process groups: `minirl.workers.engine.megatron_parallel.ParallelState`
  (megatron-core's `parallel_state`, rank order tp-dp-pp, one `DeviceMesh` `(pp, dp, tp)`);
- pipeline stages: the Hugging Face model pruned to its stage (`build_pipeline_stage`), first stage
  with the embedding (`pre_process`), last with the norm and head (`post_process`);
- tensor parallelism: torch's DTensor `ColwiseParallel` / `RowwiseParallel` on every decoder layer of
  the stage, as the torchtitan engine (megatron-core: its own `ColumnParallelLinear` /
  `RowParallelLinear`, with sequence parallelism and a vocabulary-parallel embedding and head);
- the micro-batch schedule: minirl's 1F1B (`minirl.workers.engine.pipeline_schedule`), megatron-core's
  `forward_backward_pipelining_without_interleaving` rebuilt with `isend` / `irecv`;
- data parallelism: each TP/PP shard whole on its `dp` replicas; after the schedule
  `finalize_model_grads` averages the gradients over the dp group (megatron's DDP) and sums the tied
  embedding's two copies over the embedding group; then one AdamW step per rank on its own shard
  (megatron-core with `use_distributed_optimizer: True` shards the optimizer state over dp, ZeRO-1).

How one global mini-batch maps onto `W = tp x pp x dp` ranks (chapter 07):

1. `dp = W / (tp * pp)`: the nd-mesh dispatch gives each dp rank `1/dp` of the mini-batch, and every
   TP and PP rank of that dp rank the *same* rows (`get_data_parallel_rank`).
2. The rank cuts its rows into micro-batches; the pipeline streams them through the stages in the
   1F1B order, hidden states forward, their gradients back. Only the last stage has logits, log-probs
   and the loss; only tp rank 0 of the last stage reports (`is_mp_src_rank_with_outputs`).
3. Gradients: averaged over dp, the embedding's copies summed, the global norm counted once per
   element (`optimizer_step`), clipped, AdamW.

The engine contract is the FSDP engine's (`BaseEngine`): the same loss functions, the same
`train_batch` / `infer_batch` results on every rank, checkpoints and weight export in Hugging Face
names. A checkpoint saved by the FSDP engine or by this one under any layout loads under any other
(`torch.distributed.checkpoint` stores global shapes and offsets), and `get_per_tensor_param` gives
every rank the whole model.

What minirl simplifies (verl does instead):

- outputs: the last stage broadcasts the micro-batch outputs (log-probs, loss, metrics) to the other
  stages of its pipeline, so every rank's `train_batch` / `infer_batch` returns the same numbers;
  verl's other stages return nothing, and the worker reads only the reporting rank;
- no context, expert, virtual-pipeline or sequence parallelism, no distributed optimizer
  (`use_distributed_optimizer`), no overlap of gradient reduction with backward, no fp8 or
  Megatron-Bridge; padded batches (verl: packed THD sequences), and `actor.use_prefix_grouper` is not
  applied (the same numbers, without the shared-prompt saving); fp32 by default (verl: bf16);
- checkpoints: `torch.distributed.checkpoint` of the Hugging Face-named model and AdamW state, in the
  FSDP engine's format (verl: megatron's `dist_checkpointing` through `MegatronCheckpointManager`).
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from types import SimpleNamespace

import torch
import torch.distributed as dist
from torch import nn

from minirl.trace.worker_trace import note_micro_batches, note_pipeline_schedule
from minirl.workers.engine.base import EngineRegistry
from minirl.workers.engine.forward_layout import leading_padding_columns
from minirl.workers.engine.fsdp_engine import FSDPEngine, FSDPEngineWithLMHead, FSDPEngineWithValueHead
from minirl.workers.engine.megatron_parallel import (
    ParallelState,
    build_pipeline_stage,
    check_layout,
    layers_of_stage,
    rank_layout,
    stage_forward,
)
from minirl.workers.engine.pipeline_schedule import (
    P2PCommunicator,
    ScheduleRecorder,
    get_forward_backward_func,
)
from minirl.workers.engine.torchtitan_engine import tensor_parallel_plan
from minirl.workers.engine.utils import (
    get_rng_state,
    prepare_micro_batches,
    quiet_single_process_dcp,
    set_rng_state,
)

__all__ = ["MegatronEngine", "MegatronEngineWithLMHead", "MegatronEngineWithValueHead"]

logger = logging.getLogger(__name__)
EMBEDDING = "model.embed_tokens.weight"  # the tied matrix's name in checkpoints (the FSDP engine's optimizer key)


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a tensor: a DTensor's local shard (sharing storage), else the tensor."""
    return t.to_local() if hasattr(t, "to_local") else t


class MegatronEngine(FSDPEngine):
    """TP x PP x DP in megatron's rank order; reuses the FSDP engine's model loading, optimizer and modes.

    `engine_config` holds verl's `megatron` keys that minirl reads: `tensor_model_parallel_size`,
    `pipeline_model_parallel_size` (default 1 each), `context_parallel_size`, `expert_model_parallel_size`
    (1 only), `virtual_pipeline_model_parallel_size` (null only), plus the FSDP engine's `forward_only`,
    `seed`, `device`, `param_dtype`. The data-parallel size is the rest: `world / (tp * pp)`.
    """

    STRATEGIES = ("megatron",)

    def __init__(self, model_config, engine_config, optimizer_config, checkpoint_config=None):
        super().__init__(model_config, engine_config, optimizer_config, checkpoint_config)
        ec = self.engine_config  # typed (`minirl.config.schema_engine.EngineConfig`): its defaults are the schema's
        if ec.use_prefix_grouper:  # an optimisation with the same numbers: skipped
            logger.info("MegatronEngine: use_prefix_grouper is not applied (pipeline stages run the padded forward).")
        self.tp_size = int(ec.tensor_model_parallel_size)
        self.pp_size = int(ec.pipeline_model_parallel_size)
        self.dp_size = check_layout(self.world_size, self.tp_size, self.pp_size, cp=int(ec.context_parallel_size),
                                    ep=int(ec.expert_model_parallel_size), vpp=ec.virtual_pipeline_model_parallel_size)
        coords = rank_layout(self.world_size, self.tp_size, self.pp_size)[self.rank]
        self.tp_rank, self.dp_rank, self.pp_rank = coords["tp"], coords["dp"], coords["pp"]
        self.use_fsdp = False  # never FSDP: the eval-mode reshard and the FSDP gradient-sync context stay off
        self._share_prefix = False
        self.parallel_state = ParallelState()
        self.stage = None
        self._export = []  # (Hugging Face name, shape, dtype) of the whole model, in state_dict order
        self.last_schedule: list[dict] = []  # the ops of the last forward_backward_batch (also in the trace)

    # ================================================================== building
    def _build_fsdp_module(self, module: nn.Module) -> nn.Module:
        """`initialize_model_parallel`, then prune to this rank's pipeline stage and apply the TP plan.

        (The FSDP engine's hook for wrapping the loaded module; here it builds the Megatron layout.)
        """
        config = getattr(module, "config", None)
        check_layout(self.world_size, self.tp_size, self.pp_size, num_layers=getattr(config, "num_hidden_layers", None),
                     model_config=config)
        self.parallel_state = ParallelState.initialize(self.tp_size, self.pp_size, self.device.type)
        self.device_mesh = self.parallel_state.mesh
        if self.world_size > 1:
            self._sync_module_states(module)  # every stage starts from rank 0's weights
        self._export = [(name, tuple(t.shape), t.dtype) for name, t in module.state_dict().items()]
        self._param_names = [name for name, _ in module.named_parameters()]  # the whole model's, tied once
        self.stage = build_pipeline_stage(module, self.pp_rank, self.pp_size)
        if self.tp_size > 1:
            from torch.distributed.tensor.parallel import parallelize_module

            for layer in module.model.layers.values():
                parallelize_module(layer, self.device_mesh["tp"], tensor_parallel_plan(layer))
        return module

    def _build_optimizer(self, module: nn.Module) -> torch.optim.Optimizer:
        """AdamW as in the FSDP engine, one parameter at a time (plain tensors and TP DTensors side by side)."""
        optimizer = super()._build_optimizer(module)
        for group in optimizer.param_groups:
            group["foreach"] = False
        return optimizer

    # ================================================================== ranks
    def get_data_parallel_size(self) -> int:
        return self.dp_size

    def get_data_parallel_rank(self) -> int:
        return self.dp_rank

    def get_data_parallel_group(self):
        return self.parallel_state.get_data_parallel_group()

    def is_mp_src_rank_with_outputs(self) -> bool:
        """tp rank 0 of the last pipeline stage reports (verl: `MegatronEngine.is_mp_src_rank_with_outputs`)."""
        return self.tp_rank == 0 and self.pp_rank == self.pp_size - 1

    def layout(self) -> dict:
        """The base layout (mesh `(pp, dp, tp)`, coordinates, shards) plus this rank's pipeline stage."""
        out = super().layout()
        out["coords"] = {"pp": self.pp_rank, "dp": self.dp_rank, "tp": self.tp_rank}
        out["mesh"] = {"pp": self.pp_size, "dp": self.dp_size, "tp": self.tp_size}
        if self.stage is not None:
            out["stage"] = {"pp_rank": self.pp_rank, "layers": list(self.stage.layers),
                            "pre_process": self.stage.pre_process, "post_process": self.stage.post_process,
                            "shared_embedding": self.stage.shared_embedding}
        return out

    # ================================================================== forward / backward
    def forward_backward_batch(self, data, loss_function: Callable | None, forward_only: bool = False) -> list[dict]:
        """Micro-batches through the pipeline schedule; per-micro-batch outputs on every rank.

        Like the FSDP engine, every micro-batch's `meta_info` gets `dp_size`, `batch_num_tokens` and
        `global_batch_size` (summed over the dp group) for the loss normalisation. The schedule's ops
        (which micro-batch this stage ran forward and backward, and when) go into the rank's trace.
        """
        if not forward_only and loss_function is None:
            raise ValueError("forward_backward_batch(forward_only=False) needs a loss_function to backpropagate.")
        micro_batches = prepare_micro_batches(data, data.meta_info.get("micro_batch_size"))
        self._check_same_micro_batch_count(len(micro_batches))
        global_info = self._global_batch_info(data)
        note_micro_batches(micro_batches, global_info, dp_rank=self.dp_rank, pp_rank=self.pp_rank, tp_rank=self.tp_rank)
        inputs = [self._stage_inputs(mb, {**data.meta_info, **global_info}) for mb in micro_batches]
        results: list[dict | None] = [None] * len(micro_batches)

        def forward_step(i: int, hidden):
            return self._forward_step(micro_batches[i], inputs[i], hidden, loss_function, forward_only, results, i)

        hidden_size = self.module.config.hidden_size
        p2p = P2PCommunicator(self.parallel_state.get_pipeline_model_parallel_prev_rank(),
                              self.parallel_state.get_pipeline_model_parallel_next_rank(),
                              next(self.module.parameters()).dtype, self.device)
        recorder = ScheduleRecorder()
        with torch.no_grad() if forward_only else nullcontext():
            get_forward_backward_func(self.pp_size)(
                forward_step, len(micro_batches), forward_only, recorder, p2p=p2p, pp_rank=self.pp_rank,
                pp_size=self.pp_size, tensor_shape=lambda i: (*inputs[i]["input_ids"].shape, hidden_size))
        if not forward_only:
            self.finalize_model_grads()
        self.last_schedule = recorder.ops
        note_pipeline_schedule(recorder.ops, pp_rank=self.pp_rank, pp_size=self.pp_size, tp_rank=self.tp_rank,
                               dp_rank=self.dp_rank, num_micro_batches=len(micro_batches), forward_only=forward_only)
        return self._broadcast_from_last_stage(results)

    def _stage_inputs(self, micro_batch, meta_info: dict) -> dict:
        """The micro-batch's tensors with the prompts' common left padding cut (as `model_forward` does)."""
        micro_batch.meta_info = meta_info
        micro_batch.batch = micro_batch.batch.to(self.device)
        batch = micro_batch.batch
        present = set(batch.keys())  # (TensorDict refuses `key in td`)
        missing = [k for k in ("input_ids", "attention_mask", "position_ids", "responses") if k not in present]
        if missing:
            raise KeyError(f"The batch is missing {missing}; the engine needs input_ids, attention_mask, position_ids "
                           f"(each [B, prompt+response]) and responses ([B, response]). It has {sorted(batch.keys())}.")
        response_length = batch["responses"].shape[-1]
        left = leading_padding_columns(batch["attention_mask"], response_length)
        return {"input_ids": batch["input_ids"][:, left:], "attention_mask": batch["attention_mask"][:, left:],
                "position_ids": batch["position_ids"][..., left:], "keep": response_length + 1}

    def _forward_step(self, micro_batch, inputs: dict, hidden, loss_function, forward_only: bool, results: list,
                      index: int):
        """One micro-batch on this stage; on the last stage also outputs, loss and metrics (kept in `results`)."""
        fp32 = self.param_dtype == torch.float32
        with nullcontext() if fp32 else torch.autocast(device_type=self.device.type, dtype=self.param_dtype):
            x = inputs["input_ids"] if self.stage.pre_process else hidden
            out = stage_forward(self.module, self.stage, x, inputs["attention_mask"], inputs["position_ids"],
                                inputs["keep"])
            if not self.stage.post_process:
                return out.to(next(self.module.parameters()).dtype)
            # the loss function doubles as the logits processor (top-k distillation reads the full-vocab logits here)
            model_output = self.prepare_model_outputs(SimpleNamespace(logits=out), micro_batch,
                                                      logits_processor_func=loss_function)
            loss, metrics = (None, {}) if loss_function is None else loss_function(model_output, micro_batch)
        results[index] = {"model_output": {k: v.detach().cpu() if torch.is_tensor(v) else v
                                           for k, v in model_output.items()},
                          "loss": None if loss is None else loss.detach().item(),
                          "metrics": {k: v.detach().float().mean().item() if torch.is_tensor(v) else v
                                      for k, v in (metrics or {}).items()}}
        return None if forward_only else loss

    def _broadcast_from_last_stage(self, results: list) -> list[dict]:
        """The last stage's per-micro-batch outputs, on every stage of this rank's pipeline (minirl only)."""
        if self.pp_size == 1:
            return results
        box = [results if self.parallel_state.is_pipeline_last_stage() else None]
        dist.broadcast_object_list(box, src=self.parallel_state.pipeline_ranks[-1],
                                   group=self.parallel_state.get_pipeline_model_parallel_group())
        return box[0]

    def finalize_model_grads(self) -> None:
        """Average the gradients over the dp group; sum the tied embedding's two copies over the embedding group.

        megatron-core's `finalize_model_grads`: `finish_grad_sync` of its DDP (all-reduce or, with the
        distributed optimizer, reduce-scatter over dp) and `_allreduce_word_embedding_grads`.
        """
        group = self.parallel_state.get_data_parallel_group()
        if group is not None:
            for p in self.module.parameters():
                if p.grad is not None:
                    grad = _local(p.grad)
                    dist.all_reduce(grad, group=group)
                    grad.div_(self.dp_size)
        embedding_group = self.parallel_state.get_embedding_group()
        if embedding_group is not None and self.stage.tied:
            base = self.module.model
            weight = base.embed_tokens.weight if self.stage.pre_process else getattr(self.module, self.stage.head).weight
            dist.all_reduce(weight.grad, group=embedding_group)

    # ================================================================== optimizer
    def optimizer_step(self) -> float:
        r"""Clip by the global grad norm and step AdamW; a non-finite norm skips the step.

        $\|g\| = \sqrt{\sum_p \|g_p\|^2}$ with each element counted once: a TP shard on its rank, a
        tensor whole on every TP rank only on tp rank 0, the last stage's copy of a tied embedding not
        at all (megatron-core's `param_is_not_tensor_parallel_duplicate` and `param_is_not_shared`);
        the squares are summed over all ranks and divided by dp (the dp replicas hold equal gradients
        after `finalize_model_grads`).
        """
        max_norm = float(self.optimizer_config.clip_grad)  # typed `OptimConfig`, as in the FSDP engine
        params = [p for p in self.module.parameters() if p.grad is not None]
        shared = getattr(self.module, self.stage.head).weight if self.stage.shared_embedding else None
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        for p in params:
            if p is shared or (not hasattr(p.grad, "to_local") and self.tp_rank != 0):
                continue
            total += _local(p.grad).detach().double().pow(2).sum()
        if self.world_size > 1:
            dist.all_reduce(total)
            total /= self.dp_size
        grad_norm = total.sqrt().float()
        if not torch.isfinite(grad_norm):
            logger.warning("grad_norm is not finite (%s): skipping this optimizer step.", grad_norm.item())
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped_optimizer_steps = getattr(self, "skipped_optimizer_steps", 0) + 1
            return grad_norm.item()
        coef = float(max_norm) / (grad_norm.item() + 1e-6)
        if coef < 1.0:  # torch.nn.utils.clip_grad_norm_'s rule
            for p in params:
                p.grad.mul_(coef)
        self.optimizer.step()
        return grad_norm.item()

    # ================================================================== weights for the rollout
    def _owner_stage(self, name: str) -> int:
        """The pipeline stage that holds weight `name` (Hugging Face naming)."""
        parts = name.split(".")
        if parts[:2] == ["model", "layers"]:
            index = int(parts[2])
            num_layers = self.module.config.num_hidden_layers
            return next(s for s in range(self.pp_size) if index in layers_of_stage(num_layers, self.pp_size, s))
        return 0 if name.startswith("model.embed_tokens") else self.pp_size - 1

    def get_per_tensor_param(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield `(name, full weight on CPU)` for the whole model, in Hugging Face naming, on every rank.

        Each weight is gathered over TP on the stage that holds it (`DTensor.full_tensor()`), then
        broadcast from that stage over the pipeline group: a collective, so **every rank must consume
        the iterator, in the same order** (verl: Megatron-Bridge's `export_hf_weights`, which does the
        same gathers on GPUs). Tied weights appear under both names, as in the FSDP engine.
        """
        local = self.module.state_dict()
        group = self.parallel_state.get_pipeline_model_parallel_group()
        for name, shape, dtype in self._export:
            owner = self._owner_stage(name)
            if owner == self.pp_rank:
                tensor = local[name]
                tensor = (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).detach()
            else:
                tensor = torch.empty(shape, dtype=dtype, device=self.device)
            if group is not None:  # on the engine's device: NCCL broadcasts device tensors only
                tensor = tensor.to(self.device)
                dist.broadcast(tensor, src=self.parallel_state.pipeline_ranks[owner], group=group)
            yield name, tensor.to("cpu", copy=True)

    # ================================================================== checkpoints
    def _checkpoint_state(self) -> dict:
        """`{"model": Hugging Face-named tensors, "optimizer": {"state": {name: AdamW state}}}` of this stage.

        The same keys as the FSDP engine's DCP checkpoint (`optimizer.state.<name>.exp_avg` ...,
        `optimizer.param_groups`, which name the whole model's parameters on every stage), so either
        engine, under any layout, loads the other's. The last stage's copy of a tied embedding
        stores its AdamW state under the embedding's name (equal to the first stage's: same gradients).
        A parameter without AdamW state yet (before the first step) gets zeros and step 0.
        """
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        state = {"model": get_model_state_dict(self.module)}
        if self.optimizer is None:
            return state
        shared = getattr(self.module, self.stage.head).weight if self.stage.shared_embedding else None
        optim = {}
        for name, p in self.module.named_parameters():
            s = self.optimizer.state.get(p) or {}
            optim[EMBEDDING if p is shared else name] = {
                "step": s.get("step", torch.zeros((), dtype=torch.float32)),
                "exp_avg": s.get("exp_avg", torch.zeros_like(p)), "exp_avg_sq": s.get("exp_avg_sq", torch.zeros_like(p))}
        groups = [{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
        groups[0]["params"] = list(self._param_names)  # the whole model's names, as the FSDP engine saves them
        state["optimizer"] = {"state": optim, "param_groups": groups}
        return state

    def save_checkpoint(self, local_path: str, global_step: int = 0, **kwargs) -> None:
        """Write this stage's model and AdamW state (DCP, global shapes) and per-rank extra state.

        All ranks call it with the same path. Same layout on disk as the FSDP engine's checkpoint.
        """
        import torch.distributed.checkpoint as dcp

        os.makedirs(local_path, exist_ok=True)
        with quiet_single_process_dcp():
            dcp.save(self._checkpoint_state(), checkpoint_id=local_path, no_dist=not self._has_process_group())
        extra = {"lr_scheduler": None if self.lr_scheduler is None else self.lr_scheduler.state_dict(),
                 "rng": get_rng_state(), "global_step": int(global_step)}
        torch.save(extra, self._extra_state_path(local_path))
        if self.world_size > 1:
            dist.barrier()

    def load_checkpoint(self, local_path: str, **kwargs) -> None:
        """Load a checkpoint saved by this engine or the FSDP engine, under any layout.

        DCP reads every tensor this stage holds by its global offsets; the AdamW state is put back
        per parameter; the LR schedule comes from this rank's extra state, or rank 0's of the saving
        run when it had another world size (the schedule is the same on every rank).
        """
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        if not os.path.isdir(local_path):
            raise FileNotFoundError(f"No checkpoint directory at {local_path!r}.")
        state = self._checkpoint_state()
        if "optimizer" in state:  # fresh tensors to load into (not the optimizer's own); lr comes from the schedule
            state["optimizer"] = {"state": {n: {k: v.clone() for k, v in s.items()}
                                            for n, s in state["optimizer"]["state"].items()}}
        with quiet_single_process_dcp():
            dcp.load(state, checkpoint_id=local_path, no_dist=not self._has_process_group())
        set_model_state_dict(self.module, state["model"])
        if self.optimizer is not None:
            shared = getattr(self.module, self.stage.head).weight if self.stage.shared_embedding else None
            for name, p in self.module.named_parameters():
                self.optimizer.state[p] = dict(state["optimizer"]["state"][EMBEDDING if p is shared else name])
        extra_path = self._extra_state_path(local_path)
        if not os.path.exists(extra_path):
            others = sorted(glob.glob(os.path.join(local_path, "extra_state_world_size_*_rank_0.pt")))
            if not others:
                raise FileNotFoundError(f"{local_path!r} holds no extra_state_*.pt: not a minirl engine checkpoint.")
            extra_path = others[0]
        extra = torch.load(extra_path, weights_only=False)
        if self.lr_scheduler is not None and extra["lr_scheduler"] is not None:
            self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
            for group, lr in zip(self.optimizer.param_groups, self.lr_scheduler.get_last_lr()):
                group["lr"] = lr
        set_rng_state(extra["rng"])
        if self.world_size > 1:
            dist.barrier()


@EngineRegistry.register(model_type="language_model", backend="megatron", device=["cpu", "cuda"])
class MegatronEngineWithLMHead(MegatronEngine, FSDPEngineWithLMHead):
    """Actor, reference policy: `log_probs` (and `entropy`) of the response tokens, from the last stage."""


@EngineRegistry.register(model_type="value_model", backend="megatron", device=["cpu", "cuda"])
class MegatronEngineWithValueHead(MegatronEngine, FSDPEngineWithValueHead):
    """Critic: `values` per response token, from the last stage's `score` head."""
