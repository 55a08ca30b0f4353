"""Colocation: several worker classes (roles) hosted by one worker process.

In verl's default layout the actor, the rollout and the reference policy share the same GPUs, and
so the same processes: one process holds one instance of each role class. `create_worker_dict_cls`
builds that host class, a `Worker` subclass whose instances own one object per role in
`worker_dict`, and which exposes every `@register`-ed method of role `key` as `{key}_{method}`
with the same dispatch settings. A WorkerGroup of the host class can call `actor_update(...)` and
`ref_compute_log_prob(...)`; `WorkerGroup.spawn({"actor", "ref"})` gives one group per role over
the same workers, with the prefixes removed again.

Mirrors `create_colocated_worker_cls` and `_bind_workers_method_to_parent`
(`verl/single_controller/ray/base.py:984`, `verl/single_controller/ray/base.py:916`); here the
class is built without Ray, so the in-process group can host it too, and
`minirl.single_controller.ray.create_colocated_worker_cls` wraps it in `ray.remote`. Left out:
async (coroutine) role methods and verl's newer `FusedWorker` variant
(`create_colocated_worker_cls_fused`, `verl/single_controller/ray/base.py:1103`).
"""

from __future__ import annotations

from .decorator import MAGIC_ATTR
from .worker import Worker
from .worker_group import ClassWithInitArgs


def _unwrap_ray_remote(cls):
    """The user class behind a `ray.remote(cls)` actor class (`verl/single_controller/ray/base.py:964`)."""
    return getattr(cls, "__ray_actor_class__", cls)


def _forwarder(key: str, name: str):
    def forward(self, *args, **kwargs):
        return getattr(self.worker_dict[key], name)(*args, **kwargs)

    return forward


def _bind_workers_method_to_parent(host_cls, key: str, user_defined_cls) -> None:
    """Give `host_cls` a method `{key}_{name}` forwarding to role `key` for every registered method."""
    for name in dir(user_defined_cls):
        attrs = getattr(getattr(user_defined_cls, name, None), MAGIC_ATTR, None)
        if not isinstance(attrs, dict):
            continue
        forward = _forwarder(key, name)
        prefixed = f"{key}_{name}"
        if hasattr(host_cls, prefixed):
            raise ValueError(f"colocated class: method '{prefixed}' of role '{key}' clashes with an existing attribute.")
        forward.__name__ = prefixed
        forward.__doc__ = getattr(user_defined_cls, name).__doc__
        setattr(forward, MAGIC_ATTR, dict(attrs))
        setattr(host_cls, prefixed, forward)


def create_worker_dict_cls(class_dict: dict[str, ClassWithInitArgs]) -> type:
    """Build the host class for the roles in `class_dict` (role name -> class with init args).

    Each role class must subclass `Worker`; it is constructed inside the host process, so it reads
    the same RANK/WORLD_SIZE/MASTER_* environment as the host.
    """
    roles = {key: _unwrap_ray_remote(cia.cls) for key, cia in class_dict.items()}
    init_args = {key: (cia.args, cia.kwargs) for key, cia in class_dict.items()}
    for key, cls in roles.items():
        if not (isinstance(cls, type) and issubclass(cls, Worker)):
            raise TypeError(f"colocated role '{key}' must be a Worker subclass, got {cls!r}.")

    class WorkerDict(Worker):
        role_classes = roles

        def __init__(self):
            super().__init__()
            self.worker_dict = {key: cls(*init_args[key][0], **init_args[key][1]) for key, cls in roles.items()}

    for key, cls in roles.items():
        _bind_workers_method_to_parent(WorkerDict, key, cls)
    return WorkerDict
