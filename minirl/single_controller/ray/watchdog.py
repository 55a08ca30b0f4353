"""The local Ray's reaper: when the driver process ends, however it ends, end what its Ray started and remove Ray's temp dir.

Ray kills most of a local cluster when the driver that started it dies (its processes ask the
kernel for a signal on their parent's death), but not all of it: after a `kill -9` of the driver,
the dashboard and runtime-env agents lived on for more than 30 s here, and Ray's session
directory stays on disk. Ray's own reaper (`ray/_private/ray_process_reaper.py`) only runs where
that kernel mechanism is missing. verl has no counterpart (it leaves the cluster to Ray).

`init_ray` starts this script (by path, so it imports neither minirl nor Ray) in its own session,
with a pipe on its stdin whose other end only the driver holds. Every `interval` seconds it notes
the driver's descendants that belong to this Ray (the processes whose command line names the temp
dir, and everything below them: raylet, GCS, agents, workers), remembered by pid and start time.
When the pipe reaches end-of-file (the driver exited, was killed, or `shutdown_ray` closed it) it
terminates the noted processes that still run (SIGTERM, then SIGKILL after 2 s), removes the temp
dir when asked to, and exits. It only ever signals processes it saw under the driver.

    python watchdog.py <driver_pid> <temp_dir> <remove_temp_dir: 0|1> [interval_s]
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys

import psutil


def ray_processes(driver: psutil.Process, temp_dir: str) -> dict[int, float]:
    """`{pid: create_time}` of the driver's descendants that belong to the Ray rooted at `temp_dir`."""
    found: dict[int, float] = {}
    try:
        descendants = driver.children(recursive=True)
    except psutil.Error:
        return found
    for proc in descendants:
        try:
            if proc.pid in found or proc.pid == os.getpid() or not any(temp_dir in part for part in proc.cmdline()):
                continue
            for p in [proc, *proc.children(recursive=True)]:
                found[p.pid] = p.create_time()
        except psutil.Error:
            continue  # gone between the listing and the look
    return found


def reap(known: dict[int, float], grace_s: float = 2.0) -> int:
    """SIGTERM the noted processes still running (same pid AND start time), SIGKILL those left after `grace_s`."""
    victims = []
    for pid, started in known.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == started:
                victims.append(proc)
        except psutil.Error:
            pass
    for proc in victims:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(victims, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
    return len(victims)


def main(argv: list[str]) -> int:
    driver_pid, temp_dir, remove_dir = int(argv[1]), argv[2], argv[3] == "1"
    interval = float(argv[4]) if len(argv) > 4 else 2.0
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the driver must not skip the clean-up
    try:
        driver = psutil.Process(driver_pid)
    except psutil.Error:
        driver = None
    known: dict[int, float] = {}
    stdin = sys.stdin.fileno()
    while driver is not None and driver.is_running():
        readable, _, _ = select.select([stdin], [], [], interval)
        if readable and not os.read(stdin, 4096):
            break  # end-of-file: the driver is gone or let go of the pipe
        known.update(ray_processes(driver, temp_dir))
    reap(known)
    if remove_dir:
        shutil.rmtree(temp_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
