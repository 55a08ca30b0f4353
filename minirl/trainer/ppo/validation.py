"""Validation: the held-out prompts through the same path as training, scored, one number per data source.

verl: `PPOTrainer._validate` (`verl/trainer/ppo/v1/trainer_base.py:961`). The prompts are registered in the
TransferQueue's `val` partition, the agent loop runs `rollout.val_kwargs.n` sessions of each with the
validation sampling settings (greedy by default), `ReplayBuffer.sample(partition_id="val")` hands them
back, rewards come from the rollout (or from a colocated reward model, now), and the metrics are named
as verl names them: `val-core/<data_source>/reward/mean@<n>` and, when the reward reports it,
`val-core/<data_source>/acc/mean@<n>` (verl also reports best/worst/majority@k under `val-aux/`).
"""

from __future__ import annotations

import numpy as np

from minirl.agent_loop import multi_turn_metrics, new_uids
from minirl.trainer.ppo.dataloader import to_dataproto
from minirl.trainer.ppo.replay_buffer import submit_prompts

__all__ = ["validate"]


def validate(trainer) -> dict:
    """Run and score `trainer.val_dataset` once; returns the `val-core/...` (and `val-aux/...`) metrics."""
    ds = trainer.val_dataset
    data = to_dataproto(trainer.collate_fn([ds[i] for i in range(len(ds))]))
    data.non_tensor_batch["uid"] = new_uids(len(data))
    data.meta_info.update(validate=True, global_steps=trainer.global_steps)
    n = int(trainer.config.actor_rollout_ref.rollout.val_kwargs.n)
    with trainer._span("validate", data, role="rollout") as info:
        submit_prompts(trainer.tq, list(data.non_tensor_batch["uid"]), trainer.global_steps, partition_id="val")
        gen = trainer.agent_loop_manager.generate_sequences(data)
        info.update({"multi_turn": gen["multi_turn"]} if "multi_turn" in gen else {})
        meta, _ = trainer.replay_buffer.sample(trainer.global_steps, batch_size=len(data), partition_id="val")
        try:
            out = trainer._get(meta)
        finally:
            trainer.tq.kv_clear(meta.keys, partition_id="val")
        trainer.reward_loop_manager.score_batch(out)  # rm_scores from the rollout, or a colocated model's now
        rm = out
        info["_batch"] = out
    scores = rm.batch["rm_scores"].sum(-1).numpy()
    sources = np.asarray(out.non_tensor_batch.get(trainer.config.data.reward_fn_key, ["unknown"] * len(out)))
    metrics = multi_turn_metrics(gen.get("multi_turn"), prefix="val-aux/multi_turn")
    for src in sorted(set(sources.tolist())):
        sel = sources == src
        metrics[f"val-core/{src}/reward/mean@{n}"] = float(scores[sel].mean())
        if "acc" in rm.non_tensor_batch:
            metrics[f"val-core/{src}/acc/mean@{n}"] = float(np.asarray(rm.non_tensor_batch["acc"], dtype=float)[sel].mean())
    return metrics
