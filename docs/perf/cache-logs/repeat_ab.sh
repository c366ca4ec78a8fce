#!/bin/bash
# 30% exact repeats: output tokens/s with the memory cache (B) against none (A), the same
# seeded workloads, rounds alternated A B A B (weir bench starts each round's server).
#   docs/perf/cache-logs/repeat_ab.sh BUILD_DIR OUT_DIR
set -eu
build=${1:-build}; out=${2:-/tmp/cache-ab}; mkdir -p "$out"
"$build/bin/weir" bench --a-config docs/perf/cache-logs/off.toml \
  --b-config docs/perf/cache-logs/memory.toml --label-a no-cache --label-b memory \
  --endpoint chat --input-len 64 --output-len 64 --ignore-eos --temperature 0 \
  --repeat-rate 0.3 --num-requests 120 --concurrency 8 --rounds 4 --seed 7 --quiet \
  --server-log "$out/servers.log" --json "$out/ab.json" | tee "$out/ab.txt"
