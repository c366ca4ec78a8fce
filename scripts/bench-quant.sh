#!/usr/bin/env bash
# Quantization benchmark of issue 11 on the CPU: prefill (512 tokens) and decode (64 tokens
# from a 1-token prompt, as llama-bench's tg64) tokens/s of
# the 1.1B Llama shape with the fp16, int8 and awq_int4 schemes, 1 and 2 threads, next to the
# memory read bandwidth (the decode roofline) and llama.cpp's llama-bench on the same files,
# every configuration of a repetition run before the next repetition starts (runs
# alternated). Also: `weir quantize` time (calibration and packing) and the load time of its
# output. Prints Markdown (docs/perf/quant.md holds a run).
#
# Usage: scripts/bench-quant.sh [build-dir] [models-dir]
# Environment:
#   LLAMA_BENCH   path of llama.cpp's llama-bench (its shared libraries beside it); unset:
#                 the llama.cpp rows are skipped
#   CALIB_TEXT    calibration text for `weir quantize` (default: the GPL-3 text Debian ships)
#   REPS          repetitions, median reported (default 3)
#   THREADS       thread counts (default "1 2")
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
models=${2:-$here/models}
weir=$build/bin/weir
reps=${REPS:-3}
threads=${THREADS:-"1 2"}
calib=${CALIB_TEXT:-/usr/share/common-licenses/GPL-3}
mkdir -p "$models"
for t in f16 q4_0; do
  m=$models/llama-1.1b-$t.gguf
  [ -f "$m" ] || "$weir" mkmodel --preset 1.1b --type "$t" --seed 1 --out "$m" >&2
done
f16=$models/llama-1.1b-f16.gguf
q40=$models/llama-1.1b-q4_0.gguf
awq=$models/llama-1.1b-awq-g128.gguf

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
echo "flags: $(grep -m1 -o -w -E 'avx2|avx512f|avx512_vnni|f16c|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "weir: $("$weir" version)"
[ -n "${LLAMA_BENCH:-}" ] && echo "llama.cpp: $LLAMA_BENCH"
echo

# ---- weir quantize: calibration + packing, then the output's load time ----------------------
t0=$(date +%s.%N)
qlog=$("$weir" quantize --model "$f16" --calibration "$calib" --threads 2 --log-level warn \
       --out "$awq" 2>&1)
t1=$(date +%s.%N)
echo "weir quantize (1.1B, f16 -> awq_int4 group 128, 2 threads, calibration on $(basename "$calib")):"
echo "$qlog" | grep -E '^weir quantize' | sed 's/^/    /'
echo "    wall time: $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f s", b-a}')"
load_line() { # load_line MODEL SCHEME: seconds from start to the first generated token
  local a b
  a=$(date +%s.%N)
  "$weir" generate --model "$1" --quant "$2" --threads 2 --random-prompt 1 -n 1 --quiet \
    --set cache.memory_bytes=268435456 > /dev/null 2>&1
  b=$(date +%s.%N)
  awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f s", b-a}'
}
echo "load time (process start to 1 generated token, 2 threads): quantize output with awq_int4 $(load_line "$awq" awq_int4); f16 with fp16 $(load_line "$f16" fp16); q4_0 with awq_int4 $(load_line "$q40" awq_int4)"
echo

bw1=$("$build/bin/weir_membw" 1024 1 | sed -E 's/.*: ([0-9.]+) GB.*/\1/')
bw2=$("$build/bin/weir_membw" 1024 2 | sed -E 's/.*: ([0-9.]+) GB.*/\1/')
echo "memory read bandwidth: ${bw1} GB/s (1 thread), ${bw2} GB/s (2 threads)"
echo

# Configurations: label|engine|model|scheme|extra|embedding bytes per parameter (packed; the
# embedding table is not streamed per token, so it leaves the roofline's byte count).
configs=(
  "f16|weir|$f16|fp16||2"
  "f16|weir|$f16|int8||1.125"
  "awq-g128 (quantize output)|weir|$awq|awq_int4||0.53125"
  "q4_0|weir|$q40|awq_int4||0.5625"
  "q4_0|weir|$q40|int8||1.125"
)
if [ -n "${LLAMA_BENCH:-}" ]; then
  configs+=("q4_0|llama|$q40|llama.cpp Q4_0||0.5625" "awq-g128 (quantize output)|llama|$awq|llama.cpp Q4_1||0.625")
fi
embd_params=65536000 # 32000 x 2048

declare -A PP TG WB
# Prefill: a 512-token prompt in one step. Decode: 64 tokens after the first from a 1-token
# prompt, so the context stays as short as in llama-bench's tg64 (which starts empty).
run_weir() { # model scheme threads seed -> "pp tg weightsMiB"
  local out line pp tg wm
  out=$("$weir" generate --model "$1" --quant "$2" --threads "$3" --random-prompt 512 -n 1 \
        --ignore-eos --quiet --seed "$4" --set cache.memory_bytes=268435456 2>&1)
  line=$(echo "$out" | tail -1)
  pp=$(echo "$line" | sed -E 's/.*prompt: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')
  wm=$(echo "$out" | sed -n -E 's/.*; weights ([0-9.]+) MiB;.*/\1/p' | head -1)
  out=$("$weir" generate --model "$1" --quant "$2" --threads "$3" --random-prompt 1 -n 65 \
        --ignore-eos --quiet --seed "$4" --set cache.memory_bytes=268435456 2>&1)
  line=$(echo "$out" | tail -1)
  tg=$(echo "$line" | sed -E 's/.*generated: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')
  echo "$pp $tg $wm"
}
run_llama() { # model threads -> "pp tg sizeMiB"
  local dir csv
  dir=$(dirname "$LLAMA_BENCH")
  csv=$(LD_LIBRARY_PATH=$dir:${LD_LIBRARY_PATH:-} "$LLAMA_BENCH" -m "$1" -t "$2" -p 512 -n 64 \
        -r 1 -o csv 2>/dev/null)
  echo "$csv" | awk -F'","' 'NR>1 { ts[NR]=$(NF-1); size=$8 } END {
    printf "%s %s %.1f", ts[2], ts[3], size/1048576 }'
}

for th in $threads; do
  for rep in $(seq 1 "$reps"); do
    for c in "${configs[@]}"; do
      IFS='|' read -r label engine model scheme extra ebpp <<< "$c"
      key="$label|$scheme|$th"
      if [ "$engine" = weir ]; then r=$(run_weir "$model" "$scheme" "$th" "$rep")
      else r=$(run_llama "$model" "$th"); fi
      read -r pp tg wm <<< "$r"
      PP[$key]="${PP[$key]:-} $pp"
      TG[$key]="${TG[$key]:-} $tg"
      WB[$key]=$(awk -v m="$wm" -v e="$ebpp" -v n="$embd_params" 'BEGIN{printf "%.0f", m*1048576 - e*n}')
      echo "run $rep: $label / $scheme / ${th}t: prefill $pp decode $tg" >&2
    done
  done
done

med() { echo "$@" | tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }

echo "| source file | scheme | threads | prefill 512 (tok/s) | decode 64 (tok/s) | bytes/token (weights) | decode roofline (tok/s) | of roofline | decode vs llama.cpp Q4_0 |"
echo "|---|---|---|---|---|---|---|---|---|"
for th in $threads; do
  bw=$([ "$th" = 1 ] && echo "$bw1" || echo "$bw2")
  ref_tg=""
  [ -n "${LLAMA_BENCH:-}" ] && ref_tg=$(med ${TG["q4_0|llama.cpp Q4_0|$th"]})
  for c in "${configs[@]}"; do
    IFS='|' read -r label engine model scheme extra ebpp <<< "$c"
    key="$label|$scheme|$th"
    pp=$(med ${PP[$key]})
    tg=$(med ${TG[$key]})
    wb=${WB[$key]}
    roof=$(awk -v bw="$bw" -v w="$wb" 'BEGIN{printf "%.1f", bw*1e9/w}')
    frac=$(awk -v tg="$tg" -v r="$roof" 'BEGIN{printf "%.0f%%", 100*tg/r}')
    vs=$([ -n "$ref_tg" ] && awk -v a="$tg" -v b="$ref_tg" 'BEGIN{printf "%.2fx", a/b}' || echo "-")
    printf '| %s | %s | %s | %.1f | %.2f | %.3f GB | %s | %s | %s |\n' "$label" "$scheme" "$th" \
      "$pp" "$tg" "$(awk -v w="$wb" 'BEGIN{print w/1e9}')" "$roof" "$frac" "$vs"
  done
done
echo
echo "raw runs (tokens/s, in run order):"
for th in $threads; do
  for c in "${configs[@]}"; do
    IFS='|' read -r label engine model scheme extra ebpp <<< "$c"
    key="$label|$scheme|$th"
    echo "    $label / $scheme / ${th}t: prefill${PP[$key]} decode${TG[$key]}"
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
