// The device GMRES's kernels and their launchers (krylov_kernels.h).
#include "krylov_kernels.h"

#include <implicit/core/cuda_kernel_support.cuh>

#include <cuda_runtime.h>

namespace implicit {
namespace cuda {
namespace internal {

namespace {

template <typename S>
__global__ void BasisDotsKernel(const S* V, long long stride, int k, const S* w, int n, const int* columns,
                                double* out) {
  __shared__ double shared[kThreads / kWarp];
  const int j = blockIdx.x;
  const long long b = Column(columns, j);
  const S* wb = w + b * n;
  for (int i = 0; i < k; ++i) {
    const S* vb = V + i * stride + b * n;
    double dot = 0;
    for (int r = threadIdx.x; r < n; r += blockDim.x) dot += double(vb[r]) * double(wb[r]);
    dot = BlockSum(dot, shared);
    if (threadIdx.x == 0) out[static_cast<long long>(j) * k + i] = dot;
  }
}

template <typename S>
__global__ void BasisCombineKernel(const S* V, long long stride, int k, const double* coef, int n,
                                   const int* columns, long long total, bool accumulate, S* out) {
  for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long j = e / n, at = Column(columns, j) * n + e % n;
    double v = accumulate ? double(out[at]) : 0.0;
    for (int i = 0; i < k; ++i) v += coef[j * k + i] * double(V[i * stride + at]);
    out[at] = static_cast<S>(v);
  }
}

}  // namespace

template <typename S>
void BasisDots(cudaStream_t stream, const S* V, long long stride, int k, const S* w, int n, const int* columns,
               int count, double* out) {
  if (count == 0 || k == 0) return;
  BasisDotsKernel<S><<<count, ColumnThreads(n), 0, stream>>>(V, stride, k, w, n, columns, out);
  CheckLaunch("BasisDots");
}

template <typename S>
void BasisCombine(cudaStream_t stream, const S* V, long long stride, int k, const double* coef, int n,
                  const int* columns, int count, bool accumulate, S* out) {
  const long long total = static_cast<long long>(n) * count;
  if (total == 0) return;
  BasisCombineKernel<S><<<ElementBlocks(total), kThreads, 0, stream>>>(V, stride, k, coef, n, columns, total,
                                                                       accumulate, out);
  CheckLaunch("BasisCombine");
}

#define IMPLICIT_KRYLOV_KERNELS(S)                                                                            \
  template void BasisDots<S>(cudaStream_t, const S*, long long, int, const S*, int, const int*, int, double*); \
  template void BasisCombine<S>(cudaStream_t, const S*, long long, int, const double*, int, const int*, int, bool, \
                                S*);
IMPLICIT_KRYLOV_KERNELS(float)
IMPLICIT_KRYLOV_KERNELS(double)
#undef IMPLICIT_KRYLOV_KERNELS

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
