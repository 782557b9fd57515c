// What the GPU backend's kernels share (internal; for .cu files only): warp
// and block reductions, the batch column of a listed entry, and the launch
// sizes of one-warp-per-column and grid-stride element-wise kernels.
#pragma once

namespace implicit {
namespace cuda {
namespace internal {

constexpr int kWarp = 32;
constexpr int kThreads = 256;  // threads per block of every kernel

__device__ inline double WarpSum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}
__device__ inline double WarpMax(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmax(v, __shfl_down_sync(0xffffffffu, v, offset));
  return v;
}

// The sum of v over the block, returned to every thread. `shared` holds at
// least blockDim.x / 32 doubles; the call synchronises the block.
__device__ inline double BlockSum(double v, double* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = WarpSum(v);
  __syncthreads();  // earlier readers of `shared` are done
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double total = 0;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  for (int w = 0; w < warps; ++w) total += shared[w];
  return total;
}

// The batch column of entry j of a column list (null: 0, 1, ...).
__device__ inline long long Column(const int* columns, long long j) { return columns == nullptr ? j : columns[j]; }

// Threads of a block that reduces one column of `rows` entries: whole warps,
// at most kThreads (short columns leave no idle warps).
inline int ColumnThreads(int rows) {
  const int warps = (rows + kWarp - 1) / kWarp;
  return warps < 1 ? kWarp : (warps * kWarp < kThreads ? warps * kWarp : kThreads);
}

// Blocks of kThreads for one warp per column, and for a grid-stride loop
// over `total` elements (capped: the loop covers the rest).
inline int WarpBlocks(long long count) { return static_cast<int>((count * kWarp + kThreads - 1) / kThreads); }
inline int ElementBlocks(long long total) {
  const long long blocks = (total + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < (1LL << 20) ? (blocks > 0 ? blocks : 1) : (1LL << 20));
}

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
