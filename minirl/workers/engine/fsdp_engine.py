"""The FSDP2 training engine: one Hugging Face model, sharded over data-parallel ranks, trained with AdamW.

Mirrors `verl/workers/engine/fsdp/transformer_impl.py`: `FSDPEngine`
(`verl/workers/engine/fsdp/transformer_impl.py:87`), `FSDPEngineWithLMHead`
(`verl/workers/engine/fsdp/transformer_impl.py:1121`) and `FSDPEngineWithValueHead`
(`verl/workers/engine/fsdp/transformer_impl.py:1568`).

How one global mini-batch maps onto ranks (chapter 07):

1. The worker gives each of the `W` data-parallel ranks `1/W` of the mini-batch.
2. With `W > 1`, every decoder layer and then the whole model are wrapped with FSDP2's
   `fully_shard`: each rank stores `1/W` of every weight (and of its gradient and AdamW state),
   gathers a layer's full weights just before using it, and frees them after.
3. `forward_backward_batch` cuts the rank's share into micro-batches of `micro_batch_size`
   sequences and accumulates their gradients. Before the loop it all-reduces the global numbers
   the loss function needs (`dp_size`, `batch_num_tokens`, `global_batch_size`), so that the sum
   of the micro-batch losses over all ranks is the global token mean (see `agg_loss`,
   `verl/trainer/ppo/core_algos.py:1140`). FSDP *averages* gradients over ranks, which is why loss
   functions multiply by `dp_size`.
4. `optimizer_step` clips the *global* gradient norm and steps AdamW on each rank's shard.

With one process (no `torch.distributed` process group, or a group of size 1) the engine trains the
plain, unwrapped module: same code path, no sharding, no collectives.

What minirl simplifies (verl does instead):

- always FSDP2 (`fully_shard`), also when `strategy="fsdp"`; verl's `"fsdp"` means the FSDP1
  wrapper, which misbehaves on CPU (per-rank grad norms, crashes in full state dicts);
- padded `[batch, seq]` inputs (only the prompts' common left padding is trimmed, see
  `minirl.workers.engine.forward_layout`) and a plain HF forward; verl removes all padding (packed
  sequences, flash-attn varlen) and supports Ulysses sequence parallelism;
- fp32 by default; verl defaults to bf16 parameters (fp32 master weights for training);
- checkpoints are `torch.distributed.checkpoint` (sharded) state dicts for model and optimizer
  plus one small file per rank (LR schedule, RNG); verl's `FSDPCheckpointManager`
  (`verl/utils/checkpoint/fsdp_checkpoint_manager.py:57`) also saves the HF config, tokenizer and
  optionally full HF weights, and keeps only the last `max_ckpt_to_keep` checkpoints;
- no CPU offload, LoRA, liger/fused kernels, gradient-sync overlap tuning, or QAT.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

import torch
import torch.distributed as dist
from torch import nn

from minirl.config.schema_engine import EngineConfig, EngineModelConfig, OptimConfig
from minirl.trace.worker_trace import note_micro_batches
from minirl.utils import hooks
from minirl.utils.config import omega_conf_to_dataclass
from minirl.utils.torch_functional import (
    calculate_sum_pi_squared_from_logits,
    entropy_from_logits,
    logprobs_from_logits,
)
from minirl.workers.engine.base import BaseEngine, EngineRegistry
from minirl.workers.engine.forward_layout import model_forward
from minirl.workers.engine.utils import (
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
    get_device_name,
    get_rng_state,
    prepare_micro_batches,
    quiet_single_process_dcp,
    set_rng_state,
    to_torch_dtype,
)

__all__ = ["FSDPEngine", "FSDPEngineWithLMHead", "FSDPEngineWithValueHead"]

logger = logging.getLogger(__name__)


class FSDPEngine(BaseEngine):
    """Builds, shards and trains one model; subclasses say how the model is built and what it outputs.

    Args:
        model_config: `.path` (a local Hugging Face model directory) or `.module` (an already-built
            `nn.Module`, which the engine takes over and trains in place); optional `.dtype`
            (default fp32), `.trust_remote_code`, `.enable_gradient_checkpointing`.
        engine_config: `.strategy` (`"fsdp"`/`"fsdp2"`), `.forward_only` (a reference model: no
            optimizer), `.seed`, `.reshard_after_forward` (default True), `.param_dtype` or
            `.mixed_precision.{param_dtype, reduce_dtype}` (default: everything fp32), `.device`
            (default: `"cuda"` if visible, else `"cpu"`), `.use_prefix_grouper` (run each distinct
            prompt of a micro-batch once: `minirl.workers.engine.forward_layout`).
        optimizer_config: verl's `optim` keys: `lr`, `weight_decay`, `betas`, `clip_grad`,
            `lr_warmup_steps`, `lr_warmup_steps_ratio`, `total_training_steps`,
            `lr_scheduler_type` (`"constant"` | `"cosine"`), `min_lr_ratio`, `num_cycles`,
            `override_optimizer_config` (extra AdamW keyword arguments, e.g. `{"eps": 1e-6}`).
        checkpoint_config: kept for verl's signature; unused (verl: what to save and load).
    """

    STRATEGIES = ("fsdp", "fsdp2")  # the `strategy` values this engine runs

    def __init__(self, model_config, engine_config, optimizer_config, checkpoint_config=None):
        super().__init__()
        # typed sections, as verl's engines read them: defaults are the schema's, an unknown key is an error
        self.model_config = omega_conf_to_dataclass(model_config, EngineModelConfig)
        self.engine_config = omega_conf_to_dataclass(engine_config, EngineConfig)
        self.optimizer_config = None if optimizer_config is None else omega_conf_to_dataclass(optimizer_config,
                                                                                               OptimConfig)
        self.checkpoint_config = checkpoint_config
        self.mode = None  # "train" | "eval" | None, set by the mode context managers

        strategy = self.engine_config.strategy
        if strategy not in self.STRATEGIES:
            raise ValueError(f"{type(self).__name__} runs strategy {' or '.join(map(repr, self.STRATEGIES))}, "
                             f"got strategy={strategy!r}.")
        self.forward_only = bool(self.engine_config.forward_only)
        # verl: actor.use_prefix_grouper; a KV cache cannot be used with gradient checkpointing
        self._share_prefix = bool(self.engine_config.use_prefix_grouper) and not bool(
            self.model_config.enable_gradient_checkpointing)

        distributed = dist.is_available() and dist.is_initialized()
        self.world_size = dist.get_world_size() if distributed else 1
        self.rank = dist.get_rank() if distributed else 0
        self.use_fsdp = self.world_size > 1  # one rank: train the plain module, nothing to shard

        device_name = self.engine_config.device or get_device_name()
        self.device = (
            torch.device("cuda", torch.cuda.current_device())
            if device_name == "cuda"
            else torch.device("cpu")
        )

        self.param_dtype = to_torch_dtype(self.engine_config.param_dtype)  # verl: bf16 unless mixed_precision says
        self.reduce_dtype = torch.float32  # verl: mixed_precision.reduce_dtype (fp32 by default)

        self.module: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.lr_scheduler = None
        self.device_mesh = None

    # ================================================================== building
    def initialize(self) -> None:
        """Build the module, shard it when `world_size > 1`, then AdamW + LR schedule unless forward-only."""
        torch.manual_seed(int(self.engine_config.seed))  # fresh heads (e.g. the critic's value head) start the same
        module = self._build_module()
        self.module = self._build_fsdp_module(module)
        if not self.forward_only:
            self.optimizer = self._build_optimizer(self.module)
            self.lr_scheduler = self._build_lr_scheduler(self.optimizer)

    def _build_module(self) -> nn.Module:
        """Take `model_config.module`, or load `model_config.path` with the subclass's auto class."""
        dtype = to_torch_dtype(self.model_config.dtype)
        module = self.model_config.module
        if module is None:
            path = self.model_config.path
            if path is None:
                raise ValueError(
                    "model_config needs either .path (a local Hugging Face model directory) or "
                    ".module (an already-built nn.Module); both are missing."
                )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "some weights newly initialized" for a value head
                module = self._load_hf_module(str(path), dtype)
        module.to(dtype=dtype)
        if self.model_config.enable_gradient_checkpointing:
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return module.to(self.device)

    def _load_hf_module(self, path: str, dtype: torch.dtype) -> nn.Module:
        raise NotImplementedError("subclasses choose the Hugging Face auto class")

    def _build_fsdp_module(self, module: nn.Module) -> nn.Module:
        """Wrap each decoder layer, then the root, with FSDP2 `fully_shard` (verl: `apply_fsdp2`)."""
        if not self.use_fsdp:
            logger.info("FSDPEngine: world_size=1, training the plain (unsharded) module.")
            return module
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        self.device_mesh = init_device_mesh(self.device.type, (self.world_size,), mesh_dim_names=("fsdp",))
        self._sync_module_states(module)
        fsdp_kwargs = {
            "mesh": self.device_mesh,
            "reshard_after_forward": bool(self.engine_config.reshard_after_forward),
            "mp_policy": MixedPrecisionPolicy(
                param_dtype=None if self.param_dtype == torch.float32 else self.param_dtype,
                reduce_dtype=self.reduce_dtype,
            ),
        }
        # HF models name their repeated block in _no_split_modules (Qwen2: "Qwen2DecoderLayer").
        layer_names = set(getattr(module, "_no_split_modules", None) or [])
        layers = [m for m in module.modules() if type(m).__name__ in layer_names]
        for layer in layers:  # each layer is one all-gather unit
            fully_shard(layer, **fsdp_kwargs)
        fully_shard(module, **fsdp_kwargs)  # the root holds embeddings, final norm and (tied) LM head
        return module

    def _sync_module_states(self, module: nn.Module) -> None:
        """Broadcast rank 0's weights so every rank shards the same model (verl: `sync_module_states`)."""
        with torch.no_grad():
            for tensor in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(tensor.data, src=0)

    def _build_optimizer(self, module: nn.Module) -> torch.optim.Optimizer:
        """AdamW with verl's defaults (verl: `build_optimizer`, `verl/workers/config/optimizer.py:298`)."""
        optim = self.optimizer_config
        kwargs = {
            "lr": float(optim.lr),
            "weight_decay": float(optim.weight_decay),
            "betas": tuple(float(b) for b in optim.betas),
        }
        kwargs.update(dict(optim.override_optimizer_config or {}))  # e.g. {"eps": 1e-6}
        return torch.optim.AdamW(module.parameters(), **kwargs)

    def _build_lr_scheduler(self, optimizer: torch.optim.Optimizer):
        """Constant or cosine schedule with linear warm-up (verl: `FSDPEngine._build_lr_scheduler`)."""
        optim = self.optimizer_config
        total_steps = int(optim.total_training_steps)
        num_warmup_steps = optim.lr_warmup_steps
        if num_warmup_steps <= 0:  # fall back to a fraction of all steps
            num_warmup_steps = int(float(optim.lr_warmup_steps_ratio) * total_steps)
        num_warmup_steps = max(0, int(num_warmup_steps))
        scheduler_type = optim.lr_scheduler_type
        if scheduler_type == "constant":
            return get_constant_schedule_with_warmup(optimizer, num_warmup_steps)
        if scheduler_type == "cosine":
            return get_cosine_schedule_with_warmup(
                optimizer,
                num_warmup_steps=num_warmup_steps,
                num_training_steps=total_steps,
                min_lr_ratio=optim.min_lr_ratio,
                num_cycles=float(optim.num_cycles),
            )
        raise ValueError(
            f"optim.lr_scheduler_type={scheduler_type!r} is not supported: use 'constant' or 'cosine'."
        )

    # ================================================================== modes and ranks
    @contextmanager
    def train_mode(self, zero_grad_on_exit: bool = True, **kwargs):
        """`module.train()` for the block; gradients are cleared on exit (verl: `EngineTrainModeCtx`)."""
        self.mode = "train"
        self.module.train()
        try:
            yield self
        finally:
            if zero_grad_on_exit and self.optimizer is not None:
                self.optimizer_zero_grad()
            self.mode = None

    @contextmanager
    def eval_mode(self, **kwargs):
        """`module.eval()` for the block; on exit FSDP frees the root's gathered weights.

        FSDP2 keeps the root module's parameters gathered after a forward (a backward would need
        them next); after forward-only work nothing will, so `reshard()` frees that memory
        (verl: `EngineEvalModeCtx`).
        """
        self.mode = "eval"
        self.module.eval()
        try:
            yield self
        finally:
            if self.use_fsdp:
                self.module.reshard()
            self.mode = None

    def get_data_parallel_size(self) -> int:
        return self.world_size

    def get_data_parallel_rank(self) -> int:
        return self.rank

    def get_data_parallel_group(self):
        return dist.group.WORLD if self.world_size > 1 else None

    # ================================================================== forward / backward
    def forward_backward_batch(
        self, data, loss_function: Callable | None, forward_only: bool = False
    ) -> list[dict]:
        """Split `data` into micro-batches, run each forward (and backward), return per-micro-batch outputs.

        Every micro-batch's `meta_info` gets the global numbers the loss function normalises with:
        `dp_size`, `batch_num_tokens` (response tokens in the whole mini-batch on all ranks) and
        `global_batch_size` (sequences on all ranks). The engine never rescales the loss.
        """
        if not forward_only and loss_function is None:
            raise ValueError(
                "forward_backward_batch(forward_only=False) needs a loss_function to backpropagate."
            )
        prepare = hooks.apply("engine.prepare_micro_batches", prepare_micro_batches)  # minirl.utils.hooks
        micro_batches = prepare(data, data.meta_info.get("micro_batch_size"))
        self._check_same_micro_batch_count(len(micro_batches))
        global_info = self._global_batch_info(data)
        note_micro_batches(micro_batches, global_info, dp_rank=self.get_data_parallel_rank())

        outputs = []
        for index, micro_batch in enumerate(micro_batches):
            micro_batch.meta_info = {**data.meta_info, **global_info}
            is_last = index == len(micro_batches) - 1
            grad_ctx = torch.no_grad() if forward_only else nullcontext()
            sync_ctx = nullcontext() if forward_only else self._gradient_sync_context(is_last)
            with grad_ctx, sync_ctx:
                loss, output = self.forward_step(micro_batch, loss_function, forward_only)
                if not forward_only:
                    loss.backward()
            outputs.append(output)
        return outputs

    def _global_batch_info(self, data) -> dict:
        """All-reduce the response-token count and the sequence count of the mini-batch over ranks."""
        batch = data.batch
        has_mask = "response_mask" in set(batch.keys())  # (TensorDict refuses `key in td`)
        num_tokens = batch["response_mask"].sum() if has_mask else torch.tensor(0)
        counts = torch.stack([num_tokens.to(torch.int64).cpu(), torch.tensor(len(data), dtype=torch.int64)])
        if self.get_data_parallel_size() > 1:
            counts = counts.to(self.device)
            dist.all_reduce(counts, op=dist.ReduceOp.SUM, group=self.get_data_parallel_group())
        return {
            "dp_size": self.get_data_parallel_size(),
            "batch_num_tokens": int(counts[0].item()),
            "global_batch_size": int(counts[1].item()),
        }

    def _check_same_micro_batch_count(self, num_micro_batches: int) -> None:
        """FSDP ranks must run the same number of forwards, or the collectives hang: check first."""
        if self.get_data_parallel_size() <= 1:
            return
        counts = [None] * self.get_data_parallel_size()
        dist.all_gather_object(counts, num_micro_batches, group=self.get_data_parallel_group())
        if len(set(counts)) > 1:
            raise ValueError(
                f"Data-parallel ranks got different numbers of micro-batches {counts} (rank -> count): "
                "give every rank the same number of sequences (pad the batch to a multiple of the "
                "data-parallel size) and the same meta_info['micro_batch_size']."
            )

    @contextmanager
    def _gradient_sync_context(self, is_last_micro_batch: bool):
        """Reduce-scatter gradients only after the last micro-batch (verl: `_gradient_sync_context`)."""
        if not self.use_fsdp or is_last_micro_batch:
            yield
            return
        self.module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self.module.set_requires_gradient_sync(True)

    def forward_step(self, micro_batch, loss_function: Callable | None, forward_only: bool):
        """One micro-batch: model forward -> `prepare_model_outputs` -> `loss_function` (if given).

        Returns `(loss, output)` where `output = {"model_output": detached tensors, "loss": float,
        "metrics": dict}`; `loss` is the graph-connected tensor to backpropagate (None without a
        loss function).
        """
        micro_batch.batch = micro_batch.batch.to(self.device)
        batch = micro_batch.batch
        present = set(batch.keys())
        missing = [k for k in ("input_ids", "attention_mask", "position_ids", "responses") if k not in present]
        if missing:
            raise KeyError(
                f"The batch is missing {missing}; the engine needs input_ids, attention_mask, position_ids "
                f"(each [B, prompt+response]) and responses ([B, response]). It has {sorted(batch.keys())}."
            )
        fp32 = self.param_dtype == torch.float32
        with nullcontext() if fp32 else torch.autocast(device_type=self.device.type, dtype=self.param_dtype):
            # common left padding trimmed, LM head on the R + 1 scored positions only, shared prompts run once
            raw_output = model_forward(self.module, batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                                       batch["responses"].shape[-1], share_prefix=self._share_prefix)
            # the loss function doubles as the logits processor (top-k distillation reads the logits here)
            model_output = self.prepare_model_outputs(raw_output, micro_batch, logits_processor_func=loss_function)
            if loss_function is not None:
                loss, metrics = loss_function(model_output, micro_batch)
            else:
                loss, metrics = None, {}
        output = {
            "model_output": {k: v.detach() if torch.is_tensor(v) else v for k, v in model_output.items()},
            "loss": None if loss is None else loss.detach().item(),
            "metrics": metrics or {},
        }
        return loss, output

    def prepare_model_outputs(self, raw_output, micro_batch, logits_processor_func=None) -> dict[str, torch.Tensor]:
        raise NotImplementedError("subclasses turn the raw model output into log_probs or values")

    # ================================================================== optimizer
    def optimizer_zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def optimizer_step(self) -> float:
        """Clip the global grad norm to `clip_grad`, step AdamW, return the norm *before* clipping.

        A non-finite norm (inf/nan from an overflow or a bad batch) skips the update and clears the
        gradients, as verl does (`FSDPEngine.optimizer_step`, `verl/workers/engine/fsdp/transformer_impl.py:764`);
        the returned norm shows it, and `skipped_optimizer_steps` counts it (minirl only: the worker
        reports steps applied and steps skipped, the trainer stops or goes on per `trainer.nonfinite`).
        """
        max_norm = self.optimizer_config.clip_grad
        params = [p for p in self.module.parameters() if p.grad is not None]
        # With FSDP2 the grads are DTensor shards and this norm is already global over all ranks.
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm=float(max_norm))
        if hasattr(grad_norm, "full_tensor"):  # a DTensor: materialise the (replicated) value
            grad_norm = grad_norm.full_tensor()
        if not torch.isfinite(grad_norm):
            logger.warning("grad_norm is not finite (%s): skipping this optimizer step.", grad_norm.item())
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped_optimizer_steps = getattr(self, "skipped_optimizer_steps", 0) + 1
        else:
            self.optimizer.step()
        return grad_norm.item()

    def lr_scheduler_step(self) -> float:
        """Advance the schedule one step (the worker calls this once per training step) and return the lr."""
        self.lr_scheduler.step()
        return self.lr_scheduler.get_last_lr()[0]

    # ================================================================== weights for the rollout
    def get_per_tensor_param(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield `(name, full weight on CPU)` in Hugging Face naming, one tensor at a time.

        With FSDP each weight is all-gathered from its shards (`DTensor.full_tensor()`), which is a
        collective: **every rank must consume the iterator, in the same order**, even if only rank 0
        sends the weights on. Tied weights appear under both names (e.g. `lm_head.weight` and
        `model.embed_tokens.weight`), as in `module.state_dict()`.
        """
        for name, tensor in self.module.state_dict().items():
            if hasattr(tensor, "full_tensor"):
                tensor = tensor.full_tensor()
            yield name, tensor.detach().to("cpu", copy=True)

    # ================================================================== devices
    def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
        """Move model (with its grads) and/or optimizer states; a no-op when already there.

        verl calls this around every stage to offload parameters and optimizer states to CPU;
        minirl has no offload, so workers normally never need it.
        """
        super().to(device, model=model, optimizer=optimizer, grad=grad)
        target = torch.device(device)
        if target.type == self.device.type:
            return
        if model:
            self.module.to(target)
            self.device = target
        if optimizer and self.optimizer is not None:
            for state in self.optimizer.state.values():
                for key, value in state.items():
                    if torch.is_tensor(value) and value.dim() > 0:
                        state[key] = value.to(target)

    # ================================================================== checkpoints
    def save_checkpoint(self, local_path: str, global_step: int = 0, **kwargs) -> None:
        """Write model + optimizer (sharded, `torch.distributed.checkpoint`) and per-rank extra state.

        Layout of `local_path`: `.metadata` and `__<rank>_0.distcp` (model and optimizer shards,
        loadable at another world size), and `extra_state_world_size_<W>_rank_<r>.pt` (LR schedule,
        RNG states, `global_step`). All ranks must call it with the same (shared) path.
        """
        import torch.distributed.checkpoint as dcp

        os.makedirs(local_path, exist_ok=True)
        with quiet_single_process_dcp():
            dcp.save(
                self._checkpoint_state(), checkpoint_id=local_path, no_dist=not self._has_process_group()
            )
        extra_state = {
            "lr_scheduler": None if self.lr_scheduler is None else self.lr_scheduler.state_dict(),
            "rng": get_rng_state(),
            "global_step": int(global_step),
        }
        torch.save(extra_state, self._extra_state_path(local_path))
        if self.world_size > 1:
            dist.barrier()

    def load_checkpoint(self, local_path: str, **kwargs) -> None:
        """Restore model, optimizer, LR schedule and RNG from `save_checkpoint`'s directory."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

        if not os.path.isdir(local_path):
            raise FileNotFoundError(f"No checkpoint directory at {local_path!r}.")
        state = self._checkpoint_state()
        with quiet_single_process_dcp():  # dcp.load fills the tensors of `state` in place
            dcp.load(state, checkpoint_id=local_path, no_dist=not self._has_process_group())
        set_model_state_dict(self.module, state["model"])
        if self.optimizer is not None:
            set_optimizer_state_dict(self.module, self.optimizer, state["optimizer"])
        extra_path = self._extra_state_path(local_path)
        if not os.path.exists(extra_path):
            raise FileNotFoundError(
                f"{extra_path!r} is missing: the checkpoint was saved with another world size "
                f"(found {sorted(f for f in os.listdir(local_path) if f.startswith('extra_state'))})."
            )
        extra_state = torch.load(extra_path, weights_only=False)
        if self.lr_scheduler is not None and extra_state["lr_scheduler"] is not None:
            self.lr_scheduler.load_state_dict(extra_state["lr_scheduler"])
        set_rng_state(extra_state["rng"])
        if self.world_size > 1:
            dist.barrier()

    def _checkpoint_state(self) -> dict:
        """`{"model": ..., "optimizer": ...}` state dicts (sharded DTensors under FSDP, full otherwise)."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        state = {"model": get_model_state_dict(self.module)}
        if self.optimizer is not None:
            state["optimizer"] = get_optimizer_state_dict(self.module, self.optimizer)
        return state

    @staticmethod
    def _has_process_group() -> bool:
        return dist.is_available() and dist.is_initialized()

    def _extra_state_path(self, local_path: str) -> str:
        return os.path.join(local_path, f"extra_state_world_size_{self.world_size}_rank_{self.rank}.pt")


# ====================================================================== the two heads


@EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device=["cpu", "cuda"])
class FSDPEngineWithLMHead(FSDPEngine):
    """A causal LM (actor, reference policy, SFT): outputs the log-probs of the response tokens.

    Model output per micro-batch (`R` = response length, `P` = prompt length):

    - `log_probs` `[b, R]`: $\\log \\pi(y_t \\mid y_{<t})$ from `log_softmax(logits / temperature)`.
      The logit at position $t$ predicts token $t+1$, so the response tokens (positions
      `P .. P+R-1`) are scored by the logits at positions `P-1 .. P+R-2`: `logits[:, P-1:-1]`.
    - `entropy` `[b, R]` when `meta_info["calculate_entropy"]` is true.
    """

    def _load_hf_module(self, path: str, dtype: torch.dtype) -> nn.Module:
        from transformers import AutoModelForCausalLM

        trust = bool(self.model_config.trust_remote_code)
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=trust)

    def prepare_model_outputs(self, raw_output, micro_batch, logits_processor_func=None) -> dict[str, torch.Tensor]:
        responses = micro_batch.batch["responses"]
        temperature = float(micro_batch.meta_info.get("temperature", 1.0))
        if temperature <= 0:
            raise ValueError(
                f"meta_info['temperature'] must be > 0 (it divides the logits), got {temperature}."
            )
        response_length = responses.shape[-1]
        # fp32 for the softmax (verl keeps the model dtype and uses fused kernels)
        logits = raw_output.logits[:, -response_length - 1 : -1, :].float() / temperature
        model_output = {"log_probs": logprobs_from_logits(logits, responses)}
        if micro_batch.meta_info.get("calculate_entropy", False):
            model_output["entropy"] = entropy_from_logits(logits)
        if micro_batch.meta_info.get("calculate_sum_pi_squared", False):
            # for the optimal-token-baseline estimators; verl computes it here too, from the same
            # temperature-scaled logits (verl/workers/engine/fsdp/transformer_impl.py:1308)
            model_output["sum_pi_squared"] = calculate_sum_pi_squared_from_logits(logits)
        if micro_batch.meta_info.get("distillation_use_topk", False) and logits_processor_func is not None:
            # top-k distillation: the loss function, called with the student's logits, returns per-token
            # tensors that ride along in model_output (verl: `logits_processor_func` in prepare_model_outputs)
            model_output.update(logits_processor_func(student_logits=logits, data=micro_batch))
        return model_output


@EngineRegistry.register(model_type="value_model", backend=["fsdp", "fsdp2"], device=["cpu", "cuda"])
class FSDPEngineWithValueHead(FSDPEngineWithLMHead):
    """A critic: the same transformer with a one-number-per-token head instead of the LM head.

    Built as `AutoModelForTokenClassification` with `num_labels=1`, as verl's `load_valuehead_model`
    (`verl/utils/model.py:637`) does; loading it from a causal-LM checkpoint keeps the transformer
    and starts the head (`score`) from random weights (seeded by `engine_config.seed`).

    Model output: `values` `[b, R]`, the value read at the position that *predicts* each response
    token (positions `P-1 .. P+R-2`), the same one-token shift as the log-probs (verl:
    `no_padding_2_padding`, `verl/workers/utils/padding.py:97`).
    """

    def _load_hf_module(self, path: str, dtype: torch.dtype) -> nn.Module:
        from transformers import AutoConfig, AutoModelForTokenClassification

        trust = bool(self.model_config.trust_remote_code)
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
        config.num_labels = 1
        config.classifier_dropout = 0.0  # a value regression head wants no dropout (verl sets the same)
        return AutoModelForTokenClassification.from_pretrained(
            path, config=config, dtype=dtype, trust_remote_code=trust
        )

    def prepare_model_outputs(self, raw_output, micro_batch, logits_processor_func=None) -> dict[str, torch.Tensor]:
        logits = raw_output.logits
        if logits.shape[-1] != 1:
            raise ValueError(
                f"A value model must output one number per token, but its head outputs {logits.shape[-1]}: "
                "build it as AutoModelForTokenClassification with num_labels=1."
            )
        response_length = micro_batch.batch["responses"].shape[-1]
        return {"values": logits.squeeze(-1)[:, -response_length - 1 : -1].float()}
