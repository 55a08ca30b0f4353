"""ReMax's baseline: one greedy response per prompt, scored like the sampled ones.

`compute_remax_outcome_advantage` (`verl/trainer/ppo/core_algos.py`, registered as `remax`) subtracts
from each sampled response's score the score of a *greedy* response to the same prompt, the
`reward_baselines` field. verl's legacy trainer samples that greedy response in the same step
(`RayPPOTrainer.fit`, `verl/trainer/ppo/ray_trainer.py:1405`); verl's V1 trainer at the pin has no
such step, so `algorithm.adv_estimator=remax` does not run there. minirl adds it on the V1 path: the
greedy responses go through the same agent loop (rollout.val_kwargs sampling, one session per
prompt, in the TransferQueue's `val` partition) and the same reward path, right after the rollout.
"""

from __future__ import annotations

import numpy as np

from minirl.agent_loop import new_uids
from minirl.protocol import DataProto
from minirl.trainer.ppo.replay_buffer import submit_prompts

__all__ = ["greedy_baselines"]


def greedy_baselines(trainer, batch: DataProto) -> dict:
    """`uid -> score` of one greedy response to each prompt of `batch` (the step's training prompts)."""
    data = DataProto.from_dict(non_tensors={k: np.array(v, dtype=object) for k, v in batch.non_tensor_batch.items()},
                               meta_info={**batch.meta_info, "validate": True})
    train_uids = list(data.non_tensor_batch["uid"])
    data.non_tensor_batch["uid"] = new_uids(len(data))
    data.non_tensor_batch["__rollout_n__"] = np.array([1] * len(data), dtype=object)
    submit_prompts(trainer.tq, list(data.non_tensor_batch["uid"]), trainer.global_steps, partition_id="val")
    trainer.agent_loop_manager.generate_sequences(data)
    meta, _ = trainer.replay_buffer.sample(trainer.global_steps, batch_size=len(data), partition_id="val")
    try:
        out = trainer._get(meta)
    finally:
        trainer.tq.kv_clear(meta.keys, partition_id="val")
    trainer.reward_loop_manager.score_batch(out)  # rm_scores from the rollout, or a colocated model's now
    to_train = dict(zip(data.non_tensor_batch["uid"], train_uids))
    return {to_train[u]: s for u, s in zip(out.non_tensor_batch["uid"], out.batch["rm_scores"].sum(-1).tolist())}
