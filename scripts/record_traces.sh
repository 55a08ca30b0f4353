#!/usr/bin/env bash
# Re-record the reference traces in traces/ (after a change that is meant to change them), then
# commit traces/. tests/e2e/test_trace_regression.py compares fresh runs with these files.
#   bash scripts/record_traces.sh              every entry of traces/manifest.json that is not pending
#                                              and whose requirements (ray, vllm, cuda) are met here
#   bash scripts/record_traces.sh grpo vllm    these entries (a pending one too)
#   bash scripts/record_traces.sh list         what the manifest holds and what is recorded
# Same settings as the test suite: one torch thread (bit-identical re-runs), offline.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
export MINIRL_CACHE=${MINIRL_CACHE:-$PWD/.cache/minirl} MINIRL_NO_PROGRESS=1
PY=${PYTHON:-.venv/bin/python}
if [ "${1:-}" = "list" ]; then
  exec "$PY" -m minirl.trainer.record_traces list
fi
exec "$PY" -m minirl.trainer.record_traces record "$@"
