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
#
# REF: tests/reference's weir_ref_eval (build/tests/bin/weir_ref_eval), the double-precision
# reference on the same file (K-quant blocks dequantized exactly): a third opinion. Perplexity
# mode adds its perplexity and each side's distance from it; greedy mode how many of each
# side's greedy tokens are the reference's top-1 (compare-greedy.py --ref). gemma3 and qwen3
# (ARCHS="gemma3 qwen3"), which the peer predates, need REF and no LLAMA_BIN: weir against the
# reference alone, their K-quant files written by `weir mkmodel --type` (the February 2025
# llama-quantize refuses their architectures).
set -euo pipefail
cd "$(dirname "$0")/.."
REF=${REF:-}
LLAMA_BIN=${LLAMA_BIN:-}
WEIR=${WEIR:-build/bin/weir}
CTX=${1:-256}
TEXT=tests/perplexity/fixtures/heldout-sample.txt
ARCHS=${ARCHS:-"llama llama3 phi3 phi3_longrope gemma2"}
# FILES=DIR: the trained files (docs/perf/model-families.md, Trained weights): family a's f32
# source is DIR/a-f32.gguf, as `MODE=make` wrote it (the K-quant shape, dim 256, ffn 512, for
# every TYPE) and scripts/train-families.py trained it in place; other TYPEs are made from it:
# by $LLAMA_BIN/llama-quantize (F16 for f16) for the families the peer runs, by `weir mkmodel
# --weights-from` (weir's own writer: f16 and its K-quant types, --type in lower case) for
# gemma3 and qwen3, which the February 2025 llama-quantize refuses.
# MODE=make (with FILES): only write DIR/a-f32.gguf for each family of ARCHS (random weights,
# seed 7), to be trained.
FILES=${FILES:-}
# KEEP=DIR: keep each family's model file there (DIR/FAMILY-TYPE.gguf) for a later look, e.g.
# by the double-precision reference (tests/reference's weir_ref_eval).
KEEP=${KEEP:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
keep() { if [ -n "$KEEP" ]; then mkdir -p "$KEEP" && cp "$1" "$KEEP/$2-$TYPE.gguf"; fi; }

TYPE=${TYPE:-f32}
MODE=${MODE:-perplexity}
kshape=${FILES:+K}
case $kshape$TYPE in
  [A-Z]*) shape="--layers 4 --dim 256 --heads 4 --kv-heads 2 --ffn 512 --vocab 512 --ctx 4096 --seed 7" ;;
  *) shape="--layers 4 --dim 128 --heads 4 --kv-heads 2 --ffn 256 --vocab 512 --ctx 4096 --seed 7" ;;
esac
# Whether the February 2025 peer runs family $1.
peer_runs() { case $1 in gemma3|qwen3) return 1 ;; *) return 0 ;; esac; }
for a in $ARCHS; do
  [ "$MODE" = make ] && break
  if peer_runs "$a" && [ -z "$LLAMA_BIN" ]; then
    echo "set LLAMA_BIN to the directory holding llama-perplexity (family $a)" >&2; exit 2
  fi
  if ! peer_runs "$a" && [ -z "$REF" ]; then
    echo "family $a: the peer predates it; set REF to weir_ref_eval" >&2; exit 2
  fi
done
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
# (A family the peer predates is quantized by weir's own `mkmodel --type`.)
make_model() {
  local t=$TYPE
  if [ -n "$FILES" ]; then
    local src=$FILES/$1-f32.gguf
    [ -f "$src" ] || { echo "$src: missing (MODE=make, then scripts/train-families.py)" >&2; exit 2; }
    case $TYPE in
      f32) cp "$src" "$2" ;;
      *) if peer_runs "$1"; then
           t=$TYPE; [ "$t" = f16 ] && t=F16
           "$LLAMA_BIN/llama-quantize" "$src" "$2" "$t" >/dev/null 2>&1
         else
           # shellcheck disable=SC2046,SC2086
           "$WEIR" mkmodel $shape $(args_for "$1") --weights-from "$src" --type "${TYPE,,}" \
             --out "$2" >/dev/null 2>&1
         fi ;;
    esac
    return
  fi
  case $TYPE in [A-Z]*) if peer_runs "$1"; then t=f32; else t=${TYPE,,}; fi ;; esac
  # shellcheck disable=SC2046,SC2086
  "$WEIR" mkmodel $shape $(args_for "$1") --type "$t" --out "$2.src" >/dev/null 2>&1
  case $TYPE in
    [A-Z]*) if peer_runs "$1"; then
              "$LLAMA_BIN/llama-quantize" "$2.src" "$2" "$TYPE" >/dev/null 2>&1; rm -f "$2.src"
            else mv "$2.src" "$2"; fi ;;
    *) mv "$2.src" "$2" ;;
  esac
}

if [ "$MODE" = make ]; then
  [ -n "$FILES" ] || { echo "MODE=make needs FILES=DIR" >&2; exit 2; }
  mkdir -p "$FILES"
  for a in $ARCHS; do
    # shellcheck disable=SC2046,SC2086
    "$WEIR" mkmodel $shape $(args_for "$a") --type f32 --out "$FILES/$a-f32.gguf"
  done
  exit 0
fi

if [ "$MODE" = greedy ]; then
  status=0
  for a in $ARCHS; do
    m=$dir/$a.gguf
    make_model "$a" "$m"
    keep "$m" "$a"
    printf '%-14s %-6s ' "$a" "$TYPE"
    opts=()
    if peer_runs "$a"; then opts+=(--llama-server "$LLAMA_BIN/llama-server"); fi
    if [ -n "$REF" ]; then opts+=(--ref "$REF"); fi
    python3 scripts/compare-greedy.py --weir "$WEIR" "${opts[@]}" \
      --model "$m" --n 256 --threads 2 || status=1
    rm -f "$m"
  done
  exit $status
fi

printf '%-14s %12s %12s %10s' family weir llama.cpp rel.diff
[ -n "$REF" ] && printf ' %12s %10s %10s' reference weir-ref llama-ref
printf '   (%s weights, ctx %s)\n' "$TYPE" "$CTX"
for a in $ARCHS; do
  m=$dir/$a.gguf
  make_model "$a" "$m"
  keep "$m" "$a"
  w=$("$WEIR" perplexity --model "$m" --file "$TEXT" --ctx "$CTX" --threads 2 --json 2>/dev/null |
      sed -n 's/.*"perplexity": *\([0-9.eE+-]*\).*/\1/p')
  l=
  if peer_runs "$a"; then
    l=$("$LLAMA_BIN/llama-perplexity" -m "$m" -f "$TEXT" -c "$CTX" -b "$CTX" -t 2 2>&1 |
        sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' || true)
  fi
  r=
  if [ -n "$REF" ]; then
    r=$("$REF" ppl "$m" "$TEXT" "$CTX" | sed -n 's/.*"perplexity": *\([0-9.eE+-]*\).*/\1/p' || true)
  fi
  # (a missing figure prints as "-"; relative differences signed against the reference)
  awk -v a="$a" -v w="$w" -v l="$l" -v r="$r" -v ref="$REF" 'BEGIN {
    printf "%-14s %12s %12s", a, w == "" ? "failed" : sprintf("%.4f", w),
           l == "" ? "-" : sprintf("%.4f", l);
    if (w != "" && l != "") { d = (w - l) / l; if (d < 0) d = -d; printf " %9.4f%%", 100 * d }
    else printf " %10s", "-";
    if (ref != "") {
      printf " %12s", r == "" ? "failed" : sprintf("%.4f", r);
      printf " %10s", (w != "" && r != "") ? sprintf("%+.3f%%", 100 * (w - r) / r) : "-";
      printf " %10s", (l != "" && r != "") ? sprintf("%+.3f%%", 100 * (l - r) / r) : "-";
    }
    printf "\n" }'
done
