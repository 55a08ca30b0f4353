"""`ProcessWorkerGroup`: real ranks in local processes (lab 05's live layouts run on it).

Two workers in two processes: a ONE_TO_ALL call reaches both, a DP_COMPUTE_PROTO call splits a batch
and concatenates the halves, the ranks form a real gloo process group (an all_reduce sums across the
processes), and a worker that raises is named by rank, with its traceback, without hanging the group.
"""

from __future__ import annotations

import os

import pytest
import torch

from minirl.protocol import DataProto
from minirl.single_controller import Dispatch, ResourcePool, Worker, register

pytestmark = pytest.mark.slow


class GlooWorker(Worker):
    """Joins the group's gloo process group in its constructor, as ActorRolloutRefWorker does."""

    def __init__(self, scale: float):
        super().__init__()
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=self.rank, world_size=self.world_size)
        self.scale = scale

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self):
        return self.rank, os.getpid()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def times(self, data):
        return DataProto.from_dict({"x": data.batch["x"] * self.scale, "rank": torch.full((len(data),), self.rank)})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def all_reduce(self):
        import torch.distributed as dist

        t = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(t)
        return float(t)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail_on(self, rank):
        if self.rank == rank:
            raise ValueError(f"rank {rank} fails on purpose")
        return True


def test_two_local_ranks_dispatch_collect_and_form_a_process_group():
    from minirl.single_controller.base.process import ProcessWorkerGroup, ProcessWorkerGroupError
    from minirl.single_controller.base.worker_group import ClassWithInitArgs

    with ProcessWorkerGroup(ResourcePool(process_on_nodes=[2]), ClassWithInitArgs(GlooWorker, 3.0), timeout_s=120) as group:
        who = group.whoami()
        assert [r for r, _ in who] == [0, 1] and len({pid for _, pid in who} | {os.getpid()}) == 3
        out = group.times(DataProto.from_dict({"x": torch.arange(6.0)}))
        assert out.batch["x"].tolist() == [0.0, 3.0, 6.0, 9.0, 12.0, 15.0]
        assert out.batch["rank"].tolist() == [0, 0, 0, 1, 1, 1]
        assert group.all_reduce() == [3.0, 3.0]  # 1 + 2, summed across the two processes
        with pytest.raises(ProcessWorkerGroupError, match=r"(?s)worker rank 1 of 2 .*'fail_on' raised:.*on purpose"):
            group.fail_on(1)
    assert all(not p.process.is_alive() for p in group.workers)
