#!/usr/bin/env bash
# Installs everything Bunshin Gym needs on a Debian 12 or 13 machine, as root. Idempotent: a second
# run only checks. Layout (all outside the checkout, so workspaces can bind it read-only):
#   /opt/bunshin/venv   Python environment (Debian's python3, --system-site-packages for pyatspi/gi)
#   /opt/bunshin/criu   CRIU >= 4.1 (the distribution's if new enough, else Debian 13's debs unpacked)
#   /opt/bunshin/lib    the getsockopt shim for CRIU on Linux >= 6.16
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${BUNSHIN_PREFIX:-/opt/bunshin}
say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

[ "$(id -u)" = 0 ] || { echo "setup.sh must run as root (it installs Debian packages)" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive

APT_PACKAGES=(
  # workspaces and CRIU's helpers
  iproute2 procps psmisc util-linux gcc make libc6-dev python3-venv python3-dev python3-protobuf
  # browser
  chromium xvfb fonts-dejavu-core
  # desktop (OSWorld-style)
  openbox xdotool mousepad pcmanfm python3-pyatspi gir1.2-atspi-2.0 libatk-adaptor x11-apps
  python3-xlib imagemagick dbus-x11 at-spi2-core python3-tk x11-xserver-utils xterm sudo
  libreoffice-calc libreoffice-writer libreoffice-gtk3
  # kernel-module tests in a VM guest
  qemu-system-x86 busybox-static linux-image-amd64 linux-headers-amd64
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  say "Debian packages: all present"
fi

# --- CRIU >= 4.1 -------------------------------------------------------------------------------
criu_ok() { "$1" --version 2>/dev/null | awk '/^Version:/{split($2,v,"."); exit !(v[1]>4 || (v[1]==4 && v[2]>=1))}'; }
mkdir -p "$PREFIX/criu/bin" "$PREFIX/lib"
if criu_ok "$PREFIX/criu/bin/criu"; then
  say "CRIU: $("$PREFIX/criu/bin/criu" --version | head -1) at $PREFIX/criu/bin/criu"
elif apt-cache policy criu 2>/dev/null | awk '/Candidate:/{split($2,v,"."); exit !(v[1]>4 || (v[1]==4 && v[2]>=1))}'; then
  say "CRIU: the distribution's package is new enough"
  apt-get install -y -q --no-install-recommends criu python3-pycriu
  ln -sf "$(command -v criu)" "$PREFIX/criu/bin/criu"
else
  say "CRIU: the distribution's is older than 4.1; unpacking Debian 13's debs into $PREFIX/criu"
  # Debian 13 as a low-priority suite: packages are only downloaded, never installed into the system.
  uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$uri" ] || { echo "cannot find the Debian mirror in /etc/apt; add one and rerun" >&2; exit 1; }
  cat > /etc/apt/sources.list.d/bunshin-trixie.sources <<SRC
Types: deb
URIs: $uri
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  printf 'Package: *\nPin: release n=trixie\nPin-Priority: 1\n' > /etc/apt/preferences.d/bunshin-trixie
  apt-get update -q
  debs=$(mktemp -d); chmod 755 "$debs"
  ( cd "$debs" && apt-get download -q criu/trixie libcompel1/trixie python3-pycriu/trixie libc6/trixie \
      libbsd0/trixie libmd0/trixie libgnutls30t64/trixie libnet1/trixie libnftables1/trixie \
      libnl-3-200/trixie libprotobuf-c1/trixie libuuid1/trixie libmnl0/trixie libnftnl11/trixie \
      libjansson4/trixie libxtables12/trixie libgmp10/trixie libnettle8t64/trixie libhogweed6t64/trixie \
      libidn2-0/trixie libunistring5/trixie libtasn1-6/trixie libp11-kit0/trixie libffi8/trixie )
  rm -rf "$PREFIX/criu/root"; mkdir -p "$PREFIX/criu/root"
  for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$PREFIX/criu/root"; done
  rm -rf "$debs"
  lib="$PREFIX/criu/root/usr/lib/x86_64-linux-gnu"
  if "$lib/ld-linux-x86-64.so.2" --library-path "$lib" --list "$PREFIX/criu/root/usr/sbin/criu" | grep -q "not found"; then
    echo "CRIU from Debian 13 misses libraries:" >&2
    "$lib/ld-linux-x86-64.so.2" --library-path "$lib" --list "$PREFIX/criu/root/usr/sbin/criu" | grep "not found" >&2
    exit 1
  fi
  # CRIU runs through Debian 13's own ld.so and libraries; nothing of it touches the system's.
  cat > "$PREFIX/criu/bin/criu" <<WRAP
#!/bin/sh
# CRIU 4.1.1 from Debian 13, run through its own loader (installed by bunshin's scripts/setup.sh).
preload=""
[ -n "\${BUNSHIN_CRIU_PRELOAD:-}" ] && preload="--preload \$BUNSHIN_CRIU_PRELOAD"
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" \$preload "$PREFIX/criu/root/usr/sbin/criu" "\$@"
WRAP
  chmod 755 "$PREFIX/criu/bin/criu"
  ln -sfn "$PREFIX/criu/root/usr/lib/python3/dist-packages" "$PREFIX/criu/python"
  criu_ok "$PREFIX/criu/bin/criu" || { echo "CRIU unpacked but '$PREFIX/criu/bin/criu --version' fails" >&2; exit 1; }
  say "CRIU: $("$PREFIX/criu/bin/criu" --version | head -1)"
fi

# --- getsockopt shim (Linux >= 6.16 with CRIU 4.1.1) ---------------------------------------------
if [ ! -f "$PREFIX/lib/sockshim.so" ] || [ forkcore/native/sockshim.c -nt "$PREFIX/lib/sockshim.so" ]; then
  say "building the getsockopt shim"
  gcc -O2 -Wall -Werror -shared -fPIC -o "$PREFIX/lib/sockshim.so" forkcore/native/sockshim.c -ldl
fi

# --- Python ---------------------------------------------------------------------------------------
if [ ! -x "$PREFIX/venv/bin/python" ]; then
  say "creating $PREFIX/venv"
  /usr/bin/python3 -m venv --system-site-packages "$PREFIX/venv"
fi
PY="$PREFIX/venv/bin/python"
# pycriu (pure Python) comes with CRIU; make it importable in the venv.
[ -d "$PREFIX/criu/python" ] && echo "$PREFIX/criu/python" > "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/bunshin-pycriu.pth"
stamp="$PREFIX/venv/.bunshin-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || ! "$PY" -c "import forkcore" 2>/dev/null; then
  say "installing Python packages (torch as the CPU build first, so stable-baselines3 does not pull CUDA)"
  "$PY" -m pip install -q --upgrade pip
  "$PY" -m pip install -q "torch==2.13.0"
  "$PY" -m pip install -q -e ".[train,test]"
  # pyautogui pulls python3-Xlib 0.15, which shadows python-xlib 0.33 (60x slower XGetImage): put 0.33 back.
  "$PY" -m pip install -q --force-reinstall --no-deps "python-xlib==0.33"
  touch "$stamp"
else
  say "Python packages: up to date"
fi
# OSWorld's own metric functions, test-only, in a separate venv (differential test of envs/osworld).
bash envs/osworld/install_reference.sh
# BrowserGym in its own venv (it pins an older Playwright): the baseline of `bunshin bench webarena`.
bash scripts/install_browsergym.sh
# A small real LLM (llama-cpp-python's server + Gemma 3 270M) in its own venv, for ChatPolicy and its test.
bash scripts/install_llm.sh
say "done. Check the machine with: $PREFIX/venv/bin/bunshin doctor"
