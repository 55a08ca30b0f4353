"""Rollout replicas: how many there are, where each one runs, and the handle the controller calls.

A *replica* is one complete inference engine holding one copy of the policy. How many, from verl's
keys (`LLMServerManager._initialize_llm_servers`, `verl/workers/rollout/llm_server.py:518`):

$$\\text{replicas} = \\left\\lfloor \\frac{\\text{world size}}{\\texttt{tensor\\_model\\_parallel\\_size} \\cdot
\\texttt{data\\_parallel\\_size} \\cdot \\texttt{pipeline\\_model\\_parallel\\_size}} \\right\\rfloor$$

where the world size is `rollout.nnodes * rollout.n_gpus_per_node` for *standalone* replicas
(`rollout.nnodes >= 1`: servers on their own devices) and the trainer's world size for *hybrid* ones
(`rollout.nnodes = 0`: servers inside the training workers, sharing their GPUs).

minirl's two placements:

- `rollout.nnodes = 0` (default): one `LocalReplica` in the controller process (verl: hybrid replicas,
  one per `TP * DP * PP` training ranks, inside the training workers). When the agent loop runs in
  worker processes (`rollout.agent.placement`), the engine is served to them on 127.0.0.1 by a
  `LocalRolloutServer` and its replica is a `ServedLocalReplica`; with the agent loop in the controller,
  colocate_async uses `PausableLocalReplica`. Both pause generation for real on `abort_all_requests`.
- `rollout.nnodes = 1`: `replicas` server processes on this machine (`RolloutReplica`), each running
  `minirl.workers.rollout.server` on 127.0.0.1; on CPU a "GPU" of `n_gpus_per_node` is one process.

Mirrors verl's `RolloutReplica` (`verl/workers/rollout/replica.py:70`): `init_standalone`
(`:189`) / `launch_servers` (`:242`) start the servers, and the control methods `wake_up` (`:265`),
`sleep` (`:269`), `abort_all_requests` (`:273`), `resume_generation` (`:277`), `clear_kv_cache`
(`:281`), `release_kv_cache` (`:285`), `resume_kv_cache` (`:289`) forward to them. What minirl
simplifies: a replica is one process (verl: one server per node of the replica, each driving `TP`
GPU workers), started with `subprocess` rather than as a Ray actor; servers run on this machine only.

The count itself (`num_replicas`, `rollout_world_size`, `uses_servers`) is computed from the config
alone, in `minirl.config.derived`; the config check of the placement is in `minirl.config.values`.
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
import threading
import time
from typing import Any

__all__ = ["LocalReplica", "PausableLocalReplica", "RolloutReplica", "ServedLocalReplica"]


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


class PausableLocalReplica(LocalReplica):
    """The in-controller replica with a real abort: the engine stops after its current token, new requests wait.

    colocate_async's replica (`owner` is the `ColocatedRollout` of `minirl.workers.rollout.llm_server`, whose
    event loop the requests run on). verl: a hybrid replica's `abort_all_requests` (`verl/workers/rollout/replica.py:273`) / `resume_generation` (`:277`).
    """

    def __init__(self, owner) -> None:
        super().__init__(owner.rollout)
        self.owner = owner
        self.resumed = threading.Event()
        self.resumed.set()
        self._gate = asyncio.Event()  # the same gate as seen from the owner's loop: waiters sleep, they do not poll
        self._gate.set()
        self.in_flight = 0
        """Requests inside the engine now."""
        self.aborts = 0

    def _set_gate(self, is_open: bool) -> None:
        (self.resumed.set if is_open else self.resumed.clear)()
        loop = self.owner.loop.loop
        if loop.is_running():
            loop.call_soon_threadsafe(self._gate.set if is_open else self._gate.clear)
        else:
            (self._gate.set if is_open else self._gate.clear)()

    async def wait_resumed(self) -> None:
        """Wait (on the owner's loop) until the gate is open. An asyncio.Event, not a poll: a 2 ms poll of each of
        the hundreds of held requests kept the loop thread busy and slowed the training it should leave alone."""
        await self._gate.wait()

    async def abort_all_requests(self) -> dict:
        """Close the gate, make the running engine call return after its current token, wait until it has."""
        self._set_gate(False)
        running = self.in_flight
        self.rollout.abort_event.set()
        await self.owner.loop.call(asyncio.sleep(0))  # runs once the loop is free: the engine call has returned
        self.aborts += 1
        return {"aborted_running": running, "aborted_queued": 0}

    async def resume_generation(self) -> dict:
        self.rollout.abort_event.clear()
        self._set_gate(True)
        return {"resumed": True}


class ServedLocalReplica(LocalReplica):
    """The in-controller engine as agent-loop worker *processes* reach it: through a `RolloutServer` of its own.

    `owner` is the `LocalRolloutServer` of `minirl.workers.rollout.llm_server`, which runs the engine's
    scheduler on a controller thread and listens on 127.0.0.1 for the workers. The naive checkpoint engine
    loads weights into the engine directly (`load_weights`, as `LocalReplica`); `abort_all_requests` /
    `resume_generation` pause and resume the served scheduler exactly as a server process does (the running
    batch stops after its current token, queued requests come back aborted, new ones wait), so colocate_async
    pauses its engine the same way whether the agent loop runs in the controller or in worker processes.
    verl: a hybrid replica's `abort_all_requests` (`verl/workers/rollout/replica.py:273`) / `resume_generation`
    (`:277`).
    """

    def __init__(self, owner) -> None:
        super().__init__(owner.rollout)
        self.owner = owner
        self.aborts = 0

    async def abort_all_requests(self) -> dict:
        out = await self.owner.loop.call(self.owner.server.abort_all_requests())
        self.aborts += 1
        return out

    async def resume_generation(self) -> dict:
        return await self.owner.loop.call(self.owner.server.resume_generation())

    async def status(self) -> dict:
        return {**await super().status(), "served_on": self.owner.server_address}


# ---------------------------------------------------------------------------------- a server


def server_timeout(rollout) -> float:
    """`rollout.server.timeout`: seconds a server may stay silent before it counts as hung (verl: `ServerConfig.timeout`).

    `rollout` is the `actor_rollout_ref.rollout` section or the plain dict a server receives; a missing key
    is the schema's default (`minirl.config.schema.ROLLOUT_DEFAULTS`).
    """
    from minirl.config.schema import ROLLOUT_DEFAULTS
    from minirl.utils.config import cfg_get

    return float(cfg_get(cfg_get(rollout, "server"), "timeout", ROLLOUT_DEFAULTS.server.timeout))


class RolloutReplica:
    """One rollout server process on 127.0.0.1 and the calls the controller makes to it.

    Args:
        replica_rank: the replica's index (the server seeds its sampler with `rollout.seed + rank`).
        config: the `actor_rollout_ref.rollout` section.
        model_path: the model directory the server loads first.
        device: the server's device (`cpu`, `cuda:1`, ...).
        loop: the `EventLoopThread` that holds every replica's connection.
        start_timeout_s: how long the process may take to come up.
        nice: the server process's scheduling niceness (`actor_rollout_ref.rollout.nice`, resolved).
    """

    in_controller = False

    def __init__(self, replica_rank: int, config, model_path: str, device: str, loop,
                 start_timeout_s: float = 180.0, nice: int = 0) -> None:
        from omegaconf import DictConfig, OmegaConf

        self.replica_rank = int(replica_rank)
        self.config = OmegaConf.to_container(config, resolve=True) if isinstance(config, DictConfig) else dict(config)
        self.model_path = str(model_path)
        self.device = device
        self.loop = loop
        self.start_timeout_s = float(start_timeout_s)
        self.nice = int(nice)  # the server's scheduling niceness (`actor_rollout_ref.rollout.nice`)
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
                "device": self.device, "token": self._token, "ready_file": self._ready, "parent_pid": os.getpid(),
                "nice": self.nice}
        env = dict(os.environ)
        if self.device == "cpu":  # one torch thread per server: the servers share the machine's cores
            env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_DISABLE_PROGRESS_BARS="1", TRANSFORMERS_VERBOSITY="error",
                   VLLM_ENABLE_V1_MULTIPROCESSING=env.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0"))
        self.process = subprocess.Popen([sys.executable, "-m", "minirl.workers.rollout.server"], stdin=subprocess.PIPE,
                                        stderr=subprocess.PIPE, env=env)
        from minirl.workers.rollout.server_log import LogTail

        self.log_tail = LogTail(self.process.stderr)  # passed through to our stderr; its last lines name a failure
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
        self.server_address = f"{LOOPBACK}:{info['port']}"
        self.port = int(info["port"])
        self.client = RPCClient(LOOPBACK, info["port"], token, name=f"rollout server {self.replica_rank}",
                                hung_after_s=server_timeout(self.config), describe=self._describe_lost)
        await self.client.connect()

    def _describe_lost(self, event: str, doing: str) -> str:
        """The `ServerLost` line: this server, its pid, what happened, what it was doing, its last log lines."""
        from minirl.workers.rollout.server_log import lost_server_message

        return lost_server_message(f"rollout server {self.replica_rank}", self.process, self.server_address, event,
                                   doing, getattr(self, "log_tail", None))

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
        if self.client is not None and self.client.lost and self.alive():
            self.process.kill()  # gone or hung (SIGSTOP): it cannot answer, and SIGKILL also ends a stopped process
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
