#!/usr/bin/env bash
# Speed of the family presets against a llama twin of the same shape (issue 30,
# docs/perf/model-families.md): each of `weir mkmodel --preset gemma3-1b`, `qwen3-0.6b` and
# `llama3.2-1b` (random weights, f16) next to the same preset written as a plain llama
# (`--arch llama --swa 0`; for llama3.2-1b `--no-rope-freqs`), so the two files have the same
# matrices and differ only in the family's own parts. For each pair, REPS rounds alternating
# family, twin, family, twin ... of `weir generate --random-prompt PROMPT -n GEN --ignore-eos`;
# prints every run (prefill and decode tokens/s, weights MiB), then the medians and the
# family's speed per byte read relative to its twin's (tokens/s x weights bytes).
#   scripts/bench-families.sh [build] [model dir]
#   REPS=3 THREADS=2 PROMPT=64 GEN=8 PRESETS="gemma3-1b qwen3-0.6b llama3.2-1b"
#   WEIR=path/to/weir runs another binary (e.g. a copy, so that rebuilding does not change
#   what is measured); the files are written by the build's own.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
models=${2:-$here/models}
REPS=${REPS:-3}
THREADS=${THREADS:-2}
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

# Prints "prefill decode weights_mib" for one run.
run() {
  local out line
  out=$("$weir" generate --model "$1" --threads "$THREADS" --random-prompt "$PROMPT" -n "$GEN" \
        --ignore-eos --quiet --seed "$2" --max-model-len 1024 \
        --set cache.memory_bytes=268435456 2>&1)
  line=$(echo "$out" | tail -1)
  echo "$(echo "$line" | sed -E 's/.*prompt: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')" \
       "$(echo "$line" | sed -E 's/.*generated: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')" \
       "$(echo "$out" | sed -n -E 's/.*; weights ([0-9.]+) MiB;.*/\1/p' | head -1)"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "weir: $weir ($(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')); threads $THREADS;" \
     "prompt $PROMPT random tokens, $GEN generated; $REPS rounds alternated"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
summary=()
for p in $PRESETS; do
  fam=$models/fam-$p.gguf twin=$models/fam-$p-llama.gguf
  [ -f "$fam" ] || "$mk" mkmodel --preset "$p" --type f16 --out "$fam" >/dev/null 2>&1
  # shellcheck disable=SC2046
  [ -f "$twin" ] || "$mk" mkmodel --preset "$p" --type f16 $(twin_args "$p") \
                      --out "$twin" >/dev/null 2>&1
  fp=() fd=() tp=() td=()
  fm=0 tm=0
  for r in $(seq 1 "$REPS"); do
    read -r a b m < <(run "$fam" "$r"); fp+=("$a"); fd+=("$b"); fm=$m
    echo "$p family run $r: prefill $a tok/s, decode $b tok/s, weights $m MiB"
    read -r a b m < <(run "$twin" "$r"); tp+=("$a"); td+=("$b"); tm=$m
    echo "$p llama twin run $r: prefill $a tok/s, decode $b tok/s, weights $m MiB"
  done
  summary+=("$(awk -v p="$p" -v fp="$(median "${fp[@]}")" -v fd="$(median "${fd[@]}")" \
    -v tp="$(median "${tp[@]}")" -v td="$(median "${td[@]}")" -v fm="$fm" -v tm="$tm" \
    'BEGIN { printf "| %s | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f | %.0f / %.0f |", p, fp, tp,
             (fp * fm) / (tp * tm), fd, td, (fd * fm) / (td * tm), fm, tm }')")
done
echo
echo "| preset | prefill family | prefill twin | per byte | decode family | decode twin | per byte | weights MiB |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${summary[@]}"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
