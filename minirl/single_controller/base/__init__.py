"""The Ray-free half of the single controller: decorator, Worker, WorkerGroup, in-process group.

Mirrors `verl/single_controller/base/`. Nothing here imports Ray.
"""

from .colocated import create_worker_dict_cls
from .decorator import Dispatch, Execute, make_nd_compute_dataproto_dispatch_fn, register
from .inprocess import InProcessWorkerGroup
from .worker import Worker
from .worker_group import ClassWithInitArgs, ResourcePool, WorkerGroup, WorkerGroupFuture

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
