#!/usr/bin/env bash
# reference_eval: weir_ref_eval's perplexity of an f32 file equals `weir perplexity`'s with an
# f32 KV cache (both exact math but for float rounding: 1e-5 relative), on a 2-layer gemma3
# and qwen3 file (their special parts in the path); its top-1 mode agrees with itself (a
# continuation made of the reference's own choices agrees everywhere, and a changed token is
# a miss with a positive margin); bad input is refused with exit status 1.
#   ref_eval_test.sh WEIR REF_EVAL SOURCE_DIR
set -euo pipefail
weir=$1 ref=$2 src=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
text=$src/tests/perplexity/fixtures/heldout-sample.txt
head -c 3000 "$text" > "$dir/text.txt"
fail() { echo "FAIL: $*" >&2; exit 1; }
for arch in "gemma3 --head-dim 32 --swa 24 --tied" "qwen3 --head-dim 32 --tokenizer llama"; do
  # shellcheck disable=SC2086
  "$weir" mkmodel --arch $arch --layers 2 --dim 64 --heads 2 --kv-heads 1 --ffn 128 \
    --vocab 512 --ctx 256 --type f32 --seed 3 --out "$dir/m.gguf" >/dev/null 2>&1
  w=$("$weir" perplexity --model "$dir/m.gguf" --file "$dir/text.txt" --ctx 64 --threads 1 \
      --kv-dtype f32 --json 2>/dev/null | sed -n 's/.*"perplexity": *\([0-9.eE+-]*\).*/\1/p')
  r=$("$ref" ppl "$dir/m.gguf" "$dir/text.txt" 64 | sed -n 's/.*"perplexity": *\([0-9.eE+-]*\).*/\1/p')
  [ -n "$w" ] && [ -n "$r" ] || fail "$arch: no perplexity (weir '$w', reference '$r')"
  awk -v w="$w" -v r="$r" 'BEGIN { d = (w - r) / r; if (d < 0) d = -d; exit !(d < 1e-5) }' ||
    fail "$arch: weir $w, reference $r"
  echo "ok $arch: weir $w, reference $r"
done
# top1: ids 1..8 as a prompt, then 8 ids; the reference's answer names its own choice at the
# first position, so a continuation starting with that choice agrees there.
ids="1 5 9 13 17 21 25 29 3 3 3 3 3 3 3 3"
out=$(echo "$ids" | "$ref" top1 "$dir/m.gguf" 8)
agree=$(echo "$out" | sed -n 's/.*"agree": *\([0-9]*\).*/\1/p')
[ -n "$agree" ] || fail "top1: $out"
first=$(echo "$out" | sed -n 's/.*"misses": *\[\[0, \([0-9]*\),.*/\1/p')
if [ -n "$first" ]; then
  # position 0 was a miss: putting the reference's choice there must make it agree
  out2=$(echo "1 5 9 13 17 21 25 29 $first 3 3 3 3 3 3 3" | "$ref" top1 "$dir/m.gguf" 8)
  echo "$out2" | grep -q '"misses": \[\[0,' && fail "top1: its own choice $first is a miss: $out2"
  margin=$(echo "$out" | sed -n 's/.*"misses": *\[\[0, [0-9]*, 3, \([0-9.]*\)\].*/\1/p')
  awk -v m="$margin" 'BEGIN { exit !(m > 0) }' || fail "top1: margin '$margin' in $out"
fi
echo "ok top1: $out"
echo "1 2 3" | "$ref" top1 "$dir/m.gguf" 3 2>/dev/null && fail "top1 accepted no continuation"
echo "1 2 99999" | "$ref" top1 "$dir/m.gguf" 1 2>/dev/null && fail "top1 accepted id 99999"
"$ref" ppl "$dir/none.gguf" "$dir/text.txt" 64 2>/dev/null && fail "ppl accepted a missing file"
"$ref" ppl "$dir/m.gguf" "$dir/text.txt" 100000 2>/dev/null && fail "ppl accepted ctx > text"
echo "ok errors"
