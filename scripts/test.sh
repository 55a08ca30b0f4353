#!/usr/bin/env bash
# The whole test suite: set up (if needed), then unit tests, slow end-to-end tests (once, small
# settings), notebooks, and the parity suite against PyPI verl==0.9.1 in its own venv.
#   bash scripts/test.sh            everything (what CI runs)
#   bash scripts/test.sh -m "not slow"   a quick subset (pytest arguments pass through)
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=${EXTRAS:-dev} bash scripts/setup.sh
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
export MINIRL_CACHE=${MINIRL_CACHE:-$PWD/.cache/minirl}
start=$(date +%s)
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
if [ $# -eq 0 ] && [ -x scripts/parity.sh ]; then
  bash scripts/parity.sh
fi
echo "[test] total wall time: $(( $(date +%s) - start )) s"
