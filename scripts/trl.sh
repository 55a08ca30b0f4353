#!/usr/bin/env bash
# Side-by-side benchmark: TRL's GRPOTrainer and minirl on the same work (benchmarks/side_by_side.py).
#
# TRL gets its own venv, created here on first use at ${TRL_VENV:-.venv-trl} (about 1.5 GB, ~2 min), so that
# its transformers/accelerate pins never touch the main venv:
#   1. torch==2.13.0 first: on CI and dev machines pip's config points at a local wheel folder that holds
#      the CPU build; elsewhere add --index-url https://download.pytorch.org/whl/cpu yourself. Never a
#      bare `torch`: that pulls a multi-GB CUDA build.
#   2. trl==1.16.* (it brings transformers, accelerate and datasets). minirl itself is NOT installed there:
#      the TRL worker imports only minirl.utils.reward_score (plain Python) from this checkout.
# Not part of CI: it is a benchmark (numbers, not pass/fail). The minirl side runs in the main venv (.venv).
#
# Usage: scripts/trl.sh [side_by_side.py args, e.g. --rounds 3 --steps 4]   (env: TRL_VENV, PYTHON=python3)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${TRL_VENV:-.venv-trl}"
PY="${PYTHON:-python3}"
MAIN_PY="${MAIN_PYTHON:-.venv/bin/python}"
SPEC="torch==2.13.0 trl==1.16.*"
STAMP="$VENV/.minirl-trl-spec"  # written after a complete install; a changed SPEC reinstalls

pip_quiet() {  # pip, minus the per-package notes about pip.conf's extra index folders
    { "$VENV/bin/python" -m pip --disable-pip-version-check "$@" 2>&1; } \
        | { grep -v -e "is ignored: it is neither a file nor a directory" || true; }
}

if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$SPEC" ]; then
    echo "trl: installing into $VENV (first time: ~2 minutes)"
    start=$(date +%s)
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    pip_quiet install --quiet torch==2.13.0
    pip_quiet install --quiet "trl==1.16.*"
    # pip may pull CUDA builds of these next to the CPU torch; a text-only GRPO run never imports them
    pip_quiet uninstall --yes --quiet torchvision torchaudio torchcodec triton
    "$VENV/bin/python" -c "import torch, transformers, trl; print('trl: torch', torch.__version__, \
'| transformers', transformers.__version__, '| trl', trl.__version__)"
    echo "$SPEC" > "$STAMP"
    echo "trl: $VENV ready in $(( $(date +%s) - start )) s"
fi

[ -x "$MAIN_PY" ] || { echo "trl: $MAIN_PY is missing: run bash scripts/setup.sh (or scripts/test.sh) first" >&2; exit 1; }
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 MINIRL_NO_PROGRESS=1
export MINIRL_CACHE="${MINIRL_CACHE:-$PWD/.cache/minirl}" RAY_USAGE_STATS_ENABLED=0
exec "$MAIN_PY" benchmarks/side_by_side.py --trl-python "$VENV/bin/python" "$@"
