#!/usr/bin/env bash
# The README's test command: set up the machine (idempotent), then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
PY=/opt/bunshin/venv/bin/python
"$PY" -m bunshin_gym.cli gc >/dev/null || true  # state left by a killed earlier run
exec "$PY" -m pytest -ra --durations=30 "$@"
