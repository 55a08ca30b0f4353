"""A rollout server: one replica's engine in its own process, answering generate and control calls.

Started by `RolloutReplica.launch_server` as `python -m minirl.workers.rollout.server` (its settings
arrive as JSON on stdin, so the auth token never shows in `ps`), it builds the backend named by
`actor_rollout_ref.rollout.name` (`hf` or `vllm`) from the model directory, listens on 127.0.0.1 for
the controller (`minirl.workers.rollout.rpc`), writes its port to the ready file, and serves:

- `generate(request_id, prompt_ids, sampling_params)`: requests wait in a queue; the scheduler takes
  every request that has arrived, groups them by sampling parameters and runs each group in batches of
  at most `rollout.max_num_seqs` on the engine thread (a small stand-in for vLLM's continuous batching);
  `generate_batch` queues several requests at once (an agent-loop worker's requests of one event-loop
  turn: minirl's in-controller batches, reproduced). Every `TokenOutput`
  is stamped with the weight version this server holds (`policy_version`, `extra_fields["global_steps"]`:
  verl's `set_global_steps`) and with the batch it ran in;
- `abort_all_requests` / `resume_generation`: stop the running batch after its current token
  (partial outputs come back with `stop_reason="aborted"`), answer queued requests as aborted, and
  hold new ones until generation resumes: what a weight sync in the middle of generation needs;
- the checkpoint engine (`execute_checkpoint_engine`: prepare, init_process_group, finalize) and
  `update_weights(global_steps)`: receive the buckets, load them by name, clear the KV cache, take the
  new version; timings and sizes come back for the trace;
- `sleep` / `wake_up` (nothing to do for a standalone replica, as in verl), `release_kv_cache` /
  `resume_kv_cache` / `clear_kv_cache`, `set_global_steps`, `status`, `shutdown`.

Generation and weight loads run on ONE engine thread, so they never overlap; the event loop stays
free for control calls meanwhile. A watchdog thread ends the process when its parent is gone
(the controller crashed or was killed), so no server outlives the run.

Mirrors verl's `vLLMHttpServer` (`verl/workers/rollout/vllm_rollout/vllm_async_server.py:82`):
`generate` (`:535`), `wake_up` (`:794`), `sleep` (`:815`), `clear_kv_cache` (`:826`),
`release_kv_cache` (`:837`), `resume_kv_cache` (`:847`), `set_global_steps` (`:886`),
`abort_all_requests` (`:893`), `resume_generation` (`:934`), with the rollout side of the checkpoint
engine that verl runs in a `CheckpointEngineWorker` (`verl/checkpoint_engine/base.py:303`) next to the
engine. What minirl simplifies: one process per replica and no HTTP/OpenAI endpoint; batches form
between calls, not at every decode step; the vLLM backend's synchronous engine cannot stop mid-call,
so its abort waits for the running batch (verl's `AsyncLLM.pause_generation` aborts mid-request).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

__all__ = ["RolloutServer", "main"]


def _rss_mb() -> float:
    """This process's resident memory in MiB (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return 0.0


class RolloutServer:
    """The engine and its request scheduler inside one server process.

    Args:
        config: the `actor_rollout_ref.rollout` section as a plain dict (its `seed` is offset by the
            replica rank, verl's `replica_rank + seed`, so replicas draw different samples).
        model_path: the model directory every replica starts from (the first sync overwrites it).
        replica_rank: this replica's index.
        device: where the engine runs.
    """

    def __init__(self, config: dict, model_path: str, replica_rank: int, device: str, rollout=None) -> None:
        from minirl.workers.rollout.base import get_rollout_class

        self.config = dict(config)
        self.replica_rank = int(replica_rank)
        self.device = device
        if rollout is None:
            self.config["seed"] = int(self.config.get("seed") or 0) + int(replica_rank)
            self.rollout = get_rollout_class(str(self.config.get("name", "hf")))(self.config, model_path, device=device)
        else:  # the controller's own engine, served to agent-loop worker processes (LocalRolloutServer)
            self.rollout = rollout
        self.engine = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self.checkpoint_engine = None
        self.global_steps = 0
        self.paused = False
        self.in_flight = 0
        self.batches = 0
        self._queue: list[tuple[list[int], Any, asyncio.Future]] = []
        self._wakeup = asyncio.Event()
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._stopping = asyncio.Event()
        self._scheduler = asyncio.ensure_future(self._schedule())

    # ------------------------------------------------------------------------------ generate
    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict):
        """Queue one request; resolve with its `TokenOutput` (verl: `vLLMHttpServer.generate`)."""
        from minirl.workers.rollout.base import SamplingParams

        params = SamplingParams(**sampling_params)
        await self._resumed.wait()  # paused for a weight sync: wait until generation resumes
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((list(prompt_ids), params, fut))
        self._wakeup.set()
        return await fut

    async def generate_batch(self, requests: list[tuple[str, list[int], dict]]) -> list:
        """Queue several requests at once: `(request_id, prompt_ids, sampling_params)` each (minirl only).

        They enter the queue together, in this order, so the scheduler runs them as one engine batch
        (with anything else that is queued): an agent-loop worker sends the requests its sessions made in
        one event-loop turn this way, and a sync run samples the same batches, hence the same tokens,
        as when the agent loop runs in the controller (`LocalLLMServerClient`).
        """
        from minirl.workers.rollout.base import SamplingParams

        await self._resumed.wait()
        loop = asyncio.get_running_loop()
        futures = []
        for _, prompt_ids, sampling_params in requests:
            fut = loop.create_future()
            self._queue.append((list(prompt_ids), SamplingParams(**sampling_params), fut))
            futures.append(fut)
        self._wakeup.set()
        return list(await asyncio.gather(*futures))

    async def _schedule(self) -> None:
        """Take every queued request, one engine batch per distinct sampling parameters, forever."""
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            await self._wakeup.wait()
            await self._gather_window()
            self._wakeup.clear()
            pending, self._queue = self._queue, []
            groups: dict[str, list] = {}
            for item in pending:
                groups.setdefault(json.dumps(asdict(item[1]), sort_keys=True), []).append(item)
            # at most `rollout.max_num_seqs` per engine call (vLLM's bound on a batch); each call's requests are
            # answered as it ends, so their sessions go on (reward, next turn) while the next call runs
            size = int(getattr(self.rollout, "max_num_seqs", 0) or 0)
            for items in groups.values():
                for i in range(0, len(items), size or len(items)):
                    chunk = items[i:i + (size or len(items))]
                    if self.paused:  # an abort came while an earlier call ran: these were still queued
                        self._answer_aborted(chunk)
                        continue
                    await self._run_batch(loop, chunk)

    async def _gather_window(self, quiet_s: float = 0.002, max_s: float = 0.02) -> None:
        """Wait until no request arrived for `quiet_s` (at most `max_s`): requests sent together, one batch."""
        deadline, seen = time.monotonic() + max_s, -1
        while len(self._queue) != seen and time.monotonic() < deadline:
            seen = len(self._queue)
            await asyncio.sleep(quiet_s)

    async def _run_batch(self, loop, items) -> None:
        prompts, params = [p for p, _, _ in items], items[0][1]
        self.in_flight = len(items)
        self.batches += 1
        batch_id = self.batches
        times = {}

        def run():
            times["start"] = time.time()
            try:
                return self.rollout.generate(prompts, params)
            finally:
                times["end"] = time.time()

        try:
            outs = await loop.run_in_executor(self.engine, run)
        except Exception as e:  # noqa: BLE001 (every waiting request sees the engine's error)
            for _, _, fut in items:
                if not fut.done():
                    fut.set_exception(e)
            return
        finally:
            self.in_flight = 0
        for (_, _, fut), out in zip(items, outs):
            # the batch's wall-clock span on the engine thread and the process that ran it: the trace's
            # generation row (minirl only)
            out.extra_fields.update(global_steps=out.policy_version, replica_rank=self.replica_rank,
                                    server_batch=batch_id, server_batch_size=len(items), server_pid=os.getpid(),
                                    batch_start=times["start"], batch_end=times["end"])
            if not fut.done():
                fut.set_result(out)

    # ------------------------------------------------------------------------------ abort / resume
    async def abort_all_requests(self) -> dict:
        """Stop generation for a weight sync: the running batch ends after its current token, queued
        requests come back aborted and empty, and new requests wait until `resume_generation`."""
        self.paused = True
        self._resumed.clear()
        running = self.in_flight
        self.rollout.abort_event.set()
        queued, self._queue = self._queue, []
        self._answer_aborted(queued)
        await asyncio.get_running_loop().run_in_executor(self.engine, lambda: None)  # the running batch has ended
        return {"aborted_running": running, "aborted_queued": len(queued)}

    def _answer_aborted(self, items) -> None:
        """Answer requests that never reached the engine: no tokens, finish reason "aborted" (the client resumes
        them after `resume_generation`, as verl's `FullyAsyncLLMServerClient` does)."""
        from minirl.workers.rollout.base import TokenOutput

        version = int(self.rollout.policy_version)
        for _, params, fut in items:
            if not fut.done():
                fut.set_result(TokenOutput([], [] if params.logprobs else None, "aborted", version,
                                           {"global_steps": version, "replica_rank": self.replica_rank}))

    async def resume_generation(self) -> dict:
        """Accept and run requests again (verl: `vLLMHttpServer.resume_generation`)."""
        self.rollout.abort_event.clear()
        self.paused = False
        self._resumed.set()
        return {"resumed": True}

    # ------------------------------------------------------------------------------ weights
    def _new_checkpoint_engine(self, backend: str, bucket_size: int):
        from minirl.checkpoint_engine.base import CheckpointEngineRegistry

        return CheckpointEngineRegistry.new(backend, bucket_size=bucket_size, is_master=False, device=self.device)

    async def execute_checkpoint_engine(self, method: str, kwargs: dict | None = None,
                                        backend: str | None = None, bucket_size: int | None = None):
        """Run a group method of this server's checkpoint engine (verl: `execute_checkpoint_engine`)."""
        if self.checkpoint_engine is None:
            if backend is None or bucket_size is None:
                raise RuntimeError("the first execute_checkpoint_engine call must say backend and bucket_size")
            self.checkpoint_engine = self._new_checkpoint_engine(backend, int(bucket_size))
        fn = getattr(self.checkpoint_engine, method)
        return await asyncio.get_running_loop().run_in_executor(self.engine, lambda: fn(**(kwargs or {})))

    def _receive_and_load(self, global_steps: int) -> dict:
        engine = self.checkpoint_engine
        counted = {"tensors": 0}

        def weights():
            for name, tensor in engine.receive_weights(global_steps=global_steps):
                counted["tensors"] += 1
                yield name, tensor

        start, t0 = time.time(), time.perf_counter()
        self.rollout.update_weights(weights(), version=int(global_steps))
        t1 = time.perf_counter()
        self.rollout.clear_kv_cache()  # cached prefixes were computed by the old weights
        t2 = time.perf_counter()
        self.global_steps = int(global_steps)
        received = dict(engine.last_receive)
        return {"replica_rank": self.replica_rank, "global_steps": self.global_steps, "tensors": counted["tensors"],
                "buckets": received.get("buckets", 0), "bytes": received.get("bytes", 0),
                "receive_wait_s": received.get("wait_s", 0.0),
                "load_start": start, "load_end": start + (t1 - t0),
                "load_s": max(0.0, (t1 - t0) - received.get("wait_s", 0.0)), "kv_cache_reset_s": t2 - t1}

    async def update_weights(self, global_steps: int) -> dict:
        """Receive the buckets from the actor, load them, clear the KV cache, take version `global_steps`."""
        if self.checkpoint_engine is None:
            raise RuntimeError("update_weights before the checkpoint engine's process group was built")
        return await asyncio.get_running_loop().run_in_executor(self.engine, self._receive_and_load, global_steps)

    async def set_global_steps(self, global_steps: int) -> dict:
        """Record the version of the weights held (verl: `vLLMHttpServer.set_global_steps`)."""
        self.global_steps = self.rollout.policy_version = int(global_steps)
        return {"global_steps": self.global_steps}

    # ------------------------------------------------------------------------------ memory
    async def sleep(self) -> dict:
        """Nothing: a standalone replica owns its device and never frees it (verl skips sleep in
        STANDALONE mode too); the in-controller replica is the one that sleeps."""
        return {"slept": False, "why": "standalone replica (verl: 'skip sleep in standalone mode')"}

    async def wake_up(self, tags: list[str] | None = None) -> dict:
        """Nothing to wake (see `sleep`)."""
        return {"woken": False, "why": "standalone replica (verl: 'skip wake_up in standalone mode')"}

    async def _on_engine(self, coro_fn) -> None:
        from minirl.utils.py_functional import run_coroutine

        await asyncio.get_running_loop().run_in_executor(self.engine, run_coroutine, coro_fn)

    async def release_kv_cache(self) -> dict:
        """Free the KV cache during a sync (hf: none is held between calls; vLLM on GPU: sleep + wake weights)."""
        t0 = time.perf_counter()
        await self._on_engine(self.rollout.release_kv_cache)
        return {"release_kv_cache_s": time.perf_counter() - t0}

    async def resume_kv_cache(self) -> dict:
        t0 = time.perf_counter()
        await self._on_engine(self.rollout.resume_kv_cache)
        return {"resume_kv_cache_s": time.perf_counter() - t0}

    async def clear_kv_cache(self) -> dict:
        await asyncio.get_running_loop().run_in_executor(self.engine, self.rollout.clear_kv_cache)
        return {"cleared": True}

    # ------------------------------------------------------------------------------ process
    async def status(self) -> dict:
        """What the server holds now: version, queue, pid, memory, engine."""
        return {"replica_rank": self.replica_rank, "pid": os.getpid(), "global_steps": self.global_steps,
                "in_flight": self.in_flight, "queued": len(self._queue), "paused": self.paused,
                "batches": self.batches, "rss_mb": round(_rss_mb(), 1), "device": self.device,
                "backend": type(self.rollout).__name__,
                "sleep_mode": bool(getattr(self.rollout, "sleep_enabled", False))}

    async def shutdown(self) -> dict:
        self._stopping.set()
        self._wakeup.set()
        if self.checkpoint_engine is not None and hasattr(self.checkpoint_engine, "close"):
            self.checkpoint_engine.close()
        asyncio.get_running_loop().call_later(0.05, self._exit)
        return {"pid": os.getpid()}

    @staticmethod
    def _exit() -> None:
        os._exit(0)

    async def handle(self, method: str, kwargs: dict):
        """Dispatch one RPC call to the method of that name."""
        if method.startswith("_") or not callable(getattr(self, method, None)) or method == "handle":
            raise AttributeError(f"rollout server has no method {method!r}")
        return await getattr(self, method)(**kwargs)


def _watch_parent(parent_pid: int) -> None:
    """End this process when the controller that started it is gone (its parent pid changes)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            os._exit(3)


def _write_ready(path: str, info: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, path)


async def _serve(args: dict) -> None:
    from minirl.workers.rollout.rpc import serve_rpc

    try:
        server = RolloutServer(args["config"], args["model_path"], args["replica_rank"], args["device"])
    except Exception as e:  # the controller reports it in one line (MINIRL_DEBUG=1: the traceback too)
        _write_ready(args["ready_file"], {"error": f"{type(e).__name__}: {e}"})
        if os.environ.get("MINIRL_DEBUG") == "1":
            raise
        return
    listener = await serve_rpc(server.handle, args["token"])
    port = listener.sockets[0].getsockname()[1]
    _write_ready(args["ready_file"], {"port": port, "pid": os.getpid()})
    await server._stopping.wait()
    await asyncio.sleep(1)


def main() -> None:
    """Process entry point: settings as one JSON object on stdin (see `RolloutReplica.launch_server`)."""
    args = json.loads(sys.stdin.readline())
    if int(args.get("nice", 0)) > 0:  # rollout.nice: the trainer keeps its core when processes outnumber cores
        os.nice(int(args["nice"]))
    threading.Thread(target=_watch_parent, args=(int(args["parent_pid"]),), daemon=True).start()
    if args.get("device", "cpu") == "cpu":
        import torch

        torch.set_num_threads(int(args.get("num_threads", 1)))
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    try:
        asyncio.run(_serve(args))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the controller shuts down too
        pass


if __name__ == "__main__":
    main()
