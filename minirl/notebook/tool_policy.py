"""A tool-using policy in seconds, for the chapters, labs and tests that need one: SFT on a few tool episodes.

A randomly initialised model never writes `<tool_call>`, so a multi-turn session with it ends after one
turn. Chapter 11, lab 04 and the vLLM multi-turn test need a model that calls the calculator: this
module trains the embedded model with minirl's own SFT (`minirl.trainer.sft_trainer.run_sft`, the same
path as `minirl sft`) on a handful of multiply_tool problems, every row a full tool episode
(`data.builtin.tool_fraction=1`), until it has memorised them. It generalises little (that is what the
GRPO benchmark is for, `benchmarks/tool_task.py`), but on its training problems it writes the call,
reads the result and answers, greedily, with the real calculator in the loop.

The result is cached under `$MINIRL_CACHE/tool_policy/<settings hash>/hf_model` and reused.
No verl counterpart (verl has no notebooks).

    from minirl.notebook.tool_policy import tool_policy, tool_agent_overrides
    path, rows = tool_policy()                        # model dir, the problems it learned
    cfg = load(tool_agent_overrides(path))            # multi_turn on, the calculator, the task's lengths
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

__all__ = ["TOOL_TASK_OVERRIDES", "tool_agent_overrides", "tool_policy", "tool_problems"]

TOOL_TASK_OVERRIDES = ["data.builtin.digits=3", "data.max_prompt_length=40", "data.max_response_length=128"]
"""The multiply_tool task's shape: 3-digit x 2-digit products; a tool episode takes about 105 response tokens."""


def tool_problems(problems: int = 8, seed: int = 0) -> list[dict]:
    """The multiply_tool training rows `tool_policy` learns (the first `problems` of the task's train split)."""
    from minirl.data.tasks import make_multiply_tool_rows

    return make_multiply_tool_rows(problems, seed, "train", digits=3)


def tool_policy(problems: int = 8, steps: int = 160, lr: float = 3e-3, seed: int = 0, quiet: bool = True):
    """Train (or reuse) the embedded model on `problems` tool episodes; returns `(model_dir, rows)`."""
    from minirl.models.tiny import default_cache_dir

    settings = {"problems": problems, "steps": steps, "lr": lr, "seed": seed, "v": 1}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    out = os.path.join(default_cache_dir(), "tool_policy", digest)
    model_dir = os.path.join(out, "hf_model")
    from minirl.utils.py_functional import file_lock

    os.makedirs(os.path.dirname(out), exist_ok=True)
    with file_lock(out + ".lock"):  # two test processes: one builds, the other waits and reuses it
        if not os.path.isfile(os.path.join(model_dir, "config.json")):
            from minirl.trainer.sft_trainer import run_sft

            tmp = f"{out}.tmp-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            run_sft([f"trainer.default_local_dir={tmp}", "data.train_files=minirl://multiply_tool/train",
                     f"data.builtin.n_train={problems}", f"data.builtin.seed={seed}", "data.builtin.tool_fraction=1.0",
                     f"data.train_batch_size={problems}", f"data.micro_batch_size_per_gpu={problems}",
                     f"optim.lr={lr}", f"trainer.total_training_steps={steps}", f"trainer.test_freq={steps}",
                     "data.val_max_samples=1", "trainer.stop_at_val_score=null", f"trainer.seed={seed}",
                     *TOOL_TASK_OVERRIDES], quiet=quiet,
                    progress=("building the tool-using policy", (f"SFT on {problems} calculator episodes, {steps} steps, "
                              "about 20-60 s on 2 cores; cached afterwards")))
            shutil.rmtree(out, ignore_errors=True)
            os.rename(tmp, out)  # atomic: a reader sees no model or a complete one
    return model_dir, tool_problems(problems, seed)


def tool_agent_overrides(model_path: str | None = None, *extra: str) -> list[str]:
    """Config overrides for tool-agent sessions: multi_turn on, the calculator's tool config, the task's lengths."""
    from minirl.tools import CALCULATOR_TOOL_CONFIG

    mt = "actor_rollout_ref.rollout.multi_turn"
    out = [f"{mt}.enable=True", f"{mt}.tool_config_path={CALCULATOR_TOOL_CONFIG}", *TOOL_TASK_OVERRIDES]
    if model_path:
        out.append(f"actor_rollout_ref.model.path={model_path}")
    return out + list(extra)
