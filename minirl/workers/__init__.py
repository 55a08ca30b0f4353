"""Workers: the processes that hold models and do the heavy work (training engines, rollout, reward).

Mirrors verl's `verl/workers/` package: the trainer (single controller) calls methods on these
workers; it never touches a model directly.
"""
