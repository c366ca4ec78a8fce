#!/usr/bin/env bash
# Structured output, first part of issue 13: the cost of the allowed-token mask per decode
# step next to the decode step itself, measured in the same run, runs alternated. For each
# model: `weir generate` (batch 1, greedy, one thread) gives the decode step; the grammar
# microbenchmark (tests/grammar/bench_grammar.c) walks tests/grammar/fixtures/order.schema.json
# (a nested schema: objects, arrays of objects, enums, formats, bounds) on the model's own
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
echo "| model | vocab | decode step (us, median of 3) | mask warm (us/step) | of the step | mask cold (us/step) | of the step |"
echo "|---|---|---|---|---|---|---|"
schema=$here/tests/grammar/fixtures/order.schema.json
for m in tiny-seed1 llama-1.1b-f16; do
  model=$models/$m.gguf
  n=$([ "$m" = tiny-seed1 ] && echo 256 || echo 32)
  decs=(); colds=(); warms=()
  for rep in 1 2 3; do
    line=$("$weir" generate --model "$model" --threads 1 --random-prompt 32 -n "$n" --ignore-eos \
           --quiet --seed "$rep" --set cache.memory_bytes=268435456 2>&1 | tail -1)
    tps=$(echo "$line" | sed -E 's/.*generated: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')
    decs+=("$(awk -v t="$tps" 'BEGIN{printf "%.1f", 1e6/t}')")
    out=$("$bench" --model "$model" --schema "$schema" --walks 6 --tokens 300 --seed "$rep")
    colds+=("$(echo "$out" | sed -n -E 's/^  cold  cpu .*mean +([0-9.]+) us.*/\1/p')")
    warms+=("$(echo "$out" | sed -n -E 's/^  warm  cpu .*mean +([0-9.]+) us.*/\1/p')")
    echo "run $m $rep: decode ${decs[-1]} us/step; mask cold ${colds[-1]} us, warm ${warms[-1]} us (CPU time, mean per step)" >&2
  done
  med() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
  d=$(med "${decs[@]}"); c=$(med "${colds[@]}"); w=$(med "${warms[@]}")
  echo "| $m | $(echo "$out" | sed -n -E 's/^vocabulary: .*, ([0-9]+) tokens .*/\1/p') | $d | $w | $(awk -v w="$w" -v d="$d" 'BEGIN{printf "%.3f%%", 100*w/d}') | $c | $(awk -v c="$c" -v d="$d" 'BEGIN{printf "%.3f%%", 100*c/d}') |"
done
echo
"$bench" --model "$models/llama-1.1b-f16.gguf" --walks 2 --tokens 200 | grep -E "compile|vocabulary"
