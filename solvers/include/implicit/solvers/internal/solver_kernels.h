/// \file
/// The device solvers' own kernels (internal; CUDA builds only): the damped
/// Picard step, the guarded step's trial points and scalars, and Anderson's
/// per-sample history and proposal; launchers in solvers/src/cuda/solver_kernels.cu,
/// each enqueued on the given stream, instantiated for float and double (the
/// conventions of implicit/core/cuda_kernels.h).
///
/// \code
///   cuda::internal::DampedStep<double>(stream, z, f, n, columns, count, 0.5);
/// \endcode
#pragma once

#ifndef IMPLICIT_WITH_CUDA
#error "implicit/solvers/internal/solver_kernels.h needs libimplicit built with CUDA"
#endif

#include <implicit/core/cuda_kernels.h>

namespace implicit {
namespace cuda {
namespace internal {

/// The largest Anderson memory AndersonPropose takes (its Cholesky factor lives
/// in one block's shared memory).
inline constexpr int kMaxAndersonKernelMemory = 32;

/// z_b += damping (f_b - z_b) for b = columns[j].
template <typename S>
void DampedStep(cudaStream_t stream, S* z, const S* f, int n, const int* columns, int count,
                S damping);

/// y_b = z_b + a[j] (f_b - z_b) + c[j] q_b for b = columns[j] (q may be null when c = 0).
template <typename S>
void TrialPoints(cudaStream_t stream, S* y, const S* z, const S* f, const S* q, int n,
                 const int* columns, const double* a, const double* c, int count);

/// For b = columns[j]: out[3 j] = |fy_b - y_b|, out[3 j + 1] = (f_b - z_b) . (y_b - z_b),
/// out[3 j + 2] = ey[b] (0 when ey is null).
template <typename S>
void TrialScalars(cudaStream_t stream, const S* y, const S* fy, const S* ey, const S* z,
                  const S* f, int n, const int* columns, int count, double* out);

/// Anderson's per-sample step (one thread block per listed sample b):
/// pushes the pair (z_b - z_prev_b, (f_b - z_b) - g_prev_b) into b's ring of
/// `memory` slots (when has_prev[b]), updates b's Gram block (double), stores
/// z_prev_b = z_b, g_prev_b = f_b - z_b, then solves the ridged system by
/// Cholesky and writes q_b = beta g - (dZ + beta dG) gamma. out[2 j] = 1 when
/// a proposal was made (0: empty or ill-conditioned history, then cleared),
/// out[2 j + 1] = q_b . g_b.
struct AndersonState {
  int memory = 0;
  double ridge = 0, condition_limit = 0, mixing = 1;
  double max_predicted_residual = 1;  ///< the predicted-gain gate (1: off)
  double fast_contraction = 0;        ///< the fast-contraction rule (0: off)
  int* count = nullptr;     ///< B: stored pairs
  int* next = nullptr;      ///< B: next slot
  int* has_prev = nullptr;  ///< B
  int* fast_before = nullptr;  ///< B: the last step contracted fast (fast_contraction)
  double* gram = nullptr;   ///< memory x memory x B
};
template <typename S>
void AndersonPropose(cudaStream_t stream, const AndersonState& state, const S* z, const S* f,
                     S* z_prev, S* g_prev, S* dz, S* dg, S* q, int n, const int* columns,
                     int count, double* out);
/// Clears the history of the listed samples (count = next = 0).
void AndersonReset(cudaStream_t stream, const AndersonState& state, const int* columns, int count);

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
