#!/usr/bin/env bash
# The main job: set up (if needed), then SFT warm start + GRPO on the embedded arithmetic task, on CPU.
# Extra arguments are config overrides, e.g.: bash scripts/demo.sh trainer.total_training_steps=20
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=${EXTRAS:-dev,docs} bash scripts/setup.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
exec .venv/bin/minirl demo "$@"
