#!/usr/bin/env bash
# Serving benchmark of issue 4 on the CPU, 1.1B Llama shape (F16 weights, f16 KV):
#  1. aggregate generated tokens/s at 1, 4 and 16 concurrent streams through `weir serve`
#     (closed loop, 64 prompt tokens, 32 output tokens, ignore_eos);
#  2. server overhead per token: mean inter-token latency through the server at 1 stream
#     minus the per-token decode time of `weir generate` (same engine, no HTTP) in this run;
#  3. the TTFT cut a 1,000-token shared system prompt gets from the prefix cache: an A/B of
#     cache.prefix_caching = true against false on the shared-prefix dataset.
# Prints Markdown. Usage: scripts/bench-serving.sh [build-dir] [models-dir] [out-dir]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
models=${2:-$here/models}
out=${3:-$(mktemp -d)}
weir=$build/bin/weir
mkdir -p "$models" "$out"
model=$models/llama-1.1b-f16.gguf
[ -f "$model" ] || "$weir" mkmodel --preset 1.1b --type f16 --seed 1 --out "$model" >&2

cat > "$out/base.toml" <<TOML
[model]
path = "$model"
[device]
name = "cpu"
threads = 2
[cache]
memory_bytes = 1073741824
[scheduler]
max_num_seqs = 16
max_num_batched_tokens = 2048
[log]
level = "warn"
requests = false
TOML
sed 's/^\[cache\]$/[cache]\nprefix_caching = false/' "$out/base.toml" > "$out/nocache.toml"

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "weir: $("$weir" version); model: 1.1B Llama shape (dim 2048, 22 layers, 32 heads, 4 KV heads, FFN 5632, vocab 32000), F16 weights, f16 KV, 2 threads"
echo

port=$((20000 + RANDOM % 20000))
"$weir" serve --config "$out/base.toml" --port "$port" > "$out/serve.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 0.5
done

echo "| streams | requests | output tokens/s (aggregate) | speed-up vs 1 stream | TTFT median (ms) | ITL median (ms) |"
echo "|---|---|---|---|---|---|"
base_tps=""
for c in 1 4 16; do
  n=$(( c < 2 ? 3 : c * 2 ))
  "$weir" bench --url "http://127.0.0.1:$port" --concurrency "$c" --num-requests "$n" \
    --warmup 1 --prompt-format tokens --vocab 32000 --input-len 64 --output-len 32 \
    --ignore-eos --seed 7 --json "$out/c$c.json" > "$out/c$c.txt" 2>&1
  read -r tps ttft itl < <(/usr/bin/python3 -c "
import json,sys; r=json.load(open('$out/c$c.json'))
s=r['targets'][0]['summary']; t=s['throughput']; l=s['latency_ms']
print(t['output_tokens_per_s'], l['ttft']['median'], l['itl']['median'])")
  [ -n "$base_tps" ] || base_tps=$tps
  sp=$(awk -v a="$tps" -v b="$base_tps" 'BEGIN{printf "%.2fx", a/b}')
  printf "| %s | %s | %.2f | %s | %.0f | %.0f |\n" "$c" "$n" "$tps" "$sp" "$ttft" "$itl"
done
kill -TERM $spid; wait $spid || true
trap - EXIT

# Server overhead per token. The load generator, the libuv thread and the compute threads
# share this machine's cores, so this part runs the engine on ONE compute thread (the other
# core serves HTTP and the client), and alternates the served and the direct measurement
# twice so drift hits both.
sed 's/^threads = 2$/threads = 1/' "$out/base.toml" > "$out/one.toml"
itls=(); dts=()
for rep in 1 2; do
  port=$((20000 + RANDOM % 20000))
  "$weir" serve --config "$out/one.toml" --port "$port" >> "$out/serve.log" 2>&1 &
  spid=$!
  trap 'kill $spid 2>/dev/null || true' EXIT
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.5
  done
  "$weir" bench --url "http://127.0.0.1:$port" --concurrency 1 --num-requests 3 --warmup 1 \
    --prompt-format tokens --vocab 32000 --input-len 64 --output-len 32 --ignore-eos \
    --seed 7 --json "$out/overhead$rep.json" > "$out/overhead$rep.txt" 2>&1
  itls+=("$(/usr/bin/python3 -c "import json; print(json.load(open('$out/overhead$rep.json'))['targets'][0]['summary']['latency_ms']['itl']['mean'])")")
  kill -TERM $spid; wait $spid || true
  trap - EXIT
  gen=$("$weir" generate --config "$out/one.toml" --random-prompt 64 -n 32 --ignore-eos --quiet 2>&1 | tail -1)
  tg=$(echo "$gen" | sed -E 's/.*generated: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')
  dts+=("$(awk -v tg="$tg" 'BEGIN{printf "%.3f", 1000/tg}')")
done
echo
awk -v a="${itls[0]}" -v b="${itls[1]}" -v c="${dts[0]}" -v d="${dts[1]}" 'BEGIN{
  itl=(a+b)/2; dt=(c+d)/2;
  printf "server overhead per token (1 compute thread): mean ITL through HTTP/SSE %.2f ms (runs %.2f, %.2f) vs %.2f ms per token in weir generate, same engine without HTTP (runs %.2f, %.2f): %.2f ms per token (%.1f%%)\n", itl, a, b, dt, c, d, itl-dt, 100*(itl-dt)/dt }'
echo

"$weir" bench --a-config "$out/base.toml" --b-config "$out/nocache.toml" \
  --label-a prefix-cache-on --label-b prefix-cache-off --rounds 2 \
  --dataset shared-prefix --num-prefixes 1 --prefix-len 1000 --input-len 16 \
  --output-len 4 --ignore-eos --prompt-format tokens --vocab 32000 --concurrency 1 \
  --num-requests 4 --warmup 0 --seed 11 --json "$out/prefix.json" > "$out/prefix.txt" 2>&1 || true
/usr/bin/python3 - "$out/prefix.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def med(side):
    vals = [rd["latency_ms"]["ttft"]["median"] for rd in side["rounds"]]
    vals.sort(); return vals[len(vals)//2]
a, b = r["targets"][0], r["targets"][1]
ta, tb = med(a), med(b)
print(f"prefix cache, 1,000-token shared prefix + 16 tokens, 1 stream, 4 requests x 2 rounds per side:")
print(f"TTFT median {ta:.0f} ms with the cache, {tb:.0f} ms without: {tb/ta:.1f}x shorter ({100*(1-ta/tb):.0f}% cut)")
PY
echo "(raw results: $out)"
