"""Load a model by path: `minirl://tiny-qwen2-sft`, a local checkpoint directory, or a Hugging Face hub id.

One loading path for every model, so the tiny embedded model and a real checkpoint go through the
same transformers calls:

- `resolve_model_path(path)` turns `minirl://<preset>` (or a bare preset name) into the directory the
  preset was built in (`minirl://tiny-qwen2`: random init; `minirl://tiny-qwen2-sft`: its SFT warm
  start, `minirl.models.warm_start`), expands a local directory, and passes anything else through as
  a hub id.
- `load_tokenizer`, `load_model_config`, `load_causal_lm` wrap the `Auto*` classes; a hub id that
  cannot be loaded (no network with `HF_HUB_OFFLINE=1`, or no such model) fails with an error that
  says so and suggests `minirl://tiny-qwen2` or a local directory.
- `build_value_model` gives the critic: the same backbone with a one-output head on every token.

Mirrors verl:
- `hf_tokenizer` (`verl/utils/tokenizer/tokenizer.py:152`): AutoTokenizer, then a missing pad token
  is set to EOS (`set_pad_token_id`, `verl/utils/tokenizer/tokenizer.py:137`).
- the actor: `FSDPEngine._build_module` (`verl/workers/engine/fsdp/transformer_impl.py:235`) picks the
  Auto class from the config's architecture (`get_hf_auto_model_class`, `verl/utils/model.py:686`)
  and calls `from_pretrained`.
- the critic: the same method sets `num_labels = 1` and dropouts to 0 on the HF config, then calls
  `load_valuehead_model` (`verl/utils/model.py:637`), which loads
  `AutoModelForTokenClassification` (e.g. `Qwen2ForTokenClassification`: the backbone plus a linear
  `score` head, hidden -> 1). verl falls back to TRL's `AutoModelForCausalLMWithValueHead` for
  architectures without a token-classification class; minirl raises instead.

Simplified: no `trust_remote_code` models, no HDFS copy (`copy_to_local`), no meta-device init.
"""

from __future__ import annotations

import os
import warnings

from minirl.models.tiny import TINY_PRESETS, build_tiny_model
from minirl.models.warm_start import WARM_START_PRESETS, build_warm_start

__all__ = [
    "MINIRL_SCHEME",
    "build_value_model",
    "load_causal_lm",
    "load_model_config",
    "load_tokenizer",
    "resolve_model_path",
]

MINIRL_SCHEME = "minirl://"


def _build_preset(preset: str) -> str:
    return build_warm_start(preset) if preset in WARM_START_PRESETS else build_tiny_model(preset)


def resolve_model_path(path: str) -> str:
    """Map a model location to something `from_pretrained` accepts.

    - `minirl://<preset>` -> builds the preset once (`build_tiny_model`, or `build_warm_start` for
      `tiny-qwen2-sft`) and returns its directory;
    - an existing local directory -> its absolute path (`~` expanded);
    - a bare preset name such as `tiny-qwen2` (when no directory of that name exists) -> as `minirl://`;
    - a path-like string (`/...`, `./...`, `~/...`) that does not exist -> `FileNotFoundError`;
    - anything else -> returned unchanged, as a hub id.
    """
    path = str(path)
    if path.startswith(MINIRL_SCHEME):
        preset = path[len(MINIRL_SCHEME) :].strip("/")
        known = [*TINY_PRESETS, *WARM_START_PRESETS]
        if preset not in known:
            raise ValueError(f"unknown embedded model {path!r}; known: {[MINIRL_SCHEME + p for p in known]}")
        return _build_preset(preset)
    local = os.path.expanduser(path)
    if os.path.isdir(local):
        return os.path.abspath(local)
    if path in TINY_PRESETS or path in WARM_START_PRESETS:
        return _build_preset(path)
    if path.startswith(("/", "./", "../", "~")):
        raise FileNotFoundError(
            f"model directory {local!r} does not exist. Fix: use minirl://tiny-qwen2 for the embedded tiny model, "
            f"or point actor_rollout_ref.model.path at a directory holding config.json and the weights."
        )
    return path


def _hub_error(path: str, what: str, err: Exception) -> OSError:
    offline = os.environ.get("HF_HUB_OFFLINE", "0")
    return OSError(
        f"could not load the {what} of {path!r}: it is not a local directory, and the Hugging Face hub "
        f"could not provide it (HF_HUB_OFFLINE={offline}: no network, or no such model in the local hub "
        f"cache). Use minirl://tiny-qwen2 for the embedded tiny model, or a local directory with the "
        f"checkpoint. Original error: {type(err).__name__}: {err}"
    )


def _from_pretrained(auto_cls, path: str, what: str, **kwargs):
    local = resolve_model_path(path)
    try:
        return auto_cls.from_pretrained(local, **kwargs)
    except (OSError, ValueError) as err:
        if os.path.isdir(local):
            raise
        raise _hub_error(path, what, err) from err


def _dtype_kwargs(dtype) -> dict:
    """transformers 5 names the argument `dtype`; 4.x called it `torch_dtype`."""
    import transformers

    major = int(transformers.__version__.split(".")[0])
    return {"dtype": dtype} if major >= 5 else {"torch_dtype": dtype}


def load_tokenizer(path: str, **kwargs):
    """`AutoTokenizer` for `path`; a missing pad token is set to EOS, as verl's `hf_tokenizer` does."""
    from transformers import AutoTokenizer

    tokenizer = _from_pretrained(AutoTokenizer, path, "tokenizer", **kwargs)
    if tokenizer.pad_token_id is None:
        warnings.warn(
            f"tokenizer of {path!r} has no pad token; using its EOS {tokenizer.eos_token!r}", stacklevel=2
        )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model_config(path: str, **kwargs):
    """`AutoConfig` for `path` (a `Qwen2Config` for the tiny presets)."""
    from transformers import AutoConfig

    return _from_pretrained(AutoConfig, path, "config", **kwargs)


def load_causal_lm(path: str, dtype=None, **kwargs):
    """`AutoModelForCausalLM` for `path`, in `dtype` (default float32: the CPU-friendly choice)."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.float32 if dtype is None else dtype
    return _from_pretrained(AutoModelForCausalLM, path, "model", **_dtype_kwargs(dtype), **kwargs)


def build_value_model(path: str, dtype=None, **kwargs):
    """The critic: `AutoModelForTokenClassification` with `num_labels=1` on the policy's checkpoint.

    The backbone weights are loaded from `path` (the causal LM's `lm_head` is dropped) and a fresh
    linear `score` head maps each token's hidden state to one number: `logits` has shape
    `(batch, seq_len, 1)`, the value estimate V(s_t) at every position.
    """
    import torch
    from transformers import AutoModelForTokenClassification

    config = load_model_config(path)
    if type(config) not in AutoModelForTokenClassification._model_mapping:
        raise ValueError(
            f"{path!r} has model_type={config.model_type!r}, which has no ForTokenClassification class in "
            f"transformers, so minirl cannot build a critic from it (verl falls back to TRL's value head)."
        )
    config.num_labels = 1
    config.classifier_dropout = 0.0  # a value head must be deterministic
    dtype = torch.float32 if dtype is None else dtype
    return _from_pretrained(
        AutoModelForTokenClassification, path, "critic", config=config, **_dtype_kwargs(dtype), **kwargs
    )
