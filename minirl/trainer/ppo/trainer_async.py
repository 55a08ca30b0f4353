"""What the two async trainers share: fire-and-forget submission, warm-up batches, the async replay buffer.

verl keeps this in `PPOTrainer` itself (`verl/trainer/ppo/v1/trainer_base.py:118`), whose
`_submit_batch_to_rollout` (`:1391`) never waits, whatever the mode; its sync trainer is async
machinery used synchronously. minirl's sync trainer generates inline (`PPOTrainer._submit_batch_to_rollout`),
so the async behaviour lives in this mixin, used as `class PPOTrainerSeparateAsync(AsyncTrainerMixin, PPOTrainer)`:

- the replay buffer is `ReplayBufferAsync` with `trainer.v1.sampler.max_off_policy_threshold` /
  `max_off_policy_strategy`, refilling through `_add_prompts_to_generate` (verl: `_build_replay_buffer`, `:142`);
- prompts come from a `PromptStream`, so a refill fetches exactly `k` (verl: `gen_batch_size=1`);
- `_submit_batch_to_rollout` registers the prompts (`status: pending`, tagged with the step that fetched
  them) and hands them to `BackgroundGeneration`; the `rollout` span is the submission only, and the
  sessions' own start/end times reach the trace through the `sample` span (`session_timing`);
- `on_train_begin` puts `num_warmup_batches` batches up before the first step (verl:
  `PPOTrainerColocateAsync.on_train_begin`, `verl/trainer/ppo/v1/trainer_colocate_async.py:40`); after a
  resume it first re-issues the checkpoint's unfinished prompts (`_reissue_inflight_prompts`, verl's; the
  checkpoint holds the TransferQueue, `minirl.trainer.ppo.checkpointing`) and tops the pipeline up;
- the sync trainer's version check (every trajectory from the last sync) becomes a sanity check: no
  trajectory may come from weights newer than the last sync.

What minirl leaves out: remax (its greedy baselines are sampled per batch in minirl's sync trainer;
verl's V1 trainer has no remax at all), and the multi-turn metrics of the rollout span.
"""

from __future__ import annotations

import numpy as np

from minirl.agent_loop import new_uids
from minirl.agent_loop.agent_loop_tq import BackgroundGeneration
from minirl.protocol import DataProto
from minirl.trainer.ppo.dataloader import PromptStream
from minirl.trainer.ppo.replay_buffer import ReplayBufferAsync, submit_prompts
from minirl.trainer.ppo.trainer_base import ROLLOUT_READS
from minirl.transfer_queue import uid_of

__all__ = ["AsyncTrainerMixin"]


class AsyncTrainerMixin:
    """Fire-and-forget rollout and staleness-controlled sampling, for `PPOTrainer` subclasses."""

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        # remax with an async mode is rejected by the config check (minirl.config.values)
        self.trainer_mode = str(config.trainer.v1.trainer_mode)
        self.loader = PromptStream(self.train_dataset, int(config.data.train_batch_size), self.collate_fn,
                                   shuffle=bool(config.data.shuffle), seed=int(config.data.seed or 42))
        self.background: BackgroundGeneration | None = None

    def _build_replay_buffer(self) -> ReplayBufferAsync:
        """`ReplayBufferAsync` with the sampler's staleness keys, refilling exactly `k` prompts (verl:
        `_build_replay_buffer`, `verl/trainer/ppo/v1/trainer_base.py:142`); with
        `trainer.v1.sampler.custom_sampler.{path,name}` the user's `ReplayBufferAsync` subclass instead, built
        with the same arguments (verl builds a custom sampler with its own kwargs, `sampler_kwargs` among them)."""
        sampler = self.config.trainer.v1.sampler
        custom = sampler.get("custom_sampler") or {}
        buffer_cls = ReplayBufferAsync
        if custom.get("path") and custom.get("name"):  # verl: load_extern_type(custom_sampler.path, .name)
            from minirl.utils.import_utils import load_extern_object

            buffer_cls = load_extern_object(str(custom.path), str(custom.name))
            if not (isinstance(buffer_cls, type) and issubclass(buffer_cls, ReplayBufferAsync)):
                raise TypeError(f"trainer.v1.sampler.custom_sampler: {custom.name} of {custom.path} is not a "
                                "ReplayBufferAsync subclass. Fix: subclass minirl.trainer.ppo.replay_buffer."
                                "ReplayBufferAsync and override its rules (_stale_terminal_keys, _gate_closed).")
        return buffer_cls(
            self.tq, trainer_mode=str(self.config.trainer.v1.trainer_mode),
            max_off_policy_threshold=int(sampler.max_off_policy_threshold),
            max_off_policy_strategy=str(sampler.max_off_policy_strategy), refill_fn=self._add_prompts_to_generate,
            check_fn=self._check_background)

    @property
    def mode_config(self):
        """`trainer.v1.<trainer_mode>`."""
        return self.config.trainer.v1[self.trainer_mode]

    def init_workers(self):
        super().init_workers()
        self.background = BackgroundGeneration(self.agent_loop_manager)  # the manager's loop (or the rollout's)

    def _check_background(self) -> None:
        if getattr(self, "background", None) is not None:
            self.background.check()

    # ----------------------------------------------------------------------------- submission
    def _next_train_batch(self, num_prompts: int | None = None) -> DataProto:
        """`num_prompts` prompts (default `data.train_batch_size`), one fresh `uid` each, tagged with this step."""
        batch = self.loader.next_prompts(int(num_prompts or self.config.data.train_batch_size))
        batch.non_tensor_batch["uid"] = new_uids(len(batch))
        batch.meta_info["global_steps"] = self.global_steps
        return batch

    def _add_prompts_to_generate(self, num_prompts: int) -> int:
        """Put exactly `num_prompts` new prompts up (verl: `_add_prompts_to_generate`, the refill)."""
        return self._submit_batch_to_rollout(self._next_train_batch(num_prompts))

    def _submit_batch_to_rollout(self, batch: DataProto, reissued: bool = False) -> int:
        """Register the prompts (`status: pending`, `global_steps`: this step, their rows kept for checkpoints)
        and start them in the background (verl: `_submit_batch_to_rollout`, "persist prompt data for async
        checkpoint recovery")."""
        uids = list(batch.non_tensor_batch["uid"])
        reads = [k for k in ROLLOUT_READS if k in batch.non_tensor_batch]  # as the sync rollout stage
        rows = {k: list(v) for k, v in batch.non_tensor_batch.items()}
        with self._span("rollout", batch, role="rollout", reads=reads) as info:
            submit_prompts(self.tq, uids, self.global_steps, fields=rows)
            self.background.submit(batch)
            info.update({"prompts": len(uids), "background": True, "submitted_total": self.background.submitted,
                         "chunks_in_flight": self.background.in_flight})
            if reissued:
                info["reissued"] = True
        return len(batch)

    def _reissue_inflight_prompts(self) -> int:
        """After a resume: put the checkpoint's unfinished prompts up again; finished groups stay as they are.

        verl: `PPOTrainer._reissue_inflight_prompts` (`verl/trainer/ppo/v1/trainer_base.py:849`): the pending and
        running prompts' trajectories written so far are cleared and the prompts re-submitted from their stored
        rows, same uids, tagged with the resumed step. Returns how many.
        """
        tags = self.tq.kv_list("train")["train"]
        inflight = [k for k, t in tags.items() if t.get("is_prompt") and t.get("status") in ("pending", "running")]
        self.reissued_prompts = len(inflight)
        if not inflight:
            return 0
        wanted = set(inflight)
        self.tq.kv_clear([k for k, t in tags.items() if not t.get("is_prompt") and uid_of(k) in wanted], "train")
        rows = self.tq.kv_batch_get(inflight, "train")
        if "uid" not in rows:
            raise RuntimeError("resume: the checkpoint's in-flight prompts have no stored rows (saved by an older "
                               "minirl?). Fix: trainer.resume_mode=disable, or resume from a newer checkpoint.")
        batch = DataProto.from_dict(non_tensors={k: np.asarray(v, dtype=object) for k, v in rows.items()},
                                    meta_info={"global_steps": self.global_steps})
        self._submit_batch_to_rollout(batch, reissued=True)
        return len(inflight)

    def _prompts_in_flight(self) -> int:
        """Prompt groups registered and not yet trained or evicted (pending, running or finished)."""
        return sum(1 for t in self.tq.kv_list("train")["train"].values() if t.get("is_prompt"))

    def prepare_step(self) -> dict:
        """One more batch up for generation (the pipeline stays `num_warmup_batches` ahead)."""
        self._add_batch_to_generate()
        return {}

    def on_train_begin(self):
        """`num_warmup_batches` batches put up before the first step; after a resume, the checkpoint's unfinished
        prompts re-issued first and the pipeline topped up to that depth (verl adds the warm-up batches on top)."""
        warmup = int(self.mode_config.num_warmup_batches)
        self._reissue_inflight_prompts()
        have = self._prompts_in_flight()
        if have == 0:
            for _ in range(warmup):
                self._add_batch_to_generate()
        elif warmup * int(self.config.data.train_batch_size) > have:
            self._add_prompts_to_generate(warmup * int(self.config.data.train_batch_size) - have)

    def on_sample_begin(self):
        self.old_policy_version = None  # this batch's pi_old is not computed yet

    def _check_versions(self, batch: DataProto):
        """No trajectory from weights newer than the last sync (`global_steps - 1`), none with min > max."""
        lo = [int(v) for v in batch.non_tensor_batch["min_global_steps"]]
        hi = [int(v) for v in batch.non_tensor_batch["max_global_steps"]]
        if max(hi) > self.global_steps - 1 or any(a > b for a, b in zip(lo, hi)):
            raise RuntimeError(f"{self.trainer_mode}: trajectories carry versions {sorted(set(lo))}..{sorted(set(hi))} "
                               f"at step {self.global_steps}, but the rollout can hold at most version "
                               f"{self.global_steps - 1}; the version stamps are broken.")

    def on_train_end(self):
        if self.background is not None:
            self.background.cancel()  # prompts still generating are not trained on
        super().on_train_end()

    def close(self):
        if self.background is not None:
            self.background.cancel()
        super().close()
