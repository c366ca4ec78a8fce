#!/usr/bin/env bash
# The work each family preset costs against its llama twin (same files as
# scripts/bench-families.sh), measured as CPU time rather than wall time, so that a machine
# shared with other jobs changes the figures less: one device thread (no pool spinning while
# descheduled), user+sys seconds of three `weir generate` runs (/usr/bin/time): a 1-token
# prompt and 1 token (loading and packing: L), PROMPT random tokens and 1 token (P), PROMPT
# tokens and 1 + GEN tokens (D); prefill = P - L, decode of GEN tokens = D - P. REPS rounds
# alternating family, twin. Prints every run, then the medians and the family's CPU time per
# byte of weights relative to its twin's (below 1.10 is the issue's bound).
#   scripts/bench-families-cpu.sh [build] [model dir]   REPS=3 PROMPT=32 GEN=4 WEIR=...
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
models=${2:-$here/models}
REPS=${REPS:-3}
PROMPT=${PROMPT:-32}
GEN=${GEN:-4}
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
# CPU seconds (user + sys) of one generate run: $1 model, $2 prompt tokens, $3 generated.
cpu() {
  /usr/bin/time -f "%U %S" -o "$models/.time" "$weir" generate --model "$1" --threads 1 \
    --random-prompt "$2" -n "$3" --ignore-eos --quiet --max-model-len 512 \
    --set cache.memory_bytes=67108864 >/dev/null 2>&1
  awk '{print $1 + $2}' "$models/.time"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "weir: $weir ($(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')); 1 thread;" \
     "prompt $PROMPT random tokens, $GEN generated; $REPS rounds alternated"
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
    for which in family twin; do
      m=$fam; [ $which = twin ] && m=$twin
      l=$(cpu "$m" 1 1) pp=$(cpu "$m" "$PROMPT" 1) dd=$(cpu "$m" "$PROMPT" $((GEN + 1)))
      pf=$(awk -v a="$pp" -v b="$l" 'BEGIN {printf "%.2f", a - b}')
      dc=$(awk -v a="$dd" -v b="$pp" 'BEGIN {printf "%.2f", a - b}')
      echo "$p $which run $r: load $l s, +prefill $pp s, +decode $dd s CPU: prefill $pf s, decode $dc s"
      if [ $which = family ]; then fp+=("$pf") fd+=("$dc"); else tp+=("$pf") td+=("$dc"); fi
    done
  done
  summary+=("$(awk -v p="$p" -v fp="$(median "${fp[@]}")" -v tp="$(median "${tp[@]}")" \
    -v fd="$(median "${fd[@]}")" -v td="$(median "${td[@]}")" -v fb="$fb" -v tb="$tb" \
    'BEGIN { printf "| %s | %.2f | %.2f | %.3f | %.2f | %.2f | %.3f | %.0f / %.0f |", p, fp, tp,
      (fp / fb) / (tp / tb), fd, td, (fd / fb) / (td / tb), fb / 1048576, tb / 1048576 }')")
done
echo
echo "| preset | prefill CPU s family | twin | family / twin per byte | decode CPU s family | twin | family / twin per byte | file MiB |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${summary[@]}"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
