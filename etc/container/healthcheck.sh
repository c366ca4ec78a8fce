#!/bin/sh
# The image's HEALTHCHECK: exits 0 when GET /health on the local weir answers 200 (serving),
# 1 otherwise (loading, draining, down). weir answers /health without the API key. The image
# has no curl: one HTTP/1.0 request over bash's /dev/tcp (Debian images ship bash).
set -eu
port=${WEIR_PORT:-8000}
exec bash -c '
  exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
  printf "GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3
  IFS= read -r status <&3 || exit 1
  case "$status" in
    "HTTP/1."?" 200 "*) exit 0 ;;
    *) exit 1 ;;
  esac' healthcheck "$port"
