"""Ctrl-C and SIGTERM: `stop_on_signals` turns SIGTERM into a `KeyboardInterrupt`, `signals_deferred` holds it
while a checkpoint is written (minirl/utils/interrupt.py)."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from minirl.utils.interrupt import Stopped, signals_deferred, stop_on_signals, stopped_line

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")


def test_sigterm_raises_a_keyboard_interrupt_named_sigterm():
    with pytest.raises(KeyboardInterrupt) as err, stop_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs at the next bytecode boundary
            pass
    line, code = stopped_line("minirl train", err.value)
    assert code == 143 and "SIGTERM" in line


@pytest.fixture
def ctrl_c_raises():
    """SIGINT as in a terminal: a test worker may inherit it ignored (and a held SIGINT is then rightly ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_a_checkpoint_acts_once_the_block_is_done(signum, ctrl_c_raises):
    done = []
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), stop_on_signals():
        with signals_deferred():
            # raise(): delivered to this thread before it returns (os.kill may reach another thread of a busy
            # process later, after the block); the Python-level handler then runs at the next bytecode
            signal.raise_signal(signum)
            for _ in range(1000):  # many bytecode boundaries: a handler would have run by now
                pass
            done.append("written")  # the block was not interrupted
        done.append("after")  # never reached: the held signal acts as the block ends
    assert done == ["written"]
    assert signal.getsignal(signal.SIGTERM) is before  # both context managers put the handlers back


def test_without_a_signal_the_block_runs_and_the_handlers_come_back():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with signals_deferred():
        assert signal.getsignal(signal.SIGINT) is not before[signal.SIGINT]  # held while inside
    assert {s: signal.getsignal(s) for s in before} == before
    assert issubclass(Stopped, KeyboardInterrupt)  # what handles Ctrl-C handles SIGTERM
