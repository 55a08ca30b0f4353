"""`init_ray` / `shutdown_ray`: start (or join) Ray once per process, privately and quietly.

verl starts Ray in `run_ppo` (`verl/trainer/main_ppo.py:34`) with `ray.init(**config.ray_kwargs.ray_init)`
and a runtime env of its own. minirl wraps that call so every entry point (trainer, notebooks,
tests) gets the same hygiene:

- **one start per process**: a second call returns without doing anything (starting Ray takes
  30-40 s on a small machine; tests share one session-wide start);
- **a private local cluster** unless an address is given: `address="local"` never joins another
  Ray running on the machine, and `_temp_dir` is a fresh short directory under /tmp (Ray's unix
  socket paths must stay short);
- **nothing leaves the machine**: usage stats off (`RAY_USAGE_STATS_ENABLED=0`), no dashboard,
  and an empty `~/ray_bootstrap_config.yaml` if none exists, which stops Ray probing
  cloud-metadata addresses (169.254.169.254) to guess whether it runs on a cloud VM;
- **patience on slow machines**: `RAY_agent_register_timeout_ms=120000`, because the node agent
  can take longer than Ray's default to start on two loaded cores; likewise
  `RAY_raylet_start_wait_time_s=120` for the node's registration, and up to three tries when the
  local node still misses Ray's start-up deadline.
"""

from __future__ import annotations

import os
import shutil
import tempfile

_created_temp_dir: str | None = None
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
    global _created_temp_dir
    import ray

    if ray.is_initialized():
        return False
    _prepare_environment()
    kwargs = {"include_dashboard": False, **ray_init_kwargs}
    if address not in (None, "local"):
        ray.init(address=address, **kwargs)
        return True
    for attempt in range(1, _LOCAL_START_ATTEMPTS + 1):
        own_dir = temp_dir is None
        run_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp") if own_dir else temp_dir
        try:
            ray.init(address="local", num_cpus=num_cpus, _temp_dir=run_dir, **kwargs)
            break
        except Exception as error:  # Ray raises a bare Exception when its node misses a 30 s deadline
            ray.shutdown()
            _kill_half_started_node(run_dir)  # ray.shutdown() does not know the failed node's processes
            if own_dir:
                shutil.rmtree(run_dir, ignore_errors=True)
            if "timed out during startup" not in str(error) or attempt == _LOCAL_START_ATTEMPTS:
                raise
    if own_dir:
        _created_temp_dir = run_dir
    return True


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
    global _created_temp_dir
    import ray

    ray.shutdown()
    if remove_temp_dir and _created_temp_dir is not None:
        shutil.rmtree(_created_temp_dir, ignore_errors=True)
    _created_temp_dir = None
