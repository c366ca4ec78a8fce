#!/usr/bin/env bash
# What the draft model costs on steps that draft nothing (issue 32, "no cost when not
# drafting"), unattended, on the trained pair, one stream, greedy, 400 tokens after
# "In the beginning", `weir generate --threads 1` with the step profile (WEIR_STEP_PROFILE=1):
#
#   none     no drafter;
#   idle     the draft model (adaptive, as configured by default) with every step's length held
#            at 0 (WEIR_SPEC_FORCE_K=0): what the draft's mere presence costs a decode step;
#   adaptive the draft model as an operator gets it (the policy's own choice), for context.
#
# ROUNDS rounds (default 5), the configurations alternated in each. Per configuration: the
# median decode time per token in engine-thread CPU time (the step profile's decode line, which
# a busy machine's preemption does not inflate) and in wall time, their ratio to none's, and
# the draft model's forward passes (none expected for idle).
#
#   scripts/bench-draft-idle.sh [BUILD_DIR] [ROUNDS] [OUT_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
build=${1:-build}
rounds=${2:-5}
out=${3:-$(mktemp -d)}
mkdir -p "$out"
weir=$build/bin/weir
[ -x "$weir" ] || { echo "no $weir: build first" >&2; exit 1; }
echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
     "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown); output in $out"
cfgs=(none idle adaptive)
for r in $(seq 1 "$rounds"); do
  for cfg in "${cfgs[@]}"; do
    extra=()
    force=""
    case $cfg in
      idle) extra=(--set drafter.name=draft_model --set 'drafter.model="models/kjv-draft.gguf"')
            force=0 ;;
      adaptive) extra=(--set drafter.name=draft_model --set 'drafter.model="models/kjv-draft.gguf"') ;;
    esac
    log=$out/$cfg-$r.log
    WEIR_STEP_PROFILE=1 WEIR_SPEC_FORCE_K=$force "$weir" generate --model models/kjv-target.gguf \
      --prompt "In the beginning" -n 400 --ignore-eos --threads 1 "${extra[@]}" > "$log" 2>&1
    grep -q "generated:" "$log" || { echo "$cfg round $r failed: $log" >&2; exit 1; }
  done
done
python3 - "$out" "$rounds" "${cfgs[@]}" <<'EOF'
import re, statistics, sys
out, rounds, cfgs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = {}
for cfg in cfgs:
    cpu, wall, passes, drafted = [], [], [], []
    for r in range(1, rounds + 1):
        t = open(f"{out}/{cfg}-{r}.log").read()
        m = re.search(r"decode: (\d+) tokens in ([\d.]+) ms", t)
        cpu.append(1e3 * float(m.group(2)) / int(m.group(1)))  # us per token
        m = re.search(r"generated: (\d+) tokens in ([\d.]+) s", t)
        wall.append(1e6 * float(m.group(2)) / int(m.group(1)))
        m = re.search(r"draft model: (\d+) forward passes", t)
        passes.append(int(m.group(1)) if m else 0)
        m = re.search(r"speculative: (\d+) tokens drafted", t)
        drafted.append(int(m.group(1)) if m else 0)
    rows[cfg] = (statistics.median(cpu), statistics.median(wall), passes, drafted)
base = rows["none"]
print("| configuration | CPU us/token (median) | vs none | wall us/token (median) | vs none "
      "| draft passes per run | drafted per run |")
print("|---|---|---|---|---|---|---|")
for cfg in cfgs:
    c, w, p, d = rows[cfg]
    print(f"| {cfg} | {c:.1f} | {c / base[0]:.3f}x | {w:.1f} | {w / base[1]:.3f}x "
          f"| {', '.join(map(str, p))} | {', '.join(map(str, d))} |")
EOF
