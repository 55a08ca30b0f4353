#!/usr/bin/env bash
# The whole test suite: set up (if needed), then unit tests, slow end-to-end tests (once, small
# settings), notebooks, the site build and its browser test, the parity suite against PyPI
# verl==0.9.1 and the vLLM suite (each in its own venv).
#   bash scripts/test.sh                  everything (what CI runs)
#   bash scripts/test.sh -m "not slow"    a quick subset (pytest arguments pass through; no parity/vLLM)
# Each notebook executes once per run: tests/notebooks/test_notebooks.py and the site build (tests/site/test_site.py)
# share its executed copy (docs/hooks/executed_notebooks.py, under .cache/executed/).
# At the end (also when something failed) it prints the wall time of each phase and the total,
# installs included: CI's budget for the whole `.ci/run` is 20 minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
LAP=$T0
PHASES=""
lap() {  # lap NAME: the time since the previous lap is NAME's
  local now
  now=$(date +%s)
  PHASES="$PHASES $1 $((now - LAP)) s,"
  LAP=$now
}
# shellcheck disable=SC2329  # called by the EXIT trap
report() {
  local rc=$?
  echo "[test] phases:${PHASES%,}"
  echo "[test] total wall time: $(( $(date +%s) - T0 )) s (setup and installs included; exit $rc)"
}
trap report EXIT

EXTRAS=${EXTRAS:-dev,docs} bash scripts/setup.sh
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
export MINIRL_CACHE=${MINIRL_CACHE:-$PWD/.cache/minirl} MINIRL_NO_PROGRESS=1
# The browser test uses Debian's chromium; install it when we can (root + apt), else that test skips.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[test] installing chromium for the browser test"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "[test] chromium could not be installed; the browser test will skip"
fi
lap setup
# Two workers on two cores (pytest-xdist); tests/conftest.py groups the ones that must share a worker.
# PYTEST_WORKERS=0 runs everything in this one process.
WORKERS=${PYTEST_WORKERS:-2}
XDIST=()
if [ "$WORKERS" != 0 ]; then XDIST=(-n "$WORKERS" --dist loadgroup); fi
.venv/bin/python -m pytest -q -p no:cacheprovider "${XDIST[@]}" "$@"
lap pytest
if [ $# -eq 0 ]; then
  bash scripts/parity.sh
  lap parity
  if [ -x scripts/vllm.sh ]; then bash scripts/vllm.sh; lap vllm; fi
fi
