#!/usr/bin/env bash
# CPU benchmark of issue 3: prefill (512 tokens) and decode tokens/s of the 1.1B Llama shape
# (dim 2048, 22 layers, 32 heads, 4 KV heads, FFN 5632, vocab 32000) with F16 and Q8_0
# source weights, 1 and 2 threads, next to the machine's memory read bandwidth (the decode
# roofline) measured in the same run. Prints a Markdown table.
# Usage: scripts/bench-cpu.sh [build-dir] [models-dir]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
models=${2:-$here/models}
weir=$build/bin/weir
mkdir -p "$models"
for t in f16 q8_0; do
  m=$models/llama-1.1b-$t.gguf
  [ -f "$m" ] || "$weir" mkmodel --preset 1.1b --type "$t" --seed 1 --out "$m" >&2
done

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
echo "flags: $(grep -m1 -o -w -E 'avx2|avx512f|f16c|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "weir: $("$weir" version)"
echo
bw1=$("$build/bin/weir_membw" 1024 1 | sed -E 's/.*: ([0-9.]+) GB.*/\1/')
bw2=$("$build/bin/weir_membw" 1024 2 | sed -E 's/.*: ([0-9.]+) GB.*/\1/')
echo "memory read bandwidth: ${bw1} GB/s (1 thread), ${bw2} GB/s (2 threads)"
echo
echo "| weights | threads | prefill 512 (tok/s) | decode (tok/s) | weight bytes/token | decode roofline (tok/s) | of roofline |"
echo "|---|---|---|---|---|---|---|"
for t in f16 q8_0; do
  m=$models/llama-1.1b-$t.gguf
  for th in 1 2; do
    out=$("$weir" generate --model "$m" --threads "$th" --random-prompt 512 -n 32 --ignore-eos \
          --quiet --set cache.memory_bytes=268435456 --set log.level=\"warn\" 2>&1 | tail -1)
    pp=$(echo "$out" | sed -E 's/.*prompt: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')
    tg=$(echo "$out" | sed -E 's/.*generated: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')
    # The fp16 scheme holds every linear weight in f16 (2 bytes per parameter) whatever the
    # source; per token decode reads all of them once (the embedding only one row).
    # 22 layers x (q, o: 2048^2; k, v: 2048x256; gate, up, down: 2048x5632) + output 32000x2048.
    wbytes=$(( (22 * (2*2048*2048 + 2*2048*256 + 3*2048*5632) + 32000*2048) * 2 ))
    bw=$([ "$th" = 1 ] && echo "$bw1" || echo "$bw2")
    roof=$(awk -v bw="$bw" -v w="$wbytes" 'BEGIN{printf "%.2f", bw*1e9/w}')
    frac=$(awk -v tg="$tg" -v r="$roof" 'BEGIN{printf "%.0f%%", 100*tg/r}')
    echo "| $t | $th | $pp | $tg | $(awk -v w="$wbytes" 'BEGIN{printf "%.2f GB", w/1e9}') | $roof | $frac |"
  done
done
