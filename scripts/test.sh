#!/usr/bin/env bash
# The whole test suite: set up (if needed), then unit tests, slow end-to-end tests (once, small
# settings), notebooks, the site build and its browser test, the parity suite against PyPI
# verl==0.9.1 and the vLLM suite (each in its own venv).
#   bash scripts/test.sh                  everything (what CI runs)
#   bash scripts/test.sh -m "not slow"    a quick subset (pytest arguments pass through; no parity/vLLM)
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=${EXTRAS:-dev,docs} bash scripts/setup.sh
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
export MINIRL_CACHE=${MINIRL_CACHE:-$PWD/.cache/minirl} MINIRL_NO_PROGRESS=1
# The browser test uses Debian's chromium; install it when we can (root + apt), else that test skips.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[test] installing chromium for the browser test"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "[test] chromium could not be installed; the browser test will skip"
fi
start=$(date +%s)
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
if [ $# -eq 0 ]; then
  bash scripts/parity.sh
  if [ -x scripts/vllm.sh ]; then bash scripts/vllm.sh; fi
fi
echo "[test] total wall time: $(( $(date +%s) - start )) s"
