#!/usr/bin/env bash
# GGUF block types on the CPU (issue 29), side by side with llama.cpp in the same run:
# the 1.1B Llama shape (`weir mkmodel --preset 1.1b --type f16`) quantized by llama.cpp's own
# llama-quantize into each type, 1 and 2 threads, the runs alternated (weir, llama.cpp, weir,
# ...) REPS times each:
#   - weir `generate`: prefill of a 512-token prompt, decode of N (DECODE_N, 64) tokens after it (context
#     512..511+N) and decode of N (DECODE_N, 64) tokens after a 1-token prompt (context 1..N);
#   - llama.cpp `llama-bench -p 512 -n N`: pp512 and tgN (its decode starts at an empty
#     context: this version has no depth option);
#   - the machine's read bandwidth (weir_membw) right before each pair, so every decode figure
#     is also a fraction of the memory roofline measured in the same run;
#   - resident memory: VmRSS of `weir serve` once loaded, next to the file size.
# Prints every raw run (with its @512 / @1 ratio and each decode as a fraction of that rep's
# roofline), then a Markdown table of medians: prefill ratio, decode ratio, @512 / @1 (and
# whether it is within 5%), and weir's @512 and @1 and llama.cpp's decode as fractions of the
# roofline. REPS of at least 3 make the medians medians (at 2 they are the lower value).
# With MODE=fidelity instead: the trained target (models/kjv-target.gguf, F16) quantized by
# llama-quantize into each of FTYPES; weir perplexity against llama-perplexity on the held-out
# text HELDOUT (same windows: ctx 512, stride 512, second half scored), and 64 greedy tokens
# from three prompts, weir generate against llama-server at temperature 0.
# Usage: LLAMA_BIN=/path/to/llama.cpp/build/bin scripts/bench-gguf-types.sh [build] [models]
#        TYPES="Q4_K_M Q8_0" THREADS="1 2" REPS=3 to narrow it; DECODE_N=32 to shorten; LLAMA_BENCH_ARGS="--poll 0"
#        passes options to llama-bench (--poll 0: its threads sleep instead of spinning while
#        they wait, which a machine shared with other work needs; its default is 50);
#        MODE=fidelity HELDOUT=heldout.txt (scripts/train-demo.py heldout --out F writes it);
#        WEIR_ARGS="--set quant.group=false" passes options to weir generate (speed mode).
# With MODE=profile instead (no llama.cpp needed; LLAMA_BIN only quantizes a missing file):
# where a decode and a prefill spend their time, for each of TYPES and THREADS:
#   - the copy bandwidth (weir_membw 1024 T), then each GEMV kernel the file uses on the
#     1.1B shapes (q/o 2048x2048, k/v 256x2048, gate/up 5632x2048, down 2048x5632, output
#     32000x2048) at T threads over copies filling STREAM_MIB (512) MiB, as a decode streams
#     the model past the caches (`bench_gguf`): GB/s of weights and that as a percentage of
#     the copy bandwidth, with the CPU time per call; and the 64-token GEMM in GMAC per
#     CPU-second;
#   - `weir serve` at T threads with WEIR_STEP_PROFILE=1: `perf record -e cpu-clock` (no
#     hardware counters needed) attached only while one request runs, so loading is not in
#     it: a 512-token prompt with max_tokens 1 (prefill), then the same prompt (the prefix
#     cache holds it) with max_tokens DECODE_N (decode at 512..511+N); the top PERF_TOP (15)
#     symbols of each and the engine's step profile (thread CPU time per phase).
#   About 40 s per type and thread count on an idle machine (perf adds 1-3%).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
models=${2:-$here/models}
[ "${MODE:-speed}" = profile ] || : "${LLAMA_BIN:?set LLAMA_BIN to the directory holding llama-bench and llama-quantize}"
TYPES=${TYPES:-"Q4_K_M Q5_K_M Q6_K Q8_0"}
THREADS=${THREADS:-"1 2"}
REPS=${REPS:-3}
N=${DECODE_N:-64} # decoded tokens per run (weir -n, llama-bench -n)
weir=$build/bin/weir
mkdir -p "$models"

if [ "${MODE:-speed}" = fidelity ]; then
  : "${HELDOUT:?set HELDOUT to the held-out text}"
  FTYPES=${FTYPES:-"Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K Q5_0 Q5_1 IQ4_NL IQ4_XS Q8_0"}
  target=${TARGET:-$here/models/kjv-target.gguf}
  prompts=("In the beginning" "And the LORD said unto Moses" "Blessed are the")
  echo "| type | weir perplexity | llama.cpp perplexity | difference | greedy 64 tokens, 3 prompts |"
  echo "|---|---|---|---|---|"
  for t in $FTYPES; do
    m=$models/kjv-$t.gguf
    [ -f "$m" ] || "$LLAMA_BIN/llama-quantize" "$target" "$m" "$t" 2 >/dev/null 2>&1
    wp=$("$weir" perplexity --model "$m" --threads "${FTHREADS:-1}" --ctx 512 --file "$HELDOUT" 2>&1 | tail -1 |
         sed -E 's/^perplexity: ([0-9.]+).*/\1/')
    lp=$("$LLAMA_BIN/llama-perplexity" -m "$m" -f "$HELDOUT" -c 512 -b 512 -t "${FTHREADS:-1}" 2>&1 |
         sed -n -E 's/.*PPL = ([0-9.]+).*/\1/p')
    port=$((20000 + RANDOM % 20000))
    "$LLAMA_BIN/llama-server" -m "$m" --port "$port" -t 1 -c 1024 >/dev/null 2>&1 &
    spid=$!
    for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.5; done
    same=0
    for p in "${prompts[@]}"; do
      w=$("$weir" generate --model "$m" --threads 1 --prompt "$p" -n 64 --ignore-eos 2>/dev/null | sed '$d')
      l=$(curl -s "http://127.0.0.1:$port/completion" -d "{\"prompt\": \"$p\", \"n_predict\": 64, \"temperature\": 0, \"cache_prompt\": false, \"ignore_eos\": true}" |
          python3 -c 'import json, sys; sys.stdout.write(json.load(sys.stdin)["content"])')
      if [ "$w" = "$l" ]; then same=$((same + 1)); else printf 'differs: %s %s\n  weir:  %s\n  llama: %s\n' "$t" "$p" "$w" "$l" >&2; fi
    done
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    echo "| $t | $wp | $lp | $(awk -v a="$wp" -v b="$lp" 'BEGIN{printf "%+.3f%%", 100 * (a - b) / b}') | $same / 3 identical |"
  done
  exit 0
fi

if [ "${MODE:-speed}" = profile ]; then
  TYPES=${TYPES:-"Q4_K_M Q5_K_M Q6_K Q8_0"}
  THREADS=${THREADS:-"1 2"}
  STREAM_MIB=${STREAM_MIB:-512}
  SECS=${KERNEL_SECS:-1.5}
  N=${DECODE_N:-64}
  bench=$build/tests/bin/bench_gguf
  bw_run() { "$build/bin/weir_membw" 1024 "$1" | sed -E 's/.*: ([0-9.]+) GB.*/\1/'; }
  [ -x "$bench" ] || { echo "build bench_gguf first (cmake --build $build --target bench_gguf)" >&2; exit 1; }
  command -v perf >/dev/null || echo "perf not found: the per-symbol profiles are skipped" >&2
  vnni=$(grep -qw avx512_vnni /proc/cpuinfo && echo x16 || echo "")
  echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
  echo "weir: $("$weir" version) ($(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')); kernels ${vnni:-file layout}"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  # the 512 prompt ids, fixed: the same prompt in both requests, so the second one's prefill
  # is served by the prefix cache
  ids=$(awk 'BEGIN{srand(7); for (i = 0; i < 512; i++) printf "%s%d", (i ? "," : ""), 100 + int(rand() * 30000)}')
  for t in $TYPES; do
    m=$models/llama-1.1b-$t.gguf
    if [ ! -f "$m" ]; then
      : "${LLAMA_BIN:?set LLAMA_BIN: $m must be made by llama-quantize}"
      [ -f "$models/llama-1.1b-f16.gguf" ] || "$weir" mkmodel --preset 1.1b --type f16 --seed 1 --out "$models/llama-1.1b-f16.gguf" >&2
      "$LLAMA_BIN/llama-quantize" "$models/llama-1.1b-f16.gguf" "$m" "$t" >/dev/null 2>&1
    fi
    # the kernel types each file runs (llama-quantize's _M mixes: Q6_K for the output and half
    # of attn_v and ffn_down)
    case $t in
    Q4_K_M) kts="q4_K q6_K" ;; Q5_K_M) kts="q5_K q6_K" ;; Q6_K) kts="q6_K" ;; Q8_0) kts="q8_0" ;;
    *) kts=$(echo "$t" | tr 'A-Z' 'a-z' | sed -E 's/_[sml]$//; s/_k/_K/') ;;
    esac
    for th in $THREADS; do
      echo
      echo "== profile: $t, $th thread(s) =="
      bw=$(bw_run "$th")
      echo "copy bandwidth: $bw GB/s ($th threads)"
      for k in $kts; do
        # the X16 layout where the plugin stores it (VNNI; Q8_0, Q4_K, Q5_K, Q6_K)
        sfx=""
        case $k in q8_0 | q4_K | q5_K | q6_K) sfx=$vnni ;; esac
        for shape in "2048 2048" "256 2048" "5632 2048" "2048 5632" "32000 2048"; do
          read -r rows cols <<<"$shape"
          out=$("$bench" "$k$sfx" "$rows" "$cols" 1 "$SECS" "$th" "$STREAM_MIB" 2>&1) || { echo "gemv $k $rows x $cols: $out"; continue; }
          gbs=$(echo "$out" | sed -E 's/.*, ([0-9.]+) GB\/s of weights.*/\1/')
          cpu=$(echo "$out" | sed -E 's/.*CPU time ([0-9.]+) ms\/call.*/\1/')
          echo "gemv $k$sfx ${rows}x$cols, $th threads, streamed: $gbs GB/s of weights = $(awk -v a="$gbs" -v b="$bw" 'BEGIN{printf "%.0f", 100 * a / b}')% of the copy bandwidth; CPU time $cpu ms per call"
        done
        out=$("$bench" "$k$sfx" 2048 2048 64 "$SECS" 1 2>&1) || true
        echo "gemm $k$sfx 2048x2048, 64 tokens, 1 thread: $(echo "$out" | sed -E 's/.*, ([0-9.]+) GMAC per CPU-second.*/\1/') GMAC per CPU-second"
      done
      port=$((20000 + RANDOM % 20000))
      log=$(mktemp)
      WEIR_STEP_PROFILE=1 "$weir" serve --model "$m" --threads "$th" --port "$port" \
        --set cache.memory_bytes=268435456 >"$log" 2>&1 &
      spid=$!
      for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.5; done
      for phase in prefill decode; do
        mt=1
        [ "$phase" = decode ] && mt=$N
        pdata=$(mktemp)
        ppid=""
        if command -v perf >/dev/null; then
          perf record -q -e cpu-clock -F 999 -p "$spid" -o "$pdata" >/dev/null 2>&1 &
          ppid=$!
          sleep 0.5
        fi
        t0=$(date +%s.%N)
        usage=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
          -d "{\"prompt\": [$ids], \"max_tokens\": $mt, \"temperature\": 0, \"ignore_eos\": true}" |
          python3 -c 'import json, sys; u = json.load(sys.stdin)["usage"]; print(u.get("prompt_tokens"), u.get("completion_tokens"))')
        t1=$(date +%s.%N)
        echo "$phase: prompt 512, max_tokens $mt: $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}') s wall (usage: prompt, completion tokens $usage)"
        if [ -n "$ppid" ]; then
          kill -INT "$ppid" 2>/dev/null || true
          wait "$ppid" 2>/dev/null || true
          echo "$phase: perf cpu-clock, top ${PERF_TOP:-15} symbols (% of the process's samples during the request):"
          perf report -i "$pdata" --no-children --sort dso,sym --stdio 2>/dev/null |
            grep -v '^#' | grep -v '^$' | head -"${PERF_TOP:-15}" | sed 's/^/  /' || true
        fi
        rm -f "$pdata"
      done
      kill "$spid" 2>/dev/null || true
      wait "$spid" 2>/dev/null || true
      grep 'step profile' "$log" | sed -E 's/.*\[engine\] //' || true
      rm -f "$log"
    done
  done
  echo
  echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi

src=$models/llama-1.1b-f16.gguf
[ -f "$src" ] || "$weir" mkmodel --preset 1.1b --type f16 --seed 1 --out "$src" >&2
for t in $TYPES; do
  m=$models/llama-1.1b-$t.gguf
  [ -f "$m" ] || "$LLAMA_BIN/llama-quantize" "$src" "$m" "$t" >/dev/null 2>&1
done

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
echo "weir: $("$weir" version) ($(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "llama.cpp: $LLAMA_BIN ($(git -C "$LLAMA_BIN" rev-parse --short HEAD 2>/dev/null || echo '?')) ${LLAMA_BENCH_ARGS:-}"
echo "weir options: ${WEIR_ARGS:-(none)}"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

# weir generate: prints "prefill decode weights_mib" for a prompt of $3 tokens.
weir_run() {
  local m=$1 th=$2 prompt=$3 rep=$4 out line
  # shellcheck disable=SC2086 # WEIR_ARGS is a list of extra options
  out=$("$weir" generate --model "$m" --threads "$th" --random-prompt "$prompt" -n "$N" \
        --ignore-eos --quiet --seed "$rep" --set cache.memory_bytes=268435456 ${WEIR_ARGS:-} 2>&1)
  line=$(echo "$out" | tail -1)
  echo "$(echo "$line" | sed -E 's/.*prompt: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')" \
       "$(echo "$line" | sed -E 's/.*generated: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')" \
       "$(echo "$out" | sed -n -E 's/.*; weights ([0-9.]+) MiB;.*/\1/p' | head -1)"
}
# llama-bench: prints "pp512 tg64" (tokens/s).
llama_run() {
  local m=$1 th=$2
  # shellcheck disable=SC2086 # LLAMA_BENCH_ARGS is a list of extra options
  "$LLAMA_BIN/llama-bench" -m "$m" -t "$th" -p 512 -n "$N" -r 1 ${LLAMA_BENCH_ARGS:-} -o csv 2>/dev/null |
    awk -F, 'NR==1 {for (i = 1; i <= NF; i++) if ($i ~ /avg_ts/) c = i; next}
             {gsub(/"/, "", $0); v[NR] = $c} END {printf "%s %s\n", v[2], v[3]}'
}
bw_run() { "$build/bin/weir_membw" 1024 "$1" | sed -E 's/.*: ([0-9.]+) GB.*/\1/'; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
# "VmRSS weights_mib kv_mib" (MiB) of `weir serve` with the model loaded and a 16 MiB KV cache.
rss_run() {
  local m=$1 port=$((20000 + RANDOM % 20000)) pid rss="" log
  log=$(mktemp)
  "$weir" serve --model "$m" --threads 1 --port "$port" --set cache.memory_bytes=16777216 \
    >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
      rss=$(awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status")
      break
    fi
    sleep 0.5
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo "${rss:-?}" "$(sed -n -E 's/.*; weights ([0-9.]+) MiB;.*/\1/p' "$log" | head -1)" \
       "$(sed -n -E 's/.*KV cache [0-9]+ blocks of [0-9]+ tokens \(([0-9.]+) MiB.*/\1/p' "$log" | head -1)"
  rm -f "$log"
}

rows=()
for t in $TYPES; do
  m=$models/llama-1.1b-$t.gguf
  fmib=$(awk -v b="$(stat -c %s "$m")" 'BEGIN {printf "%.1f", b / 1048576}')
  # "weights" is what the engine logs for the packed weights: the file's tensor bytes plus
  # 64 bytes per tensor (the file adds its metadata and tokenizer).
  read -r rss wm kvm < <(rss_run "$m")
  echo "memory: $t file ${fmib} MiB, weights ${wm} MiB, weir serve VmRSS ${rss} MiB, KV cache ${kvm} MiB:" \
       "VmRSS - KV = $(awk -v r="$rss" -v k="$kvm" -v w="$wm" 'BEGIN{printf "%.1f MiB (%+.1f%% over the weights)", r - k, 100 * (r - k - w) / w}')"
  for th in $THREADS; do
    pp=(); d512=(); d1=(); lpp=(); ltg=(); bws=(); r51=(); f512=(); f1=(); fl=(); wmib=0
    for rep in $(seq 1 "$REPS"); do
      bw=$(bw_run "$th")
      read -r p dd w < <(weir_run "$m" "$th" 512 "$rep")
      read -r _ d1v _ < <(weir_run "$m" "$th" 1 "$rep")
      read -r lp lt < <(llama_run "$m" "$th")
      # Bytes a decode step reads: the packed weights but the embedding table (one row of it);
      # the roofline is this rep's bandwidth over them (tokens/s), each decode a fraction of it.
      wbytes=$(awk -v m="$w" 'BEGIN{printf "%.0f", m * 1048576 * (1 - 65536000 / 1099956224)}')
      roof=$(awk -v bw="$bw" -v w="$wbytes" 'BEGIN{printf "%.3f", bw * 1e9 / w}')
      frac() { awk -v tg="$1" -v r="$roof" 'BEGIN{printf "%.0f", 100 * tg / r}'; }
      rr=$(awk -v a="$dd" -v b="$d1v" 'BEGIN{printf "%.0f", 100 * a / b}')
      echo "run: $t ${th}t rep $rep: bw $bw GB/s (roofline $roof tok/s) | weir prefill $p decode@512 $dd decode@1 $d1v (@512/@1 $rr%; of roofline: @512 $(frac "$dd")%, @1 $(frac "$d1v")%) | llama.cpp pp512 $lp tg$N $lt ($(frac "$lt")% of roofline) | load $(cut -d' ' -f1 /proc/loadavg)"
      pp+=("$p"); d512+=("$dd"); d1+=("$d1v"); lpp+=("$lp"); ltg+=("$lt"); bws+=("$bw"); wmib=$w
      r51+=("$rr"); f512+=("$(frac "$dd")"); f1+=("$(frac "$d1v")"); fl+=("$(frac "$lt")")
    done
    mpp=$(median "${pp[@]}"); md512=$(median "${d512[@]}"); md1=$(median "${d1[@]}")
    mlpp=$(median "${lpp[@]}"); mltg=$(median "${ltg[@]}"); mbw=$(median "${bws[@]}")
    # @512 / @1 and the roofline fractions: medians of the per-rep figures (each rep's decode
    # against its own bandwidth and its own @1 run), the issue's rows; "within 5%" when the
    # @512 / @1 median is at least 95%.
    mr51=$(median "${r51[@]}"); mf512=$(median "${f512[@]}"); mf1=$(median "${f1[@]}"); mfl=$(median "${fl[@]}")
    within=$(awk -v r="$mr51" 'BEGIN{print (r >= 95 ? "yes" : "no")}')
    row="| $t | $th | $mpp | $mlpp | $(awk -v a="$mpp" -v b="$mlpp" 'BEGIN{printf "%.2fx", a / b}') | $md1 | $md512 | ${mr51}% ($within) | $mltg | $(awk -v a="$md512" -v b="$mltg" 'BEGIN{printf "%.2fx", a / b}') | $mbw | ${mf512}% | ${mf1}% | ${mfl}% |"
    echo "row: $row"
    rows+=("$row")
  done
done
echo
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| type | threads | weir prefill 512 | llama.cpp pp512 | prefill ratio | weir decode @1 | weir decode @512 | @512 / @1 (within 5%) | llama.cpp tg$N (@0) | decode ratio (@512 vs @0) | read bandwidth GB/s | weir @512 of roofline | weir @1 of roofline | llama.cpp tg of roofline |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
