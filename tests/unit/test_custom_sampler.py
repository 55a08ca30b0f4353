"""`trainer.v1.sampler.custom_sampler.{path,name}`: a user's ReplayBufferAsync subclass, loaded as verl loads it.

Fast: the loader (`pkg://module` and a file path), the class the async trainers build, and the one-line
errors for a class that is not a ReplayBufferAsync and (at load time) for a custom sampler in sync mode. Lab 07 trains
colocate_async runs with a notebook's classes (`pkg://__main__`).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from minirl.config import ConfigError, load
from minirl.trainer.ppo.replay_buffer import ReplayBuffer, ReplayBufferAsync
from minirl.transfer_queue import TransferQueue
from minirl.utils.import_utils import load_extern_object


class PickyBuffer(ReplayBufferAsync):
    """Evicts nothing, ever (a rule of its own)."""

    def _stale_terminal_keys(self, global_steps, partition_id, prompts, fetched):
        return []


def _fake_trainer(*overrides):
    cfg = load(["trainer.v1.trainer_mode=colocate_async", *overrides])
    return SimpleNamespace(config=cfg, tq=TransferQueue(), _add_prompts_to_generate=lambda k: k,
                           _check_background=lambda: None)


def test_load_extern_object_reads_modules_and_files(tmp_path):
    assert load_extern_object("pkg://test_custom_sampler", "PickyBuffer") is PickyBuffer
    f = tmp_path / "sampler.py"
    f.write_text("VALUE = 42\n")
    assert load_extern_object(str(f), "VALUE") == 42
    with pytest.raises(AttributeError, match=r"has no 'NOPE'"):
        load_extern_object(str(f), "NOPE")
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_extern_object(str(tmp_path / "missing.py"), "X")


def test_the_async_trainer_builds_the_custom_sampler_or_says_why_not():
    from minirl.trainer.ppo.trainer_async import AsyncTrainerMixin
    from minirl.trainer.ppo.trainer_base import PPOTrainer

    S = "trainer.v1.sampler.custom_sampler"
    buf = AsyncTrainerMixin._build_replay_buffer(_fake_trainer(f"{S}.path=pkg://test_custom_sampler", f"{S}.name=PickyBuffer"))
    assert type(buf) is PickyBuffer and buf.max_off_policy_strategy == "drop"
    with pytest.raises(TypeError, match="is not a ReplayBufferAsync subclass"):
        AsyncTrainerMixin._build_replay_buffer(_fake_trainer(f"{S}.path=pkg://test_custom_sampler", f"{S}.name=_fake_trainer"))
    # sync mode refuses at load time, with every other config problem (minirl.config.values)
    with pytest.raises(ConfigError, match="in the async trainers only"):
        _fake_trainer(f"{S}.path=pkg://test_custom_sampler", f"{S}.name=PickyBuffer", "trainer.v1.trainer_mode=sync")
    with pytest.raises(ConfigError, match="a custom sampler needs both"):
        _fake_trainer(f"{S}.name=PickyBuffer")
    assert type(PPOTrainer._build_replay_buffer(_fake_trainer("trainer.v1.trainer_mode=sync"))) is ReplayBuffer
