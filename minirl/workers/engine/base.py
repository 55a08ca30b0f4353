"""The engine interface (`BaseEngine`) and the registry that picks an engine by name (`EngineRegistry`).

An *engine* owns one model and, when it trains, its optimizer and LR schedule. It knows no RL
algorithm: a worker hands it a batch and a loss function, and the engine runs
forward -> `loss_function(model_output, micro_batch)` -> backward over micro-batches, then one
optimizer step. PPO, GRPO and SFT differ only in the loss function they pass in.

Mirrors `verl/workers/engine/base.py`: `BaseEngine` (`verl/workers/engine/base.py:30`) and
`EngineRegistry` (`verl/workers/engine/base.py:339`); `train_batch` and `infer_batch` follow
`BaseEngine.train_batch` (`verl/workers/engine/base.py:113`) and `BaseEngine.infer_batch`
(`verl/workers/engine/base.py:134`).

Inside a traced worker call (`minirl.trace.worker_trace`), `train_batch` and `infer_batch` note one
engine pass each: the micro-batches `forward_backward_batch` cut and the collectives each phase ran,
which is how the per-rank trace shows what a layout does; `layout()` reports the mesh and the
parameter shards. Outside a traced call both cost nothing.

What minirl simplifies:

- inputs are a `minirl.protocol.DataProto` of padded `[batch, seq]` tensors; verl's new engines take
  a TensorDict of nested (jagged, padding-free) tensors;
- `train_batch` returns plain numbers (loss averaged over data-parallel ranks, grad norm, lr, the
  loss function's metrics averaged over micro-batches); verl returns per-micro-batch lists that
  `TrainingWorker._postprocess_output` (`verl/workers/engine_workers.py:180`) reduces;
- `get_per_tensor_param` returns just the iterator; verl returns `(iterator, peft_config)` for LoRA;
- no parameter/optimizer offload, LoRA, sequence parallelism or delta weight export.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import torch
import torch.distributed as dist

from minirl.trace.worker_trace import engine_pass, phase
from minirl.workers.engine.utils import aggregate_metrics, get_device_name, parameter_layout

__all__ = ["BaseEngine", "EngineRegistry"]


class BaseEngine:
    """Interface every training engine implements (FSDP here; verl also has Megatron, VeOmni, ...).

    A worker uses an engine like this:

    ```python
    engine = EngineRegistry.new("language_model", "fsdp", model_config, engine_config, optim_config)
    engine.initialize()
    with engine.train_mode():
        metrics = engine.train_batch(mini_batch, loss_function)  # one optimizer step
    lr = engine.lr_scheduler_step()                               # once per training step
    with engine.eval_mode():
        out = engine.infer_batch(batch)                           # {"log_probs": [B, R], ...}
    ```
    """

    # ------------------------------------------------------------------ set-up and modes
    def initialize(self) -> None:
        """Build the model (sharded when there are several ranks), the optimizer and the LR schedule."""
        raise NotImplementedError

    def train_mode(self, **kwargs) -> AbstractContextManager:
        """Context manager: the model in training mode (`module.train()`); gradients are cleared on exit."""
        raise NotImplementedError

    def eval_mode(self, **kwargs) -> AbstractContextManager:
        """Context manager: the model in evaluation mode (`module.eval()`)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ optimisation
    def optimizer_zero_grad(self) -> None:
        """Clear the gradients accumulated by the previous mini-batch."""
        raise NotImplementedError

    def optimizer_step(self) -> float:
        """Clip the global grad norm, step the optimizer (skip if the norm is not finite); return the norm."""
        raise NotImplementedError

    def lr_scheduler_step(self) -> float:
        """Advance the LR schedule by one training step and return the new learning rate."""
        raise NotImplementedError

    def forward_backward_batch(
        self, data, loss_function: Callable | None, forward_only: bool = False
    ) -> list[dict]:
        """Run every micro-batch of `data` forward (and backward unless `forward_only`).

        Returns one dict per micro-batch: `model_output` (detached tensors), `loss` (float) and
        `metrics` (what the loss function reported).
        """
        raise NotImplementedError

    def train_batch(self, data, loss_function: Callable) -> dict[str, Any]:
        """One optimizer step on one mini-batch: zero_grad -> forward/backward per micro-batch -> step.

        Args:
            data: this rank's share of the global mini-batch (a `DataProto`); `meta_info` carries
                `micro_batch_size` (per rank) and, for an LM head, `temperature`.
            loss_function: `loss, metrics = loss_function(model_output, micro_batch)`. It must
                normalise with the global numbers the engine puts in `micro_batch.meta_info`
                (`dp_size`, `batch_num_tokens`, `global_batch_size`); the engine does not rescale.

        Returns:
            `{"loss", "grad_norm", "lr", "num_micro_batches", **metrics}`: `loss` is the sum of this
            rank's micro-batch losses averaged over data-parallel ranks (the global mini-batch loss
            when the loss function follows the convention above), `lr` the learning rate this step
            used, and each metric the mean over micro-batches.
        """
        if getattr(self, "optimizer", None) is None:
            raise RuntimeError(
                "train_batch needs an optimizer, but this engine has none: it was built with "
                "engine_config.forward_only=True (a reference model). Use infer_batch, or build the "
                "engine with forward_only=False."
            )
        with engine_pass("train") as note:  # recorded when this runs inside a traced worker call
            self.optimizer_zero_grad()
            with phase(note, "forward_backward"):
                outputs = self.forward_backward_batch(data, loss_function, forward_only=False)
            with phase(note, "optimizer_step"):
                grad_norm = self.optimizer_step()
        local_loss = sum(out["loss"] for out in outputs)
        metrics = aggregate_metrics([out["metrics"] for out in outputs])
        metrics.update(
            loss=self._mean_over_data_parallel(local_loss),
            grad_norm=grad_norm,
            lr=self.optimizer.param_groups[0]["lr"],
            num_micro_batches=len(outputs),
        )
        return metrics

    def infer_batch(self, data) -> dict[str, torch.Tensor]:
        """Forward only, without gradients: the model outputs of all micro-batches, concatenated.

        Returns `{"log_probs": [B, R]}` (plus `"entropy"` when `meta_info["calculate_entropy"]`)
        for an LM head, `{"values": [B, R]}` for a value head.
        """
        with engine_pass("infer") as note, phase(note, "forward"), torch.no_grad():
            outputs = self.forward_backward_batch(data, loss_function=None, forward_only=True)
        keys = outputs[0]["model_output"].keys()
        return {key: torch.cat([out["model_output"][key] for out in outputs], dim=0) for key in keys}

    # ------------------------------------------------------------------ weights, ranks, devices
    def get_per_tensor_param(self) -> Iterator[tuple[str, torch.Tensor]]:
        """`(name, full tensor on CPU)` for every weight, in Hugging Face naming (for weight sync)."""
        raise NotImplementedError

    def get_data_parallel_size(self) -> int:
        """Number of data-parallel ranks (1 without a process group)."""
        raise NotImplementedError

    def get_data_parallel_rank(self) -> int:
        """This process's data-parallel rank (0 without a process group)."""
        raise NotImplementedError

    def get_data_parallel_group(self):
        """The process group gradients are averaged over (`None` without a process group)."""
        raise NotImplementedError

    def is_mp_src_rank_with_outputs(self) -> bool:
        """Whether this rank returns outputs; always True without model parallelism (verl: TP/PP/SP)."""
        return True

    def layout(self) -> dict:
        """Where this rank sits and what it holds: device mesh, coordinates, data-parallel rank, shards.

        minirl only (verl has no such call); the worker records it in the trace after `initialize`, so
        chapter 07 reads every rank's parameter shard shapes from a run.
        """
        mesh = getattr(self, "device_mesh", None)
        names = list(mesh.mesh_dim_names or ()) if mesh is not None else []
        coords = mesh.get_coordinate() if mesh is not None else None
        return {"engine": type(self).__name__, "forward_only": bool(getattr(self, "forward_only", False)),
                "mesh": {n: int(mesh.size(i)) for i, n in enumerate(names)},
                "coords": {n: int(coords[i]) for i, n in enumerate(names)} if coords is not None else {},
                "dp_rank": self.get_data_parallel_rank(), "dp_size": self.get_data_parallel_size(),
                "is_collect": self.is_mp_src_rank_with_outputs(),
                "params": parameter_layout(self.module) if getattr(self, "module", None) is not None else {}}

    def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
        """Move the model and/or optimizer states to `device` (verl uses this to offload between steps)."""
        if grad and not model:
            raise ValueError("Gradients live on the parameters: grad=True needs model=True.")

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, local_path: str, global_step: int = 0, **kwargs) -> None:
        """Save model, optimizer, LR schedule and RNG states under `local_path`."""
        raise NotImplementedError

    def load_checkpoint(self, local_path: str, **kwargs) -> None:
        """Restore what `save_checkpoint` wrote, so training continues exactly where it stopped."""
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers
    def _mean_over_data_parallel(self, value: float) -> float:
        """Average a Python number over the data-parallel ranks (no-op for one rank)."""
        if self.get_data_parallel_size() <= 1:
            return float(value)
        device = "cuda" if dist.get_backend(self.get_data_parallel_group()) == "nccl" else "cpu"
        tensor = torch.tensor([float(value)], dtype=torch.float64, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.get_data_parallel_group())
        return tensor.item() / self.get_data_parallel_size()


class EngineRegistry:
    """Maps `(model_type, backend, device)` to an engine class, so config strings pick the engine.

    ```python
    @EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device=["cpu", "cuda"])
    class FSDPEngineWithLMHead(FSDPEngine): ...

    engine = EngineRegistry.new("language_model", "fsdp", model_config, engine_config, optimizer_config)
    ```

    `model_type` is `"language_model"` (actor, reference, SFT) or `"value_model"` (critic).
    The device is detected (`"cuda"` if a GPU is visible, else `"cpu"`); the environment variable
    `MINIRL_ENGINE_DEVICE` overrides it (verl: `VERL_ENGINE_DEVICE`; verl also keys on the vendor).
    """

    _engines: ClassVar[dict[str, dict[str, dict[str, type]]]] = {}

    @classmethod
    def register(cls, model_type: str, backend: str | list[str], device: str | list[str] = "cuda"):
        """Class decorator: register the engine for every `backend` x `device` given."""
        backends = backend if isinstance(backend, (list, tuple)) else [backend]
        devices = device if isinstance(device, (list, tuple)) else [device]

        def decorator(engine_class: type) -> type:
            if not issubclass(engine_class, BaseEngine):
                raise TypeError(f"{engine_class.__name__} must subclass BaseEngine to be registered.")
            for b in backends:
                for d in devices:
                    slot = cls._engines.setdefault(model_type, {}).setdefault(b, {})
                    if d in slot and slot[d] is not engine_class:
                        raise ValueError(
                            f"An engine is already registered for ({model_type!r}, {b!r}, {d!r}): "
                            f"{slot[d].__name__}; cannot also register {engine_class.__name__}."
                        )
                    slot[d] = engine_class
            return engine_class

        return decorator

    @classmethod
    def registered(cls) -> list[tuple[str, str, str]]:
        """All registered `(model_type, backend, device)` combinations, sorted."""
        return sorted(
            (m, b, d) for m, backends in cls._engines.items() for b, devs in backends.items() for d in devs
        )

    @classmethod
    def get_engine_cls(cls, model_type: str, backend: str, device: str | None = None) -> type:
        """The engine class for `(model_type, backend, device)`; device defaults to the detected one."""
        device = device or os.getenv("MINIRL_ENGINE_DEVICE") or get_device_name()
        engine_cls = cls._engines.get(model_type, {}).get(backend, {}).get(device)
        if engine_cls is None:
            combos = ", ".join(f"({m!r}, {b!r}, {d!r})" for m, b, d in cls.registered()) or "none"
            raise ValueError(
                f"No engine registered for model_type={model_type!r}, backend={backend!r}, "
                f"device={device!r}. Registered (model_type, backend, device): {combos}."
            )
        return engine_cls

    @classmethod
    def new(cls, model_type: str, backend: str, *args, **kwargs) -> BaseEngine:
        """Build (but do not `initialize`) the engine registered for `model_type` and `backend`."""
        return cls.get_engine_cls(model_type, backend)(*args, **kwargs)
