#!/bin/sh
# The container's entry point (Dockerfile): `weir serve` on 0.0.0.0 with the image's model,
# unless the arguments say otherwise.
#
#   (no arguments)             weir serve --host $WEIR_HOST --port $WEIR_PORT
#                                         --device $WEIR_DEVICE $WEIR_MODEL
#   FLAGS...                   the same, then FLAGS (a later flag wins; but set the port
#                              with WEIR_PORT, which the health check reads too)
#   MODEL.gguf FLAGS...        that model instead of $WEIR_MODEL (also -m / --model)
#   --config FILE FLAGS...     the file decides host, port, device and model (only FLAGS
#                              are added), as `weir serve --config FILE` does outside
#   serve|generate|plugins|config|version|... ARGS   that weir command, as given
#   weir ARGS                  the same
#   sh, bash, any other program: run as given (for debugging the image)
#
# Environment: WEIR_HOST (0.0.0.0), WEIR_PORT (8000), WEIR_DEVICE (cpu; cuda in the CUDA
# image), WEIR_MODEL (the trained default model), WEIR_BIN (weir on PATH), and weir's own
# WEIR_API_KEY. POSIX sh: the image has no bash requirement.
set -eu
weir=${WEIR_BIN:-weir}

case "${1:-}" in
  weir) shift; exec "$weir" "$@" ;;
  serve|generate|plugins|config|mkmodel|quantize|bench|perplexity|convert|version|help)
    exec "$weir" "$@" ;;
  ""|-*|*.gguf|*.GGUF) ;;
  *)
    # A program of the image (sh, ls...) runs as given; anything else is taken as a model.
    if command -v "$1" >/dev/null 2>&1 && [ ! -f "$1" ]; then exec "$@"; fi ;;
esac

has_config=0
has_model=0
has_device=0
prev=
for a in "$@"; do
  case "$a" in
    --config|--config=*) has_config=1 ;;
    -m|--model|--model=*|*.gguf|*.GGUF) has_model=1 ;;
    --device|--device=*|-ngl|--ngl|--n-gpu-layers|--n-gpu-layers=*) has_device=1 ;;
  esac
  # A bare argument that is no option's value is the model (weir serve PATH).
  case "$a" in
    -*) ;;
    *) case "$prev" in
         -*) ;;
         *) [ -n "$a" ] && has_model=1 ;;
       esac ;;
  esac
  prev=$a
done

if [ "$has_config" = 1 ]; then
  exec "$weir" serve "$@"
fi
set -- --host "${WEIR_HOST:-0.0.0.0}" --port "${WEIR_PORT:-8000}" "$@"
if [ "$has_device" = 0 ] && [ -n "${WEIR_DEVICE:-}" ]; then
  set -- --device "$WEIR_DEVICE" "$@"
fi
if [ "$has_model" = 0 ]; then
  set -- "${WEIR_MODEL:-/opt/weir/share/weir/models/default.gguf}" "$@"
fi
exec "$weir" serve "$@"
