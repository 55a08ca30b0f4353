"""A weight sync that lands in the middle of generation, for chapter 08: run it, and what it left behind.

No verl counterpart (verl has no notebooks); the behaviour it shows is verl's partial rollout: the servers
abort in-flight requests at a sync, send back what they have, and the client resumes each request with
`prompt + tokens so far` once generation resumes (`FullyAsyncLLMServerClient`). `sync_mid_generation`
generates a set of requests twice on a live trainer's rollout servers: once undisturbed (the reference),
then again while `checkpoint_manager.update_weights` runs about `at_fraction` of the way through:

    seen = sync_mid_generation(trainer, prompts * 2, SamplingParams(do_sample=False, max_tokens=64, ignore_eos=True))
    show_table(seen.rows())            # per request: tokens before the abort, versions, resumes, same tokens?
    timelines.resumed_requests(seen.outputs, seen.version)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MidGenerationSync", "sync_mid_generation"]


@dataclass
class MidGenerationSync:
    """What `sync_mid_generation` saw."""

    uninterrupted: list
    """The requests' outputs generated with no sync in between (the reference)."""
    outputs: list
    """The same requests' outputs, generated while a weight sync landed mid-way."""
    version: int
    """The rollout's policy version before the sync (the sync stamps `version + 1`)."""
    sync: dict
    """What `checkpoint_manager.update_weights` returned: aborted requests, phases and their times."""
    start_version: int = 0
    """The rollout's policy version before the first try (the trainer's actor's number)."""
    tries: int = 1
    """How many generations it took for a sync to land while requests were running (see `sync_mid_generation`)."""

    def rows(self) -> list[dict]:
        """One row per request: tokens before the abort, tokens in all, (min, max) versions, resumes, same tokens."""
        return [{"request": i, "tokens before the abort": (o.extra_fields["resumed_at"] or ["-"])[0],
                 "tokens in all": len(o.token_ids),
                 "versions": (o.extra_fields["min_global_steps"], o.extra_fields["max_global_steps"]),
                 "resumes": o.extra_fields["num_resumes"], "same tokens as uninterrupted": o.token_ids == u.token_ids}
                for i, (o, u) in enumerate(zip(self.outputs, self.uninterrupted))]


def sync_mid_generation(trainer, requests: Sequence[list[int]], sampling, at_fraction: float = 0.3,
                        timeout_s: float = 120.0, max_tries: int = 4) -> MidGenerationSync:
    """Generate `requests` (token ids) once undisturbed, then again with a weight sync `at_fraction` of the way in.

    Both generations run on the rollout client's own event loop (`trainer.rollout.loop`), so this call
    blocks here while the second one is in flight and the sync (`trainer.checkpoint_manager.update_weights`)
    runs from this thread, as the trainer's would. The sync pushes the same weights under a new version
    number: no training step runs in between. "A third of the way in" is timed from the undisturbed run; on a
    busy machine the second run can finish before the sync lands (nothing to abort), so then it tries again
    with the sync earlier (half the wait each time), up to `max_tries` generations.
    """
    client = trainer.rollout.get_client()

    async def generate_all():
        return await asyncio.gather(*(client.generate(f"long-{i}", p, sampling) for i, p in enumerate(requests)))

    start = time.perf_counter()
    uninterrupted = trainer.rollout.loop.submit(generate_all()).result(timeout=timeout_s)
    generation_s = time.perf_counter() - start
    start_version = trainer.rollout.policy_version
    for tries in range(1, max_tries + 1):
        version = trainer.rollout.policy_version
        pending = trainer.rollout.loop.submit(generate_all())  # runs on the client's loop while this thread syncs
        while not any(s["in_flight"] for s in trainer.rollout.status()):
            time.sleep(0.002)
        time.sleep(at_fraction * generation_s / 2 ** (tries - 1))
        sync = trainer.checkpoint_manager.update_weights(version + 1)
        outputs = pending.result(timeout=timeout_s)
        if sync.get("rollout/aborted_requests", 0) > 0 or tries == max_tries:
            return MidGenerationSync(uninterrupted, outputs, version, sync, start_version, tries)
