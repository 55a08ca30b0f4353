"""Fixtures for the vLLM suite (tests/rollout_vllm), which runs in its own venv: `bash scripts/vllm.sh`.

Every test module here starts with `pytest.importorskip("vllm")`, so in the main venv (no vLLM) the
whole folder is skipped; with `MINIRL_VLLM_REQUIRED=1` (scripts/vllm.sh) a failed import is an error. vLLM's engine runs in the test process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`)
with a 1 GiB KV cache; one engine is shared by the whole session (starting one takes ~10 s here).
"""
import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

if os.environ.get("MINIRL_VLLM_REQUIRED") == "1":  # set by scripts/vllm.sh: a vLLM that fails to import is an error
    import vllm  # noqa: F401

# Long enough for a 140-token prompt: vLLM's CPU prefix cache works in blocks of 128 tokens, and the
# weight-sync test needs one cached block to show that the cache is reset.
ROLLOUT_CONFIG = {"prompt_length": 160, "response_length": 16, "seed": 7, "free_cache_engine": True,
                  "max_num_seqs": 64}


@pytest.fixture(scope="session")
def model_path():
    """The embedded tiny Qwen2 (hidden 128, 4 heads of 32: a head size vLLM's CPU attention accepts)."""
    from minirl.models import resolve_model_path

    return resolve_model_path("minirl://tiny-qwen2")


@pytest.fixture(scope="session")
def rollout(model_path):
    """One vLLM rollout engine for the session. Tests that depend on its weights push them first."""
    from minirl.workers.rollout.vllm_rollout import VLLMRollout

    engine = VLLMRollout(dict(ROLLOUT_CONFIG), model_path)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def base_weights(model_path):
    """The checkpoint's own tensors (what the rollout loaded at start), by Hugging Face name."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
