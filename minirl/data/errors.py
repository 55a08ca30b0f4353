"""`DataError`: a data file (or `minirl://` task) a run cannot use (minirl only; verl raises from deep inside `datasets`).

Its message is one line that names the file, the row or the column, and the fix; `minirl train`
prints it and exits with code 2 (`minirl.trainer.main_ppo.run_errors`).
"""

from __future__ import annotations

__all__ = ["DataError"]


class DataError(ValueError):
    """A data file the run cannot use: the message is one line naming the file (row, column) and the fix."""
