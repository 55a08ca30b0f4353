"""What the chapters and labs share: the small-run harness, HTML tables, and the labs' checks.

No verl counterpart: verl has no notebooks. The modules, one job each:

| module | what it does |
|---|---|
| `minirl.notebook.run` | `small_run`: a real training run with tiny settings, its trace and each step's batch |
| `minirl.notebook.tables` | `show_table` (any rows as HTML), `stage_rows`, `stage_field_table` |
| `minirl.notebook.checks` | `Lab` and `check_answer` (a lab's checks and worked solutions), `compartment` |
| `minirl.notebook.tool_policy` | `tool_policy`: the embedded model after a short SFT on calculator episodes (chapter 11, lab 04) |

What the notebooks read lives where it is computed, not here: the trace's questions and views in
`minirl.trace` (`query.stage_events`, `lineage.field_lineage`, ...), the figures in
`minirl.trace.plots`, config introspection in `minirl.config.introspect`.

    from minirl.notebook import show_table, small_run, stage_rows
    run = small_run(train_batch_size=8, n=4, steps=2)
    show_table(stage_rows(run.events, step=1))        # one row per stage of step 1
"""

from minirl.notebook.checks import Lab, check_answer, compartment
from minirl.notebook.run import TOY_REWARD_SOURCE, SmallRun, small_overrides, small_run
from minirl.notebook.tables import show_table, stage_field_table, stage_rows

__all__ = [
    "TOY_REWARD_SOURCE",
    "Lab",
    "SmallRun",
    "check_answer",
    "compartment",
    "show_table",
    "small_overrides",
    "small_run",
    "stage_field_table",
    "stage_rows",
]
