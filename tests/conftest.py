"""Shared pytest set-up: one torch thread (10-30x faster for tiny models on 2 loaded cores)."""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import torch  # noqa: E402

torch.set_num_threads(1)

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def ray_session():
    """One private local Ray for the whole test session (a start costs 30-40 s here).

    Only tests that ask for it start Ray. `init_ray` is idempotent, so a module that defines its
    own `ray_session` (tests/test_single_controller_ray.py) shares the same cluster.
    """
    from minirl.single_controller.ray import init_ray, shutdown_ray

    started = init_ray(num_cpus=8)  # logical CPUs: room for a few 2-rank placement groups
    yield
    if started:
        shutdown_ray()
