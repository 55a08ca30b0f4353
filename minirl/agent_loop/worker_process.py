"""Agent-loop workers as processes of their own: the controller only schedules.

verl runs every `AgentLoopWorkerTQ` as a Ray actor (`AgentLoopManager._init_agent_loop_workers`,
`verl/experimental/agent_loop/agent_loop.py:1177`: `actor_rollout_ref.rollout.agent.num_workers` actors,
spread round-robin over the nodes). Each one talks to the rollout servers itself and writes the finished
trajectories into the TransferQueue itself, so the trainer's process does none of that work: templating,
the client side of every request, reward scoring, the writes. On two CPU cores this matters: with the
sessions on the controller's event-loop thread, the trainer, the rollout and the agent loop competed for
the same interpreter (benchmarks/README.md, async_modes).

Where minirl's workers run, `actor_rollout_ref.rollout.agent.placement` (minirl only):

| placement | the workers | when |
|---|---|---|
| `process` | OS processes forked from one fork server per controller process (the modules imported once) | `auto` without Ray |
| `ray` | Ray actors, verl's way | `auto` when the trainer's workers are Ray actors (`trainer.worker_group`) |
| `inprocess` | objects in the controller, sessions on its event loop (`LocalAgentLoopManagerTQ`) | chapters that step through one session; fault injection |

What crosses the process boundary, all over sockets on 127.0.0.1 that check a per-run token first
(`minirl.workers.rollout.rpc`):

- worker -> rollout: `RemoteRolloutServer.generate` to each rollout server process (`rollout.nnodes >= 1`),
  or `generate_batch` to the controller's engine, served by `LocalRolloutServer` (`rollout.nnodes = 0`: verl's
  hybrid replica, inside the trainer's process);
- worker -> TransferQueue: `TransferQueueClient.async_kv_batch_put` to the `TransferQueueServer` in the
  controller, which holds minirl's store (verl: `tq.async_kv_batch_put` to TransferQueue's own storage actors);
- controller -> worker: `generate_sequences(chunk)` (returns when the chunk's sessions are written, with
  what the trace records), `cancel`, `status` (pid and CPU seconds), `shutdown`.

A worker exits when its controller is gone (a watchdog polls the controller's pid), so a run killed with
SIGKILL leaves no worker behind; what the killed run had in flight is re-issued on resume
(`minirl.trainer.ppo.checkpointing`).

What minirl simplifies: each worker builds its own reward-loop worker in its process (verl calls
`reward.num_workers` separate reward actors); the TransferQueue is served by the controller (verl: storage
units of its own); one fork server per controller process, started on first use, serves every run of
that process (a notebook, a test session).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pickle
import secrets
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from minirl.workers.rollout.rpc import LOOPBACK, EventLoopThread, RPCClient, ServerLost, serve_rpc

__all__ = ["AGENT_LOOP_PLACEMENTS", "AgentLoopWorkerHost", "AgentLoopWorkerProcess", "RayAgentLoopWorker",
           "RemoteError", "TransferQueueClient", "TransferQueueServer", "cpu_seconds", "forward_output",
           "prewarm_fork_server", "raise_server_lost", "receive_report", "resolve_agent_placement"]

AGENT_LOOP_PLACEMENTS = ("auto", "process", "ray", "inprocess")
"""Values of `actor_rollout_ref.rollout.agent.placement`."""

_PRELOAD = ["minirl.agent_loop", "minirl.agent_loop.worker_process", "minirl.workers.reward",
            "minirl.workers.rollout.llm_server", "omegaconf"]
"""Imported once by the fork server; every worker forked from it starts with them loaded (~10 ms, not ~3 s)."""


def resolve_agent_placement(config) -> str:
    """`rollout.agent.placement`; `auto`: `ray` when the trainer's workers are Ray actors, else `process`.

    With on-policy distillation (`distillation.enabled`) `auto` is `inprocess`: minirl keeps the teachers'
    clients in the controller (verl hands every agent-loop worker actor the teacher servers' handles).
    """
    from omegaconf import OmegaConf

    placement = str(OmegaConf.select(config, "actor_rollout_ref.rollout.agent.placement", default="auto") or "auto")
    if placement not in AGENT_LOOP_PLACEMENTS:
        raise ValueError(f"actor_rollout_ref.rollout.agent.placement={placement!r}: use one of "
                         f"{list(AGENT_LOOP_PLACEMENTS)}.")
    if placement != "auto":
        return placement
    if OmegaConf.select(config, "distillation.enabled", default=False):
        return "inprocess"
    from minirl.config.derived import trainer_uses_ray

    return "ray" if trainer_uses_ray(config) else "process"


def cpu_seconds(pid: int | None = None) -> float | None:
    """User + system CPU seconds a process has used so far (Linux `/proc`; this process: `os.times`)."""
    if pid is None or pid == os.getpid():
        t = os.times()
        return t.user + t.system
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


# ------------------------------------------------------------------------------ the TransferQueue, served


class TransferQueueServer:
    """Serves the controller's `TransferQueue` to agent-loop worker processes: they put, the trainer reads.

    Only `kv_batch_put` is offered: a worker writes prompt statuses and finished trajectories; sampling,
    reading and clearing stay with the controller (verl's workers also only put). Runs on `loop`.
    """

    def __init__(self, tq, loop: EventLoopThread) -> None:
        self.tq, self.loop = tq, loop
        self.token = secrets.token_hex(16)
        self.puts = 0
        self._listener = loop.run(serve_rpc(self._handle, self.token))
        self.port = int(self._listener.sockets[0].getsockname()[1])

    async def _handle(self, method: str, kwargs: dict):
        if method == "kv_batch_put":
            self.tq.kv_batch_put(**kwargs)
            self.puts += 1
        elif method == "kv_batch_puts":  # several puts of one worker's event-loop turn, applied in order
            for put in kwargs["puts"]:
                self.tq.kv_batch_put(**put)
            self.puts += len(kwargs["puts"])
        else:
            raise AttributeError(f"the TransferQueue server answers kv_batch_put(s) only, not {method!r}")

    def endpoint(self) -> dict:
        return {"host": LOOPBACK, "port": self.port, "token": self.token}

    def close(self) -> None:
        if self.loop.loop.is_running():
            self.loop.loop.call_soon_threadsafe(self._listener.close)


class TransferQueueClient:
    """A worker's side of the TransferQueue: `await async_kv_batch_put(...)` (verl: `tq.async_kv_batch_put`).

    The puts its sessions make in one turn of the worker's event loop travel as one call (`kv_batch_puts`),
    applied in order: 256 sessions a step finishing in bursts cost the controller a handful of calls, not 256.
    Each caller still waits until its own put is in the store.
    """

    def __init__(self, host: str, port: int, token: str) -> None:
        self._args = (host, int(port), token)
        self._client: RPCClient | None = None
        self._lock: asyncio.Lock | None = None
        self._pending: list[tuple[dict, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None

    async def _connected(self) -> RPCClient:
        if self._client is None:
            self._lock = self._lock or asyncio.Lock()
            async with self._lock:  # the first puts arrive together: one connection for all of them
                if self._client is None:
                    client = RPCClient(*self._args)
                    await client.connect()
                    self._client = client
        return self._client

    async def async_kv_batch_put(self, keys, partition_id: str = "train", fields: dict | None = None,
                                 tags: list | None = None) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._pending.append(({"keys": list(keys), "partition_id": partition_id, "fields": fields, "tags": tags}, fut))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        await fut

    async def _flush(self) -> None:
        client = await self._connected()
        while self._pending:
            await asyncio.sleep(0)  # the other sessions of this turn add theirs
            batch, self._pending = self._pending, []
            try:
                await client.call("kv_batch_puts", puts=[put for put, _ in batch])
            except Exception as e:  # noqa: BLE001 (every waiting writer sees the store's error)
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)
            else:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_result(None)


# ------------------------------------------------------------------------------ inside a worker process


class AgentLoopWorkerHost:
    """What runs inside one agent-loop worker process: an `AgentLoopWorkerTQ` and the calls the controller makes.

    Args (one pickled `spec` dict, so secrets never show in `ps`): `rank`, `config` (the trainer's config
    as plain containers), `tokenizer`, `agent_loops` (the agent-loop classes registered in the controller:
    a user's own loop works in the workers too), `reward_managers` (the same for the reward managers this
    worker's `RewardLoopWorker` builds), `tq` (the `TransferQueueServer` endpoint), `reward` (None:
    rewards are computed by the trainer; else `{"router_address", "rm_tokenizer", "rm_token"}` for this
    worker's own `RewardLoopWorker`), `nice` (`actor_rollout_ref.rollout.nice`, resolved), `token` (this
    worker's own), `parent_pid`, `record_config_reads` (the controller records which file reads which key).

    What the controller's process would have seen had the sessions run there comes back with every report
    (`_report`): what the worker printed, its reward failures (count and first message, for the controller's
    `FailureLog`), and the config keys it read. An error a call raises comes back as the same exception
    (`RemoteError`), so a one-line error (a tool that does not build) stays one line in the controller.
    """

    def __init__(self, spec: dict) -> None:
        from omegaconf import OmegaConf

        from minirl.agent_loop.agent_loop import register
        from minirl.agent_loop.agent_loop_tq import AgentLoopWorkerTQ

        self.spec = spec
        self.rank = int(spec["rank"])
        self._reads: dict | None = None
        if spec.get("record_config_reads"):  # for the whole life of this process (minirl.config.introspect)
            from minirl.config.introspect import record_config_reads

            self._recording = record_config_reads()
            self._reads = self._recording.__enter__()
        for name, cls in (spec.get("agent_loops") or {}).items():  # registered in the controller (a user's loop)
            register(name)(cls)
        if spec.get("reward_managers"):
            from minirl.workers.reward.managers import register as register_reward_manager

            for name, cls in spec["reward_managers"].items():  # registered in the controller (a user's manager)
                register_reward_manager(name)(cls)
        self.config = OmegaConf.create(spec["config"])
        self.tokenizer = spec["tokenizer"]
        self.tq = TransferQueueClient(**spec["tq"])
        handles = None
        self.failures = None
        if spec.get("reward") is not None:
            from minirl.workers.reward import FailureLog, RewardLoopWorker

            reward = spec["reward"]
            self.failures = FailureLog(quiet=True)  # the controller's log prints: this one only counts and sends
            self._failures_sent = 0
            handles = [RewardLoopWorker(self.config, self.tokenizer, reward.get("router_address"),
                                        reward.get("rm_tokenizer"), failures=self.failures,
                                        reward_model_token=reward.get("rm_token"))]
        self._worker_cls, self._handles = AgentLoopWorkerTQ, handles
        self.worker = None
        self.client = None
        self._tasks: set[asyncio.Task] = set()
        self.stopping = asyncio.Event()

    async def connect(self, endpoints: list[dict]) -> dict:
        """Build the rollout client for `endpoints` and the worker around it (once the servers are up)."""
        from minirl.workers.rollout.llm_server import client_for_endpoints

        self.client = client_for_endpoints(endpoints)
        self.worker = self._worker_cls(self.config, self.tokenizer, self.client, self._handles, tq=self.tq)
        return self._report({"pid": os.getpid(), "servers": len(endpoints)})

    async def generate_sequences(self, batch) -> dict:
        """Run `batch`'s prompts (`AgentLoopWorkerTQ.generate_sequences`); what the trace records comes back.

        A `cancel` in the meantime ends it with `{"cancelled": True}`: the unfinished prompts keep their
        `running` status in the TransferQueue (a resumed run re-issues them). A rollout server that died or hung
        ends it with `{"server_lost": {...}}` (`ServerLost`'s line, address, event, calls in flight): the
        controller raises it as `ServerLost` (`raise_server_lost`) and the run stops in one line.
        """
        if self.worker is None:
            raise RuntimeError("agent-loop worker: generate_sequences before connect (the controller connects first)")
        task = asyncio.ensure_future(self.worker.generate_sequences(batch))
        self._tasks.add(task)
        try:
            report = await task
        except asyncio.CancelledError:
            return self._report({"cancelled": True, "pid": os.getpid()})
        except ServerLost as e:  # a plain dict crosses any boundary (a socket, Ray) with nothing lost on the way
            return self._report({"server_lost": {"line": str(e), "address": e.address, "event": e.event,
                                                 "doing": e.doing}, "pid": os.getpid()})
        finally:
            self._tasks.discard(task)
        report.update(self.client.pop_stats())
        return self._report(report)

    def _report(self, report: dict) -> dict:
        """`report` plus what the controller takes over from this process since the last report (`receive_report`):
        `output` (what was printed), `reward_failures` (`{"count", "first"}`), `config_reads` (`{key: [files]}`)."""
        if _OUTPUT is not None:
            report["output"] = _OUTPUT.drain()
        if self.failures is not None and self.failures.count > self._failures_sent:
            count, self._failures_sent = self.failures.count - self._failures_sent, self.failures.count
            report["reward_failures"] = {"count": count, "first": self.failures.take_window()}
        if self._reads:
            reads = {key: sorted(self._reads.pop(key)) for key in list(self._reads)}
            report["config_reads"] = reads
        return report

    async def cancel(self) -> int:
        """Cancel every running `generate_sequences`; returns how many there were."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)

    async def status(self) -> dict:
        return self._report({"rank": self.rank, "pid": os.getpid(), "cpu_s": cpu_seconds(),
                             "running": len(self._tasks)})

    async def shutdown(self) -> dict:
        await self.cancel()
        self.stopping.set()
        return {"pid": os.getpid()}

    async def handle(self, method: str, kwargs: dict):
        if method not in ("connect", "generate_sequences", "cancel", "status", "shutdown"):
            raise AttributeError(f"agent-loop worker has no method {method!r}")
        try:
            return await getattr(self, method)(**kwargs)
        except Exception as e:  # noqa: BLE001 (the controller raises it again: RemoteError.reraise)
            return RemoteError(e, f"agent-loop worker {self.rank} (pid {os.getpid()}), in {method}")


class RemoteError:
    """An exception a worker's call raised, carried back as the call's value; the controller raises it again.

    The exception itself travels when it pickles (its type and message, no traceback): a `ToolConfigError` or
    `ServerLost` raised in a worker is the same one-line error in the controller as with the sessions in
    process (`minirl.trainer.main_ppo.run_errors`). One that does not pickle comes back as an `RPCError` with
    its type and message. `where` (which worker, which call) is added as a note: tracebacks show it, the
    one-line message does not.
    """

    def __init__(self, error: BaseException, where: str) -> None:
        self.message = f"{type(error).__name__}: {error}"
        self.where = where
        try:
            self.pickled: bytes | None = pickle.dumps(error)
            pickle.loads(self.pickled)  # our own bytes: does it come back at all?
        except Exception:  # noqa: BLE001 (an exception that cannot travel: its message does)
            self.pickled = None

    def reraise(self):
        from minirl.workers.rollout.rpc import RPCError

        error = None
        if self.pickled is not None:
            try:
                error = pickle.loads(self.pickled)  # from a worker this controller started (RPC frames are pickles too)
            except Exception:  # noqa: BLE001 (a class the controller cannot import: the message)
                error = None
        if not isinstance(error, BaseException):
            error = RPCError(self.message)
        error.add_note(f"(raised in {self.where})")
        raise error


def receive_report(result, failures=None):
    """The controller's side of a worker's answer: raise its `RemoteError`; else print what it wrote
    (`forward_output`), merge its reward failures into `failures` (the controller's `FailureLog`) and its
    config reads into an open `record_config_reads`; returns the answer."""
    if isinstance(result, RemoteError):
        result.reraise()
    if not isinstance(result, dict):
        return result
    forward_output(result)
    lost = result.pop("reward_failures", None)
    if lost is not None and failures is not None:
        failures.merge(int(lost["count"]), lost.get("first"))
    reads = result.pop("config_reads", None)
    if reads:
        from minirl.config.introspect import add_config_reads

        add_config_reads(reads)
    return result


def _gone(pid: int) -> bool:
    """True when `pid` has exited: no such process, or a zombie waiting to be reaped (a SIGKILLed controller)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:
        return not _alive(pid)


def _watch_parent(parent_pid: int) -> None:
    """End this worker when the controller that started it is gone (killed, crashed, or exited), or the fork
    server it came from is (which ends when the controller's end of its pipe closes)."""
    fork_server = os.getppid()
    while True:
        time.sleep(0.5)
        if os.getppid() != fork_server or _gone(parent_pid):
            os._exit(3)


class _ForwardedOutput:
    """A worker's `sys.stdout`/`sys.stderr`: kept here, handed to the controller with each report, which prints it
    on its own `sys.stderr` (a notebook cell, pytest's capture), not wherever the fork server's stderr pointed."""

    encoding = "utf-8"

    def __init__(self, limit: int = 100_000) -> None:
        self._parts: list[str] = []
        self._size, self._limit = 0, limit
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            if self._size < self._limit:
                self._parts.append(text)
                self._size += len(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def drain(self) -> str:
        with self._lock:
            text, self._parts, self._size = "".join(self._parts), [], 0
        return text


_OUTPUT: _ForwardedOutput | None = None


def forward_output(report: dict) -> dict:
    """Print what a worker wrote (`report["output"]`) on this process's `sys.stderr`; returns the report."""
    text = report.pop("output", "") if isinstance(report, dict) else ""
    if text:
        sys.stderr.write(text)
        sys.stderr.flush()
    return report


def _write_ready(path: str, info: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, path)


def _process_main(spec: dict) -> None:
    """A worker process (forked by the fork server): build the host, serve the controller, write the ready file."""
    global _OUTPUT
    if int(spec.get("nice", 0)) > 0:  # rollout.nice: the trainer keeps its core when processes outnumber cores
        os.nice(int(spec["nice"]))
    threading.Thread(target=_watch_parent, args=(int(spec["parent_pid"]),), daemon=True).start()
    # the controller's import path and folder now (a notebook may have added a folder since the fork server started)
    sys.path[:0] = [p for p in spec.get("sys_path", []) if p not in sys.path]
    if spec.get("cwd") and os.path.isdir(spec["cwd"]):
        os.chdir(spec["cwd"])
    _OUTPUT = _ForwardedOutput()
    sys.stdout = sys.stderr = _OUTPUT
    try:
        import torch

        torch.set_num_threads(1)  # the agent loop only builds small tensors; the cores are shared
    except ImportError:
        pass

    async def serve():
        try:
            host = AgentLoopWorkerHost(spec)
            listener = await serve_rpc(host.handle, spec["token"])
        except Exception as e:  # noqa: BLE001 (the controller reports it in one line)
            _write_ready(spec["ready_file"], {"error": f"{type(e).__name__}: {e}"})
            return
        _write_ready(spec["ready_file"], {"port": int(listener.sockets[0].getsockname()[1]), "pid": os.getpid()})
        await host.stopping.wait()
        listener.close()
        await asyncio.sleep(0.05)  # let the shutdown reply leave

    asyncio.run(serve())


# ------------------------------------------------------------------------------ the fork server
# One small process per controller, started on first use: it imports the agent loop's modules once, then forks a
# worker for every request (~10 ms instead of a ~3 s interpreter start with its imports). A process of its own,
# single-threaded, so fork() is safe there (forking the controller, which runs threads, would not be).
# multiprocessing's "forkserver" does the same but re-imports the caller's __main__ script in every child.

_HEADER = struct.Struct(">Q")
_fork_server: subprocess.Popen | None = None
_fork_lock = threading.Lock()


def _dumps(obj) -> bytes:
    """cloudpickle: a tokenizer or agent loop defined in a notebook or a script (`__main__`) travels by value."""
    try:
        import cloudpickle
    except ImportError:  # Ray vendors it (a dependency of minirl)
        from ray import cloudpickle
    return cloudpickle.dumps(obj)


def _fork_server_main() -> None:
    """The fork server's main: read pickled specs on stdin, fork one worker per spec, answer with its pid."""
    import importlib
    import signal

    for module in _PRELOAD:
        importlib.import_module(module)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's to handle; EOF on stdin ends us
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    stdout.write(_HEADER.pack(os.getpid()))  # ready: the imports are done
    stdout.flush()
    while True:
        header = stdin.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return  # the controller is gone (or closed us)
        spec = pickle.loads(stdin.read(_HEADER.unpack(header)[0]))
        pid = os.fork()
        if pid == 0:  # the worker
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.dup2(2, 1)  # its prints go to stderr; stdout is the fork server's channel
            os.close(0)
            try:
                _process_main(spec)
            finally:
                os._exit(0)
        stdout.write(_HEADER.pack(pid))
        stdout.flush()


def _start_fork_server() -> subprocess.Popen:
    env = dict(os.environ)
    paths = [p for p in sys.path if p and os.path.isdir(p)]  # the controller's import path (a notebook's too)
    env["PYTHONPATH"] = os.pathsep.join(paths + [env["PYTHONPATH"]] if env.get("PYTHONPATH") else paths)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    code = "from minirl.agent_loop.worker_process import _fork_server_main; _fork_server_main()"
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)


def _fork(spec: dict) -> int:
    """Fork one worker from the fork server (started, or restarted, as needed); its pid."""
    global _fork_server
    with _fork_lock:
        if _fork_server is None or _fork_server.poll() is not None:
            _fork_server = _start_fork_server()
            _fork_server.ready = False
        server = _fork_server
        if not server.ready:
            got = server.stdout.read(_HEADER.size)
            if len(got) < _HEADER.size:
                raise RuntimeError(f"the agent-loop fork server exited with code {server.wait()} before it was "
                                   "ready; its error is printed above.")
            server.ready = True
        data = _dumps(spec)
        server.stdin.write(_HEADER.pack(len(data)) + data)
        server.stdin.flush()
        got = server.stdout.read(_HEADER.size)
        if len(got) < _HEADER.size:
            raise RuntimeError("the agent-loop fork server exited while forking a worker; its error is printed above.")
        return _HEADER.unpack(got)[0]


def prewarm_fork_server() -> None:
    """Start the fork server now (its imports then overlap the trainer's build); a no-op if it runs."""
    global _fork_server
    with _fork_lock:
        if _fork_server is None or _fork_server.poll() is not None:
            _fork_server = _start_fork_server()
            _fork_server.ready = False


# ------------------------------------------------------------------------------ the controller's handles


def raise_server_lost(report: dict, rank: int, describe=None) -> dict:
    """`report`, unless a worker's sessions met a dead or hung rollout server: then raise it here as `ServerLost`.

    `describe(info, doing) -> str | None` (set by the manager) words the line as the controller's own client
    would: the server's pid, exit code and last log lines, which only the controller (the servers' parent) knows.
    """
    info = report.get("server_lost") if isinstance(report, dict) else None
    if info is None:
        return report
    doing = f"{info.get('doing') or 'its calls'} of agent-loop worker {rank}"
    line = None
    if describe is not None and info.get("event"):
        with contextlib.suppress(Exception):  # the worker's own line is still one line
            line = describe(info, doing)
    raise ServerLost(line or info["line"], address=info.get("address"), event=info.get("event"), doing=doing)


def _read_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class AgentLoopWorkerProcess:
    """The controller's handle on one worker process: start it, call it, stop it.

    Every call is a coroutine of `loop` (the manager's `EventLoopThread`, where the connection lives).
    """

    placement = "process"
    describe_lost = None
    """`describe(info, doing) -> str`: the controller's wording of a lost server (set by `AgentLoopManagerTQ`)."""

    def __init__(self, rank: int, spec: dict, loop: EventLoopThread, failures=None) -> None:
        self.rank, self.loop = int(rank), loop
        self.failures = failures  # the controller's FailureLog: the worker's reward failures are merged into it
        self.token = secrets.token_hex(16)
        self._ready = os.path.join(tempfile.mkdtemp(prefix="minirl-agent-loop-worker-"), "ready.json")
        self.pid: int | None = _fork({**spec, "rank": self.rank, "token": self.token, "parent_pid": os.getpid(),
                                      "ready_file": self._ready, "sys_path": list(sys.path), "cwd": os.getcwd()})
        self.client: RPCClient | None = None

    async def connect(self, endpoints: list[dict], timeout_s: float = 120.0) -> None:
        """Wait for the process to listen, connect, hand it the rollout's endpoints."""
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(self._ready):
            if not _alive(self.pid):
                raise RuntimeError(f"agent-loop worker {self.rank} (pid {self.pid}) exited before it was ready; "
                                   "its error is printed above.")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"agent-loop worker {self.rank} was not ready after {timeout_s:.0f} s.")
            await asyncio.sleep(0.01)
        info = _read_json(self._ready)
        shutil.rmtree(os.path.dirname(self._ready), ignore_errors=True)
        if "error" in info:
            self.kill()
            raise RuntimeError(f"agent-loop worker {self.rank} failed to start: {info['error']}")
        self.client = RPCClient(LOOPBACK, info["port"], self.token)
        await self.client.connect()
        receive_report(await self.client.call("connect", endpoints=endpoints), self.failures)

    async def generate_sequences(self, chunk) -> dict:
        report = receive_report(await self.client.call("generate_sequences", batch=chunk), self.failures)
        return raise_server_lost(report, self.rank, self.describe_lost)

    async def cancel(self) -> int:
        return receive_report(await self.client.call("cancel"))

    async def status(self) -> dict:
        return receive_report(await self.client.call("status"), self.failures)

    def alive(self) -> bool:
        return self.pid is not None and _alive(self.pid)

    def kill(self) -> None:
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def shutdown(self) -> None:
        """Ask the worker to exit, then make sure it did (safe to call twice)."""
        if self.client is not None and self.alive() and self.loop.loop.is_running() and not self.loop.in_loop():
            with contextlib.suppress(Exception):  # a worker that cannot answer is killed below
                self.loop.run(self.client.call("shutdown"), timeout=5)
            deadline = time.monotonic() + 3
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.01)
        if self.client is not None and self.loop.loop.is_running() and not self.loop.in_loop():
            with contextlib.suppress(Exception):
                self.loop.run(self.client.close(), timeout=2)
        self.client = None
        self.kill()
        shutil.rmtree(os.path.dirname(self._ready), ignore_errors=True)


class _RayHost:
    """The Ray actor class: an `AgentLoopWorkerHost` behind Ray's async actor calls (verl: `AgentLoopWorkerTQ`)."""

    def __init__(self, spec: dict) -> None:
        import torch

        torch.set_num_threads(1)
        if int(spec.get("nice", 0)) > 0:
            os.nice(int(spec["nice"]))
        self.host = AgentLoopWorkerHost(spec)

    async def call(self, method: str, kwargs: dict) -> Any:
        return await self.host.handle(method, kwargs)

    def pid(self) -> int:
        return os.getpid()


def _ship_by_value(agent_loops: dict) -> dict:
    """The user's agent-loop (or reward-manager) classes that can travel to a Ray actor; by value when their
    module is not importable there.

    A class pickles by reference (module + name); a notebook's or a test file's module is on the controller's
    `sys.path` only, so Ray's worker could not import it. `cloudpickle.register_pickle_by_value` sends the
    module's code instead (verl's users register agent loops in an importable package). A class that still
    cannot be pickled (it holds a lock, a socket) stays behind with a one-line warning: the run goes on, and
    only a session that names it fails ('unknown agent loop').
    """
    import importlib.util

    from ray import cloudpickle

    shipped = {}
    for name, cls in agent_loops.items():
        module = sys.modules.get(cls.__module__)
        if module is not None and cls.__module__ != "__main__":  # __main__ classes already travel by value
            spec = importlib.util.find_spec(cls.__module__.split(".")[0])
            origin = getattr(spec, "origin", None) or ""
            if "site-packages" not in origin:  # not an installed package: the Ray worker may not find it
                with contextlib.suppress(ValueError):  # already registered
                    cloudpickle.register_pickle_by_value(module)
        try:
            cloudpickle.dumps(cls)
        except Exception as e:  # noqa: BLE001 (the run goes on without it; the line says why)
            print(f"[minirl] agent loop {name!r} ({cls.__module__}.{cls.__qualname__}) is not available in the Ray "
                  f"agent-loop workers: it cannot be pickled ({type(e).__name__}: {e}). Fix: define it in an "
                  "importable module, or actor_rollout_ref.rollout.agent.placement=inprocess.",
                  file=sys.stderr, flush=True)
            continue
        shipped[name] = cls
    return shipped


class RayAgentLoopWorker:
    """The controller's handle on one worker that is a Ray actor (verl's placement); same calls as a process."""

    placement = "ray"
    describe_lost = None

    def __init__(self, rank: int, spec: dict, loop: EventLoopThread, failures=None) -> None:
        import ray

        self.rank, self.loop = int(rank), loop
        self.failures = failures  # the controller's FailureLog: the worker's reward failures are merged into it
        env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        spec = {**spec, "agent_loops": _ship_by_value(spec.get("agent_loops") or {}),
                "reward_managers": _ship_by_value(spec.get("reward_managers") or {})}
        actor_cls = ray.remote(num_cpus=0)(_RayHost)
        self.actor = actor_cls.options(name=f"agent_loop_worker_{rank}_{secrets.token_hex(4)}",
                                       runtime_env={"env_vars": env}).remote(
            {**spec, "rank": self.rank, "token": "", "parent_pid": os.getpid()})
        self.pid: int | None = None

    async def _call(self, method: str, **kwargs):
        return await self.actor.call.remote(method, kwargs)

    async def connect(self, endpoints: list[dict], timeout_s: float = 300.0) -> None:
        self.pid = int(await asyncio.wait_for(self.actor.pid.remote(), timeout_s))
        receive_report(await self._call("connect", endpoints=endpoints), self.failures)

    async def generate_sequences(self, chunk) -> dict:
        report = receive_report(await self._call("generate_sequences", batch=chunk), self.failures)
        return raise_server_lost(report, self.rank, self.describe_lost)

    async def cancel(self) -> int:
        return receive_report(await self._call("cancel"))

    async def status(self) -> dict:
        return receive_report(await self._call("status"), self.failures)

    def kill(self) -> None:
        import ray

        with contextlib.suppress(Exception):  # Ray already gone
            ray.kill(self.actor)

    def shutdown(self) -> None:
        self.kill()

