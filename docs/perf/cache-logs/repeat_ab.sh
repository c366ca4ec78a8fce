#!/bin/bash
# 30% exact repeats on the 1.1B shape (issue 33): output tokens/s with the memory cache (B)
# against the same server without it (A), the same seeded workloads, rounds alternated
# A B A B ... (weir bench starts each round's server, so every round begins with an empty
# cache).
#   [WEIR_AB_MODEL=FILE] docs/perf/cache-logs/repeat_ab.sh BUILD_DIR OUT_DIR [ROUNDS] [REQUESTS]
# ROUNDS is per side (default 4: 8 servers, A B A B A B A B), REQUESTS per round (default 64);
# chat, ~64 prompt + 32 output tokens, EOS ignored, 8 in flight, keep-alive connections.
# The workload: --repeat-rate 0.3 with weir bench's default --repeat-gap (2 x concurrency =
# 16): a repeat copies a request at least 16 earlier, whose answer has normally come (a
# question asked again after it was answered, the steady state of a service), and the later
# requests repeat with probability 0.3 x N/(N-16) so that 30% of the round's requests are
# expected to repeat. Both sides send exactly the same requests. A hit's output tokens are
# counted from its usage.completion_tokens, as a live answer's: "output tokens" in ab.txt is
# the same on both sides.
# The model: WEIR_AB_MODEL (the quiet runs: /work/models-kkern/llama-1.1b-Q4_K_M.gguf, the
# 1.1B preset quantized by llama-quantize); without it `weir mkmodel --preset 1.1b --type
# q8_0` is made once into OUT_DIR. Ends with one counted round against a memory server
# (count-metrics.txt: hits, joins, misses: the share the cache answered).
# On the quiet 2-core machine with the Q4_K_M file, 4 rounds of 64: about 6 minutes (A: 64 x 32
# tokens at ~47 tokens/s is ~44 s a round). Fewer requests per round make the start (the first
# 16 cannot repeat) and the drain (the last batch finishing) a larger part of each round.
set -eu
build=${1:-build}; out=${2:-/tmp/cache-ab}; rounds=${3:-4}; reqs=${4:-64}
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
# How many of the round's requests repeat an earlier one (the same bodies weir bench sent).
"$weir" bench --url "http://127.0.0.1:$port" --endpoint chat --input-len 64 --output-len 32 \
  --ignore-eos --temperature 0 --repeat-rate 0.3 --num-requests "$reqs" --concurrency 8 \
  --seed 7 --dump-workload "$out/count-workload.jsonl" > /dev/null
python3 -c "import sys; L=open(sys.argv[1]).read().splitlines(); print('workload: %d requests, %d repeat an earlier one' % (len(L), len(L) - len(set(L))))" \
  "$out/count-workload.jsonl" | tee "$out/count-workload.txt"
curl -s "http://127.0.0.1:$port/metrics" |
  grep -E '^weir_response_cache_(hits|joins|lookups|misses|front_hits)' | tee "$out/count-metrics.txt"
