#!/usr/bin/env bash
# The default sampler before and after its untruncated path (tenth session), alternated:
#   sampler-ab.sh BUILD OLD_SAMPLER_SO OUT
# 1. weir generate on a Qwen3-0.6B-shaped file (vocab 151,936; $QWEN, made by weir mkmodel),
#    temperature 0.8, one thread, 16 tokens, 3 rounds: the step trace's sample phase per step;
# 2. weir bench against two servers of the trained target (one with sampler.path = the old
#    .so), 64-token answers, 8 rounds each, at TEMPS (default 0.8) and STREAMS (default
#    "16 4 1"). QWEN_ROUNDS=0 skips part 1.
set -euo pipefail
build=$1 old=$2 out=$3
qwen=${QWEN:-/work/models-fam/fam-qwen3-0.6b.gguf}
here=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$out"
for r in $(seq "${QWEN_ROUNDS:-3}"); do
  for side in old new; do
    extra=()
    [ $side = old ] && extra=(--set "sampler.path=$old")
    WEIR_STEP_TRACE="$out/gen-$side-$r.trace" "$build/bin/weir" generate -m "$qwen" --threads 1 \
      --random-prompt 16 -n 16 --ignore-eos --temperature 0.8 --seed $r \
      --set cache.memory_bytes=64MiB "${extra[@]}" > "$out/gen-$side-$r.log" 2>&1
    echo "$side round $r: $(awk 'NR > 2 {f += $14; s += $15; n++} END {printf "forward %.0f us, sample %.1f us per decode step (%d steps)", f / n, s / n, n}' "$out/gen-$side-$r.trace")"
  done
done
base() { printf '[model]\npath = "%s/models/kjv-target.gguf"\n[device]\nthreads = 1\n[cache]\nmemory_bytes = 67108864\n' "$here"; }
base > "$out/new.toml"
{ base; printf '[sampler]\npath = "%s"\n' "$old"; } > "$out/old.toml"
cp "$here/docs/perf/quiet-rerun-2026-11-28g/guard64-prompts.jsonl" "$out/prompts.jsonl"
"$build/bin/weir" serve --config "$out/old.toml" --port 18711 > "$out/serve-old.log" 2>&1 &
p1=$!
"$build/bin/weir" serve --config "$out/new.toml" --port 18712 > "$out/serve-new.log" 2>&1 &
p2=$!
trap 'kill $p1 $p2 2>/dev/null; wait' EXIT
for p in 18711 18712; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$p/health" > /dev/null && break; sleep 0.1; done
done
for t in ${TEMPS:-0.8}; do
  for c in ${STREAMS:-16 4 1}; do
    n=$((c * 8 > 32 ? c * 8 : 32))
    echo "## temperature $t, concurrency $c: old sampler (A) vs new (B)"
    "$build/bin/weir" bench --a http://127.0.0.1:18711 --b http://127.0.0.1:18712 --label-a old \
      --label-b new --rounds 8 --concurrency $c --num-requests $n --warmup 16 --dataset jsonl \
      --file "$out/prompts.jsonl" --output-len 64 --ignore-eos --temperature $t --quiet 2>&1 |
      tail -14
  done
done
