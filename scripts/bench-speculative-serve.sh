#!/usr/bin/env bash
# Speculative decoding through `weir serve` and `weir bench` on the trained pair: no drafter
# (A) against the draft model (B), with the adaptive policy and at a fixed length, at 1, 4
# and 16 concurrent streams, greedy and at temperature 0.8; weir bench alternates the two
# servers round by round (ABAB, ROUNDS per side) and reports whether a difference exceeds the
# run-to-run spread. Each round first sends as many warm-up requests as it measures (not
# counted): the adaptive policy learns per server, so this measures a server in service, not
# one learning from scratch. Output: one weir bench report per case, and OUT/*.json.
#
#   scripts/bench-speculative-serve.sh [BUILD_DIR] [OUT_DIR] [ROUNDS]
#
# VARIANTS="draft" runs the adaptive policy only (default: "draft draft-fixed"); THREADS sets
# the server's device threads (default 1); PER_STREAM and MIN_REQS size a round (below).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
out=${2:-$(mktemp -d)}
rounds=${3:-3}
threads=${THREADS:-1}
# Requests per round: PER_STREAM per stream, at least MIN_REQS (rounds of a few seconds: a
# shorter round is mostly the policy's learning and the machine's noise).
per_stream=${PER_STREAM:-8}
min_reqs=${MIN_REQS:-32}
weir=$build/bin/weir
mkdir -p "$out"
# Prompts in the model's register (King James phrases), one per line, cycled.
prompts=("In the beginning God created" "And it came to pass, when" "The LORD is my shepherd"
         "And the LORD spake unto Moses, saying," "Blessed are the poor in spirit"
         "Now these are the generations of" "And God said, Let there be"
         "Hear, O Israel: The LORD our God")
: > "$out/prompts.jsonl"
for p in "${prompts[@]}"; do printf '{"prompt": "%s"}\n' "$p" >> "$out/prompts.jsonl"; done
base() {
  cat <<TOML
[model]
path = "$here/models/kjv-target.gguf"
[plugins]
dirs = ["$build/lib/weir/plugins"]
[device]
threads = $threads
[cache]
memory_bytes = 67108864
TOML
}
base > "$out/none.toml"
{ base; printf '[drafter]\nname = "draft_model"\nmodel = "%s"\n' "$here/models/kjv-draft.gguf"; } \
  > "$out/draft.toml"
{ cat "$out/draft.toml"; echo "adaptive = false"; } > "$out/draft-fixed.toml"
for temp in 0 0.8; do
  for c in 1 4 16; do
    for b in ${VARIANTS:-draft draft-fixed}; do
      n=$((c * per_stream > min_reqs ? c * per_stream : min_reqs))
      echo "## temperature $temp, concurrency $c: none vs $b"
      "$weir" bench --a-config "$out/none.toml" --b-config "$out/$b.toml" --label-a none \
        --label-b "$b" --rounds "$rounds" --concurrency "$c" --num-requests "$n" --warmup "$n" \
        --dataset jsonl --file "$out/prompts.jsonl" --output-len 128 --ignore-eos \
        --temperature "$temp" --quiet --json "$out/t$temp-c$c-$b.json" 2>&1 | tail -25 ||
        echo "(weir bench failed: $?)"
    done
  done
done
