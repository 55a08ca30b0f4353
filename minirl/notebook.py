"""Helpers that the chapters and labs share: a small real run, its trace, HTML tables and plots.

No verl counterpart: verl has no notebooks. A chapter runs minirl for real, with settings small
enough for a laptop CPU (8 prompts x 4 responses of 8 tokens, 2 steps: a few seconds), then reads
what happened from the run's trace (`minirl.trace`) and from the batches the steps built:

    run = small_run(train_batch_size=8, n=4, steps=2)
    show_table(stage_rows(run.events, step=1))        # one row per stage of step 1
    stage_field_table(run.events, step=1)             # the tracer's fields x stages table, as HTML
    run.batches[1]                                     # the DataProto that step 1 trained on

`small_run` uses only the trainer's public entry points: `minirl.config.load(overrides)`,
`TaskRunner().build(cfg)`, `trainer.fit()`, and the trace written to `cfg.trace.dir`. Its outputs
(checkpoints dir, trace) go to a fresh temporary directory, never into the repository; the embedded
model and task are cached under `$MINIRL_CACHE` as in every run.

Two notebook-specific details:
- A Jupyter kernel runs cells inside an asyncio event loop, and the agent loop starts its own loop
  (`asyncio.run`), which Python forbids inside a running one. `small_run` therefore runs the
  training in a worker thread when a loop is running (in a plain script it runs in-line).
- The progress bar is off by default (`progress=False`): a widget bar renders as noise on the
  static site. The console logger's one line per step stays.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import html
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "TOY_REWARD_SOURCE",
    "SmallRun",
    "call_off_loop",
    "check_answer",
    "compartment",
    "component_of",
    "config_changes",
    "config_readers",
    "field_lineage",
    "flatten_config",
    "plot_batch_split",
    "plot_lineage",
    "record_config_reads",
    "show_table",
    "small_overrides",
    "small_run",
    "stage_events",
    "stage_field_table",
    "stage_rows",
    "write_toy_reward",
]

# ------------------------------------------------------------------------------- a shaping reward

TOY_REWARD_SOURCE = '''"""A shaping reward for notebooks: the share of printable ASCII characters in the response.

A randomly initialised model never writes the right `#### <answer>`, so the task's rule reward is 0
for every response and every GRPO advantage is 0. A random byte-level model writes mostly
unprintable bytes; the share of printable ones differs between responses from the first step, so
the advantages a chapter shows are not all zero. `acc` keeps the real rule's verdict (0 or 1).
Plugged in with verl's hook: reward.custom_reward_function.path=<this file>.
"""

from minirl.utils.reward_score import default_compute_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    acc = float(default_compute_score(data_source, solution_str, ground_truth, extra_info))
    printable = sum(ch.isascii() and ch.isprintable() for ch in solution_str) / max(len(solution_str), 1)
    return {"score": printable, "acc": acc}
'''


def write_toy_reward(workdir: str | os.PathLike) -> str:
    """Write `TOY_REWARD_SOURCE` to `<workdir>/toy_reward.py` and return its path."""
    path = Path(workdir) / "toy_reward.py"
    path.write_text(TOY_REWARD_SOURCE)
    return str(path)


# ------------------------------------------------------------------------------------------ the run


def small_overrides(*, train_batch_size: int = 8, n: int = 4, response_length: int = 8, steps: int = 2,
                    ppo_mini_batch_size: int | None = None, micro_batch_size: int | None = None,
                    workdir: str | None = None) -> list[str]:
    """verl-style `key=value` overrides for a tiny run (no validation passes, console log only).

    `ppo_mini_batch_size` defaults to half the prompts (two optimizer steps per training step) and
    `micro_batch_size` (`ppo_micro_batch_size_per_gpu`) to a quarter of the per-rank mini-batch.
    """
    mini = ppo_mini_batch_size or max(1, train_batch_size // 2)
    micro = micro_batch_size or max(1, mini * n // 4)
    out = [
        f"data.train_batch_size={train_batch_size}",
        f"actor_rollout_ref.rollout.n={n}",
        f"data.max_response_length={response_length}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.logger=[console]",
    ]
    if workdir is not None:
        out.append(f"trainer.default_local_dir={workdir}")
    return out


@dataclass
class SmallRun:
    """What `small_run` hands back: the config, the trainer, the trace events and the step batches."""

    config: Any
    """The resolved config (`minirl.config.load(overrides)`)."""
    trainer: Any
    """The trainer after `fit()` (its workers, rollout and `history` of logged metrics)."""
    events: list[dict]
    """Every trace event (`minirl.trace.read_trace(config.trace.dir)`)."""
    workdir: str
    """The temporary directory holding the run's outputs (`trainer.default_local_dir`)."""
    overrides: list[str]
    """The overrides the config was loaded with."""
    batches: dict[int, Any] = field(default_factory=dict)
    """step -> the batch `trainer.step` returned (every field after the last stage of that step)."""
    config_reads: dict[str, set] = field(default_factory=dict)
    """dotted config key -> the minirl files that read it during build and fit (`record_config_reads`)."""

    @property
    def trace_dir(self) -> str:
        return str(self.config.trace.dir)

    def stage(self, name: str, step: int = 1) -> dict:
        """The trace event of stage `name` at `step` (KeyError naming the stages that exist if absent)."""
        for e in stage_events(self.events, step=step):
            if e["stage"] == name:
                return e
        have = [e["stage"] for e in stage_events(self.events, step=step)]
        raise KeyError(f"no stage {name!r} at step {step} in the trace; stages there: {have}")


def call_off_loop(fn: Callable, *args, **kwargs):
    """Call `fn` here, or in a worker thread when this thread already runs an asyncio loop (Jupyter)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args, **kwargs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def small_run(overrides: Sequence[str] = (), *, train_batch_size: int = 8, n: int = 4, response_length: int = 8,
              steps: int = 2, ppo_mini_batch_size: int | None = None, micro_batch_size: int | None = None,
              toy_reward: bool = False, keep_batches: bool = True, progress: bool = False,
              workdir: str | None = None) -> SmallRun:
    """Train `steps` GRPO steps with tiny settings and return the config, trainer, trace and batches.

    Also records which minirl file read which config key during build and fit (`SmallRun.config_reads`).

    `overrides` (verl's `key=value`) are applied after the small settings, so they win. `toy_reward`
    scores responses with `TOY_REWARD_SOURCE` (non-zero advantages from a random model). The run writes
    to `workdir` (default: a new temporary directory). With `keep_batches`, `trainer.step` is wrapped
    on this instance so that the batch each step returns is kept in `SmallRun.batches[step]`.
    """
    from minirl.config import load
    from minirl.trace import read_trace
    from minirl.trainer.main_ppo import TaskRunner

    workdir = workdir or tempfile.mkdtemp(prefix="minirl-nb-")
    ovr = small_overrides(train_batch_size=train_batch_size, n=n, response_length=response_length, steps=steps,
                          ppo_mini_batch_size=ppo_mini_batch_size, micro_batch_size=micro_batch_size,
                          workdir=workdir)
    if toy_reward:
        ovr.append(f"reward.custom_reward_function.path={write_toy_reward(workdir)}")
    ovr += list(overrides)
    config = load(ovr)
    batches: dict[int, Any] = {}

    def train():
        trainer = TaskRunner().build(config)
        if keep_batches:
            step = trainer.step

            def keeping_step(metrics, timing_raw):
                batch = step(metrics, timing_raw)
                batches[trainer.global_steps] = batch
                return batch

            trainer.step = keeping_step
        old = os.environ.get("MINIRL_NO_PROGRESS")
        if not progress:
            os.environ["MINIRL_NO_PROGRESS"] = "1"
        try:
            trainer.fit()
        finally:
            trainer.close()
            if not progress:
                if old is None:
                    os.environ.pop("MINIRL_NO_PROGRESS", None)
                else:
                    os.environ["MINIRL_NO_PROGRESS"] = old
        return trainer

    with record_config_reads() as reads:
        trainer = call_off_loop(train)
    events = read_trace(config.trace.dir)
    return SmallRun(config=config, trainer=trainer, events=events, workdir=workdir, overrides=ovr, batches=batches,
                    config_reads=reads)


# ---------------------------------------------------------------------------------- trace views


def stage_events(events: Iterable[dict], step: int | None = None) -> list[dict]:
    """The `stage` events, optionally of one step, in the order they ran."""
    out = [e for e in events if e.get("kind") == "stage" and (step is None or e.get("step") == step)]
    return sorted(out, key=lambda e: e.get("t_start", 0.0))


def _short(names: Iterable[str], limit: int = 6) -> str:
    names = [n for n in names if not n.startswith("__")]
    return ", ".join(names[:limit]) + (f" (+{len(names) - limit})" if len(names) > limit else "")


def stage_rows(events: Iterable[dict], step: int | None = 1) -> list[dict]:
    """One row per stage: step, stage, role, wall time (ms), the fields it added, and the weight versions."""
    rows = []
    for e in stage_events(events, step):
        v = e.get("versions") or {}
        rows.append({"step": e["step"], "stage": e["stage"], "role": e.get("role", ""),
                     "wall_ms": round(1000 * float(e.get("wall_s", 0.0)), 1),
                     "added": _short(e.get("added", [])),
                     "actor v": v.get("actor", ""), "rollout v": v.get("rollout", "")})
    return rows


def field_lineage(events: list[dict], step: int = 1, fields: Sequence[str] | None = None) -> list[dict]:
    """One row per field of one step: storage, shape, mask, the stage that made it, the stages that read it.

    Built on the tracer's `minirl.trace.views.lineage` (the same answer `minirl trace lineage RUN FIELD`
    prints): `made_by` is the stage that added the field at `step` (`dataset` when the prompts already
    carried it), `read_by` the stages whose worker call declared they read it, `removed_by` the stage
    that dropped it, `lifetime` the tracer's sentence about when it appears and goes.
    """
    from minirl.trace import views

    names = list(fields) if fields is not None else [n for n in views.all_fields(events) if not n.startswith("__")]
    rows = []
    for name in names:
        lin = views.lineage(events, name)
        at = lin["per_step"].get(step, {})
        made = [s for s in at.get("added", []) if s != "validate"]
        rows.append({"field": name, "storage": lin["storage"], "shape": lin["shape"],
                     "shape (symbolic)": lin["shape_symbolic"], "dtype": lin["dtype"], "mask": lin["mask"],
                     "made_by": made[0] if made else "dataset",
                     "read_by": ", ".join(s for s in at.get("read", []) if s != "validate"),
                     "removed_by": ", ".join(at.get("removed", [])), "lifetime": lin["lifetime"]})
    return rows


def stage_field_table(events: list[dict], step: int = 1, fields: Sequence[str] | None = None):
    """The tracer's stages x fields table of one step (`minirl trace show`) as HTML.

    Cells: `+` added, `~` changed, `-` removed, `r` read, `.` present (`minirl.trace.views.CELL_KEY`).
    `fields` keeps only those rows (default: every field except `__private__` ones).
    """
    from minirl.trace import views

    t = views.show_table(events, step)
    heads = [s["stage"] for s in t["stages"]]
    rows = []
    for r in t["fields"]:
        if (fields is not None and r["name"] not in fields) or (fields is None and r["name"].startswith("__")):
            continue
        row = {"field": r["name"], "storage": r["storage"], "shape": r["shape"]}
        row.update({h: c for h, c in zip(heads, r["cells"])})
        rows.append(row)
    return show_table(rows, columns=["field", "storage", "shape", *heads],
                      caption=f"step {step}, fields x stages. {views.CELL_KEY}")


# ----------------------------------------------------------------------------------------- tables


def _cell(v) -> str:
    if isinstance(v, float):
        v = f"{v:.4g}"
    elif isinstance(v, (list, tuple)):
        v = "[" + ", ".join(str(x) for x in v) + "]"
    return html.escape(str(v))


def show_table(rows: Sequence[dict], columns: Sequence[str] | None = None, caption: str | None = None):
    """An HTML table of `rows` (dicts) for a notebook; `columns` picks and orders the keys.

    Returns an `IPython.display.HTML` object: make it the last expression of a cell (or `display` it).
    """
    from IPython.display import HTML

    rows = list(rows)
    if columns is None:
        columns = []
        for r in rows:
            columns += [k for k in r if k not in columns]
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r.get(c, ''))}</td>" for c in columns) + "</tr>" for r in rows)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return HTML(f'<table class="minirl-table">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


# ------------------------------------------------------------------------------------------- plots


def plot_lineage(events: Iterable[dict], step: int = 1, fields: Sequence[str] | None = None):
    """A field x stage chart of one step: a bar from the stage that made a field to the last stage that
    read it, a filled dot where it was made, an open circle where a stage read it. Returns the figure."""
    import matplotlib.pyplot as plt

    lin = {r["field"]: r for r in field_lineage(events, step)}
    stages = [e["stage"] for e in stage_events(events, step) if e["stage"] != "update_weights"]
    xs = ["dataset"] + stages
    names = list(fields) if fields is not None else [f for f, r in lin.items() if r["storage"] == "batch"
                                                      or r["read_by"] or r["made_by"] != "dataset"]
    names = [n for n in names if n in lin and not n.startswith("__")]
    colors = {"batch": "tab:blue", "non_tensor_batch": "tab:orange", "meta_info": "tab:green"}
    fig, ax = plt.subplots(figsize=(1.1 * len(xs) + 2.5, 0.32 * len(names) + 1.2))
    for y, name in enumerate(names):
        r = lin[name]
        x0 = xs.index(r["made_by"]) if r["made_by"] in xs else 0
        readers = [xs.index(s) for s in r["read_by"].split(", ") if s in xs]
        x1 = xs.index(r["removed_by"]) if r["removed_by"] in xs else len(xs) - 1
        c = colors.get(r["storage"], "tab:gray")
        ax.plot([x0, x1], [y, y], color=c, alpha=0.35, lw=5, solid_capstyle="butt")
        ax.plot([x0], [y], "o", color=c, ms=8)
        if readers:
            ax.plot(readers, [y] * len(readers), "o", mfc="white", mec="black", ms=7)
    ax.set_xticks(range(len(xs)), xs, rotation=30, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlim(-0.5, len(xs) - 0.5)
    handles = [plt.Line2D([], [], color=c, lw=5, alpha=0.5, label=k) for k, c in colors.items()]
    handles += [plt.Line2D([], [], marker="o", color="gray", lw=0, label="made here"),
                plt.Line2D([], [], marker="o", mfc="white", mec="black", lw=0, label="read here")]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title(f"field lineage, step {step}")
    fig.tight_layout()
    return fig


def plot_batch_split(sequences: int, mini_batch: int, micro_batch: int, dp: int = 1, epochs: int = 1):
    """One training step's sequences as a strip: colour = mini-batch (one optimizer step each),
    thin lines = micro-batches on each rank, rows = data-parallel ranks. Returns the figure."""
    import matplotlib.pyplot as plt

    if sequences % mini_batch or mini_batch % dp or (mini_batch // dp) % micro_batch:
        raise ValueError(f"{sequences} sequences do not split into mini-batches of {mini_batch}, over {dp} ranks, "
                         f"in micro-batches of {micro_batch}: run minirl.config.validate on the config first.")
    cmap = plt.get_cmap("tab20")
    per_rank = mini_batch // dp
    n_mini = sequences // mini_batch
    fig, ax = plt.subplots(figsize=(10, 0.5 * dp + 1.3))
    for m in range(n_mini):
        for r in range(dp):
            x = m * per_rank
            ax.barh(r, per_rank, left=x, color=cmap(m % 20), edgecolor="black", height=0.7)
            for k in range(1, per_rank // micro_batch):
                ax.plot([x + k * micro_batch] * 2, [r - 0.35, r + 0.35], color="white", lw=1.2)
    ax.set_yticks(range(dp), [f"rank {r}" for r in range(dp)])
    ax.set_xlabel(f"sequences on each rank (one colour = one mini-batch = one optimizer step; "
                  f"white lines cut micro-batches of {micro_batch}); x{epochs} epoch(s)")
    ax.set_title(f"{sequences} sequences -> {n_mini} mini-batches of {mini_batch} -> "
                 f"{per_rank} per rank -> {per_rank // micro_batch} micro-batches")
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------ config


def flatten_config(cfg, prefix: str = "") -> dict:
    """`{dotted.key: value}` for every leaf of a (resolved) config or nested dict."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    out = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten_config(v, key + "."))
        else:
            out[key] = v
    return out


def config_changes(base, cfg, overrides: Sequence[str] = ()) -> list[dict]:
    """Keys whose value differs between two configs, and why: named in `overrides` or followed an interpolation."""
    a, b = flatten_config(base), flatten_config(cfg)
    named = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    rows = []
    for k in b:
        if a.get(k) != b[k]:
            rows.append({"key": k, "default": a.get(k), "now": b[k],
                         "why": "override" if k in named else "interpolation (${...})"})
    return rows


# Which part of the system a minirl source file belongs to (for `config_readers`).
_COMPONENTS = [
    ("minirl/trainer/ppo/", "trainer (controller)"),
    ("minirl/trainer/main_ppo.py", "trainer (controller)"),
    ("minirl/trainer/core_algos.py", "trainer (controller)"),
    ("minirl/single_controller/", "trainer (controller)"),
    ("minirl/workers/engine_workers.py", "actor / critic worker"),
    ("minirl/workers/engine/", "actor / critic worker"),
    ("minirl/workers/utils/", "actor / critic worker"),
    ("minirl/config/", "config validation"),
    ("minirl/workers/rollout/", "rollout server"),
    ("minirl/agent_loop/", "agent loop (rollout client)"),
    ("minirl/workers/reward/", "reward manager"),
    ("minirl/data/", "dataset"),
    ("minirl/models/", "model loading"),
    ("minirl/checkpoint_engine.py", "weight sync"),
    ("minirl/trace/", "tracer"),
]
_ROOT = Path(__file__).resolve().parents[1]


def component_of(path: str) -> str:
    """The part of minirl a source file belongs to: trainer, actor worker, rollout server, reward manager ..."""
    try:
        rel = Path(path).resolve().relative_to(_ROOT).as_posix()
    except ValueError:
        return "outside minirl"
    return next((c for prefix, c in _COMPONENTS if rel.startswith(prefix)), rel)


@contextmanager
def record_config_reads():
    """Record every config key read while the block runs, and the minirl file that read it.

    Yields a dict `{dotted key: {file, ...}}` that fills up as the code reads `cfg.a.b` or `cfg["a"]`
    or `cfg.get("a")` on any OmegaConf `DictConfig`. It patches `DictConfig`'s three accessors for the
    duration of the block (all threads of this process), so keep the block to one run. Reads made in
    other processes (Ray workers, `trainer.worker_group=ray`) are not seen.
    """
    from omegaconf import DictConfig

    reads: dict[str, set] = {}
    originals = {name: DictConfig.__dict__[name] for name in ("__getattr__", "__getitem__", "get")}
    omegaconf_dir = os.sep + "omegaconf" + os.sep

    def caller() -> str:
        f = sys._getframe(2)
        while f is not None and (f.f_code.co_filename == __file__ or omegaconf_dir in f.f_code.co_filename):
            f = f.f_back
        return f.f_code.co_filename if f is not None else "?"

    def wrap(name):
        orig = originals[name]

        def accessor(self, key, *args, **kwargs):
            value = orig(self, key, *args, **kwargs)
            if isinstance(key, str) and not key.startswith("_") and not isinstance(value, DictConfig):
                try:
                    full = self._get_full_key(key)
                except Exception:  # noqa: BLE001 (a key OmegaConf cannot place: keep its short name)
                    full = key
                reads.setdefault(full, set()).add(caller())
            return value

        return accessor

    for name in originals:
        setattr(DictConfig, name, wrap(name))
    try:
        yield reads
    finally:
        for name, orig in originals.items():
            setattr(DictConfig, name, orig)


def config_readers(reads: dict, key: str) -> dict[str, list[str]]:
    """`{component: [minirl files]}` that read config `key` in a recorded run (`SmallRun.config_reads`)."""
    out: dict[str, list[str]] = {}
    for path in sorted(reads.get(key, ())):
        try:
            rel = Path(path).resolve().relative_to(_ROOT).as_posix()
        except ValueError:
            continue
        out.setdefault(component_of(path), []).append(rel)
    return out


# ------------------------------------------------------------------------------------------ checks


def compartment(batch, name: str) -> str:
    """Which compartment of a `DataProto` holds `name`: `batch`, `non_tensor_batch`, `meta_info` (or KeyError)."""
    if batch.batch is not None and name in batch.batch.keys():
        return "batch"
    if name in batch.non_tensor_batch:
        return "non_tensor_batch"
    if name in batch.meta_info:
        return "meta_info"
    raise KeyError(f"{name!r} is in no compartment of this DataProto; fields: "
                   f"{[r['key'] for r in batch.summary()]}")


def check_answer(question: str, answer, expected, hint: str = "") -> bool:
    """A lab check: None -> say what to do (no error); equal -> print OK; different -> AssertionError.

    Returns True when the answer is right, False when it is still None.
    """
    if answer is None:
        print(f"[not answered] {question}: replace None in the cell above with your answer. {hint}".rstrip())
        return False
    norm = (lambda x: list(x) if isinstance(x, tuple) else x)
    if norm(answer) != norm(expected):
        raise AssertionError(f"{question}: your answer {answer!r} differs from the run's {expected!r}. {hint}".rstrip())
    print(f"[ok] {question}: {answer!r}")
    return True
