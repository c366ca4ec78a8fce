#!/usr/bin/env bash
# Structured output, first part of issue 13: the cost of the allowed-token mask per decode
# step next to the decode step itself, measured in the same run, runs alternated (masks in CPU
# time; the decode step as said below). For each model: `weir generate` (batch 1, greedy, one thread) gives the decode step;
# the grammar microbenchmark (tests/grammar/bench_grammar.c) walks
# tests/grammar/fixtures/order.schema.json (a nested schema: objects, arrays of objects, enums, formats, bounds) on the model's own
# vocabulary and times every mask, cold (token classes computed as positions are reached, as a
# first request with a schema sees) and warm (the same schema again, from the cache); then it
# prints compile times for the fixture schemas, json_object and a regex.
# Models: the tiny preset (512 tokens) and the 1.1B preset (f16, 32,000 tokens), made with
# `weir mkmodel --seed 1` when missing.
# Usage: scripts/bench-structured.sh [build-dir] [models-dir]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
models=${2:-$here/models}
weir=$build/bin/weir
bench=$build/tests/bin/weir_grammar_bench
mkdir -p "$models"
[ -f "$models/tiny-seed1.gguf" ] || "$weir" mkmodel --preset tiny --seed 1 --out "$models/tiny-seed1.gguf" >&2
[ -f "$models/llama-1.1b-f16.gguf" ] || "$weir" mkmodel --preset 1.1b --type f16 --seed 1 --out "$models/llama-1.1b-f16.gguf" >&2

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "weir: $("$weir" version)"
echo
echo "| model | vocab | decode step (us, median of 3) | mask warm (CPU us/step) | of the step | mask cold (CPU us/step) | of the step |"
echo "|---|---|---|---|---|---|---|"
schema=$here/tests/grammar/fixtures/order.schema.json
# CPU seconds (user + system) of one `weir generate` of n tokens.
gen_cpu() {
  local TIMEFORMAT='%U %S' t
  t=$( { time "$weir" generate --model "$1" --threads 1 --random-prompt 32 -n "$2" --ignore-eos \
          --quiet --seed "$3" --set cache.memory_bytes=268435456 >/dev/null 2>&1; } 2>&1 )
  echo "$t" | awk '{print $1 + $2}'
}
# The decode step of one `weir generate` (tokens after the first over their time, wall clock).
gen_wall() {
  local line tps
  line=$("$weir" generate --model "$1" --threads 1 --random-prompt 32 -n "$2" --ignore-eos \
         --quiet --seed "$3" --set cache.memory_bytes=268435456 2>&1 | tail -1)
  tps=$(echo "$line" | sed -E 's/.*generated: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')
  awk -v t="$tps" 'BEGIN{printf "%.1f", 1e6/t}'
}
for m in tiny-seed1 llama-1.1b-f16; do
  model=$models/$m.gguf
  decs=(); walls=(); colds=(); warms=()
  for rep in 1 2 3; do
    if [ "$m" = tiny-seed1 ]; then
      # CPU time of the decode step: a long generation minus a short one, over the tokens
      # between them (load and prefill cancel out; other processes do not count).
      c1=$(gen_cpu "$model" 32 "$rep")
      c2=$(gen_cpu "$model" 1024 "$rep")
      decs+=("$(awk -v a="$c1" -v b="$c2" 'BEGIN{printf "%.1f", (b - a) / 992 * 1e6}')")
      walls+=("$(gen_wall "$model" 1024 "$rep")")
    else
      # A 1.1B step is ~0.1 s: its loading time (2 GB) varies more than a few steps cost, so
      # the decode step is the wall-clock figure `weir generate` reports, which a loaded
      # machine inflates (the mask figures are CPU time: the ratio then errs low).
      walls+=("$(gen_wall "$model" 32 "$rep")")
      decs+=("${walls[-1]}")
    fi
    out=$("$bench" --model "$model" --schema "$schema" --walks 6 --tokens 300 --seed "$rep")
    colds+=("$(echo "$out" | sed -n -E 's/^  cold  cpu .*mean +([0-9.]+) us.*/\1/p')")
    warms+=("$(echo "$out" | sed -n -E 's/^  warm  cpu .*mean +([0-9.]+) us.*/\1/p')")
    echo "run $m $rep: decode ${decs[-1]} us/step (wall ${walls[-1]}); mask cold ${colds[-1]} us, warm ${warms[-1]} us (CPU time, mean per step)" >&2
  done
  med() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
  d=$(med "${decs[@]}"); c=$(med "${colds[@]}"); w=$(med "${warms[@]}")
  clock=$([ "$m" = tiny-seed1 ] && echo CPU || echo wall)
  echo "| $m | $(echo "$out" | sed -n -E 's/^vocabulary: .*, ([0-9]+) tokens .*/\1/p') | $d ($clock) | $w | $(awk -v w="$w" -v d="$d" 'BEGIN{printf "%.3f%%", 100*w/d}') | $c | $(awk -v c="$c" -v d="$d" 'BEGIN{printf "%.3f%%", 100*c/d}') |"
done
echo
"$bench" --model "$models/llama-1.1b-f16.gguf" --walks 2 --tokens 200 | grep -E "compile|vocabulary"
