"""The embedded tiny model: deterministic atomic build, offline reload with identical ids and logits, critic."""

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file

from minirl.models import (
    TINY_PRESETS,
    ModelPathError,
    build_tiny_model,
    build_tokenizer,
    build_value_model,
    load_causal_lm,
    load_model_config,
    load_tokenizer,
    make_tiny_model,
    resolve_model_path,
)
from minirl.models.tiny import MARKER_FILE

TEXTS = [
    "What is 12+34?",
    "#### 57",
    "Make 16 from 3 5 2 using + - * / once each. Answer <answer>(3+5)*2</answer>.",
    "  two spaces,\ttabs\r\nand newlines\n\n",
    "I'll don't we've 1,234.5 -7",
    "unicode: héllo wörld, 日本語, emoji 😀",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A private MINIRL_CACHE for this file; the default model is built once into it."""
    root = tmp_path_factory.mktemp("minirl_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINIRL_CACHE", str(root))
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield root


@pytest.fixture(scope="module")
def model_dir(cache):
    return build_tiny_model("tiny-qwen2")


def test_presets_have_head_dim_at_least_32():
    for name, preset in TINY_PRESETS.items():
        head_dim = preset["hidden_size"] // preset["num_attention_heads"]
        assert preset["hidden_size"] % preset["num_attention_heads"] == 0, name
        assert head_dim >= 32, (name, head_dim)  # vLLM's CPU attention rejects head size 16
        assert preset["num_attention_heads"] % preset["num_key_value_heads"] == 0, name


def test_build_writes_a_complete_checkpoint(model_dir, cache):
    assert model_dir == os.path.join(str(cache), "models", "tiny-qwen2")
    files = set(os.listdir(model_dir))
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    assert {"generation_config.json", MARKER_FILE} <= files
    assert not [f for f in os.listdir(os.path.dirname(model_dir)) if ".building-" in f]  # temp dir renamed
    config = load_model_config(model_dir)
    assert config.model_type == "qwen2" and config.architectures == ["Qwen2ForCausalLM"]
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (128, 2, 4)
    assert config.num_key_value_heads == 2 and config.intermediate_size == 384 and config.tie_word_embeddings
    assert config.hidden_size // config.num_attention_heads == 32
    assert config.vocab_size == 259 and config.eos_token_id == 258 and config.pad_token_id == 256
    with open(os.path.join(model_dir, "generation_config.json")) as f:
        assert json.load(f)["eos_token_id"] == [258, 256]
    with open(os.path.join(model_dir, MARKER_FILE)) as f:
        marker = json.load(f)
    assert marker["preset"] == "tiny-qwen2" and marker["seed"] == 0
    # 259*128 (tied embedding) + 2 layers * (q,k,v,o with biases on q,k,v + MLP + 2 norms) + final norm
    per_layer = (128 * 128 + 128) + 2 * (128 * 64 + 64) + 128 * 128 + 3 * 128 * 384 + 2 * 128
    assert marker["num_parameters"] == 259 * 128 + 2 * per_layer + 128 == 427_520


def test_build_is_deterministic_and_leaves_the_rng_alone(model_dir, tmp_path):
    state = torch.get_rng_state()
    again = build_tiny_model("tiny-qwen2", out_dir=str(tmp_path / "again"), seed=0)
    other = build_tiny_model("tiny-qwen2", out_dir=str(tmp_path / "other"), seed=1)
    assert torch.equal(torch.get_rng_state(), state)
    first, second = load_file(f"{model_dir}/model.safetensors"), load_file(f"{again}/model.safetensors")
    third = load_file(f"{other}/model.safetensors")
    assert first.keys() == second.keys() and len(first) == 26
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not torch.equal(first["model.embed_tokens.weight"], third["model.embed_tokens.weight"])


def test_build_reuses_a_finished_build_and_refuses_foreign_dirs(model_dir, tmp_path):
    stamp = os.path.getmtime(os.path.join(model_dir, "model.safetensors"))
    assert build_tiny_model("tiny-qwen2") == model_dir
    assert os.path.getmtime(os.path.join(model_dir, "model.safetensors")) == stamp  # not rewritten
    with pytest.raises(FileExistsError, match=r"preset='tiny-qwen2' seed=0.*seed=1"):
        build_tiny_model("tiny-qwen2", out_dir=model_dir, seed=1)
    half = tmp_path / "half"
    half.mkdir()
    (half / "config.json").write_text("{}")
    with pytest.raises(FileExistsError, match="not a complete minirl build"):
        build_tiny_model("tiny-qwen2", out_dir=str(half))
    with pytest.raises(ValueError, match="known presets"):
        build_tiny_model("tiny-llama")


def test_token_ids_round_trip_through_save_and_autotokenizer(model_dir):
    fresh = build_tokenizer()
    reloaded = load_tokenizer(model_dir)
    assert type(reloaded).__name__.startswith("Qwen2Tokenizer")  # AutoTokenizer picks the family's class
    for text in TEXTS:
        ids = fresh(text, add_special_tokens=False)["input_ids"]
        assert reloaded(text, add_special_tokens=False)["input_ids"] == ids, text
    assert reloaded.decode(reloaded("héllo wörld 😀")["input_ids"]) == "héllo wörld 😀"
    # byte-level vocabulary: token id == UTF-8 byte value
    assert reloaded("7 +\n")["input_ids"] == [55, 32, 43, 10]
    assert reloaded("é")["input_ids"] == list("é".encode())
    assert reloaded.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [256, 257, 258]
    assert (reloaded.eos_token, reloaded.pad_token, reloaded.padding_side) == (
        "<|im_end|>",
        "<|endoftext|>",
        "left",
    )
    assert len(reloaded) == 259
    assert reloaded.decode([257, 55, 258], skip_special_tokens=True) == "7"


def test_chat_template_is_chatml_with_generation_prompt(model_dir):
    tokenizer = load_tokenizer(model_dir)
    messages = [{"role": "user", "content": "What is 12+34?"}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nWhat is 12+34?<|im_end|>\n<|im_start|>assistant\n"
    no_prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert no_prompt == "<|im_start|>user\nWhat is 12+34?<|im_end|>\n"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 33 and ids[0] == 257 and ids[20] == 258  # the prompt length measured in the facts
    chat = messages + [{"role": "assistant", "content": "#### 46"}]
    full = tokenizer.apply_chat_template(chat, tokenize=False)
    assert full.endswith("<|im_start|>assistant\n#### 46<|im_end|>\n")


def test_automodel_loads_offline_with_identical_logits(model_dir):
    loaded = load_causal_lm(model_dir)
    in_memory, tokenizer = make_tiny_model("tiny-qwen2", seed=0)
    assert type(loaded).__name__ == "Qwen2ForCausalLM" and loaded.dtype == torch.float32
    batch = tokenizer(["What is 12+34?", "#### 46"], padding=True, return_tensors="pt")
    with torch.no_grad():
        a = loaded(**batch).logits
        b = in_memory(**batch).logits
    assert a.shape == (2, batch["input_ids"].shape[1], 259)
    assert torch.equal(a, b)
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()  # tied


def test_value_model_is_token_classification_with_one_output(model_dir):
    critic = build_value_model(model_dir)
    actor = load_causal_lm(model_dir)
    assert type(critic).__name__ == "Qwen2ForTokenClassification" and critic.config.num_labels == 1
    assert torch.equal(critic.model.embed_tokens.weight, actor.model.embed_tokens.weight)
    assert torch.equal(critic.model.layers[1].mlp.up_proj.weight, actor.model.layers[1].mlp.up_proj.weight)
    ids = torch.tensor([[257, 55, 43, 56, 258], [256, 256, 257, 55, 258]])
    with torch.no_grad():
        values = critic(input_ids=ids, attention_mask=(ids != 256).long()).logits
    assert values.shape == (2, 5, 1) and torch.isfinite(values).all()


def test_resolve_model_path_forms(model_dir, tmp_path, monkeypatch):
    assert resolve_model_path("minirl://tiny-qwen2") == model_dir
    assert resolve_model_path("tiny-qwen2") == model_dir
    assert resolve_model_path(model_dir) == model_dir  # a model directory: config.json and weights
    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copytree(model_dir, tmp_path / "ckpt")
    assert resolve_model_path("~/ckpt") == str(tmp_path / "ckpt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelPathError, match="has no config.json: it is not a model directory"):
        resolve_model_path(str(tmp_path / "empty"))
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    with pytest.raises(ValueError, match="minirl://tiny-qwen2"):
        resolve_model_path("minirl://gpt5")
    with pytest.raises(FileNotFoundError, match="does not exist.*minirl://tiny-qwen2"):
        resolve_model_path(str(tmp_path / "missing"))


def test_unreachable_hub_id_gives_a_clear_error(cache):
    with pytest.raises(OSError) as err:
        load_model_config("nobody-here/no-such-model-xyz")
    message = str(err.value)
    assert "nobody-here/no-such-model-xyz" in message and "HF_HUB_OFFLINE=1" in message
    assert "minirl://tiny-qwen2" in message and "local directory" in message
