"""Weight sync: how the actor's new weights reach the rollout replicas (verl: `verl/checkpoint_engine/`).

- `base`: `CheckpointEngine` (`send_weights` / `receive_weights`), `CheckpointEngineRegistry`, the
  `naive` engine (`ColocatedCheckpointEngine`), bucket packing (`split_weight_chunks`,
  `merge_weight_chunks`, `plan_buckets`).
- `nccl_checkpoint_engine`: `NCCLCheckpointEngine`, `backend=nccl`: buckets broadcast from actor rank 0
  to the rollout server processes (`torch.distributed`: gloo on CPU, NCCL on GPU).
- `manager`: `CheckpointEngineManager`: sleep/wake, abort/resume, KV cache, `update_weights(global_steps)`.
- the actor workers' side (their engine, the gather, the send) is `ActorRolloutRefWorker.update_weights` and
  `execute_checkpoint_engine` in `minirl.workers.engine_workers`, as in verl.

`from minirl.checkpoint_engine import CheckpointEngineManager` is the trainer's entry point.
"""

from minirl.checkpoint_engine.base import (
    CheckpointEngine,
    CheckpointEngineRegistry,
    ColocatedCheckpointEngine,
    TensorMeta,
    bucket_size_bytes,
    merge_weight_chunks,
    plan_buckets,
    split_weight_chunks,
)
from minirl.checkpoint_engine.manager import CheckpointEngineManager
from minirl.checkpoint_engine.nccl_checkpoint_engine import NCCLCheckpointEngine

__all__ = [
    "CheckpointEngine",
    "CheckpointEngineManager",
    "CheckpointEngineRegistry",
    "ColocatedCheckpointEngine",
    "NCCLCheckpointEngine",
    "TensorMeta",
    "bucket_size_bytes",
    "merge_weight_chunks",
    "plan_buckets",
    "split_weight_chunks",
]
