r"""Step metrics with verl's names (verl: `verl/trainer/ppo/metric_utils.py` and `_compute_metrics`).

`reduce_metrics` (`verl/trainer/ppo/metric_utils.py:40`, which forwards to `verl/utils/metric/utils.py:25`)
turns the per-optimizer-step lists a worker returns into one number each; `compute_data_metrics`
(`verl/trainer/ppo/metric_utils.py:429`) summarises the step's batch; `compute_step_metrics` is the
rest of one row of `PPOTrainer._compute_metrics` (`verl/trainer/ppo/v1/trainer_base.py:1763`): timing,
step and epoch, weight versions and staleness; `compute_validation_metrics` names the validation scores
as verl does (`val-core/<data_source>/reward/mean@<n>`). The trainer writes the row with
`minirl.utils.tracking.Tracking`; several local updates of one step fold into one row with
`minirl.trainer.ppo.utils.MetricsAggregator`.

## Versions and staleness

Versions count global steps: after step $k$ the trainer syncs the weights with `update_weights(k)`, so
the rollout samples step $k+1$'s data with version $k$, and every trajectory records the first and
last version that sampled it, $v^{\min}_i$ and $v^{\max}_i$ (`min_global_steps` / `max_global_steps`
tags; two versions when a weight sync aborted and resumed it, a *partial rollout*). At step $k$ the
freshest weights are version $k-1$, so (`trajectory_version_metrics`, verl's step 5 of `_compute_metrics`):

$$\text{spans}_i=v^{\max}_i-v^{\min}_i+1,\qquad
\text{staleness}_i=(k-1)-v^{\max}_i,\qquad \text{staleness\_worst}_i=(k-1)-v^{\min}_i$$

`spans` is the inconsistency inside one trajectory (1: one version), `staleness` the lag behind the
current policy (0 in sync mode), `staleness_worst` the lag of its oldest tokens. Each is logged as
`training/off_policy/<name>/{mean,max,min}`, verl's names. This is *policy lag*; the other source of
off-policyness, inference/training mismatch, is measured on log-probs instead: verl's
`training/rollout_probs_diff_{valid,max,mean,std}` and `training/rollout_actor_probs_pearson_corr` on
probabilities (`calculate_debug_metrics`, `verl/utils/debug/metrics.py:63`), and minirl's own
`training/rollout_actor_logprob_diff_*` on log-probs (`rollout_mismatch_metrics`; also
`minirl.trainer.ppo.rollout_corr_helper`).

## The weight versions of the models (`version/*`, minirl's own names)

verl logs no such row; minirl logs one number per model, in the same unit as the trajectories' versions
(global steps), in every trainer mode, so that `version/rollout` minus a trajectory's `max_global_steps`
is its staleness whatever the mode (`PPOTrainer.versions`):

| metric | counts | sync / colocate_async at step $k$ | separate_async at step $k$ |
|---|---|---|---|
| `version/actor` | the step of the last update in the actor's weights | $k$ | $k$ (after all `parameter_sync_step` local updates) |
| `version/rollout` | the version the rollout replicas hold | $k$ (synced at the step's end) | $k$ |
| `version/old` | the weights behind `old_log_probs` ($\pi_{\text{old}}$) | $k-1$ | $k-1$ at every local update (the fixed $\pi_{\text{old}}$) |
| `version/ref`, `version/critic` | the reference (always 0), the critic (as the actor) | | |

The count of `update_actor` calls (P per step in separate_async) is the `update_actor` span's
`actor_updates` in the trace, not a `version/*` metric.
"""

from __future__ import annotations

import numpy as np
import torch

from minirl.protocol import DataProto

__all__ = ["calculate_debug_metrics", "compute_data_metrics", "compute_step_metrics", "compute_validation_metrics", "gather_worker_metrics",
           "reduce_metrics", "rollout_mismatch_metrics", "sample_trace_info", "trajectory_version_metrics",
           "update_batch_numbers"]


def reduce_metrics(metrics: dict) -> dict:
    """Mean of every non-empty metric list (verl: `reduce_metrics`; verl's also takes the max/min of keys named so)."""
    return {k: float(np.mean(v)) for k, v in metrics.items() if len(v)}


def _stats(prefix: str, x: torch.Tensor) -> dict:
    x = x.float()
    return {f"{prefix}/mean": float(x.mean()), f"{prefix}/max": float(x.max()), f"{prefix}/min": float(x.min())}


def gather_worker_metrics(out: DataProto) -> dict:
    """Metric lists from one rank, or from several (DataProto.concat makes `{key: [rank0 list, rank1 list]}`)."""
    m = out.meta_info.get("metrics", {})
    if isinstance(m, list):
        m = {k: [d[k] for d in m if k in d] for k in {k for d in m for k in d}}
    merged = {}
    for k, v in m.items():
        flat = []
        for x in v:
            flat.extend(x if isinstance(x, list) else [x])
        merged[k] = flat
    return merged


def update_batch_numbers(m: dict) -> dict:
    """What an update stage did, for the trace: optimizer steps and the per-rank mini/micro-batch sizes used.

    Every rank steps its shard of the same global optimizer step, so one rank's count is the answer.
    """
    return {"optimizer_steps": int(max(m.get("optimizer_steps", [0]))),
            "mini_batch_size_per_rank": sorted(set(m.get("mini_batch_size_per_rank", []))),
            "micro_batch_size_per_rank": sorted(set(m.get("micro_batch_size_per_rank", []))),
            "micro_batches_per_mini_batch": sorted(set(m.get("num_micro_batches", [])))}


def compute_data_metrics(batch: DataProto, use_critic: bool) -> dict:
    """critic/score, critic/rewards, critic/advantages, critic/returns, (critic/values), lengths."""
    b = batch.batch
    mask = b["response_mask"].bool()
    R = b["responses"].shape[-1]
    P = b["prompts"].shape[-1]
    resp_len = b["attention_mask"][:, -R:].sum(-1).float()
    prompt_len = b["attention_mask"][:, :P].sum(-1).float()
    m = {}
    m.update(_stats("critic/score", b["token_level_scores"].sum(-1)))
    m.update(_stats("critic/rewards", b["token_level_rewards"].sum(-1)))
    m.update(_stats("critic/advantages", b["advantages"][mask]))
    m.update(_stats("critic/returns", b["returns"][mask]))
    if use_critic and "values" in b.keys():
        v, r = b["values"][mask], b["returns"][mask]
        m.update(_stats("critic/values", v))
        m["critic/vf_explained_var"] = float(1 - torch.var(r - v) / (torch.var(r) + 1e-5))
    m.update(_stats("response_length", resp_len))
    m["response_length/clip_ratio"] = float((resp_len == R).float().mean())
    m.update(_stats("prompt_length", prompt_len))
    if "num_turns" in batch.non_tensor_batch:
        turns = torch.tensor(np.asarray(batch.non_tensor_batch["num_turns"], dtype=np.float32))
        m.update(_stats("training/num_turns", turns))  # verl: training/num_turns/{mean,max,min} in _compute_metrics
    return m


def rollout_mismatch_metrics(batch: DataProto, threshold: float = 0.5) -> dict:
    """Training/inference mismatch: log(pi_old / pi_rollout) on valid tokens (verl: `calculate_debug_metrics`,
    `verl/utils/debug/metrics.py:63`, reports the probability difference; minirl reports the log-ratio)."""
    b = batch.batch
    if "rollout_log_probs" not in b.keys() or "old_log_probs" not in b.keys():
        return {}
    mask = b["response_mask"].bool()
    d = (b["old_log_probs"] - b["rollout_log_probs"])[mask]
    if d.numel() == 0:
        return {}
    return {"training/rollout_actor_logprob_diff_mean": float(d.abs().mean()),
            "training/rollout_actor_logprob_diff_max": float(d.abs().max()),
            "training/rollout_actor_logprob_diff_frac_above_threshold": float((d.abs() > threshold).float().mean())}


def calculate_debug_metrics(batch: DataProto) -> dict:
    """verl's rollout-vs-actor check on probabilities (verl: `calculate_debug_metrics`, `verl/utils/debug/metrics.py:63`).

    With $p^{\\text{old}}=e^{\\texttt{old\\_log\\_probs}}$ and $p^{\\text{roll}}=e^{\\texttt{rollout\\_log\\_probs}}$ on
    the response tokens: `training/rollout_probs_diff_{max,mean,std}` of $|p^{\\text{old}}-p^{\\text{roll}}|$, and
    `training/rollout_actor_probs_pearson_corr`, their Pearson correlation; `training/rollout_probs_diff_valid` is 1
    when there were tokens to compare (0 and NaNs otherwise).
    """
    b = batch.batch
    if "rollout_log_probs" not in b.keys() or "old_log_probs" not in b.keys():  # noqa: SIM118 (TensorDict)
        return {}
    mask = b["response_mask"].bool()
    if not mask.any():
        return {"training/rollout_probs_diff_valid": 0, "training/rollout_probs_diff_max": float("nan"),
                "training/rollout_probs_diff_mean": float("nan"), "training/rollout_probs_diff_std": float("nan"),
                "training/rollout_actor_probs_pearson_corr": float("nan")}
    actor, rollout = torch.exp(b["old_log_probs"])[mask], torch.exp(b["rollout_log_probs"])[mask]
    diff = (actor - rollout).abs()
    corr = torch.corrcoef(torch.stack([actor, rollout]))[0, 1] if actor.numel() > 1 else torch.tensor(float("nan"))
    return {"training/rollout_probs_diff_valid": 1, "training/rollout_probs_diff_max": float(diff.max()),
            "training/rollout_probs_diff_mean": float(diff.mean()), "training/rollout_probs_diff_std": float(diff.std()),
            "training/rollout_actor_probs_pearson_corr": float(corr)}


def trajectory_version_metrics(min_global_steps, max_global_steps, global_steps: int) -> dict[str, float]:
    """`training/off_policy/trajectory_{spans,staleness,staleness_worst}/{mean,max,min}` of one step's trajectories."""
    lo = np.asarray(min_global_steps, dtype=np.int64)
    hi = np.asarray(max_global_steps, dtype=np.int64)
    if lo.size == 0:
        return {}
    values = {"trajectory_spans": hi - lo + 1, "trajectory_staleness": (global_steps - 1) - hi,
              "trajectory_staleness_worst": (global_steps - 1) - lo}
    out = {}
    for name, v in values.items():
        for stat in ("mean", "max", "min"):
            out[f"training/off_policy/{name}/{stat}"] = float(getattr(v, stat)())
    return out


def sample_trace_info(batch, replay_buffer) -> dict:
    """What the `sample` span records: the sampled sessions' times, and in async mode the buffer's decisions.

    `session_timing`: per sampled trajectory its key, wall-clock `start` / `end` (the agent loop's
    `agent_loop_metrics`), `fetched_at`, `min_global_steps` / `max_global_steps`, the process that ran its
    agent loop (`pid`), when its generation ran (`gen_start` / `gen_end`) and the engine batches that
    computed it (`engine_batches`: `[server pid, batch id, start, end, size, weight version]`), so a timeline
    of generation, agent loop and training, one row per process, can be drawn from the trace alone
    (`minirl.trace.processes`). `replay_buffer` (async only): what
    `ReplayBufferAsync.sample` did (waited_s, blocked_s, polls, evicted groups with their spans, refilled
    prompts, selected spans).
    """
    nt = batch.non_tensor_batch
    timing = []
    for i, m in enumerate(nt.get("agent_loop_metrics", [])):
        timing.append({"key": f"{nt['uid'][i]}_{int(nt['session_id'][i]) if 'session_id' in nt else 0}_0",
                       "start": float(m.get("start", 0.0)), "end": float(m.get("end", 0.0)),
                       "fetched_at": int(nt["global_steps"][i]) if "global_steps" in nt else None,
                       "min_global_steps": int(nt["min_global_steps"][i]),
                       "max_global_steps": int(nt["max_global_steps"][i]),
                       "pid": int(m.get("pid", 0)), "gen_start": float(m.get("gen_start", 0.0)),
                       "gen_end": float(m.get("gen_end", 0.0)), "engine_batches": list(m.get("engine_batches", []))})
    out = {"session_timing": timing}
    last = getattr(replay_buffer, "last_sample", None)
    if last is not None:
        out["replay_buffer"] = dict(last)
    return out


def compute_step_metrics(batch: DataProto, *, use_critic: bool, timing_raw: dict, global_steps: int, epoch: int,
                         versions: dict) -> dict:
    """One step's row of metrics from the trained `batch`: data, `timing_s/<stage>`, step and epoch, the weight
    versions (`version/<model>`) and verl's staleness metrics (the rest of `_compute_metrics`)."""
    metrics = compute_data_metrics(batch, use_critic)
    metrics.update({f"timing_s/{k}": v for k, v in timing_raw.items()})
    metrics["training/global_step"] = global_steps
    metrics["training/epoch"] = epoch
    metrics.update({f"version/{k}": v for k, v in versions.items()})
    nt = batch.non_tensor_batch  # verl's step 5: trajectory spans and staleness, in versions
    metrics.update(trajectory_version_metrics(nt["min_global_steps"], nt["max_global_steps"], global_steps))
    return metrics


def compute_validation_metrics(batch: DataProto, reward_fn_key: str, n: int) -> dict:
    """`val-core/<data_source>/reward/mean@<n>` (and `/acc/mean@<n>` when the reward reports `acc`) of a scored
    validation batch (verl: `PPOTrainer._validate`, `verl/trainer/ppo/v1/trainer_base.py:961`; verl also reports
    best/worst/majority@k under `val-aux/`)."""
    scores = batch.batch["rm_scores"].sum(-1).numpy()
    sources = np.asarray(batch.non_tensor_batch.get(reward_fn_key, ["unknown"] * len(batch)))
    metrics = {}
    for src in sorted(set(sources.tolist())):
        sel = sources == src
        metrics[f"val-core/{src}/reward/mean@{n}"] = float(scores[sel].mean())
        if "acc" in batch.non_tensor_batch:
            metrics[f"val-core/{src}/acc/mean@{n}"] = float(np.asarray(batch.non_tensor_batch["acc"], dtype=float)[sel].mean())
    return metrics
