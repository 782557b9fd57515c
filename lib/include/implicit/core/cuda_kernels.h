/// \file
/// The GPU backend's kernels (internal): launchers callable from host C++ code,
/// each enqueued on the given stream. Matrices are column-major with leading
/// dimension = rows; `columns` (device int array) lists batch columns; scalar
/// outputs for the host are double; a null `columns` means 0, 1, ..., count - 1.
/// Instantiated for float and double.
#pragma once

#ifndef IMPLICIT_WITH_CUDA
#error "implicit/core/cuda_kernels.h needs libimplicit built with CUDA"
#endif

#include <cstddef>

struct CUstream_st;
/// The CUDA runtime's stream type, declared as it declares it (no Eigen, no
/// CUDA include path needed here: kernels.cu compiles without Eigen).
typedef struct CUstream_st* cudaStream_t;

namespace implicit {
namespace cuda {
namespace internal {

/// The largest Anderson memory AndersonPropose takes (its Cholesky factor lives
/// in one block's shared memory).
inline constexpr int kMaxAndersonKernelMemory = 32;

/// The Context workspace slots (Context::Workspace) of the device solvers and
/// the device backward pass: each buffer is allocated once per context.
enum WorkspaceSlot : int {
  kSlotF, kSlotE, kSlotKept, kSlotCompactIn, kSlotCompactOut, kSlotCompactE, kSlotUpload,
  kSlotDownload, kSlotQ, kSlotZPrev, kSlotGPrev, kSlotY, kSlotFY, kSlotEY, kSlotDZ, kSlotDG,
  kSlotGram, kSlotCounters, kSlotAdjointZ, kSlotKrylov, kSlotKrylovW, kSlotKrylovR, kSlotKrylovJtv, kSlotKrylovCompactIn,
  kSlotKrylovCompactOut, kSlotKrylovUpload, kSlotKrylovDownload, kSlotActive, kSlotFusedPicard
};
enum PinnedSlot : int { kPinnedUpload, kPinnedDownload, kPinnedKrylovUpload, kPinnedKrylovDownload, kPinnedActive };

/// Throws std::runtime_error naming `what` if the last launch failed.
void CheckLaunch(const char* what);
/// Throws std::runtime_error `CUDA error in <what>: <the error's text>` when
/// `status`, a cudaError_t returned by a CUDA runtime call, is not cudaSuccess.
void CheckCall(int status, const char* what);

/// Column softmax of beta * scores (rows x count), in place; lse[j] (when not
/// null) = log sum_i exp(beta scores_ij).
template <typename S>
void SoftmaxColumns(cudaStream_t stream, S* scores, int rows, int count, S beta, S* lse);

/// energy[j] = 0.5 |z_j|^2 - lse[j] / beta  (z: n x count; lse may be any
/// conjugate Omega*(beta X^T z_j), e.g.\ sparsemax's).
template <typename S>
void HopfieldEnergy(cudaStream_t stream, const S* z, int n, int count, const S* lse, S beta,
                    S* energy);

/// w_j = p_j .* s_j - p_j (p_j . s_j), in place in s (rows x count).
template <typename S>
void SoftmaxJacobianTranspose(cudaStream_t stream, const S* p, S* s, int rows, int count);

/// Sparsemax (entmax alpha = 2) of beta * scores per column, in place; conj[j]
/// (when not null) = Omega*_2(beta scores_j), the Tsallis-2 conjugate.
template <typename S>
void SparsemaxColumns(cudaStream_t stream, S* scores, int rows, int count, S beta, S* conj);

/// w_j = J_j s_j with sparsemax's Jacobian at p_j (support p > 0), in place in s.
template <typename S>
void SparsemaxJacobianTranspose(cudaStream_t stream, const S* p, S* s, int rows, int count);

///@{
/// compact(:, j) = full(:, columns[j]) and the reverse (n rows).
template <typename S>
void GatherColumns(cudaStream_t stream, const S* full, int n, const int* columns, int count,
                   S* compact);
template <typename S>
void ScatterColumns(cudaStream_t stream, const S* compact, int n, const int* columns, int count,
                    S* full);
///@}
/// dst(:, columns[j]) = src(:, columns[j]) (same layout, n rows).
template <typename S>
void CopyColumns(cudaStream_t stream, const S* src, int n, const int* columns, int count, S* dst);

/// For batch column b = columns[j]: out[4 j] = |f_b - z_b|, out[4 j + 1] = |f_b|,
/// out[4 j + 2] = 1 when z_b and f_b are finite, else 0, out[4 j + 3] = energy[b]
/// (0 when energy is null).
template <typename S>
void ResidualScalars(cudaStream_t stream, const S* z, const S* f, const S* energy, int n,
                     const int* columns, int count, double* out);

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

/// out[j] = a_j . b_j (n rows), in double.
template <typename S>
void ColumnDots(cudaStream_t stream, const S* a, const S* b, int n, int count, double* out);

/// u = J^T u + g for the adjoint map: out = vjp + g for b = columns[j] of g
/// (out, vjp compact n x count; g the full batch; columns may be null).
template <typename S>
void AddColumns(cudaStream_t stream, S* out, const S* g, int n, const int* columns, int count);

///@{
/// Krylov bases (the device GMRES): V holds k vectors of n x B, vector i at
/// V + i * stride. For each listed sample j (b = columns[j]; null: b = j),
/// reading and writing only the listed columns:
///   BasisDots:    out[j k + i] = V_i(:, b) . w(:, b) in double, i < k;
///   BasisCombine: out(:, b) = (accumulate ? out(:, b) : 0) + sum_i coef[j k + i] V_i(:, b).
template <typename S>
void BasisDots(cudaStream_t stream, const S* V, long long stride, int k, const S* w, int n, const int* columns,
               int count, double* out);
template <typename S>
void BasisCombine(cudaStream_t stream, const S* V, long long stride, int k, const double* coef, int n,
                  const int* columns, int count, bool accumulate, S* out);
///@}
/// out(:, b) = a(:, b) - c(:, b) for the listed columns (full n x B arrays).
template <typename S>
void SubtractColumns(cudaStream_t stream, const S* a, const S* c, int n, const int* columns, int count, S* out);

/// Fills n values with `value`.
template <typename S>
void Fill(cudaStream_t stream, S* data, long long n, S value);

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
