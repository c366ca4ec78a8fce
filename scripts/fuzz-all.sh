#!/usr/bin/env bash
# Runs every libFuzzer target of issue 9 for RUNS executions each (default 10,000,000), one
# after the other, and prints a Markdown table of executions, seconds, executions per second
# and the result (docs/reliability.md records a run). Unattended; a few hours on two cores.
#
#   scripts/fuzz-all.sh [RUNS] [TARGET...]      # default: every target below
#   JOBS=2 scripts/fuzz-all.sh 10000000 http json_chat   # two at once, one per core
#
# Builds build-fuzz/ first when it is missing (clang, -DWEIR_FUZZ=ON). Crashes, leaks and
# timeouts leave their input in build-fuzz/fuzz-artifacts/ and make the script exit 1 at the
# end. Do not stop the fuzzers (SIGSTOP) while it runs: libFuzzer's timeout counts wall time.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10000000}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(http json_completions json_chat json_tokenize json_detokenize
                                     toml tokenizer chat_template)
build=${BUILD:-build-fuzz}
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DWEIR_FUZZ=ON -DWEIR_CUDA=OFF >&2 || exit 2
fi
cmake --build "$build" --target $(printf 'fuzz_%s ' "${targets[@]}") >&2 || exit 2
mkdir -p "$build/fuzz-logs"
# One target: runs it, prints its table row, returns its exit status.
one() {
  local t=$1 log=$build/fuzz-logs/$1.log start rc secs execs result
  start=$(date +%s)
  BUILD=$build tests/fuzz/run.sh "$t" "$runs" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  result=$([ $rc -eq 0 ] && echo clean || grep -m1 -E '^SUMMARY|ERROR: libFuzzer' "$log" || echo "exit $rc")
  printf '| %s | %s | %s | %s | %s |\n' "$t" "${execs:-?}" "$secs" \
    "$(awk -v e="${execs:-0}" -v s="$secs" 'BEGIN{printf "%.0f", (s > 0 ? e / s : 0)}')" "$result"
  return $rc
}
fail=0
echo "| target | executions | seconds | exec/s | result |"
echo "|---|---|---|---|---|"
# JOBS=N runs up to N targets at once (one per core: the slow targets take hours each).
jobs=${JOBS:-1}
pids=()
for t in "${targets[@]}"; do
  if [ "$jobs" -le 1 ]; then
    one "$t" || fail=1
    continue
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 2; done
  one "$t" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail=1; done
exit $fail
