"""The engine's forward layout and the hf rollout's prefix caching give the padded forward's numbers.

`minirl.workers.engine.forward_layout.model_forward` trims the prompts' common left padding, computes logits only
at the scored positions and (with `use_prefix_grouper`) runs each distinct prompt once; the hf
rollout prefills each distinct prompt once (`enable_prefix_caching`). None of it may change a number
beyond float rounding: the reference traces compare at rtol 1e-4.
"""

from __future__ import annotations

import pytest
import torch

from minirl.models import make_tiny_model
from minirl.transfer_queue import build_model_inputs
from minirl.utils.torch_functional import logprobs_from_logits
from minirl.workers.engine.forward_layout import leading_padding_columns, model_forward
from minirl.workers.rollout.base import SamplingParams
from minirl.workers.rollout.hf_rollout import HFRollout

P, R = 10, 6


@pytest.fixture(scope="module")
def model():
    module, tokenizer = make_tiny_model("tiny-qwen2", seed=3)
    return module, tokenizer


def _batch(pad: int, prompt_lengths, response_lengths, groups, seed=0):
    """A padded batch: rows of the same group share their prompt; responses are random tokens."""
    gen = torch.Generator().manual_seed(seed)
    prompt_of = {g: torch.randint(5, 200, (prompt_lengths[g],), generator=gen) for g in set(groups)}
    B = len(groups)
    prompts = torch.full((B, P), pad)
    responses = torch.full((B, R), pad)
    for i, (g, r) in enumerate(zip(groups, response_lengths)):
        prompts[i, P - prompt_lengths[g]:] = prompt_of[g]
        responses[i, :r] = torch.randint(5, 200, (r,), generator=gen)
    plen = torch.tensor([prompt_lengths[g] for g in groups])
    rlen = torch.tensor(response_lengths)
    inputs = build_model_inputs(prompts, responses, plen, rlen)
    rmask = (torch.arange(R)[None] < rlen[:, None]).long()
    return inputs, responses, rmask


def _log_probs(module, inputs, responses, plain=False, share=False):
    if plain:  # the reference: the whole padded batch through the model
        logits = module(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                        position_ids=inputs["position_ids"], use_cache=False).logits
    else:
        logits = model_forward(module, inputs["input_ids"], inputs["attention_mask"], inputs["position_ids"], R,
                               share_prefix=share).logits
        assert logits.shape[1] == R + 1
    return logprobs_from_logits(logits[:, -R - 1:-1], responses)


def test_leading_padding_counts_only_what_every_prompt_pads():
    mask = torch.tensor([[0, 0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1, 0]])
    assert leading_padding_columns(mask, response_length=3) == 1
    assert leading_padding_columns(torch.ones(2, 7, dtype=torch.long), 3) == 0
    # the last prompt column is never cut (a left-padded prompt ends there)
    assert leading_padding_columns(torch.tensor([[0, 0, 0, 1, 0, 0, 0]]), 3) == 3


@pytest.mark.parametrize("share", [False, True])
def test_log_probs_and_gradients_match_the_padded_forward(model, share):
    module, tokenizer = model
    groups = [0, 0, 0, 1, 1, 1, 2, 2]
    inputs, responses, rmask = _batch(tokenizer.pad_token_id, {0: 7, 1: 5, 2: 6}, [4, 2, 5, 1, 4, 3, 2, 5], groups)
    adv = torch.linspace(-1, 1, len(groups))[:, None]
    grads = []
    for plain in (True, False):
        module.zero_grad(set_to_none=True)
        lp = _log_probs(module, inputs, responses, plain=plain, share=share)
        (-(lp * adv * rmask).sum() / rmask.sum()).backward()
        grads.append(torch.cat([p.grad.flatten() for p in module.parameters()]))
        if plain:
            ref = lp.detach()
        else:
            got = lp.detach()
    mask = rmask.bool()
    torch.testing.assert_close(got[mask], ref[mask], rtol=1e-5, atol=1e-5)
    assert ((grads[1] - grads[0]).norm() / grads[0].norm()) < 1e-5
    if not share:  # the padded layout's response padding is computed as before (the cache path skips pad queries)
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_shared_prefix_without_repeats_and_with_empty_responses(model):
    module, tokenizer = model
    inputs, responses, _ = _batch(tokenizer.pad_token_id, {0: 4, 1: 9}, [0, 0], [0, 1])
    with torch.no_grad():
        ref = _log_probs(module, inputs, responses, plain=True)
        got = _log_probs(module, inputs, responses, share=True)
    assert got.shape == ref.shape == (2, R) and torch.isfinite(got).all()


def test_value_model_keeps_its_one_output_per_position():
    from transformers import Qwen2ForTokenClassification

    module, tokenizer = make_tiny_model("tiny-qwen2", seed=1)
    config = module.config
    config.num_labels = 1
    critic = Qwen2ForTokenClassification(config).eval()
    inputs, _, rmask = _batch(tokenizer.pad_token_id, {0: 6, 1: 8}, [3, 2, 4, 1], [0, 0, 1, 1])
    with torch.no_grad():
        ref = critic(**inputs, use_cache=False).logits.squeeze(-1)[:, -R - 1:-1]
        for share in (False, True):
            got = model_forward(critic, inputs["input_ids"], inputs["attention_mask"], inputs["position_ids"], R,
                                share_prefix=share).logits.squeeze(-1)[:, -R - 1:-1]
            torch.testing.assert_close(got[rmask.bool()], ref[rmask.bool()], rtol=1e-5, atol=1e-5)


def test_rollout_prefix_caching_samples_the_same_tokens(model):
    module, _ = model
    prompts = [[5, 6, 7, 8], [9, 10, 11], [5, 6, 7, 8], [9, 10, 11], [12, 13]]
    params = SamplingParams(temperature=1.0, max_tokens=6, logprobs=True, ignore_eos=True)
    outs = {}
    for caching in (False, True):
        rollout = HFRollout({"seed": 7, "enable_prefix_caching": caching}, module)
        outs[caching] = rollout.generate(prompts, params)
    for a, b in zip(outs[False], outs[True]):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(torch.tensor(b.log_probs), torch.tensor(a.log_probs), rtol=1e-5, atol=1e-5)
