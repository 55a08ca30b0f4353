"""Tiny model presets: a real transformers architecture (Qwen2), random init, built locally on first use.

`build_tiny_model("tiny-qwen2")` writes an ordinary Hugging Face checkpoint directory
(`config.json`, `model.safetensors`, `generation_config.json`, tokenizer files) that
`AutoModelForCausalLM.from_pretrained` and `AutoTokenizer.from_pretrained` load offline, exactly as
they would load `Qwen/Qwen2.5-0.5B-Instruct`. Everything downstream (FSDP engine, hf and vLLM
rollouts, the critic) therefore runs the same code for the tiny model and for a hub model.

The default preset is the model measured to learn 2-digit addition on 2 CPU cores (SFT warm start,
then GRPO): 2 layers, hidden 128, 4 attention heads of size 32 (vLLM's CPU attention accepts head
sizes 32, 64, 80, ... only), 2 KV heads (grouped-query attention, as in Qwen2), MLP width 384, tied
input/output embeddings, 259-token byte vocabulary (see `minirl.models.tokenizer`): ~0.43M parameters.

The build is deterministic (seeded under a forked RNG, so the caller's random state is untouched) and
atomic: files are written to a temporary sibling directory, which is renamed into place only when
complete. A marker file, `minirl_model.json`, records the preset, seed and a fingerprint of the
recipe; a directory without it is never used.

verl has no embedded model: it reads `actor_rollout_ref.model.path` (a hub id or a directory) and
loads it with transformers (`create_huggingface_actor`, `verl/utils/model.py:117`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile

from minirl.models.tokenizer import IM_END, PAD_TOKEN, SPECIAL_TOKENS, build_tokenizer, save_tokenizer

__all__ = [
    "MARKER_FILE",
    "TINY_PRESETS",
    "build_tiny_model",
    "default_cache_dir",
    "is_complete_build",
    "make_tiny_model",
    "preset_fingerprint",
]

# Keyword arguments of `transformers.Qwen2Config`; vocab size and special-token ids come from the tokenizer.
TINY_PRESETS: dict[str, dict] = {
    "tiny-qwen2": {
        "hidden_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,  # head_dim = 128 / 4 = 32
        "num_key_value_heads": 2,
        "intermediate_size": 384,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
        "initializer_range": 0.02,
    },
    "tiny-qwen2-wide": {
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,  # head_dim = 256 / 8 = 32
        "num_key_value_heads": 2,
        "intermediate_size": 768,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
        "initializer_range": 0.02,
    },
}

MARKER_FILE = "minirl_model.json"
_BUILD_VERSION = 1  # bump when the recipe changes, so that old cached builds are recognised as stale
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", MARKER_FILE)


def default_cache_dir() -> str:
    """`$MINIRL_CACHE`, or `~/.cache/minirl` when it is unset."""
    return os.path.expanduser(os.environ.get("MINIRL_CACHE") or "~/.cache/minirl")


def preset_fingerprint(preset: str, seed: int) -> str:
    recipe = {"preset": TINY_PRESETS[preset], "seed": seed, "tokenizer": SPECIAL_TOKENS, "v": _BUILD_VERSION}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def is_complete_build(path: str) -> bool:
    """True when `path` holds every file a finished build writes (the marker is written last)."""
    return all(os.path.isfile(os.path.join(path, name)) for name in _REQUIRED_FILES)


def _check_existing(path: str, preset: str, seed: int) -> None:
    """Refuse a directory that is incomplete or was built from another recipe."""
    if not is_complete_build(path):
        raise FileExistsError(
            f"{path} exists but is not a complete minirl build (missing one of {list(_REQUIRED_FILES)}). "
            f"Delete it to rebuild the '{preset}' model, or pass another out_dir."
        )
    with open(os.path.join(path, MARKER_FILE), encoding="utf-8") as f:
        marker = json.load(f)
    if marker.get("fingerprint") != preset_fingerprint(preset, seed):
        raise FileExistsError(
            f"{path} holds a model built as preset={marker.get('preset')!r} seed={marker.get('seed')!r} "
            f"(fingerprint {marker.get('fingerprint')}), not preset={preset!r} seed={seed} "
            f"(fingerprint {preset_fingerprint(preset, seed)}). Delete the directory to rebuild, or pass another out_dir."
        )


def _model_config(preset: str, tokenizer):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD_TOKEN),
        architectures=["Qwen2ForCausalLM"],
        **TINY_PRESETS[preset],
    )


def make_tiny_model(preset: str = "tiny-qwen2", seed: int = 0):
    """The preset in memory: `(Qwen2ForCausalLM in float32, tokenizer)`, nothing written to disk.

    The same seed gives the same weights; the caller's torch RNG state is left unchanged.
    """
    import torch
    from transformers import Qwen2ForCausalLM

    if preset not in TINY_PRESETS:
        raise ValueError(f"unknown tiny model preset {preset!r}; known presets: {sorted(TINY_PRESETS)}")
    tokenizer = build_tokenizer(model_max_length=TINY_PRESETS[preset]["max_position_embeddings"])
    config = _model_config(preset, tokenizer)
    with torch.random.fork_rng(devices=[]):  # leave the caller's RNG as it was
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config).to(torch.float32)
    return model, tokenizer


def _write_build(out_dir: str, preset: str, seed: int) -> None:
    """Write tokenizer, randomly initialised model, generation config and (last) the marker."""
    from transformers import GenerationConfig

    model, tokenizer = make_tiny_model(preset, seed)
    config = model.config
    model.save_pretrained(out_dir)
    save_tokenizer(tokenizer, out_dir)
    eos, pad = config.eos_token_id, config.pad_token_id
    # Qwen2's chat models stop on <|im_end|> and on <|endoftext|>; the rollout reads these ids.
    GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad).save_pretrained(out_dir)
    marker = {
        "preset": preset,
        "seed": seed,
        "fingerprint": preset_fingerprint(preset, seed),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "config": TINY_PRESETS[preset],
    }
    with open(os.path.join(out_dir, MARKER_FILE), "w", encoding="utf-8") as f:
        json.dump(marker, f, indent=2, sort_keys=True)


def build_tiny_model(preset: str = "tiny-qwen2", out_dir: str | None = None, seed: int = 0) -> str:
    """Build (once) the tiny model `preset` and return its directory.

    Args:
        preset: a key of `TINY_PRESETS`.
        out_dir: where to write it; default `$MINIRL_CACHE/models/<preset>` (seed 0) or
            `$MINIRL_CACHE/models/<preset>-seed<seed>`.
        seed: torch seed of the random initialisation; the same seed gives identical weights.

    Returns:
        The absolute path of a complete checkpoint directory. If it already exists and was built
        from the same recipe it is reused as is.
    """
    if preset not in TINY_PRESETS:
        raise ValueError(f"unknown tiny model preset {preset!r}; known presets: {sorted(TINY_PRESETS)}")
    if out_dir is None:
        name = preset if seed == 0 else f"{preset}-seed{seed}"
        out_dir = os.path.join(default_cache_dir(), "models", name)
    out_dir = os.path.abspath(os.path.expanduser(out_dir))
    if os.path.exists(out_dir):
        _check_existing(out_dir, preset, seed)
        return out_dir

    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.building-", dir=parent)
    try:
        _write_build(tmp_dir, preset, seed)
        try:
            os.rename(tmp_dir, out_dir)  # atomic: a reader sees no directory or a complete one
        except OSError:
            if not is_complete_build(out_dir):  # lost a race to a concurrent build that finished
                raise
    finally:
        if os.path.isdir(tmp_dir):
            shutil.rmtree(tmp_dir, ignore_errors=True)
    _check_existing(out_dir, preset, seed)
    return out_dir
