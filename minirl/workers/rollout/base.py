"""The rollout interface: what every inference backend (hf, vllm) offers the agent loop and the trainer.

A *rollout* is the inference engine that samples responses from the current policy. In RL for
LLMs it is a separate copy of the model, tuned for generation (KV cache, batching), that receives
the actor's new weights after every update. This module holds the pieces shared by all backends:

- `SamplingParams`: how to sample one request (temperature, top-k/top-p, token budget, seed...).
- `TokenOutput`: what comes back for one request (response token ids, their log-probs, why it
  stopped, and the weight version that sampled it).
- `BaseRollout`: the abstract engine: `generate`, `update_weights`, `resume`, `release`.
- `register_rollout` / `get_rollout_class`: a registry from `actor_rollout_ref.rollout.name`
  (`"hf"`, `"vllm"`) to the class that implements it.

Mirrors verl:
- `BaseRollout` (`verl/workers/rollout/base.py:29`) and `get_rollout_class`
  (`verl/workers/rollout/base.py:95`).
- `TokenOutput` (`verl/workers/rollout/replica.py:39`): the token-in/token-out result of one
  request.
- The request API the agent loop calls, `LLMServerClient.generate(request_id, prompt_ids=...,
  sampling_params=...) -> TokenOutput` (`verl/workers/rollout/llm_server.py:240`), which forwards
  to the server's `vLLMHttpServer.generate` (`verl/workers/rollout/vllm_rollout/vllm_async_server.py:535`).

What minirl simplifies:
- verl runs each rollout replica as an async HTTP/Ray server and the agent loop sends it one request
  at a time; minirl's `generate` takes a *batch* of independent requests synchronously (the agent
  loop gathers its sessions into one call).
- verl's `sampling_params` is a plain dict that the server turns into vLLM's `SamplingParams`;
  minirl uses one small dataclass for every backend.
- verl's registry is keyed by `(name, mode)` with lazy import strings; minirl keys by name only.
"""

from __future__ import annotations

import importlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from minirl.config.schema import ROLLOUT_DEFAULTS
from minirl.utils.config import cfg_get

__all__ = [
    "BaseRollout",
    "SamplingParams",
    "TokenOutput",
    "get_rollout_class",
    "register_rollout",
]


# --------------------------------------------------------------------------------------------------
# SamplingParams: how to sample one request
# --------------------------------------------------------------------------------------------------


@dataclass
class SamplingParams:
    """How to sample the response to one request.

    The field names follow vLLM's `SamplingParams`, which verl's agent loop fills from the rollout
    config in `AgentLoopWorker.generate_sequences` (`verl/experimental/agent_loop/agent_loop.py:537`).
    `n` (responses per prompt) is *not* here: the agent loop starts `rollout.n` independent
    sessions per prompt, each one a request.
    """

    temperature: float = 1.0
    """Softmax temperature: logits are divided by it before sampling. 0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability sums to >= top_p. 1.0: off."""
    top_k: int = -1
    """Keep only the k most likely tokens. -1 (vLLM's 'off') or 0 (HF's 'off'): off."""
    max_tokens: int = 512
    """Most new tokens per response (verl: `rollout.response_length`; 512 is verl's default)."""
    do_sample: bool = True
    """False: greedy decoding (argmax), whatever the temperature."""
    logprobs: bool = True
    """Return the log-prob of every sampled token (verl: `rollout.calculate_log_probs`)."""
    seed: int | None = None
    """Seed for this call's random generator; None: the rollout's own generator (seeded once from
    `rollout.seed`), so successive calls draw fresh samples and a whole run is reproducible."""
    stop_token_ids: list[int] | None = None
    """Extra token ids that end a response, on top of the tokenizer's EOS (e.g. `<|im_end|>`)."""
    ignore_eos: bool = False
    """True: the EOS token does not stop generation (explicit `stop_token_ids` still do, as in vLLM)."""
    prompt_logprobs: int | None = None
    """Also score the *prompt*: for every prompt token after the first, its log-prob given the tokens
    before it (0), or the `k` most likely tokens there with their log-probs (`k > 0`). Returned in
    `TokenOutput.extra_fields["prompt_ids"]` / `["prompt_logprobs"]`, one row per prompt position,
    shifted like a model's outputs (row `i` scores token `i + 1`; the last row is a zero pad), as
    verl's `extract_prompt_logprobs` lays out vLLM's `prompt_logprobs`. None: off. The on-policy
    distillation teacher is asked this way (`minirl.teacher_loop`)."""

    def __post_init__(self) -> None:
        self.validate()

    @property
    def greedy(self) -> bool:
        """True when decoding is argmax: `do_sample=False` or `temperature == 0`."""
        return (not self.do_sample) or self.temperature == 0

    def validate(self) -> None:
        """Raise `ValueError` with the offending value and a fix if any field is out of range."""
        if self.max_tokens is None or int(self.max_tokens) <= 0:
            raise ValueError(
                f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens!r}: it is the response "
                "budget; set actor_rollout_ref.rollout.response_length (data.max_response_length) "
                "to a positive number."
            )
        if self.temperature < 0:
            raise ValueError(
                f"SamplingParams.temperature must be >= 0, got {self.temperature}; "
                "use 0 (or do_sample=False) for greedy."
            )
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(
                f"SamplingParams.top_p must be in (0, 1], got {self.top_p}; use 1.0 to turn it off."
            )
        if self.prompt_logprobs is not None and (int(self.prompt_logprobs) != self.prompt_logprobs
                                                 or self.prompt_logprobs < 0):
            raise ValueError(
                f"SamplingParams.prompt_logprobs must be None or an integer >= 0, got {self.prompt_logprobs!r}: "
                "0 scores each prompt token, k > 0 returns the top k tokens at each position."
            )
        if int(self.top_k) != self.top_k or self.top_k < -1:
            raise ValueError(
                f"SamplingParams.top_k must be an integer >= -1, got {self.top_k}; use -1 to turn it off."
            )

    @classmethod
    def from_rollout_config(cls, config: Any, validate: bool = False) -> SamplingParams:
        """Build the sampling parameters from an `actor_rollout_ref.rollout` config section.

        Reads verl's keys: `temperature`, `top_p`, `top_k`, `do_sample`, `response_length`
        (-> `max_tokens`), `ignore_eos`, `calculate_log_probs` (-> `logprobs`); with
        `validate=True` the `val_kwargs.*` values (verl: `SamplingConfig`,
        `verl/workers/config/rollout.py:39`) replace the sampling ones, greedy by default.
        `n` is not read: the agent loop makes `n` sessions per prompt.
        """
        source = cfg_get(config, "val_kwargs") if validate else config
        if validate and source is None:
            raise ValueError(
                "validate=True needs actor_rollout_ref.rollout.val_kwargs in the config; none was found."
            )
        return cls(
            temperature=float(cfg_get(source, "temperature", ROLLOUT_DEFAULTS.temperature)),
            top_p=float(cfg_get(source, "top_p", ROLLOUT_DEFAULTS.top_p)),
            top_k=int(cfg_get(source, "top_k", ROLLOUT_DEFAULTS.top_k)),
            do_sample=bool(cfg_get(source, "do_sample", ROLLOUT_DEFAULTS.do_sample)),
            max_tokens=int(cfg_get(config, "response_length", ROLLOUT_DEFAULTS.response_length)),
            logprobs=bool(cfg_get(config, "calculate_log_probs", ROLLOUT_DEFAULTS.calculate_log_probs)),
            ignore_eos=bool(cfg_get(config, "ignore_eos", False)),
        )


# --------------------------------------------------------------------------------------------------
# TokenOutput: what one request returns
# --------------------------------------------------------------------------------------------------


@dataclass
class TokenOutput:
    """The response to one request, in tokens (verl: `TokenOutput`, `verl/workers/rollout/replica.py:39`)."""

    token_ids: list[int]
    """Response token ids, EOS included when the response stopped on it (as vLLM returns them)."""
    log_probs: list[float] | None = None
    """log pi(token | prefix) for each of `token_ids` (see the backend for which distribution);
    None when `SamplingParams.logprobs` is False."""
    stop_reason: Literal["eos", "length", "aborted"] | None = None
    """"eos": hit an EOS/stop token; "length": used up `max_tokens` (or the context); "aborted": stopped
    early by `abort_all_requests` (a weight sync), `token_ids` holds what was generated until then.
    verl reports vLLM's finish reason folded into "completed"/"aborted" instead."""
    policy_version: int = 0
    """The weight version that sampled this response: `BaseRollout.policy_version` at the time.
    verl tags outputs with `extra_fields["global_steps"]` (`vLLMHttpServer.set_global_steps`,
    `verl/workers/rollout/vllm_rollout/vllm_async_server.py:886`)."""
    extra_fields: dict[str, Any] = field(default_factory=dict)
    """Anything else a backend wants to pass along (verl keeps the same escape hatch)."""


# --------------------------------------------------------------------------------------------------
# BaseRollout: the engine
# --------------------------------------------------------------------------------------------------


class BaseRollout(ABC):
    """An inference engine holding its own copy of the policy.

    verl: `BaseRollout` (`verl/workers/rollout/base.py:29`).

    The life of a rollout in one training step (hybrid engine, sync mode):
    `resume(["weights"])` -> `update_weights(actor weights, version)` -> `resume(["kv_cache"])`
    -> `generate(...)` for every request -> `release()` while the actor trains.

    Attributes:
        config: the `actor_rollout_ref.rollout` section (dict, DictConfig or dataclass).
        device: where the engine runs ("cpu", "cuda", ...).
        policy_version: the weight version now loaded; 0 until the first `update_weights`.
        abort_event: set by a rollout server to stop generation early (`stop_reason="aborted"`);
            backends that cannot stop mid-call finish the running batch first.
    """

    def __init__(self, config: Any, model_path_or_module: Any, device: str | torch.device = "cpu") -> None:
        # verl passes (RolloutConfig, HFModelConfig, DeviceMesh); minirl passes the model itself.
        self.config = config if config is not None else {}
        self.device = torch.device(device)
        self.policy_version: int = 0
        self.abort_event = threading.Event()

    @abstractmethod
    def generate(self, prompts: list[list[int]], sampling_params: SamplingParams) -> list[TokenOutput]:
        """Sample one response per prompt; prompts are independent requests of any lengths.

        Returns one `TokenOutput` per prompt, in the same order, tagged with `policy_version`.
        """

    def _check_prompts(self, prompts: Any) -> list[list[int]]:
        """The prompts of a `generate` call as lists of ints, or one error that says which prompt is wrong.

        Every backend calls it first. Needs `self.max_model_len` and `self.vocab_size` (None: unknown,
        the id range is not checked), which each backend sets from its model.
        """
        if not isinstance(prompts, (list, tuple)) or any(isinstance(p, int) for p in prompts):
            raise TypeError(f"{type(self).__name__}.generate expects a list of prompts, each a list of token ids; "
                            "wrap a single prompt as [prompt_ids].")
        checked = [[int(t) for t in p] for p in prompts]
        for i, prompt in enumerate(checked):
            if not prompt:
                raise ValueError(f"prompt {i} is empty; every request needs at least one token "
                                 "(e.g. a BOS or chat template).")
            if len(prompt) >= self.max_model_len:
                raise ValueError(f"prompt {i} has {len(prompt)} tokens, leaving no room to generate within max_model_len="
                                 f"{self.max_model_len}; shorten it (data.max_prompt_length) or raise "
                                 "actor_rollout_ref.rollout.max_model_len.")
            low, high = min(prompt), max(prompt)
            if low < 0 or (self.vocab_size is not None and high >= self.vocab_size):
                raise ValueError(f"prompt {i} has token ids in [{low}, {high}] but the model's vocabulary is "
                                 f"[0, {self.vocab_size}); was it tokenized with another tokenizer?")
        return checked

    @abstractmethod
    def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Load full tensors by parameter name into the rollout's model, then set `policy_version = version`.

        verl's `update_weights` is async and streams bucketed tensors to the engine
        (`ServerAdapter.update_weights`, `verl/workers/rollout/vllm_rollout/vllm_rollout.py:209`).
        """

    @abstractmethod
    async def resume(self, tags: list[str]) -> None:
        """Bring weights (`"weights"`) or the KV cache (`"kv_cache"`) back into accelerator memory."""

    @abstractmethod
    async def release(self) -> None:
        """Free weights and KV cache from accelerator memory so the actor can train."""

    def clear_kv_cache(self) -> None:
        """Forget cached prefixes, whose KV was computed by the old weights (after every weight load).

        verl: `vLLMHttpServer.clear_kv_cache` (`verl/workers/rollout/vllm_rollout/vllm_async_server.py:826`).
        Default: nothing is cached between calls (the hf rollout keeps a KV cache only inside one call).
        """

    async def release_kv_cache(self) -> None:
        """Free only the KV cache for the duration of a weight sync, keeping the weights in place.

        verl: `vLLMHttpServer.release_kv_cache` (`verl/workers/rollout/vllm_rollout/vllm_async_server.py:837`).
        Default: nothing to free.
        """

    async def resume_kv_cache(self) -> None:
        """Re-allocate the KV cache after a weight sync.

        verl: `vLLMHttpServer.resume_kv_cache` (`verl/workers/rollout/vllm_rollout/vllm_async_server.py:847`).
        Default: nothing to re-allocate.
        """


# --------------------------------------------------------------------------------------------------
# Registry: rollout.name -> class
# --------------------------------------------------------------------------------------------------

_ROLLOUT_REGISTRY: dict[str, type[BaseRollout]] = {}

# Backends that register themselves when their module is imported (imported on first lookup, so
# that asking for "hf" does not need the caller to import hf_rollout first).
_ROLLOUT_MODULES: dict[str, str] = {
    "hf": "minirl.workers.rollout.hf_rollout",
    "vllm": "minirl.workers.rollout.vllm_rollout",
}


def register_rollout(name: str) -> Callable[[type[BaseRollout]], type[BaseRollout]]:
    """Class decorator: make `cls` the rollout used when `actor_rollout_ref.rollout.name == name`."""

    def decorator(cls: type[BaseRollout]) -> type[BaseRollout]:
        existing = _ROLLOUT_REGISTRY.get(name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise ValueError(
                f"Rollout name {name!r} is already registered to "
                f"{existing.__module__}.{existing.__qualname__}; "
                f"pick another name for {cls.__module__}.{cls.__qualname__}."
            )
        _ROLLOUT_REGISTRY[name] = cls
        return cls

    return decorator


def get_rollout_class(rollout_name: str) -> type[BaseRollout]:
    """Return the rollout class registered as `rollout_name` (`actor_rollout_ref.rollout.name`).

    verl: `get_rollout_class(rollout_name, mode)` (`verl/workers/rollout/base.py:95`).
    """
    if rollout_name not in _ROLLOUT_REGISTRY and rollout_name in _ROLLOUT_MODULES:
        importlib.import_module(_ROLLOUT_MODULES[rollout_name])
    if rollout_name not in _ROLLOUT_REGISTRY:
        known = sorted(set(_ROLLOUT_REGISTRY) | set(_ROLLOUT_MODULES))
        raise ValueError(
            f"Unknown rollout name {rollout_name!r}; registered rollouts: {known}. "
            "Set actor_rollout_ref.rollout.name to one of them, "
            "or register a class with @register_rollout(name)."
        )
    return _ROLLOUT_REGISTRY[rollout_name]
