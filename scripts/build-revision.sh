# build-revision.sh: sourced by the A/B bench scripts (bench-elementwise.sh,
# bench-spec-picks.sh), which take a build directory or a git revision for each side.
#
#   build_side SPEC SIDE OUT TARGET...
# SPEC: a build directory (printed back as is) or a git revision, which is unpacked from
# `git archive` into OUT/src-SIDE and built there (CUDA off, the given targets only; the log
# in OUT/build-SIDE.log). A target written ?NAME is optional: built only where the revision's
# tree has add_executable(NAME, so an older revision builds without a newer benchmark. Prints the build directory; exits the script
# with a message when SPEC is neither or the build fails.
build_side() {
  local spec=$1 side=$2 out=$3 src t
  shift 3
  if [ -d "$spec" ]; then
    echo "$spec"
    return 0
  fi
  git rev-parse --verify -q "$spec^{commit}" >/dev/null ||
    { echo "no build dir or revision: $spec" >&2; exit 1; }
  src="$out/src-$side"
  rm -rf "$src" && mkdir -p "$src" && git archive "$spec" | tar -x -C "$src"
  cmake -S "$src" -B "$src/build" -G Ninja -DWEIR_CUDA=OFF >"$out/build-$side.log" 2>&1 ||
    { echo "configuring $spec failed: $out/build-$side.log" >&2; exit 1; }
  local targets=()
  for t in "$@"; do
    case $t in
      \?*) grep -rqs --include=CMakeLists.txt "add_executable(${t#\?} " "$src" && targets+=("${t#\?}") ;;
      *) targets+=("$t") ;;
    esac
  done
  cmake --build "$src/build" -j"$(nproc)" --target "${targets[@]}" >>"$out/build-$side.log" 2>&1 ||
    { echo "build of $spec failed: $out/build-$side.log" >&2; exit 1; }
  echo "$src/build"
}
