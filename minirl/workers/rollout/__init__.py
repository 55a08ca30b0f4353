"""Rollout: the inference engines that sample responses from the policy (verl: `verl/workers/rollout/`).

`BaseRollout` is the interface, `get_rollout_class(actor_rollout_ref.rollout.name)` picks the
backend: `"hf"` (`HFRollout`: transformers + torch, runs anywhere) or `"vllm"` (`VLLMRollout` in
`minirl.workers.rollout.vllm_rollout`: the real vLLM engine, imported only when asked for). The agent loop sends token
ids in and gets `TokenOutput`s (response tokens, log-probs, stop reason, weight version) back.

Where the engine runs (`actor_rollout_ref.rollout.nnodes`): in the controller process (0, the
default: the one-process debug mode), or as rollout server processes, one per replica
(`minirl.workers.rollout.replica`, `.server`, `.llm_server`: `nnodes=1`, `n_gpus_per_node` replicas).

The names below are imported on first use, so that `minirl.workers.rollout.replica` (read by the
config check) does not pull in torch.
"""

from importlib import import_module

_EXPORTS = {
    "BaseRollout": "base",
    "SamplingParams": "base",
    "TokenOutput": "base",
    "get_rollout_class": "base",
    "register_rollout": "base",
    "HFRollout": "hf_rollout",
    "LLMServerManager": "llm_server",
}

__all__ = ["BaseRollout", "HFRollout", "LLMServerManager", "SamplingParams", "TokenOutput", "get_rollout_class",
           "register_rollout"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
