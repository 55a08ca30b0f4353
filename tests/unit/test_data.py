"""Built-in tasks, RLDataset over parquet, collate, and GSM8K preprocessing on hand-written rows."""

import json
import os
import warnings

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from minirl.data import (
    DataError,
    RLDataset,
    collate_fn,
    collate_to_dataproto,
    make_arithmetic_rows,
    make_countdown_rows,
    make_sft_rows,
    resolve_data_files,
    write_parquet,
    write_task_parquet,
)
from minirl.data import gsm8k as gsm8k_prep
from minirl.data.tasks import split_of
from minirl.models import build_tokenizer
from minirl.utils.reward_score import default_compute_score


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("minirl_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINIRL_CACHE", str(root))
        yield root


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()  # the embedded tokenizer, in memory (test_models checks the saved copy)


def _template(tokenizer, content):
    messages = [{"role": "user", "content": content}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# --------------------------------------------------------------------------------------------- tasks


def test_arithmetic_rows_have_verl_format_and_right_answers():
    rows = make_arithmetic_rows(300, seed=0, split="train")
    assert len(rows) == 300
    row = rows[0]
    assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert row["data_source"] == "minirl/arithmetic" and row["ability"] == "math"
    assert row["reward_model"]["style"] == "rule"
    for index, row in enumerate(rows):
        (message,) = row["prompt"]
        a, b = message["content"].removeprefix("What is ").removesuffix("?").split("+")
        assert message["role"] == "user" and 10 <= int(a) <= 99 and 10 <= int(b) <= 99
        assert row["reward_model"]["ground_truth"] == str(int(a) + int(b))
        assert row["extra_info"] == {
            "split": "train",
            "index": index,
            "question": f"{a}+{b}",
            "answer": f"#### {int(a) + int(b)}",
        }
    assert len({r["extra_info"]["question"] for r in rows}) == 300  # distinct problems
    assert make_arithmetic_rows(300, seed=0, split="train") == rows  # deterministic
    assert make_arithmetic_rows(300, seed=1, split="train") != rows


def test_arithmetic_other_ops_and_digits():
    for op, fn in (("-", lambda a, b: a - b), ("*", lambda a, b: a * b)):
        for row in make_arithmetic_rows(50, seed=3, split="test", digits=3, op=op, digits_b=1):
            a, b = row["extra_info"]["question"].split(op)
            assert 100 <= int(a) <= 999 and 1 <= int(b) <= 9
            assert row["reward_model"]["ground_truth"] == str(fn(int(a), int(b)))
    with pytest.raises(ValueError, match="op must be one of"):
        make_arithmetic_rows(1, seed=0, split="train", op="^")
    with pytest.raises(ValueError, match="split must be one of"):
        make_arithmetic_rows(1, seed=0, split="dev")


def test_train_and_heldout_problems_never_overlap():
    train = make_arithmetic_rows(5000, seed=0, split="train")
    test = make_arithmetic_rows(500, seed=7, split="test")
    train_q = {r["extra_info"]["question"] for r in train}
    test_q = {r["extra_info"]["question"] for r in test}
    assert len(train_q) == 5000 and len(test_q) == 500 and not train_q & test_q
    swapped = {"+".join(reversed(q.split("+"))) for q in test_q}  # 34+12 is held out with 12+34
    assert not swapped & train_q
    assert all(split_of("+".join(sorted(q.split("+")))) == "test" for q in test_q)


def test_too_many_rows_repeat_with_a_warning():
    # 1-digit addition has 81 ordered problems; count the held-out ones directly
    pool = [
        f"{a}+{b}"
        for a in range(1, 10)
        for b in range(1, 10)
        if split_of(f"{min(a, b)}+{max(a, b)}") == "test"
    ]
    assert 0 < len(pool) < 20
    with pytest.warns(UserWarning, match=rf"only {len(pool)} distinct test problems.*20 rows"):
        rows = make_arithmetic_rows(20, seed=0, split="test", digits=1)
    assert len(rows) == 20 and {r["extra_info"]["question"] for r in rows} == set(pool)
    assert [r["extra_info"]["index"] for r in rows] == list(range(20))


def test_countdown_rows_are_solvable_and_disjoint():
    train = make_countdown_rows(400, seed=0, split="train")
    test = make_countdown_rows(100, seed=0, split="test")
    key = lambda r: (
        tuple(sorted(r["reward_model"]["ground_truth"]["numbers"])),
        r["reward_model"]["ground_truth"]["target"],
    )
    assert len({key(r) for r in train}) == 400 and not {key(r) for r in train} & {key(r) for r in test}
    for row in train + test:
        truth = row["reward_model"]["ground_truth"]
        assert row["data_source"] == "minirl/countdown" and 1 <= truth["target"] <= 100
        assert len(truth["numbers"]) == 3 and all(1 <= x <= 30 for x in truth["numbers"])
        content = row["prompt"][0]["content"]
        assert f"Make {truth['target']} from " in content and "<answer>" in content
        solution = f"<answer>{row['extra_info']['solution']}</answer>"
        assert default_compute_score(row["data_source"], solution, truth) == 1.0


def test_sft_rows_carry_the_reference_answer():
    for task in ("arithmetic", "countdown"):
        rows = make_sft_rows(task, n=20, seed=0)
        for row in rows:
            user, assistant = row["messages"]
            assert user == row["prompt"][0] and assistant["role"] == "assistant"
            truth = row["reward_model"]["ground_truth"]
            assert default_compute_score(row["data_source"], assistant["content"], truth) == 1.0
    assert make_sft_rows("arithmetic", n=1, seed=0)[0]["messages"][1]["content"].startswith("#### ")
    with pytest.raises(ValueError, match="known tasks"):
        make_sft_rows("sudoku", n=1)


def test_write_task_parquet_round_trips(tmp_path):
    train_path, val_path = write_task_parquet(
        "arithmetic", str(tmp_path / "arith"), n_train=64, n_val=16, seed=0
    )
    assert os.path.basename(train_path) == "train.parquet" and os.path.basename(val_path) == "test.parquet"
    assert pq.read_table(train_path).to_pylist() == make_arithmetic_rows(64, 0, "train")
    assert pq.read_table(val_path).to_pylist() == make_arithmetic_rows(16, 0, "test")
    cd_train, _ = write_task_parquet("countdown", str(tmp_path / "cd"), n_train=8, n_val=4, seed=0)
    assert pq.read_table(cd_train).to_pylist()[0]["reward_model"]["ground_truth"].keys() == {
        "target",
        "numbers",
    }
    assert not [f for f in os.listdir(tmp_path / "arith") if f.startswith(".tmp")]


def test_resolve_data_files_builds_builtin_tasks_once(cache, tmp_path):
    builtin = {"n_train": 100, "n_val": 20, "seed": 0, "digits": 2}
    train, val, plain = resolve_data_files(
        ["minirl://arithmetic/train", "minirl://arithmetic/val", str(tmp_path / "x.parquet")], builtin=builtin
    )
    assert train.startswith(str(cache)) and train.endswith("train.parquet") and val.endswith("test.parquet")
    assert plain == str(tmp_path / "x.parquet")
    assert pq.read_table(train).num_rows == 100 and pq.read_table(val).num_rows == 20
    stamp = os.path.getmtime(train)
    assert resolve_data_files("minirl://arithmetic/train", builtin=builtin) == [train]
    assert os.path.getmtime(train) == stamp  # cached, not regenerated
    other = resolve_data_files("minirl://arithmetic/train", builtin={**builtin, "digits": 3})[0]
    assert other != train
    (countdown,) = resolve_data_files("minirl://countdown/train", builtin=builtin)  # 'digits' is ignored
    assert pq.read_table(countdown).num_rows == 100


# ----------------------------------------------------------------------------------------- RLDataset


@pytest.fixture()
def rows_file(tmp_path):
    """Three hand-written rows in verl's format; the last prompt is long (96 + 19 template tokens)."""
    rows = [
        {
            "data_source": "minirl/arithmetic",
            "prompt": [{"role": "user", "content": "What is 12+34?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "46"},
            "extra_info": {"split": "train", "index": 7},
        },
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "2"},
            "extra_info": {"split": "train", "index": 8},
        },
        {
            "data_source": "minirl/arithmetic",
            "prompt": [{"role": "user", "content": "x" * 96}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "0"},
            "extra_info": {"split": "train", "index": 9},
        },
    ]
    return write_parquet(rows, str(tmp_path / "rows.parquet")), rows


def test_rldataset_items(rows_file, tokenizer):
    path, rows = rows_file
    ds = RLDataset(path, tokenizer, {"max_prompt_length": 200, "return_full_prompt": True})
    assert len(ds) == 3
    item = ds[0]
    for key in ("data_source", "prompt", "ability", "reward_model", "extra_info"):
        assert item[key] == rows[0][key]
    assert item["raw_prompt"] == rows[0]["prompt"]
    assert (
        item["raw_prompt_ids"] == _template(tokenizer, "What is 12+34?") and len(item["raw_prompt_ids"]) == 33
    )
    assert item["full_prompts"] == "<|im_start|>user\nWhat is 12+34?<|im_end|>\n<|im_start|>assistant\n"
    assert torch.equal(item["dummy_tensor"], torch.tensor([0], dtype=torch.uint8))
    assert (item["index"], item["tools_kwargs"], item["interaction_kwargs"]) == (7, {}, {})
    assert ds[1]["full_prompts"].startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n1+1?")
    item["raw_prompt"].append({"role": "user", "content": "mutated"})
    assert len(ds[0]["raw_prompt"]) == 1  # items are copies


def test_filter_overlong_prompts(rows_file, tokenizer):
    path, _ = rows_file
    ds = RLDataset(path, tokenizer, {"max_prompt_length": 64, "filter_overlong_prompts": True})
    assert [ds[i]["index"] for i in range(len(ds))] == [7, 8]
    with pytest.raises(ValueError, match="every one of the 3 prompts.*max_prompt_length=10"):
        RLDataset(path, tokenizer, {"max_prompt_length": 10, "filter_overlong_prompts": True})


def test_overlong_prompt_with_truncation_error_fails_at_load_and_says_what_to_change(rows_file, tokenizer):
    path, _ = rows_file
    with pytest.raises(DataError) as err:  # at load, not when the prompt's batch comes up
        RLDataset(path, tokenizer, {"max_prompt_length": 64, "filter_overlong_prompts": False})
    message = str(err.value)
    for part in (path, "row 2", "extra_info.index=9", "115-token prompt", "data.max_prompt_length=64", "1 of 3"):
        assert part in message
    assert "data.filter_overlong_prompts=True" in message and "data.truncation" in message
    ds = RLDataset(path, tokenizer, {"max_prompt_length": 115, "filter_overlong_prompts": False})
    assert len(ds) == 3 and len(ds[2]["raw_prompt_ids"]) == 115


def test_truncation_modes(rows_file, tokenizer):
    path, _ = rows_file
    full = _template(tokenizer, "x" * 96)
    cfg = {"max_prompt_length": 40, "filter_overlong_prompts": False}
    left = RLDataset(path, tokenizer, {**cfg, "truncation": "left"})[2]["raw_prompt_ids"]
    right = RLDataset(path, tokenizer, {**cfg, "truncation": "right"})[2]["raw_prompt_ids"]
    middle = RLDataset(path, tokenizer, {**cfg, "truncation": "middle"})[2]["raw_prompt_ids"]
    assert left == full[-40:] and right == full[:40] and middle == full[:20] + full[-20:]
    with pytest.raises(ValueError, match="data.truncation must be one of"):
        RLDataset(path, tokenizer, {**cfg, "truncation": "cut"})


def test_max_samples_and_prompt_key(rows_file, tokenizer):
    path, _ = rows_file
    ds = RLDataset(path, tokenizer, {"max_prompt_length": 200}, max_samples=2)
    assert [ds[i]["index"] for i in range(2)] == [7, 8]
    shuffled = RLDataset(
        path, tokenizer, {"max_prompt_length": 200, "shuffle": True, "seed": 1}, max_samples=2
    )
    assert len(shuffled) == 2
    with pytest.raises(DataError, match="no 'question' column .*data.prompt_key"):
        RLDataset(path, tokenizer, {"prompt_key": "question"})


def test_rldataset_reads_builtin_tasks_with_a_config_object(cache, tokenizer):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {"max_prompt_length": 64, "filter_overlong_prompts": False, "truncation": "error",
         "builtin": {"n_train": 50, "n_val": 10, "seed": 0, "digits": 2}}
    )  # fmt: skip
    ds = RLDataset("minirl://arithmetic/val", tokenizer, cfg)
    assert len(ds) == 10 and ds[3]["extra_info"]["split"] == "test" and ds[3]["index"] == 3


# ------------------------------------------------------------------------------------------- collate


def test_collate_shapes(rows_file, tokenizer):
    path, _ = rows_file
    ds = RLDataset(path, tokenizer, {"max_prompt_length": 200})
    batch = collate_fn([ds[0], ds[1], ds[2]])
    assert batch["dummy_tensor"].shape == (3, 1) and batch["dummy_tensor"].dtype == torch.uint8
    for key in ("data_source", "raw_prompt", "raw_prompt_ids", "reward_model", "extra_info", "index"):
        assert isinstance(batch[key], np.ndarray) and batch[key].dtype == object and batch[key].shape == (3,)
    assert batch["raw_prompt"][1] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1+1?"},
    ]
    assert batch["raw_prompt_ids"][0] == _template(tokenizer, "What is 12+34?")
    same_length = collate_fn([{"ids": [1, 2]}, {"ids": [3, 4]}])["ids"]  # must stay 1-D, one list per sample
    assert same_length.shape == (2,) and same_length[1] == [3, 4]
    data = collate_to_dataproto([ds[0], ds[1]])
    assert len(data) == 2 and "dummy_tensor" in data.batch
    assert list(data.non_tensor_batch["data_source"]) == ["minirl/arithmetic", "openai/gsm8k"]


# ----------------------------------------------------------------------------------- GSM8K preprocessing

PUBLIC_ROWS = [
    {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
        "altogether in April and May.\n#### 72",
    },
    {
        "question": "A shop sells 1,000 pens a day for 2 days. How many pens?",
        "answer": "1000*2=2000\n#### 2,000",
    },
]


def test_gsm8k_rows_map_to_verl_format():
    (first, second) = gsm8k_prep.preprocess(PUBLIC_ROWS, "train")
    assert first["data_source"] == "openai/gsm8k" and first["ability"] == "math"
    assert first["prompt"] == [
        {
            "role": "user",
            "content": PUBLIC_ROWS[0]["question"]
            + ' Let\'s think step by step and output the final answer after "####".',
        }
    ]
    assert first["reward_model"] == {"style": "rule", "ground_truth": "72"}
    assert first["extra_info"] == {
        "split": "train",
        "index": 0,
        "answer": PUBLIC_ROWS[0]["answer"],
        "question": PUBLIC_ROWS[0]["question"],
    }
    assert second["reward_model"]["ground_truth"] == "2000" and second["extra_info"]["index"] == 1
    assert gsm8k_prep.extract_solution("x\n#### -3") == "-3"
    with pytest.raises(ValueError, match="no '#### <number>' line"):
        gsm8k_prep.extract_solution("the answer is 72")
    with pytest.raises(KeyError, match="'answer'"):
        gsm8k_prep.process_row({"question": "q"}, 0, "train")
    assert (
        default_compute_score(first["data_source"], "...\n#### 72", first["reward_model"]["ground_truth"])
        == 1.0
    )


def test_gsm8k_script_on_files_and_folders(tmp_path, capsys):
    jsonl = tmp_path / "test.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in PUBLIC_ROWS))
    assert gsm8k_prep.main(["--input", str(jsonl), "--output", str(tmp_path / "out")]) == 0
    written = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()  # split taken from the file name
    assert written == gsm8k_prep.preprocess(PUBLIC_ROWS, "test")

    hub = tmp_path / "gsm8k" / "main"  # the hub dataset's layout
    write_parquet(PUBLIC_ROWS, str(hub / "train-00000-of-00001.parquet"))
    write_parquet(PUBLIC_ROWS[:1], str(hub / "test-00000-of-00001.parquet"))
    assert gsm8k_prep.main(["--input", str(tmp_path / "gsm8k"), "--output", str(tmp_path / "data")]) == 0
    assert pq.read_table(tmp_path / "data" / "train.parquet").num_rows == 2
    assert pq.read_table(tmp_path / "data" / "test.parquet").to_pylist()[0]["extra_info"]["split"] == "test"
    assert "train: 2 rows" in capsys.readouterr().out

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = RLDataset(
            str(tmp_path / "data" / "train.parquet"), build_tokenizer(), {"max_prompt_length": 512}
        )
    assert ds[0]["reward_model"]["ground_truth"] == "72"


# ----------------------------------------------------------------------- truncation reaches the rollout


@pytest.fixture(scope="module")
def spied_rollout():
    """The hf rollout of the embedded tiny model, recording the prompt ids of every request it gets."""
    import minirl.trainer.warm_start  # noqa: F401 (registers minirl://tiny-qwen2-sft)
    from minirl.config import load
    from minirl.models import resolve_model_path
    from minirl.workers.rollout.hf_rollout import HFRollout

    cfg = load(["actor_rollout_ref.model.path=minirl://tiny-qwen2", "actor_rollout_ref.rollout.n=2",
                "data.max_response_length=4", "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"])
    rollout = HFRollout(cfg.actor_rollout_ref.rollout, resolve_model_path(cfg.actor_rollout_ref.model.path))
    seen = []
    generate = rollout.generate

    def spy(prompts, sampling_params):
        seen.extend(list(p) for p in prompts)
        return generate(prompts, sampling_params)

    rollout.generate = spy
    return cfg, rollout, seen


@pytest.mark.parametrize("truncation", ["left", "right", "middle"])
def test_the_rollout_gets_the_ids_the_dataset_truncated(truncation, rows_file, tokenizer, spied_rollout):
    from minirl.agent_loop import AgentLoopManagerTQ, new_uids
    from minirl.trainer.ppo.replay_buffer import ReplayBuffer, submit_prompts
    from minirl.transfer_queue import TransferQueue, kv_batch_get_padded

    cfg, rollout, seen = spied_rollout
    path, _ = rows_file
    data_cfg = {"max_prompt_length": 40, "filter_overlong_prompts": False, "truncation": truncation}
    ds = RLDataset(path, tokenizer, data_cfg)
    full = _template(tokenizer, "x" * 96)  # row 2: 115 tokens, cut to 40
    expected = {"left": full[-40:], "right": full[:40], "middle": full[:20] + full[-20:]}[truncation]
    assert ds[2]["raw_prompt_ids"] == expected

    prompts = collate_to_dataproto([ds[i] for i in range(len(ds))])
    prompts.non_tensor_batch["uid"] = new_uids(len(prompts))
    prompts.meta_info.update(global_steps=1, validate=False)
    tq = TransferQueue()
    submit_prompts(tq, list(prompts.non_tensor_batch["uid"]), global_steps=1)
    seen.clear()
    AgentLoopManagerTQ(cfg, tokenizer, rollout, tq=tq).generate_sequences(prompts)
    # what the rollout was asked to continue: each prompt's dataset ids, twice (rollout.n=2)
    assert sorted(seen) == sorted([ds[i]["raw_prompt_ids"] for i in range(3) for _ in range(2)])
    assert expected in seen
    meta, _ = ReplayBuffer(tq).sample(global_steps=1, batch_size=3)
    out = kv_batch_get_padded(tq, meta, 40, 4, tokenizer.pad_token_id)
    trained = [out.batch["prompts"][i][out.batch["attention_mask"][i, :40].bool()].tolist() for i in range(len(out))]
    assert sorted(trained) == sorted(seen)  # and the padded batch the trainer learns from holds the same ids
