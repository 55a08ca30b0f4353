"""Utilities shared across minirl (verl: `verl/utils/`): score functions live in `minirl.utils.reward_score`."""
