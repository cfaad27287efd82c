#!/usr/bin/env bash
# Installs OSWorld's own evaluator code (PyPI `desktop-env`, without its heavy dependencies) into a
# separate virtualenv, for the differential test of envs/osworld/evaluators/metrics.py only.
# Idempotent: a second run only checks. Nothing at run time of the gym imports it.
#   /opt/bunshin/osworld-ref-venv   --system-site-packages venv made from /opt/bunshin/venv's python,
#                                   so openpyxl/pandas/rapidfuzz/lxml/python-docx/odfpy come from there
# Usage: bash envs/osworld/install_reference.sh   (env BUNSHIN_PREFIX overrides /opt/bunshin)
set -euo pipefail
PREFIX=${BUNSHIN_PREFIX:-/opt/bunshin}
BASE_PY="$PREFIX/venv/bin/python"
REF="$PREFIX/osworld-ref-venv"
VERSION=${DESKTOP_ENV_VERSION:-1.0.2}
say() { printf '\033[1m[osworld-ref]\033[0m %s\n' "$*"; }

[ -x "$BASE_PY" ] || { echo "missing $BASE_PY: run scripts/setup.sh first" >&2; exit 1; }
if [ ! -x "$REF/bin/python" ]; then
  say "creating $REF"
  # A venv made from a venv's python inherits the base interpreter; .pth below adds the base venv's
  # packages, so the reference venv sees exactly the libraries the gym's own metrics use.
  "$BASE_PY" -m venv --system-site-packages "$REF"
  base_site=$("$BASE_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  ref_site=$("$REF/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$base_site" > "$ref_site/bunshin-base-venv.pth"
fi
if "$REF/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('desktop-env') != '$VERSION')" 2>/dev/null; then
  say "desktop-env $VERSION: present"
else
  say "installing desktop-env $VERSION (--no-deps) and the few extra libraries its metric modules import"
  "$REF/bin/python" -m pip install -q --no-deps "desktop-env==$VERSION"
fi
# Libraries that the compared metric modules (general, table, docs, chrome, vscode, utils) import at top level,
# beyond the base venv (which brings skimage, pptx, pypdf, mutagen). OCR and audio ones (easyocr,
# librosa, borb) are not installed: tests/osworld/osworld_reference_runner.py gives them placeholders
# that raise if called (the metrics that need them are not implemented here).
for mod_pkg in "pdfplumber:pdfplumber" "yaml:pyyaml" "cssselect:cssselect" "bs4:beautifulsoup4" "tldextract:tldextract" "PyPDF2:PyPDF2" "formulas:formulas" "xmltodict:xmltodict" "cv2:opencv-python-headless" "imagehash:imagehash" "fitz:pymupdf"; do
  mod=${mod_pkg%%:*}; pkg=${mod_pkg#*:}
  "$REF/bin/python" -c "import $mod" 2>/dev/null || "$REF/bin/python" -m pip install -q "$pkg" || say "could not install $pkg (only metrics that need it are skipped)"
done
"$REF/bin/python" - <<'PY'
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("desktop_env")
root = pathlib.Path(spec.submodule_search_locations[0]) / "evaluators" / "metrics"
print("[osworld-ref] metrics at", root, "modules:", sorted(p.stem for p in root.glob("*.py"))[:40])
PY
