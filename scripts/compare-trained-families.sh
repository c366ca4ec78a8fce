#!/usr/bin/env bash
# The family checks on TRAINED weights (docs/perf/model-families.md, "Trained weights"): makes
# each family's f32 file (`compare-families.sh` MODE=make, the K-quant shape), trains it in
# place on the KJV (scripts/train-families.py, which also checks that weir's perplexity of
# the result is torch's), then runs scripts/compare-families.sh on the trained files for
# f32, f16, Q4_K_M and Q6_K: perplexity and greedy tokens against llama.cpp for the families
# it runs, against the float64 reference (weir_ref_eval) for gemma3 and qwen3.
#
#   LLAMA_BIN=/work/peer/llama/build/bin scripts/compare-trained-families.sh WORKDIR
#
# STEPS (default 100) training steps of 4 x 256 tokens per 4-layer family; gemma2 (26
# layers) GEMMA2_STEPS (default 40) of 2 x 256. STAGES (default "make train compare") picks
# stages. Trained files and logs stay in WORKDIR (WORKDIR/FAMILY-f32.gguf, its .train.json,
# WORKDIR/*.log). Needs Debian's python3-torch (scripts/train-families.py). Each training
# process uses one thread; the families train in parallel.
set -euo pipefail
W=${1:?usage: LLAMA_BIN=... $0 WORKDIR}
mkdir -p "$W"
W=$(cd "$W" && pwd)
cd "$(dirname "$0")/.."
LLAMA_BIN=${LLAMA_BIN:?set LLAMA_BIN to the peer binaries directory}
REF=${REF:-$PWD/build/tests/bin/weir_ref_eval}
STEPS=${STEPS:-100}
GEMMA2_STEPS=${GEMMA2_STEPS:-40}
STAGES=${STAGES:-"make train compare"}
PEER="llama llama3 phi3 phi3_longrope gemma2"
OWN="gemma3 qwen3"
mkdir -p "$W"
export LLAMA_BIN FILES=$W

for stage in $STAGES; do
  case $stage in
    make) MODE=make ARCHS="$PEER $OWN" scripts/compare-families.sh >"$W/make.log" 2>&1 ;;
    train)
      pids=()
      for a in $PEER $OWN; do
        if [ "$a" = gemma2 ]; then s=(--steps "$GEMMA2_STEPS" --batch 2 --log-every 5)
        else s=(--steps "$STEPS" --log-every 10); fi
        /usr/bin/python3 scripts/train-families.py train --model "$W/$a-f32.gguf" \
          --work "$W/work" --threads 1 "${s[@]}" >"$W/train-$a.log" 2>&1 &
        pids+=($!)
      done
      st=0
      for p in "${pids[@]}"; do wait "$p" || st=1; done
      tail -qn1 "$W"/train-*.log
      [ $st = 0 ] || { echo "a training run failed (see $W/train-*.log)" >&2; exit 1; }
      ;;
    compare)
      for t in f32 f16 Q4_K_M Q6_K; do
        # the reference's third opinion on the peer's families where the two may part (the
        # K-quants: 8-bit activation rounding on each side); gemma3/qwen3 have only it
        pref=; case $t in [A-Z]*) pref=$REF ;; esac
        REF=$pref TYPE=$t ARCHS="$PEER" scripts/compare-families.sh 256 >"$W/ppl-$t.log" 2>&1 &
        p1=$!
        REF=$REF TYPE=$t ARCHS="$OWN" scripts/compare-families.sh 256 >"$W/ppl-own-$t.log" 2>&1 &
        p2=$!
        wait $p1 $p2 || true
        REF=$pref TYPE=$t MODE=greedy ARCHS="$PEER" scripts/compare-families.sh >"$W/greedy-$t.log" 2>&1 &
        p1=$!
        REF=$REF TYPE=$t MODE=greedy ARCHS="$OWN" scripts/compare-families.sh >"$W/greedy-own-$t.log" 2>&1 &
        p2=$!
        wait $p1 $p2 || true
        cat "$W/ppl-$t.log" "$W/ppl-own-$t.log" "$W/greedy-$t.log" "$W/greedy-own-$t.log"
      done
      ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
