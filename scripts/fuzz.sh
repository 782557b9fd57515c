#!/usr/bin/env bash
# Builds the libFuzzer harnesses of the parsers (test/fuzz) with clang-14 and
# runs each for SECONDS (default 60), JOBS (default: the cores) side by side,
# starting from its corpus in the repository.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     TARGET: digits_csv graph_csv checkpoint solver_options
#   scripts/fuzz.sh --build-only [TARGET...]   build the harnesses, run nothing
# New interesting inputs go to build-fuzz/corpus/<target> (not the repository);
# a crash stops with a non-zero exit status and leaves the input in
# build-fuzz/crashes/. Such an input belongs in test/fuzz/corpus/<target>/ once
# the bug is fixed, so that every later run replays it. Skipped, with a message,
# when clang++-14 or its libFuzzer runtime is missing (scripts/install-deps.sh
# installs both).
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
if [ "${1:-}" = "--build-only" ]; then build_only=1; shift; fi
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(digits_csv graph_csv checkpoint solver_options)
jobs=${JOBS:-$(nproc)}

if ! command -v clang++-14 >/dev/null; then
  echo "fuzz: skipped: clang++-14 is not installed (Debian package clang-14)"
  exit 0
fi
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
     clang++-14 -x c++ -fsanitize=fuzzer - -o /tmp/implicit-fuzz-probe.$$ 2>/dev/null; then
  echo "fuzz: skipped: clang++-14 cannot link -fsanitize=fuzzer (Debian package libfuzzer-14-dev)"
  exit 0
fi
rm -f /tmp/implicit-fuzz-probe.$$

if [ "$build_only" = 1 ]; then
  echo "== libFuzzer harnesses: build"
else
  echo "== libFuzzer harnesses (${seconds} s per target)"
fi
# -O1: libFuzzer's recommended level (fast enough to run, still accurate stacks).
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1" -DIMPLICIT_FUZZ=ON -DIMPLICIT_BUILD_TESTS=OFF \
      -DIMPLICIT_BUILD_APPS=OFF -DIMPLICIT_WITH_CUDA=OFF -DIMPLICIT_WITH_OPENMP=OFF >/dev/null
cmake --build build-fuzz -j "$jobs" --target "${targets[@]/#/fuzz_}"
[ "$build_only" = 1 ] && exit 0
mkdir -p build-fuzz/crashes
# JOBS targets run side by side, each for SECONDS on its own core.
fuzz_one() {
  local t=$1
  mkdir -p "build-fuzz/corpus/$t"
  # The repository corpus is read (every input in it is replayed first); new
  # inputs are written to the build's corpus only.
  build-fuzz/test/fuzz/fuzz_$t -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="build-fuzz/crashes/$t-" \
      "build-fuzz/corpus/$t" "test/fuzz/corpus/$t" 2>"build-fuzz/fuzz_$t.log"
}
for ((first = 0; first < ${#targets[@]}; first += jobs)); do
  batch=("${targets[@]:first:jobs}")
  pids=()
  for t in "${batch[@]}"; do
    fuzz_one "$t" &
    pids+=($!)
  done
  for i in "${!batch[@]}"; do
    t=${batch[$i]}
    echo "-- fuzz_$t"
    wait "${pids[$i]}" || {
      tail -n 40 "build-fuzz/fuzz_$t.log"
      echo "fuzz: fuzz_$t FAILED; the input is in build-fuzz/crashes/"
      wait
      exit 1
    }
    grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb)" "build-fuzz/fuzz_$t.log" || true
  done
done
echo "== fuzzing: no crash"
