"""Is a Ray cluster there? One TCP connection, a few seconds, before `ray.init` is asked to join it.

`ray.init(address=...)` retries an unreachable address for minutes and does not return to Python
(so neither Ctrl-C's nor SIGTERM's handler runs) meanwhile; verl's `run_ppo` (`verl/trainer/main_ppo.py:34`)
passes `ray_kwargs.ray_init` to `ray.init` as it is. minirl probes the address first, here, in a
module that does not import Ray (importing Ray alone takes seconds), so a wrong address is one line
within seconds: `minirl train` calls it before it imports or builds anything (and reports a
`ClusterAddressError` as the `ConfigError` of `ray_kwargs.ray_init.address`; single_controller knows no
config, DESIGN.md section 6).
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["PROBE_TIMEOUT_S", "ClusterAddressError", "check_cluster_address"]

PROBE_TIMEOUT_S = 3.0
"""How long `check_cluster_address` waits for a cluster's port to accept a connection."""


class ClusterAddressError(ConnectionError):
    """No Ray cluster at the address: one line naming the key, the address, what was tried and the fix."""


def check_cluster_address(address: str, key: str = "ray_kwargs.ray_init.address") -> None:
    """Raise a one-line `ClusterAddressError` unless something listens at the Ray cluster `address` (within seconds).

    `auto` is what Ray reads from `RAY_ADDRESS` or the last cluster this machine started
    (`/tmp/ray/ray_current_cluster`); `ray://host:port` (Ray client) and `host:port` (the GCS) are
    probed with one TCP connection. `ray.init` itself retries an unreachable address for minutes and
    does not return to Python (so not to a SIGTERM handler) meanwhile.
    """
    import socket

    fix = (f"Fix: start the cluster (`ray start --head`) and give its address, or {key}=null for a private "
           "Ray on this machine.")
    target = str(address)
    if target == "auto":
        target = os.environ.get("RAY_ADDRESS", "")
        if not target:
            try:
                with open(os.path.join(tempfile.gettempdir(), "ray", "ray_current_cluster")) as f:
                    target = f.read().strip()
            except OSError:
                raise ClusterAddressError(f"{key}=auto: no Ray cluster runs on this machine (no RAY_ADDRESS, no "
                                  f"/tmp/ray/ray_current_cluster). {fix}") from None
        if target == "auto":
            return
    host_port = target.split("://", 1)[-1].rstrip("/")
    host, _, port = host_port.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterAddressError(f"{key}={address!r} is not host:port (or ray://host:port, auto). {fix}")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as e:
        raise ClusterAddressError(f"{key}={address!r}: nothing answers at {host}:{port} ({type(e).__name__}: "
                          f"{e.strerror or e} within {PROBE_TIMEOUT_S:g} s). {fix}") from None
