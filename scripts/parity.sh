#!/usr/bin/env bash
# Parity suite: run minirl.trainer.ppo.core_algos (and minirl.trainer.distillation) and PyPI verl==0.9.1 on the
# same inputs (tests/parity/).
#
# verl 0.9.1 pins transformers<5.11 and tensordict<=0.10, so it gets its own venv, created here on
# first use at ${PARITY_VENV:-.venv-parity} (about 1.4 GB). Only what `import verl.trainer.ppo.core_algos`
# needs on CPU is installed (checked by hand: verl/__init__ -> verl/protocol.py imports ray, tensordict,
# transformers, codetiming at top level, so none of them can be dropped); everything else verl lists
# (vllm, wandb, ...) is skipped with --no-deps. `datasets` and `pillow` are there for
# `import verl.trainer.distillation` (-> verl/workers/utils/losses.py -> verl/utils/dataset/rl_dataset.py).
# torch==2.13.0 resolves to the CPU wheel where pip's config points at a local wheel folder (CI and dev
# machines); elsewhere add --index-url https://download.pytorch.org/whl/cpu yourself. Never a bare
# `torch`: that pulls a multi-GB CUDA build.
#
# Usage: scripts/parity.sh [extra pytest args]        (env: PARITY_VENV, PYTHON=python3)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${PARITY_VENV:-.venv-parity}"
PY="${PYTHON:-python3}"

DEPS="packaging numpy ray tensordict<=0.10.0 omegaconf transformers>=5.5.3,<5.11 codetiming datasets pillow pytest"
SPEC="torch==2.13.0 verl==0.9.1 $DEPS"
STAMP="$VENV/.minirl-parity-spec"  # written after a complete install; a changed SPEC reinstalls

if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$SPEC" ]; then
    echo "parity: creating $VENV"
    start=$(date +%s)
    "$PY" -m venv "$VENV"
    pip_install() { "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@"; }
    pip_install torch==2.13.0
    pip_install --no-deps verl==0.9.1
    # shellcheck disable=SC2086  # word-splitting DEPS is intended
    pip_install $DEPS
    echo "$SPEC" > "$STAMP"
    echo "parity: $VENV ready in $(( $(date +%s) - start )) s"
fi

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # minirl from this checkout (core_algos needs torch+numpy only)
export MINIRL_PARITY_REQUIRED=1                      # a verl that fails to import is an error, not a skip
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
exec "$VENV/bin/python" -m pytest tests/parity -q -p no:cacheprovider "$@"
