"""`ReplayBuffer`: which finished trajectories the trainer trains on next.

verl: `ReplayBuffer` (`verl/trainer/ppo/v1/replay_buffer.py:63`). The trainer never asks the rollout
for "the batch": prompts and trajectories go into the TransferQueue (`minirl.transfer_queue`), and
`ReplayBuffer.sample` (`verl/trainer/ppo/v1/replay_buffer.py:405`) reads only the *tags* to decide
which trajectories form the next batch, returning their keys as a `KVBatchMeta`.

What is stored, and under which key (verl's "[Trajectories storage format]"):

| key | tag | fields |
|---|---|---|
| `{uid}` (one per prompt) | `is_prompt: True`, `status`, `global_steps` (the step that sampled the prompt) | none in sync mode; async: the prompt's row (for checkpoints) |
| `{uid}_{session}_{index}` (one per trajectory, written by `AgentLoopWorkerTQ`) | `status: success`, `prompt_len`, `response_len`, `seq_len`, `global_steps`, `min_global_steps`, `max_global_steps` (the policy versions that sampled it) | `prompts`, `responses`, `response_mask`, `rollout_log_probs`, `num_turns`, `uid`, `session_id`, dataset fields ... |

A prompt's `status` goes `pending` (sampled from the dataset) -> `running` (its `rollout.n`
sessions started) -> `finished` (all sessions done) or `failure` (all done, one failed, with the
error in the tag). The trainer writes `pending`, the agent-loop worker the rest. Only
terminal groups (finished or failure) can be sampled, so a GRPO group is never split between two
batches: the group-relative advantage needs all `n` of them.

`sample(global_steps, batch_size)` in sync mode:

1. read every tag of the partition (`_sync_metadata_from_transfer_queue`, verl `:188`);
2. the terminal prompt uids, oldest `global_steps` first (`_select_prompt_uids`, verl `:366`;
   in sync mode every group in the store comes from the current step, so oldest = newest);
3. take `batch_size` of them, clear their prompt keys, and return the keys and tags of their
   trajectories in the order they were written (`_materialize_batch`, verl `:377`).

`ReplayBufferAsync` (`verl/trainer/ppo/v1/replay_buffer.py:497`), the async trainers' buffer, polls
instead: generation runs in the background, so `sample` re-reads the tags until `batch_size` groups are
terminal, and controls staleness. A prompt fetched at step $g$ and trained at step $k$ *spans*
$k-g+1$ steps (1: fetched this step); `max_off_policy_threshold` bounds it, by
`max_off_policy_strategy`:

- `drop`: a finished group that spans more than the threshold is evicted (its prompt and
  trajectories cleared) and exactly as many new prompts are put up (`refill_fn(k)`); groups still
  running are left to finish (and are evicted then, if still too old);
- `wait` (dropless): nothing is evicted, but sampling blocks while any pending or running prompt has
  reached the threshold, so it finishes and is trained on within the bound.

Failed groups are evicted and refilled in both (verl's "evict k, refill k" for every async path).
Every eviction is counted in verl's metrics: `training/off_policy/evicted_samples` and
`training/off_policy/evicted_samples_staleness/{mean,max,min}` (the evicted groups' spans),
`training/rollout_failure/evicted_samples`.

**DAPO's dynamic sampling** (`algorithm.filter_groups`, sync mode; verl: `_dapo_filtered_keys`, `:248`,
and the DAPO branch of `sample`, `:405`). A finished group whose `filter_groups.metric` (a key of each
session's `reward_extra_info`, e.g. `acc`) is the same for all its trajectories has no reward spread:
every GRPO advantage in it is 0, so it would only dilute the batch. Such groups are evicted, each
eviction earns 2 refill credits, and `refill_fn` puts up to `max_inflight_gen_batches *
train_batch_size` new prompts up per round (verl's "evict k; refill 2k"). Once `batch_size` groups
with spread are there, the oldest are trained on and the surplus is discarded. Metrics:
`training/filter_groups/evicted_samples` (groups evicted), `.../discarded_surplus_samples`, and (minirl
only) `.../generated_groups` (groups generated this step), `.../filtered_reward_counts/<value>` (the value
the evicted groups shared; verl logs that breakdown as a table).

What minirl leaves out: polling in sync mode (minirl's sync rollout has finished before `sample` is
called, so too few groups is an error; with DAPO a refill generates synchronously), DAPO filtering in
the async buffer, and custom samplers. verl ignores `filter_groups.max_num_gen_batches` in V1; minirl
uses it to bound the refills of one step (0: at most one pass over the training prompts), because its
synchronous refill loop could otherwise never end on a task the model always (or never) solves. The
async poll interval is 5 ms (verl: 2 s; a minirl step takes about a second).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from minirl.transfer_queue import PROMPT_STATUSES, KVBatchMeta, TransferQueue, uid_of


def submit_prompts(tq: TransferQueue, uids: Sequence[str], global_steps: int, partition_id: str = "train",
                   fields: dict | None = None) -> None:
    """Register prompts as `pending` (verl: `PPOTrainer._submit_batch_to_rollout`, `verl/trainer/ppo/v1/trainer_base.py:1391`).

    Tag-only in sync mode; the async trainers also store each prompt's row (`fields`, one value per prompt), as
    verl does "for async checkpoint recovery": a checkpoint then holds what a resumed run must re-issue.
    """
    tags = [{"is_prompt": True, "status": "pending", "global_steps": int(global_steps)} for _ in uids]
    tq.kv_batch_put(list(uids), partition_id=partition_id, tags=tags, fields=fields)


class ReplayBuffer:
    """Samples group-complete trajectories from a TransferQueue by their tags.

    Args:
        tq: the store the rollout writes into.
        trainer_mode: `trainer.v1.trainer_mode`; minirl implements "sync".
        refill_fn: `refill_fn(k)` generates `k` new prompts' groups (the trainer's `_add_prompts_to_generate`);
            needed by DAPO filtering.
        filter_groups_metric: the `reward_extra_info` key DAPO filters on (`algorithm.filter_groups.metric`);
            None: no filtering.
        train_batch_size: prompts of one step (the unit of `max_inflight_gen_batches`).
        max_inflight_gen_batches: DAPO refills of at most this many train batches at a time.
        max_refill_prompts: DAPO gives up (an error naming the metric) after refilling this many prompts in one step.
    """

    def __init__(self, tq: TransferQueue, trainer_mode: str = "sync", refill_fn: Callable[[int], int] | None = None,
                 filter_groups_metric: str | None = None, train_batch_size: int | None = None,
                 max_inflight_gen_batches: int = 1, max_refill_prompts: int | None = None) -> None:
        if trainer_mode != "sync" and type(self) is ReplayBuffer:
            raise ValueError(f"ReplayBuffer(trainer_mode={trainer_mode!r}) is the sync buffer only; the async trainers "
                             "use ReplayBufferAsync (verl picks the class by trainer_mode the same way).")
        if filter_groups_metric is not None and refill_fn is None:
            raise ValueError("Group filtering (filter_groups_metric) requires refill_fn to replace evicted groups.")
        if filter_groups_metric is not None and (not isinstance(max_inflight_gen_batches, int)
                                                 or max_inflight_gen_batches <= 0):
            raise ValueError(f"max_inflight_gen_batches={max_inflight_gen_batches!r} must be a positive integer.")
        self.tq = tq
        self.trainer_mode = trainer_mode
        self.refill_fn = refill_fn
        self.filter_groups_metric = filter_groups_metric
        self.train_batch_size = train_batch_size
        self.max_inflight_gen_batches = max_inflight_gen_batches
        self.max_refill_prompts = max_refill_prompts

    def _sync_metadata_from_transfer_queue(self, partition_id: str):
        """Split the partition's tags into prompts (by status, in write order) and trajectories."""
        prompts: dict[str, list[str]] = {s: [] for s in PROMPT_STATUSES}
        prompt_global_steps: dict[str, int] = {}
        trajectories: dict[str, dict] = {}
        for key, tag in self.tq.kv_list(partition_id)[partition_id].items():
            if tag.get("is_prompt", False):
                status = tag.get("status")
                if status not in prompts:
                    raise ValueError(f"prompt {key!r} has status {status!r}; expected one of {PROMPT_STATUSES}.")
                prompts[status].append(key)
                prompt_global_steps[key] = int(tag.get("global_steps", 0))
            else:
                trajectories[key] = tag
        return prompts, prompt_global_steps, trajectories

    def sample(self, global_steps: int, batch_size: int, partition_id: str = "train") -> tuple[KVBatchMeta, dict]:
        """The trajectories of `batch_size` terminal prompt groups, as a `KVBatchMeta`; plus metrics (none in sync).

        `global_steps` is the current step (verl uses it to measure staleness in async mode).
        """
        if partition_id != "val" and self.filter_groups_metric is not None:
            return self._sample_dapo(global_steps, batch_size, partition_id)
        prompts, prompt_global_steps, trajectories = self._sync_metadata_from_transfer_queue(partition_id)
        terminal = prompts["finished"] + prompts["failure"]
        if len(terminal) < batch_size:
            counts = {s: len(v) for s, v in prompts.items()}
            raise RuntimeError(
                f"ReplayBuffer.sample(global_steps={global_steps}, batch_size={batch_size}): only {len(terminal)} "
                f"prompt groups are finished in partition {partition_id!r} (prompts by status: {counts}). In sync "
                "mode the rollout must finish every group before sampling (verl's buffer would poll and wait).")
        selected = sorted(terminal, key=lambda uid: prompt_global_steps[uid])[:batch_size]  # stable: write order
        self._raise_on_failure(partition_id, selected, prompts)
        return self._materialize_batch(partition_id, selected, trajectories), {}

    def _raise_on_failure(self, partition_id: str, selected: list[str], prompts: dict) -> None:
        failed = [uid for uid in selected if uid in prompts["failure"]]
        if failed:
            error = self.tq.kv_list(partition_id)[partition_id][failed[0]].get("error", "unknown error")
            raise RuntimeError(
                f"ReplayBuffer.sample: {len(failed)} prompt group(s) failed during rollout, e.g. uid {failed[0]}: "
                f"{error}. verl would train on the surviving trajectories (or refill the group with "
                "trainer.v1.sampler.sync_refill_failed_groups=True); minirl stops so the error is not lost.")

    # ------------------------------------------------------------------------------ DAPO
    def _dapo_filtered_keys(self, partition_id: str, finished: list[str], trajectories: dict) -> tuple[set, Counter]:
        """Finished groups whose `filter_groups_metric` is the same for all their trajectories, and that value's count.

        verl: `ReplayBuffer._dapo_filtered_keys` (`verl/trainer/ppo/v1/replay_buffer.py:248`). A group of one
        trajectory is never filtered (it has no spread to lose).
        """
        by_uid: dict[str, list[str]] = {}
        for key in trajectories:
            by_uid.setdefault(uid_of(key), []).append(key)
        keys = [k for uid in finished for k in by_uid.get(uid, [])]
        infos = self.tq.kv_batch_get(keys, partition_id, select_fields=["reward_extra_info"])["reward_extra_info"] \
            if keys and "reward_extra_info" in self.tq.fields_of(keys[0], partition_id) else [None] * len(keys)
        values: dict[str, list[float]] = {}
        for key, info in zip(keys, infos):
            if not isinstance(info, dict) or self.filter_groups_metric not in info:
                seen = sorted(info) if isinstance(info, dict) else []
                raise RuntimeError(
                    f"Finished groups are missing DAPO metric {self.filter_groups_metric!r} (trajectory {key}'s "
                    f"reward_extra_info has {seen}). Fix: algorithm.filter_groups.metric=<one of those keys>, e.g. "
                    "acc (what a score function that returns a number reports).")
            values.setdefault(uid_of(key), []).append(float(info[self.filter_groups_metric]))
        filtered = {uid: v[0] for uid, v in values.items() if len(v) > 1 and float(np.std(v)) == 0.0}
        return set(filtered), Counter(filtered.values())

    def _sample_dapo(self, global_steps: int, batch_size: int, partition_id: str) -> tuple[KVBatchMeta, dict]:
        """DAPO's dynamic sampling in sync mode: evict no-spread groups, refill 2k, keep `batch_size`, drop the surplus."""
        prefix = "training" if partition_id == "train" else "validation"
        evicted, counts, refilled, credit, draining = 0, Counter(), 0, 0, False
        limit = int(self.max_inflight_gen_batches) * int(self.train_batch_size or batch_size)
        generated: set[str] = set()
        while True:
            prompts, fetched, trajectories = self._sync_metadata_from_transfer_queue(partition_id)
            generated |= set(prompts["finished"]) | set(prompts["failure"])
            dapo_uids, dapo_counts = self._dapo_filtered_keys(partition_id, prompts["finished"], trajectories)
            if dapo_uids:
                keys = [k for k in trajectories if uid_of(k) in dapo_uids]
                self.tq.kv_clear([*dapo_uids, *keys], partition_id=partition_id)
                evicted += len(dapo_uids)
                counts.update(dapo_counts)
            sampleable = [u for u in prompts["finished"] + prompts["failure"] if u not in dapo_uids]
            inflight = len(prompts["pending"]) + len(prompts["running"])  # 0 here: minirl's sync rollout has finished
            enough = len(sampleable) >= batch_size
            if enough:
                draining, credit = True, 0
            elif not draining:
                credit += 2 * len(dapo_uids)
            if not draining and credit > 0:
                dispatch = min(credit, max(0, limit - inflight))
                if dispatch > 0:
                    if self.max_refill_prompts is not None and refilled + dispatch > self.max_refill_prompts:
                        raise RuntimeError(
                            f"DAPO dynamic sampling: {evicted} of {len(generated)} groups generated this step had no "
                            f"spread in {self.filter_groups_metric!r} and {refilled} refills did not find "
                            f"{batch_size} groups with spread. The task is too easy or too hard for the model "
                            "(verl's legacy DAPO trainer stops the same way: 'Generated too many'). Fix: a harder or "
                            "easier task, or raise algorithm.filter_groups.max_num_gen_batches.")
                    self.refill_fn(dispatch)
                    refilled += dispatch
                    credit -= dispatch
                    continue
            if not enough:
                raise RuntimeError(
                    f"ReplayBuffer.sample (DAPO): {len(sampleable)} groups with spread, {batch_size} needed, and no "
                    f"refill credit left (prompts by status: { {k: len(v) for k, v in prompts.items()} }).")
            selected = sorted(sampleable, key=lambda uid: fetched[uid])[:batch_size]
            self._raise_on_failure(partition_id, selected, prompts)
            surplus = set(sampleable) - set(selected)
            if surplus:  # sync stays bufferless: groups beyond the batch are dropped, as in verl
                keys = [k for k in trajectories if uid_of(k) in surplus]
                self.tq.kv_clear([*surplus, *keys], partition_id=partition_id)
            metrics = {f"{prefix}/filter_groups/evicted_samples": evicted,
                       f"{prefix}/filter_groups/discarded_surplus_samples": len(surplus),
                       f"{prefix}/filter_groups/generated_groups": len(generated)}
            metrics.update({f"{prefix}/filter_groups/filtered_reward_counts/{v:g}": n for v, n in counts.items()})
            return self._materialize_batch(partition_id, selected, trajectories), metrics

    def _materialize_batch(self, partition_id: str, selected_uids: list[str], trajectories: dict) -> KVBatchMeta:
        """Clear the selected prompt keys; return their trajectories' keys and tags in write order."""
        self.tq.kv_clear(selected_uids, partition_id=partition_id)
        chosen = set(selected_uids)
        keys = [key for key in trajectories if uid_of(key) in chosen]
        if partition_id != "val" and not keys:
            raise RuntimeError(f"ReplayBuffer: the selected groups {selected_uids[:3]}... have no trajectories in "
                               f"partition {partition_id!r}; were they written under '{{uid}}_{{session}}_{{index}}' keys?")
        return KVBatchMeta(keys, [dict(trajectories[k]) for k in keys], partition_id)


class ReplayBufferAsync(ReplayBuffer):
    """The async trainers' buffer: polls, evicts stale or failed groups, refills, or waits.

    Args:
        tq: the store the background rollout writes into.
        trainer_mode: colocate_async | separate_async.
        max_off_policy_threshold: the most steps a group may span from fetch to training (>= 1).
        max_off_policy_strategy: drop | wait.
        refill_fn: `refill_fn(k)` puts `k` new prompts up for generation (the trainer's
            `_add_prompts_to_generate`); None evicts without refilling.
        poll_interval: seconds between two reads of the tags while waiting.
        check_fn: called at every poll; it raises if the background generation failed, so a crashed
            rollout ends the wait with its error instead of a hang.
        timeout_s: give up waiting after this long, naming the groups by status.

    Mirrors `ReplayBufferAsync` (`verl/trainer/ppo/v1/replay_buffer.py:497`): `_stale_terminal_keys`,
    `_has_enough_samples`, `get_sampleable_count`, `wait_for_sampleable`, `sample`.
    """

    def __init__(self, tq: TransferQueue, trainer_mode: str = "separate_async", max_off_policy_threshold: int = 8,
                 max_off_policy_strategy: str = "drop", refill_fn: Callable[[int], int] | None = None,
                 poll_interval: float = 0.005, check_fn: Callable[[], None] | None = None,
                 timeout_s: float = 600.0) -> None:
        super().__init__(tq, trainer_mode)
        if isinstance(max_off_policy_threshold, bool) or not isinstance(max_off_policy_threshold, int) \
                or max_off_policy_threshold < 1:
            raise ValueError(f"max_off_policy_threshold={max_off_policy_threshold!r} must be an integer >= 1 (verl "
                             "asserts > 0). Fix: trainer.v1.sampler.max_off_policy_threshold=1 or more.")
        if max_off_policy_strategy not in ("drop", "wait"):
            raise ValueError(f"max_off_policy_strategy={max_off_policy_strategy!r}. Fix: drop or wait.")
        self.max_off_policy_threshold = max_off_policy_threshold
        self.max_off_policy_strategy = max_off_policy_strategy
        self.refill_fn, self.check_fn = refill_fn, check_fn
        self.poll_interval, self.timeout_s = float(poll_interval), float(timeout_s)
        self.last_sample: dict = {}
        """What the last `sample` did, for the trace: waited_s, blocked_s (held by the wait gate),
        polls, evicted (uid, fetch step, span, reason) and refilled prompts."""

    # ------------------------------------------------------------------------------ decisions
    def span(self, global_steps: int, fetched_at: int) -> int:
        """Steps a group fetched at `fetched_at` spans when trained at `global_steps` (1: fetched this step)."""
        return int(global_steps) - int(fetched_at) + 1

    def _stale_terminal_keys(self, global_steps: int, partition_id: str, prompts: dict, fetched: dict) -> list[str]:
        """Finished groups that span more than the threshold (drop strategy, training partition only)."""
        if partition_id == "val" or self.max_off_policy_strategy != "drop":
            return []
        return [uid for uid in prompts["finished"]
                if self.span(global_steps, fetched.get(uid, global_steps)) > self.max_off_policy_threshold]

    def _eviction_reasons(self, global_steps: int, partition_id: str, prompts: dict, fetched: dict):
        if partition_id == "val":
            return [], []
        return self._stale_terminal_keys(global_steps, partition_id, prompts, fetched), list(prompts["failure"])

    def _gate_closed(self, global_steps: int, partition_id: str, prompts: dict, fetched: dict) -> bool:
        """wait strategy: an in-flight prompt has reached the threshold, so sampling must wait for it."""
        if partition_id == "val" or self.max_off_policy_strategy != "wait":
            return False
        return any(self.span(global_steps, fetched[uid]) >= self.max_off_policy_threshold
                   for uid in prompts["pending"] + prompts["running"])

    def _sampleable(self, prompts: dict, evicted: set) -> list[str]:
        return [uid for uid in prompts["finished"] + prompts["failure"] if uid not in evicted]

    def get_sampleable_count(self, global_steps: int, partition_id: str = "train") -> int:
        """How many terminal groups could be sampled now (verl: `get_sampleable_count`)."""
        prompts, fetched, _ = self._sync_metadata_from_transfer_queue(partition_id)
        stale, failed = self._eviction_reasons(global_steps, partition_id, prompts, fetched)
        return len(self._sampleable(prompts, set(stale) | set(failed)))

    # ------------------------------------------------------------------------------ eviction
    def _clear_groups(self, partition_id: str, uids: set, trajectories: dict) -> None:
        """Remove prompt groups and their trajectories from the TransferQueue (verl: `_clear_groups`)."""
        keys = [k for k in trajectories if uid_of(k) in uids]
        self.tq.kv_clear([*uids, *keys], partition_id=partition_id)

    def _evict(self, global_steps: int, partition_id: str, stale: list, failed: list, fetched: dict,
               trajectories: dict, metrics: dict) -> int:
        """Evict stale and failed groups once, add their counts to `metrics`; returns how many."""
        evicted = set(stale) | set(failed)
        if not evicted:
            return 0
        prefix = "training" if partition_id == "train" else "validation"
        if stale:
            spans = np.array([self.span(global_steps, fetched.get(uid, global_steps)) for uid in stale], dtype=float)
            done = metrics.get(f"{prefix}/off_policy/evicted_samples", 0)
            key = f"{prefix}/off_policy/evicted_samples_staleness"
            mean = metrics.get(f"{key}/mean", 0.0)
            metrics[f"{key}/mean"] = (mean * done + spans.sum()) / (done + len(spans))
            metrics[f"{key}/max"] = max(metrics.get(f"{key}/max", spans.max()), spans.max())
            metrics[f"{key}/min"] = min(metrics.get(f"{key}/min", spans.min()), spans.min())
            metrics[f"{prefix}/off_policy/evicted_samples"] = done + len(stale)
        if failed:
            k = f"{prefix}/rollout_failure/evicted_samples"
            metrics[k] = metrics.get(k, 0) + len(failed)
            tags = self.tq.kv_list(partition_id)[partition_id]
            self.last_sample.setdefault("failures", []).extend(tags.get(u, {}).get("error", "?") for u in failed)
        for uid in evicted:
            self.last_sample["evicted"].append({"uid": uid, "fetched_at": int(fetched.get(uid, global_steps)),
                                                "span": self.span(global_steps, fetched.get(uid, global_steps)),
                                                "reason": "stale" if uid in stale else "failure",
                                                "t": time.time()})
        self._clear_groups(partition_id, evicted, trajectories)
        return len(evicted)

    # ------------------------------------------------------------------------------ waiting
    def wait_for_sampleable(self, global_steps: int, partition_id: str, target_count: int) -> tuple[list, dict, dict]:
        """Poll until `target_count` groups are sampleable, evicting and refilling meanwhile.

        Returns the sampleable uids, the eviction metrics and the prompt fetch steps (verl: `wait_for_sampleable`).
        """
        metrics: dict = {}
        t0 = time.perf_counter()
        deadline = t0 + self.timeout_s
        self.last_sample = {"evicted": [], "refilled": 0, "polls": 0, "blocked_s": 0.0}
        while True:
            if self.check_fn is not None:
                self.check_fn()
            prompts, fetched, trajectories = self._sync_metadata_from_transfer_queue(partition_id)
            stale, failed = self._eviction_reasons(global_steps, partition_id, prompts, fetched)
            n = self._evict(global_steps, partition_id, stale, failed, fetched, trajectories, metrics)
            if n:
                if self.refill_fn is not None:
                    self.refill_fn(n)
                    self.last_sample["refilled"] += n
                continue
            sampleable = self._sampleable(prompts, set())
            gate = self._gate_closed(global_steps, partition_id, prompts, fetched)
            if len(sampleable) >= target_count and not gate:
                self.last_sample["waited_s"] = time.perf_counter() - t0
                return sampleable, metrics, fetched
            if time.perf_counter() > deadline:
                counts = {s: len(v) for s, v in prompts.items()}
                held = (" and the wait strategy holds sampling until the in-flight prompts that reached "
                        f"max_off_policy_threshold={self.max_off_policy_threshold} finish") if gate else ""
                raise RuntimeError(f"ReplayBufferAsync: {len(sampleable)} of {target_count} groups sampleable after "
                                   f"{self.timeout_s:.0f} s in partition {partition_id!r}{held} (prompts by status: "
                                   f"{counts}); is the rollout still generating?")
            self.last_sample["polls"] += 1
            if gate and len(sampleable) >= target_count:
                self.last_sample["blocked_s"] += self.poll_interval
            time.sleep(self.poll_interval)

    def sample(self, global_steps: int, batch_size: int, partition_id: str = "train") -> tuple[KVBatchMeta, dict]:
        """`batch_size` groups, oldest fetch step first, once enough are sampleable; plus eviction metrics."""
        sampleable, metrics, fetched = self.wait_for_sampleable(global_steps, partition_id, batch_size)
        prompts, _, trajectories = self._sync_metadata_from_transfer_queue(partition_id)
        order = {uid: i for i, uid in enumerate(prompts["finished"] + prompts["failure"])}
        selected = sorted(sampleable, key=lambda uid: (fetched.get(uid, 0), order.get(uid, 0)))[:batch_size]
        if partition_id != "val" and self.max_off_policy_strategy == "drop":
            spans = [self.span(global_steps, fetched.get(uid, global_steps)) for uid in selected]
            assert all(s <= self.max_off_policy_threshold for s in spans), (
                f"drop strategy selected stale prompts: spans={spans}, threshold={self.max_off_policy_threshold}")
        self.last_sample["selected_spans"] = [self.span(global_steps, fetched.get(u, global_steps)) for u in selected]
        return self._materialize_batch(partition_id, selected, trajectories), metrics
