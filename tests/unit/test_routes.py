"""docs/routes.md's Day-7 walk of verl's GSM8K GRPO script says what minirl does with each key: it must stay true.

The walk's table has one row per key that `examples/grpo_trainer/run_qwen3_4b_fsdp.sh` sets at the pinned
commit (the list below, in the script's order). Its last column says what minirl does with the key, in one
of six forms, and each is checked against minirl itself:

- `read by <files>`: a real training step with the script's keys (at laptop sizes) records which minirl files
  read the key (`minirl.config.introspect.record_config_reads`); config validation aside, exactly those files.
- `via <key>`: the key is interpolated into `<key>`: loading the script's value puts it there.
- `default only`: the script's value loads; any other value is rejected (not implemented).
- `rejected`: loading the key with the script's value fails with one `ConfigError` line.
- `unknown key`: minirl's schema has no such key (`ConfigError`: unknown config key).
- `vLLM rollout`: a vLLM engine argument (the vLLM venv's business); the file the row names must mention it.

verl's column is checked by `minirl anchors check` (tests/unit/test_anchors.py), like every citation.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROUTES = ROOT / "docs" / "routes.md"

SCRIPT_KEYS = [  # examples/grpo_trainer/run_qwen3_4b_fsdp.sh at 1dda039b9c63: DATA, MODEL, ACTOR, ROLLOUT, REF, TRAINER, RAY
    "algorithm.adv_estimator", "data.train_files", "data.val_files", "data.train_batch_size", "data.max_prompt_length",
    "data.max_response_length", "data.filter_overlong_prompts", "data.truncation", "algorithm.use_kl_in_reward",
    "actor_rollout_ref.model.path", "actor_rollout_ref.model.use_remove_padding",
    "actor_rollout_ref.model.enable_gradient_checkpointing",
    "actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "actor_rollout_ref.actor.use_kl_loss",
    "actor_rollout_ref.actor.kl_loss_coef", "actor_rollout_ref.actor.kl_loss_type", "actor_rollout_ref.actor.entropy_coeff",
    "actor_rollout_ref.actor.fsdp_config.param_offload", "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "actor_rollout_ref.actor.use_dynamic_bsz",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.gpu_memory_utilization",
    "actor_rollout_ref.rollout.enable_chunked_prefill", "actor_rollout_ref.rollout.enforce_eager",
    "actor_rollout_ref.rollout.free_cache_engine", "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes", "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "actor_rollout_ref.ref.fsdp_config.param_offload",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz", "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
    "trainer.critic_warmup", "trainer.logger", "trainer.project_name", "trainer.experiment_name",
    "trainer.n_gpus_per_node", "trainer.nnodes", "trainer.save_freq", "trainer.test_freq", "trainer.total_epochs",
    "ray_kwargs.ray_init.runtime_env.py_executable",
]

# The script's sizes are an 8-GPU node's; the run uses these instead (the other read-by keys keep the script's value).
LAPTOP = {
    "data.train_files": "minirl://arithmetic/train", "data.val_files": "minirl://arithmetic/val",
    "data.train_batch_size": "4", "data.max_prompt_length": "40", "actor_rollout_ref.model.path": "minirl://tiny-qwen2",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "2", "trainer.n_gpus_per_node": "1",
}
KINDS = ("read by", "via", "default only", "rejected", "unknown key", "vLLM rollout")


def day7_rows() -> list[dict]:
    """The Day-7 table: key, the script's value, and minirl's column (its kind and the code spans it names)."""
    section = ROUTES.read_text().split("## Day 7:", 1)[1]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != 5 or not cells[0].startswith("`") or cells[0] == "key":
            continue
        minirl = cells[4]
        kind = next((k for k in KINDS if minirl.startswith(k)), None)
        rows.append({"key": cells[0].strip("`"), "value": cells[1].strip("`"), "kind": kind, "text": minirl,
                     "spans": re.findall(r"`([^`]+)`", minirl)})
    return rows


def test_day7_covers_every_key_of_the_script_in_its_order():
    rows = day7_rows()
    assert [r["key"] for r in rows] == SCRIPT_KEYS
    unknown = [r["key"] for r in rows if r["kind"] is None]
    assert not unknown, f"docs/routes.md Day 7: minirl's column must start with one of {KINDS}: {unknown}"


def test_day7_rejected_unknown_default_and_via_rows_hold():
    from omegaconf import OmegaConf

    from minirl.config import ConfigError, load

    for r in day7_rows():
        override = f"{r['key']}={r['value']}"
        if r["kind"] in ("rejected", "unknown key"):
            with pytest.raises(ConfigError) as err:
                load([override])
            message = str(err.value)
            assert "Fix:" in message, f"{override}: the error does not say how to fix it: {message}"
            if r["kind"] == "unknown key":
                assert f"unknown config key '{r['key']}'" in message, message
        elif r["kind"] == "default only":
            load([override])
            with pytest.raises(ConfigError):
                load([f"{r['key']}={'False' if r['value'] == 'True' else 'True'}"])
        elif r["kind"] == "via":
            target = r["spans"][0]
            assert str(r["value"]) in str(OmegaConf.select(load([override]), target)), (override, target)
        elif r["kind"] == "vLLM rollout":
            named = [s for s in r["spans"] if s.endswith(".py")]
            for path in named:
                assert r["key"].rsplit(".", 1)[1] in (ROOT / path).read_text(), (r["key"], path)


@pytest.mark.slow
def test_day7_read_by_rows_match_a_real_run():
    from minirl.config.introspect import config_readers
    from minirl.notebook import small_run

    rows = [r for r in day7_rows() if r["kind"] == "read by"]
    overrides = [f"{r['key']}={LAPTOP.get(r['key'], r['value'])}" for r in rows]
    run = small_run([*overrides, "trainer.total_training_steps=1", "data.val_max_samples=8"],
                    model=LAPTOP["actor_rollout_ref.model.path"], train_batch_size=4, n=5, ppo_mini_batch_size=2,
                    micro_batch_size=2, response_length=12, steps=1)
    wrong = {}
    for r in rows:
        readers = config_readers(run.config_reads, r["key"])
        seen = {f for component, files in readers.items() if component != "config validation" for f in files}
        said = {s for s in r["spans"] if s.startswith("minirl/")}
        if seen != said:
            wrong[r["key"]] = {"the table says": sorted(said), "the run read it in": sorted(seen)}
    assert not wrong, f"docs/routes.md Day 7 disagrees with a run: {wrong}"
