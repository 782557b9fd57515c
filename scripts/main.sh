#!/usr/bin/env bash
# The main job: installs dependencies, builds libimplicit and its apps, and runs
# the solver comparison on the built-in problems (digits data shipped in data/).
# Extra arguments go to implicit-compare, e.g. scripts/main.sh --problem hopfield-digits
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
scripts/install-deps.sh
# -DIMPLICIT_NATIVE=ON: -march=native (this machine's vector units); the
# binaries are for this machine only.
# Debian's python3 (the one python3-numpy is installed for) for the Python module.
python=$(command -v /usr/bin/python3 || command -v python3)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DIMPLICIT_NATIVE=ON \
      -DPython_EXECUTABLE="$python" >/dev/null
targets=(implicit-compare)
grep -q "^IMPLICIT_PYTHON:BOOL=ON" build/CMakeCache.txt && targets+=(implicit_python)
cmake --build build -j "$(nproc)" --target "${targets[@]}"
mkdir -p results
build/apps/implicit-compare --json results/compare.json --csv results/compare.csv \
  --plot results/compare.png "$@"
