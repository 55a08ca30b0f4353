#!/usr/bin/env bash
# Create ./.venv (if missing) and install minirl (the distribution minirl-verl) with its extras. Idempotent: re-installs only
# when pyproject.toml changed. Used by scripts/demo.sh and scripts/test.sh; safe to run by hand.
#   EXTRAS=dev,docs bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${MINIRL_VENV:-.venv}
EXTRAS=${EXTRAS:-dev,docs}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV with $($PY --version)"
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.minirl-installed"
want="$(sha256sum pyproject.toml | cut -c1-16)-$EXTRAS"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing minirl[$EXTRAS] into $VENV (first time: ~2-3 minutes)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -U pip
  # torch first, pinned: this machine's pip finds a CPU build of 2.13.0 on local disk; elsewhere use
  # the PyTorch CPU index (pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu).
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0" \
    || "$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch>=2.6,<=2.13.0"
  # The distribution was named `minirl` before it became `minirl-verl` (the PyPI name `minirl` is taken):
  # an editable install under the old name would keep a second `minirl` command and dist-info around.
  if "$VENV/bin/python" -m pip show minirl >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip uninstall -y -q --disable-pip-version-check minirl
  fi
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]"
  echo "$want" > "$stamp"
fi
