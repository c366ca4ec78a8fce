#!/usr/bin/env bash
# Builds weir's CPU container image and runs it, with nothing pulled from a registry: the
# Debian bookworm base is made here with debootstrap (from Debian's apt mirror) and imported
# into podman; then `podman build` (the Dockerfile's build stage installs its packages from
# the same mirror), then the image is run and asked /health, /v1/models and a completion,
# its health check run, and it is stopped with SIGTERM (weir drains and exits 0).
# Minutes, and network to the apt mirror: outside the test suite (tests/container checks
# the files and the entry point in seconds). Tried as root (rootless podman was not tried).
# Usage: scripts/build-image.sh [image-tag]   (default weir:latest)
# Environment: WEIR_IMAGE_WORK (/tmp/weir-image: the debootstrap tree), DEBIAN_MIRROR.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tag=${1:-weir:latest}
work=${WEIR_IMAGE_WORK:-/tmp/weir-image}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
base=localhost/weir-debian:bookworm
say() { echo "build-image: $*"; }

command -v podman >/dev/null || { say "podman is not installed"; exit 1; }
if ! podman image exists "$base"; then
  command -v debootstrap >/dev/null || { say "debootstrap is not installed"; exit 1; }
  if [ ! -x "$work/rootfs/usr/bin/apt-get" ]; then
    say "debootstrap bookworm into $work/rootfs (a few minutes)"
    mkdir -p "$work"
    debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror"
  fi
  say "importing $work/rootfs as $base"
  tar -C "$work/rootfs" --exclude=./proc --exclude=./sys --exclude=./dev -c . |
    podman import --change 'CMD ["/bin/bash"]' - "$base"
fi

# Where podman's OCI runtime cannot start containers (this project's build machines are
# themselves sandboxes: crun fails with "cgroups in hybrid mode not supported" and
# "setrlimit RLIMIT_NPROC: Operation not permitted"), build with buildah's chroot isolation
# and run the image's entry point the same way (host network, no namespaces).
if podman run --rm "$base" true >/dev/null 2>&1; then mode=oci; else mode=chroot; fi
say "building $tag (isolation: $mode)"
t0=$(date +%s)
podman build --format docker $([ $mode = chroot ] && echo --isolation chroot) \
  --build-arg BASE_IMAGE="$base" --build-arg VARIANT=cpu -t "$tag" "$here"
say "built in $(( $(date +%s) - t0 )) s; size $(podman image inspect "$tag" --format '{{.Size}}') bytes"
podman image inspect "$tag" --format 'user {{.Config.User}}, entrypoint {{.Config.Entrypoint}}, healthcheck {{.Config.Healthcheck}}'

port=${WEIR_IMAGE_PORT:-18080}
if [ $mode = oci ]; then
  cid=$(podman run -d -p "127.0.0.1:$port:8000" "$tag" --set cache.memory_bytes=64MiB)
  cleanup() { podman rm -f "$cid" >/dev/null 2>&1 || true; }
  inside() { podman exec "$cid" "$@"; }
else
  # The image's own user, environment and entry point; WEIR_PORT moves it off 8000 since
  # the host network is shared.
  cid=$(buildah from "$tag")
  buildah run --isolation chroot --user 10001:10001 --env WEIR_PORT="$port" "$cid" -- \
    /usr/local/bin/weir-entrypoint --set cache.memory_bytes=64MiB > "$work/run.log" 2>&1 &
  runner=$!
  cleanup() { kill "$runner" 2>/dev/null || true; wait "$runner" 2>/dev/null || true;
              buildah rm "$cid" >/dev/null 2>&1 || true; }
  inside() { buildah run --isolation chroot --user 10001:10001 --env WEIR_PORT="$port" \
               "$cid" -- "$@"; }
fi
trap cleanup EXIT
for _ in $(seq 1 120); do
  curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 1
done
curl -fsS "http://127.0.0.1:$port/health"; echo
say "user in the container: $(inside id)"
[ "$(inside id -u)" != 0 ] || { say "the container runs as root"; exit 1; }
curl -fsS "http://127.0.0.1:$port/v1/models"; echo
curl -fsS "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"In the beginning","max_tokens":8}'; echo
inside /usr/local/bin/weir-healthcheck && say "HEALTHCHECK script: healthy"
if [ $mode = oci ]; then
  podman stop -t 30 "$cid" >/dev/null
  code=$(podman inspect "$cid" --format '{{.State.ExitCode}}')
else
  # SIGTERM to weir inside the chroot (a child of buildah run).
  wpid=$(pgrep -f -- "--host 0.0.0.0 --port $port --set cache.memory_bytes=64MiB" | head -1)
  [ -n "$wpid" ] && kill -TERM "$wpid"
  code=0; wait "$runner" || code=$?
fi
[ "$code" = 0 ] || { say "weir exited $code on SIGTERM"; exit 1; }
say "OK: $tag built, served, healthy, drained and exited 0"
