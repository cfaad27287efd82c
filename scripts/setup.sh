#!/usr/bin/env bash
# Installs everything Bunshin Gym needs on a Debian 12 or 13 machine, as root. Idempotent: a second
# run only checks (and, once a day, brings the project's packages up to today's candidates, so this machine
# runs what a fresh one would). Layout (all outside the checkout, so workspaces can bind it read-only):
#   /opt/bunshin/venv   Python environment (Debian's python3, --system-site-packages for pyatspi/gi)
#   /opt/bunshin/criu   CRIU >= 4.1 (the distribution's if new enough, else Debian 13's debs unpacked)
#   /opt/bunshin/lib    the getsockopt shim for CRIU on Linux >= 6.16
#   /usr/local/bin/bunshin -> /opt/bunshin/venv/bin/bunshin
# Usage: setup.sh [--test]   --test adds what only the tests and side-by-side benchmarks use: qemu and
#                            Debian's kernel (module tests), OSWorld's reference metrics, BrowserGym and a
#                            small LLM server (their own venvs).
# BUNSHIN_REFRESH_HOURS (24): how old apt's lists and the venv may get before they are refreshed; 0 = always.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${BUNSHIN_PREFIX:-/opt/bunshin}
REFRESH_MIN=$(( ${BUNSHIN_REFRESH_HOURS:-24} * 60 ))
WITH_TESTS=0
for arg in "$@"; do
  case "$arg" in
    --test) WITH_TESTS=1 ;;
    *) echo "usage: $0 [--test]" >&2; exit 2 ;;
  esac
done
say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

[ "$(id -u)" = 0 ] || { echo "setup.sh must run as root (it installs Debian packages)" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive

APT_PACKAGES=(
  # workspaces and CRIU's helpers
  iproute2 procps psmisc util-linux gcc make libc6-dev python3-venv python3-dev python3-protobuf python3-seccomp
  # snapshots shipped between nodes (forkcore.shipping)
  tar zstd
  # browser
  chromium xvfb fonts-dejavu-core
  # desktop (OSWorld-style)
  openbox xdotool mousepad pcmanfm python3-pyatspi gir1.2-atspi-2.0 libatk-adaptor x11-apps
  python3-xlib imagemagick dbus-x11 at-spi2-core python3-tk x11-xserver-utils xterm sudo
  libreoffice-calc libreoffice-writer libreoffice-impress libreoffice-gtk3
  # the other OSWorld domains' applications (started only by the tasks that launch them)
  gimp vlc thunderbird
  # Totem ("Videos"), the default video player of OSWorld's Ubuntu desktop (tasks make VLC the default instead)
  totem
  # OSWorld's Chrome tasks launch socat to forward Chrome's DevTools port
  socat
)
# kernel-module tests in a VM guest
[ "$WITH_TESTS" = 1 ] && APT_PACKAGES+=(qemu-system-x86 busybox-static linux-image-amd64 linux-headers-amd64)
# Docker images as workspaces (forkcore.images): a private dockerd the tests and `bench docker` start, and
# mmdebstrap, which builds the stand-in image's root filesystem
APT_PACKAGES+=(docker.io mmdebstrap)

# True when apt's package lists are missing or older than BUNSHIN_REFRESH_HOURS.
lists_stale() { [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Release*' -mmin "-$REFRESH_MIN" -print -quit 2>/dev/null)" ]; }
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] || lists_stale; then
  say "updating apt's package lists"
  apt-get update -q
fi
# Installing docker.io must not start Debian's own dockerd (its bridge and iptables rules would change the
# host's network): deny service starts while apt runs, unless the machine already does (policy-rc.d).
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# What a fresh machine would get today (Chromium's security updates land every few weeks).
upgradable=$(apt-get -s -q install --only-upgrade --no-install-recommends "${APT_PACKAGES[@]}" 2>/dev/null \
             | awk '/^Inst /{print $2}' | tr '\n' ' ')
if [ -n "$upgradable" ]; then
  say "upgrading to today's candidates: $upgradable"
  apt-get install -y -q --only-upgrade --no-install-recommends "${APT_PACKAGES[@]}"
else
  say "Debian packages: all present, at today's candidates"
fi

# --- CRIU >= 4.1 -------------------------------------------------------------------------------
criu_ok() { "$1" --version 2>/dev/null | awk '/^Version:/{split($2,v,"."); exit !(v[1]>4 || (v[1]==4 && v[2]>=1))}'; }
mkdir -p "$PREFIX/criu/bin" "$PREFIX/lib"
TRIXIE_SOURCES=/etc/apt/sources.list.d/bunshin-trixie.sources
trixie_criu() { apt-cache madison criu 2>/dev/null | awk -F'|' '/trixie/{gsub(/ /, "", $2); print $2; exit}'; }
# An unpacked Debian 13 CRIU is kept at that suite's current build, like an installed package.
if criu_ok "$PREFIX/criu/bin/criu" && { [ ! -f "$TRIXIE_SOURCES" ] \
     || [ "$(cat "$PREFIX/criu/DEB_VERSION" 2>/dev/null)" = "$(trixie_criu)" ]; }; then
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
  cat > "$TRIXIE_SOURCES" <<SRC
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
  dpkg-deb -f "$debs"/criu_*.deb Version > "$PREFIX/criu/DEB_VERSION"
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
# CRIU from Debian 13, run through its own loader (installed by bunshin's scripts/setup.sh).
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
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || ! "$PY" -c "import forkcore" 2>/dev/null \
   || [ -n "$(find "$stamp" -mmin "+$REFRESH_MIN" 2>/dev/null)" ]; then
  say "installing Python packages at today's releases (torch as the CPU build first, so stable-baselines3 does not pull CUDA)"
  "$PY" -m pip install -q --upgrade pip
  "$PY" -m pip install -q "torch==2.13.0"
  "$PY" -m pip install -q --upgrade --upgrade-strategy eager -e ".[train,test,ray]"
  # pyautogui pulls python3-Xlib 0.15, which shadows python-xlib 0.33 (60x slower XGetImage): put 0.33 back.
  "$PY" -m pip install -q --force-reinstall --no-deps "python-xlib==0.33"
  touch "$stamp"
else
  say "Python packages: up to date"
fi
ln -sf "$PREFIX/venv/bin/bunshin" /usr/local/bin/bunshin
if [ "$WITH_TESTS" = 1 ]; then
  # OSWorld's own metric functions, test-only, in a separate venv (differential test of envs/osworld).
  bash envs/osworld/install_reference.sh
  # BrowserGym in its own venv (it pins an older Playwright): the baseline of `bunshin bench webarena`.
  bash scripts/install_browsergym.sh
  # A small real LLM (llama-cpp-python's server + Gemma 3 270M) in its own venv, for ChatPolicy and its test.
  bash scripts/install_llm.sh
fi
say "done. The project's Python: source $PREFIX/venv/bin/activate (then python, pip, bunshin, pytest)"
say "Check the machine with: bunshin doctor (bunshin doctor --deep also forks every app once)"
