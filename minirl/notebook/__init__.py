"""What the chapters and labs share: the small-run harness, HTML tables, and the labs' checks.

No verl counterpart: verl has no notebooks. The modules, one job each:

| module | what it does |
|---|---|
| `minirl.notebook.run` | `small_run`: a real training run with tiny settings, its trace and each step's batch |
| `minirl.notebook.tables` | `show_table` (any rows as HTML), `stage_rows`, `stage_field_table` |
| `minirl.notebook.checks` | `Lab`: a lab's checks (they stop the notebook until an exercise is answered), its worked solutions and scoreboard; the lab authoring contract; `compartment` |
| `minirl.notebook.lab_cli` | `minirl lab list` and `minirl lab check NN` (a reader's copy run headless, its scoreboard) |
| `minirl.notebook.tool_policy` | `tool_policy`: the embedded model after a short SFT on calculator episodes (chapter 11, lab 04) |
| `minirl.notebook.layouts` | `run_layouts`: one run's batches re-trained live on several process-group layouts (gloo on 127.0.0.1, per-rank traces; chapter 07), `rank_rows`; `live_layout`: the actor on 2-4 local ranks (FSDP2 or TP), one step, its per-rank trace (lab 05) |
| `minirl.notebook.diagrams` | drawn by definition: how the post-training methods relate, the roles and their fields, stage pipelines |
| `minirl.notebook.token_plots` | a batch over its tokens: one response's signals, masks as images, GRPO groups, ratios |
| `minirl.notebook.learning` | a live run's learning curve beside the recorded one of `benchmarks/learning.py` |
| `minirl.notebook.loss_plots` | the vanilla policy loss against the ratio, computed by `compute_policy_loss_vanilla` itself |
| `minirl.notebook.timelines` | when sessions were generated and scored; which weight version produced each part of a resumed response |
| `minirl.notebook.weight_sync` | `sync_mid_generation`: a weight sync that lands in the middle of generation on live rollout servers (chapter 08) |
| `minirl.notebook.variants` | the algorithm variants of chapter 13 and `benchmarks/algorithms.py` (DAPO, OPD, every estimator and loss) |
| `minirl.notebook.algorithm_plots` | chapter 13's figures: baselines on one batch, policy losses on one axis, DAPO's penalty, OPD's signal |
| `minirl.notebook.loss_checks` | lab 09's checks: a reader's policy loss against minirl's, told where they differ |

What the notebooks read lives where it is computed, not here: the trace's questions and views in
`minirl.trace` (`query.stage_events`, `lineage.field_lineage`, ...), the figures in
`minirl.trace.plots`, config introspection in `minirl.config.introspect`.

    from minirl.notebook import show_table, small_run, stage_rows
    run = small_run(train_batch_size=8, n=4, steps=2)
    show_table(stage_rows(run.events, step=1))        # one row per stage of step 1
"""

from minirl.notebook.checks import ExerciseNotAnswered, Lab, WrongAnswer, check_answer, compartment
from minirl.notebook.run import TOY_REWARD_SOURCE, NonFiniteError, SmallRun, small_overrides, small_run
from minirl.notebook.tables import show_table, stage_field_table, stage_rows

__all__ = [
    "TOY_REWARD_SOURCE",
    "ExerciseNotAnswered",
    "Lab",
    "NonFiniteError",
    "SmallRun",
    "WrongAnswer",
    "check_answer",
    "compartment",
    "show_table",
    "small_overrides",
    "small_run",
    "stage_field_table",
    "stage_rows",
]
