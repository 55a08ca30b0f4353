"""Prompt batches with a resumable position (verl: `PPOTrainer._init_dataloader`, `verl/trainer/ppo/v1/trainer_base.py:655`).

verl uses a `StatefulDataLoader` (torchdata) whose state goes into the checkpoint. minirl's
`PromptLoader` does the same with less: a per-epoch permutation from `seed + epoch`, and a state of
`(epoch, batch index)` saved with every checkpoint.
"""

from __future__ import annotations

import torch

from minirl.protocol import DataProto


class PromptLoader:
    """Yields `DataProto` batches of `batch_size` prompts; drops the last incomplete batch (as verl)."""

    def __init__(self, dataset, batch_size: int, collate_fn, shuffle: bool = True, seed: int = 42):
        if len(dataset) < batch_size:
            raise ValueError(f"the dataset has {len(dataset)} prompts, fewer than data.train_batch_size={batch_size}. "
                             "Fix: lower data.train_batch_size or use more data (data.builtin.n_train).")
        self.dataset, self.batch_size, self.collate_fn = dataset, batch_size, collate_fn
        self.shuffle, self.seed = shuffle, seed
        self.epoch, self.index = 0, 0

    def __len__(self) -> int:
        return len(self.dataset) // self.batch_size

    def _order(self, epoch: int) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(len(self.dataset))
        return torch.randperm(len(self.dataset), generator=torch.Generator().manual_seed(self.seed + epoch))

    def next_batch(self) -> DataProto:
        """The next batch; moves to the next epoch when one is used up."""
        if self.index >= len(self):
            self.epoch, self.index = self.epoch + 1, 0
        order = self._order(self.epoch)
        idx = order[self.index * self.batch_size:(self.index + 1) * self.batch_size].tolist()
        self.index += 1
        return to_dataproto(self.collate_fn([self.dataset[i] for i in idx]))

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict):
        self.epoch, self.index = int(state["epoch"]), int(state["index"])


def to_dataproto(collated: dict) -> DataProto:
    """A collated dict (tensors + numpy object arrays) as a DataProto."""
    return DataProto.from_single_dict(collated)
