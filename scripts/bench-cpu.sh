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
echo "| source weights | scheme | threads | prefill 512 (tok/s, median of 3) | decode 64 (tok/s, median of 3) | weight bytes/token | decode roofline (tok/s) | of roofline |"
echo "|---|---|---|---|---|---|---|---|"
# (source dtype, quant scheme): the fp16 scheme holds every matrix in f16 whatever the source;
# int8 carries Q8_0 blocks over exactly (1.125 bytes per parameter).
for pair in f16:fp16 q8_0:fp16 q8_0:int8; do
  t=${pair%%:*}
  scheme=${pair##*:}
  m=$models/llama-1.1b-$t.gguf
  for th in 1 2; do
    # Three runs; the median of each figure (the machine is a shared VM).
    pps=(); tgs=()
    for rep in 1 2 3; do
      out=$("$weir" generate --model "$m" --quant "$scheme" --threads "$th" --random-prompt 512 \
            -n 64 --ignore-eos --quiet --seed "$rep" --set cache.memory_bytes=268435456 2>&1)
      line=$(echo "$out" | tail -1)
      pps+=("$(echo "$line" | sed -E 's/.*prompt: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')")
      tgs+=("$(echo "$line" | sed -E 's/.*generated: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')")
    done
    pp=$(printf '%s\n' "${pps[@]}" | sort -g | sed -n 2p)
    tg=$(printf '%s\n' "${tgs[@]}" | sort -g | sed -n 2p)
    echo "runs: $t/$scheme/${th}t prefill ${pps[*]} decode ${tgs[*]}" >&2
    # Bytes one decode step reads: every packed weight (the engine logs their size) but the
    # embedding table, of which a step reads one row (32000 x 2048 of 1,099,956,224 params).
    wmib=$(echo "$out" | sed -n -E 's/.*; weights ([0-9.]+) MiB;.*/\1/p' | head -1)
    wbytes=$(awk -v m="$wmib" 'BEGIN{printf "%.0f", m*1048576*(1-65536000/1099956224)}')
    bw=$([ "$th" = 1 ] && echo "$bw1" || echo "$bw2")
    roof=$(awk -v bw="$bw" -v w="$wbytes" 'BEGIN{printf "%.2f", bw*1e9/w}')
    frac=$(awk -v tg="$tg" -v r="$roof" 'BEGIN{printf "%.0f%%", 100*tg/r}')
    echo "| $t | $scheme | $th | $pp | $tg | $(awk -v w="$wbytes" 'BEGIN{printf "%.2f GB", w/1e9}') | $roof | $frac |"
  done
done
