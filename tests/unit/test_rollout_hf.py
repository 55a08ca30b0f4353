"""Tests for the rollout layer: SamplingParams, TokenOutput, the registry and the `hf` backend.

The model is a tiny random Qwen2 built in memory (2 layers, hidden 128, vocab 100). Every check
compares the KV-cache, left-padded batch path with a plain full-sequence forward, the way the
actor recomputes log-probs.
"""

import asyncio
import time

import pytest
import torch
import torch.nn.functional as F
from transformers import Qwen2Config, Qwen2ForCausalLM

from minirl.workers.rollout import BaseRollout, HFRollout, SamplingParams, TokenOutput, get_rollout_class
from minirl.workers.rollout.hf_rollout import apply_top_k_top_p, position_ids_from_mask

VOCAB = 100
PROMPTS = [[5, 17, 23, 42, 8, 61, 3], [11, 2], [90, 33, 7, 7, 50]]  # different lengths -> left padding


def tiny_qwen2(seed: int) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=384,
        tie_word_embeddings=True,
        max_position_embeddings=128,
        initializer_range=0.1,  # sharper than the default 0.02, so argmax has no near-ties
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).eval()


@pytest.fixture(scope="module")
def model():
    return tiny_qwen2(0)


@pytest.fixture(scope="module")
def rollout(model):
    return HFRollout({"seed": 7}, model)


def naive_greedy(model, prompt, max_tokens, stop_ids=()):
    """Reference: re-forward the whole sequence every step, no cache, no padding."""
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(max_tokens):
            logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
            seq.append(int(logits.argmax()))
            if seq[-1] in stop_ids:
                break
    return seq[len(prompt) :]


def recompute_log_probs(model, prompts, responses, temperature):
    """The actor's way: [left-padded prompt | right-padded response], positions from the mask,
    log_softmax(logits / T), gather the response tokens."""
    p_len, r_len = max(map(len, prompts)), max(map(len, responses))
    ids = torch.zeros(len(prompts), p_len + r_len, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, p_len - len(p) : p_len] = torch.tensor(p)
        ids[i, p_len : p_len + len(r)] = torch.tensor(r)
        mask[i, p_len - len(p) : p_len + len(r)] = 1
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits
    log_probs = F.log_softmax(logits[:, p_len - 1 : -1].float() / temperature, dim=-1)
    picked = log_probs.gather(-1, ids[:, p_len:, None]).squeeze(-1)
    return [picked[i, : len(r)].tolist() for i, r in enumerate(responses)]


# ---------------------------------------------------------------------------- SamplingParams


def test_sampling_params_from_rollout_config():
    config = {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 20,
        "do_sample": True,
        "response_length": 12,
        "n": 8,
        "val_kwargs": {"temperature": 0, "top_p": 1.0, "top_k": -1, "do_sample": False, "n": 1},
    }
    train = SamplingParams.from_rollout_config(config)
    assert (train.temperature, train.top_p, train.top_k, train.max_tokens) == (0.7, 0.9, 20, 12)
    assert not train.greedy and train.logprobs and train.seed is None
    val = SamplingParams.from_rollout_config(config, validate=True)
    assert (val.temperature, val.top_k, val.max_tokens, val.do_sample) == (0.0, -1, 12, False)
    assert val.greedy
    assert SamplingParams(temperature=0.0).greedy and SamplingParams(do_sample=False).greedy
    # the same keys read from an OmegaConf node (what Hydra hands the workers)
    from omegaconf import OmegaConf

    node = OmegaConf.create(
        {
            "data": {"max_response_length": 5},
            "rollout": {**config, "response_length": "${data.max_response_length}"},
        }
    )
    from_node = SamplingParams.from_rollout_config(node.rollout, validate=True)
    assert (from_node.max_tokens, from_node.greedy, from_node.top_p) == (5, True, 1.0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_tokens": 0}, "max_tokens must be >= 1, got 0"),
        ({"max_tokens": -3}, "got -3"),
        ({"temperature": -1.0}, "temperature must be >= 0"),
        ({"top_p": 0.0}, "top_p must be in (0, 1]"),
        ({"top_k": -2}, "top_k must be an integer >= -1"),
    ],
)
def test_sampling_params_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        SamplingParams(**kwargs)


def test_top_k_top_p_filter_by_hand():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    # top_p=0.7: mass above each token is [0, .5, .8, .95] -> keep tokens 0 and 1
    kept = torch.isfinite(apply_top_k_top_p(logits, top_p=0.7))
    assert kept.tolist() == [[True, True, False, False]]
    # top_p=0.4: the most likely token alone already holds 0.5 >= 0.4
    assert torch.isfinite(apply_top_k_top_p(logits, top_p=0.4)).tolist() == [[True, False, False, False]]
    # top_k=3 drops the least likely; unsorted order is respected
    shuffled = logits[:, [2, 0, 3, 1]]
    assert torch.isfinite(apply_top_k_top_p(shuffled, top_k=3)).tolist() == [[True, True, False, True]]
    # both off: nothing changes
    assert torch.equal(apply_top_k_top_p(logits, top_k=-1, top_p=1.0), logits)


def test_position_ids_from_left_padded_mask():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 0, 0, 0]]


# ---------------------------------------------------------------------------- registry


def test_registry_and_interface(rollout):
    assert get_rollout_class("hf") is HFRollout
    assert isinstance(rollout, BaseRollout)
    with pytest.raises(ValueError, match=r"Unknown rollout name 'sglangx'; registered rollouts: \['hf'"):
        get_rollout_class("sglangx")
    # resume/release are awaitable no-ops for hf
    assert asyncio.run(rollout.resume(["weights", "kv_cache"])) is None
    assert asyncio.run(rollout.release()) is None


# ---------------------------------------------------------------------------- sampling


def test_same_seed_same_tokens_different_seed_different(rollout):
    params = {"max_tokens": 10, "ignore_eos": True}
    a = rollout.generate(PROMPTS, SamplingParams(seed=123, **params))
    b = rollout.generate(PROMPTS, SamplingParams(seed=123, **params))
    c = rollout.generate(PROMPTS, SamplingParams(seed=124, **params))
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert [o.log_probs for o in a] == [o.log_probs for o in b]
    assert [o.token_ids for o in a] != [o.token_ids for o in c]
    # no per-call seed: the engine generator advances, so two calls differ
    d = rollout.generate(PROMPTS, SamplingParams(**params))
    e = rollout.generate(PROMPTS, SamplingParams(**params))
    assert [o.token_ids for o in d] != [o.token_ids for o in e]
    # a fresh engine with the same rollout.seed replays the same stream
    fresh = HFRollout({"seed": 7}, rollout.module)
    again = fresh.generate(PROMPTS, SamplingParams(**params))
    first = HFRollout({"seed": 7}, rollout.module).generate(PROMPTS, SamplingParams(**params))
    assert [o.token_ids for o in again] == [o.token_ids for o in first]


def test_greedy_matches_naive_loop_without_cache(model, rollout):
    """Validates the KV cache and the position ids of left-padded prompts.

    RoPE only sees relative positions, so shifting a whole row by its padding would go unnoticed;
    what this catches is a decode step whose position disagrees with the prefill's (checked by
    mutating hf_rollout: 5 tests here fail)."""
    outs = rollout.generate(PROMPTS, SamplingParams(do_sample=False, max_tokens=12))
    for prompt, out in zip(PROMPTS, outs):
        assert out.token_ids == naive_greedy(model, prompt, 12)
        assert out.stop_reason == "length" and len(out.token_ids) == 12
    # temperature 0 is greedy too, and top_k=1 sampling picks the argmax
    t0 = rollout.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=12))
    k1 = rollout.generate(PROMPTS, SamplingParams(top_k=1, temperature=0.8, max_tokens=12, seed=5))
    assert [o.token_ids for o in t0] == [o.token_ids for o in outs] == [o.token_ids for o in k1]
    # greedy log-probs come from the untempered distribution
    recomputed = recompute_log_probs(model, PROMPTS, [o.token_ids for o in t0], 1.0)
    for out, ref in zip(t0, recomputed):
        assert out.log_probs == pytest.approx(ref, abs=1e-5)


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, -1, 1.0), (0.7, 20, 0.9)])
def test_log_probs_equal_full_sequence_recompute(model, rollout, temperature, top_k, top_p):
    params = SamplingParams(
        temperature=temperature, top_k=top_k, top_p=top_p, max_tokens=9, seed=11, ignore_eos=True
    )
    outs = rollout.generate(PROMPTS, params)
    responses = [o.token_ids for o in outs]
    recomputed = recompute_log_probs(model, PROMPTS, responses, temperature)
    for out, ref in zip(outs, recomputed):
        assert len(out.log_probs) == len(out.token_ids) == 9
        assert out.log_probs == pytest.approx(ref, abs=1e-5)
    if top_k > 0:  # every sampled token lies in the top-k of its (recomputed) distribution
        for prompt, resp in zip(PROMPTS, responses):
            seq = torch.tensor([prompt + resp])
            with torch.no_grad():
                logits = model(input_ids=seq).logits[0, len(prompt) - 1 : -1]
            ranks = (logits > logits.gather(-1, torch.tensor(resp)[:, None])).sum(-1)
            assert int(ranks.max()) < top_k


def test_eos_stop_and_length_stop(model, rollout):
    greedy = rollout.generate([PROMPTS[0]], SamplingParams(do_sample=False, max_tokens=12))[0].token_ids
    eos = greedy[4]
    first = greedy.index(eos)
    # rows stop at different steps: the stopping row keeps its EOS, the others run on unchanged
    outs = rollout.generate(PROMPTS, SamplingParams(do_sample=False, max_tokens=12, stop_token_ids=[eos]))
    assert outs[0].token_ids == greedy[: first + 1] and outs[0].stop_reason == "eos"
    assert len(outs[0].log_probs) == first + 1
    for prompt, out in zip(PROMPTS[1:], outs[1:]):
        assert out.token_ids == naive_greedy(model, prompt, 12, stop_ids=(eos,))
        assert out.stop_reason == ("eos" if out.token_ids[-1] == eos else "length")
    # the model's EOS (from the config) stops too, unless ignore_eos
    with_eos = HFRollout({"eos_token_id": eos}, model)
    assert (
        with_eos.generate([PROMPTS[0]], SamplingParams(do_sample=False, max_tokens=12))[0].stop_reason
        == "eos"
    )
    ignored = with_eos.generate(
        [PROMPTS[0]], SamplingParams(do_sample=False, max_tokens=12, ignore_eos=True)
    )[0]
    assert ignored.token_ids == greedy and ignored.stop_reason == "length"


def test_sub_batches_and_context_limit(model):
    small = HFRollout({"max_num_seqs": 2, "max_model_len": 10}, model)
    outs = small.generate(PROMPTS, SamplingParams(do_sample=False, max_tokens=5))
    # max_model_len=10 cuts the 7-token prompt's budget to 3 tokens
    assert [len(o.token_ids) for o in outs] == [3, 5, 5]
    assert outs[0].token_ids == naive_greedy(model, PROMPTS[0], 3)
    assert outs[2].token_ids == naive_greedy(model, PROMPTS[2], 5)


def test_load_from_directory(model, rollout, tmp_path):
    model.save_pretrained(tmp_path)
    from_disk = HFRollout({}, str(tmp_path))
    assert from_disk.module is not model and from_disk.module.dtype == torch.float32
    params = SamplingParams(do_sample=False, max_tokens=6)
    assert [o.token_ids for o in from_disk.generate(PROMPTS, params)] == [
        o.token_ids for o in rollout.generate(PROMPTS, params)
    ]


def test_bad_inputs_give_clear_errors(rollout):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        rollout.generate([[1, 2], []], SamplingParams(max_tokens=3))
    with pytest.raises(ValueError, match=r"token ids in \[3, 100\] but the model's vocabulary is \[0, 100\)"):
        rollout.generate([[3, 100]], SamplingParams(max_tokens=3))
    with pytest.raises(TypeError, match="wrap a single prompt"):
        rollout.generate([1, 2, 3], SamplingParams(max_tokens=3))
    params = SamplingParams(max_tokens=3)
    params.max_tokens = 0  # mutated after construction: generate re-validates
    with pytest.raises(ValueError, match="max_tokens must be >= 1, got 0"):
        rollout.generate([[1, 2]], params)
    with pytest.raises(ValueError, match="leaving no room to generate within max_model_len=128"):
        rollout.generate([[1] * 128], SamplingParams(max_tokens=3))
    with pytest.raises(FileNotFoundError, match="could not load a model from"):
        HFRollout({}, "/nonexistent/model/dir")
    assert rollout.generate([], SamplingParams(max_tokens=3)) == []


# ---------------------------------------------------------------------------- weights


def test_update_weights_syncs_with_actor_and_bumps_version(model):
    rollout = HFRollout({"seed": 0}, model)
    actor = tiny_qwen2(1)  # different weights: the "trained" actor
    params = SamplingParams(do_sample=False, max_tokens=8)
    before = [o.token_ids for o in rollout.generate(PROMPTS, params)]
    actor_greedy = [naive_greedy(actor, p, 8) for p in PROMPTS]
    assert before != actor_greedy and rollout.policy_version == 0

    rollout.update_weights(actor.state_dict().items(), version=3)
    outs = rollout.generate(PROMPTS, params)
    assert [o.token_ids for o in outs] == actor_greedy
    assert rollout.policy_version == 3 and all(o.policy_version == 3 for o in outs)

    # the rollout owns its copy: changing the actor in place does not reach it until the next sync
    with torch.no_grad():
        for p in actor.parameters():
            p.mul_(0.0)
    assert [o.token_ids for o in rollout.generate(PROMPTS, params)] == actor_greedy

    with pytest.raises(KeyError, match="no parameter named 'module.lm_head.weight'"):
        rollout.update_weights([("module.lm_head.weight", torch.zeros(VOCAB, 128))], version=4)
    with pytest.raises(ValueError, match=r"has shape \(3, 3\) but the rollout expects \(100, 128\)"):
        rollout.update_weights([("model.embed_tokens.weight", torch.zeros(3, 3))], version=4)
    with pytest.raises(ValueError, match="received no tensors"):
        rollout.update_weights(iter([]), version=4)
    assert rollout.policy_version == 3


def test_token_output_defaults():
    out = TokenOutput(token_ids=[1, 2])
    assert out.log_probs is None and out.policy_version == 0 and out.extra_fields == {}


# ---------------------------------------------------------------------------- speed (reported, not asserted)


def test_throughput_report(rollout, capsys):
    prompts = [[(7 * i + j) % VOCAB for j in range(8 + i % 5)] for i in range(64)]
    params = SamplingParams(max_tokens=10, ignore_eos=True, seed=0)
    rollout.generate(prompts[:4], params)  # warm-up
    start = time.perf_counter()
    outs = rollout.generate(prompts, params)
    elapsed = time.perf_counter() - start
    new_tokens = sum(len(o.token_ids) for o in outs)
    assert new_tokens == 64 * 10
    with capsys.disabled():
        print(
            f"\n[hf rollout] 64 prompts x 10 new tokens, {torch.get_num_threads()} thread(s): "
            f"{new_tokens / elapsed:.0f} tokens/s ({elapsed * 1000:.0f} ms)"
        )
