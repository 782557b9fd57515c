// The GPU backend's kernels and their launchers (cuda_kernels.h).
#include <implicit/core/cuda_kernel_support.cuh>
#include <implicit/core/cuda_kernels.h>

#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace implicit {
namespace cuda {
namespace internal {
namespace {

// Online (max, sum of exp(x - max)) pairs, merged.
template <typename S>
__device__ inline void MergeMaxSum(S& m, S& s, S m2, S s2) {
  if (m2 == S(-INFINITY)) return;
  if (m == S(-INFINITY)) {
    m = m2;
    s = s2;
    return;
  }
  if (m2 > m) {
    s = s * exp(m - m2) + s2;
    m = m2;
  } else {
    s = s + s2 * exp(m2 - m);
  }
}

template <typename S>
__global__ void SoftmaxColumnsKernel(S* scores, int rows, S beta, S* lse) {
  __shared__ S shared_m[kThreads / kWarp], shared_s[kThreads / kWarp];
  S* col = scores + static_cast<size_t>(blockIdx.x) * rows;
  S m = S(-INFINITY), s = 0;
  bool nan = false;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    const S v = beta * col[i];
    if (v != v) nan = true;
    MergeMaxSum(m, s, v, S(1));
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const S m2 = __shfl_down_sync(0xffffffffu, m, offset);
    const S s2 = __shfl_down_sync(0xffffffffu, s, offset);
    MergeMaxSum(m, s, m2, s2);
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) {
    shared_m[warp] = m;
    shared_s[warp] = s;
  }
  const bool any_nan = __syncthreads_or(nan);
  m = S(-INFINITY);
  s = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / kWarp); ++w) MergeMaxSum(m, s, shared_m[w], shared_s[w]);
  if (any_nan) m = s = S(NAN);  // a NaN score makes the whole column NaN
  for (int i = threadIdx.x; i < rows; i += blockDim.x) col[i] = exp(beta * col[i] - m) / s;
  if (lse != nullptr && threadIdx.x == 0) lse[blockIdx.x] = m + log(s);
}

// Sparsemax of beta * scores per column, in place, by Michelot's projection:
// with shifted scores z = beta s - max, tau starts at (sum z - 1) / N and is
// recomputed as (sum_{z_i > tau} z_i - 1) / |{z_i > tau}| until the support
// stops changing (tau rises monotonically to the exact threshold). conj[j]
// (when not null) = Omega*_2(beta s_j) = <p, z> - (|p|^2 - 1) / 2 + max.
template <typename S>
__global__ void SparsemaxColumnsKernel(S* scores, int rows, S beta, S* conj) {
  __shared__ double shared[kThreads / kWarp];
  __shared__ double shared2[kThreads / kWarp];
  S* col = scores + static_cast<size_t>(blockIdx.x) * rows;
  double m = -INFINITY;
  bool nan = false;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    const double v = double(beta) * double(col[i]);
    if (v != v) nan = true;
    m = fmax(m, v);
  }
  m = WarpMax(m);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) shared[warp] = m;
  const bool any_nan = __syncthreads_or(nan);
  m = -INFINITY;
  for (int w = 0; w < static_cast<int>(blockDim.x / kWarp); ++w) m = fmax(m, shared[w]);
  if (any_nan) {
    for (int i = threadIdx.x; i < rows; i += blockDim.x) col[i] = S(NAN);
    if (conj != nullptr && threadIdx.x == 0) conj[blockIdx.x] = S(NAN);
    return;
  }
  double total = 0;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) total += double(beta) * double(col[i]) - m;
  total = BlockSum(total, shared);
  double tau = (total - 1.0) / rows;
  double previous_support = -1;
  for (int iteration = 0; iteration < rows + 1; ++iteration) {
    double k = 0, sum = 0;
    for (int i = threadIdx.x; i < rows; i += blockDim.x) {
      const double z = double(beta) * double(col[i]) - m;
      if (z > tau) {
        k += 1;
        sum += z;
      }
    }
    k = BlockSum(k, shared);
    sum = BlockSum(sum, shared2);
    tau = (sum - 1.0) / k;  // k >= 1: the largest z = 0 > tau always
    if (k == previous_support) break;
    previous_support = k;
  }
  double pz = 0, pp = 0;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    const double z = double(beta) * double(col[i]) - m;
    const double p = z > tau ? z - tau : 0.0;
    pz += p * z;
    pp += p * p;
    col[i] = static_cast<S>(p);
  }
  pz = BlockSum(pz, shared);
  pp = BlockSum(pp, shared2);
  if (conj != nullptr && threadIdx.x == 0) conj[blockIdx.x] = static_cast<S>(pz - 0.5 * (pp - 1.0) + m);
}

// w = J s for sparsemax's Jacobian J = diag(1_S) - 1_S 1_S^T / |S| (S = the
// support, p > 0): w_i = s_i - mean_S(s) on the support, 0 off it.
template <typename S>
__global__ void SparsemaxJacobianTransposeKernel(const S* p, S* s, int rows) {
  __shared__ double shared[kThreads / kWarp];
  __shared__ double shared2[kThreads / kWarp];
  const S* pc = p + static_cast<size_t>(blockIdx.x) * rows;
  S* sc = s + static_cast<size_t>(blockIdx.x) * rows;
  double k = 0, sum = 0;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    if (pc[i] > S(0)) {
      k += 1;
      sum += double(sc[i]);
    }
  }
  k = BlockSum(k, shared);
  sum = BlockSum(sum, shared2);
  const double mean = k > 0 ? sum / k : 0.0;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) sc[i] = pc[i] > S(0) ? static_cast<S>(double(sc[i]) - mean) : S(0);
}

template <typename S>
__global__ void HopfieldEnergyKernel(const S* z, int n, int count, const S* lse, S beta, S* energy) {
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) / kWarp, lane = threadIdx.x % kWarp;
  if (j >= count) return;
  const S* zj = z + static_cast<size_t>(j) * n;
  double sq = 0;
  for (int i = lane; i < n; i += kWarp) sq += double(zj[i]) * double(zj[i]);
  sq = WarpSum(sq);
  if (lane == 0) energy[j] = static_cast<S>(0.5 * sq - double(lse[j]) / double(beta));
}

template <typename S>
__global__ void SoftmaxJacobianTransposeKernel(const S* p, S* s, int rows) {
  __shared__ double shared[kThreads / kWarp];
  const S* pc = p + static_cast<size_t>(blockIdx.x) * rows;
  S* sc = s + static_cast<size_t>(blockIdx.x) * rows;
  double dot = 0;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) dot += double(pc[i]) * double(sc[i]);
  dot = BlockSum(dot, shared);
  const S d = static_cast<S>(dot);
  for (int i = threadIdx.x; i < rows; i += blockDim.x) sc[i] = pc[i] * (sc[i] - d);
}

template <typename S>
__global__ void SubtractColumnsKernel(const S* a, const S* c, int n, const int* columns, long long total, S* out) {
  for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long at = Column(columns, e / n) * n + e % n;
    out[at] = a[at] - c[at];
  }
}

template <typename S>
__global__ void GatherKernel(const S* full, int n, const int* columns, long long total, S* compact) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long j = k / n, i = k % n;
    compact[k] = full[static_cast<long long>(Column(columns, static_cast<int>(j))) * n + i];
  }
}

template <typename S>
__global__ void ScatterKernel(const S* compact, int n, const int* columns, long long total, S* full) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long j = k / n, i = k % n;
    full[static_cast<long long>(Column(columns, static_cast<int>(j))) * n + i] = compact[k];
  }
}

template <typename S>
__global__ void CopyColumnsKernel(const S* src, int n, const int* columns, long long total, S* dst) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long j = k / n, i = k % n;
    const long long at = static_cast<long long>(Column(columns, static_cast<int>(j))) * n + i;
    dst[at] = src[at];
  }
}

template <typename S>
__global__ void ResidualScalarsKernel(const S* z, const S* f, const S* energy, int n, const int* columns,
                                      int count, double* out) {
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) / kWarp, lane = threadIdx.x % kWarp;
  if (j >= count) return;
  const long long base = static_cast<long long>(Column(columns, j)) * n;
  double r = 0, fn = 0;
  int finite = 1;
  for (int i = lane; i < n; i += kWarp) {
    const double zi = z[base + i], fi = f[base + i];
    r += (fi - zi) * (fi - zi);
    fn += fi * fi;
    if (!isfinite(zi) || !isfinite(fi)) finite = 0;
  }
  r = WarpSum(r);
  fn = WarpSum(fn);
  finite = __all_sync(0xffffffffu, finite);
  if (lane == 0) {
    out[4 * j] = sqrt(r);
    out[4 * j + 1] = sqrt(fn);
    out[4 * j + 2] = finite ? 1.0 : 0.0;
    out[4 * j + 3] = energy != nullptr ? double(energy[Column(columns, j)]) : 0.0;
  }
}

template <typename S>
__global__ void ColumnDotsKernel(const S* a, const S* b, int n, int count, double* out) {
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) / kWarp, lane = threadIdx.x % kWarp;
  if (j >= count) return;
  const long long base = static_cast<long long>(j) * n;
  double d = 0;
  for (int i = lane; i < n; i += kWarp) d += double(a[base + i]) * double(b[base + i]);
  d = WarpSum(d);
  if (lane == 0) out[j] = d;
}

template <typename S>
__global__ void AddColumnsKernel(S* out, const S* g, int n, const int* columns, long long total) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long j = k / n, i = k % n;
    out[k] += g[static_cast<long long>(Column(columns, static_cast<int>(j))) * n + i];
  }
}

template <typename S>
__global__ void FillKernel(S* data, long long n, S value) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<long long>(gridDim.x) * blockDim.x)
    data[k] = value;
}

}  // namespace

void CheckLaunch(const char* what) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw std::runtime_error(std::string("CUDA launch of ") + what + ": " + cudaGetErrorString(status));
}

void CheckCall(int status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " +
                             cudaGetErrorString(static_cast<cudaError_t>(status)));
  }
}

template <typename S>
void SoftmaxColumns(cudaStream_t stream, S* scores, int rows, int count, S beta, S* lse) {
  if (count == 0) return;
  SoftmaxColumnsKernel<S><<<count, ColumnThreads(rows), 0, stream>>>(scores, rows, beta, lse);
  CheckLaunch("SoftmaxColumns");
}

template <typename S>
void SparsemaxColumns(cudaStream_t stream, S* scores, int rows, int count, S beta, S* conj) {
  if (count == 0) return;
  SparsemaxColumnsKernel<S><<<count, kThreads, 0, stream>>>(scores, rows, beta, conj);
  CheckLaunch("SparsemaxColumns");
}

template <typename S>
void SparsemaxJacobianTranspose(cudaStream_t stream, const S* p, S* s, int rows, int count) {
  if (count == 0) return;
  SparsemaxJacobianTransposeKernel<S><<<count, kThreads, 0, stream>>>(p, s, rows);
  CheckLaunch("SparsemaxJacobianTranspose");
}

template <typename S>
void HopfieldEnergy(cudaStream_t stream, const S* z, int n, int count, const S* lse, S beta, S* energy) {
  if (count == 0) return;
  HopfieldEnergyKernel<S><<<WarpBlocks(count), kThreads, 0, stream>>>(z, n, count, lse, beta, energy);
  CheckLaunch("HopfieldEnergy");
}

template <typename S>
void SoftmaxJacobianTranspose(cudaStream_t stream, const S* p, S* s, int rows, int count) {
  if (count == 0) return;
  SoftmaxJacobianTransposeKernel<S><<<count, ColumnThreads(rows), 0, stream>>>(p, s, rows);
  CheckLaunch("SoftmaxJacobianTranspose");
}

template <typename S>
void SubtractColumns(cudaStream_t stream, const S* a, const S* c, int n, const int* columns, int count, S* out) {
  const long long total = static_cast<long long>(n) * count;
  if (total == 0) return;
  SubtractColumnsKernel<S><<<ElementBlocks(total), kThreads, 0, stream>>>(a, c, n, columns, total, out);
  CheckLaunch("SubtractColumns");
}

template <typename S>
void GatherColumns(cudaStream_t stream, const S* full, int n, const int* columns, int count, S* compact) {
  const long long total = static_cast<long long>(n) * count;
  if (total == 0) return;
  GatherKernel<S><<<ElementBlocks(total), kThreads, 0, stream>>>(full, n, columns, total, compact);
  CheckLaunch("GatherColumns");
}

template <typename S>
void ScatterColumns(cudaStream_t stream, const S* compact, int n, const int* columns, int count, S* full) {
  const long long total = static_cast<long long>(n) * count;
  if (total == 0) return;
  ScatterKernel<S><<<ElementBlocks(total), kThreads, 0, stream>>>(compact, n, columns, total, full);
  CheckLaunch("ScatterColumns");
}

template <typename S>
void CopyColumns(cudaStream_t stream, const S* src, int n, const int* columns, int count, S* dst) {
  const long long total = static_cast<long long>(n) * count;
  if (total == 0) return;
  CopyColumnsKernel<S><<<ElementBlocks(total), kThreads, 0, stream>>>(src, n, columns, total, dst);
  CheckLaunch("CopyColumns");
}

template <typename S>
void ResidualScalars(cudaStream_t stream, const S* z, const S* f, const S* energy, int n, const int* columns,
                     int count, double* out) {
  if (count == 0) return;
  ResidualScalarsKernel<S><<<WarpBlocks(count), kThreads, 0, stream>>>(z, f, energy, n, columns, count,
                                                                               out);
  CheckLaunch("ResidualScalars");
}

template <typename S>
void ColumnDots(cudaStream_t stream, const S* a, const S* b, int n, int count, double* out) {
  if (count == 0) return;
  ColumnDotsKernel<S><<<WarpBlocks(count), kThreads, 0, stream>>>(a, b, n, count, out);
  CheckLaunch("ColumnDots");
}

template <typename S>
void AddColumns(cudaStream_t stream, S* out, const S* g, int n, const int* columns, int count) {
  const long long total = static_cast<long long>(n) * count;
  if (total == 0) return;
  AddColumnsKernel<S><<<ElementBlocks(total), kThreads, 0, stream>>>(out, g, n, columns, total);
  CheckLaunch("AddColumns");
}

template <typename S>
void Fill(cudaStream_t stream, S* data, long long n, S value) {
  if (n == 0) return;
  FillKernel<S><<<ElementBlocks(n), kThreads, 0, stream>>>(data, n, value);
  CheckLaunch("Fill");
}

#define IMPLICIT_CUDA_KERNELS(S)                                                                       \
  template void SoftmaxColumns<S>(cudaStream_t, S*, int, int, S, S*);                                  \
  template void HopfieldEnergy<S>(cudaStream_t, const S*, int, int, const S*, S, S*);                  \
  template void SoftmaxJacobianTranspose<S>(cudaStream_t, const S*, S*, int, int);                     \
  template void SparsemaxColumns<S>(cudaStream_t, S*, int, int, S, S*);                                \
  template void SparsemaxJacobianTranspose<S>(cudaStream_t, const S*, S*, int, int);                   \
  template void GatherColumns<S>(cudaStream_t, const S*, int, const int*, int, S*);                    \
  template void ScatterColumns<S>(cudaStream_t, const S*, int, const int*, int, S*);                   \
  template void CopyColumns<S>(cudaStream_t, const S*, int, const int*, int, S*);                      \
  template void ResidualScalars<S>(cudaStream_t, const S*, const S*, const S*, int, const int*, int,   \
                                   double*);                                                           \
  template void ColumnDots<S>(cudaStream_t, const S*, const S*, int, int, double*);                    \
  template void AddColumns<S>(cudaStream_t, S*, const S*, int, const int*, int);                       \
  template void SubtractColumns<S>(cudaStream_t, const S*, const S*, int, const int*, int, S*);        \
  template void Fill<S>(cudaStream_t, S*, long long, S);
IMPLICIT_CUDA_KERNELS(float)
IMPLICIT_CUDA_KERNELS(double)
#undef IMPLICIT_CUDA_KERNELS

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
