"""The one config getter: read a key from whatever holds the settings (verl: `verl/utils/config.py`).

minirl's code receives settings as OmegaConf `DictConfig`s (from the Hydra config), plain dicts
(tests, notebooks), dataclasses or `SimpleNamespace`s (loss configs), or nothing at all. verl
converts its config groups into dataclasses first (`omega_conf_to_dataclass`,
`verl/utils/config.py:23`) and then reads attributes. minirl does the same where a component owns a
typed section (the engines: `omega_conf_to_dataclass(optim, OptimConfig)`), so the defaults are the
schema's and a key the schema lacks is an error; elsewhere it reads a setting through `cfg_get`, where
a missing key, a missing config or a `None` value gives the default.

This module imports nothing of minirl, so any module (even `core_algos`) may use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["cfg_get", "omega_conf_to_dataclass"]

T = TypeVar("T")


def cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    """`cfg[key]` or `cfg.key`, whichever `cfg` supports; `default` when it is missing or None.

    Works on a `DictConfig` or dict (mapping access), a dataclass, a `SimpleNamespace` or any object
    (attribute access), and on `None` (then `default`).
    """
    if cfg is None:
        return default
    if isinstance(cfg, Mapping):  # dict and OmegaConf DictConfig
        value = cfg.get(key, default)
    else:
        value = getattr(cfg, key, default)
    return default if value is None else value


def omega_conf_to_dataclass(config: Any, dataclass_type: type[T]) -> T:
    """`config` as an instance of `dataclass_type`: its keys set, every other field at the dataclass's default.

    `config` may be a `DictConfig` or dict, a dataclass or any object with attributes, or None (all
    defaults). A key `None` keeps the default (as `cfg_get` does); a key the dataclass does not have is a
    `ValueError` naming it and the keys there are. verl: `omega_conf_to_dataclass` (`verl/utils/config.py:23`),
    which also builds nested dataclasses (minirl's engine sections are flat).
    """
    if isinstance(config, dataclass_type):
        return config
    if config is None:
        return dataclass_type()
    if isinstance(config, Mapping):
        items = {key: config[key] for key in config}  # key by key: `minirl.config.introspect` sees each read
        if type(config).__module__.startswith("omegaconf"):
            from omegaconf import OmegaConf

            items = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for k, v in items.items()}
    elif dataclasses.is_dataclass(config):
        items = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    else:
        items = dict(vars(config))
    names = [f.name for f in dataclasses.fields(dataclass_type)]
    unknown = sorted(set(items) - set(names))
    if unknown:
        raise ValueError(f"{dataclass_type.__name__} has no key {', '.join(map(repr, unknown))}; its keys are "
                         f"{', '.join(names)} (see {dataclass_type.__module__}.{dataclass_type.__name__}).")
    return dataclass_type(**{k: v for k, v in items.items() if v is not None})
