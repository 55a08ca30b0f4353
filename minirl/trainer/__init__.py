"""The trainer: core_algos (formulas) and ppo/ (the loop)."""
