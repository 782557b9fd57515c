/// \file
/// The GPU backend's core kernels (internal): the maps' passes, column
/// gathers and reductions, as launchers callable from host C++ code, each
/// enqueued on the given stream (the solvers' own kernels are in the solvers
/// layer: implicit/solvers/internal/solver_kernels.h and fused_picard.h).
/// Matrices are column-major with leading dimension = rows; `columns` (device
/// int array) lists batch columns; scalar outputs for the host are double; a
/// null `columns` means 0, 1, ..., count - 1. Instantiated for float and double.
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

/// out[j] = a_j . b_j (n rows), in double.
template <typename S>
void ColumnDots(cudaStream_t stream, const S* a, const S* b, int n, int count, double* out);

/// u = J^T u + g for the adjoint map: out = vjp + g for b = columns[j] of g
/// (out, vjp compact n x count; g the full batch; columns may be null).
template <typename S>
void AddColumns(cudaStream_t stream, S* out, const S* g, int n, const int* columns, int count);

/// out(:, b) = a(:, b) - c(:, b) for the listed columns (full n x B arrays).
template <typename S>
void SubtractColumns(cudaStream_t stream, const S* a, const S* c, int n, const int* columns, int count, S* out);

/// Fills n values with `value`.
template <typename S>
void Fill(cudaStream_t stream, S* data, long long n, S value);

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
