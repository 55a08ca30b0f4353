"""The doctor's checks: each reads a run's trace and metrics and names the layer where it went wrong.

No verl counterpart. Every check is a function `check(record) -> list[Finding]` over a `RunRecord`
(`minirl.doctor.record`); `diagnose` runs them in the order below. A check fires only on evidence that
a healthy run never shows, and each one leaves alone what an earlier, deeper cause explains (a NaN
loss when the micro-batch is larger than the rank's data is a scheduling finding, not a backend one;
a log-prob mismatch on stale weights is a weight-sync finding, not a rollout one), so that one fault
gives one finding:

| check | layer | fires when (what a healthy run never shows) |
|---|---|---|
| `micro_batch_exceeds_rank_share` | scheduling | an update's micro-batch is larger than the mini-batch a rank gets |
| `nonfinite` | backend, reward, advantage (by stage) | a NaN/inf record of the trainer's per-stage check, or a null loss / grad norm |
| `stale_rollout_weights` | weight sync | sync mode, yet a step sampled with older weights than the actor's (or a sync left the rollout behind) |
| `partial_weight_sync` | weight sync | a sync loaded fewer tensors than the actor has |
| `reference_moves` | weight sync | after the actor has changed, the reference's log-probs are the actor's |
| `rollout_logprob_mismatch` | rollout | the rollout's log-probs differ from the actor's on the same weights and tokens |
| `reward_constant` | reward | every response of every step scored the same |
| `zero_advantage` | advantage | advantages are 0 everywhere while the scores differ (every group equal) |
| `loss_mask` | loss | the actor's loss counts more tokens than the sampled responses have |
| `stage_error` | the stage's layer | a stage raised |

Checks of your own join these with `register_check` (lab 08's reader writes one): they run after the
built-in ones, on the same `RunRecord`.
"""

from __future__ import annotations

from collections.abc import Callable

from minirl.doctor.findings import VERL, Evidence, Finding, fmt
from minirl.doctor.record import RunRecord

__all__ = ["CHECKS", "LOGPROB_DIFF_THRESHOLD", "STAGE_LAYER", "ZERO_ADVANTAGE_TOL", "diagnose", "register_check",
           "registered_checks", "unregister_check"]

LOGPROB_DIFF_THRESHOLD = 0.05
"""`training/rollout_actor_logprob_diff_mean` above this, on equal weights, is a mismatch (a clean CPU run: ~1e-7)."""
ZERO_ADVANTAGE_TOL = 1e-3
"""|advantage| below this on every token counts as zero (GRPO's are O(1) when the scores in a group differ)."""
SAME_LOGPROB_RTOL = 1e-5
"""Two summaries of log-probs this close are the same weights (two engines' float noise: ~1e-7; one
optimizer step of lr 1e-4 moves a mean log-prob by ~1e-2)."""
SUSPICIOUS_LR = 1e-3
"""An actor/critic learning rate above this is named in a backend finding (RL fine-tuning uses ~1e-6 .. 1e-4)."""

STAGE_LAYER = {"rollout": "rollout", "sample": "rollout", "reward": "reward", "balance_batch": "scheduling",
               "old_log_prob": "backend", "ref_log_prob": "backend", "values": "backend",
               "advantage": "advantage", "update_critic": "backend", "update_actor": "backend",
               "update_weights": "weight sync", "validate": "rollout"}
"""The layer a stage belongs to, for a stage that raised or produced a NaN (by default)."""

_SCORE_FIELDS = ("rm_scores", "token_level_scores", "token_level_rewards", "acc")


def _update_stages(rec: RunRecord) -> list[dict]:
    return rec.stages_named("update_actor") + rec.stages_named("update_critic")


def _oversized_micro_batches(rec: RunRecord) -> dict[tuple[str, int], tuple[list, list]]:
    """(stage, step) -> (micro-batch sizes, per-rank mini-batch sizes) where a micro-batch is larger."""
    out = {}
    for ev in _update_stages(rec):
        extra = ev.get("extra", {})
        micro, mini = extra.get("micro_batch_size_per_rank") or [], extra.get("mini_batch_size_per_rank") or []
        if micro and mini and max(micro) > min(mini):
            out[(ev["stage"], ev["step"])] = (micro, mini)
    return out


# ------------------------------------------------------------------------------------------- scheduling
def check_micro_batches(rec: RunRecord) -> list[Finding]:
    """A micro-batch larger than the rank's share of the mini-batch (verl issue #2505: NaN gradients)."""
    bad = _oversized_micro_batches(rec)
    if not bad:
        return []
    evidence, steps = [], sorted({s for _, s in bad})
    for (stage, step), (micro, mini) in sorted(bad.items(), key=lambda kv: kv[0][1]):
        evidence.append(Evidence(f"{stage}.extra.micro_batch_size_per_rank", micro, step,
                                 f"<= mini_batch_size_per_rank = {fmt(mini)} (the sequences one rank gets per "
                                 "optimizer step)", "trace"))
        legacy = min(mini) // max(micro)
        evidence.append(Evidence("gradient accumulation = per-rank mini-batch // micro-batch", legacy, step,
                                 ">= 1: verl's legacy actor divided each micro-batch loss by it (0 -> inf/NaN)",
                                 "trace"))
    for nf in rec.nonfinite():
        if (nf["stage"], nf["step"]) in bad:
            evidence.append(Evidence(f"{nf['stage']}: {nf['field']}", "NaN/inf", nf["step"],
                                     "finite; the non-finite values follow from the micro-batch above", "trace"))
    key = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
    evidence.append(Evidence(key, rec.cfg(key), None, "a divisor of ppo_mini_batch_size * rollout.n / dp", "config"))
    return [Finding("scheduling", "micro_batch_exceeds_rank_share",
                    "the micro-batch is larger than the mini-batch one rank gets: no full micro-batch exists, and "
                    "a loss scaled by mini // micro divides by zero",
                    "update_actor", steps, evidence,
                    [VERL["micro_batches"], VERL["train_mini_batch"], VERL["actor_validate"]],
                    ["minirl.config.validate (the batch arithmetic check)", "minirl.workers.engine.utils.prepare_micro_batches"])]


# ------------------------------------------------------------------------------------------- NaN / inf
def _nonfinite_layer(stage: str, field_name: str) -> str:
    if stage == "reward" or field_name in _SCORE_FIELDS or field_name.startswith(("critic/score", "reward/")):
        return "reward"
    return STAGE_LAYER.get(stage, "backend")


def _nonfinite_records(rec: RunRecord) -> list[dict]:
    """The trainer's NaN records, or (without them) the `nonfinite/<stage>/<field>` counts of the metric rows."""
    records = rec.nonfinite()
    if records:
        return records
    out = []
    for step, row in sorted(rec.metrics.items()):
        for key, count in row.items():
            if key.startswith("nonfinite/") and key.count("/") >= 2:
                _, stage, field_name = key.split("/", 2)
                out.append({"step": step, "stage": stage, "field": field_name, "count": count, "total": None,
                            "policy": rec.cfg("trainer.nonfinite", "stop")})
    return out


def check_nonfinite(rec: RunRecord) -> list[Finding]:
    """A NaN/inf in a stage's output: the stage and field that produced it first, and what it points at."""
    explained = set(_oversized_micro_batches(rec))
    by_layer: dict[str, list[dict]] = {}
    for r in _nonfinite_records(rec):
        if (r["stage"], r["step"]) not in explained:
            by_layer.setdefault(_nonfinite_layer(r["stage"], r["field"]), []).append(r)
    findings = []
    for layer, records in by_layer.items():
        first = records[0]
        stopped = first.get("policy", "stop") == "stop"
        evidence = [Evidence(f"{r['stage']}: {r['field']}", f"{r['count']} NaN/inf" + (f" of {r['total']}" if r.get("total")
                                                                                       else ""), r["step"],
                             "finite (trainer.nonfinite=" + str(r.get("policy", "stop")) + ")", "trace")
                    for r in records[:4]]
        if layer == "backend":
            norms = rec.series("actor/grad_norm")
            if norms:
                evidence.append(Evidence("actor/grad_norm before it", [norms[s] for s in sorted(norms)][-3:],
                                         first["step"] - 1 if first["step"] - 1 in norms else None,
                                         "finite and O(1) after clipping", "metrics"))
            for key in ("actor_rollout_ref.actor.optim.lr", "critic.optim.lr"):
                lr = rec.cfg(key)
                if isinstance(lr, (int, float)) and lr > SUSPICIOUS_LR:
                    evidence.append(Evidence(key, lr, None, f"<= {SUSPICIOUS_LR:g} (RL fine-tuning uses ~1e-6 .. 1e-4)",
                                             "config"))
        where = {"backend": [VERL["optimizer_step"], VERL["update_actor"], VERL["optim_config"]],
                 "reward": [VERL["compute_score"], VERL["default_score"]],
                 "advantage": [VERL["adv_stage"], VERL["grpo"]]}.get(layer, [VERL["step_once"]])
        title = (f"{first['field']} turned NaN/inf in stage {first['stage']} at step {first['step']}"
                 + (": the run stopped there" if stopped else " (skipped: trainer.nonfinite=skip)"))
        findings.append(Finding(layer, "nonfinite", title, first["stage"], sorted({r["step"] for r in records}),
                                evidence, where, ["minirl.trainer.ppo.finite_checks",
                                                  "minirl.workers.engine.fsdp_engine.FSDPEngine.optimizer_step"]))
    return findings


# ------------------------------------------------------------------------------------------- weight sync
def _stale_steps(rec: RunRecord) -> dict[int, list[Evidence]]:
    """Training step -> evidence that its trajectories came from older weights than the actor's (sync mode)."""
    if str(rec.cfg("trainer.v1.trainer_mode", "sync")) != "sync":
        return {}  # async modes sample from older versions on purpose
    out: dict[int, list[Evidence]] = {}
    for ev in rec.stages_named("sample"):
        sampled, actor = ev.get("extra", {}).get("policy_versions"), ev.get("versions", {}).get("actor")
        if sampled and actor is not None and sampled != [actor]:
            out.setdefault(ev["step"], []).append(Evidence(
                "sample.extra.policy_versions", sampled, ev["step"],
                f"[{actor}] (sync mode: the actor's version when the step samples)", "trace"))
    for ev in rec.stages_named("update_weights"):
        rollout, actor = ev.get("extra", {}).get("rollout/policy_version"), ev.get("versions_after", {}).get("actor")
        if rollout is not None and actor is not None and rollout < actor:
            out.setdefault(ev["step"] + 1, []).insert(0, Evidence(
                "update_weights.extra.rollout/policy_version", rollout, ev["step"],
                f"{actor} (the actor's version after the sync); tensors sent: "
                f"{fmt(ev['extra'].get('perf/update_weights_tensors'))}", "trace"))
    return out


def check_stale_weights(rec: RunRecord) -> list[Finding]:
    """Sync mode: every step must sample with the weights the actor has when it samples."""
    stale = _stale_steps(rec)
    if not stale:
        return []
    evidence = [e for s in sorted(stale) for e in stale[s]]
    for s in sorted(stale):
        diff = rec.metric("training/rollout_actor_logprob_diff_mean", s)
        if diff is not None:
            evidence.append(Evidence("training/rollout_actor_logprob_diff_mean", diff, s,
                                     "~0 (old_log_probs from the actor's weights, rollout_log_probs from the rollout's)"))
    return [Finding("weight sync", "stale_rollout_weights",
                    "the rollout sampled with older weights than the actor's: a weight sync did not reach it",
                    "update_weights", sorted(stale), evidence, [VERL["update_weights"], VERL["on_step_end"],
                                                                VERL["replay_sample"]],
                    ["minirl.checkpoint_engine.manager.CheckpointEngineManager.update_weights",
                     "minirl.trainer.ppo.trainer_sync.PPOTrainerSync.on_step_end"])]


def _partial_syncs(rec: RunRecord) -> dict[int, tuple[int, int]]:
    """Step of the sync -> (tensors gathered from the actor, tensors loaded into a replica) where fewer were loaded."""
    out = {}
    for ev in rec.stages_named("update_weights"):
        phases = ev.get("extra", {}).get("phases") or []
        gathered = next((p.get("tensors") for p in phases if p.get("phase") == "gather"), None)
        loaded = [p.get("tensors") for p in phases if p.get("phase") == "load" and p.get("tensors") is not None]
        if gathered and loaded and min(loaded) < gathered:
            out[ev["step"]] = (gathered, min(loaded))
    return out


def check_partial_sync(rec: RunRecord) -> list[Finding]:
    """A sync that loaded only some of the actor's tensors: versions agree, weights do not."""
    partial = _partial_syncs(rec)
    if not partial:
        return []
    evidence = [Evidence("update_weights.extra.phases[load].tensors", loaded, s,
                         f"{gathered} (every tensor the gather phase took from the actor)", "trace")
                for s, (gathered, loaded) in sorted(partial.items())]
    return [Finding("weight sync", "partial_weight_sync",
                    "a weight sync loaded only part of the actor's tensors: the rollout runs half-updated weights",
                    "update_weights", sorted(partial), evidence, [VERL["update_weights"], VERL["on_step_end"]],
                    ["minirl.checkpoint_engine.manager.CheckpointEngineManager.update_weights"])]


def check_reference_moves(rec: RunRecord) -> list[Finding]:
    """After the actor has changed, the frozen reference must score tokens differently from it."""
    learned = any(v > 0 for v in rec.series("actor/grad_norm").values())
    evidence, steps = [], []
    for ev in rec.stages_named("ref_log_prob"):
        step, versions = ev["step"], ev.get("versions", {})
        if versions.get("ref") not in (None, 0):
            evidence.append(Evidence("ref_log_prob.versions.ref", versions["ref"], step, "0 (the initial policy)", "trace"))
            steps.append(step)
            continue
        ref, old = rec.summary("ref_log_prob", step, "ref_log_prob"), rec.summary("old_log_prob", step, "old_log_probs")
        if not (learned and (versions.get("actor") or 0) >= 1 and ref.get("valid") and ref.get("valid") == old.get("valid")):
            continue
        if all(abs(ref[k] - old[k]) <= SAME_LOGPROB_RTOL * max(1.0, abs(old[k])) for k in ("mean", "min", "max")
               if k in ref and k in old):
            steps.append(step)
            evidence.append(Evidence("ref_log_prob (mean, min, max)", [ref["mean"], ref["min"], ref["max"]], step,
                                     f"!= old_log_probs {fmt([old['mean'], old['min'], old['max']])} (equal to "
                                     f"{SAME_LOGPROB_RTOL:g}): the reference is version 0, the actor version "
                                     f"{versions.get('actor')}", "trace"))
    if not steps:
        return []
    kl = rec.series("actor/kl_loss")
    if kl:
        evidence.append(Evidence("actor/kl_loss", [kl[s] for s in sorted(kl)], None,
                                 "growing as the actor moves away from the reference", "metrics"))
    return [Finding("weight sync", "reference_moves",
                    "the reference policy moves with the actor: its log-probs are the current actor's, so the KL "
                    "term measures nothing", "ref_log_prob", sorted(steps), evidence,
                    [VERL["ref_worker"], VERL["ref_stage"], VERL["init_model"]],
                    ["minirl.workers.engine_workers.ActorRolloutRefWorker.compute_ref_log_prob"])]


# ------------------------------------------------------------------------------------------- rollout
def check_logprob_mismatch(rec: RunRecord) -> list[Finding]:
    """The actor re-scores the rollout's tokens with the same weights: the log-probs must agree."""
    if rec.cfg("algorithm.rollout_correction.bypass_mode"):
        return []  # old_log_probs are the rollout's own
    skip = set(_stale_steps(rec)) | {s + 1 for s in _partial_syncs(rec)}
    evidence, steps = [], []
    for s, diff in rec.series("training/rollout_actor_logprob_diff_mean").items():
        if s in skip or diff <= LOGPROB_DIFF_THRESHOLD:
            continue
        steps.append(s)
        sample = rec.stage("sample", s) or {}
        evidence.append(Evidence("training/rollout_actor_logprob_diff_mean", diff, s,
                                 f"< {LOGPROB_DIFF_THRESHOLD:g}: sampled by version {fmt(sample.get('extra', {}).get('policy_versions'))}"
                                 f", re-scored by the actor at version {fmt(sample.get('versions', {}).get('actor'))}"))
        worst = rec.metric("training/rollout_actor_logprob_diff_max", s)
        if worst is not None:
            evidence.append(Evidence("training/rollout_actor_logprob_diff_max", worst, s, "~0"))
    if not steps:
        return []
    return [Finding("rollout", "rollout_logprob_mismatch",
                    "the actor scores the rollout's tokens differently on the same weights: the trajectory's model "
                    "inputs (position ids, attention mask) or sampling settings differ from what the rollout used",
                    "old_log_prob", steps, evidence,
                    [VERL["postprocess"], VERL["position_ids"], VERL["position_from_mask"], VERL["debug_metrics"]],
                    ["minirl.transfer_queue.build_model_inputs", "minirl.workers.rollout.hf_rollout"])]


# ------------------------------------------------------------------------------------------- reward
def _constant_score_steps(rec: RunRecord) -> dict[int, float]:
    highs, lows = rec.series("critic/score/max"), rec.series("critic/score/min")
    return {s: highs[s] for s in highs if s in lows and highs[s] == lows[s]}


def check_reward_constant(rec: RunRecord) -> list[Finding]:
    """Every response of every step scored the same: the reward gives GRPO/PPO nothing to compare."""
    scored, constant = rec.series("critic/score/max"), _constant_score_steps(rec)
    if not scored or set(constant) != set(scored):
        return []
    value = sorted(set(constant.values()))
    evidence = [Evidence("critic/score/max = critic/score/min", constant[s], s,
                         "max > min: responses to the same task score differently") for s in sorted(constant)]
    acc = rec.series("reward/acc/mean")
    if acc:
        evidence.append(Evidence("reward/acc/mean", [acc[s] for s in sorted(acc)], None,
                                 "> 0 for a warm-started policy", "metrics"))
    fails = {s: v for s, v in rec.series("reward/failures").items() if v}
    if fails:
        evidence.append(Evidence("reward/failures", [fails[s] for s in sorted(fails)], min(fails),
                                 "0 (score calls that raised or timed out score 0)"))
    return [Finding("reward", "reward_constant",
                    f"every response scored {fmt(value[0] if len(value) == 1 else value)} at every step: the reward "
                    "function never distinguishes responses (a parser that never matches, a wrong data_source)",
                    "rollout", sorted(constant), evidence,
                    [VERL["compute_score"], VERL["reward_worker"], VERL["default_score"], VERL["gsm8k_extract"]],
                    ["minirl.workers.reward.reward_loop", "minirl.utils.reward_score"])]


# ------------------------------------------------------------------------------------------- advantage
def check_zero_advantage(rec: RunRecord) -> list[Finding]:
    """Advantages 0 on every token while the scores differ: every group's scores are equal."""
    highs, lows = rec.series("critic/advantages/max"), rec.series("critic/advantages/min")
    constant = _constant_score_steps(rec)
    score_hi, score_lo = rec.series("critic/score/max"), rec.series("critic/score/min")
    zero = [s for s in highs if s in lows and s not in constant and s in score_hi
            and max(abs(highs[s]), abs(lows[s])) < ZERO_ADVANTAGE_TOL]
    if not zero or 2 * len(zero) < len(highs):
        return []
    evidence = []
    for s in zero:
        evidence.append(Evidence("critic/advantages/(min, max)", [lows[s], highs[s]], s,
                                 f"not all 0 while critic/score spans {fmt(score_lo[s])} .. {fmt(score_hi[s])}"))
        adv = rec.summary("advantage", s, "advantages")
        if adv:
            evidence.append(Evidence("advantage.fields.advantages.summary (min, max)", [adv.get("min"), adv.get("max")],
                                     s, "not all 0", "trace"))
    n = rec.cfg("actor_rollout_ref.rollout.n")
    return [Finding("advantage", "zero_advantage",
                    f"the advantages are 0 on every token although the scores differ: within each uid group the "
                    f"{n} responses scored the same, so group-relative advantages vanish and nothing is learned",
                    "advantage", zero, evidence, [VERL["grpo"], VERL["adv_stage"], VERL["dapo_filter"]],
                    ["minirl.trainer.ppo.core_algos.compute_grpo_outcome_advantage", "minirl.trainer.ppo.advantage"])]


# ------------------------------------------------------------------------------------------- loss
def _sampled_mask_tokens(rec: RunRecord, step: int) -> int | None:
    rec_mask = ((rec.stage("sample", step) or {}).get("fields") or {}).get("response_mask") or {}
    shape, mean = rec_mask.get("shape"), (rec_mask.get("summary") or {}).get("mean")
    if not shape or mean is None or len(shape) != 2:
        return None
    return round(mean * shape[0] * shape[1])


def check_loss_mask(rec: RunRecord) -> list[Finding]:
    """The policy loss must count exactly the response tokens the rollout generated (response_mask ones)."""
    epochs = int(rec.cfg("actor_rollout_ref.actor.ppo_epochs", 1) or 1)
    evidence, steps = [], []
    for ev in rec.stages_named("update_actor"):
        step = ev["step"]
        expected = _sampled_mask_tokens(rec, step)
        passes = [p for w in rec.worker_calls(ev, "update_actor") for p in w.get("passes", []) if p.get("pass") == "train"]
        counted = sum(sum(t for t in p.get("response_tokens") or [] if t is not None) for p in passes)
        if expected is None or not passes or counted // epochs <= expected:
            continue
        steps.append(step)
        evidence.append(Evidence("update_actor worker passes: response_tokens (sum over ranks, per epoch)",
                                 counted // epochs, step,
                                 f"{expected} = the ones of the sampled response_mask (sample stage)", "workers"))
    if not steps:
        return []
    resp = rec.series("response_length/mean")
    if resp:
        s = steps[0]
        rows = ((rec.stage("sample", s) or {}).get("fields", {}).get("response_mask") or {}).get("shape", [0])[0]
        evidence.append(Evidence("response_length/mean x sequences", round(resp.get(s, 0) * rows), s,
                                 "the same count: tokens the rollout generated (padding excluded)"))
    return [Finding("loss", "loss_mask",
                    "the policy loss counts tokens the rollout did not generate: the loss mask covers padding or "
                    "observation tokens", "update_actor", steps, evidence,
                    [VERL["ppo_loss"], VERL["agg_loss"], VERL["postprocess"]],
                    ["minirl.workers.utils.losses.ppo_loss", "minirl.trainer.ppo.core_algos.agg_loss"])]


# ------------------------------------------------------------------------------------------- errors
def check_stage_errors(rec: RunRecord) -> list[Finding]:
    """A stage that raised: the run ended there."""
    out = []
    for ev in rec.errors():
        out.append(Finding(STAGE_LAYER.get(ev["stage"], "backend"), "stage_error",
                           f"stage {ev['stage']} raised at step {ev['step']}: the run ended there", ev["stage"],
                           [ev["step"]], [Evidence(f"{ev['stage']}.error", ev.get("error", "?")[:200], ev["step"],
                                                   "status ok", "trace")], [VERL["step_once"]]))
    return out


CHECKS = (check_micro_batches, check_nonfinite, check_stale_weights, check_partial_sync, check_reference_moves,
          check_logprob_mismatch, check_reward_constant, check_zero_advantage, check_loss_mask, check_stage_errors)
"""Every built-in check, in the order `diagnose` runs them (deeper causes first)."""

_REGISTERED: dict[str, Callable[[RunRecord], list[Finding]]] = {}


def register_check(fn: Callable[[RunRecord], list[Finding]] | None = None, *, name: str | None = None):
    """Add a check of your own to `diagnose` (and `minirl doctor` in this process): a decorator, or a call.

    A check is `fn(record) -> list[Finding]`: it reads the `RunRecord` (metrics, stage events, field summaries,
    per-rank calls, config) and returns one `Finding` per problem (empty for a healthy run), naming the layer
    (one of `LAYERS`). Registered checks run after the built-in `CHECKS`, in registration order; registering a
    name again replaces the earlier check (a notebook cell run twice), `unregister_check(name)` removes it.

        @register_check
        def reward_without_positive_scores(rec):
            ...
            return [Finding("reward", "reward_without_positive_scores", "...", "rollout", [1], evidence, [])]

    Returns `fn`. No verl counterpart (the doctor is minirl's own).
    """
    def add(f):
        _REGISTERED[name or f.__name__] = f
        return f

    return add if fn is None else add(fn)


def unregister_check(name: str) -> None:
    """Remove the registered check `name` (no error if there is none)."""
    _REGISTERED.pop(name, None)


def registered_checks() -> dict[str, Callable[[RunRecord], list[Finding]]]:
    """name -> the checks added with `register_check`, in the order they run."""
    return dict(_REGISTERED)


def diagnose(rec: RunRecord) -> list[Finding]:
    """Run every check (the built-in ones, then the registered ones) on a loaded run; empty for a healthy run."""
    return [f for check in (*CHECKS, *_REGISTERED.values()) for f in check(rec)]
