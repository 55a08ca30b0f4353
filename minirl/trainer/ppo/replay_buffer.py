"""`ReplayBuffer`: which finished trajectories the trainer trains on next.

verl: `ReplayBuffer` (`verl/trainer/ppo/v1/replay_buffer.py:63`). The trainer never asks the rollout
for "the batch": prompts and trajectories go into the TransferQueue (`minirl.transfer_queue`), and
`ReplayBuffer.sample` (`verl/trainer/ppo/v1/replay_buffer.py:405`) reads only the *tags* to decide
which trajectories form the next batch, returning their keys as a `BatchMeta`.

What is stored, and under which key (verl's "[Trajectories storage format]"):

| key | tag | fields |
|---|---|---|
| `{uid}` (one per prompt) | `is_prompt: True`, `status`, `global_steps` (the step that sampled the prompt) | none in sync mode |
| `{uid}_{session}_{index}` (one per trajectory) | `uid`, `session_id`, `status`, `min_global_steps`, `max_global_steps` (the policy versions that sampled it), `is_padding`, `seq_len` | `prompts`, `responses`, `response_mask`, `rollout_log_probs`, dataset fields ... |

A prompt's `status` goes `pending` (sampled from the dataset) -> `running` (its `rollout.n`
sessions started) -> `finished` (all sessions done) or `failure` (all done, one failed). Only
terminal groups (finished or failure) can be sampled, so a GRPO group is never split between two
batches: the group-relative advantage needs all `n` of them.

`sample(global_steps, batch_size)` in sync mode:

1. read every tag of the partition (`_sync_metadata_from_transfer_queue`, verl `:188`);
2. the terminal prompt uids, oldest `global_steps` first (`_select_prompt_uids`, verl `:366`;
   in sync mode every group in the store comes from the current step, so oldest = newest);
3. take `batch_size` of them, clear their prompt keys, and return the keys and tags of their
   trajectories in the order they were written (`_materialize_batch`, verl `:377`).

What minirl leaves out: polling (verl sleeps `poll_interval` and re-reads until enough groups are
terminal; minirl's sync rollout has finished before `sample` is called, so too few groups is an
error), the async subclass with staleness eviction (`ReplayBufferAsync`,
`verl/trainer/ppo/v1/replay_buffer.py:497`), DAPO group filtering with refill, and custom samplers.
"""

from __future__ import annotations

from collections.abc import Sequence

from minirl.transfer_queue import BatchMeta, TransferQueue

PROMPT_STATUSES = ("pending", "running", "finished", "failure")
TERMINAL_STATUSES = ("finished", "failure")


def trajectory_key(uid: str, session_id: int, index: int = 0) -> str:
    """`{uid}_{session_id}_{index}`: index counts the outputs of one session (1 for single-turn)."""
    return f"{uid}_{int(session_id)}_{int(index)}"


def uid_of(key: str) -> str:
    """The prompt uid a trajectory key belongs to (uids are uuid4 strings: no underscores)."""
    return key.split("_")[0]


def submit_prompts(tq: TransferQueue, uids: Sequence[str], global_steps: int, partition_id: str = "train") -> None:
    """Register prompts as `pending` (verl: `PPOTrainer._submit_batch_to_rollout`, `verl/trainer/ppo/v1/trainer_base.py:1391`)."""
    tags = [{"is_prompt": True, "status": "pending", "global_steps": int(global_steps)} for _ in uids]
    tq.kv_batch_put(list(uids), partition_id=partition_id, tags=tags)


def set_prompt_status(tq: TransferQueue, uids: Sequence[str], status: str, partition_id: str = "train") -> None:
    """Move prompts to `status` (verl's agent-loop workers do this as their sessions start and end)."""
    if status not in PROMPT_STATUSES:
        raise ValueError(f"prompt status {status!r} is not one of {PROMPT_STATUSES}.")
    tq.kv_batch_put(list(uids), partition_id=partition_id, tags=[{"status": status} for _ in uids])


class ReplayBuffer:
    """Samples group-complete trajectories from a TransferQueue by their tags.

    Args:
        tq: the store the rollout writes into.
        trainer_mode: `trainer.v1.trainer_mode`; minirl implements "sync".
    """

    def __init__(self, tq: TransferQueue, trainer_mode: str = "sync") -> None:
        if trainer_mode != "sync":
            raise ValueError(f"ReplayBuffer(trainer_mode={trainer_mode!r}): minirl implements the sync buffer only "
                             "(verl: ReplayBufferAsync for colocate_async / separate_async).")
        self.tq = tq
        self.trainer_mode = trainer_mode

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

    def sample(self, global_steps: int, batch_size: int, partition_id: str = "train") -> tuple[BatchMeta, dict]:
        """The trajectories of `batch_size` terminal prompt groups, as a `BatchMeta`; plus metrics (none in sync).

        `global_steps` is the current step (verl uses it to measure staleness in async mode).
        """
        prompts, prompt_global_steps, trajectories = self._sync_metadata_from_transfer_queue(partition_id)
        terminal = prompts["finished"] + prompts["failure"]
        if len(terminal) < batch_size:
            counts = {s: len(v) for s, v in prompts.items()}
            raise RuntimeError(
                f"ReplayBuffer.sample(global_steps={global_steps}, batch_size={batch_size}): only {len(terminal)} "
                f"prompt groups are finished in partition {partition_id!r} (prompts by status: {counts}). In sync "
                "mode the rollout must finish every group before sampling (verl's buffer would poll and wait).")
        selected = sorted(terminal, key=lambda uid: prompt_global_steps[uid])[:batch_size]  # stable: write order
        return self._materialize_batch(partition_id, selected, trajectories), {}

    def _materialize_batch(self, partition_id: str, selected_uids: list[str], trajectories: dict) -> BatchMeta:
        """Clear the selected prompt keys; return their trajectories' keys and tags in write order."""
        self.tq.kv_clear(selected_uids, partition_id=partition_id)
        chosen = set(selected_uids)
        keys = [key for key in trajectories if uid_of(key) in chosen]
        if partition_id != "val" and not keys:
            raise RuntimeError(f"ReplayBuffer: the selected groups {selected_uids[:3]}... have no trajectories in "
                               f"partition {partition_id!r}; were they written under '{{uid}}_{{session}}_{{index}}' keys?")
        return BatchMeta(keys, [dict(trajectories[k]) for k in keys], partition_id)
