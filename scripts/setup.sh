#!/usr/bin/env bash
# weir set-up: installs every Debian package the build and the tests need, then builds.
# Non-interactive and idempotent; safe to run again. Usage: scripts/setup.sh [build-dir]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}

pkgs=(
  build-essential cmake ninja-build pkg-config git
  libuv1-dev node-llhttp libtomlplusplus-dev libcjson-dev libcunit1-dev
  clang libclang-rt-14-dev
  python3 python3-numpy python3-jsonschema sentencepiece curl
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
fi

cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${WEIR_CMAKE_ARGS:-}
cmake --build "$build" -j"$(nproc)"

# The default model the README's run command serves: made here, never downloaded.
if [ ! -f "$here/models/default.gguf" ]; then
  mkdir -p "$here/models"
  "$build/bin/weir" mkmodel --preset tiny --out "$here/models/default.gguf"
fi
echo "weir: set-up done; binary at $build/bin/weir"
