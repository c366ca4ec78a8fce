#!/usr/bin/env bash
# The work each family preset costs against its llama twin (the files of
# scripts/bench-families.sh), as CPU time rather than wall time, so that a machine shared with
# other jobs moves the figures less: one device thread (no pool spinning while descheduled),
# and the process CPU seconds `weir generate` reports for the prefill of PROMPT random tokens
# and for the decode of the GEN tokens after it ("cpu: prefill X s, decode Y s"). REPS rounds
# alternating family, twin. Prints every run, then the medians and the family's CPU time per
# byte of weights relative to its twin's (the issue's bound: 1.10).
#   scripts/bench-families-cpu.sh [build] [model dir]
#   REPS=3 PROMPT=64 GEN=8 PRESETS="gemma3-1b qwen3-0.6b llama3.2-1b" WEIR=path/to/weir
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
models=${2:-$here/models}
REPS=${REPS:-3}
PROMPT=${PROMPT:-64}
GEN=${GEN:-8}
PRESETS=${PRESETS:-"gemma3-1b qwen3-0.6b llama3.2-1b"}
mk=$build/bin/weir
weir=${WEIR:-$mk}
mkdir -p "$models"
twin_args() {
  case $1 in
    llama3.2-1b) echo "--no-rope-freqs" ;;
    *) echo "--arch llama --swa 0" ;;
  esac
}
# Prints "prefill_cpu_s decode_cpu_s" of one run of model $1.
run() {
  "$weir" generate --model "$1" --threads 1 --random-prompt "$PROMPT" -n $((GEN + 1)) \
    --ignore-eos --quiet --max-model-len 512 --set cache.memory_bytes=67108864 2>/dev/null |
    sed -n -E 's/.*; cpu: prefill ([0-9.]+) s, decode ([0-9.]+) s.*/\1 \2/p'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "weir: $weir ($(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')); 1 thread;" \
     "prompt $PROMPT random tokens, then $GEN decoded; $REPS rounds alternated"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
summary=()
for p in $PRESETS; do
  fam=$models/fam-$p.gguf twin=$models/fam-$p-llama.gguf
  [ -f "$fam" ] || "$mk" mkmodel --preset "$p" --type f16 --out "$fam" >/dev/null 2>&1
  # shellcheck disable=SC2046
  [ -f "$twin" ] || "$mk" mkmodel --preset "$p" --type f16 $(twin_args "$p") \
                      --out "$twin" >/dev/null 2>&1
  fb=$(stat -c %s "$fam") tb=$(stat -c %s "$twin")
  fp=() fd=() tp=() td=()
  for r in $(seq 1 "$REPS"); do
    read -r a b < <(run "$fam"); fp+=("$a"); fd+=("$b")
    echo "$p family run $r: prefill $a s CPU, decode $b s CPU"
    read -r a b < <(run "$twin"); tp+=("$a"); td+=("$b")
    echo "$p twin run $r: prefill $a s CPU, decode $b s CPU"
  done
  summary+=("$(awk -v p="$p" -v fp="$(median "${fp[@]}")" -v tp="$(median "${tp[@]}")" \
    -v fd="$(median "${fd[@]}")" -v td="$(median "${td[@]}")" -v fb="$fb" -v tb="$tb" \
    'BEGIN { printf "| %s | %.2f | %.2f | %.3f | %.2f | %.2f | %.3f | %.0f / %.0f |", p, fp, tp,
      (fp / fb) / (tp / tb), fd, td, (fd / fb) / (td / tb), fb / 1048576, tb / 1048576 }')")
done
echo
echo "| preset | prefill CPU s, family | twin | family / twin per byte | decode CPU s, family | twin | family / twin per byte | file MiB |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${summary[@]}"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
