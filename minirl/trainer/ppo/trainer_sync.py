"""`PPOTrainerSync`: rollout and training take turns; weights move after every actor update.

verl: `PPOTrainerSync` (`verl/trainer/ppo/v1/trainer_sync.py:25`): three hooks on `PPOTrainer`,
nothing else. `on_init_end` pushes the (possibly resumed) actor weights to the rollout,
`on_sample_end` puts the rollout to sleep while the actor trains, `on_step_end` pushes the new
weights, so the next step samples with version `global_steps`. Each push is an `update_weights`
span whose extras say what the sync did (`CheckpointEngineManager.update_weights`: phases, bytes,
buckets, per-replica load times); its numbers also go into the step's metrics.

minirl adds `on_sample_begin`: a new batch has no `old_log_probs` yet, so the trace's `versions.old`
goes back to None until the `old_log_prob` stage sets it.
"""

from __future__ import annotations

from minirl.trainer.ppo.trainer_base import PPOTrainer, register_trainer


@register_trainer("sync")
class PPOTrainerSync(PPOTrainer):
    """Sync mode: rollout and actor take turns; weights move after every actor update.

    verl: `PPOTrainerSync` (`verl/trainer/ppo/v1/trainer_sync.py:25`).
    """

    def on_init_end(self):
        """Give the rollout the actor's (possibly resumed) weights, version = global_steps."""
        self._update_weights(timed=False)

    def on_step_end(self):
        """Push the updated actor weights; the rollout then holds version `global_steps`."""
        self._update_weights()

    def on_sample_begin(self):
        self.old_policy_version = None  # this batch's pi_old is not computed yet

    def on_sample_end(self):
        """Free the rollout's memory while the actor trains (servers of their own devices keep theirs)."""
        self.checkpoint_manager.sleep_replicas()


__all__ = ["PPOTrainerSync"]
