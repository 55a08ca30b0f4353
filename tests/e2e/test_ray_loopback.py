"""Ray stays on this machine: a 2-rank `minirl train` listens on loopback only, and a `kill -9` of its
driver leaves no process and no temp directory behind.

One real run (`trainer.n_gpus_per_node=2`: two FSDP ranks as Ray actors, gloo between them) is
started as its own process, so that it can be killed; it starts its own Ray (the session-wide
`ray_session` cannot serve here: killing its driver would kill pytest). While it trains, every
socket of its process tree (driver, GCS, raylet, agents, the two rank workers, the watchdog) that
listens for TCP connections or is bound for UDP must be on a loopback address (127.0.0.1, ::1 or
::ffff:127.0.0.1). Then the driver is killed with SIGKILL: within a few seconds every process of
that tree must be gone and Ray's temp directory removed (`minirl.single_controller.ray.runtime`).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from minirl.utils.distributed import is_loopback

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
GONE_WITHIN_S = 10.0


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _bound_sockets(procs) -> list[tuple]:
    """(pid, process name, kind, ip, port) of every listening TCP socket and bound UDP socket of `procs`."""
    found = []
    for proc in procs:
        try:
            name = proc.name()
            for conn in proc.net_connections(kind="inet"):
                udp = conn.type == socket.SOCK_DGRAM
                if (udp and conn.laddr) or conn.status == psutil.CONN_LISTEN:
                    found.append((proc.pid, name, "udp" if udp else "tcp", conn.laddr.ip, conn.laddr.port))
        except psutil.Error:
            continue  # a worker that exited meanwhile
    return found


def _alive(procs) -> list[psutil.Process]:
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            pass
    return out


def test_a_two_rank_run_listens_on_loopback_only_and_a_killed_driver_leaves_nothing(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "MINIRL_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "minirl.trainer.main_ppo", "trainer.n_gpus_per_node=2",
           "actor_rollout_ref.model.path=minirl://tiny-qwen2", "data.train_batch_size=8",
           "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.rollout.n=2",
           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "data.max_response_length=4",
           "trainer.total_training_steps=200", "trainer.val_before_train=false", "trainer.test_freq=-1",
           "trainer.logger=[file]", "trace.level=off", f"trainer.default_local_dir={run_dir}"]
    driver = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    procs = [psutil.Process(driver.pid)]
    try:
        metrics = run_dir / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while not (metrics.exists() and metrics.read_text().strip()):  # step 1 done: both ranks trained
            assert driver.poll() is None, driver.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the 2-rank run did not finish a step in 300 s"
            time.sleep(0.2)
        procs = _tree(driver.pid)
        names = [p.name() for p in procs]
        sockets = _bound_sockets(procs)
        off_loopback = [s for s in sockets if not is_loopback(s[3])]
        assert not off_loopback, f"sockets beyond loopback: {off_loopback}"
        listeners = {name for _, name, kind, _, _ in sockets if kind == "tcp"}
        assert {"gcs_server", "raylet"} <= listeners, sockets  # the check saw Ray's own servers...
        rank_pids = {p.pid for p in procs if "WorkerDict" in p.name()}  # the colocated rank actors
        assert len(rank_pids) == 2 and rank_pids <= {pid for pid, *_ in sockets}, (names, sockets)  # ...and the ranks
        watchdog = next(p for p in procs if any(part.endswith("watchdog.py") for part in p.cmdline()))
        temp_dir = watchdog.cmdline()[-2]
        assert re.fullmatch(r"/tmp/ray-\w+", temp_dir) and os.path.isdir(temp_dir)

        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        t0 = time.monotonic()
        while (_alive(procs) or os.path.exists(temp_dir)) and time.monotonic() - t0 < GONE_WITHIN_S:
            time.sleep(0.1)
        left = [(p.pid, p.name()) for p in _alive(procs)]
        assert not left, f"still running {GONE_WITHIN_S} s after kill -9 of the driver: {left}"
        assert not os.path.exists(temp_dir), f"{temp_dir} is still there"
    finally:
        driver.stderr.close()
        for proc in _alive(procs):  # only what this test started, if the checks above failed
            proc.kill()
