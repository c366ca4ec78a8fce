#!/usr/bin/env bash
# Embeddings of weir and of llama.cpp's llama-embedding on the same `weir mkmodel` encoder
# files (bert and nomic-bert, random weights), the same texts (docs/perf/embeddings.md).
#
#   LLAMA_BIN=/path/to/llama.cpp/build/bin scripts/compare-embeddings.sh
#
# LLAMA_BIN: the peer's binaries (never committed). WEIR: the weir binary (default
# build/bin/weir). ARCHS (default "bert nomic-bert llama-mean llama-last"): an encoder (bert,
# nomic-bert) is loaded as [embedding] model beside the trained model of models/ (mean
# pooling, as the file says); llama-mean and llama-last are a llama file served itself, its
# pooled hidden states (embedding.pooling, the peer's --pooling; f32 KV cache). TYPE: the
# weight type (default f32). SHAPE / LLAMA_SHAPE: mkmodel's shape flags. Each text goes
# through POST /v1/embeddings and through llama-embedding (normalised, json). Prints, per
# architecture, each text's token count and the cosine of the two vectors, then the minimum.
# Runs one process at a time, two threads each.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMA_BIN:?set LLAMA_BIN to the directory holding llama-embedding}"
WEIR=${WEIR:-build/bin/weir}
ARCHS=${ARCHS:-"bert nomic-bert llama-mean llama-last"}
TYPE=${TYPE:-f32}
SHAPE=${SHAPE:-"--layers 4 --dim 128 --heads 4 --ffn 512 --vocab 1024 --ctx 512 --seed 7"}
LLAMA_SHAPE=${LLAMA_SHAPE:-"--layers 4 --dim 128 --heads 4 --kv-heads 2 --ffn 256 --vocab 512 --ctx 512 --seed 7"}
dir=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT

cat >"$dir/texts.txt" <<'EOF'
the river does not stop at the weir.
A weir is a low wall built across a river.
Millers built weirs for hundreds of years to turn their wheels, and towns built them to keep boats afloat through the dry months of summer.
water
It slows, it spreads out, and then it falls over the edge; the level behind it stays steady while the stream keeps moving, mile after mile, past the mill and the town and the fields beyond them, until it meets the sea.
EOF

port=$((20000 + RANDOM % 20000))
for a in $ARCHS; do
  m=$dir/$a.gguf
  case $a in
    llama-mean | llama-last)
      # The served model's own pooled hidden states: weir serves the file itself.
      pool=${a#llama-}
      # shellcheck disable=SC2086
      "$WEIR" mkmodel --arch llama $LLAMA_SHAPE --type "$TYPE" --out "$m" >/dev/null
      "$WEIR" serve --model "$m" --port "$port" --set device.threads=2 \
        --set cache.memory_bytes=67108864 --set attention.kv_dtype=f32 \
        --set "embedding.pooling=\"$pool\"" >"$dir/serve.log" 2>&1 &
      peer_pool="--pooling $pool" ;;
    *)
      # shellcheck disable=SC2086
      "$WEIR" mkmodel --arch "$a" $SHAPE --type "$TYPE" --out "$m" >/dev/null
      "$WEIR" serve --model models/kjv-target.gguf --port "$port" --set device.threads=2 \
        --set cache.memory_bytes=67108864 --set "embedding.model=\"$m\"" >"$dir/serve.log" 2>&1 &
      peer_pool="" ;;
  esac
  pid=$!
  for _ in $(seq 1 120); do
    curl -sf "localhost:$port/health" >/dev/null 2>&1 && break
    sleep 0.5
  done
  : >"$dir/weir.jsonl"
  : >"$dir/peer.jsonl"
  while IFS= read -r t; do
    python3 -c 'import json,sys; print(json.dumps({"input": sys.argv[1]}))' "$t" |
      curl -sf "localhost:$port/v1/embeddings" -H 'Content-Type: application/json' -d @- \
        >>"$dir/weir.jsonl"
    echo >>"$dir/weir.jsonl"
    # shellcheck disable=SC2086
    "$LLAMA_BIN/llama-embedding" -m "$m" -c 512 -b 512 -ub 512 -t 2 -p "$t" $peer_pool \
      --embd-normalize 2 --embd-output-format json 2>/dev/null | tr -d '\n' >>"$dir/peer.jsonl"
    echo >>"$dir/peer.jsonl"
  done <"$dir/texts.txt"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
  python3 - "$a" "$dir/weir.jsonl" "$dir/peer.jsonl" "$dir/texts.txt" <<'EOF'
import json, math, sys
arch, wf, pf, tf = sys.argv[1:5]
weir = [json.loads(l) for l in open(wf) if l.strip()]
peer = [json.loads(l) for l in open(pf) if l.strip()]
texts = [l.rstrip("\n") for l in open(tf)]
worst = 1.0
for w, p, t in zip(weir, peer, texts):
    a, b = w["data"][0]["embedding"], p["data"][0]["embedding"]
    cos = sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
    worst = min(worst, cos)
    print("%-11s %4d tokens  cosine %.9f  1-cos %.1e  %s" % (arch, w["usage"]["prompt_tokens"], cos,
                                                            1 - cos, t[:36]))
print("%-11s minimum cosine %.9f over %d texts" % (arch, worst, len(weir)))
EOF
done
