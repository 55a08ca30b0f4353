"""The one config getter: read a key from whatever holds the settings (verl: `verl/utils/config.py`).

minirl's code receives settings as OmegaConf `DictConfig`s (from the Hydra config), plain dicts
(tests, notebooks), dataclasses or `SimpleNamespace`s (loss configs), or nothing at all. verl
converts its config groups into dataclasses first (`omega_conf_to_dataclass`,
`verl/utils/config.py:23`) and then reads attributes; minirl reads every optional setting through
`cfg_get`, so one rule holds everywhere: a missing key, a missing config or a `None` value gives
the default.

This module imports nothing, so any module (even `core_algos`) may use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["cfg_get"]


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
