// The Energy Transformer's kernels (energy_transformer_kernels.h).
#include "energy_transformer_kernels.h"

#include <implicit/core/cuda_kernel_support.cuh>
#include <implicit/core/cuda_kernels.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace implicit {
namespace cuda {
namespace internal {
namespace {

// One warp per token.
template <typename S>
__global__ void LayerNormKernel(const S* x, int D, int T, S gamma, S delta, S eps, S* xhat, S* s, S* g) {
  const long long t = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (t >= T) return;
  const S* xt = x + t * D;
  double sum = 0;
  for (int i = lane; i < D; i += kWarp) sum += double(xt[i]);
  const double mean = __shfl_sync(0xffffffffu, WarpSum(sum), 0) / D;
  double sq = 0;
  for (int i = lane; i < D; i += kWarp) sq += (double(xt[i]) - mean) * (double(xt[i]) - mean);
  const double st = sqrt(__shfl_sync(0xffffffffu, WarpSum(sq), 0) / D + double(eps));
  for (int i = lane; i < D; i += kWarp) {
    const double h = (double(xt[i]) - mean) / st;
    xhat[t * D + i] = static_cast<S>(h);
    g[t * D + i] = static_cast<S>(double(gamma) * h + double(delta));
  }
  if (lane == 0) s[t] = static_cast<S>(st);
}

// Softmax of column c (N entries) by one warp, in place, entry c excluded
// when asked (set to 0); lane 0 writes its log-sum-exp to *lse.
template <typename S>
__device__ void WarpSoftmaxColumn(S* col, int N, int c, bool exclude_self, S* lse) {
  const int lane = threadIdx.x % kWarp;
  double m = -INFINITY;
  for (int i = lane; i < N; i += kWarp)
    if (!(exclude_self && i == c)) m = fmax(m, double(col[i]));
  m = __shfl_sync(0xffffffffu, WarpMax(m), 0);
  double sum = 0;
  for (int i = lane; i < N; i += kWarp)
    if (!(exclude_self && i == c)) sum += exp(double(col[i]) - m);
  sum = __shfl_sync(0xffffffffu, WarpSum(sum), 0);
  for (int i = lane; i < N; i += kWarp)
    col[i] = (exclude_self && i == c) ? S(0) : static_cast<S>(exp(double(col[i]) - m) / sum);
  if (lane == 0) *lse = static_cast<S>(m + log(sum));
}

// One warp per column of an N x N block; row == column excluded when asked.
template <typename S>
__global__ void AttentionSoftmaxKernel(S* scores, int N, long long columns, bool exclude_self, S* lse) {
  const long long j = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / kWarp;
  if (j >= columns) return;
  WarpSoftmaxColumn(scores + j * N, N, static_cast<int>(j % N), exclude_self, lse + j);
}

// ---- fused attention: one (head, sample) pair per block ----

constexpr int kPairThreads = 128;
constexpr int kPairSharedBytes = 48 * 1024;  // without the opt-in to more

// dst(y, i) = src(hY + y, sN + i) (a Y x N head block of a HY x T matrix), and back.
template <typename S>
__device__ void LoadHeadBlock(const S* src, int N, int Y, int HY, int h, long long s, S* dst) {
  for (int e = threadIdx.x; e < Y * N; e += blockDim.x) dst[e] = src[(s * N + e / Y) * HY + h * Y + e % Y];
}
template <typename S>
__device__ void StoreHeadBlock(const S* src, int N, int Y, int HY, int h, long long s, S* dst) {
  for (int e = threadIdx.x; e < Y * N; e += blockDim.x) dst[(s * N + e / Y) * HY + h * Y + e % Y] = src[e];
}

template <typename S>
__global__ void AttentionForwardKernel(const S* k, const S* q, int N, int Y, int HY, int count, S beta,
                                       bool exclude_self, S* p, S* lse, S* qpt, S* kp) {
  extern __shared__ unsigned char shared_bytes[];
  S* K = reinterpret_cast<S*>(shared_bytes);
  S* Q = K + Y * N;
  S* P = Q + Y * N;
  const int pair = blockIdx.x, h = pair / count;
  const long long s = pair % count;
  LoadHeadBlock(k, N, Y, HY, h, s, K);
  LoadHeadBlock(q, N, Y, HY, h, s, Q);
  __syncthreads();
  for (int e = threadIdx.x; e < N * N; e += blockDim.x) {
    const int b = e % N, c = e / N;
    S v = 0;
    for (int y = 0; y < Y; ++y) v += K[b * Y + y] * Q[c * Y + y];
    P[e] = beta * v;
  }
  __syncthreads();
  for (int c = threadIdx.x / kWarp; c < N; c += blockDim.x / kWarp) {  // a warp per column
    WarpSoftmaxColumn(P + c * N, N, c, exclude_self, lse + static_cast<long long>(pair) * N + c);
  }
  __syncthreads();
  S* pg = p + static_cast<long long>(pair) * N * N;
  for (int e = threadIdx.x; e < N * N; e += blockDim.x) pg[e] = P[e];
  for (int e = threadIdx.x; e < Y * N; e += blockDim.x) {
    const int y = e % Y, i = e / Y;
    S a = 0, b = 0;
    for (int j = 0; j < N; ++j) {
      a += Q[j * Y + y] * P[i + j * N];  // (Q P^T)(y, i)
      b += K[j * Y + y] * P[j + i * N];  // (K P)(y, i)
    }
    const long long at = (s * N + i) * HY + h * Y + y;
    qpt[at] = a;
    kp[at] = b;
  }
}

template <typename S>
__global__ void AttentionHvpKernel(const S* k, const S* q, const S* dk, const S* dq, const S* p, int N, int Y, int HY,
                                   int count, S beta, S* ks, S* qs) {
  extern __shared__ unsigned char shared_bytes[];
  S* K = reinterpret_cast<S*>(shared_bytes);
  S* Q = K + Y * N;
  S* dK = Q + Y * N;
  S* dQ = dK + Y * N;
  S* P = dQ + Y * N;
  S* dP = P + N * N;
  const int pair = blockIdx.x, h = pair / count;
  const long long s = pair % count;
  LoadHeadBlock(k, N, Y, HY, h, s, K);
  LoadHeadBlock(q, N, Y, HY, h, s, Q);
  LoadHeadBlock(dk, N, Y, HY, h, s, dK);
  LoadHeadBlock(dq, N, Y, HY, h, s, dQ);
  const S* pg = p + static_cast<long long>(pair) * N * N;
  for (int e = threadIdx.x; e < N * N; e += blockDim.x) P[e] = pg[e];
  __syncthreads();
  for (int e = threadIdx.x; e < N * N; e += blockDim.x) {
    const int b = e % N, c = e / N;
    S v = 0;
    for (int y = 0; y < Y; ++y) v += dK[b * Y + y] * Q[c * Y + y] + K[b * Y + y] * dQ[c * Y + y];
    dP[e] = v;
  }
  __syncthreads();
  const int lane = threadIdx.x % kWarp;
  for (int c = threadIdx.x / kWarp; c < N; c += blockDim.x / kWarp) {  // dP = J_softmax(P) dA, a warp per column
    double dot = 0;
    for (int i = lane; i < N; i += kWarp) dot += double(P[c * N + i]) * double(dP[c * N + i]);
    const S d = static_cast<S>(__shfl_sync(0xffffffffu, WarpSum(dot), 0));
    for (int i = lane; i < N; i += kWarp) dP[c * N + i] = P[c * N + i] * (dP[c * N + i] - d);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < Y * N; e += blockDim.x) {
    const int y = e % Y, i = e / Y;
    S a = 0, b = 0;
    for (int j = 0; j < N; ++j) {
      a += dQ[j * Y + y] * P[i + j * N] + beta * Q[j * Y + y] * dP[i + j * N];  // ks(y, i)
      b += dK[j * Y + y] * P[j + i * N] + beta * K[j * Y + y] * dP[j + i * N];  // qs(y, i)
    }
    const long long at = (s * N + i) * HY + h * Y + y;
    ks[at] = a;
    qs[at] = b;
  }
}

std::size_t HvpSharedBytes(int N, int Y, int scalar_bytes) {
  return (4 * static_cast<std::size_t>(Y) * N + 2 * static_cast<std::size_t>(N) * N) * scalar_bytes;
}

template <typename S>
__global__ void ReluKernel(const S* scores, long long size, S* r) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < size;
       k += static_cast<long long>(gridDim.x) * blockDim.x)
    r[k] = scores[k] > S(0) ? scores[k] : S(0);
}

template <typename S>
__global__ void MergeKernel(const S* x, const S* mask, const S* values, int n, const int* columns, long long total,
                            S* y) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long j = k / n, i = k % n, at = Column(columns, j) * n + i;
    y[k] = mask[at] * x[k] + (S(1) - mask[at]) * values[at];
  }
}

template <typename S>
__global__ void UpdateKernel(const S* y, const S* dfdg, S step, const S* mask, const S* values, int n,
                             const int* columns, long long total, S* out) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<long long>(gridDim.x) * blockDim.x) {
    S v = y[k] - step * (y[k] + dfdg[k]);
    if (mask != nullptr) {
      const long long j = k / n, i = k % n, at = Column(columns, j) * n + i;
      v = mask[at] * v + (S(1) - mask[at]) * values[at];
    }
    out[k] = v;
  }
}

// One block per sample.
template <typename S>
__global__ void EnergyKernel(EtEnergyTerms e, const S* s, const S* lse_att, const S* r, const S* lse_mem, S* energy) {
  __shared__ double shared[kThreads / kWarp];
  const int b = blockIdx.x;
  double ln = 0, att = 0, mem = 0;
  for (int t = threadIdx.x; t < e.N; t += blockDim.x) ln += 1.0 / double(s[static_cast<long long>(b) * e.N + t]);
  for (int k = threadIdx.x; k < e.H * e.N; k += blockDim.x) {
    const int h = k / e.N, c = k % e.N;
    att += double(lse_att[(static_cast<long long>(h) * e.count + b) * e.N + c]);
  }
  if (e.M > 0) {
    if (e.relu_memory) {
      const S* rb = r + static_cast<long long>(b) * e.N * e.M;
      for (int k = threadIdx.x; k < e.N * e.M; k += blockDim.x) mem += double(rb[k]) * double(rb[k]);
      mem *= -0.5;
    } else {
      for (int t = threadIdx.x; t < e.N; t += blockDim.x) mem += double(lse_mem[static_cast<long long>(b) * e.N + t]);
      mem *= -1.0 / e.memory_beta;
    }
  }
  double v = -e.D * e.gamma * e.eps * ln - att / e.beta + mem;
  v = BlockSum(v, shared);
  if (threadIdx.x == 0) energy[b] = static_cast<S>(v);
}

// One warp per sample.
template <typename S>
__global__ void ClampPenaltyKernel(const S* x, const S* mask, const S* values, int n, const int* columns, int count,
                                   S* energy) {
  const long long j = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (j >= count) return;
  const long long base = Column(columns, j) * n;
  double sq = 0;
  for (int i = lane; i < n; i += kWarp) {
    const double d = (1.0 - double(mask[base + i])) * (double(x[j * n + i]) - double(values[base + i]));
    sq += d * d;
  }
  sq = WarpSum(sq);
  if (lane == 0) energy[j] = static_cast<S>(double(energy[j]) + 0.5 * sq);
}

// One warp per token.
template <typename S>
__global__ void LayerNormJacobianKernel(const S* xhat, const S* s, S gamma, const S* v, int D, int T, S* out) {
  const long long t = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (t >= T) return;
  double sum = 0, dot = 0;
  for (int i = lane; i < D; i += kWarp) {
    sum += double(v[t * D + i]);
    dot += double(xhat[t * D + i]) * double(v[t * D + i]);
  }
  const double mean = __shfl_sync(0xffffffffu, WarpSum(sum), 0) / D;
  const double c = __shfl_sync(0xffffffffu, WarpSum(dot), 0) / D;
  const double scale = double(gamma) / double(s[t]);
  for (int i = lane; i < D; i += kWarp)
    out[t * D + i] = static_cast<S>(scale * (double(v[t * D + i]) - mean - c * double(xhat[t * D + i])));
}

template <typename S>
__global__ void ReluDerivativeKernel(const S* r, long long size, S* ds) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < size;
       k += static_cast<long long>(gridDim.x) * blockDim.x)
    if (!(r[k] > S(0))) ds[k] = S(0);
}

template <typename S>
__global__ void MaskColumnsKernel(const S* u, const S* mask, int n, const int* columns, long long total, S* w) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long j = k / n, i = k % n;
    w[k] = mask[Column(columns, j) * n + i] * u[k];
  }
}

template <typename S>
__global__ void VjpCombineKernel(const S* w, const S* mh, S step, const S* mask, int n, const int* columns,
                                 const S* u, long long total, S* out) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<long long>(gridDim.x) * blockDim.x) {
    S v = w[k] - step * (mh[k] + w[k]);
    if (mask != nullptr) {
      const long long j = k / n, i = k % n;
      const S m = mask[Column(columns, j) * n + i];
      v = u != nullptr ? (S(1) - m) * (v + u[k]) : v * m;
    }
    out[k] = v;
  }
}

}  // namespace

bool EtFusedAttentionFits(int N, int Y, int scalar_bytes) {
  return HvpSharedBytes(N, Y, scalar_bytes) <= static_cast<std::size_t>(kPairSharedBytes);
}

template <typename S>
void EtAttentionForward(cudaStream_t stream, const S* k, const S* q, int N, int Y, int H, int count, S beta,
                        bool exclude_self, S* p, S* lse, S* qpt, S* kp) {
  if (H == 0 || count == 0) return;
  const std::size_t bytes = (2 * static_cast<std::size_t>(Y) * N + static_cast<std::size_t>(N) * N) * sizeof(S);
  AttentionForwardKernel<S><<<H * count, kPairThreads, bytes, stream>>>(k, q, N, Y, H * Y, count, beta, exclude_self,
                                                                        p, lse, qpt, kp);
  CheckLaunch("EtAttentionForward");
}

template <typename S>
void EtAttentionHvp(cudaStream_t stream, const S* k, const S* q, const S* dk, const S* dq, const S* p, int N, int Y,
                    int H, int count, S beta, S* ks, S* qs) {
  if (H == 0 || count == 0) return;
  AttentionHvpKernel<S><<<H * count, kPairThreads, HvpSharedBytes(N, Y, sizeof(S)), stream>>>(
      k, q, dk, dq, p, N, Y, H * Y, count, beta, ks, qs);
  CheckLaunch("EtAttentionHvp");
}

template <typename S>
void EtLayerNormJacobian(cudaStream_t stream, const S* xhat, const S* s, S gamma, const S* v, int D, int T, S* out) {
  if (T == 0) return;
  LayerNormJacobianKernel<S><<<WarpBlocks(T), kThreads, 0, stream>>>(xhat, s, gamma, v, D, T, out);
  CheckLaunch("EtLayerNormJacobian");
}

template <typename S>
void EtReluDerivative(cudaStream_t stream, const S* r, long long size, S* ds) {
  if (size == 0) return;
  ReluDerivativeKernel<S><<<ElementBlocks(size), kThreads, 0, stream>>>(r, size, ds);
  CheckLaunch("EtReluDerivative");
}

template <typename S>
void EtMaskColumns(cudaStream_t stream, const S* u, const S* mask, int n, const int* columns, int count, S* w) {
  const long long total = static_cast<long long>(n) * count;
  if (total == 0) return;
  MaskColumnsKernel<S><<<ElementBlocks(total), kThreads, 0, stream>>>(u, mask, n, columns, total, w);
  CheckLaunch("EtMaskColumns");
}

template <typename S>
void EtVjpCombine(cudaStream_t stream, const S* w, const S* mh, S step, const S* mask, int n, const int* columns,
                  int count, const S* u, S* out) {
  const long long total = static_cast<long long>(n) * count;
  if (total == 0) return;
  VjpCombineKernel<S><<<ElementBlocks(total), kThreads, 0, stream>>>(w, mh, step, mask, n, columns, u, total, out);
  CheckLaunch("EtVjpCombine");
}

template <typename S>
void EtClampPenalty(cudaStream_t stream, const S* x, const S* mask, const S* values, int n, const int* columns,
                    int count, S* energy) {
  if (count == 0) return;
  ClampPenaltyKernel<S><<<WarpBlocks(count), kThreads, 0, stream>>>(x, mask, values, n, columns, count, energy);
  CheckLaunch("EtClampPenalty");
}

template <typename S>
void EtLayerNorm(cudaStream_t stream, const S* x, int D, int T, S gamma, S delta, S eps, S* xhat, S* s, S* g) {
  if (T == 0) return;
  LayerNormKernel<S><<<WarpBlocks(T), kThreads, 0, stream>>>(x, D, T, gamma, delta, eps, xhat, s, g);
  CheckLaunch("EtLayerNorm");
}

template <typename S>
void EtAttentionSoftmax(cudaStream_t stream, S* scores, int N, int blocks, bool exclude_self, S* lse) {
  const long long columns = static_cast<long long>(N) * blocks;
  if (columns == 0) return;
  AttentionSoftmaxKernel<S><<<WarpBlocks(columns), kThreads, 0, stream>>>(scores, N, columns, exclude_self, lse);
  CheckLaunch("EtAttentionSoftmax");
}

template <typename S>
void EtRelu(cudaStream_t stream, const S* scores, long long size, S* r) {
  if (size == 0) return;
  ReluKernel<S><<<ElementBlocks(size), kThreads, 0, stream>>>(scores, size, r);
  CheckLaunch("EtRelu");
}

template <typename S>
void EtMerge(cudaStream_t stream, const S* x, const S* mask, const S* values, int n, const int* columns, int count,
             S* y) {
  const long long total = static_cast<long long>(n) * count;
  if (total == 0) return;
  MergeKernel<S><<<ElementBlocks(total), kThreads, 0, stream>>>(x, mask, values, n, columns, total, y);
  CheckLaunch("EtMerge");
}

template <typename S>
void EtUpdate(cudaStream_t stream, const S* y, const S* dfdg, S step, const S* mask, const S* values, int n,
              const int* columns, int count, S* out) {
  const long long total = static_cast<long long>(n) * count;
  if (total == 0) return;
  UpdateKernel<S><<<ElementBlocks(total), kThreads, 0, stream>>>(y, dfdg, step, mask, values, n, columns, total, out);
  CheckLaunch("EtUpdate");
}

template <typename S>
void EtEnergy(cudaStream_t stream, const EtEnergyTerms& terms, const S* s, const S* lse_att, const S* r,
              const S* lse_mem, S* energy) {
  if (terms.count == 0) return;
  EnergyKernel<S><<<terms.count, kThreads, 0, stream>>>(terms, s, lse_att, r, lse_mem, energy);
  CheckLaunch("EtEnergy");
}

#define IMPLICIT_ET_KERNELS(S)                                                                               \
  template void EtLayerNorm<S>(cudaStream_t, const S*, int, int, S, S, S, S*, S*, S*);                       \
  template void EtAttentionForward<S>(cudaStream_t, const S*, const S*, int, int, int, int, S, bool, S*, S*, S*,  \
                                      S*);                                                                     \
  template void EtAttentionHvp<S>(cudaStream_t, const S*, const S*, const S*, const S*, const S*, int, int, int,  \
                                  int, S, S*, S*);                                                             \
  template void EtAttentionSoftmax<S>(cudaStream_t, S*, int, int, bool, S*);                                 \
  template void EtRelu<S>(cudaStream_t, const S*, long long, S*);                                            \
  template void EtMerge<S>(cudaStream_t, const S*, const S*, const S*, int, const int*, int, S*);            \
  template void EtUpdate<S>(cudaStream_t, const S*, const S*, S, const S*, const S*, int, const int*, int, S*); \
  template void EtEnergy<S>(cudaStream_t, const EtEnergyTerms&, const S*, const S*, const S*, const S*, S*); \
  template void EtClampPenalty<S>(cudaStream_t, const S*, const S*, const S*, int, const int*, int, S*); \
  template void EtLayerNormJacobian<S>(cudaStream_t, const S*, const S*, S, const S*, int, int, S*);       \
  template void EtReluDerivative<S>(cudaStream_t, const S*, long long, S*);                                \
  template void EtMaskColumns<S>(cudaStream_t, const S*, const S*, int, const int*, int, S*);              \
  template void EtVjpCombine<S>(cudaStream_t, const S*, const S*, S, const S*, int, const int*, int, const S*, \
                                  S*);
IMPLICIT_ET_KERNELS(float)
IMPLICIT_ET_KERNELS(double)
#undef IMPLICIT_ET_KERNELS

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
