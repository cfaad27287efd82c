#!/usr/bin/env bash
# The README's main command: set up the machine (idempotent), check it, then run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=/opt/bunshin/venv/bin/python
"$PY" -m bunshin_gym.cli doctor
exec "$PY" -m bunshin_gym.cli demo "$@"
