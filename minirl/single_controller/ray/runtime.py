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
  can take longer than Ray's default to start on two loaded cores.
"""

from __future__ import annotations

import os
import shutil
import tempfile

_created_temp_dir: str | None = None


def _prepare_environment() -> None:
    """Environment that Ray's own processes inherit; set before they start."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
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
) -> None:
    """Start a private local Ray (or connect to `address`) unless Ray is already up in this process.

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
        return
    _prepare_environment()
    kwargs = {"include_dashboard": False, **ray_init_kwargs}
    if address in (None, "local"):
        if temp_dir is None:
            temp_dir = _created_temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
        kwargs.update(address="local", num_cpus=num_cpus, _temp_dir=temp_dir)
    else:
        kwargs.update(address=address)
    ray.init(**kwargs)


def shutdown_ray(remove_temp_dir: bool = True) -> None:
    """Stop this process's Ray; delete the temp directory `init_ray` created (logs included)."""
    global _created_temp_dir
    import ray

    ray.shutdown()
    if remove_temp_dir and _created_temp_dir is not None:
        shutil.rmtree(_created_temp_dir, ignore_errors=True)
    _created_temp_dir = None
