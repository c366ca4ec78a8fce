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
# Training: STEPS (default 100) steps of 4 x 256 tokens per 4-layer family at lr 3e-3, then
# MORE_STEPS (default 200) more at lr 2e-3; gemma2 (26 layers) GEMMA2_STEPS (40) then
# GEMMA2_MORE (60) steps of 2 x 256. (About 20 minutes of wall time on the shared 2-core
# machine; the compare stage about 20 more.) STAGES (default "make train compare") picks
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
MORE_STEPS=${MORE_STEPS:-200}
GEMMA2_MORE=${GEMMA2_MORE:-60}
STAGES=${STAGES:-"make train compare"}
PEER="llama llama3 phi3 phi3_longrope gemma2"
OWN="gemma3 qwen3"
mkdir -p "$W"
export LLAMA_BIN FILES=$W

for stage in $STAGES; do
  case $stage in
    make) MODE=make ARCHS="$PEER $OWN" scripts/compare-families.sh >"$W/make.log" 2>&1 ;;
    train)
      # Two passes per family: STEPS at lr 3e-3 from mkmodel's random values, then MORE_STEPS
      # at lr 2e-3 from the first pass's weights with fresh batches (another seed).
      for pass in 1 2; do
        pids=()
        for a in $PEER $OWN; do
          if [ "$a" = gemma2 ]; then
            n=$GEMMA2_STEPS; [ $pass = 2 ] && n=$GEMMA2_MORE; s=(--batch 2 --log-every 5)
          else
            n=$STEPS; [ $pass = 2 ] && n=$MORE_STEPS; s=(--log-every 20)
          fi
          if [ $pass = 1 ]; then s+=(--lr 3e-3 --seed 1234); else s+=(--lr 2e-3 --seed 1235); fi
          [ "$n" -gt 0 ] || continue
          /usr/bin/python3 scripts/train-families.py train --model "$W/$a-f32.gguf" \
            --work "$W/work" --threads 1 --steps "$n" "${s[@]}" >"$W/train$pass-$a.log" 2>&1 &
          pids+=($!)
        done
        st=0
        for p in "${pids[@]}"; do wait "$p" || st=1; done
        tail -qn1 "$W"/train$pass-*.log
        [ $st = 0 ] || { echo "a training run failed (see $W/train$pass-*.log)" >&2; exit 1; }
      done
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
