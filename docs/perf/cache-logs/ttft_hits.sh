#!/bin/bash
# Exact-hit TTFT at 64 concurrent requests (docs/perf/cache.md), memory and redis, with the
# same measured pass against a server without the cache as the baseline.
#   docs/perf/cache-logs/ttft_hits.sh BUILD_DIR OUT_DIR
# For each server: a populating pass (500 distinct chat requests, temperature 0, 16 workers),
# then the measured passes (the same seed: the same 500 requests): closed loop with 64 in
# flight, and open loop at 500 requests/s with at most 64 in flight.
set -eu
build=${1:-build}; out=${2:-/tmp/cache-ttft}; mkdir -p "$out"
weir="$build/bin/weir"; model=models/kjv-target.gguf
common=(--endpoint chat --num-requests 500 --input-len 32 --output-len 16 --temperature 0
        --seed 1 --quiet)
rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no > "$out/redis.log" 2>&1 &
rpid=$!
trap 'kill $rpid 2>/dev/null || true' EXIT
sleep 1
for mode in off memory redis; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  extra=(--set cache.name=$mode)
  [ "$mode" = redis ] && extra+=(--set cache.port=$rport)
  "$weir" serve --model $model --port "$port" --set cache.memory_bytes=67108864 \
      --set log.requests=false "${extra[@]}" > "$out/server-$mode.log" 2>&1 &
  spid=$!
  for i in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
  "$weir" bench --url "http://127.0.0.1:$port" "${common[@]}" --concurrency 16 > "$out/populate-$mode.txt"
  "$weir" bench --url "http://127.0.0.1:$port" "${common[@]}" --concurrency 64 \
      --json "$out/hits-$mode.json" > "$out/hits-$mode.txt"
  # Open loop: 500 requests/s arriving (Poisson), at most 64 in flight: the latency of one
  # hit without the closed loop's queue of 64.
  "$weir" bench --url "http://127.0.0.1:$port" "${common[@]}" --concurrency 64 --rate 500 \
      --json "$out/open-$mode.json" > "$out/open-$mode.txt"
  curl -s "http://127.0.0.1:$port/metrics" | grep -E '^weir_response_cache_(hits|lookups|misses)' > "$out/metrics-$mode.txt" || true
  kill $spid; wait $spid || true
done
