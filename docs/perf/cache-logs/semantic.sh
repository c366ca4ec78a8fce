#!/bin/bash
# The semantic layer on the labelled pairs (tools/bench/data/paraphrase-pairs.jsonl):
#   docs/perf/cache-logs/semantic.sh BUILD_DIR OUT_DIR
# Three servers, each fresh, serving models/kjv-target.gguf with the memory cache:
#   trained-0.01  vectors from the served model's pooled states, bound 1% (the default)
#   trained-0.20  the same, bound 20% (to show what a looser bound trades)
#   random-0.01   vectors from a random-weight bert (mkmodel --arch bert): uninformative
set -eu
build=${1:-build}; out=${2:-/tmp/cache-semantic}; mkdir -p "$out"
weir="$build/bin/weir"
"$weir" mkmodel --arch bert --out "$out/random-bert.gguf" > "$out/mkmodel.log" 2>&1
run() {
  local name=$1; shift
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$weir" serve --model models/kjv-target.gguf --port "$port" --set log.requests=false \
      --set cache.memory_bytes=67108864 --set cache.name=memory --set cache.semantic=true "$@" \
      > "$out/server-$name.log" 2>&1 &
  local spid=$!
  for i in $(seq 150); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
  python3 tools/bench/semantic_eval.py "http://127.0.0.1:$port" \
      tools/bench/data/paraphrase-pairs.jsonl --json "$out/$name.json" > "$out/$name.txt"
  kill $spid; wait $spid || true
}
run trained-0.01
run trained-0.20 --set cache.semantic_max_error=0.2
run random-0.01 --set "embedding.model=\"$out/random-bert.gguf\""
