"""`ConfigError`: the one exception a bad config raises. This module imports nothing of minirl.

Every stage that finds a config it cannot run raises it (the config checks at load time, a reward
manager that cannot be built, the trainer's model-length check), so that callers catch one type and
print one line. verl raises `ValueError` / `AssertionError` from its dataclasses' `__post_init__`
(`ActorConfig.__post_init__`, `verl/workers/config/actor.py:197`); `ConfigError` is a `ValueError` too.
"""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A config that cannot run. The message names the keys, their values and how to fix it."""
