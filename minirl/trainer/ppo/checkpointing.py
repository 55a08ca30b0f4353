"""Saving and resuming a run: verl's checkpoint layout, plus what minirl needs to resume exactly and safely.

verl: `PPOTrainer._save_checkpoint` (`verl/trainer/ppo/v1/trainer_base.py:887`) and
`PPOTrainer._load_checkpoint` (`verl/trainer/ppo/v1/trainer_base.py:791`). The layout is verl's:

    <trainer.default_local_dir>/
      global_step_<k>/actor/           the actor engine's sharded state (model, optimizer, LR schedule, RNG)
      global_step_<k>/critic/          the same for the critic (PPO only)
      global_step_<k>/trainer_state.pt the controller's state (verl: data.pt, the dataloader's state)
      global_step_<k>/transfer_queue.pt async modes: the prompts in flight (verl: transfer_queue/)
      global_step_<k>/manifest.json    minirl only: the size of every file above
      latest_checkpointed_iteration.txt  the k to resume from (`trainer.resume_mode=auto`)

minirl's `trainer_state.pt` holds more than verl's `data.pt`: the dataloader position, the actor and
critic versions, the adaptive KL coefficient, the controller's and rollout's RNG states, so that a
run of 2 + resumed 2 steps equals a run of 4 (tests/e2e/test_trainer_e2e.py), and the batch-size and
learning-rate settings it ran with (`RESUME_KEYS`), so that a resume with other values says so.

Nothing is lost, in this order (verl writes the tracker row after the checkpoint and the
`latest` file in place, with a plain write):

1. `save_checkpoint` writes the step into `.tmp_global_step_<k>/` and renames it into place, so a
   killed save never leaves half a checkpoint;
2. the trainer logs the step's metrics row (`PPOTrainer.logger.log`);
3. `mark_latest` then writes `latest_checkpointed_iteration.txt` (a temporary file, fsync,
   `os.replace`: never torn) and prunes old checkpoints. A run killed between 2 and 3 resumes from
   the previous checkpoint and redoes step k, so its row appears twice (the later one counts), but
   a row is never missing for a step that the resumed run will not redo.

**Nothing in flight is lost (async modes).** When an async run saves step $k$, prompts fetched from the
dataloader but not yet trained are in the TransferQueue: pending, running (some sessions written), or
finished and waiting to be sampled. `transfer_queue.pt` is one snapshot of the training partition (tags,
trajectories, and each prompt's row, stored at submission), taken under the store's lock while the
agent-loop workers keep writing; the dataloader position saved with it counts exactly those prompts as
fetched. On resume, as verl does (`PPOTrainer._load_checkpoint` step 5, `PPOTrainer._reissue_inflight_prompts`,
`verl/trainer/ppo/v1/trainer_base.py:849`): finished groups are restored as they are (their trajectories were
sampled by weights of version $k-1$ or older, older than the resumed rollout's $k$: the staleness metrics count
it), and pending or running ones are **regenerated**: their partial trajectories are dropped and the prompt
goes up again, tagged with the resumed step, because half a group cannot be finished by the killed run's
sessions and a group is trained whole or not at all. minirl then tops the pipeline up to
`num_warmup_batches` batches (verl puts that many more up on top of the re-issued prompts), so a resumed run
has as many prompts in flight as one that never stopped.

On resume, `manifest.json` is checked first: a missing or truncated file is named before any load
starts, and a file that fails to load (`trainer_state.pt`, an engine shard) is named with the load
error. Both are a `CheckpointError`: `minirl train` prints one line and exits with code 2.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf
from tqdm.auto import tqdm

from minirl.utils.interrupt import signals_deferred

__all__ = ["RESUME_KEYS", "CheckpointError", "load_checkpoint", "mark_latest", "save_checkpoint"]

LATEST = "latest_checkpointed_iteration.txt"
MANIFEST = "manifest.json"
TRANSFER_QUEUE = "transfer_queue.pt"
RESUME_KEYS = (
    "data.train_batch_size",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.ppo_epochs",
    "actor_rollout_ref.actor.optim.lr",
    "critic.ppo_mini_batch_size",
    "critic.ppo_micro_batch_size_per_gpu",
    "critic.ppo_epochs",
    "critic.optim.lr",
)
"""Settings saved with each checkpoint and compared on resume (critic keys only when the run has a critic)."""
_FRESH = "Fix: trainer.resume_mode=disable (or another trainer.default_local_dir) to start fresh"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed from: the message names the file and the fix in one line."""


# ----------------------------------------------------------------------------------------------- save
def save_checkpoint(trainer, mark: bool = True) -> Path:
    """Save `trainer`'s workers and controller state as `global_step_<k>`; returns that folder.

    With `mark=False` (what `fit` does) the checkpoint is complete on disk but not yet the one a
    resume picks: `mark_latest` does that once the step's metrics row is written.
    """
    with signals_deferred():  # a Ctrl-C or SIGTERM now stops the run once this checkpoint is on disk
        return _save_checkpoint(trainer, mark)


def _save_checkpoint(trainer, mark: bool) -> Path:
    cfg = trainer.config.trainer
    root = Path(cfg.default_local_dir)
    d = root / f"global_step_{trainer.global_steps}"
    tmp = root / f".tmp_global_step_{trainer.global_steps}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    trainer.actor_rollout_wg.save_checkpoint(str(tmp / "actor"), trainer.global_steps)
    if trainer.use_critic:
        trainer.critic_wg.save_checkpoint(str(tmp / "critic"), trainer.global_steps)
    state = {"global_steps": trainer.global_steps, "loader": trainer.loader.state_dict(),
             "actor_version": trainer.actor_version, "actor_step": trainer.actor_step,
             "critic_version": trainer.critic_version if trainer.use_critic else None,
             "critic_step": trainer.critic_step if trainer.use_critic else None,
             "kl_coef": getattr(trainer.kl_ctrl_in_reward, "value", None),
             "rollout_rng": _rollout_rng_state(trainer.rollout), "torch_rng": torch.get_rng_state(),
             "numpy_rng": np.random.get_state(), "settings": _settings(trainer.config)}
    torch.save(state, tmp / "trainer_state.pt")
    if _is_async(trainer):  # the prompts in flight: finished groups kept, unfinished ones re-issued on resume
        trainer.tq.save_checkpoint(str(tmp / TRANSFER_QUEUE), metadata={"global_steps": trainer.global_steps})
    _write_manifest(tmp)
    shutil.rmtree(d, ignore_errors=True)
    os.replace(tmp, d)  # a killed save never leaves a half checkpoint behind
    trainer._unmarked_checkpoint = trainer.global_steps
    if mark:
        mark_latest(trainer)
    return d


def mark_latest(trainer) -> int | None:
    """Point `latest_checkpointed_iteration.txt` at the checkpoint saved last (if not yet), then prune old ones."""
    step = getattr(trainer, "_unmarked_checkpoint", None)
    if step is None:
        return None
    cfg = trainer.config.trainer
    root = Path(cfg.default_local_dir)
    _atomic_write(root / LATEST, str(step))
    trainer._unmarked_checkpoint = None
    keep = cfg.max_actor_ckpt_to_keep
    if keep:
        olds = sorted(root.glob("global_step_*"), key=lambda p: int(p.name.split("_")[-1]))[:-int(keep)]
        for p in olds:
            shutil.rmtree(p, ignore_errors=True)
    return step


def _atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` so that a reader sees the old content or the new one, never a torn file."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _write_manifest(folder: Path) -> None:
    files = {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}
    (folder / MANIFEST).write_text(json.dumps({"files": files}, indent=1))


def _is_async(trainer) -> bool:
    return str(trainer.config.trainer.v1.trainer_mode) != "sync" and hasattr(trainer, "tq")


def _settings(config) -> dict:
    return {k: OmegaConf.select(config, k) for k in RESUME_KEYS}


# ----------------------------------------------------------------------------------------------- load
def load_checkpoint(trainer) -> Path | None:
    """Restore `trainer` per `trainer.resume_mode`: auto (the latest, if any) | disable | resume_path."""
    cfg = trainer.config.trainer
    if cfg.resume_mode == "disable":
        return None
    d = _checkpoint_dir(cfg)
    if d is None:
        return None
    _check_manifest(d)
    state = _load_file(d / "trainer_state.pt", lambda p: torch.load(p, weights_only=False))
    _warn_changed_settings(trainer, d, state.get("settings"))
    for role in ("actor", "critic") if trainer.use_critic else ("actor",):
        _check_engine_files(d / role)
    _load_worker(d / "actor", lambda: trainer.actor_rollout_wg.load_checkpoint(str(d / "actor"), state["actor_version"]))
    trainer.actor_version = int(state["actor_version"])
    trainer.actor_step = int(state["global_steps"] if state.get("actor_step") is None else state["actor_step"])
    if trainer.use_critic:
        _load_worker(d / "critic", lambda: trainer.critic_wg.load_checkpoint(str(d / "critic"), state["critic_version"]))
        trainer.critic_version = int(state["critic_version"])
        trainer.critic_step = int(state["global_steps"] if state.get("critic_step") is None else state["critic_step"])
    trainer.global_steps = int(state["global_steps"])
    trainer.loader.load_state_dict(state["loader"])
    if _is_async(trainer) and (d / TRANSFER_QUEUE).exists():  # re-issued by the trainer's fit (verl: the same)
        _load_file(d / TRANSFER_QUEUE, lambda p: trainer.tq.load_checkpoint(str(p)))
    if trainer.kl_ctrl_in_reward is not None and state.get("kl_coef") is not None:
        trainer.kl_ctrl_in_reward.value = state["kl_coef"]
    _set_rollout_rng_state(trainer.rollout, state.get("rollout_rng"))
    torch.set_rng_state(state["torch_rng"])
    np.random.set_state(state["numpy_rng"])
    tqdm.write(f"resumed from {d} at global step {trainer.global_steps}")
    return d


def _checkpoint_dir(cfg) -> Path | None:
    """The folder to resume from, or None (auto mode, nothing saved yet)."""
    if cfg.resume_mode == "resume_path":
        if not cfg.resume_from_path:
            raise CheckpointError("trainer.resume_mode=resume_path needs trainer.resume_from_path=<global_step_k dir>.")
        d = Path(cfg.resume_from_path)
    else:
        latest = Path(cfg.default_local_dir) / LATEST
        if not latest.exists():
            return None
        text = latest.read_text().strip()
        if not text.isdigit():
            raise CheckpointError(f"{latest}: holds {text[:40]!r}, not a step number. Fix: write the number of the "
                                  f"global_step_<k> folder to resume from into it, or delete it to start fresh.")
        d = latest.parent / f"global_step_{int(text)}"
    if not (d / "trainer_state.pt").exists():
        what = "the folder does not exist" if not d.exists() else "it has no trainer_state.pt"
        raise CheckpointError(f"{d}: no checkpoint to resume from ({what}). {_FRESH}, or point "
                              f"{LATEST} / trainer.resume_from_path at a complete global_step_<k> folder.")
    return d


def _check_manifest(d: Path) -> None:
    """Every file the save wrote is there with its full size (checkpoints without a manifest pass)."""
    manifest = d / MANIFEST
    if not manifest.exists():
        return
    files = _load_file(manifest, lambda p: json.loads(p.read_text()))["files"]
    for rel, size in files.items():
        path = d / rel
        if not path.exists():
            raise CheckpointError(f"{path}: missing from the checkpoint (its manifest lists it). {_FRESH}, or resume "
                                  "from an earlier global_step_<k>.")
        actual = path.stat().st_size
        if actual != size:
            raise CheckpointError(f"{path}: {actual} bytes, but {size} were saved: the file is truncated or was "
                                  f"overwritten. {_FRESH}, or resume from an earlier global_step_<k>.")


def _check_engine_files(folder: Path) -> None:
    """Read the small files of an engine folder here first (DCP's `.metadata`, the per-rank extra state), so that
    a damaged one is named before the workers try (their loaders log tracebacks of their own)."""
    from torch.distributed.checkpoint import FileSystemReader

    if (folder / ".metadata").exists():
        _load_file(folder / ".metadata", lambda p: FileSystemReader(str(p.parent)).read_metadata())
    for extra in sorted(folder.glob("extra_state_*.pt")):
        _load_file(extra, lambda p: torch.load(p, weights_only=False))


def _load_errors() -> tuple:
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException, not an Exception

    return Exception, CheckpointException


def _load_file(path: Path, load):
    try:
        return load(path)
    except _load_errors() as e:  # torch/pickle/json raise many types for a damaged file
        raise CheckpointError(f"{path}: cannot be loaded ({type(e).__name__}: {_first_line(e)}). {_FRESH}, or "
                              "resume from an earlier global_step_<k>.") from e


def _load_worker(folder: Path, load) -> None:
    logging.disable(logging.CRITICAL)  # torch's checkpoint loader logs a traceback per failed try: the error says it
    try:
        load()
    except _load_errors() as e:  # the engine's own error (or a WorkerGroupError from a Ray rank around it)
        raise CheckpointError(f"{folder}: the engine state cannot be loaded ({type(e).__name__}: "
                              f"{_first_line(e)}). {_FRESH}, or resume from an earlier global_step_<k>.") from e
    finally:
        logging.disable(logging.NOTSET)


def _first_line(error: BaseException, n: int = 200) -> str:
    text = (str(error).strip().splitlines() or [""])[0]
    return text if len(text) <= n else text[: n - 3] + "..."


def _warn_changed_settings(trainer, d: Path, saved: dict | None) -> dict:
    """Say which batch-size / learning-rate settings differ from the checkpoint's; keep them on the trainer."""
    now = _settings(trainer.config)
    changed = {k: (saved[k], now[k]) for k in RESUME_KEYS
               if saved and k in saved and saved[k] != now[k] and (trainer.use_critic or not k.startswith("critic."))}
    trainer.resume_changes = changed
    if changed:
        parts = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changed.items())
        note = " The optimizer state restored from the checkpoint keeps its learning rate." \
            if any(k.endswith("optim.lr") for k in changed) else ""
        tqdm.write(f"minirl: warning: resuming {d} with settings that differ from the checkpoint's: {parts}.{note}",
                   file=sys.stderr)
    return changed


def _rollout_rng_state(rollout):
    gen = getattr(rollout, "generator", None) or getattr(rollout, "_generator", None)
    return gen.get_state() if isinstance(gen, torch.Generator) else None


def _set_rollout_rng_state(rollout, state):
    gen = getattr(rollout, "generator", None) or getattr(rollout, "_generator", None)
    if state is not None and isinstance(gen, torch.Generator):
        gen.set_state(state)
