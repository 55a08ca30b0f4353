"""Shared pytest set-up: one torch thread (10-30x faster for tiny models on 2 loaded cores).

The tests, by kind (one folder each; `pytest tests` runs them all, `-m "not slow"` the quick subset):

- `tests/unit/`: formulas, contracts, error messages, single components (fast; a few slow ones);
- `tests/e2e/`: whole runs: training end to end, Ray and multi-rank runs, rollout servers, the
  reference-trace regression, the warm start;
- `tests/notebooks/`: every chapter and lab executed;
- `tests/site/`: the strict site build and the headless-browser test;
- `tests/parity/` (`scripts/parity.sh`) and `tests/rollout_vllm/` (`scripts/vllm.sh`): their own venvs,
  skipped in this one.
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import torch

torch.set_num_threads(1)

import pytest


@pytest.fixture(scope="session")
def ray_session():
    """One private local Ray for the whole test session (a start costs 30-40 s here).

    Only tests that ask for it start Ray. `init_ray` is idempotent, so a module that defines its
    own `ray_session` (tests/e2e/test_single_controller_ray.py) shares the same cluster.
    """
    from minirl.single_controller.ray import init_ray, shutdown_ray

    started = init_ray(num_cpus=8)  # logical CPUs: room for a few 2-rank placement groups
    yield
    if started:
        shutdown_ray()


# Two CPU cores: scripts/test.sh runs pytest with `-n 2 --dist loadgroup` (pytest-xdist). Tests that must not
# run beside each other share a group, and one worker runs a group's tests one after another:
# - "site": the notebooks execute once (tests/notebooks/test_notebooks.py, the labs in both modes:
#   tests/notebooks/test_labs.py) and the site build and the browser test reuse those executions
#   (docs/hooks/executed_notebooks.py); in one worker they never run twice;
# - "ray": one private Ray per worker process is enough (a start costs 30-40 s), and multi-process runs
#   (Ray ranks, torch process groups) would otherwise compete for the same two cores twice over.
XDIST_GROUPS = {
    "site": ("test_labs.py", "test_notebooks.py", "test_site.py", "test_browser.py"),
    "ray": ("test_single_controller_ray.py", "test_trainer_ray.py", "test_ray_loopback.py",
            "test_trace_regression.py", "test_engine_torchtitan.py", "test_engine_megatron.py", "test_engine_fsdp.py",
            "test_trace_ranks.py", "test_rollout_servers.py", "test_async_trainers.py", "test_ray_two_nodes.py",
            "test_distillation_teacher.py", "test_process_worker_group.py"),
}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the marks to group the node ids
def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.path.name
        for group, files in XDIST_GROUPS.items():
            if name in files:
                item.add_marker(pytest.mark.xdist_group(group))
