#!/bin/bash
# weir (A = ed17e42, B = HEAD) against llama.cpp (c392e5094) on models/kjv-target.gguf (f16),
# one thread, a 384-token random prompt then 128 tokens: decode at 384-512 tokens of context.
# Runs alternated A B peer, 3 rounds.
cd /work/main
L=/work/peer/llama/build/bin
echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD)"
for r in 1 2 3; do
  for b in /tmp/base/build build; do
    echo "## round $r weir $b"
    $b/bin/weir generate --model models/kjv-target.gguf --set "plugins.dirs=[\"$b/lib/weir/plugins\"]" \
      --threads 1 --ignore-eos --random-prompt 384 -n 128 --temperature 0 --seed 1 2>&1 | grep -E "^prompt:"
  done
  echo "## round $r llama.cpp"
  $L/llama-bench -m models/kjv-target.gguf -t 1 -p 384 -n 0 -pg 384,128 -r 3 -o md 2>/dev/null | grep -E "pp384|pp384\+tg128"
done
