"""Load, check and explain minirl's trainer config.

verl composes `verl/trainer/config/ppo_trainer.yaml` with Hydra in `main` (`verl/trainer/main_ppo.py:167`),
applies command-line overrides (`key=value`), and converts groups to dataclasses that validate
themselves (`ActorConfig.validate`, `verl/workers/config/actor.py:224`). minirl does the same in three
visible steps:

1. `compose(overrides)`: Hydra's compose API on `minirl/config/ppo_trainer.yaml` + your overrides.
2. merge into the dataclass schema (`minirl.config.schema.MinirlConfig`): unknown keys and wrong types fail here.
3. `validate(cfg)`: the batch-size arithmetic and the names of algorithms (`minirl.config.validate`).

`load(overrides)` runs all three and returns an OmegaConf `DictConfig` (attribute access, as in verl).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from omegaconf import DictConfig, OmegaConf

from minirl.config.validate import ConfigError, derived_numbers, explain, validate

CONFIG_DIR = Path(__file__).parent
CONFIG_NAME = "ppo_trainer"

__all__ = ["load", "compose", "validate", "explain", "derived_numbers", "ConfigError", "CONFIG_DIR"]


def compose(overrides: Sequence[str] = (), config_name: str = CONFIG_NAME) -> DictConfig:
    """Compose the YAML with Hydra overrides (`a.b=1`, `+new.key=2`, `~a.b`), exactly as on verl's command line."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException, OverrideParseException

    overrides = list(overrides)
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            return hydra_compose(config_name=config_name, overrides=overrides)
    except (ConfigCompositionException, OverrideParseException) as e:
        cause = e.__cause__ or e
        raise ConfigError(
            f"could not apply the overrides {overrides}: {cause}\n"
            "Fix: overrides are key=value with keys from minirl/config/ppo_trainer.yaml "
            "(see `minirl config show`); prefix a new key with '+'."
        ) from None


def _merge_into_schema(cfg: DictConfig) -> DictConfig:
    from omegaconf.errors import ConfigKeyError, ValidationError

    from minirl.config.schema import MinirlConfig

    schema = OmegaConf.structured(MinirlConfig)
    try:
        merged = OmegaConf.merge(schema, cfg)
    except ConfigKeyError as e:
        raise ConfigError(
            f"unknown config key {e.full_key!r}: minirl's schema has no such key.\n"
            "Fix: check the spelling against minirl/config/ppo_trainer.yaml (`minirl config show`); "
            "minirl implements a subset of verl's keys."
        ) from None
    except ValidationError as e:
        raise ConfigError(
            f"config key {e.full_key!r} has a value of the wrong type: {e.msg}\n"
            "Fix: give a value of the type documented in minirl/config/schema.py."
        ) from None
    # The schema is only a checker: hand back a plain, non-struct DictConfig like verl's.
    out = OmegaConf.create(OmegaConf.to_container(merged, resolve=False))
    return out


def load(overrides: Sequence[str] = (), check: bool = True) -> DictConfig:
    """Compose, type-check and validate the config; return it resolved (no `${...}` left).

    Example: `load(["algorithm.adv_estimator=gae", "trainer.total_training_steps=3"])`.
    Raises `ConfigError` with a message naming the keys, their values and a fix.
    """
    cfg = compose(overrides)
    cfg = _merge_into_schema(cfg)
    OmegaConf.resolve(cfg)
    cfg.trainer.default_local_dir = os.path.expanduser(str(cfg.trainer.default_local_dir))
    if check:
        validate(cfg)
    return cfg
