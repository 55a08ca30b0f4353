"""Bad reward functions: a bad file fails at start-up in one line (exit 2); a bad result is contained.

Start-up ([Q] 3): a missing file, a syntax or import error, a missing or non-callable name, a wrong
signature, a bad reward setting -> `minirl train` exits 2 before any step with one line that names
the file (or key) and the fix. Per sample: None, a string, NaN, inf, a dict without "score", an
exception, a timeout, a batch result of the wrong length or type -> the sample is scored 0, the
failure is counted (`reward_failures`, the metric `reward/failures`) and the first one is printed
once, with the sample, its data_source and the function's file:line.
"""
import copy
import re
import textwrap
import time

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from minirl.config import load
from minirl.protocol import DataProto
from minirl.trainer.main_ppo import main
from minirl.workers.reward import RewardLoopManager, collect_reward_info, parse_score

TINY = ["actor_rollout_ref.model.path=minirl://tiny-qwen2"]  # start-up checks need no trained model


def write(tmp_path, source: str, name: str = "my_reward.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


GOOD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(solution_str.strip().endswith(str(ground_truth)))
"""

# ------------------------------------------------------------------------------------- at start-up

STARTUP = {
    "missing file": (None, [], r"my_reward\.py does not exist\. Fix: give the path of a \.py file"),
    "syntax error": ("def compute_score(data_source, solution_str:\n    return 1\n", [],
                     r"my_reward\.py:1: SyntaxError: .*Fix: correct the file"),
    "import error": ("import no_such_module_xyz\n" + GOOD, [],
                     (r"my_reward\.py:1: importing it raised ModuleNotFoundError: No module named 'no_such_module_xyz'"
                      r"\. Fix: install the missing module")),
    "error at import": ("x = 1 / 0\n" + GOOD, [], r"my_reward\.py:1: importing it raised ZeroDivisionError"),
    "missing name": (GOOD, ["reward.custom_reward_function.name=score_fn"],
                     r"name='score_fn' is not defined in .*my_reward\.py \(functions there: \['compute_score'\]\)\. Fix:"),
    "not callable": ("compute_score = 0.5\n", [], r"name='compute_score' is a float, not a function"),
    "wrong signature": ("def compute_score(text):\n    return 1.0\n", [],
                        (r"compute_score\(text\) \(.*my_reward\.py:1\) cannot be called the way the 'naive' reward "
                         r"manager calls it.*Fix: def compute_score\(data_source, solution_str, ground_truth, extra_info")),
    "single-sample function, batch manager": (GOOD, ["reward.reward_manager.name=batch"],
                                              (r"cannot be called the way the 'batch' reward manager calls it, "
                                               r"compute_score\(data_sources=\.\.\.")),
    "dapo penalty without max_resp_len": (None, ["reward.reward_manager.name=dapo",
                                                 "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
                                                 "+reward.reward_kwargs.overlong_buffer_cfg.len=4"],
                                          r"overlong_buffer_cfg\.enable=True needs reward\.reward_kwargs\.max_resp_len"),
    "reward model without a path": (None, ["reward.reward_model.enable=true"],
                                    r"reward\.reward_model\.enable=True needs reward\.reward_model\.model_path"),
    "reward model path not a model": (None, ["reward.reward_model.enable=true", "reward.reward_model.model_path={tmp}"],
                                      r"model_path='.*' is not a model directory \(no config\.json\)"),
    "timeout not positive": (None, ["reward.timeout=0"], r"reward\.timeout=0(\.0)? must be > 0"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(STARTUP))
def test_bad_reward_setup_fails_at_startup_in_one_line(case, tmp_path, capsys):
    source, overrides, pattern = STARTUP[case]
    args = TINY + [f"trainer.default_local_dir={tmp_path / 'run'}", "trainer.logger=[file]"]
    if source is not None or case == "missing file":
        path = write(tmp_path, source) if source is not None else str(tmp_path / "my_reward.py")
        args.append(f"reward.custom_reward_function.path={path}")
    args += [o.format(tmp=tmp_path) for o in overrides]
    assert main(args) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err and len(lines) <= 2, err  # the message, then the MINIRL_DEBUG hint
    assert re.search(pattern, lines[0]), lines[0]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no step ran


# -------------------------------------------------------------------------------------- per sample


def make_batch(tokenizer, responses: list[str], ground_truths: list[str]) -> DataProto:
    """A padded batch like the trainer's: 2-token prompts, right-padded responses, verl's row fields."""
    ids = [tokenizer(r, add_special_tokens=False)["input_ids"] for r in responses]
    R = max(1, max(len(x) for x in ids))
    responses_t = torch.full((len(ids), R), tokenizer.pad_token_id)
    mask = torch.zeros((len(ids), 2 + R), dtype=torch.int64)
    mask[:, :2] = 1
    for i, x in enumerate(ids):
        responses_t[i, :len(x)] = torch.tensor(x, dtype=torch.long)
        mask[i, 2:2 + len(x)] = 1
    n = len(ids)
    return DataProto.from_dict(
        tensors={"prompts": torch.full((n, 2), 65), "responses": responses_t, "attention_mask": mask},
        non_tensors={"data_source": ["minirl/arithmetic"] * n,
                     "reward_model": [{"ground_truth": g} for g in ground_truths],
                     "extra_info": [{"index": 10 + i} for i in range(n)], "uid": [f"u{i}" for i in range(n)],
                     "session_id": [0] * n, "raw_prompt": [[{"role": "user", "content": "q"}]] * n})


@pytest.fixture(scope="module")
def tokenizer():
    from minirl.models import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="module")
def base_config():
    return load(TINY)


def config_with(base, **keys):
    """A copy of `base` with dotted `keys` set (composing a config per test costs a second)."""
    cfg = copy.deepcopy(base)
    for key, value in keys.items():
        OmegaConf.update(cfg, key.replace("__", "."), value)
    return cfg


def score(tokenizer, tmp_path, source: str, responses, truths, base, **keys):
    cfg = config_with(base, reward__custom_reward_function__path=write(tmp_path, source), **keys)
    manager = RewardLoopManager(cfg, tokenizer)
    data = make_batch(tokenizer, responses, truths)
    out = manager.compute_rm_score(data)
    data.union(out)
    return data, collect_reward_info(data), manager


RESPONSES, TRUTHS = ["#### 12", "#### 7", "#### 30"], ["12", "8", "30"]
CONTAINED = {  # body of compute_score (for the sample whose ground truth is "8") -> what the message says
    "None": ("return None", r"returned None"),
    "a string": ("return '0.5'", r"returned str '0\.5'; a score must be a number"),
    "nan": ("return float('nan')", r"returned nan; a score must be finite"),
    "inf": ("return float('inf')", r"returned inf; a score must be finite"),
    "dict without score": ("return {'acc': 1.0}", r"returned a dict without 'score' \(keys: \['acc'\]\)"),
    "dict with nan score": ("return {'score': float('nan')}", r"returned score=nan"),
    "an exception": ("raise KeyError('boom')", r"raised KeyError: 'boom' at line 5"),
    "a list": ("return [1.0]", r"returned list \[1\.0\]"),
}


@pytest.mark.parametrize("case", list(CONTAINED))
def test_bad_reward_output_is_scored_zero_counted_and_reported_once(case, tokenizer, base_config, tmp_path, capsys):
    body, pattern = CONTAINED[case]
    source = f"""
    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if ground_truth != "8":
            return float(solution_str.strip() == "#### " + ground_truth)
        {body}
    """
    data, metrics, manager = score(tokenizer, tmp_path, source, RESPONSES, TRUTHS, base_config)
    assert data.batch["rm_scores"].sum(-1).tolist() == [1.0, 0.0, 1.0]  # the bad sample scores 0, the others count
    assert torch.isfinite(data.batch["rm_scores"]).all()
    assert metrics["reward/failures"] == 1 and manager.failures.count == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "minirl reward: sample u1_0 (dataset index 11, data_source 'minirl/arithmetic'): compute_score (")
    assert re.search(pattern, err[0]) and re.search(r"my_reward\.py:2\) ", err[0]), err[0]
    compute_again = manager.compute_rm_score(make_batch(tokenizer, RESPONSES, TRUTHS))
    assert compute_again.meta_info["reward_failures"] == 1 and capsys.readouterr().err == ""  # printed once per run


def test_timeout_scores_zero_and_abandons_the_call(tokenizer, base_config, tmp_path, capsys):
    source = """
    import time
    DONE = []
    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if ground_truth == "8":
            time.sleep(3)
            DONE.append(1)
        return 1.0
    """
    t0 = time.monotonic()
    data, metrics, _ = score(tokenizer, tmp_path, source, RESPONSES, TRUTHS, base_config, reward__timeout=0.3)
    assert time.monotonic() - t0 < 3  # the batch did not wait for the hung call
    assert data.batch["rm_scores"].sum(-1).tolist() == [1.0, 0.0, 1.0] and metrics["reward/failures"] == 1
    assert "timed out after 0.3 s (reward.timeout" in capsys.readouterr().err


def test_slow_calls_run_concurrently(tokenizer, base_config, tmp_path):
    """One slow function does not serialise the batch: the calls' time intervals overlap."""
    source = """
    import time
    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        time.sleep(0.3)
        return 1.0
    """
    cfg = config_with(base_config, reward__custom_reward_function__path=write(tmp_path, source))
    out = RewardLoopManager(cfg, tokenizer).compute_rm_score(make_batch(tokenizer, RESPONSES * 2, TRUTHS * 2))
    timing = out.meta_info["score_timing"]
    assert max(t["score_start"] for t in timing) < min(t["score_end"] for t in timing)


BATCH = {  # a batch function's result -> what the message says (every sample of the call fails)
    "wrong length": ("return [1.0] * (len(solution_strs) - 1)", r"returned 2 scores for 3 samples"),
    "None": ("return None", r"returned NoneType None, not a list of scores"),
    "raises": ("raise RuntimeError('down')", r"raised RuntimeError: down"),
}


@pytest.mark.parametrize("case", list(BATCH))
def test_bad_batch_result_is_contained(case, tokenizer, base_config, tmp_path, capsys):
    body, pattern = BATCH[case]
    source = f"""
    def compute_score(data_sources, solution_strs, ground_truths, extra_infos):
        {body}
    """
    data, metrics, _ = score(tokenizer, tmp_path, source, RESPONSES, TRUTHS, base_config)  # data_sources: batch
    assert data.batch["rm_scores"].abs().sum() == 0 and metrics["reward/failures"] == 3
    err = capsys.readouterr().err
    assert re.search(pattern, err) and "#0 of 3 in the call" in err and err.count("minirl reward:") == 1


def test_batch_entry_that_is_bad_fails_alone(tokenizer, base_config, tmp_path):
    source = """
    def compute_score(data_sources, solution_strs, ground_truths, extra_infos):
        return [1.0, None, {"score": 0.5, "fmt": 1}]
    """
    data, metrics, _ = score(tokenizer, tmp_path, source, RESPONSES, TRUTHS, base_config)
    assert data.batch["rm_scores"].sum(-1).tolist() == [1.0, 0.0, 0.5] and metrics["reward/failures"] == 1


def test_parse_score_accepts_numbers_and_score_dicts():
    assert parse_score(1) == (1.0, {"acc": 1.0})
    assert parse_score(np.float32(0.25)) == (0.25, {"acc": 0.25})
    assert parse_score(torch.tensor(0.5)) == (0.5, {"acc": 0.5})
    assert parse_score({"score": 2, "fmt": 1.0}) == (2.0, {"score": 2.0, "fmt": 1.0})
