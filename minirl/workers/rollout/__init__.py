"""Rollout: the inference engines that sample responses from the policy (verl: `verl/workers/rollout/`).

`BaseRollout` is the interface, `get_rollout_class(actor_rollout_ref.rollout.name)` picks the
backend: `"hf"` (`HFRollout`: transformers + torch, runs anywhere) or `"vllm"` (`VLLMRollout` in
`minirl.workers.rollout.vllm_rollout`: the real vLLM engine, imported only when asked for). The agent loop sends token
ids in and gets `TokenOutput`s (response tokens, log-probs, stop reason, weight version) back.
"""

from minirl.workers.rollout.base import (
    BaseRollout,
    SamplingParams,
    TokenOutput,
    get_rollout_class,
    register_rollout,
)
from minirl.workers.rollout.hf_rollout import HFRollout

__all__ = [
    "BaseRollout",
    "HFRollout",
    "SamplingParams",
    "TokenOutput",
    "get_rollout_class",
    "register_rollout",
]
