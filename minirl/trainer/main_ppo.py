"""Entry point: `python -m minirl.trainer.main_ppo key=value ...` or `minirl train key=value ...`.

verl: `main` (`verl/trainer/main_ppo.py:167`) composes the Hydra config, starts Ray and runs a
`TaskRunnerV1` (`verl/trainer/main_ppo.py:103`) actor whose `run` (`:133`) builds the tokenizer,
datasets, reward functions and the trainer, then calls `fit`. minirl's `TaskRunnerV1` does the same
steps in this process (the controller is the driver, not a Ray actor). Ray starts only when the
trainer uses Ray worker groups (`trainer.worker_group`, see `minirl.trainer.ppo.trainer_base`): then
`init_workers` calls `init_ray` with `ray_kwargs.ray_init` (a private local Ray, or the cluster at
`ray_kwargs.ray_init.address`), and `trainer.close()` kills the workers and stops a Ray it started.
"""

from __future__ import annotations

import os
import sys

from minirl.config import ConfigError, load
from minirl.config.validate import check_model_length


class TaskRunnerV1:
    """Builds everything a run needs from the config, then trains (verl: `TaskRunnerV1`)."""

    def build(self, config):
        """Tokenizer, datasets, reward managers and the trainer, with workers initialised."""
        address = config.ray_kwargs.ray_init.get("address")
        if address not in (None, "local") and config.trainer.worker_group != "inprocess":
            from minirl.single_controller.cluster_address import ClusterAddressError, check_cluster_address

            try:
                check_cluster_address(address)  # one line within seconds, before anything is imported or built
            except ClusterAddressError as e:
                raise ConfigError(str(e)) from None
        import torch
        import transformers

        from minirl.data.rl_dataset import RLDataset, collate_fn
        from minirl.data.tasks import resolve_data_files
        from minirl.models import load_checked, load_model_config, load_tokenizer, resolve_model_path
        from minirl.trainer.ppo import get_trainer_cls
        from minirl.trainer.warm_start import build_warm_start  # noqa: F401 (registers minirl://tiny-qwen2-sft)

        transformers.utils.logging.disable_progress_bar()  # one bar per weight load is noise in a notebook
        transformers.utils.logging.set_verbosity_error()  # the critic's new value head is expected
        torch.manual_seed(int(config.trainer.seed))
        model = config.actor_rollout_ref.model
        check_output_dir(config.trainer.default_local_dir, "trainer.default_local_dir")
        model.path = resolve_model_path(model.path)
        config.critic.model.path = resolve_model_path(config.critic.model.path, "critic.model.path")
        tokenizer_key = "actor_rollout_ref.model.tokenizer_path" if model.tokenizer_path else "actor_rollout_ref.model.path"
        tokenizer = load_checked(load_tokenizer, model.tokenizer_path or model.path, tokenizer_key, "tokenizer")
        hf_config = load_checked(load_model_config, model.path, "actor_rollout_ref.model.path", "config")
        check_model_length(config, getattr(hf_config, "max_position_embeddings", 10**9))
        train_files = _existing(resolve_data_files(config.data.train_files, config.data.builtin), "data.train_files")
        val_files = _existing(resolve_data_files(config.data.val_files, config.data.builtin), "data.val_files") \
            if config.data.val_files else None
        train = RLDataset(train_files, tokenizer, config.data, max_samples=int(config.data.train_max_samples))
        _check_one_batch(train, int(config.data.train_batch_size))
        _check_warmup(config, train)
        val = RLDataset(val_files, tokenizer, config.data, max_samples=int(config.data.val_max_samples)) if val_files else None
        trainer_cls = get_trainer_cls(config.trainer.v1.trainer_mode)
        # the reward loop (reward function checked, reward-model server started) is built first by init_workers
        trainer = trainer_cls(config, tokenizer, train, val, collate_fn)
        try:
            trainer.init_workers()
        except BaseException:
            trainer.close()  # a failed start must not leave Ray workers behind
            raise
        return trainer

    def run(self, config):
        trainer = self.build(config)
        try:
            trainer.fit()
        finally:
            trainer.close()
            _plot_reward_curve(trainer)
        return trainer


def _plot_reward_curve(trainer):
    """reward_curve.png in default_local_dir: training score and validation accuracy per step."""
    rows = [r for r in trainer.history if "critic/score/mean" in r or any(k.startswith("val-core/") for k in r)]
    if not rows or "file" not in list(trainer.config.trainer.logger):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    tr = [(r["step"], r["critic/score/mean"]) for r in rows if "critic/score/mean" in r]
    if tr:
        ax.plot(*zip(*tr), label="train critic/score/mean")
    for key in sorted({k for r in rows for k in r if k.startswith("val-core/") and "/acc/" in k}):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        ax.plot(*zip(*pts), marker="o", label=key)
    ax.set_xlabel("step")
    ax.set_ylabel("score")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(trainer.config.trainer.default_local_dir, "reward_curve.png")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _existing(paths: list[str], key: str) -> list[str]:
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise FileNotFoundError(f"{key}: no such file {missing[0]!r}. Fix: give parquet files in verl's row format "
                                "(see `python -m minirl.data.gsm8k --help`) or minirl://arithmetic/train, "
                                "minirl://countdown/train for an embedded task.")
    return paths


def check_output_dir(path, key: str) -> None:
    """A `ConfigError` (one line) unless `path` is, or can become, a writable directory: checked before any work."""
    path = os.path.abspath(os.path.expanduser(str(path)))
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise ConfigError(f"{key}={path!r}: {probe} is a file, so no directory can be made there. Fix: {key}=<a "
                          "directory path>.")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}={path!r}: {probe} is not writable by this user. Fix: {key}=<a directory you can "
                          "write>.")


def _check_one_batch(dataset, batch_size: int) -> None:
    """At least one full batch of prompts, or a `DataError` naming the files (before any model is built)."""
    from minirl.data.rl_dataset import DataError

    if len(dataset) >= batch_size:
        return
    dropped = getattr(dataset, "dropped_overlong", 0)
    why = f" after dropping {dropped} over-long prompts" if dropped else ""
    raise DataError(f"{', '.join(dataset.data_files)}: {len(dataset)} prompts{why}, fewer than one batch "
                    f"(data.train_batch_size={batch_size}). Fix: lower data.train_batch_size or give more rows "
                    "(data.builtin.n_train for a minirl:// task).")


def _check_warmup(config, dataset) -> None:
    """An async trainer's warm-up must fit in one pass over the data (else it generates prompts twice, silently)."""
    mode = str(config.trainer.v1.trainer_mode)
    if mode not in ("colocate_async", "separate_async"):
        return
    warmup = int(config.trainer.v1[mode].num_warmup_batches)
    size = int(config.data.train_batch_size)
    batches = len(dataset) // size
    if warmup + 1 > batches:
        raise ConfigError(f"trainer.v1.{mode}.num_warmup_batches={warmup}: the first step needs {warmup + 1} batches "
                          f"of data.train_batch_size={size} prompts in flight ({warmup} ahead + its own), but the "
                          f"training data ({', '.join(dataset.data_files)}) holds {len(dataset)} prompts, "
                          f"{batches} batch(es). Fix: trainer.v1.{mode}.num_warmup_batches={max(0, batches - 1)}, or "
                          "more rows (data.builtin.n_train for a minirl:// task).")


# Errors that mean "the run was set up wrong", reported in one line; anything else keeps its traceback.
USER_ERRORS = (ConfigError, FileNotFoundError, NotADirectoryError)


def run_errors() -> tuple:
    """Everything `minirl train` (and `minirl demo`) reports in one line, exit 2: `USER_ERRORS`, bad data, a
    damaged checkpoint, a NaN/inf that stopped the run, a tool config that does not build, a reward function
    or reward-model server that fails, a rollout server that died or hung (imported here: they live in
    modules that import torch)."""
    from minirl.data.rl_dataset import DataError
    from minirl.tools.tool_registry import ToolConfigError
    from minirl.trainer.ppo.checkpointing import CheckpointError
    from minirl.trainer.ppo.finite_checks import NonFiniteError
    from minirl.workers.reward import RewardFunctionError, RewardModelServerError
    from minirl.workers.rollout.rpc import ServerLost

    return (*USER_ERRORS, DataError, CheckpointError, NonFiniteError, ToolConfigError, RewardFunctionError,
            RewardModelServerError, ServerLost)


def user_error(error: BaseException, errors: tuple | None = None) -> BaseException | None:
    """`error`, or the first error it was raised `from` that is one of `run_errors()` (a wrapper such as
    'background generation failed: ...' must not turn a one-line error back into a traceback); else None."""
    errors = errors or run_errors()
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, errors):
            return error
        seen.add(id(error))
        error = error.__cause__
    return None


def run_command(prog: str, fn, debug_hint: bool = False):
    """Run `fn()` as the command `prog`: returns `(result, None)`, or `(None, exit code)` after one line on stderr.

    Ctrl-C or SIGTERM (`stop_on_signals`) prints the stop line (130 / 143); an error `user_error` recognises
    prints `prog: <error>` (2). `MINIRL_DEBUG=1` lets either raise with its traceback."""
    from minirl.utils.interrupt import stop_on_signals, stopped_line

    try:
        with stop_on_signals():
            return fn(), None
    except KeyboardInterrupt as e:  # the servers and workers are stopped by now (the trainers' `finally`)
        if os.environ.get("MINIRL_DEBUG") == "1":
            raise
        line, code = stopped_line(prog, e)
        print(line, file=sys.stderr)
        return None, code
    except Exception as e:
        error = user_error(e)
        if error is None or os.environ.get("MINIRL_DEBUG") == "1":
            raise
        print(f"{prog}: {error}", file=sys.stderr)
        if debug_hint:
            print("(set MINIRL_DEBUG=1 for the traceback)", file=sys.stderr)
        return None, 2


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    _, code = run_command("minirl train", lambda: TaskRunnerV1().run(load(argv)), debug_hint=True)
    return code or 0

if __name__ == "__main__":
    sys.exit(main())
