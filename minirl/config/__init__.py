"""Load, check and explain minirl's trainer config.

verl composes `verl/trainer/config/ppo_trainer.yaml` with Hydra in `main` (`verl/trainer/main_ppo.py:167`),
applies command-line overrides (`key=value`), and converts groups to dataclasses that validate
themselves (`ActorConfig.validate`, `verl/workers/config/actor.py:224`). minirl does the same in three
visible steps:

1. `compose(overrides)`: Hydra's compose API on `minirl/config/ppo_trainer.yaml` + your overrides. A key
   the YAML does not have is an error here, with the closest known key as a suggestion.
2. merge into the dataclass schema (`minirl.config.schema.MinirlConfig`): new `+keys` that the schema
   does not have and values of the wrong type fail here.
3. `validate(cfg)`: every other check (`minirl.config.validate`): keys minirl does not implement
   (`minirl.config.unimplemented`), values verl's dataclasses would reject (`minirl.config.values`),
   the names of algorithms and the batch-size arithmetic. It reports every problem at once.

What a config implies (which models run, ranks, replicas, one step's batch arithmetic) is computed
from it by `minirl.config.derived`, so that every stage reads one answer; `ConfigError` lives in
`minirl.config.errors`, which imports nothing of minirl. This package imports no stage (trainer,
workers, agent loop): it is the leaf every stage reads (DESIGN.md section 6).

`load(overrides)` runs all three and returns an OmegaConf `DictConfig` (attribute access, as in verl).
`load_sft(overrides)` does the same for the SFT warm start's `minirl/config/sft_trainer.yaml`
(schema and checks: `minirl.config.sft`). Every `ConfigError` message names the file, the key, the
value and a fix; one problem is one line.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from minirl.config.derived import derived_numbers
from minirl.config.errors import ConfigError
from minirl.config.validate import explain, validate

CONFIG_DIR = Path(__file__).parent
CONFIG_NAME = "ppo_trainer"

__all__ = [
    "CONFIG_DIR",
    "ConfigError",
    "compose",
    "default_config",
    "derived_numbers",
    "explain",
    "load",
    "load_sft",
    "validate",
]


def config_file(config_name: str = CONFIG_NAME) -> str:
    """The YAML a config name stands for, as messages print it: `minirl/config/ppo_trainer.yaml`."""
    return f"minirl/config/{config_name}.yaml"


def _schema(config_name: str):
    if config_name == "sft_trainer":
        from minirl.config.sft import SFTConfig

        return SFTConfig
    from minirl.config.schema import MinirlConfig

    return MinirlConfig


# Config groups a command line may choose (`model_engine=torchtitan`), their options, and what verl has beyond them.
GROUPS = {"model_engine": (("dp", "torchtitan", "megatron"), "veomni")}


def group_choices(cfg) -> tuple[tuple[str, str], ...]:
    """`(("model_engine", "torchtitan"),)`: the group choices a composed config was made with."""
    return tuple((g, str(cfg.get(g))) for g in GROUPS if cfg.get(g) is not None)


def _group_overrides(parsed) -> tuple[tuple[str, str], ...]:
    """The group choices among parsed overrides; an option minirl lacks is a one-line `ConfigError`."""
    out = []
    for o in parsed:
        if o.key_or_group in GROUPS and not (o.is_add() or o.is_delete()):
            options, verl_also = GROUPS[o.key_or_group]
            value = str(o.value())
            if value not in options:
                raise ConfigError(f"{o.key_or_group}={value}: minirl has {', '.join(options)} "
                                  f"(verl also: {verl_also}). Fix: {o.key_or_group}={options[-1]}, or drop it.")
            out.append((o.key_or_group, value))
    return tuple(out)


@cache
def _raw_yaml(config_name: str, choices: tuple = ()) -> DictConfig:
    """The YAML with its defaults list composed for the group `choices`, interpolations unresolved."""
    raw = OmegaConf.load(CONFIG_DIR / f"{config_name}.yaml")
    if "defaults" not in raw:
        return raw
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return hydra_compose(config_name=config_name, overrides=[f"{g}={v}" for g, v in choices])


@cache
def known_keys(config_name: str = CONFIG_NAME, choices: tuple = ()) -> tuple[str, ...]:
    """Every dotted key (groups and leaves) of the config's YAML (composed for the group `choices`) and schema."""
    out: list[str] = []

    def walk(node, prefix):
        for k, v in node.items():
            out.append(prefix + k)
            if isinstance(v, dict) and v:
                walk(v, prefix + k + ".")

    walk(OmegaConf.to_container(default_config(config_name, choices), resolve=False), "")
    return tuple(out)


def _open_dict(key: str, config_name: str) -> str | None:
    """The dict-valued key (`override_config`, `engine_kwargs.vllm`) above `key`, if any: new entries go there."""
    node = default_config(config_name)
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        if not isinstance(node, DictConfig) or part not in node:
            return None
        node = node._get_node(part)
        if isinstance(node, DictConfig) and OmegaConf.get_type(node) is dict:
            return ".".join(parts[: i + 1])
    return None


def unknown_key_message(key: str, config_name: str = CONFIG_NAME, override: str | None = None,
                        choices: tuple = ()) -> str:
    """One line: `key` is not in the config; the closest known key, or where the keys are listed."""
    parent = _open_dict(key, config_name)
    if parent is not None:
        fix = f"{parent} is a dict: add an entry with a leading '+', e.g. +{override or key + '=VALUE'}"
    else:
        known = known_keys(config_name, choices)
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        if not close:  # a misspelt last part under a known group: compare within the group
            group, _, leaf = key.rpartition(".")
            siblings = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == group}
            near = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.5)
            close = [siblings[near[0]]] if near else []
        listing = "`minirl config show` lists" if config_name == CONFIG_NAME else f"{config_file(config_name)} lists"
        fix = f"did you mean {close[0]!r}?" if close else f"{listing} every key (minirl has a subset of verl's)."
    return f"unknown config key {key!r}: {config_file(config_name)} has no such key. Fix: {fix}"


def _check_override_keys(overrides: list[str], config_name: str) -> None:
    """Overrides of keys the YAML lacks fail here with one line each (Hydra's own message spans several)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides=overrides)
    except OverrideParseException as e:
        raise ConfigError(f"could not parse the overrides {overrides} of {config_file(config_name)}: "
                          f"{str(e).splitlines()[0]}. Fix: write overrides as key=value (lists as key=[a,b]; "
                          "quote values with spaces).") from None
    choices = _group_overrides(parsed) if config_name == CONFIG_NAME else ()
    raw = _raw_yaml(config_name, choices)
    missing = object()
    for o, text in zip(parsed, overrides):
        key = o.key_or_group
        if key in GROUPS:
            continue
        for engine, what in (("torchtitan", "the torchtitan engine's mesh"), ("megatron", "the Megatron layout")):
            if f".{engine}." in f".{key}." and ("model_engine", engine) not in choices:
                raise ConfigError(f"config key {key!r} exists only with model_engine={engine} ({what}). "
                                  f"Fix: add model_engine={engine} to the overrides.")
        exists = OmegaConf.select(raw, key, default=missing, throw_on_resolution_failure=False) is not missing
        if o.is_add() or o.is_force_add():  # a new key: only inside a dict-valued key (the schema has no others)
            if not exists and _open_dict(key, config_name) is None and key not in known_keys(config_name):
                raise ConfigError(unknown_key_message(key, config_name, choices=choices))
        elif not exists:
            raise ConfigError(unknown_key_message(key, config_name, text, choices))


def compose(overrides: Sequence[str] = (), config_name: str = CONFIG_NAME) -> DictConfig:
    """Compose the YAML with Hydra overrides (`a.b=1`, `+new.key=2`, `~a.b`), exactly as on verl's command line."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException, OverrideParseException

    overrides = list(overrides)
    _check_override_keys(overrides, config_name)
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            return hydra_compose(config_name=config_name, overrides=overrides)
    except (ConfigCompositionException, OverrideParseException) as e:
        cause = " ".join(str(e.__cause__ or e).split())
        raise ConfigError(
            f"could not apply the overrides {overrides}: {cause} Fix: overrides are key=value with keys from "
            f"{config_file(config_name)} (see `minirl config show`); prefix a new key with '+'."
        ) from None


@cache
def default_config(config_name: str = CONFIG_NAME, choices: tuple = ()) -> DictConfig:
    """The YAML merged into its schema, no overrides, interpolations kept (`${...}`): the defaults.

    `choices` (`(("model_engine", "torchtitan"),)`) composes the defaults list with those groups.
    """
    return OmegaConf.merge(OmegaConf.structured(_schema(config_name)), _raw_yaml(config_name, tuple(choices)))


def _merge_into_schema(cfg: DictConfig, config_name: str = CONFIG_NAME) -> DictConfig:
    from omegaconf.errors import ConfigKeyError, ValidationError

    schema = OmegaConf.structured(_schema(config_name))
    try:
        merged = OmegaConf.merge(schema, cfg)
    except ConfigKeyError as e:
        raise ConfigError(unknown_key_message(str(e.full_key), config_name)) from None
    except ValidationError as e:
        msg = str(e.msg).strip().splitlines()[0].rstrip(".")
        raise ConfigError(
            f"config key {e.full_key!r} of {config_file(config_name)} has a value of the wrong type: {msg}. "
            f"Fix: give a value of the type "
            f"documented in minirl/config/{'sft.py' if config_name == 'sft_trainer' else 'schema.py'}."
        ) from None
    # The schema is only a checker: hand back a plain, non-struct DictConfig like verl's.
    return OmegaConf.create(OmegaConf.to_container(merged, resolve=False))


def _resolved(overrides: Sequence[str], config_name: str) -> DictConfig:
    cfg = _merge_into_schema(compose(overrides, config_name), config_name)
    try:
        OmegaConf.resolve(cfg)
    except Exception as e:  # noqa: BLE001 (an interpolation that names a missing key, from an override)
        where = getattr(e, "full_key", None) or "a value"
        raise ConfigError(f"{where}: could not resolve its interpolation in {config_file(config_name)}: "
                          f"{str(e).splitlines()[0]}. Fix: point ${{...}} at an existing key.") from None
    cfg.trainer.default_local_dir = os.path.expanduser(str(cfg.trainer.default_local_dir))
    return cfg


def load(overrides: Sequence[str] = (), check: bool = True) -> DictConfig:
    """Compose, type-check and validate the config; return it resolved (no `${...}` left).

    Example: `load(["algorithm.adv_estimator=gae", "trainer.total_training_steps=3"])`.
    Raises `ConfigError` with a message naming the keys, their values and a fix.
    """
    cfg = _resolved(overrides, CONFIG_NAME)
    if check:
        validate(cfg)
    return cfg


def load_sft(overrides: Sequence[str] = (), check: bool = True) -> DictConfig:
    """`load` for the SFT warm start: `minirl/config/sft_trainer.yaml`, its schema and checks (`minirl.config.sft`)."""
    from minirl.config.sft import validate_sft

    cfg = _resolved(overrides, "sft_trainer")
    if check:
        validate_sft(cfg)
    return cfg
