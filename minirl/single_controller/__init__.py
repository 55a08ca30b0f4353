"""The single controller: one driver process calls a group of workers as if it were one object.

Mirrors `verl/single_controller/`. The mechanism only: it knows no roles (actor, critic) and no
algorithm. `base/` holds `@register`, `Dispatch`, `Execute`, `Worker`, `WorkerGroup`,
`ResourcePool` and an in-process group; `ray/` adds `RayResourcePool`, `RayWorkerGroup`,
`create_colocated_worker_cls` and `init_ray` (imported from `minirl.single_controller.ray`, so
that using the in-process group never imports Ray).
"""

from .base import (
    ClassWithInitArgs,
    Dispatch,
    Execute,
    InProcessWorkerGroup,
    ResourcePool,
    Worker,
    WorkerGroup,
    WorkerGroupFuture,
    create_worker_dict_cls,
    make_nd_compute_dataproto_dispatch_fn,
    register,
)

__all__ = [
    "ClassWithInitArgs",
    "Dispatch",
    "Execute",
    "InProcessWorkerGroup",
    "ResourcePool",
    "Worker",
    "WorkerGroup",
    "WorkerGroupFuture",
    "create_worker_dict_cls",
    "make_nd_compute_dataproto_dispatch_fn",
    "register",
]
