#!/usr/bin/env bash
# Speculative decoding at one stream through `weir generate` on the trained pair: decode
# tokens/s of 400 tokens with no drafter, ngram and the draft model (k = 4), each with the
# adaptive policy (the default) and at a fixed length (drafter.adaptive = false), greedy and
# at temperature 0.8, on two prompts; ROUNDS rounds (default 3) with the configurations
# alternated inside each round. Prints one raw line per run, then the medians.
#
#   scripts/bench-speculative.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
threads=${THREADS:-1}
weir=("$build/bin/weir" generate --model models/kjv-target.gguf
      --set "plugins.dirs=[\"$build/lib/weir/plugins\"]" -n 400 --threads "$threads" --ignore-eos)
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for round in $(seq "$rounds"); do
  for prompt in "In the beginning" "And it came to pass"; do
    for temp in 0 0.8; do
      for cfg in none ngram ngram:fixed draft_model draft_model:fixed; do
        extra=()
        case $cfg in
          ngram*) extra=(--set drafter.name=ngram) ;;
          draft_model*) extra=(--set drafter.name=draft_model --set drafter.model=models/kjv-draft.gguf) ;;
        esac
        case $cfg in *:fixed) extra+=(--set drafter.adaptive=false) ;; esac
        out=$("${weir[@]}" --prompt "$prompt" --temperature "$temp" --seed "$round" "${extra[@]}" \
              2>/dev/null | tail -2)
        tg=$(echo "$out" | sed -n 's/.*generated: [0-9]* tokens in [0-9.]* s (\([0-9.]*\).*/\1/p')
        acc=$(echo "$out" | sed -n 's/^speculative: .*(\([0-9.]*\))$/\1/p')
        echo "$round|$prompt|$temp|$cfg|$tg|${acc:--}" | tee -a "$raw"
      done
    done
  done
done
echo
echo "| prompt | temperature | drafter | decode tok/s (median) | vs none | acceptance |"
echo "|---|---|---|---|---|---|"
/usr/bin/python3 - "$raw" <<'PY'
import collections, statistics, sys
runs, acc = collections.defaultdict(list), {}
for line in open(sys.argv[1]):
    _, p, t, c, tg, a = line.rstrip("\n").split("|")
    runs[(p, t, c)].append(float(tg))
    acc[(p, t, c)] = a
for (p, t, c) in runs:
    med = statistics.median(runs[(p, t, c)])
    base = statistics.median(runs[(p, t, "none")])
    print(f"| {p} | {t} | {c} | {med:.0f} | {med / base:.2f}x | {acc[(p, t, c)]} |")
PY
