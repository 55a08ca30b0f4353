"""Models: the embedded tiny Qwen2 presets, the local tokenizer, and one loading path for any checkpoint.

- `minirl.models.tiny`: `TINY_PRESETS`, `build_tiny_model` (deterministic, atomic, cached build).
- `minirl.models.tokenizer`: the byte-level tokenizer with a ChatML template.
- `minirl.models.loading`: `resolve_model_path`, `load_tokenizer`, `load_model_config`,
  `load_causal_lm`, `build_value_model` (the critic); `MODEL_PRESETS` / `register_model_preset`: what
  `minirl://<name>` builds. The default model, `minirl://tiny-qwen2-sft` (the SFT warm start of
  `tiny-qwen2`), is built by an SFT run and so registered by the trainer side, `minirl.trainer.warm_start`:
  this package never imports the trainer. A bad model path fails in one line (`ModelPathError`, raised by
  `resolve_model_path`, `check_model_dir` and `load_checked`) naming the setting it came from.

verl's counterpart is `verl/utils/model.py` (`create_huggingface_actor`, `verl/utils/model.py:117`;
`load_valuehead_model`, `verl/utils/model.py:637`) plus `verl/utils/tokenizer/tokenizer.py`.
"""

from minirl.models.loading import (
    MINIRL_SCHEME,
    MODEL_PRESETS,
    ModelPathError,
    build_value_model,
    check_model_dir,
    load_causal_lm,
    load_checked,
    load_model_config,
    load_tokenizer,
    register_model_preset,
    resolve_model_path,
)
from minirl.models.tiny import TINY_PRESETS, build_tiny_model, default_cache_dir, make_tiny_model
from minirl.models.tokenizer import build_tokenizer

__all__ = [
    "MINIRL_SCHEME",
    "MODEL_PRESETS",
    "TINY_PRESETS",
    "ModelPathError",
    "build_tiny_model",
    "build_tokenizer",
    "build_value_model",
    "check_model_dir",
    "default_cache_dir",
    "load_causal_lm",
    "load_checked",
    "load_model_config",
    "load_tokenizer",
    "make_tiny_model",
    "register_model_preset",
    "resolve_model_path",
]
