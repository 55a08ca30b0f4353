"""Progress bars for the one-time builds a reader waits on: the SFT warm start, the reward model, the tool policy.

The first notebook (or command) that needs `minirl://tiny-qwen2-sft` or the cached reward model builds it,
which takes from ten seconds to a few minutes on a laptop CPU. Without a bar that is a silent cell. Each
build opens one `build_progress` bar that says what is being built, how, and roughly how long it takes;
it is a `tqdm.auto` bar, so it is a widget in Jupyter and a line in a terminal. Like the trainer's own
bar it is off when `MINIRL_NO_PROGRESS=1` (CI, the test suite, logs that must stay one line per event).

    with build_progress("building minirl://tiny-qwen2-sft", total=1000, about="SFT, ~1-3 min on 2 cores") as bar:
        ...
        bar.update(1)

verl has no counterpart: its models are checkpoints that exist before a run starts.
"""

from __future__ import annotations

import os

from tqdm.auto import tqdm

__all__ = ["build_progress", "progress_enabled"]


def progress_enabled() -> bool:
    """False when `MINIRL_NO_PROGRESS=1` (every bar of minirl reads the same switch)."""
    return os.environ.get("MINIRL_NO_PROGRESS") != "1"


def build_progress(what: str, total: int | None, about: str = "", unit: str = "step", disable: bool = False):
    """A `tqdm.auto` bar for a build: `what` is being built, `about` says how and roughly how long it takes.

    Args:
        what: the thing being built, as the reader will see it (`"building minirl://tiny-qwen2-sft"`).
        total: how many `unit`s the build has at most (the bar may close early: an SFT that stops at a
            target accuracy).
        about: how it is built and how long it takes, e.g. `"SFT until held-out accuracy >= 0.2, ~1-3 min"`.
        unit: what one `update(1)` counts.
        disable: force the bar off (it is also off with `MINIRL_NO_PROGRESS=1`).
    """
    desc = f"{what} ({about})" if about else what
    return tqdm(total=total, desc=desc, unit=unit, leave=True, dynamic_ncols=True,
                disable=disable or not progress_enabled())
