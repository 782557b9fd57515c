// The device GMRES's kernels (internal to the diff layer; CUDA builds only):
// launchers in krylov_kernels.cu, instantiated for float and double (the
// conventions of implicit/core/cuda_kernels.h).
//
//   BasisDots<double>(stream, V, stride, k, w, n, columns, count, dots);
#pragma once

#ifndef IMPLICIT_WITH_CUDA
#error "krylov_kernels.h needs libimplicit built with CUDA"
#endif

#include <implicit/core/cuda_kernels.h>

namespace implicit {
namespace cuda {
namespace internal {

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
}  // namespace internal
}  // namespace cuda
}  // namespace implicit
