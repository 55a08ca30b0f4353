"""Parity suite set-up: compare `minirl.trainer.ppo.core_algos` with PyPI `verl==0.9.1` on the same inputs.

verl pins transformers < 5.11 and tensordict <= 0.10, so it lives in its own venv, made and used by
`scripts/parity.sh`. In any other venv (no verl) the parity tests are skipped. The script sets
`MINIRL_PARITY_REQUIRED=1`: then a verl that fails to import is an error, not a skip, and a session
that compared nothing fails.

Fixtures:
- `same(name, ours, theirs)`: assert equal outputs (tensors, floats, dicts, tuples; atol 1e-6) and
  record `name` as compared.
- `batch(seed, ...)`: random inputs shaped like a GRPO/PPO batch: masks with a hole in the middle
  of a response and trailing padding, groups (uid) including a group of one and a group whose
  rewards are all equal.
At the end of the session a line `parity: compared N functions ...` is printed.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

REQUIRED = os.environ.get("MINIRL_PARITY_REQUIRED") == "1"
ATOL = 1e-6
COMPARED: dict[str, int] = {}
"""minirl function name -> number of (minirl, verl) output pairs compared."""


def _assert_same(ours, theirs, where: str) -> None:
    if isinstance(theirs, torch.Tensor) or isinstance(ours, torch.Tensor):
        ours_t, theirs_t = torch.as_tensor(ours).detach().double(), torch.as_tensor(theirs).detach().double()
        torch.testing.assert_close(
            ours_t, theirs_t, atol=ATOL, rtol=0, equal_nan=True, msg=lambda m: f"{where}: {m}"
        )
    elif isinstance(theirs, dict):
        assert set(ours) == set(theirs), (
            f"{where}: keys differ: minirl {sorted(ours)} vs verl {sorted(theirs)}"
        )
        for key in theirs:
            _assert_same(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, (tuple, list)):
        assert len(ours) == len(theirs), f"{where}: {len(ours)} outputs vs verl's {len(theirs)}"
        for k, (a, b) in enumerate(zip(ours, theirs)):
            _assert_same(a, b, f"{where}[{k}]")
    else:
        assert abs(float(ours) - float(theirs)) <= ATOL, f"{where}: minirl {ours} vs verl {theirs}"


@pytest.fixture
def same():
    def check(name: str, ours, theirs) -> None:
        _assert_same(ours, theirs, name)
        COMPARED[name] = COMPARED.get(name, 0) + 1

    return check


def make_batch(seed: int, bs: int = 8, T: int = 7, outcome: bool = False, empty_row: bool = False) -> dict:
    """Random inputs of one batch; all float32 (the dtype the trainer uses)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, T + 1, (bs,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    mask[0, 1] = 0.0  # a masked token in the middle of a response (a tool observation)
    mask[1, lengths[1] // 2] = 0.0
    if empty_row:
        mask[-1] = 0.0
    uid = np.array(
        ["a", "a", "a", "b", "b", "c", "d", "d"][:bs] + [f"x{i}" for i in range(bs - 8)], dtype=object
    )
    if outcome:  # one reward on the last token, 0/1 like a rule reward
        rewards = torch.zeros(bs, T)
        rewards[torch.arange(bs), lengths - 1] = torch.randint(0, 2, (bs,), generator=g).float()
    else:
        rewards = torch.randn(bs, T, generator=g) * mask
    rewards[6:8] = 0.0  # group "d": all-equal rewards
    rewards[6:8, 0] = 0.5
    old_log_prob = -3 * torch.rand(bs, T, generator=g)
    log_prob = old_log_prob + 0.3 * torch.randn(bs, T, generator=g)
    log_prob[2:4, 0] += 1.5  # ratio ~4.5 > clip_ratio_c: dual clip where the advantage is negative
    log_prob[4, 0] -= 2.0  # ratio ~0.14: below 1 - clip_ratio_low
    advantages = torch.randn(bs, T, generator=g)
    advantages[2, 0] = -1.0
    return {
        "response_mask": mask,
        "index": uid,
        "token_level_rewards": rewards,
        "values": torch.randn(bs, T, generator=g),
        "reward_baselines": torch.randn(bs, generator=g),
        "old_log_prob": old_log_prob,
        "log_prob": log_prob,
        "ref_log_prob": old_log_prob + 0.5 * torch.randn(bs, T, generator=g),
        "advantages": advantages,
        "rollout_is_weights": 0.5 + torch.rand(bs, T, generator=g),
        "logits": torch.randn(bs, T, 11, generator=g) * 3,
    }


@pytest.fixture
def batch():
    return make_batch


def pytest_sessionfinish(session, exitstatus):
    if REQUIRED and not COMPARED and exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter):
    if COMPARED:
        try:
            import verl

            version = verl.__version__
        except ImportError:  # pragma: no cover
            version = "?"
        cases = sum(COMPARED.values())
        terminalreporter.write_line(
            f"parity: compared {len(COMPARED)} functions ({cases} output pairs, atol {ATOL}) of "
            f"minirl.trainer.ppo.core_algos / distillation with verl {version}: {', '.join(sorted(COMPARED))}"
        )
    else:
        terminalreporter.write_line(
            "parity: compared 0 functions (verl is not installed here; run scripts/parity.sh)"
        )
