#!/usr/bin/env bash
# The GPU checks of issue 20, for a GPU machine without the build
# dependencies: runs the CUDA tests and implicit-et's GPU test (then, when it is
# installed, under compute-sanitizer: memcheck, and racecheck and synccheck for
# the fused Picard loops), `implicit-compare --device cuda`, `implicit-bench
# --device cuda` (hopfield-digits and retrieval; float GEMMs in FP32 and in
# TF32; the Energy Transformer), implicit-et training on the GPU and on every
# CPU core, and `implicit-hopfield retrieval --device cuda` from
# binaries built elsewhere (scripts/device-pack.sh puts them, with the shared
# libraries they need apart from glibc, libstdc++ and CUDA's, into DIR).
#   scripts/device-check.sh DIR [OUTDIR]
#   TESTS_ONLY=1 scripts/device-check.sh DIR      # the CUDA tests alone
#   BENCH_ARGS="--device-problems et" scripts/device-check.sh DIR OUTDIR
#                                                 # the tests, then this bench alone
#   SANITIZERS_ONLY=1 scripts/device-check.sh DIR  # compute-sanitizer alone (RACECHECK_TESTS below)
set -u
dir=${1:?usage: scripts/device-check.sh DIR [OUTDIR]}
out=${2:-.}
mkdir -p "$out"  # (the benches write their JSON there)
# The pack travels as DIR.tar.xz (scripts/device-pack.sh): unpack it once.
if [ ! -d "$dir" ] && [ -f "$dir.tar.xz" ]; then tar -xJf "$dir.tar.xz" -C "$(dirname "$dir")"; fi
cublas=$(ldconfig -p | awk '/libcublas\.so\.13/ {print $NF; exit}')
[ -z "$cublas" ] && cublas=$(find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$dir/lib:${cublas%/*}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
status=0
sanitize() {
  if ! command -v compute-sanitizer >/dev/null; then
    echo "compute-sanitizer is not installed: no memcheck, racecheck or synccheck"
    return
  fi
  echo "== compute-sanitizer --tool memcheck cuda_device_backend_test"
  # (the memory-growth case measures cudaMemGetInfo, which the tool's own
  # allocations disturb: it runs in the plain pass above)
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$dir"/bin/cuda_device_backend_test \
    --report_level=short --run_test='!device_memory_does_not_grow_over_training_steps' || status=1
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$dir"/bin/cuda_device_energy_transformer_test \
    --report_level=short || status=1
  # The fused Picard kernels' shared-memory exchanges between lanes and warps
  # (and, in the cluster kernel, between the blocks of a cluster).
  # RACECHECK_TESTS: the test cases to run under both tools (by default the
  # small solve through each fused kernel: racecheck takes minutes over the
  # large fused-loop cases).
  races=${RACECHECK_TESTS:-a_small_fused_solve_for_the_sanitizers}
  echo "== compute-sanitizer --tool racecheck, --tool synccheck: $races"
  for tool in racecheck synccheck; do
    timeout 300 compute-sanitizer --tool $tool --error-exitcode 3 "$dir"/bin/cuda_device_backend_test \
      --report_level=short --run_test="$races" || status=1
  done
}
if [ -n "${SANITIZERS_ONLY:-}" ]; then
  sanitize
  exit $status
fi
for t in "$dir"/bin/cuda_*test; do
  case "$t" in *_emulated_test) continue ;; esac  # (CPU emulations of kernels: CI runs them, no GPU time)
  echo "== $t"
  timeout "${TEST_TIMEOUT:-300}" "$t" --report_level=short || status=1  # (a hung kernel must not eat the device time)
done
# implicit-et --device cuda against the CPU (apps_et_test's GPU case), with
# implicit-et and the digits where the test was built to find them.
build_dir=$(cat "$dir/build_dir") source_dir=$(cat "$dir/source_dir")
mkdir -p "$build_dir/apps" "$source_dir/data"
cp "$dir/bin/implicit-et" "$build_dir/apps/"
[ -e "$source_dir/data/digits.csv.gz" ] || cp data/digits.csv.gz "$source_dir/data/"
echo "== apps_et_test device_cuda_trains_like_the_cpu"
timeout "${TEST_TIMEOUT:-300}" "$dir"/bin/apps_et_test --report_level=short --run_test=device_cuda_trains_like_the_cpu || status=1
[ -n "${TESTS_ONLY:-}" ] && exit $status
echo "== implicit-compare --device cuda"
timeout 120 "$dir"/bin/implicit-compare --device cuda --problem hopfield-digits,sparse-hopfield --alpha 2 --beta 2 \
  --patterns 1797 --solvers picard,anderson,broyden --data data --quiet || status=1
[ -n "${COMPARE_ONLY:-}" ] && exit $status
if [ -n "${BENCH_ARGS:-}" ]; then
  # shellcheck disable=SC2086
  timeout "${TEST_TIMEOUT:-300}" "$dir"/bin/implicit-bench --device cuda $BENCH_ARGS --data data --json "$out/device-bench.json" \
    --threads "$(nproc)" || status=1
  exit $status
fi
# The README's GPU figures, each written to OUTDIR as it completes.
threads=$(nproc)
echo "== implicit-bench --device cuda --device-problems hopfield-digits,retrieval"
timeout 300 "$dir"/bin/implicit-bench --device cuda --device-problems hopfield-digits,retrieval --data data \
  --json "$out/device-bench.json" --threads "$threads" || status=1
echo "== implicit-bench --device cuda --device-problems retrieval --tf32"
timeout 120 "$dir"/bin/implicit-bench --device cuda --device-problems retrieval --tf32 --data data \
  --json "$out/device-bench-tf32.json" || status=1
echo "== implicit-bench --device cuda --device-problems et (at most 100 iterations)"
timeout 300 "$dir"/bin/implicit-bench --device cuda --device-problems et --solvers picard,anderson --max-iter 100 \
  --data data --json "$out/device-bench-et.json" --threads "$threads" || status=1
for where in "--device cuda" "--threads $threads"; do
  echo "== implicit-et --batch 1024 --holdout 297 --solver anderson --steps 20 $where"
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 timeout 300 "$dir"/bin/implicit-et --batch 1024 --holdout 297 --solver anderson --steps 20 \
    $where --data data --checkpoint /tmp/implicit-et.ckpt --image /tmp/implicit-et.png || status=1
done
echo "== implicit-hopfield retrieval --device cuda"
timeout 120 "$dir"/bin/implicit-hopfield retrieval --patterns 1797 --beta 2 --solver anderson --device cuda --data data \
  || status=1
sanitize
exit $status
