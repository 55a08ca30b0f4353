r"""Megatron's rank layout on plain torch: who is which TP / PP / DP rank, and the model cut into pipeline stages.

Two things megatron-core does, rebuilt small for the Megatron-layout engine (`megatron_engine.py`):

1. **`parallel_state`** (megatron-core's `megatron/core/parallel_state.py`, imported by verl as `mpu`):
   `initialize_model_parallel(tensor_model_parallel_size, pipeline_model_parallel_size, ...)` gives every
   rank a coordinate and builds one process group per dimension. Ranks are ordered **tp fastest, then
   dp, then pp** (megatron-core's default order `"tp-cp-ep-dp-pp"` with cp = ep = 1):

   $$r = t + \mathrm{tp}\,(d + \mathrm{dp}\cdot p), \qquad \mathrm{dp} = \frac{W}{\mathrm{tp}\cdot\mathrm{pp}\cdot\mathrm{cp}}$$

   so a tensor-parallel group is neighbours (on a GPU node: one NVLink island), and pipeline stage
   `p` is the block of ranks `[p tp dp, (p+1) tp dp)`. `ParallelState` keeps megatron's method
   names (`get_tensor_model_parallel_rank`, `get_pipeline_model_parallel_group`,
   `is_pipeline_last_stage`, `get_embedding_group` ...) on one `DeviceMesh` of shape `(pp, dp, tp)`,
   whose row-major order is exactly that rank order. `rank_layout` is the same arithmetic without
   a process group (for config checks and pictures).
2. **Pipeline stages** (megatron-core's `GPTModel(pre_process=, post_process=)`): stage `p` holds a
   contiguous block of decoder layers; the first stage also the token embedding (`pre_process`), the
   last the final norm and the head (`post_process`). `build_pipeline_stage` prunes a Hugging Face
   model to its stage *in place*, keeping Hugging Face parameter names (`model.layers.5.mlp...` on
   the stage that holds layer 5), so checkpoints and weight export need no name conversion.
   With tied input/output embeddings (the embedded Qwen2), the first and the last stage each hold a
   copy of the embedding matrix; `finalize_model_grads` in the engine sums their gradients over the
   *embedding group* (first and last stage of a pipeline), as megatron-core does, so the copies
   stay equal.

verl builds all of this through megatron-core (`MegatronEngine._init_device_mesh`,
`verl/workers/engine/megatron/transformer_impl.py:240`, calls `mpu.initialize_model_parallel`; the
model comes from Megatron-Bridge). megatron-core's process groups do work over gloo on CPU, but its
pipeline schedule allocates CUDA tensors, so minirl keeps only the names and the arithmetic.

What minirl simplifies: no context, expert or virtual-pipeline parallelism (each must be 1 / null);
layers are split as evenly as possible (earlier stages take one more when they do not divide;
megatron-core asks for `num_layers_in_first/last_pipeline_stage` instead); models must have the
Llama/Qwen2 layout (`model.embed_tokens`, `model.layers`, `model.norm`, `model.rotary_emb`, and
`lm_head` or a token-classification `score`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["ParallelState", "PipelineStage", "build_pipeline_stage", "check_layout", "layers_of_stage",
           "rank_layout", "stage_forward"]

UNSUPPORTED = {"context_parallel_size": 1, "expert_model_parallel_size": 1}  # must equal these values


# ----------------------------------------------------------------------------- the layout, as arithmetic
def rank_layout(world_size: int, tp: int, pp: int) -> list[dict]:
    """Every rank's `{rank, tp, dp, pp}` coordinates and whether it reports, in megatron's rank order.

    A rank *reports* (its outputs reach the controller) when it is tp rank 0 on the last pipeline
    stage (`MegatronEngine.is_mp_src_rank_with_outputs`, `verl/workers/engine/megatron/transformer_impl.py:569`):
    one rank per data-parallel chunk.
    """
    dp = world_size // (tp * pp)
    out = []
    for rank in range(world_size):
        t, rest = rank % tp, rank // tp
        d, p = rest % dp, rest // dp
        out.append({"rank": rank, "tp": t, "dp": d, "pp": p, "reports": t == 0 and p == pp - 1})
    return out


def check_layout(world_size: int, tp: int, pp: int, cp: int = 1, ep: int = 1, vpp=None, num_layers: int | None = None,
                 model_config=None, prefix: str = "megatron") -> int:
    """Raise a one-line `ValueError` for a layout that cannot run; return the data-parallel size.

    Checks: each size >= 1; `tp * pp * cp` divides the ranks; `pp <= num_layers` (a stage needs a
    layer); tp divides the heads, KV heads and MLP width; cp, ep, vpp at minirl's only value.
    """
    for key, value in (("tensor_model_parallel_size", tp), ("pipeline_model_parallel_size", pp)):
        if int(value) < 1:
            raise ValueError(f"{prefix}.{key}={value} must be >= 1. Fix: a positive size (1 turns it off).")
    for key, value in (("context_parallel_size", cp), ("expert_model_parallel_size", ep)):
        if int(value) != UNSUPPORTED[key]:
            raise ValueError(f"{prefix}.{key}={value}: minirl's Megatron-layout engine runs tp x pp x dp only. "
                             "Fix: leave it at 1.")
    if vpp not in (None, 1):
        raise ValueError(f"{prefix}.virtual_pipeline_model_parallel_size={vpp}: minirl runs the non-interleaved "
                         "1F1B schedule only. Fix: leave it at null.")
    if world_size % (tp * pp):
        raise ValueError(f"{prefix}.tensor_model_parallel_size={tp} x pipeline_model_parallel_size={pp} = {tp * pp} "
                         f"does not divide the {world_size} ranks (trainer.nnodes * trainer.n_gpus_per_node), so the "
                         f"data-parallel size {world_size}/{tp * pp} is not whole. Fix: sizes whose product divides "
                         f"{world_size}.")
    if num_layers is not None and pp > num_layers:
        raise ValueError(f"{prefix}.pipeline_model_parallel_size={pp} is more than the model's {num_layers} decoder "
                         f"layers: a pipeline stage would hold no layer. Fix: pipeline_model_parallel_size <= "
                         f"{num_layers}.")
    if model_config is not None and tp > 1:
        for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
            value = getattr(model_config, key, None)
            if value is not None and value % tp:
                raise ValueError(f"{prefix}.tensor_model_parallel_size={tp} does not divide the model's {key}={value}:"
                                 f" a TP rank would hold part of a head (or of the MLP). Fix: a size that divides "
                                 f"{key}.")
    return world_size // (tp * pp)


def layers_of_stage(num_layers: int, pp: int, pp_rank: int) -> list[int]:
    """The decoder-layer indices of stage `pp_rank`: contiguous blocks, earlier stages one more if uneven."""
    base, extra = divmod(num_layers, pp)
    start = pp_rank * base + min(pp_rank, extra)
    return list(range(start, start + base + (1 if pp_rank < extra else 0)))


# ----------------------------------------------------------------------------- the layout, as process groups
@dataclass
class ParallelState:
    """This rank's place in a `tp x dp x pp` layout and the process groups, with megatron-core's names.

    Built by `ParallelState.initialize(tp, pp)` on every rank (a collective: each group is created by
    all ranks). Without a process group (one rank) every size is 1 and every group is None.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    tp_rank: int = 0
    pp_rank: int = 0
    dp_rank: int = 0
    mesh: object = None  # DeviceMesh ("pp", "dp", "tp") over all ranks, or None with one rank
    embedding_group: object = None  # first + last stage of this rank's pipeline (tied embeddings), pp > 1 only
    pipeline_ranks: list = field(default_factory=list)  # global ranks of this rank's pipeline, stage order

    @classmethod
    def initialize(cls, tensor_model_parallel_size: int = 1, pipeline_model_parallel_size: int = 1,
                   device_type: str = "cpu") -> ParallelState:
        """megatron-core's `initialize_model_parallel`, per engine: mesh `(pp, dp, tp)` and the embedding groups."""
        tp, pp = int(tensor_model_parallel_size), int(pipeline_model_parallel_size)
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return cls()
        from torch.distributed.device_mesh import init_device_mesh

        world, rank = dist.get_world_size(), dist.get_rank()
        dp = check_layout(world, tp, pp)
        coords = rank_layout(world, tp, pp)[rank]
        mesh = init_device_mesh(device_type, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
        pipeline = [p * tp * dp + coords["dp"] * tp + coords["tp"] for p in range(pp)]
        embedding = None
        if pp > 1:  # every rank creates every group (a collective), keeps its own
            for d in range(dp):
                for t in range(tp):
                    ranks = [d * tp + t, (pp - 1) * tp * dp + d * tp + t]
                    group = dist.new_group(ranks)
                    if rank in ranks:
                        embedding = group
        return cls(tp=tp, pp=pp, dp=dp, tp_rank=coords["tp"], pp_rank=coords["pp"], dp_rank=coords["dp"],
                   mesh=mesh, embedding_group=embedding, pipeline_ranks=pipeline)

    # --- megatron-core's parallel_state names
    def get_tensor_model_parallel_world_size(self) -> int:
        return self.tp

    def get_tensor_model_parallel_rank(self) -> int:
        return self.tp_rank

    def get_tensor_model_parallel_group(self):
        return self.mesh["tp"].get_group() if self.mesh is not None and self.tp > 1 else None

    def get_pipeline_model_parallel_world_size(self) -> int:
        return self.pp

    def get_pipeline_model_parallel_rank(self) -> int:
        return self.pp_rank

    def get_pipeline_model_parallel_group(self):
        return self.mesh["pp"].get_group() if self.mesh is not None and self.pp > 1 else None

    def get_data_parallel_world_size(self) -> int:
        return self.dp

    def get_data_parallel_rank(self) -> int:
        return self.dp_rank

    def get_data_parallel_group(self):
        return self.mesh["dp"].get_group() if self.mesh is not None and self.dp > 1 else None

    def get_embedding_group(self):
        return self.embedding_group

    def is_pipeline_first_stage(self) -> bool:
        return self.pp_rank == 0

    def is_pipeline_last_stage(self) -> bool:
        return self.pp_rank == self.pp - 1

    def get_pipeline_model_parallel_next_rank(self) -> int | None:
        """Global rank of the next stage of this rank's pipeline (None on the last stage)."""
        return None if self.is_pipeline_last_stage() else self.pipeline_ranks[self.pp_rank + 1]

    def get_pipeline_model_parallel_prev_rank(self) -> int | None:
        """Global rank of the previous stage (None on the first stage)."""
        return None if self.is_pipeline_first_stage() else self.pipeline_ranks[self.pp_rank - 1]


# ----------------------------------------------------------------------------- pipeline stages
@dataclass
class PipelineStage:
    """What one stage holds: its layer indices and whether it embeds (`pre_process`) and heads (`post_process`)."""

    pp_rank: int
    pp_size: int
    layers: list
    pre_process: bool
    post_process: bool
    head: str  # "lm_head" (causal LM) or "score" (value model)
    tied: bool  # input and output embeddings share one matrix in the Hugging Face model
    shared_embedding: bool = False  # this stage's head is a copy of the first stage's embedding (tied, pp > 1)


def _head_name(module: nn.Module) -> str:
    for name in ("lm_head", "score"):
        if isinstance(getattr(module, name, None), nn.Module):
            return name
    raise ValueError(f"{type(module).__name__} has neither `lm_head` nor `score`: the Megatron-layout engine splits "
                     "Llama/Qwen2-style causal LMs and token-classification (value) models only.")


def _base(module: nn.Module) -> nn.Module:
    base = getattr(module, "model", None)
    if base is None or not all(hasattr(base, k) for k in ("embed_tokens", "layers", "norm", "rotary_emb")):
        raise ValueError(f"{type(module).__name__} is not laid out as `model.embed_tokens / model.layers / model.norm "
                         "/ model.rotary_emb`: the Megatron-layout engine cannot cut it into pipeline stages.")
    return base


def build_pipeline_stage(module: nn.Module, pp_rank: int, pp_size: int) -> PipelineStage:
    """Prune a Hugging Face model to pipeline stage `pp_rank` of `pp_size`, in place; names stay Hugging Face's.

    The decoder layers become an `nn.ModuleDict` keyed by their global index (`"5"`), so the stage that
    holds layer 5 names its weights `model.layers.5.*`. Modules of other stages are set to None.
    """
    base, head = _base(module), _head_name(module)
    num_layers = len(base.layers)
    check_layout(pp_size, 1, pp_size, num_layers=num_layers)
    own = layers_of_stage(num_layers, pp_size, pp_rank)
    first, last = pp_rank == 0, pp_rank == pp_size - 1
    head_module = getattr(module, head)
    tied = head == "lm_head" and head_module.weight is base.embed_tokens.weight
    stage = PipelineStage(pp_rank=pp_rank, pp_size=pp_size, layers=own, pre_process=first, post_process=last,
                          head=head, tied=tied, shared_embedding=tied and last and pp_size > 1)
    if pp_size == 1:
        base.layers = nn.ModuleDict({str(i): layer for i, layer in enumerate(base.layers)})
        return stage
    if stage.shared_embedding:  # megatron-core: the last stage's output layer is its own copy of the embedding
        head_module.weight = nn.Parameter(base.embed_tokens.weight.detach().clone())
    base.layers = nn.ModuleDict({str(i): base.layers[i] for i in own})
    if not first:
        base.embed_tokens = None
    if not last:
        base.norm = None
        setattr(module, head, None)
    return stage


def _mask_kwargs(fn, config, embeds, attention_mask, position_ids) -> dict:
    args = set(inspect.signature(fn).parameters)
    kw = {"config": config, "attention_mask": attention_mask, "position_ids": position_ids}
    kw["inputs_embeds" if "inputs_embeds" in args else "input_embeds"] = embeds
    kw["cache" if "cache" in args else "past_key_values"] = None  # transformers 5.x renamed it
    return {k: v for k, v in kw.items() if k in args}


def stage_forward(module: nn.Module, stage: PipelineStage, inputs: torch.Tensor, attention_mask: torch.Tensor,
                  position_ids: torch.Tensor, keep: int) -> torch.Tensor:
    """One stage's forward: token ids (first stage) or hidden states in; hidden states or head outputs out.

    The last stage returns the head's output at the last `keep` positions only (`[b, keep, vocab]`
    logits, or `[b, keep, 1]` values); the others return `[b, t, hidden]` for the next stage.
    Every stage builds the same attention mask and rotary embeddings from `attention_mask` and
    `position_ids`, which every pipeline rank receives with the micro-batch.
    """
    from transformers import masking_utils

    base = module.model
    config = base.config
    hidden = base.embed_tokens(inputs) if stage.pre_process else inputs
    masks = {"full_attention": masking_utils.create_causal_mask(
        **_mask_kwargs(masking_utils.create_causal_mask, config, hidden, attention_mask, position_ids))}
    layer_types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    if "sliding_attention" in layer_types:
        fn = masking_utils.create_sliding_window_causal_mask
        masks["sliding_attention"] = fn(**_mask_kwargs(fn, config, hidden, attention_mask, position_ids))
    position_embeddings = base.rotary_emb(hidden, position_ids)
    for index, layer in base.layers.items():
        hidden = layer(hidden, attention_mask=masks[layer_types[int(index)]], position_ids=position_ids,
                       position_embeddings=position_embeddings)
        if isinstance(hidden, tuple):  # transformers 4.x layers return a tuple
            hidden = hidden[0]
    if not stage.post_process:
        return hidden
    hidden = base.norm(hidden[:, -keep:])  # RMSNorm is per position: norm only the positions kept
    if stage.head == "score":
        hidden = module.dropout(hidden) if hasattr(module, "dropout") else hidden
    return getattr(module, stage.head)(hidden)
