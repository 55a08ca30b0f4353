"""Prompt batches with a resumable position (verl: `PPOTrainer._init_dataloader`, `verl/trainer/ppo/v1/trainer_base.py:655`).

verl uses a `StatefulDataLoader` (torchdata) whose state goes into the checkpoint. minirl's
`PromptLoader` does the same with less: a per-epoch permutation from `seed + epoch`, and a state of
`(epoch, batch index)` saved with every checkpoint. The async trainers read prompts one by one from a
`PromptStream`: verl forces `data.gen_batch_size=1` for them so that a refill can fetch exactly `k` prompts
(`PPOTrainer._init_dataloader`, `verl/trainer/ppo/v1/trainer_base.py:655`).
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


class PromptStream(PromptLoader):
    """Prompts one by one, over a fresh permutation per epoch (verl's async `gen_batch_size=1` dataloader).

    `len()` stays the batches per epoch (the run length is counted in steps, as in verl); the state
    counts prompts: `{"epoch", "index", "unit": "prompt"}`.
    """

    def next_prompts(self, k: int) -> DataProto:
        """The next `k` prompts; an epoch boundary in the middle continues with the next permutation."""
        if k < 1:
            raise ValueError(f"PromptStream.next_prompts({k}): ask for at least one prompt.")
        idx = []
        while len(idx) < k:
            if self.index >= len(self.dataset):
                self.epoch, self.index = self.epoch + 1, 0
            order = self._order(self.epoch)
            take = min(k - len(idx), len(self.dataset) - self.index)
            idx += order[self.index:self.index + take].tolist()
            self.index += take
        return to_dataproto(self.collate_fn([self.dataset[i] for i in idx]))

    def next_batch(self) -> DataProto:
        return self.next_prompts(self.batch_size)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index, "unit": "prompt"}

    def load_state_dict(self, state: dict) -> None:
        scale = 1 if state.get("unit") == "prompt" else self.batch_size  # a sync checkpoint counts batches
        self.epoch, self.index = int(state["epoch"]), int(state["index"]) * scale
