"""Rollout replicas: how many there are, where each one runs, and the handle the controller calls.

A *replica* is one complete inference engine holding one copy of the policy. How many, from verl's
keys (`LLMServerManager._initialize_llm_servers`, `verl/workers/rollout/llm_server.py:518`):

$$\\text{replicas} = \\left\\lfloor \\frac{\\text{world size}}{\\texttt{tensor\\_model\\_parallel\\_size} \\cdot
\\texttt{data\\_parallel\\_size} \\cdot \\texttt{pipeline\\_model\\_parallel\\_size}} \\right\\rfloor$$

where the world size is `rollout.nnodes * rollout.n_gpus_per_node` for *standalone* replicas
(`rollout.nnodes >= 1`: servers on their own devices) and the trainer's world size for *hybrid* ones
(`rollout.nnodes = 0`: servers inside the training workers, sharing their GPUs).

minirl's two placements:

- `rollout.nnodes = 0` (default): one `LocalReplica` in the controller process, the one-process
  debug mode (verl: hybrid replicas, one per `TP * DP * PP` training ranks, inside the workers).
- `rollout.nnodes = 1`: `replicas` server processes on this machine (`RolloutReplica`), each running
  `minirl.workers.rollout.server` on 127.0.0.1; on CPU a "GPU" of `n_gpus_per_node` is one process.

Mirrors verl's `RolloutReplica` (`verl/workers/rollout/replica.py:70`): `init_standalone`
(`:189`) / `launch_servers` (`:242`) start the servers, and the control methods `wake_up` (`:265`),
`sleep` (`:269`), `abort_all_requests` (`:273`), `resume_generation` (`:277`), `clear_kv_cache`
(`:281`), `release_kv_cache` (`:285`), `resume_kv_cache` (`:289`) forward to them. What minirl
simplifies: a replica is one process (verl: one server per node of the replica, each driving `TP`
GPU workers), started with `subprocess` rather than as a Ray actor; servers run on this machine only.

This module imports no torch at import time, so the config check (`rollout_server_problems`) stays fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from typing import Any

from minirl.utils.config import cfg_get

__all__ = ["LocalReplica", "RolloutReplica", "num_replicas", "rollout_server_problems", "rollout_world_size",
           "uses_servers"]

STREAMING_BACKENDS = ("nccl",)
"""Checkpoint-engine backends that reach rollout servers in other processes."""


# ------------------------------------------------------------------------------------ the count


def rollout_world_size(rollout) -> int:
    """Devices per replica: `tensor_model_parallel_size * data_parallel_size * pipeline_model_parallel_size`."""
    return (int(cfg_get(rollout, "tensor_model_parallel_size", 1)) * int(cfg_get(rollout, "data_parallel_size", 1))
            * int(cfg_get(rollout, "pipeline_model_parallel_size", 1)))


def uses_servers(rollout) -> bool:
    """True for standalone rollout servers (`rollout.nnodes >= 1`), False for the in-controller replica."""
    return int(cfg_get(rollout, "nnodes", 0) or 0) > 0


def num_replicas(rollout, trainer_world_size: int = 1) -> int:
    """verl's replica count: standalone `nnodes * n_gpus_per_node // world`, hybrid `trainer ranks // world`.

    minirl builds one in-controller replica in the hybrid case whatever this returns.
    """
    world = rollout_world_size(rollout)
    if uses_servers(rollout):
        devices = int(cfg_get(rollout, "nnodes", 0)) * int(cfg_get(rollout, "n_gpus_per_node", 1))
    else:
        devices = int(trainer_world_size)
    return devices // world


def rollout_server_problems(cfg) -> list[str]:
    """Config problems of the rollout placement and the checkpoint engine, one line each."""
    r = cfg.actor_rollout_ref.rollout
    key, ce = "actor_rollout_ref.rollout", r.checkpoint_engine
    p: list[str] = []
    nnodes, gpus = int(r.nnodes), int(r.n_gpus_per_node)
    for name in ("data_parallel_size", "pipeline_model_parallel_size"):
        if int(r[name]) != 1:
            p.append(f"{key}.{name}={r[name]}: minirl's replica is one engine process, so only 1 is implemented "
                     f"(verl runs vLLM/SGLang with that many {name.split('_')[0]} ranks per replica). "
                     f"Fix: {key}.{name}=1.")
    if r.name == "hf" and int(r.tensor_model_parallel_size) != 1:
        p.append(f"{key}.tensor_model_parallel_size={r.tensor_model_parallel_size}: the hf rollout has no tensor "
                 f"parallelism. Fix: {key}.tensor_model_parallel_size=1 (or rollout.name=vllm on GPUs).")
    if nnodes < 0:
        p.append(f"{key}.nnodes={nnodes} must be >= 0 (0: the rollout lives with the trainer). Fix: {key}.nnodes=0.")
    elif nnodes > 1:
        p.append(f"{key}.nnodes={nnodes}: minirl starts rollout servers on this machine only. "
                 f"Fix: {key}.nnodes=1 and {key}.n_gpus_per_node=<servers>.")
    elif nnodes == 1:
        if gpus < 1:
            p.append(f"{key}.n_gpus_per_node={gpus} must be >= 1 with nnodes=1 (devices, on CPU server processes). "
                     f"Fix: {key}.n_gpus_per_node=2.")
        elif num_replicas(r) < 1:
            p.append(f"{key}.nnodes * n_gpus_per_node = {nnodes * gpus} devices cannot hold one replica of "
                     f"tensor * data * pipeline parallel = {rollout_world_size(r)} devices. "
                     f"Fix: raise {key}.n_gpus_per_node or lower the parallel sizes.")
    backend = str(ce.backend)
    if backend != "naive" and backend not in STREAMING_BACKENDS:
        p.append(f"{key}.checkpoint_engine.backend={backend!r} is not a backend minirl has (naive, "
                 f"{', '.join(STREAMING_BACKENDS)}; verl also nixl, hccl, mooncake, kimi, delta_sharded). "
                 f"Fix: naive (rollout in the trainer) or nccl (rollout servers).")
    elif backend == "naive" and nnodes >= 1:
        p.append(f"{key}.checkpoint_engine.backend=naive hands the tensors over inside one process, but "
                 f"{key}.nnodes={nnodes} starts rollout servers in their own processes (verl's separate_async "
                 f"asserts the same). Fix: {key}.checkpoint_engine.backend=nccl, or {key}.nnodes=0.")
    elif backend != "naive" and nnodes == 0:
        p.append(f"{key}.checkpoint_engine.backend={backend} streams weights to rollout servers in other processes, "
                 f"but {key}.nnodes=0 keeps the rollout in the trainer (verl's hybrid replicas always sync with "
                 f"naive). Fix: {key}.nnodes=1 {key}.n_gpus_per_node=<servers>, or backend=naive.")
    if float(ce.update_weights_bucket_megabytes) <= 0:
        p.append(f"{key}.checkpoint_engine.update_weights_bucket_megabytes={ce.update_weights_bucket_megabytes} "
                 "must be > 0 (MiB per bucket; verl's default 2048). Fix: a positive size.")
    for name in ("debug_skip_sync_steps", "debug_partial_sync_steps"):
        steps = list(ce[name] or [])
        if any(not isinstance(s, int) or s < 1 for s in steps):
            p.append(f"{key}.checkpoint_engine.{name}={steps}: a list of training steps >= 1 (debug only). "
                     f"Fix: {key}.checkpoint_engine.{name}=[] (the default).")
    return p


def _read_ready(path: str) -> dict:
    """The server's ready file (its port, or its start-up error); removed once read."""
    with open(path) as f:
        info = json.load(f)
    os.remove(path)
    os.rmdir(os.path.dirname(path))
    return info


# --------------------------------------------------------------------------- the in-controller replica


class LocalReplica:
    """The rollout in the controller process, behind the replica interface (the one-process debug mode).

    Wraps a `BaseRollout`; `sleep`/`wake_up` release and resume it (vLLM frees GPU memory, hf has
    nothing to free), `abort_all_requests` has nothing to abort (generation runs inside the trainer's
    call and is over when a sync starts). verl's counterpart is a hybrid replica, whose server runs
    inside the training workers.
    """

    in_controller = True

    def __init__(self, rollout, replica_rank: int = 0) -> None:
        self.rollout = rollout
        self.replica_rank = replica_rank
        self.server_address = "in-process"

    @property
    def global_steps(self) -> int:
        return self.rollout.policy_version

    async def wake_up(self, tags: list[str] | None = None) -> dict:
        await self.rollout.resume(list(tags or ["weights", "kv_cache"]))
        return {"woken": list(tags or ["weights", "kv_cache"])}

    async def sleep(self) -> dict:
        await self.rollout.release()
        return {"slept": True}

    async def abort_all_requests(self) -> dict:
        return {"aborted_running": 0, "aborted_queued": 0}

    async def resume_generation(self) -> dict:
        return {"resumed": True}

    async def clear_kv_cache(self) -> dict:
        self.rollout.clear_kv_cache()
        return {"cleared": True}

    async def release_kv_cache(self) -> dict:
        await self.rollout.release_kv_cache()
        return {}

    async def resume_kv_cache(self) -> dict:
        await self.rollout.resume_kv_cache()
        return {}

    def load_weights(self, weights, version: int) -> None:
        """Copy full tensors by name into the rollout's model; the rollout takes `version`."""
        self.rollout.update_weights(iter(weights), version=int(version))

    async def status(self) -> dict:
        return {"replica_rank": self.replica_rank, "pid": os.getpid(), "global_steps": self.global_steps,
                "backend": type(self.rollout).__name__, "in_controller": True}

    def shutdown(self) -> None:
        close = getattr(self.rollout, "close", None)
        if callable(close):
            close()


# ---------------------------------------------------------------------------------- a server


class RolloutReplica:
    """One rollout server process on 127.0.0.1 and the calls the controller makes to it.

    Args:
        replica_rank: the replica's index (the server seeds its sampler with `rollout.seed + rank`).
        config: the `actor_rollout_ref.rollout` section.
        model_path: the model directory the server loads first.
        device: the server's device (`cpu`, `cuda:1`, ...).
        loop: the `EventLoopThread` that holds every replica's connection.
        start_timeout_s: how long the process may take to come up.
    """

    in_controller = False

    def __init__(self, replica_rank: int, config, model_path: str, device: str, loop,
                 start_timeout_s: float = 180.0) -> None:
        from omegaconf import DictConfig, OmegaConf

        self.replica_rank = int(replica_rank)
        self.config = OmegaConf.to_container(config, resolve=True) if isinstance(config, DictConfig) else dict(config)
        self.model_path = str(model_path)
        self.device = device
        self.loop = loop
        self.start_timeout_s = float(start_timeout_s)
        self.process: subprocess.Popen | None = None
        self.client = None
        self.server_address: str | None = None
        self.global_steps = 0
        """The weight version this server holds, as the controller last set it."""

    # ------------------------------------------------------------------------------ start / stop
    def start_process(self) -> None:
        """Start `python -m minirl.workers.rollout.server` (returns at once; `launch_server` waits for it)."""
        self._token = secrets.token_hex(16)
        self._ready = os.path.join(tempfile.mkdtemp(prefix="minirl-rollout-server-"), "ready.json")
        args = {"config": self.config, "model_path": self.model_path, "replica_rank": self.replica_rank,
                "device": self.device, "token": self._token, "ready_file": self._ready, "parent_pid": os.getpid()}
        env = dict(os.environ)
        if self.device == "cpu":  # one torch thread per server: the servers share the machine's cores
            env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_DISABLE_PROGRESS_BARS="1", TRANSFORMERS_VERBOSITY="error",
                   VLLM_ENABLE_V1_MULTIPROCESSING=env.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0"))
        self.process = subprocess.Popen([sys.executable, "-m", "minirl.workers.rollout.server"], stdin=subprocess.PIPE,
                                        env=env)
        self.process.stdin.write((json.dumps(args) + "\n").encode())
        self.process.stdin.close()

    async def launch_server(self) -> None:
        """Start the server process (unless `start_process` did), wait for its port, connect (on `loop`)."""
        from minirl.workers.rollout.rpc import LOOPBACK, RPCClient

        if self.process is None:
            self.start_process()
        ready, token = self._ready, self._token
        deadline = time.monotonic() + self.start_timeout_s
        while not os.path.exists(ready):
            if self.process.poll() is not None:
                raise RuntimeError(f"rollout server {self.replica_rank} exited with code {self.process.returncode} "
                                   "before it was ready; its error is printed above.")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"rollout server {self.replica_rank} was not ready after "
                                   f"{self.start_timeout_s:.0f} s.")
            await asyncio.sleep(0.02)
        info = _read_ready(ready)
        if "error" in info:
            self.kill()
            raise RuntimeError(f"rollout server {self.replica_rank} failed to start: {info['error']}")
        self.client = RPCClient(LOOPBACK, info["port"], token)
        await self.client.connect()
        self.server_address = f"{LOOPBACK}:{info['port']}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """Stop the process: terminate, then kill if it does not exit within 5 s."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)

    def shutdown(self) -> None:
        """Ask the server to exit, then make sure it did (synchronous; safe to call twice)."""
        if self.alive() and self.client is not None and not self.loop.in_loop():
            with contextlib.suppress(Exception):  # a server that cannot answer is killed below
                self.loop.run(self.client.call("shutdown"), timeout=3)
            try:
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
        if self.client is not None and not self.loop.in_loop():
            with contextlib.suppress(Exception):
                self.loop.run(self.client.close(), timeout=2)
        self.kill()

    # ------------------------------------------------------------------------------ calls
    async def call(self, method: str, /, **kwargs) -> Any:
        """Call `method` on the server from any event loop."""
        if self.client is None:
            raise RuntimeError(f"rollout server {self.replica_rank} is not running (launch_server first).")
        return await self.loop.call(self.client.call(method, **kwargs))

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params):
        """One request (verl: `server.generate.remote(...)`); `sampling_params` a `SamplingParams`."""
        from dataclasses import asdict

        return await self.call("generate", request_id=request_id, prompt_ids=list(prompt_ids),
                               sampling_params=asdict(sampling_params))

    async def wake_up(self, tags: list[str] | None = None) -> dict:
        return await self.call("wake_up", tags=tags)

    async def sleep(self) -> dict:
        return await self.call("sleep")

    async def abort_all_requests(self) -> dict:
        return await self.call("abort_all_requests")

    async def resume_generation(self) -> dict:
        return await self.call("resume_generation")

    async def clear_kv_cache(self) -> dict:
        return await self.call("clear_kv_cache")

    async def release_kv_cache(self) -> dict:
        return await self.call("release_kv_cache")

    async def resume_kv_cache(self) -> dict:
        return await self.call("resume_kv_cache")

    async def set_global_steps(self, global_steps: int) -> dict:
        out = await self.call("set_global_steps", global_steps=int(global_steps))
        self.global_steps = int(global_steps)
        return out

    async def status(self) -> dict:
        return await self.call("status")

    async def execute_checkpoint_engine(self, method: str, **kwargs) -> Any:
        return await self.call("execute_checkpoint_engine", method=method, **kwargs)

    async def update_weights(self, global_steps: int) -> dict:
        """Receive and load one sync's buckets (the sender must be sending them at the same time)."""
        out = await self.call("update_weights", global_steps=int(global_steps))
        self.global_steps = int(global_steps)
        return out
