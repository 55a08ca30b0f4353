"""Load a model by path: `minirl://tiny-qwen2-sft`, a local checkpoint directory, or a Hugging Face hub id.

One loading path for every model, so the tiny embedded model and a real checkpoint go through the
same transformers calls:

- `resolve_model_path(path)` turns `minirl://<preset>` (or a bare preset name) into the directory the
  preset was built in, expands a local directory, and passes anything else through as a hub id. The
  presets are `MODEL_PRESETS`, name -> a function that builds it once and returns its directory:
  `minirl://tiny-qwen2` (random init, `minirl.models.tiny`) is registered here;
  `minirl://tiny-qwen2-sft` (its SFT warm start) is built by an SFT run, so the trainer side registers it
  (`minirl.trainer.warm_start`, with `register_model_preset`): this package never imports the trainer.
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
from collections.abc import Callable
from functools import partial

from minirl.models.tiny import TINY_PRESETS, build_tiny_model

__all__ = [
    "MINIRL_SCHEME",
    "MODEL_PRESETS",
    "ModelPathError",
    "build_value_model",
    "check_model_dir",
    "load_causal_lm",
    "load_checked",
    "load_model_config",
    "load_tokenizer",
    "register_model_preset",
    "resolve_model_path",
]

MINIRL_SCHEME = "minirl://"


class ModelPathError(FileNotFoundError, ValueError):
    """A model path that is not a loadable model: one line naming the setting, what is wrong and the fix.

    A `FileNotFoundError` (the entry points print it as one line) and a `ValueError` (what an unknown
    `minirl://` preset raised before it had its own class)."""


MODEL_PRESETS: dict[str, Callable[[], str]] = {name: partial(build_tiny_model, name) for name in TINY_PRESETS}
"""`minirl://<name>` -> a function that builds the preset once (cached) and returns its directory."""

REGISTERED_ELSEWHERE = {"tiny-qwen2-sft": "minirl.trainer.warm_start"}
"""Presets other rooms register, and the module that does (named in the error when it was not imported)."""


def register_model_preset(name: str, build: Callable[[], str]) -> None:
    """Make `minirl://<name>` resolve to the directory `build()` returns (it should build once and cache)."""
    MODEL_PRESETS[name] = build


def _unknown_preset(path: str, preset: str, key: str = "actor_rollout_ref.model.path") -> ModelPathError:
    owner = REGISTERED_ELSEWHERE.get(preset)
    if owner is not None:
        return ModelPathError(f"{key}={path!r} is built by an SFT run, which the trainer side registers: import "
                              f"{owner} first (minirl train, minirl.trainer.main_ppo and the notebook harness do).")
    known = sorted({*MODEL_PRESETS, *REGISTERED_ELSEWHERE})
    return ModelPathError(f"{key}={path!r}: no such embedded model; known: {[MINIRL_SCHEME + p for p in known]}. "
                          f"Fix: {key}=minirl://tiny-qwen2, or a local model directory.")


_FIX = "Fix: {key}=minirl://tiny-qwen2 (the embedded tiny model), or a directory written by save_pretrained " \
       "(config.json, the weights, the tokenizer)."
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def check_model_dir(local: str, key: str = "actor_rollout_ref.model.path") -> None:
    """Raise `ModelPathError` unless the directory `local` has a readable `config.json` and weights."""
    config = os.path.join(local, "config.json")
    if not os.path.isfile(config):
        raise ModelPathError(f"{key}={local!r} has no config.json: it is not a model directory. " + _FIX.format(key=key))
    try:
        import json

        with open(config) as f:
            json.load(f)
    except (OSError, ValueError) as e:
        raise ModelPathError(f"{key}={local!r}: its config.json cannot be read ({type(e).__name__}: {e}). "
                             + _FIX.format(key=key)) from None
    names = set(os.listdir(local))
    if not names & set(_WEIGHTS) and not any(n.endswith((".safetensors", ".bin")) for n in names):
        raise ModelPathError(f"{key}={local!r} has a config.json but no weights ({' or '.join(_WEIGHTS[::2])}). "
                             + _FIX.format(key=key))


def resolve_model_path(path: str, key: str = "actor_rollout_ref.model.path") -> str:
    """Map a model location to something `from_pretrained` accepts.

    - `minirl://<preset>` -> builds the preset once (`MODEL_PRESETS`: `build_tiny_model`, or the warm
      start that `minirl.trainer.warm_start` registers) and returns its directory;
    - an existing local directory -> its absolute path (`~` expanded), once `check_model_dir` passed;
    - a bare preset name such as `tiny-qwen2` (when no directory of that name exists) -> as `minirl://`;
    - a path-like string (`/...`, `./...`, `~/...`) that does not exist -> `ModelPathError`;
    - anything else -> returned unchanged, as a hub id.

    `key` is the setting the path came from (named in the errors: `model.path`, `--policy`, ...).
    """
    path = str(path)
    if path.startswith(MINIRL_SCHEME):
        preset = path[len(MINIRL_SCHEME) :].strip("/")
        if preset not in MODEL_PRESETS:
            raise _unknown_preset(path, preset, key)
        return MODEL_PRESETS[preset]()
    local = os.path.expanduser(path)
    if os.path.isdir(local):
        check_model_dir(local, key)
        return os.path.abspath(local)
    if path in MODEL_PRESETS:
        return MODEL_PRESETS[path]()
    if path in REGISTERED_ELSEWHERE:
        raise _unknown_preset(path, path, key)
    if os.path.exists(local):
        raise ModelPathError(f"{key}={local!r} is a file, not a model directory. " + _FIX.format(key=key))
    if path.startswith(("/", "./", "../", "~")):
        raise ModelPathError(
            f"model directory {local!r} does not exist. Fix: use minirl://tiny-qwen2 for the embedded tiny model, "
            f"or point {key} at a directory holding config.json and the weights."
        )
    return path


def load_checked(load, path: str, key: str, what: str):
    """`load(path)` (e.g. `load_tokenizer`); any failure becomes one `ModelPathError` line naming `key`."""
    try:
        return load(path)
    except ModelPathError:
        raise
    except (OSError, ValueError, TypeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        fix = (f"Fix: save the tokenizer next to the model (tokenizer.json, tokenizer_config.json), or point {key} "
               "at a directory that has one.") if what == "tokenizer" and os.path.isdir(path) else _FIX.format(key=key)
        raise ModelPathError(f"{key}={path!r}: its {what} cannot be loaded ({type(e).__name__}: {first}). {fix}") from e


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
