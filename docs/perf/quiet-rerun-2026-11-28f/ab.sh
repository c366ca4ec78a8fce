#!/bin/bash
# The one-off A/B behind goal1-ab.log, kept as run (lead, 2026-11-28): /tmp/prof/copy.txt is
# the copy prompt of scripts/bench-speculative.sh (90 held-out words, a blank line, the same
# words, a blank line, their first 8). scripts/bench-spec-picks.sh does the same alternation
# through part 1 of bench-speculative.sh for any two builds or revisions.
# ab.sh BUILD_A BUILD_B N: the copy prompt, ngram fixed k4 and none; 5-row and 1-row forward us
cd /work/main
for i in $(seq $3); do
 for b in $1 $2; do
  for cfg in none k4; do
   extra=""; [ $cfg = k4 ] && extra="--set drafter.name=ngram --set drafter.adaptive=false --set drafter.num_speculative_tokens=4"
   line=$(WEIR_STEP_PROFILE=1 $b/bin/weir generate --model models/kjv-target.gguf --set "plugins.dirs=[\"$b/lib/weir/plugins\"]" --threads 1 --ignore-eos -n 192 --prompt-file /tmp/prof/copy.txt --temperature 0 --seed 1 $extra 2>&1 >/dev/null | grep "step profile" | grep -E "$( [ $cfg = k4 ] && echo ' 5 tokens' || echo ' 1 tokens')" | sed 's/.*forward \([0-9.]*\).*total \([0-9.]*\)/\1 \2/')
   echo "$b $cfg $line"
  done
 done
done
