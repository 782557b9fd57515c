#!/usr/bin/env bash
# The test command: installs dependencies, builds libimplicit in Release with
# its programs, Python module and the tests of the programs and backends, runs
# them (ctest; the Python tests through pytest, label `python`), builds the API
# reference (Doxygen, target `docs`, warnings are errors), installs the
# package, builds a consumer project against it and runs the Python example
# against the installed module, then builds and runs every suite (unit,
# backends, programs, robustness) under AddressSanitizer + UBSan, and runs the parsers'
# libFuzzer harnesses briefly (scripts/fuzz.sh).
#   scripts/test.sh            everything
#   SKIP_SANITIZE=1 scripts/test.sh   skip the sanitizer pass (the unit tests then run in Release)
#   SKIP_FUZZ=1 scripts/test.sh       skip the fuzzing pass (FUZZ_SECONDS per target, default 15)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=${JOBS:-$(nproc)}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}

# A background build (below) must not outlive a failed stage.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
# Waits for the background build of pid $1 (log $2, called $3 in messages);
# when it failed, shows the end of its log and stops.
wait_background_build() {
  if ! wait "$1"; then
    tail -n 60 "$2"
    echo "scripts/test.sh: $3 failed (whole log: $2)" >&2
    exit 1
  fi
}

# Each stage's wall time, printed at the end (CI time is a project target).
stage_times=()
stage_start=$SECONDS
stage() {
  stage_times+=("$(printf '%5d s  %s' $((SECONDS - stage_start)) "$1")")
  stage_start=$SECONDS
}

scripts/install-deps.sh
stage "install-deps"

# The two builds need several GiB of disk (see need_gib); a full disk shows up
# later as a compiler's "No space left on device", so say it up front.
need_gib=6
free_gib=$(df -Pk . | awk 'NR == 2 {print int($4 / 1048576)}')
if [ "${free_gib:-0}" -lt "$need_gib" ]; then
  echo "scripts/test.sh: warning: $free_gib GiB free on the disk of $root;" \
       "the Release and sanitizer builds need about $need_gib GiB" >&2
fi

# GCC's garbage collector tuned for speed (IMPLICIT_GCC_FEWER_COLLECTIONS,
# about 10% less compile time) when the machine has 3 GiB of memory per job.
fewer_collections=OFF
if [ "$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null || echo 0)" -ge $((jobs * 3 * 1024 * 1024)) ]; then
  fewer_collections=ON
fi

# The suites of each build (IMPLICIT_TEST_SUITES): the sanitizer build runs
# every suite — the unit tests against the -O0 instrumented library, the
# backends', and the programs' end-to-end runs and the robustness suite against
# instrumented programs (the bugs those suites exist for, a parser overrun, a
# use-after-free on a checkpoint path, only a sanitizer shows; measured: 8 min
# of the pass's wall time on the 2-core machine, apps_et_test 336 s of it, and
# about 9 minutes of compile CPU for the programs). The Release build runs the
# backends', the programs' (with the training-quality cases the sanitizer
# build leaves out) and the robustness suite against the optimised programs
# the user gets; the unit tests only in the sanitizer build. With
# SKIP_SANITIZE=1 the Release build compiles and runs every suite;
# SANITIZE_SUITES picks the sanitizer build's suites (e.g. "unit;backends",
# the pass without the programs).
release_suites="backends;programs;robustness"
sanitize_suites=${SANITIZE_SUITES:-"unit;backends;programs;robustness"}
if [ "${SKIP_SANITIZE:-0}" = "1" ]; then
  release_suites="unit;backends;programs;robustness"
fi

# The sanitizer pass's build (see its stage below for what it holds).
sanitizer_build() {
  # The library and the tests of those suites (the programs too when a suite
  # runs them). -O0:
  # the sanitizers check every access at any level (optimization only removes
  # accesses), and -O0 compiles about a third faster than -O1, which is far
  # more than the slower test run costs. -g1: the line tables the sanitizer
  # reports need (file:line per frame) without variable-location tracking,
  # which at -g dominated the compile time of the Eigen-heavy tests.
  # The Python module is left out: an ASan-instrumented extension needs the
  # sanitizer runtime preloaded into the interpreter; its C++ core is the
  # library tested here. MPI too: Open MPI's own allocations at MPI_Finalize
  # read as leaks; the communicator tests run here in one process (the
  # single-process communicator, ShardedSolve and the data-parallel checks),
  # and under mpirun -np 2 in the Release pass. PETSc for the same reason
  # (it initialises Open MPI); its backend runs in the Release pass, KINSOL's
  # in both.
  # Executables linked without PIE: an instrumented program is relocated at
  # every start (ASan's metadata for each global), 697 474 relocations for
  # implicit-et against 12 926 without PIE, 0.17 s of CPU per start against
  # 0.13 s, and the programs' and robustness suites start them thousands of times.
  # Compiled by clang++-14 where it can link OpenMP (install-deps.sh installs
  # it): at -O0 with the sanitizers it compiles this project about twice as
  # fast as g++ (the whole pass's build: 11 min of CPU time against 24). g++
  # otherwise.
  sanitizer_compiler=()
  probe=$(mktemp)
  if command -v clang++-14 >/dev/null &&
     echo 'int main() { return 0; }' | clang++-14 -x c++ -fopenmp - -o "$probe" 2>/dev/null; then
    sanitizer_compiler=(-DCMAKE_CXX_COMPILER=clang++-14)
  else
    echo "sanitizer pass: compiled by g++ (clang++-14 with OpenMP not found: Debian clang-14, libomp-14-dev)"
  fi
  rm -f "$probe"
  sanitize_apps=OFF
  case "$sanitize_suites" in *programs*|*robustness*) sanitize_apps=ON ;; esac
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DIMPLICIT_SANITIZE=ON "${sanitizer_compiler[@]}" \
        -DIMPLICIT_BUILD_APPS=$sanitize_apps -DIMPLICIT_WITH_CUDA=OFF -DIMPLICIT_PYTHON=OFF -DIMPLICIT_WITH_MPI=OFF \
        -DIMPLICIT_WITH_PETSC=OFF \
        -DIMPLICIT_GCC_FEWER_COLLECTIONS=$fewer_collections -DIMPLICIT_TEST_SUITES="$sanitize_suites" \
        -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g1" -DCMAKE_EXE_LINKER_FLAGS=-no-pie
  cmake --build build-asan -j "$jobs"
}

echo "== Release build and tests (suites: $release_suites)"
# Debian's interpreter: the one python3-numpy and python3-pytest are installed for
# (a python3 earlier in PATH, e.g. pyenv's, may lack them).
python=$(command -v /usr/bin/python3 || command -v python3)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DIMPLICIT_BUILD_TESTS=ON \
      -DPython_EXECUTABLE="$python" -DIMPLICIT_GCC_FEWER_COLLECTIONS=$fewer_collections \
      -DIMPLICIT_TEST_SUITES="$release_suites"
cmake --build build -j "$jobs"
stage "Release build"

# The sanitizer build compiles in the background from here while the Release
# pass tests, documents and installs (those leave cores idle: a long test
# running alone at the end of ctest, Doxygen, configure and install steps);
# its log is build-asan/build.log, shown when it fails. BACKGROUND_SANITIZER_BUILD=0
# builds it in the sanitizer stage instead.
sanitizer_pid=
if [ "${SKIP_SANITIZE:-0}" != "1" ]; then
  if [ "${BACKGROUND_SANITIZER_BUILD:-1}" = "1" ]; then
    mkdir -p build-asan
    sanitizer_build > build-asan/build.log 2>&1 &
    sanitizer_pid=$!
  fi
fi

(cd build && ctest -j "$jobs" --output-on-failure)
stage "Release tests"

echo "== API reference (Doxygen over the public headers; any warning fails)"
cmake --build build --target docs
stage "API reference"

echo "== Install and build the consumer project against the installed package"
rm -rf build/_install build/_consumer
cmake --install build --prefix build/_install
cmake -S test/consumer -B build/_consumer -G Ninja -DCMAKE_PREFIX_PATH="$root/build/_install"
cmake --build build/_consumer
build/_consumer/implicit_consumer
build/_consumer/implicit_consumer_solvers_only
build/_consumer/implicit_train_deq
build/_consumer/implicit_user_energy
build/_consumer/implicit_cuda_check
build/_consumer/implicit_mpi_check
build/_consumer/implicit_backends_check
if command -v mpirun >/dev/null && grep -q "^IMPLICIT_WITH_MPI:BOOL=ON" build/CMakeCache.txt; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -np 2 --oversubscribe build/_consumer/implicit_mpi_check
fi
if grep -q "^IMPLICIT_PYTHON:BOOL=ON" build/CMakeCache.txt; then
  # The installed Python package, from the example at a small size.
  python_dir=$(sed -n 's/^IMPLICIT_PYTHON_INSTALL_DIR:STRING=//p' build/CMakeCache.txt)
  export PYTHONPATH="$root/build/_install/$python_dir" IMPLICIT_DATA_DIR="$root/build/_install/share/implicit"
  "$python" examples/python/hopfield_digits.py --patterns 200 --repeat 1
  if "$python" -c "import torch" 2>/dev/null; then
    "$python" examples/python/train_deq_digits.py --train 300 --epochs 3
  else
    echo "implicit.torch example skipped: $python cannot import torch (apt-get install python3-torch)"
  fi
  unset PYTHONPATH IMPLICIT_DATA_DIR
fi
stage "install and consumer project"

if [ "${SKIP_SANITIZE:-0}" != "1" ]; then
  echo "== AddressSanitizer + UBSan build and tests (suites: $sanitize_suites)"
  if [ -n "$sanitizer_pid" ]; then
    wait_background_build "$sanitizer_pid" build-asan/build.log "the sanitizer build"
    echo "(built in the background during the Release tests: build-asan/build.log)"
  else
    sanitizer_build
  fi
  stage "sanitizer build (the part not overlapped)"
  # The fuzzing harnesses' build overlaps the sanitizer tests the same way.
  fuzz_pid=
  if [ "${SKIP_FUZZ:-0}" != "1" ]; then
    mkdir -p build-fuzz
    scripts/fuzz.sh --build-only > build-fuzz/build.log 2>&1 &
    fuzz_pid=$!
  fi
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest -j "$jobs" --output-on-failure)
  stage "sanitizer tests"
fi
if [ "${SKIP_FUZZ:-0}" != "1" ]; then
  # A short bounded run of every libFuzzer harness (test/fuzz), which also
  # replays every input of the corpora in the repository; skipped with a
  # message when clang-14 / libFuzzer are missing.
  if [ -n "${fuzz_pid:-}" ]; then
    wait_background_build "$fuzz_pid" build-fuzz/build.log "the fuzzing harnesses' build"
  fi
  scripts/fuzz.sh "${FUZZ_SECONDS:-15}"
  stage "fuzzing"
fi
echo "== all tests passed"
printf '%s\n' "${stage_times[@]}"
echo "$(printf '%5d s' "$SECONDS")  in all"
