"""Ray implementation of the single controller (mirrors `verl/single_controller/ray/`).

Importing this package imports Ray (about a second); starting Ray is explicit: call `init_ray()`.
"""

from .base import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    WorkerGroupError,
    create_colocated_worker_cls,
)
from .runtime import init_ray, init_ray_local_cluster, shutdown_ray

__all__ = [
    "RayClassWithInitArgs",
    "RayResourcePool",
    "RayWorkerGroup",
    "WorkerGroupError",
    "create_colocated_worker_cls",
    "init_ray",
    "init_ray_local_cluster",
    "shutdown_ray",
]
