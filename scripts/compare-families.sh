#!/usr/bin/env bash
# Perplexity of weir and of llama.cpp's llama-perplexity on the same `weir mkmodel` files, one
# per model family, same text, same windows (docs/perf/model-families.md).
#
#   LLAMA_BIN=/path/to/llama.cpp/build/bin scripts/compare-families.sh [ctx]
#   MODE=greedy LLAMA_BIN=... scripts/compare-families.sh
#
# MODE=greedy: instead of perplexity, top-1 agreement of weir with llama-server's 256 greedy
# tokens (temperature 0) on each family's file, by scripts/compare-greedy.py (one JSON line
# per family; it exits non-zero below 99%).
#
# LLAMA_BIN: the peer's binaries (never committed). WEIR: the weir binary (default
# build/bin/weir). ARCHS: the families to run (default: those the peer knows; the February
# 2025 peer has no gemma3 or qwen3, and reads no sliding window for llama/mistral files, which
# it names llama). TYPE: the weight type (default f32); TYPE=Q4_K_M (or another llama-quantize
# type name in capitals) writes the f32 file with dim 256 and ffn 512 (K-quant rows are 256
# wide) and quantizes it with $LLAMA_BIN/llama-quantize, in both modes. Each model has 4
# layers (gemma2: 26, the depth of the peer's 2B, the only ones it builds), dim 128, random
# weights (seed 7), a 512-token SentencePiece vocabulary; the text is
# tests/perplexity/fixtures/heldout-sample.txt (3,026 tokens). Prints one line per family: both
# perplexities and their relative difference. Runs one process at a time, two threads each.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMA_BIN:?set LLAMA_BIN to the directory holding llama-perplexity}"
WEIR=${WEIR:-build/bin/weir}
CTX=${1:-256}
TEXT=tests/perplexity/fixtures/heldout-sample.txt
ARCHS=${ARCHS:-"llama llama3 phi3 phi3_longrope gemma2"}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

TYPE=${TYPE:-f32}
MODE=${MODE:-perplexity}
case $TYPE in
  [A-Z]*) shape="--layers 4 --dim 256 --heads 4 --kv-heads 2 --ffn 512 --vocab 512 --ctx 4096 --type f32 --seed 7" ;;
  *) shape="--layers 4 --dim 128 --heads 4 --kv-heads 2 --ffn 256 --vocab 512 --ctx 4096 --type $TYPE --seed 7" ;;
esac
args_for() {
  case $1 in
    llama) echo "--arch llama" ;;
    llama3) echo "--arch llama --rope-freqs --orig-ctx 64 --rope-base 500000" ;;
    mistral_swa) echo "--arch mistral --swa 96" ;;
    phi3) echo "--arch phi3 --swa 96" ;;
    phi3_longrope) echo "--arch phi3 --longrope --orig-ctx 64 --swa 4096" ;;
    # the peer builds gemma2 only at the published depths (26, 42, 46 layers)
    gemma2) echo "--arch gemma2 --head-dim 64 --swa 96 --tied --layers 26" ;;
    gemma3) echo "--arch gemma3 --head-dim 64 --swa 96 --tied" ;;
    qwen3) echo "--arch qwen3 --head-dim 64 --tokenizer llama" ;;
    *) echo "unknown family $1" >&2; exit 2 ;;
  esac
}

# Writes family $1's file at $2 (quantized by llama-quantize when TYPE is in capitals).
make_model() {
  # shellcheck disable=SC2046
  "$WEIR" mkmodel $shape $(args_for "$1") --out "$2.src" >/dev/null 2>&1
  case $TYPE in
    [A-Z]*) "$LLAMA_BIN/llama-quantize" "$2.src" "$2" "$TYPE" >/dev/null 2>&1; rm -f "$2.src" ;;
    *) mv "$2.src" "$2" ;;
  esac
}

if [ "$MODE" = greedy ]; then
  status=0
  for a in $ARCHS; do
    m=$dir/$a.gguf
    make_model "$a" "$m"
    printf '%-14s %-6s ' "$a" "$TYPE"
    python3 scripts/compare-greedy.py --weir "$WEIR" --llama-server "$LLAMA_BIN/llama-server" \
      --model "$m" --n 256 --threads 2 || status=1
    rm -f "$m"
  done
  exit $status
fi

printf '%-14s %12s %12s %10s   (%s weights, ctx %s)\n' family weir llama.cpp rel.diff "$TYPE" "$CTX"
for a in $ARCHS; do
  m=$dir/$a.gguf
  make_model "$a" "$m"
  w=$("$WEIR" perplexity --model "$m" --file "$TEXT" --ctx "$CTX" --threads 2 --json 2>/dev/null |
      sed -n 's/.*"perplexity": *\([0-9.eE+-]*\).*/\1/p')
  l=$("$LLAMA_BIN/llama-perplexity" -m "$m" -f "$TEXT" -c "$CTX" -b "$CTX" -t 2 2>&1 |
      sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' || true)
  if [ -z "$l" ]; then
    printf '%-14s %12s %12s %10s\n' "$a" "$w" "failed" "-"
    continue
  fi
  awk -v a="$a" -v w="$w" -v l="$l" 'BEGIN { d = (w - l) / l; if (d < 0) d = -d;
    printf "%-14s %12.4f %12.4f %9.4f%%\n", a, w, l, 100 * d }'
done
