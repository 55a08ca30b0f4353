"""The streaming checkpoint engine: bucketed tensors broadcast from actor rank 0 to every rollout server.

`actor_rollout_ref.rollout.checkpoint_engine.backend=nccl`. One communication group holds the
actor's rank 0 (the sender) and one member per rollout server process (the receivers). For every
bucket the sender broadcasts a small header (which tensors, at which byte offsets, is it the last
bucket) and then the bucket itself, a flat byte buffer of at most
`update_weights_bucket_megabytes`; each receiver cuts the buffer back into tensors
(`merge_weight_chunks`) and its rollout loads them by name. Other actor ranks stay out of the group
(rank -1) but still walk the weights generator, because under FSDP producing each full tensor is an
all-gather every rank must join.

The transport is `torch.distributed`'s: on GPUs the buckets travel over NCCL (a `ProcessGroupNCCL`;
written, but not run on minirl's CPU test machines) and the headers over gloo; on CPU both travel
over gloo (`ProcessGroupGloo`), which is what minirl runs. The group is built without any listening
rendezvous server: members meet through a `FileStore` (a file in a temporary directory of this machine),
and gloo's own sockets are bound to 127.0.0.1, so the whole sync stays on the loopback interface.

Mirrors verl's `NCCLCheckpointEngine` (`verl/checkpoint_engine/nccl_checkpoint_engine.py:120`):
`prepare` (`:165`), `build_topology` (`:222`; single sender: `_single_sender_ranks`, `:196`),
`init_process_group` (`:279`), `send_weights` (`:315`), `receive_weights` (`:437`). What minirl
simplifies (and what verl does instead):

- headers travel as JSON over the same `torch.distributed` group (verl: a ZeroMQ PUB/SUB socket from
  the sender, `_start_zmq_server`, `:252`), and the groups are `torch.distributed` process-group
  objects built directly (verl: `ray.util.collective` groups over cupy NCCL);
- one bucket buffer per side, as large as the largest bucket, and one bucket at a time (verl
  double-buffers, overlapping the broadcast of bucket k+1 with the load of bucket k, so it keeps
  `2 * bucket_size` per GPU);
- one sender (verl's `multi_sender` also enlists the sender's NVLink peers as relays,
  `_multi_sender_ranks`, `:201`);
- members of one machine only (the `FileStore` is a local file; verl's groups span nodes).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator

import torch
import torch.distributed as dist

from minirl.checkpoint_engine.base import (
    CheckpointEngine,
    CheckpointEngineRegistry,
    TensorMeta,
    merge_weight_chunks,
    pack_buckets,
    split_weight_chunks,
)

__all__ = ["NCCLCheckpointEngine", "transport_for"]

LOOPBACK = "127.0.0.1"


def transport_for(device: str | torch.device) -> str:
    """Which collective library carries the buckets: `nccl` on CUDA devices, `gloo` on CPU."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def _gloo_group(store, rank: int, world_size: int, timeout_s: float):
    """A gloo process group whose sockets listen on 127.0.0.1 only (not the default group: no global state)."""
    opts = dist.ProcessGroupGloo._Options()
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname=LOOPBACK)]
    opts._timeout = datetime.timedelta(seconds=timeout_s)
    return dist.ProcessGroupGloo(store, rank, world_size, opts)


def _meta_to_json(meta: TensorMeta) -> dict:
    return {"name": meta.name, "shape": list(meta.shape), "dtype": str(meta.dtype).removeprefix("torch."),
            "chunk_offset": meta.chunk_offset, "chunk_size": meta.chunk_size, "offset": meta.offset}


def _meta_from_json(d: dict) -> TensorMeta:
    return TensorMeta(d["name"], tuple(d["shape"]), getattr(torch, d["dtype"]), d["chunk_offset"],
                      d["chunk_size"], d["offset"])


@CheckpointEngineRegistry.register("nccl")
class NCCLCheckpointEngine(CheckpointEngine):
    """Broadcast weights bucket by bucket from actor rank 0 to the rollout servers.

    Args:
        bucket_size: bytes per bucket (`bucket_size_bytes(update_weights_bucket_megabytes)`).
        is_master: True on the sender (actor rank 0): it makes the rendezvous file in `prepare`.
        device: where the bucket buffer lives; `cuda` selects NCCL for the buckets.
        timeout_s: how long a collective may wait for the other members.
    """

    def __init__(self, bucket_size: int, is_master: bool = False, device: str = "cpu", timeout_s: float = 300.0,
                 **kwargs) -> None:
        self.bucket_size = int(bucket_size)
        self.is_master = is_master
        self.device = torch.device(device)
        self.transport = transport_for(self.device)
        self.timeout_s = float(timeout_s)
        self.rank: int | None = None
        self.world_size: int | None = None
        self.buffer: torch.Tensor | None = None
        self._store = self._meta_group = self._data_group = None
        self._store_dir: str | None = None
        self.last_receive: dict = {}

    # ------------------------------------------------------------------------------ the group
    def _buffer(self, length: int) -> torch.Tensor:
        """The bucket buffer, grown to `length` bytes when needed (never beyond `bucket_size`)."""
        if self.buffer is None or self.buffer.numel() < length:
            self.buffer = torch.empty(length, dtype=torch.uint8, device=self.device)
        return self.buffer[:length]

    def prepare(self) -> dict:
        """Name the rendezvous file (the master, once) and say who this member is.

        verl allocates both `bucket_size` buffers here; minirl allocates one, on first use, only as
        large as the largest bucket it meets (a 1.8 MB model in verl's default 2 GiB buckets needs 1.8 MB).
        """
        meta = {"is_master": self.is_master, "transport": self.transport, "pid": os.getpid()}
        if self.is_master:
            if self._store_dir is None:
                self._store_dir = tempfile.mkdtemp(prefix="minirl-checkpoint-engine-")
            meta["store_path"] = os.path.join(self._store_dir, "rendezvous")
        return meta

    @classmethod
    def build_topology(cls, actor_world_size: int, rollout_world_size: int, metadata: list[dict]):
        """Actor rank 0 is rank 0 of the group, the other actor ranks sit out (-1), rollout servers are 1..N.

        verl: `build_topology` with one sender (`_single_sender_ranks`).
        """
        master = metadata[0]
        if not master.get("is_master") or "store_path" not in master:
            raise RuntimeError("NCCLCheckpointEngine.build_topology: the first member (actor rank 0) must be the "
                               "master and say where the group meets (prepare() returns store_path).")
        world = 1 + rollout_world_size
        actor = {"rank": [0] + [-1] * (actor_world_size - 1), "world_size": [world] * actor_world_size,
                 "master_metadata": [master] * actor_world_size}
        rollout = {"rank": list(range(1, world)), "world_size": [world] * rollout_world_size,
                   "master_metadata": [master] * rollout_world_size}
        return actor, rollout

    def init_process_group(self, rank: int, world_size: int, master_metadata: dict) -> None:
        """Join the group (blocks until every member has joined); built once, reused by every later sync."""
        if self._meta_group is not None:
            if (rank, world_size) != (self.rank, self.world_size):
                raise RuntimeError(f"checkpoint engine group already built as rank {self.rank}/{self.world_size}, "
                                   f"asked to join as {rank}/{world_size}; adding replicas needs a new group.")
            return
        self.rank, self.world_size = int(rank), int(world_size)
        if self.rank < 0:
            return
        self._store = dist.FileStore(master_metadata["store_path"], self.world_size)
        self._meta_group = _gloo_group(dist.PrefixStore("meta", self._store), self.rank, self.world_size,
                                       self.timeout_s)
        if self.transport == "nccl":  # GPU: the buckets over NCCL (not run on minirl's CPU CI)
            self._data_group = dist.ProcessGroupNCCL(dist.PrefixStore("data", self._store), self.rank, self.world_size)
        else:
            self._data_group = self._meta_group

    @property
    def joined(self) -> bool:
        """True once this member has a group (or knows it sits out)."""
        return self.rank is not None

    def finalize(self) -> None:
        """Free the bucket buffer (the group stays: verl's default `rebuild_group=False`)."""
        self.buffer = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def close(self) -> None:
        """Drop the group and remove the rendezvous directory."""
        self._meta_group = self._data_group = self._store = None
        self.rank = self.world_size = None
        if self._store_dir is not None:
            shutil.rmtree(self._store_dir, ignore_errors=True)
            self._store_dir = None

    # ------------------------------------------------------------------------------ the sync
    def _broadcast_header(self, header: dict | None) -> dict:
        """The bucket's header, JSON, from rank 0 to all: its length first, then the bytes."""
        payload = json.dumps(header).encode() if header is not None else b""
        length = torch.tensor([len(payload)], dtype=torch.int64)
        self._meta_group.broadcast(length, 0).wait()
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8) if header is not None else \
            torch.empty(int(length.item()), dtype=torch.uint8)
        self._meta_group.broadcast(data, 0).wait()
        return header if header is not None else json.loads(data.numpy().tobytes().decode())

    @torch.no_grad()
    def send_weights(self, weights: Iterable[tuple[str, torch.Tensor]], global_steps: int | None = None) -> dict:
        """Pack `weights` into buckets and broadcast them; return per-bucket bytes, chunks, start (wall clock)
        and seconds.

        An actor rank outside the group (-1) only walks `weights` (its all-gathers) and returns `{}`.
        """
        if self.rank is None:
            raise RuntimeError("NCCLCheckpointEngine.send_weights before init_process_group: build the group first.")
        if self.rank < 0:
            for _ in weights:
                pass
            return {}
        if self.rank != 0:
            raise RuntimeError(f"rank {self.rank} is a rollout member: it receives weights, it does not send them.")
        t_start = time.perf_counter()
        buckets, names = [], set()
        packed = self.pack(weights)
        current = next(packed, None)
        while current is not None:
            following = next(packed, None)  # one bucket of look-ahead tells whether this one is the last
            bucket, length = current
            t0 = time.perf_counter()
            buffer = self._buffer(length)
            for meta, chunk in bucket:
                buffer[meta.offset:meta.offset + meta.chunk_size].copy_(chunk)
                names.add(meta.name)
            header = {"bucket_meta": [_meta_to_json(m) for m, _ in bucket], "length": length,
                      "is_last": following is None, "global_steps": global_steps}
            t1, start = time.perf_counter(), time.time()
            self._broadcast_header(header)
            self._data_group.broadcast(buffer, 0).wait()
            if self.transport == "nccl":
                torch.cuda.synchronize()
            t2 = time.perf_counter()
            buckets.append({"bucket": len(buckets), "bytes": length, "chunks": len(bucket), "start": start,
                            "fill_s": round(t1 - t0, 6), "broadcast_s": round(t2 - t1, 6)})
            current = following
        return {"buckets": buckets, "bytes": sum(b["bytes"] for b in buckets), "tensors": len(names),
                "send_s": time.perf_counter() - t_start, "transport": self.transport, "bucket_size": self.bucket_size}

    def _receive_weight_chunks(self) -> Iterator[tuple[TensorMeta, torch.Tensor]]:
        """Every chunk of every bucket, in the sender's order; `last_receive` counts buckets, bytes, wait."""
        if self.rank is None or self.rank <= 0:
            raise RuntimeError("NCCLCheckpointEngine.receive_weights: only rollout members (rank >= 1) receive.")
        stats = {"buckets": 0, "bytes": 0, "wait_s": 0.0}
        self.last_receive = stats
        while True:
            t0 = time.perf_counter()
            header = self._broadcast_header(None)
            data = self._buffer(header["length"])
            self._data_group.broadcast(data, 0).wait()
            stats["wait_s"] += time.perf_counter() - t0
            stats["buckets"] += 1
            stats["bytes"] += header["length"]
            stats["global_steps"] = header.get("global_steps")
            for d in header["bucket_meta"]:
                meta = _meta_from_json(d)
                yield meta, data[meta.offset:meta.offset + meta.chunk_size]
            if header["is_last"]:
                return

    def receive_weights(self, global_steps: int | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield whole `(name, tensor)` pairs as the buckets arrive (each a copy, on the engine's device)."""
        yield from self.merge(self._receive_weight_chunks())

    # ------------------------------------------------------------------------------ packing
    # minirl factors the packing out of send_weights / receive_weights, so that a registered subclass can
    # replace it (lab 06); verl's NCCLCheckpointEngine packs inline in both methods.
    def pack(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[list, int]]:
        """`(chunks with their in-bucket offsets, bucket length)` per bucket: `split_weight_chunks` then `pack_buckets`."""
        return pack_buckets(split_weight_chunks(weights, self.bucket_size), self.bucket_size)

    def merge(self, chunks: Iterable[tuple[TensorMeta, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        """Whole `(name, tensor)` pairs from the received chunks, in order: `merge_weight_chunks`."""
        return merge_weight_chunks(chunks)
