#!/usr/bin/env bash
# Speed of the family presets against a llama twin of the same shape (issue 30,
# docs/perf/model-families.md): each of `weir mkmodel --preset gemma3-1b`, `qwen3-0.6b` and
# `llama3.2-1b` (random weights, f16) next to the same preset written as a plain llama
# (`--arch llama --swa 0`; for llama3.2-1b `--no-rope-freqs`), so the two files have the same
# matrices and differ only in the family's own parts. For each pair, REPS rounds alternating
# family, twin, family, twin ... of `weir generate --random-prompt PROMPT --ignore-eos`; prints
# every run, then the medians and the family's figure per byte of weights relative to its
# twin's (the issue's bound: within 10%).
#
# MODE=wall (default): wall-clock prefill and decode tokens/s at THREADS threads; the per-byte
#   ratio is tokens/s x weights bytes, family over twin (above 1: the family is faster).
# MODE=cpu: the process CPU seconds `weir generate` reports for the prefill of PROMPT tokens
#   and for the decode of the GEN tokens after it ("cpu: prefill X s, decode Y s"), at one
#   device thread (no pool spinning while descheduled), so that a machine shared with other
#   jobs moves the figures less; the per-byte ratio is CPU s per file byte, family over twin
#   (below 1: the family is cheaper).
#
#   scripts/bench-families.sh [build] [model dir]
#   MODE=wall|cpu REPS=3 THREADS=2 PROMPT=64 GEN=8 PRESETS="gemma3-1b qwen3-0.6b llama3.2-1b"
#   WEIR=path/to/weir runs another binary (e.g. a copy, so that rebuilding does not change
#   what is measured); the files are written by the build's own.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
models=${2:-$here/models}
MODE=${MODE:-wall}
REPS=${REPS:-3}
THREADS=${THREADS:-2}
PROMPT=${PROMPT:-64}
GEN=${GEN:-8}
PRESETS=${PRESETS:-"gemma3-1b qwen3-0.6b llama3.2-1b"}
mk=$build/bin/weir
weir=${WEIR:-$mk}
case $MODE in
  wall | cpu) ;;
  *) echo "MODE must be wall or cpu, not '$MODE'" >&2; exit 2 ;;
esac
[ "$MODE" = cpu ] && THREADS=1
mkdir -p "$models"

twin_args() {
  case $1 in
    llama3.2-1b) echo "--no-rope-freqs" ;;
    *) echo "--arch llama --swa 0" ;;
  esac
}

# Prints "prefill decode" for one run of model $1 (seed $2): tokens/s (wall) or CPU s (cpu).
run() {
  local out line
  if [ "$MODE" = cpu ]; then
    "$weir" generate --model "$1" --threads 1 --random-prompt "$PROMPT" -n $((GEN + 1)) \
      --ignore-eos --quiet --seed "$2" --max-model-len 512 \
      --set cache.memory_bytes=67108864 2>/dev/null |
      sed -n -E 's/.*; cpu: prefill ([0-9.]+) s, decode ([0-9.]+) s.*/\1 \2/p'
    return
  fi
  out=$("$weir" generate --model "$1" --threads "$THREADS" --random-prompt "$PROMPT" -n "$GEN" \
        --ignore-eos --quiet --seed "$2" --max-model-len 1024 \
        --set cache.memory_bytes=268435456 2>&1)
  line=$(echo "$out" | tail -1)
  echo "$(echo "$line" | sed -E 's/.*prompt: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')" \
       "$(echo "$line" | sed -E 's/.*generated: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

if [ "$MODE" = cpu ]; then
  unit="s CPU" what="CPU s" ratio="family / twin CPU per byte"
else
  unit="tok/s" what="tok/s" ratio="family / twin speed per byte"
fi
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "weir: $weir ($(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')); mode $MODE;" \
     "threads $THREADS; prompt $PROMPT random tokens, $GEN generated; $REPS rounds alternated"
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
    read -r a b < <(run "$fam" "$r"); fp+=("$a"); fd+=("$b")
    echo "$p family run $r: prefill $a $unit, decode $b $unit"
    read -r a b < <(run "$twin" "$r"); tp+=("$a"); td+=("$b")
    echo "$p twin run $r: prefill $a $unit, decode $b $unit"
  done
  # wall: (tokens/s x bytes) family over twin; cpu: (CPU s / bytes) family over twin
  summary+=("$(awk -v p="$p" -v fp="$(median "${fp[@]}")" -v tp="$(median "${tp[@]}")" \
    -v fd="$(median "${fd[@]}")" -v td="$(median "${td[@]}")" -v fb="$fb" -v tb="$tb" \
    -v cpu="$([ "$MODE" = cpu ] && echo 1 || echo 0)" \
    'function r(f, t) { return cpu ? (f / fb) / (t / tb) : (f * fb) / (t * tb) }
     BEGIN { printf "| %s | %.2f | %.2f | %.3f | %.2f | %.2f | %.3f | %.0f / %.0f |", p, fp, tp,
      r(fp, tp), fd, td, r(fd, td), fb / 1048576, tb / 1048576 }')")
done
echo
echo "| preset | prefill $what, family | twin | $ratio | decode $what, family | twin | $ratio | file MiB |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${summary[@]}"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
