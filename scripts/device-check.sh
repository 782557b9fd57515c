#!/usr/bin/env bash
# The GPU checks of issue 20, for a GPU machine without the build
# dependencies: runs the CUDA tests and `implicit-bench --device cuda` from
# binaries built elsewhere (scripts/device-pack.sh puts them, with the shared
# libraries they need apart from glibc, libstdc++ and CUDA's, into DIR).
#   scripts/device-check.sh DIR [OUTDIR]
set -u
dir=${1:?usage: scripts/device-check.sh DIR [OUTDIR]}
out=${2:-.}
cublas=$(ldconfig -p | awk '/libcublas\.so\.13/ {print $NF; exit}')
[ -z "$cublas" ] && cublas=$(find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$dir/lib:${cublas%/*}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
status=0
for t in "$dir"/bin/cuda_*test; do
  echo "== $t"
  "$t" --report_level=short || status=1
done
echo "== implicit-bench --device cuda"
"$dir"/bin/implicit-bench --device cuda --data data --json "$out/device-bench.json" --threads "$(nproc)" || status=1
exit $status
