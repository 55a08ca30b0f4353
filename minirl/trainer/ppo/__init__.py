"""The V1 PPO trainer (verl: `verl/trainer/ppo/v1/`)."""

from minirl.trainer.ppo.trainer import PPOTrainer, PPOTrainerSync, get_trainer_cls, register_trainer

__all__ = ["PPOTrainer", "PPOTrainerSync", "get_trainer_cls", "register_trainer"]
