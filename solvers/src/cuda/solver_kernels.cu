// The device solvers' own kernels and their launchers (implicit/solvers/internal/solver_kernels.h).
#include <implicit/core/cuda_kernel_support.cuh>
#include <implicit/solvers/internal/solver_kernels.h>

#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace implicit {
namespace cuda {
namespace internal {

namespace {

template <typename S>
__global__ void DampedStepKernel(S* z, const S* f, int n, const int* columns, long long total,
                                 S damping) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long j = k / n, i = k % n;
    const long long at = static_cast<long long>(Column(columns, static_cast<int>(j))) * n + i;
    z[at] += damping * (f[at] - z[at]);
  }
}

template <typename S>
__global__ void TrialPointsKernel(S* y, const S* z, const S* f, const S* q, int n, const int* columns,
                                  const double* a, const double* c, long long total) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long j = k / n, i = k % n;
    const long long at = static_cast<long long>(Column(columns, static_cast<int>(j))) * n + i;
    S v = z[at] + static_cast<S>(a[j]) * (f[at] - z[at]);
    if (c[j] != 0.0) v += static_cast<S>(c[j]) * q[at];
    y[at] = v;
  }
}

template <typename S>
__global__ void TrialScalarsKernel(const S* y, const S* fy, const S* ey, const S* z, const S* f, int n,
                                   const int* columns, int count, double* out) {
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) / kWarp, lane = threadIdx.x % kWarp;
  if (j >= count) return;
  const long long base = static_cast<long long>(Column(columns, j)) * n;
  double r = 0, predicted = 0;
  for (int i = lane; i < n; i += kWarp) {
    const double d = double(fy[base + i]) - double(y[base + i]);
    r += d * d;
    predicted += (double(f[base + i]) - double(z[base + i])) * (double(y[base + i]) - double(z[base + i]));
  }
  r = WarpSum(r);
  predicted = WarpSum(predicted);
  if (lane == 0) {
    out[3 * j] = sqrt(r);
    out[3 * j + 1] = predicted;
    out[3 * j + 2] = ey != nullptr ? double(ey[Column(columns, j)]) : 0.0;
  }
}

constexpr int kAndersonThreads = 128;

template <typename S>
__global__ void AndersonProposeKernel(AndersonState st, const S* z, const S* f, S* z_prev, S* g_prev,
                                      S* dz, S* dg, S* q, int n, const int* columns, double* out) {
  __shared__ double red[kAndersonThreads / kWarp];
  __shared__ double L[kMaxAndersonKernelMemory * kMaxAndersonKernelMemory];
  __shared__ double rhs[kMaxAndersonKernelMemory], gamma[kMaxAndersonKernelMemory];
  __shared__ int ok;
  const int j = blockIdx.x, b = static_cast<int>(Column(columns, j)), m = st.memory;
  const long long col = static_cast<long long>(b) * n;
  const S* zb = z + col;
  const S* fb = f + col;
  S* zp = z_prev + col;
  S* gp = g_prev + col;
  double* gram = st.gram + static_cast<long long>(b) * m * m;
  auto ring = [&](S* base, int slot) { return base + (static_cast<long long>(b) * m + slot) * n; };
  int count = st.count[b], next = st.next[b];
  const bool fast_before = st.fast_before[b] != 0;  // the step before contracted fast
  bool fast = false;  // the map contracted the last step fast (fast_contraction)
  if (st.has_prev[b]) {
    const int slot = next;
    S* dzs = ring(dz, slot);
    S* dgs = ring(dg, slot);
    double dz2 = 0, df2 = 0;  // |dz|^2 and |df|^2 = |dz + dg|^2 (fast_contraction)
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      dzs[i] = zb[i] - zp[i];
      dgs[i] = (fb[i] - zb[i]) - gp[i];
      const double df = double(dzs[i]) + double(dgs[i]);
      dz2 += double(dzs[i]) * double(dzs[i]);
      df2 += df * df;
    }
    dz2 = BlockSum(dz2, red);
    df2 = BlockSum(df2, red);
    fast = st.fast_contraction > 0 && sqrt(df2) <= st.fast_contraction * sqrt(dz2);  // every thread: sums are shared
    __syncthreads();
    count = min(count + 1, m);
    next = (slot + 1) % m;
    for (int l = 0; l < count; ++l) {
      const S* dgl = ring(dg, l);
      double v = 0;
      for (int i = threadIdx.x; i < n; i += blockDim.x) v += double(dgs[i]) * double(dgl[i]);
      v = BlockSum(v, red);
      if (threadIdx.x == 0) {
        gram[slot + l * m] = v;
        gram[l + slot * m] = v;
      }
    }
    // Fast contraction: the history is cut to the newest pair, moved to slot 0.
    if (fast && count > 1) {
      if (slot != 0) {
        S* dz0 = ring(dz, 0);
        S* dg0 = ring(dg, 0);
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
          dz0[i] = dzs[i];
          dg0[i] = dgs[i];
        }
        if (threadIdx.x == 0) gram[0] = gram[slot + slot * m];
      }
      count = 1;
      next = 1 % m;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    zp[i] = zb[i];
    gp[i] = fb[i] - zb[i];
  }
  __syncthreads();
  const int k = count;
  if (k > 0) {
    for (int l = 0; l < k; ++l) {
      const S* dgl = ring(dg, l);
      double v = 0;
      for (int i = threadIdx.x; i < n; i += blockDim.x) v += double(dgl[i]) * double(gp[i]);
      v = BlockSum(v, red);
      if (threadIdx.x == 0) rhs[l] = v;
    }
  }
  if (threadIdx.x == 0) {
    // The ridged Cholesky solve of AndersonSolver::SolveGram (anderson.h),
    // skipped on the first step that contracts fast (a plain step).
    const bool first_fast = fast && !fast_before;
    ok = k > 0 && !first_fast;
    double trace = 0, max_diag = 0;
    for (int i = 0; i < k; ++i) trace += gram[i + i * m];
    const double lambda = k > 0 ? st.ridge * trace / k : 0.0;
    for (int i = 0; i < k; ++i) max_diag = fmax(max_diag, gram[i + i * m] + lambda);
    if (ok && (!(max_diag > 0.0) || !isfinite(max_diag))) ok = 0;
    const double threshold = st.condition_limit * max_diag;
    for (int c = 0; ok && c < k; ++c) {
      double d = gram[c + c * m] + lambda;
      for (int l = 0; l < c; ++l) d -= L[c + l * kMaxAndersonKernelMemory] * L[c + l * kMaxAndersonKernelMemory];
      if (!(d > threshold) || !isfinite(d)) {
        ok = 0;
        break;
      }
      const double ljj = sqrt(d);
      L[c + c * kMaxAndersonKernelMemory] = ljj;
      for (int i = c + 1; i < k; ++i) {
        double s = gram[i + c * m];
        for (int l = 0; l < c; ++l) s -= L[i + l * kMaxAndersonKernelMemory] * L[c + l * kMaxAndersonKernelMemory];
        L[i + c * kMaxAndersonKernelMemory] = s / ljj;
      }
    }
    if (ok) {
      for (int i = 0; i < k; ++i) {
        double s = rhs[i];
        for (int l = 0; l < i; ++l) s -= L[i + l * kMaxAndersonKernelMemory] * gamma[l];
        gamma[i] = s / L[i + i * kMaxAndersonKernelMemory];
      }
      for (int i = k - 1; i >= 0; --i) {
        double s = gamma[i];
        for (int l = i + 1; l < k; ++l) s -= L[l + i * kMaxAndersonKernelMemory] * gamma[l];
        gamma[i] = s / L[i + i * kMaxAndersonKernelMemory];
      }
      for (int i = 0; i < k; ++i)
        if (!isfinite(gamma[i])) ok = 0;
    }
    if (!ok && k > 0 && !first_fast) count = next = 0;  // ill-conditioned: fresh history
    st.count[b] = count;
    st.next[b] = next;
    st.has_prev[b] = 1;
    st.fast_before[b] = fast;
  }
  __syncthreads();
  if (!ok) {
    if (threadIdx.x == 0) {
      out[2 * j] = 0.0;
      out[2 * j + 1] = 0.0;
    }
    return;
  }
  // The predicted-gain gate of AndersonSolver (anderson.h): no proposal (a
  // plain step, the history kept) when |g - dG gamma| > max_predicted_residual |g|.
  // q holds g - dG gamma until the proposal below overwrites it.
  S* qb = q + col;
  double gg = 0, pp = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const double g = double(gp[i]);
    double p = g;
    for (int l = 0; l < k; ++l) p -= gamma[l] * double(ring(dg, l)[i]);
    qb[i] = static_cast<S>(p);
    gg += g * g;
    pp += p * p;
  }
  gg = BlockSum(gg, red);
  pp = BlockSum(pp, red);
  if (sqrt(pp) > st.max_predicted_residual * sqrt(gg)) {
    if (threadIdx.x == 0) {
      out[2 * j] = 0.0;
      out[2 * j + 1] = 0.0;
    }
    return;
  }
  const S beta = static_cast<S>(st.mixing);
  double descent = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    S v = beta * qb[i];  // q = beta (g - dG gamma) - dZ gamma
    for (int l = 0; l < k; ++l) v -= static_cast<S>(gamma[l]) * ring(dz, l)[i];
    qb[i] = v;
    descent += double(v) * double(gp[i]);
  }
  descent = BlockSum(descent, red);
  if (threadIdx.x == 0) {
    out[2 * j] = 1.0;
    out[2 * j + 1] = descent;
  }
}

__global__ void AndersonResetKernel(int* count, int* next, const int* columns, int n) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  count[Column(columns, j)] = 0;
  next[Column(columns, j)] = 0;
}

}  // namespace

template <typename S>
void DampedStep(cudaStream_t stream, S* z, const S* f, int n, const int* columns, int count, S damping) {
  const long long total = static_cast<long long>(n) * count;
  if (total == 0) return;
  DampedStepKernel<S><<<ElementBlocks(total), kThreads, 0, stream>>>(z, f, n, columns, total, damping);
  CheckLaunch("DampedStep");
}

template <typename S>
void TrialPoints(cudaStream_t stream, S* y, const S* z, const S* f, const S* q, int n, const int* columns,
                 const double* a, const double* c, int count) {
  const long long total = static_cast<long long>(n) * count;
  if (total == 0) return;
  TrialPointsKernel<S><<<ElementBlocks(total), kThreads, 0, stream>>>(y, z, f, q, n, columns, a, c, total);
  CheckLaunch("TrialPoints");
}

template <typename S>
void TrialScalars(cudaStream_t stream, const S* y, const S* fy, const S* ey, const S* z, const S* f, int n,
                  const int* columns, int count, double* out) {
  if (count == 0) return;
  TrialScalarsKernel<S><<<WarpBlocks(count), kThreads, 0, stream>>>(y, fy, ey, z, f, n, columns, count,
                                                                            out);
  CheckLaunch("TrialScalars");
}

template <typename S>
void AndersonPropose(cudaStream_t stream, const AndersonState& state, const S* z, const S* f, S* z_prev,
                     S* g_prev, S* dz, S* dg, S* q, int n, const int* columns, int count, double* out) {
  if (count == 0) return;
  if (state.memory < 1 || state.memory > kMaxAndersonKernelMemory)
    throw std::invalid_argument("AndersonPropose: memory must be in 1.." + std::to_string(kMaxAndersonKernelMemory));
  AndersonProposeKernel<S><<<count, kAndersonThreads, 0, stream>>>(state, z, f, z_prev, g_prev, dz, dg, q, n,
                                                                   columns, out);
  CheckLaunch("AndersonPropose");
}

void AndersonReset(cudaStream_t stream, const AndersonState& state, const int* columns, int count) {
  if (count == 0) return;
  AndersonResetKernel<<<(count + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      state.count, state.next, columns, count);
  CheckLaunch("AndersonReset");
}

#define IMPLICIT_SOLVER_KERNELS(S)                                                                            \
  template void DampedStep<S>(cudaStream_t, S*, const S*, int, const int*, int, S);                    \
  template void TrialPoints<S>(cudaStream_t, S*, const S*, const S*, const S*, int, const int*,        \
                               const double*, const double*, int);                                     \
  template void TrialScalars<S>(cudaStream_t, const S*, const S*, const S*, const S*, const S*, int,    \
                                const int*, int, double*);                                             \
  template void AndersonPropose<S>(cudaStream_t, const AndersonState&, const S*, const S*, S*, S*, S*, \
                                   S*, S*, int, const int*, int, double*);
IMPLICIT_SOLVER_KERNELS(float)
IMPLICIT_SOLVER_KERNELS(double)
#undef IMPLICIT_SOLVER_KERNELS

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
