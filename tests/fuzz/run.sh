#!/usr/bin/env bash
# Runs one libFuzzer target from a fuzz build (docs/reliability.md):
#
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DWEIR_FUZZ=ON -DWEIR_CUDA=OFF
#   cmake --build build-fuzz --target fuzz_http      # or any fuzz_<target>
#   tests/fuzz/run.sh http 10000000                   # TARGET RUNS [libFuzzer flags...]
#   tests/fuzz/run.sh http merge                      # fold new coverage into the corpus
#
# Targets: gguf http json_completions json_chat json_tokenize json_detokenize toml tokenizer
# chat_template jinja grammar. The run starts from the committed corpus (tests/fuzz/corpus/TARGET) plus a
# work corpus in build-fuzz/fuzz-corpus/TARGET, uses tests/fuzz/dict/TARGET.dict, writes
# crashes into build-fuzz/fuzz-artifacts/, and prints libFuzzer's final statistics (execs,
# seconds). `merge` adds to the committed corpus only the work-corpus inputs that reach new
# coverage. BUILD=dir picks another build directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${1:?target}
what=${2:?runs or merge}
shift 2
build=${BUILD:-build-fuzz}
bin=$build/tests/fuzz/fuzz_$target
[ -x "$bin" ] || { echo "no $bin: build it with -DWEIR_FUZZ=ON (see the top of $0)" >&2; exit 2; }
corpus=tests/fuzz/corpus/$target
work=$build/fuzz-corpus/$target
mkdir -p "$corpus" "$work" "$build/fuzz-artifacts"
dict=()
[ -f "tests/fuzz/dict/$target.dict" ] && dict=(-dict="tests/fuzz/dict/$target.dict")
if [ "$what" = merge ]; then
  exec "$bin" -merge=1 "${dict[@]}" "$corpus" "$work" "$@"
fi
# AddressSanitizer's defaults cost most of an input's time here (a 256 MiB quarantine that
# keeps faulting fresh pages in, a filled and fully traced allocation per malloc).
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=16:max_malloc_fill_size=0:malloc_context_size=5}
start=$(date +%s)
# Inputs larger than 64 KiB only repeat what smaller ones reach (and the HTTP server's body
# limit in the harness is 64 KiB); leak checks run at exit.
"$bin" -runs="$what" -max_len=65536 -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$build/fuzz-artifacts/$target-" "${dict[@]}" "$@" "$work" "$corpus"
echo "fuzz_$target: $what runs in $(( $(date +%s) - start )) s"
