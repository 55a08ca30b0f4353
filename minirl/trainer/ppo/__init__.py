"""The V1 PPO trainer (verl: `verl/trainer/ppo/v1/`): `trainer_base.PPOTrainer` and its three modes,
`trainer_sync.PPOTrainerSync`, `trainer_colocate_async.PPOTrainerColocateAsync` and
`trainer_separate_async.PPOTrainerSeparateAsync`, registered by `trainer.v1.trainer_mode`.

The trainer classes are imported on first use, so that the light modules here (`utils`, `metric_utils`,
`core_algos`, `rollout_corr_helper`: verl V1's file list, with `verl/trainer/ppo/`'s formulas and helpers
beside it) are importable without building a trainer.
"""

import importlib

_LAZY = {"PPOTrainer": "trainer_base", "register_trainer": "trainer_base", "get_trainer_cls": "trainer_base",
         "PPOTrainerSync": "trainer_sync", "PPOTrainerColocateAsync": "trainer_colocate_async",
         "PPOTrainerSeparateAsync": "trainer_separate_async"}
_TRAINER_MODULES = ("trainer_sync", "trainer_colocate_async", "trainer_separate_async")

__all__ = list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        if name == "get_trainer_cls":  # the registry is filled by importing every trainer module
            for module in _TRAINER_MODULES:
                importlib.import_module(f"minirl.trainer.ppo.{module}")
        return getattr(importlib.import_module(f"minirl.trainer.ppo.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'minirl.trainer.ppo' has no attribute {name!r}")
