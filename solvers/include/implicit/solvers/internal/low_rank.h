// The low-rank products of the quasi-Newton histories (internal): Broyden's
// H = -I + sum_i u_i v_i^T and Anderson's mixing work on a few stored columns
// per sample, each product a handful of dot products and a linear
// combination of length n. Run as the dispatched kernels of
// core/cpu_dispatch.h, they use the CPU's vector units (AVX2/FMA, AVX-512) in
// the default build as well, where Eigen's own loops in these header-only
// solvers are compiled for the build's baseline.
//
//   // sample b's history: columns [first, first + k) of u and v (n rows)
//   HistoryDots(v, first, k, g, c.data());                   // c_i = v_i . g
//   AddHistoryCombination(u, first, k, c.data(), p.data());   // p += sum_i c_i u_i
#pragma once

#include <implicit/core/cpu_dispatch.h>
#include <implicit/core/types.h>

#include <type_traits>

namespace implicit {
namespace internal {

// Scalar is deduced from the history alone (NonDeduced, types.h: a column
// block converts to the Ref).
template <typename Scalar>
constexpr bool kHasKernels = std::is_same<Scalar, float>::value || std::is_same<Scalar, double>::value;

// out[i] = history.col(first + i) . x for i < k.
template <typename Scalar>
void HistoryDots(const Matrix<Scalar>& history, Index first, Index k,
                 Eigen::Ref<const Vector<typename NonDeduced<Scalar>::type>> x,
                 Scalar* out) {
  const Index n = history.rows();
  if constexpr (kHasKernels<Scalar>) {
    ColumnDotsKernel<Scalar>(history.data() + first * n, n, k, n, x.data(), out);
  } else {
    for (Index i = 0; i < k; ++i) out[i] = history.col(first + i).dot(x);
  }
}

// y += sum_{i < k} coef[i] history.col(first + i).
template <typename Scalar>
void AddHistoryCombination(const Matrix<Scalar>& history, Index first, Index k, const Scalar* coef,
                           Eigen::Ref<Vector<typename NonDeduced<Scalar>::type>> y) {
  const Index n = history.rows();
  if constexpr (kHasKernels<Scalar>) {
    AddColumnCombinationKernel<Scalar>(history.data() + first * n, n, k, n, coef, y.data());
  } else {
    for (Index i = 0; i < k; ++i) y += coef[i] * history.col(first + i);
  }
}

}  // namespace internal
}  // namespace implicit
