"""Process-group layouts, live: gloo processes on 127.0.0.1 and per-rank traces (chapter 07, lab 05).

## `run_layouts`: one global batch on several layouts (chapter 07)

No verl counterpart (verl has no notebooks). Chapter 07 asks how FSDP and Megatron lay the same
global batch out on their ranks; `run_layouts` answers with runs. It starts `world` processes once
(`torch.multiprocessing`, gloo on 127.0.0.1: the rendezvous of `minirl.utils.distributed`), and in
each, for every layout in turn (a list of `minirl train` overrides such as `model_engine=megatron
actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2`):

1. builds the real `ActorRolloutRefWorker` from the composed config (`init_model`), so the engine
   comes from `EngineRegistry` by `strategy`, exactly as in a Ray run;
2. records every worker call in `<out>/<layout>/trace.rank<r>.jsonl` (`Worker.init_trace`): the same
   per-rank trace a Ray run writes (engine layout, micro-batches, collectives, pipeline schedule);
3. gives the worker the rows of its data-parallel rank of each step's batch (what the nd-mesh
   dispatch sends it: every TP / PP rank of a dp rank the same rows) and runs `compute_log_prob`,
   then `update_actor` with the trainer's meta-data (`PPOTrainer._update_meta`);
4. with `checkpoint=(saver, [resumers])`: the saver layout saves after step 1; each resumer builds a
   fresh worker, loads that checkpoint and trains step 2 from it.

The batches are a real run's (`small_run(...).batches`), so every layout can be compared with the
one-process run that produced them. Outputs go to a temporary directory, never into the repository.
Each rank's results (metrics, log-probs, rank 0's exported weights) come back as `LayoutRuns`.

## `live_layout`: the actor's worker group on 2-4 local ranks (lab 05)

`live_layout(overrides, ranks=2)` runs what one training step asks of the actor, and nothing else: it
starts `ranks` `ActorRolloutRefWorker`s (role `actor`) in a `ProcessWorkerGroup` (local processes joined
by a gloo process group on 127.0.0.1), builds their engines with the config's settings
(`model_engine=fsdp` or `torchtitan` with `tensor_parallel_size`), and sends them one global batch of
`data.train_batch_size * rollout.n` sequences through the same group methods the trainer calls
(`compute_log_prob`, then `update_actor` with the trainer's mini-batch settings). Every worker records
its calls in a per-rank trace (`Worker.init_trace`): the engine layout and parameter shards of
`init_model`, the rows, micro-batches, `dp_size` and collectives of every call (`minirl.trace.show`
reads them: `rank_layouts`, `worker_events`).

The batch is synthetic (random prompt and response tokens of the lengths the config gives, random
advantages, `old_log_probs` from the actor itself): layouts and shards do not depend on what the tokens
say. What a full run adds (rollout, reward, weight sync) is chapter 07's and the recorded traces'.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = ["LayoutRuns", "LiveLayout", "live_layout", "rank_rows", "run_layouts", "slug"]

ACTOR_KEYS = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask", "old_log_probs",
              "advantages"]


def slug(name: str) -> str:
    """A layout's name as a directory name: `"pp=2 (Megatron)"` -> `"pp_2_megatron"`."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


@dataclass
class LayoutRuns:
    """What `run_layouts` hands back."""

    out_dir: Path
    """The temporary directory of everything the processes wrote."""
    trace_dirs: dict
    """layout name -> its per-rank trace directory (read it with `minirl.trace.read_trace`)."""
    ranks: list
    """One dict per rank: layout name (and `"resumed: <name>"`) -> `{"steps": {step: update_actor metrics},
    "collected", "log_prob_diff"}`; on rank 0 also the exported weights: `"export"` (after the last step),
    `"export_step1"` (the saver, when it saved) and `"loaded_export"` (a resumer, right after loading)."""

    def events(self, layout: str) -> list[dict]:
        """The merged per-rank trace events of `layout`."""
        from minirl.trace import read_trace

        return read_trace(self.trace_dirs[layout])


def _meta(cfg) -> dict:
    """`PPOTrainer._update_meta` of the actor: what `update_actor` reads besides the batch."""
    actor, n = cfg.actor_rollout_ref.actor, int(cfg.actor_rollout_ref.rollout.n)
    return {"mini_batch_size": int(actor.ppo_mini_batch_size) * n,
            "micro_batch_size": int(actor.ppo_micro_batch_size_per_gpu), "epochs": int(actor.ppo_epochs),
            "seed": int(actor.data_loader_seed), "shuffle": bool(actor.shuffle),
            "temperature": float(cfg.actor_rollout_ref.rollout.temperature),
            "calculate_entropy": bool(actor.calculate_entropy or float(actor.entropy_coeff) != 0)}


def _my_rows(worker, batch, keys, **meta):
    """This rank's chunk of `batch`, as the nd-mesh dispatch cuts it (`dp` equal chunks, chunk `dp_rank`)."""
    engine = worker.actor.engine
    data = batch.select(batch_keys=keys)
    data.meta_info = dict(meta)
    return data.chunk(engine.get_data_parallel_size())[engine.get_data_parallel_rank()]


def _new_worker(cfg, trace_dir: str, run_id: str):
    from minirl.models import resolve_model_path
    from minirl.workers.engine_workers import ActorRolloutRefWorker

    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor", device="cpu")
    worker.init_trace(trace_dir, "fields", run_id)
    worker.init_model(resolve_model_path(str(cfg.actor_rollout_ref.model.path)))  # as TaskRunnerV1.build does
    return worker


def _step(worker, cfg, batch, with_log_probs: bool) -> dict:
    out = {}
    if with_log_probs:
        data = _my_rows(worker, batch, ACTOR_KEYS[:5], temperature=float(cfg.actor_rollout_ref.rollout.temperature))
        got = worker.compute_log_prob(data).batch["log_probs"]
        want = _my_rows(worker, batch, ["old_log_probs"]).batch["old_log_probs"]
        out["log_prob_diff"] = float(((got - want) * _my_rows(worker, batch, ["response_mask"])
                                      .batch["response_mask"]).abs().max())
    result = worker.update_actor(_my_rows(worker, batch, ACTOR_KEYS, **_meta(cfg)))
    out["metrics"] = result.meta_info["metrics"]
    out["collected"] = worker._collect_dp_rank.get("actor")
    return out


def _export(worker) -> dict:
    params = worker.get_per_tensor_param()  # a collective: every rank takes part, rank 0 keeps the tensors
    return dict(params)


def _run_rank(rank: int, world: int, port: int, spec: dict) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                      HF_HUB_DISABLE_PROGRESS_BARS="1", TRANSFORMERS_VERBOSITY="error")
    torch.set_num_threads(1)
    from minirl.config import load

    out_dir = Path(spec["out_dir"])
    batches = torch.load(out_dir / "batches.pt", weights_only=False)
    results, saver, resumers = {}, *(spec["checkpoint"] or (None, []))
    ckpt = str(out_dir / "checkpoint")
    for name, overrides in spec["layouts"].items():
        cfg = load([*spec["base"], *overrides, f"trainer.n_gpus_per_node={world}"])
        worker = _new_worker(cfg, str(out_dir / slug(name)), slug(name))
        res = {"steps": {}}
        for i, step in enumerate(sorted(batches)):
            one = _step(worker, cfg, batches[step], with_log_probs=i == 0)
            res["steps"][step] = one["metrics"]
            res.setdefault("log_prob_diff", one.get("log_prob_diff"))
            res["collected"] = one["collected"]
            if i == 0 and name == saver:
                worker.save_checkpoint(ckpt, step)
                res["export_step1"] = _export(worker)  # what was saved, to compare the resumed layouts with
        res["export"] = _export(worker)
        worker.close_trace()
        results[name] = res
    for name in resumers:  # fresh workers that start from the saver's checkpoint after step 1
        cfg = load([*spec["base"], *spec["layouts"][name], f"trainer.n_gpus_per_node={world}"])
        worker = _new_worker(cfg, str(out_dir / f"resumed_{slug(name)}"), f"resumed_{slug(name)}")
        first, *rest = sorted(batches)
        worker.load_checkpoint(ckpt, first)
        res = {"loaded_export": _export(worker), "steps": {}}
        for step in rest:
            one = _step(worker, cfg, batches[step], with_log_probs=False)
            res["steps"][step], res["collected"] = one["metrics"], one["collected"]
        worker.close_trace()
        results[f"resumed: {name}"] = res
    if rank != 0:  # only rank 0's exports hold tensors (the others return [] from get_per_tensor_param)
        for res in results.values():
            for key in ("export", "export_step1", "loaded_export"):
                res.pop(key, None)
    torch.save(results, out_dir / f"rank{rank}.pt")


def run_layouts(layouts: dict[str, list[str]], batches: dict, base_overrides: list[str], world: int = 2,
                checkpoint: tuple[str, list[str]] | None = None) -> LayoutRuns:
    """Run `batches` (step -> the global batch a real run trained on) on every layout, `world` processes.

    Args:
        layouts: layout name -> `minirl train` overrides that make it (the engine and its sizes);
            `trainer.n_gpus_per_node={world}` is added.
        batches: step -> `DataProto` with the actor's update fields (`small_run(...).batches`).
        base_overrides: the overrides of the run that made the batches (batch sizes, model, ...).
        world: the number of gloo processes (every layout uses all of them).
        checkpoint: `(saver, [resumers])`: the saver layout saves after the first step; each resumer
            starts a fresh worker from that checkpoint and trains the remaining steps.
    """
    import torch.multiprocessing as mp

    out_dir = Path(tempfile.mkdtemp(prefix="minirl-layouts-"))
    torch.save(dict(batches), out_dir / "batches.pt")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = {"out_dir": str(out_dir), "layouts": dict(layouts), "base": list(base_overrides),
            "checkpoint": checkpoint}
    mp.spawn(_run_rank, args=(world, port, spec), nprocs=world, join=True)
    ranks = [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in range(world)]
    trace_dirs = {name: out_dir / slug(name) for name in layouts}
    trace_dirs.update({f"resumed: {name}": out_dir / f"resumed_{slug(name)}" for name in (checkpoint or (None, []))[1]})
    return LayoutRuns(out_dir=out_dir, trace_dirs=trace_dirs, ranks=ranks)


def rank_rows(events: list[dict], method: str = "update_actor", call: int = 0) -> list[dict]:
    """One row per rank of its `call`-th `method` call, read from the per-rank trace.

    Its mesh coordinates, data-parallel rank, the rows it received, how it cut them (micro-batches x
    sizes), the `dp_size` its loss normalised with, whether its output reaches the controller, and with
    a pipeline its stage and schedule (`F0 F1 B0 ...`).
    """
    from minirl.trace.show import rank_calls, rank_layouts

    layouts = {lay["rank"]: lay for lay in rank_layouts(events) if not lay.get("forward_only")}
    rows = []
    for rank, ev in rank_calls(events, method, call).items():
        note = next(p for p in ev["passes"] if "sizes" in p)
        pipe = note.get("pipeline") or {}
        rows.append({"rank": rank, "engine": layouts[rank]["engine"], "mesh coords": layouts[rank]["coords"],
                     "dp rank": ev.get("dp_rank"), "rows": ev["inputs"][0].get("rows"),
                     "micro-batches": note["micro_batches"], "sizes": note["sizes"], "dp_size": note["dp_size"],
                     "reports": ev.get("collected"),
                     "stage": f"{pipe['pp_rank']}/{pipe['pp_size']}" if pipe.get("pp_size", 1) > 1 else "-",
                     "schedule": " ".join(f"{o['op'][0].upper()}{o['micro_batch']}" for o in pipe["ops"])
                     if pipe.get("pp_size", 1) > 1 else "-"})
    return rows


# ------------------------------------------------------------------------- lab 05: live_layout


@dataclass
class LiveLayout:
    """What `live_layout` hands back: the config, the per-rank trace events, the collected outputs."""

    config: Any
    """The resolved config (`minirl.config.load`) the workers were built with."""
    events: list[dict]
    """Every per-rank `worker` event (`minirl.trace.read_trace` of the workers' part files)."""
    log_probs: Any = None
    """What `compute_log_prob` collected: `[B, R]`, one row per sequence of the global batch."""
    metrics: list = field(default_factory=list)
    """Each rank's `update_actor` metrics (a list of dicts, rank order)."""

    @property
    def ranks(self) -> int:
        return len({e["rank"] for e in self.events})


def _global_batch(cfg, seed: int = 0):
    import torch

    from minirl.protocol import DataProto

    n = int(cfg.data.train_batch_size) * int(cfg.actor_rollout_ref.rollout.n)
    prompt, response = 8, int(cfg.data.max_response_length)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 250, (n, prompt + response), generator=g)
    attention = torch.ones_like(ids)
    response_mask = torch.ones(n, response, dtype=torch.long)
    for i in range(n):  # responses of different lengths: the last ones are padding
        keep = response - i % max(1, response // 2)
        attention[i, prompt + keep:] = 0
        response_mask[i, keep:] = 0
    return DataProto.from_dict({"input_ids": ids, "attention_mask": attention,
                                "position_ids": (attention.cumsum(-1) - 1).clamp(min=0), "responses": ids[:, prompt:],
                                "response_mask": response_mask,
                                "advantages": torch.randn(n, response, generator=g) * response_mask})


def live_layout(overrides=(), ranks: int = 2, model_path: str = "minirl://tiny-qwen2", seed: int = 0) -> LiveLayout:
    """Run one actor step of `overrides` (verl's `key=value`) on `ranks` local processes; see the module docstring."""
    import os

    from minirl.config import load
    from minirl.models.loading import resolve_model_path
    from minirl.notebook.run import small_overrides
    from minirl.single_controller.base.process import ProcessWorkerGroup
    from minirl.single_controller.base.worker_group import ClassWithInitArgs, ResourcePool
    from minirl.trace import read_trace
    from minirl.workers.engine_workers import ActorRolloutRefWorker

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # the forkserver inherits it: no weight-loading bars
    cfg = load(small_overrides() + [f"trainer.n_gpus_per_node={ranks}", *overrides])
    actor, n = cfg.actor_rollout_ref.actor, int(cfg.actor_rollout_ref.rollout.n)
    trace_dir = tempfile.mkdtemp(prefix="minirl-layout-")
    group = ProcessWorkerGroup(ResourcePool(process_on_nodes=[ranks]),
                               ClassWithInitArgs(ActorRolloutRefWorker, cfg.actor_rollout_ref, role="actor"))
    try:
        group.init_trace(trace_dir, "fields", f"live-{ranks}rank")
        group.init_model(str(resolve_model_path(model_path)))
        batch = _global_batch(cfg, seed)
        data = batch.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask"])
        data.meta_info = {"temperature": 1.0}
        out = group.compute_log_prob(data)
        batch.batch["old_log_probs"] = out.batch["log_probs"]
        upd = batch.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask",
                                       "old_log_probs", "advantages"])
        upd.meta_info = {"mini_batch_size": int(actor.ppo_mini_batch_size) * n,
                         "micro_batch_size": int(actor.ppo_micro_batch_size_per_gpu), "epochs": int(actor.ppo_epochs),
                         "seed": int(actor.data_loader_seed), "shuffle": bool(actor.shuffle), "temperature": 1.0}
        result = group.update_actor(upd)
        group.close_trace()
    finally:
        group.shutdown()
    metrics = result.meta_info.get("metrics")
    return LiveLayout(config=cfg, events=[e for e in read_trace(trace_dir) if e.get("kind") == "worker"],
                      log_probs=out.batch["log_probs"], metrics=metrics if isinstance(metrics, list) else [metrics])
