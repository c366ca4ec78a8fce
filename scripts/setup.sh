#!/usr/bin/env bash
# weir set-up: installs every Debian package the build and the tests need, then builds.
# Non-interactive and idempotent; safe to run again. Usage: scripts/setup.sh [build-dir]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}

pkgs=(
  build-essential cmake ninja-build pkg-config git
  libuv1-dev node-llhttp libtomlplusplus-dev libcjson-dev libcunit1-dev
  libhiredis-dev redis-server
  clang libclang-rt-14-dev
  python3 python3-numpy python3-jinja2 python3-yaml python3-jsonschema sentencepiece curl
  nginx-light nodejs
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  # nginx is here only for tests/nginx, which runs its own nginx as the test user with a
  # temporary prefix: when this script installed it, it leaves no system service behind.
  if [[ " ${missing[*]} " == *" nginx-light "* ]] && command -v systemctl >/dev/null &&
     systemctl is-enabled nginx >/dev/null 2>&1; then
    $SUDO systemctl disable --now nginx >/dev/null 2>&1 || true
  fi
fi

# npm comes with Node.js from some sources (nodesource) and as Debian's own package otherwise.
if ! command -v npm >/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends npm
fi
# The official client libraries the client tests drive (tests/clients), pinned.
npm ci --prefix "$here/tests/clients" --no-audit --no-fund --loglevel=error

cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${WEIR_CMAKE_ARGS:-}
cmake --build "$build" -j"$(nproc)"

# The default model the README's run command serves: the trained target committed in
# models/ (docs/models.md), linked, never downloaded. A default.gguf of your own is kept; one
# that earlier set-ups made with random weights (mkmodel's tiny preset) is replaced.
default="$here/models/default.gguf"
if [ -f "$default" ] && [ ! -L "$default" ]; then
  "$build/bin/weir" mkmodel --preset tiny --out "$build/tiny-check.gguf" > /dev/null
  if cmp -s "$default" "$build/tiny-check.gguf"; then rm -f "$default"; fi
  rm -f "$build/tiny-check.gguf"
fi
if [ ! -e "$default" ] || [ -L "$default" ]; then
  ln -sfn kjv-target.gguf "$default"
else
  echo "weir: keeping your own $default (the trained default is models/kjv-target.gguf)"
fi
echo "weir: set-up done; binary at $build/bin/weir"
