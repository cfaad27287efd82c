#!/usr/bin/env bash
# Installs the BrowserGym baseline used by benchmarks/webarena_bench.py into its own virtualenv.
# Idempotent: a second run only checks. pip only: no browser download (Playwright's own download fails
# here); benchmarks/browsergym_baseline.py launches Debian's /usr/bin/chromium instead.
#   /opt/bunshin/browsergym-venv   Debian's python3 -m venv + browsergym-core 0.14.3 (pins playwright==1.44)
# Why a separate venv: browsergym-core pins playwright==1.44, older than the one in /opt/bunshin/venv.
# Override the location with BUNSHIN_BROWSERGYM_VENV=/path.
set -euo pipefail
VENV=${BUNSHIN_BROWSERGYM_VENV:-/opt/bunshin/browsergym-venv}
BROWSERGYM_VERSION=0.14.3
say() { printf '\033[1m[browsergym]\033[0m %s\n' "$*"; }

check() {
  "$VENV/bin/python" - <<PY 2>/dev/null
import importlib.metadata as m
assert m.version("browsergym-core") == "$BROWSERGYM_VERSION", m.version("browsergym-core")
import browsergym.core, playwright.sync_api  # noqa: F401
print("browsergym-core", m.version("browsergym-core"), "playwright", m.version("playwright"))
PY
}

if [ -x "$VENV/bin/python" ] && check; then
  say "already installed at $VENV"
  exit 0
fi
command -v /usr/bin/chromium >/dev/null || { echo "needs Debian's chromium: apt-get install chromium (or scripts/setup.sh)" >&2; exit 1; }
/usr/bin/python3 -c "import venv, ensurepip" 2>/dev/null || { echo "needs python3-venv: apt-get install python3-venv" >&2; exit 1; }
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV (Debian's /usr/bin/python3)"
  /usr/bin/python3 -m venv "$VENV"
fi
say "pip install browsergym-core==$BROWSERGYM_VERSION (no browser download)"
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "$VENV/bin/pip" install -q --disable-pip-version-check \
  "browsergym-core==$BROWSERGYM_VERSION" psutil
check || { echo "install finished but browsergym does not import from $VENV" >&2; exit 1; }
say "done: $VENV/bin/python benchmarks/browsergym_baseline.py --help"
