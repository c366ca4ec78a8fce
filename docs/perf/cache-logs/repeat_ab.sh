#!/bin/bash
# 30% exact repeats on the 1.1B shape (issue 33): output tokens/s with the memory cache (B)
# against the same server without it (A), the same seeded workloads, rounds alternated
# A B A B ... (weir bench starts each round's server, so every round begins with an empty
# cache). The model is `weir mkmodel --preset 1.1b --type q8_0` (random weights; Q8_0 on the
# 1.1B shape runs ~140 tokens/s prefill and ~13 tokens/s single-sequence decode at 2 threads
# on a quiet machine, docs/perf/gguf-types.md), made once into OUT_DIR.
#   docs/perf/cache-logs/repeat_ab.sh BUILD_DIR OUT_DIR [ROUNDS] [REQUESTS]
# Defaults: 6 rounds (3 A, 3 B) of 96 requests, 64 prompt + 32 output tokens, 8 in flight:
# about 10 minutes on a quiet 2-core machine (estimated; making the model, 1.1 GiB, adds
# 1-2 minutes the first time).
set -eu
build=${1:-build}; out=${2:-/tmp/cache-ab}; rounds=${3:-6}; reqs=${4:-96}
mkdir -p "$out"
weir="$build/bin/weir"
# WEIR_AB_MODEL=path runs the same script on another model (a quick check that it works).
model=${WEIR_AB_MODEL:-$out/llama-1.1b-q8_0.gguf}
[ -s "$model" ] || "$weir" mkmodel --preset 1.1b --type q8_0 --seed 1 --out "$model"
for mode in off memory; do
  cat > "$out/$mode.toml" <<TOML
# docs/perf/cache.md: the 30%-repeat throughput A/B on the 1.1B shape ($mode).
[model]
path = "$model"
[log]
requests = false
[cache]
memory_bytes = "256MiB"
name = "$mode"
TOML
done
"$weir" bench --a-config "$out/off.toml" --b-config "$out/memory.toml" \
  --label-a no-cache --label-b memory \
  --endpoint chat --input-len 64 --output-len 32 --ignore-eos --temperature 0 \
  --repeat-rate 0.3 --num-requests "$reqs" --concurrency 8 --rounds "$rounds" --seed 7 --quiet \
  --server-log "$out/servers.log" --json "$out/ab.json" | tee "$out/ab.txt"
# One more round of the same workload against a memory server, for the share of requests the
# cache answered (stored hits and joins of identical requests in flight).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$weir" serve --config "$out/memory.toml" --port "$port" > "$out/count-server.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
for i in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
"$weir" bench --url "http://127.0.0.1:$port" --endpoint chat --input-len 64 --output-len 32 \
  --ignore-eos --temperature 0 --repeat-rate 0.3 --num-requests "$reqs" --concurrency 8 \
  --seed 7 --quiet > "$out/count-bench.txt"
curl -s "http://127.0.0.1:$port/metrics" |
  grep -E '^weir_response_cache_(hits|joins|lookups|misses|front_hits)' | tee "$out/count-metrics.txt"
