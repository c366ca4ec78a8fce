#!/bin/bash
# CPU per exact hit, server and bench client, for two builds alternated A B A B ...
# (docs/perf/cache.md, "CPU per hit").
#   docs/perf/cache-logs/hit_cpu_ab.sh BUILD_A BUILD_B OUT_DIR [PAIRS=3] [PASSES=10]
# Each side: a fresh `weir serve` of BUILD (memory cache, the trained model), the same 500
# chat requests as ttft_hits.sh populated and warmed twice (every later request a rendered
# front hit), then PASSES x 500 hits at 64 in flight by BUILD's own `weir bench`, with
# `perf stat -e task-clock` on the server (attached) and on the bench processes: task-clock
# is the CPU time the process ran, which other load on the machine blurs far less than wall
# time. The last pass's TTFT p50 / p99 and requests/s are reported beside it (those ARE
# blurred by load). Runs from any directory. About 15 s a side on a quiet machine.
set -eu
a=$(cd "${1:?BUILD_A}" && pwd); b=$(cd "${2:?BUILD_B}" && pwd)
out=${3:-/tmp/hit-cpu-ab}; pairs=${4:-3}; passes=${5:-10}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../.." # the repository root: models/ is read from there
model=models/kjv-target.gguf
common="--endpoint chat --num-requests 500 --input-len 32 --output-len 16 --temperature 0 --seed 1 --quiet"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
side() { # LABEL BUILD ROUND
  local label=$1 build=$2 round=$3 weir port spid ppid tag
  weir=$build/bin/weir
  tag="$out/$label-$round"
  port=$(free_port)
  "$weir" serve --model $model --port "$port" --set cache.name=memory \
      --set cache.memory_bytes=67108864 --set log.requests=false > "$tag-server.log" 2>&1 &
  spid=$!
  for i in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
  "$weir" bench --url "http://127.0.0.1:$port" $common --concurrency 16 > /dev/null
  for p in 1 2; do "$weir" bench --url "http://127.0.0.1:$port" $common --concurrency 64 > /dev/null; done
  perf stat -x, -e task-clock -p "$spid" -o "$tag-server-stat.csv" &
  ppid=$!
  sleep 0.5
  printf 'for i in $(seq %d); do "%s" bench --url http://127.0.0.1:%s %s --concurrency 64 > %s; done\n' \
      "$passes" "$weir" "$port" "$common" "$tag-hits.txt" > "$tag-loop.sh"
  perf stat -x, -e task-clock -o "$tag-bench-stat.csv" -- bash "$tag-loop.sh"
  kill -INT $ppid; wait $ppid || true
  curl -s "http://127.0.0.1:$port/metrics" | grep -E '^weir_response_cache_(hits_total|front_hits)' > "$tag-metrics.txt" || true
  kill $spid; wait $spid 2>/dev/null || true
  python3 - "$label" "$round" "$tag" "$passes" <<'PY' | tee -a "$out/summary.txt"
import sys, re
label, rnd, tag, passes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def ms(path):
    for line in open(path):
        f = line.split(',')
        if len(f) > 2 and 'task-clock' in f[2]: return float(f[0])
    return float('nan')
n = 500 * passes
srv, cli = ms(tag + '-server-stat.csv'), ms(tag + '-bench-stat.csv')
txt = open(tag + '-hits.txt').read()
def grab(k):
    m = re.search(r'^\s*' + re.escape(k) + r'\s+([0-9.]+)', txt, re.M)
    return float(m.group(1)) if m else float('nan')
print('%s round %s: %d hits: server %.1f us/hit, bench client %.1f us/hit (CPU, task-clock); '
      'last pass %.0f requests/s, TTFT p50 %.2f ms, p99 %.2f ms'
      % (label, rnd, n, srv * 1000 / n, cli * 1000 / n, grab('requests/s'),
         grab('TTFT median (ms)'), grab('TTFT p99 (ms)')))
PY
}
: > "$out/summary.txt"
for r in $(seq "$pairs"); do
  side A "$a" "$r"
  side B "$b" "$r"
done
