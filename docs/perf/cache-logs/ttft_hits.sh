#!/bin/bash
# Exact-hit TTFT at 64 concurrent requests (docs/perf/cache.md), memory and redis, with the
# same measured pass against a server without the cache as the baseline.
#   docs/perf/cache-logs/ttft_hits.sh BUILD_DIR OUT_DIR
# For each server: a populating pass (500 distinct chat requests, temperature 0, 16 workers),
# a warming pass (the same 500 at 64 in flight: with the cache they are full-path hits that
# fill the front index; a second warming pass renders each entry's body), then the measured
# passes (the same seed: the same 500 requests): closed loop with 64 in flight, and open loop
# at 500 requests/s with at most 64 in flight.
# weir bench keeps each slot's HTTP/1.1 connection (keep-alive, as real clients do); one more
# closed-loop pass with --no-keep-alive (a connection per request, the connect counted in
# TTFT) shows what the connection costs (hits-MODE-close.txt).
# TTFT here is weir bench's: from sending the request to reading its first content chunk. A
# hit's answer goes out as one write (head and every chunk), so for a hit that is the first
# byte of the answer.
# The server's CPU time (utime + stime from /proc) is read around 10 closed-loop passes:
# hits per server CPU-second, a figure other load on the machine distorts little; the bench
# client's own CPU is counted apart.
# About 1-2 minutes on a quiet machine (the no-cache baseline is most of it).
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
  if [ "$mode" != off ]; then
    for pass in 1 2; do
      "$weir" bench --url "http://127.0.0.1:$port" "${common[@]}" --concurrency 64 \
          > "$out/warm$pass-$mode.txt"
    done
    "$weir" bench --url "http://127.0.0.1:$port" "${common[@]}" --concurrency 64 \
        --no-keep-alive --json "$out/hits-$mode-close.json" > "$out/hits-$mode-close.txt"
  fi
  "$weir" bench --url "http://127.0.0.1:$port" "${common[@]}" --concurrency 64 \
      --json "$out/hits-$mode.json" > "$out/hits-$mode.txt"
  # CPU per request: the same pass N times (10 x 500 with the cache, 1 x 500 without), the
  # server's and the bench client's CPU time counted separately.
  n=10; [ "$mode" = off ] && n=1
  cpu0=$(awk '{print $14 + $15}' /proc/$spid/stat)
  bcpu=0
  for i in $(seq $n); do
    t=$( { /usr/bin/time -f "%U %S" "$weir" bench --url "http://127.0.0.1:$port" "${common[@]}" \
          --concurrency 64 > /dev/null; } 2>&1 | tail -1)
    bcpu=$(python3 -c "print($bcpu + sum(map(float, '$t'.split())))")
  done
  cpu1=$(awk '{print $14 + $15}' /proc/$spid/stat)
  python3 -c "import os; t=($cpu1-$cpu0)/os.sysconf('SC_CLK_TCK'); r=500*$n; print('$mode: %d requests: server CPU %.2f s = %.0f requests per server CPU-second (%.1f us each); bench client CPU %.2f s (%.1f us each)' % (r, t, r/t if t else float('inf'), t/r*1e6, $bcpu, $bcpu/r*1e6))" | tee "$out/cpu-$mode.txt"
  # Open loop: 500 requests/s arriving (Poisson), at most 64 in flight: the latency of one
  # hit without the closed loop's queue of 64.
  "$weir" bench --url "http://127.0.0.1:$port" "${common[@]}" --concurrency 64 --rate 500 \
      --json "$out/open-$mode.json" > "$out/open-$mode.txt"
  curl -s "http://127.0.0.1:$port/metrics" | grep -E '^weir_response_cache_(hits|front_hits|joins|lookups|misses)|^weir_http_(connections|requests)_total' > "$out/metrics-$mode.txt" || true
  kill $spid; wait $spid || true
done
