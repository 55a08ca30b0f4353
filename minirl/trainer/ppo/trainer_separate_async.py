"""`PPOTrainerSeparateAsync`: rollout servers of their own generate while the trainer optimises.

verl: `PPOTrainerSeparateAsync` (`verl/trainer/ppo/v1/trainer_separate_async.py:44`), "trainer and
rollout are separate, partial rollout is enabled". The rollout lives on standalone servers
(`actor_rollout_ref.rollout.nnodes >= 1`, a streaming checkpoint engine), which never pause: while the
controller trains on one batch, the servers generate the next ones. One global step:

1. `prepare_step`: one more batch of `data.train_batch_size` prompts up (after `num_warmup_batches` at the start);
2. `parameter_sync_step` local updates (`PPOTrainer.step`), each: sample `train_batch_size /
   parameter_sync_step` groups (exactly one `ppo_mini_batch_size`, verl asserts it), old log-probs,
   advantages, one optimizer step per epoch;
3. `on_step_end`: `update_weights(global_steps)`: abort the servers' requests, stream the weights,
   resume; the aborted requests continue with the new weights (partial rollout).

**Decoupled PPO's fixed pi_old.** The actor changes after every local update, but all local updates of
one cycle must use the same proximal anchor $\\pi_{\\text{old}}$: the weights the rollout servers got at
the last sync. So `_compute_old_log_prob` saves the actor at the cycle's first local update
(`local_trigger_step == 0`) and, at every later one, swaps those weights in for the forward and the
current ones back afterwards (`save_model_to_cpu` / `restore_model_from_cpu`, verl's
`DetachActorWorker`). In bypass mode (`algorithm.rollout_correction.bypass_mode`) the anchor is the
rollout's own log-probs and nothing is swapped.

**Correcting the lag.** With one warm-up batch every trained batch was sampled about one version before
$\\pi_{\\text{old}}$. verl's default `algorithm.rollout_correction.rollout_is=null` (decoupled) leaves that uncorrected: the clip measures
from $\\pi_{\\text{old}}$, but the tokens are weighted as the stale sampler drew them. minirl says so once at
start-up (`UNCORRECTED_WARNING`), because on its benchmark that run learned far worse than sync while token IS
or bypass mode learned as sync does (`benchmarks/README.md`, async_modes; `benchmarks/staleness_bias.py` shows
the sign of the bias).

What minirl leaves out: the hybrid switch (`trainer.v1.separate_async.hybrid_rollout`, lending the
trainer's own replicas to generation while it idles): minirl has no hybrid replicas next to its servers.
"""

from __future__ import annotations

import sys

from tqdm import tqdm

from minirl.trainer.ppo.trainer_async import AsyncTrainerMixin
from minirl.trainer.ppo.trainer_base import PPOTrainer, register_trainer

__all__ = ["UNCORRECTED_WARNING", "PPOTrainerSeparateAsync"]

UNCORRECTED_WARNING = (
    "minirl: warning: separate_async with no rollout correction (algorithm.rollout_correction: rollout_is and "
    "rollout_rs null, bypass_mode false, as verl defaults them): every batch is about one version behind pi_old and the "
    "loss does not correct for it; in minirl's 150-step benchmark this learned far worse than sync "
    "(benchmarks/README.md, async_modes). To correct: algorithm.rollout_correction.rollout_is=token, or "
    "algorithm.rollout_correction.bypass_mode=True actor_rollout_ref.rollout.calculate_log_probs=True.")
"""Said once at start-up when separate_async would train its stale batches uncorrected (minirl's own; verl says
nothing)."""


@register_trainer("separate_async")
class PPOTrainerSeparateAsync(AsyncTrainerMixin, PPOTrainer):
    """Separate async: standalone rollout servers, `parameter_sync_step` local updates per weight sync.

    verl: `PPOTrainerSeparateAsync` (`verl/trainer/ppo/v1/trainer_separate_async.py:44`). The config check
    (`minirl.config.schema_async`) has already enforced verl's asserts: `train_batch_size ==
    parameter_sync_step * ppo_mini_batch_size`, `rollout.nnodes > 0`, a non-naive checkpoint engine.
    """

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        # the LR schedule steps once per local update (verl: `_init_dataloader`, optim total_training_steps)
        for sec in (config.actor_rollout_ref.actor.optim, config.critic.optim):
            sec.total_training_steps = self.total_training_steps * self.parameter_sync_step
        rc = config.algorithm.rollout_correction
        if not rc.bypass_mode and rc.rollout_is is None and rc.rollout_rs is None:
            tqdm.write(UNCORRECTED_WARNING, file=sys.stderr)

    def on_init_end(self):
        """Give the servers the actor's (possibly resumed) weights, version = global_steps."""
        self._update_weights(timed=False)

    def on_step_end(self):
        """Stream the new weights into the running servers (abort, sync, resume): version `global_steps`."""
        self._update_weights()

    def _compute_old_log_prob(self, batch, metrics):
        """Old log-probs under the cycle's fixed pi_old (verl: `PPOTrainerSeparateAsync._compute_old_log_prob`).

        local_trigger_step 0: the current weights are pi_old; save them, compute. Later: save the current
        weights, restore pi_old, compute, restore the current ones.
        """
        if self.config.algorithm.rollout_correction.bypass_mode:
            return super()._compute_old_log_prob(batch, metrics)
        wg, i = self.actor_rollout_wg, self.local_trigger_step
        if i == 0:
            wg.save_model_to_cpu(0)
            self._cycle_actor_step = self.actor_step  # pi_old's version for the whole cycle
            return super()._compute_old_log_prob(batch, metrics)
        wg.save_model_to_cpu(i)
        wg.restore_model_from_cpu(0)  # the worker's count goes back too, so the trace names pi_old's updates
        current, self.actor_step = self.actor_step, self._cycle_actor_step  # the forward runs on the cycle's pi_old
        try:
            return super()._compute_old_log_prob(batch, metrics)
        finally:
            self.actor_step = current
            wg.restore_model_from_cpu(i)
            wg.clear_cpu_model(i)
