"""Models: the embedded tiny Qwen2 presets, the local tokenizer, and one loading path for any checkpoint.

- `minirl.models.tiny`: `TINY_PRESETS`, `build_tiny_model` (deterministic, atomic, cached build).
- `minirl.models.warm_start`: `minirl://tiny-qwen2-sft`, the SFT warm start of `tiny-qwen2`
  (`build_warm_start`: built once on first use, cached like the embedded model; the default model).
- `minirl.models.tokenizer`: the byte-level tokenizer with a ChatML template.
- `minirl.models.loading`: `resolve_model_path`, `load_tokenizer`, `load_model_config`,
  `load_causal_lm`, `build_value_model` (the critic).

verl's counterpart is `verl/utils/model.py` (`create_huggingface_actor`, `verl/utils/model.py:117`;
`load_valuehead_model`, `verl/utils/model.py:637`) plus `verl/utils/tokenizer/tokenizer.py`.
"""

from minirl.models.loading import (
    MINIRL_SCHEME,
    build_value_model,
    load_causal_lm,
    load_model_config,
    load_tokenizer,
    resolve_model_path,
)
from minirl.models.tiny import TINY_PRESETS, build_tiny_model, default_cache_dir, make_tiny_model
from minirl.models.tokenizer import build_tokenizer
from minirl.models.warm_start import WARM_START_PRESETS, build_warm_start

__all__ = [
    "MINIRL_SCHEME",
    "TINY_PRESETS",
    "WARM_START_PRESETS",
    "build_tiny_model",
    "build_tokenizer",
    "build_value_model",
    "build_warm_start",
    "default_cache_dir",
    "load_causal_lm",
    "load_model_config",
    "load_tokenizer",
    "make_tiny_model",
    "resolve_model_path",
]
