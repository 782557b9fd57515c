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
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DIMPLICIT_NATIVE=ON >/dev/null
cmake --build build -j "$(nproc)" --target implicit-compare
mkdir -p results
build/apps/implicit-compare --json results/compare.json --csv results/compare.csv \
  --plot results/compare.png "$@"
