"""`PPOTrainerColocateAsync`: rollout and training share the devices; generation runs ahead, partial rollouts resume.

verl: `PPOTrainerColocateAsync` (`verl/trainer/ppo/v1/trainer_colocate_async.py:26`), "trainer and
rollout are colocated, partial rollout is enabled". Its hooks, here the same:

| hook | what it does | why |
|---|---|---|
| `on_init_end` | sync the (possibly resumed) actor into the rollout, version `global_steps` | as sync |
| `on_train_begin` | put `trainer.v1.colocate_async.num_warmup_batches` batches up for generation | the rollout always has a batch ahead of the trainer: *policy lag* |
| `prepare_step` | one more batch up | the pipeline stays full |
| sample | `ReplayBufferAsync.sample` waits while the rollout generates | generation runs only here |
| `on_sample_end` | abort every unfinished request, sleep the rollout | the trainer needs the device; partial outputs are kept |
| `on_step_end` | sync the new weights (version `global_steps`), resume generation | aborted requests continue with the new weights: one response, two versions |

So rollout and training never overlap (they share one device), but the rollout is not on-policy:
the groups sampled at step $k$ were fetched up to `num_warmup_batches` steps earlier, and a group
aborted mid-generation carries tokens of two versions (`min_global_steps < max_global_steps`). The
ReplayBuffer bounds that lag (`trainer.v1.sampler.max_off_policy_threshold`, `drop` | `wait`).

In minirl the shared device is the CPU and the rollout is the in-controller engine (`rollout.nnodes=0`,
`naive` weight sync), served to the agent-loop worker processes by
`minirl.workers.rollout.llm_server.LocalRolloutServer`, whose scheduler the sample end pauses (with the agent
loop in the controller, `rollout.agent.placement=inprocess`: `ColocatedRollout`). The engine's thread is idle
while the trainer trains.
"""

from __future__ import annotations

from minirl.trainer.ppo.trainer_async import AsyncTrainerMixin
from minirl.trainer.ppo.trainer_base import PPOTrainer, register_trainer
from minirl.utils.debug import marked_timer
from minirl.workers.rollout.llm_server import ColocatedRollout, LocalRolloutServer

__all__ = ["PPOTrainerColocateAsync"]


@register_trainer("colocate_async")
class PPOTrainerColocateAsync(AsyncTrainerMixin, PPOTrainer):
    """Colocated async: generation while the trainer waits, aborted for training, resumed after the sync.

    verl: `PPOTrainerColocateAsync` (`verl/trainer/ppo/v1/trainer_colocate_async.py:26`).
    """

    def _build_rollout(self, model_path: str):
        """The in-controller engine behind a pausable replica (verl: the hybrid replicas, `get_llm_client`):
        served to the agent-loop worker processes (`LocalRolloutServer`), or with the agent loop in this process
        (`rollout.agent.placement=inprocess`) behind `ColocatedRollout`."""
        engine = super()._build_rollout(model_path)
        if self.agent_loop_placement == "inprocess":
            return ColocatedRollout(engine)
        return LocalRolloutServer(engine)

    def on_init_end(self):
        """Give the rollout the actor's (possibly resumed) weights, version = global_steps."""
        self._update_weights(timed=False)

    def on_sample_end(self):
        """Abort every unfinished request (partial outputs kept) and put the rollout to sleep."""
        aborted = self.checkpoint_manager.abort_replicas()
        self.checkpoint_manager.sleep_replicas()
        self._aborted_at_sample_end = sum(a.get("aborted_running", 0) for a in aborted)

    def on_step_end(self):
        """Push the updated weights (version `global_steps`), then let the aborted requests resume."""
        with marked_timer("update_weights", self.timing_raw), \
                self._span("update_weights", None, role="rollout") as info:
            info.update(self.checkpoint_manager.update_weights(self.global_steps))
            self.checkpoint_manager.resume_generation_replicas()
            info["aborted_at_sample_end"] = getattr(self, "_aborted_at_sample_end", 0)
