"""Worked solutions of lab 07 (async staleness), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (the parameters, the runs) and returns the answer: a
`ReplayBufferAsync` subclass, overrides, or a number predicted from the buffer's rules (never read from the
runs: the checks compare it with what the runs did). The first line of each docstring is printed next to
the answer. Try the exercise before you read its solution.
"""

from minirl.trainer.ppo.replay_buffer import ReplayBufferAsync


class DropBuffer(ReplayBufferAsync):
    """The drop rule: finished groups whose span is above the threshold."""

    def _stale_terminal_keys(self, global_steps, partition_id, prompts, fetched):
        if partition_id == "val" or self.max_off_policy_strategy != "drop":
            return []
        return [uid for uid in prompts["finished"]
                if self.span(global_steps, fetched.get(uid, global_steps)) > self.max_off_policy_threshold]


class WaitBuffer(ReplayBufferAsync):
    """The wait gate: closed while a pending or running prompt has reached the threshold."""

    def _gate_closed(self, global_steps, partition_id, prompts, fetched):
        if partition_id == "val" or self.max_off_policy_strategy != "wait":
            return False
        return any(self.span(global_steps, fetched[uid]) >= self.max_off_policy_threshold
                   for uid in prompts["pending"] + prompts["running"])


def exercise_1(nb):
    """Finished uids with span(k, g) > T, under drop, outside val."""
    return DropBuffer


def exercise_2(nb):
    """Any pending or running uid with span(k, g) >= T, under wait, outside val."""
    return WaitBuffer


def exercise_3(nb):
    """No warm-up batch: nothing is left over at a step's start, so nothing ages (and nothing is evicted)."""
    return ["trainer.v1.colocate_async.num_warmup_batches=0"]


def exercise_4(nb):
    """From step 2 on, the W*B leftover groups (fetched the step before: span 2 > T=1) are evicted every step."""
    return (nb["STEPS"] - 1) * nb["WARMUP_BATCHES"] * nb["TRAIN_BATCH_SIZE"] if nb["DROP_THRESHOLD"] < 2 else 0


def exercise_5(nb):
    """The W warm-up batches (sampled by version 0) are trained at steps 2..W+1: the last of them at staleness W."""
    return nb["WARMUP_BATCHES"]
