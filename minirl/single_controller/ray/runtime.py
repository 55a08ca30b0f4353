"""`init_ray` / `shutdown_ray`: start (or join) Ray once per process, privately and quietly.

`init_ray_local_cluster` starts a multi-node cluster on this one machine (every node on loopback),
to try `trainer.nnodes > 1` without a second machine.

verl starts Ray in `run_ppo` (`verl/trainer/main_ppo.py:34`) with `ray.init(**config.ray_kwargs.ray_init)`
and a runtime env of its own. minirl wraps that call so every entry point (trainer, notebooks,
tests) gets the same hygiene:

- **one start per process**: a second call returns without doing anything (starting Ray takes
  30-40 s on a small machine; tests share one session-wide start);
- **a private local cluster** unless an address is given: `address="local"` never joins another
  Ray running on the machine, and `_temp_dir` is a fresh short directory under /tmp (Ray's unix
  socket paths must stay short);
- **nothing listens beyond this machine**: a local cluster's node address is 127.0.0.1, so the GCS,
  the raylet, the agents, the metrics servers and every worker's gRPC server bind loopback only
  (Ray picks "localhost only" for each of them when the node address is a loopback address).
  Ray 2.60's `ray.init` replaces a given `_node_ip_address="127.0.0.1"` by the machine's
  reachable address (`resolve_ip_for_localhost`, `ray/_private/services.py`) unless its cluster
  mode is off, the switch it uses on macOS and Windows (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`,
  read into `ray._private.ray_constants.ENABLE_RAY_CLUSTER`): `init_ray` turns it off for a local
  cluster, in the environment (for Ray's child processes) and in the already-imported module.
  The workers' `torch.distributed` rendezvous then sees MASTER_ADDR=127.0.0.1 and stays on
  loopback too (`minirl.utils.distributed.init_process_group`);
- **nothing reaches beyond this machine**: usage stats off (`RAY_USAGE_STATS_ENABLED=0`), no
  dashboard, and an empty `~/ray_bootstrap_config.yaml` if none exists, which stops Ray probing
  cloud-metadata addresses (169.254.169.254) to guess whether it runs on a cloud VM;
- **nothing outlives the driver**: a watchdog process (`minirl/single_controller/ray/watchdog.py`)
  ends the local cluster's processes and removes its temp dir when the driver ends, also after a
  `kill -9` (Ray alone leaves its agents running and its session directory on disk);
- **patience on slow machines**: `RAY_agent_register_timeout_ms=120000`, because the node agent
  can take longer than Ray's default to start on two loaded cores; likewise
  `RAY_raylet_start_wait_time_s=120` for the node's registration, and up to three tries when the
  local node still misses Ray's start-up deadline.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

LOOPBACK = "127.0.0.1"
_created_temp_dir: str | None = None
_watchdog: subprocess.Popen | None = None
_local_cluster = None  # the ray.cluster_utils.Cluster of init_ray_local_cluster, if any
# Ray gives its local node a fixed 30 s to register (ray/_private/node.py); on two busy cores that
# is sometimes too little, and a second try usually succeeds.
_LOCAL_START_ATTEMPTS = 3


def _prepare_environment() -> None:
    """Environment that Ray's own processes inherit; set before they start."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
    # how long the driver's GCS query waits for the new node to register (Ray's own hint when it times out)
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "120")
    bootstrap = os.path.expanduser("~/ray_bootstrap_config.yaml")
    if not os.path.exists(bootstrap):
        # Empty file: Ray then believes it is configured and skips its cloud-metadata probe.
        with open(bootstrap, "w"):
            pass


def _keep_on_loopback() -> None:
    """Make a local cluster's node address 127.0.0.1 (see the module docstring), here and in Ray's children."""
    from ray._private import ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def _start_watchdog(run_dir: str, remove_dir: bool) -> subprocess.Popen:
    """The reaper of this process's local Ray (`watchdog.py`), in its own session, fed by a pipe only we hold."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "watchdog.py")
    return subprocess.Popen([sys.executable, script, str(os.getpid()), run_dir, "1" if remove_dir else "0"],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)


def _stop_watchdog(wait_s: float = 10.0) -> None:
    """Let the watchdog go: it ends what Ray left running, removes the temp dir (if ours) and exits."""
    global _watchdog
    proc, _watchdog = _watchdog, None
    if proc is None:
        return
    proc.stdin.close()
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def init_ray(
    address: str | None = None,
    num_cpus: int | None = None,
    temp_dir: str | None = None,
    **ray_init_kwargs,
) -> bool:
    """Start a private local Ray (or connect to `address`) unless Ray is already up in this process.

    Returns True if this call started (or connected) Ray, False if it was already up; a caller
    that got True owns it and may `shutdown_ray()` when done.

    Args:
        address: an existing cluster ("auto", "ray://host:10001", "host:6379"); None or "local"
            starts a new single-machine cluster owned by this process.
        num_cpus: logical CPUs Ray may hand out (placement-group bundles count against it), for a
            local cluster only. Each `RayResourcePool` worker reserves `max_colocate_count` of them.
        temp_dir: Ray's session/log directory for a local cluster; a fresh /tmp/ray-XXXX by default.
        **ray_init_kwargs: passed to `ray.init` (e.g. `runtime_env`, `namespace`).
    """
    global _created_temp_dir, _watchdog
    import ray

    if ray.is_initialized():
        return False
    _prepare_environment()
    kwargs = {"include_dashboard": False, **ray_init_kwargs}
    if address not in (None, "local"):
        from minirl.single_controller.cluster_address import check_cluster_address

        check_cluster_address(address)  # Ray would retry for minutes, deaf to SIGTERM, before it gave up
        ray.init(address=address, **kwargs)
        return True
    _keep_on_loopback()
    kwargs.setdefault("_node_ip_address", LOOPBACK)
    for attempt in range(1, _LOCAL_START_ATTEMPTS + 1):
        own_dir = temp_dir is None
        run_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp") if own_dir else temp_dir
        _watchdog = _start_watchdog(run_dir, remove_dir=own_dir)
        try:
            ray.init(address="local", num_cpus=num_cpus, _temp_dir=run_dir, **kwargs)
            break
        except Exception as error:  # Ray raises a bare Exception when its node misses a 30 s deadline
            ray.shutdown()
            _kill_half_started_node(run_dir)  # ray.shutdown() does not know the failed node's processes
            _stop_watchdog()
            if own_dir:
                shutil.rmtree(run_dir, ignore_errors=True)
            if "timed out during startup" not in str(error) or attempt == _LOCAL_START_ATTEMPTS:
                raise
    if own_dir:
        _created_temp_dir = run_dir
    return True


def init_ray_local_cluster(nodes: list[dict]):
    """Start several Ray nodes on this machine, a head and one raylet per further entry, and join them.

    A multi-node cluster in one box, to see what `trainer.nnodes > 1` does (placement groups on
    different nodes, a rendezvous across nodes) without a second machine. Each entry is one node's
    resources, e.g. `[{"num_cpus": 1, "resources": {"node_a": 1}}, {"num_cpus": 1, "resources":
    {"node_b": 1}}]`; the first is the head. The hygiene is `init_ray`'s: every node's address is
    127.0.0.1 (its GCS, raylet, agents and workers listen on loopback only), the cluster's files go to
    a fresh `/tmp/ray-*` (`RAY_TMPDIR`, so not even Ray's "current cluster" file lands in the shared
    `/tmp/ray`), no dashboard, and the watchdog ends every node's processes when the driver ends.
    `shutdown_ray()` stops it. On real machines the same cluster is `ray start --head` on one and
    `ray start --address=HEAD:6379` on the others (`docs/guide/multinode.md`); `ray start` itself
    cannot keep a second node on loopback (it replaces 127.0.0.1 by the machine's address), so this
    uses Ray's in-process node launcher, `ray.cluster_utils.Cluster`.

    Returns the `Cluster`; raises if Ray is already up in this process.
    """
    global _created_temp_dir, _watchdog, _local_cluster
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        raise RuntimeError("Ray is already up in this process: call init_ray_local_cluster before anything starts "
                           "Ray (or shutdown_ray() first).")
    if not nodes:
        raise ValueError("init_ray_local_cluster needs at least one node (the head): e.g. [{'num_cpus': 1}].")
    _prepare_environment()
    _keep_on_loopback()
    run_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    os.environ["RAY_TMPDIR"] = run_dir  # Ray's default temp dir (and address file) become <run_dir>/ray
    _watchdog = _start_watchdog(run_dir, remove_dir=True)
    _created_temp_dir = run_dir
    common = {"node_ip_address": LOOPBACK, "object_store_memory": 100 * 1024 * 1024}
    cluster = Cluster(initialize_head=True, head_node_args={**common, "include_dashboard": False, **nodes[0]},
                      shutdown_at_exit=True)
    for spec in nodes[1:]:
        cluster.add_node(**common, **spec)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    _local_cluster = cluster
    return cluster


def _kill_half_started_node(run_dir: str) -> None:
    """Kill this process's children that belong to a failed local start (their command lines name `run_dir`).

    Only children of this process, and only those started for this attempt's session directory.
    """
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            if any(run_dir in part for part in child.cmdline()):
                child.kill()
        except psutil.Error:
            pass  # already gone


def shutdown_ray(remove_temp_dir: bool = True) -> None:
    """Stop this process's Ray; delete the temp directory `init_ray` created (logs included)."""
    global _created_temp_dir, _local_cluster
    import ray

    ray.shutdown()
    if _local_cluster is not None:  # the nodes of init_ray_local_cluster
        _local_cluster.shutdown()
        _local_cluster = None
        os.environ.pop("RAY_TMPDIR", None)
    _stop_watchdog()  # ends what ray.shutdown() left running (it removes our temp dir too)
    if remove_temp_dir and _created_temp_dir is not None:
        shutil.rmtree(_created_temp_dir, ignore_errors=True)
    _created_temp_dir = None
