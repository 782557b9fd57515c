// The per-sample vector work of the quasi-Newton solvers (internal): the
// low-rank products of their histories (Broyden's H = -I + sum_i u_i v_i^T,
// Anderson's mixing, L-BFGS's two-loop recursion: a handful of dot products
// and linear combinations of length n on a few stored columns per sample) and
// the differences, dots and copies around them. Run as the dispatched kernels
// of core/cpu_dispatch.h, they use the CPU's vector units (AVX2/FMA, AVX-512)
// in the default build as well, where Eigen's own loops in these header-only
// solvers are compiled for the build's baseline.
//
//   // sample b's history: columns [first, first + k) of u and v (n rows)
//   HistoryDots(v, first, k, g, c.data());                   // c_i = v_i . g
//   AddHistoryCombination(u, first, k, c.data(), p.data());   // p += sum_i c_i u_i
//   Scalar d = VectorDot<Scalar>(a, b);                       // one dot product
//   Combine<Scalar>(s, {{1, z}, {-1, z_prev}});               // s = z - z_prev
#pragma once

#include <implicit/core/cpu_dispatch.h>
#include <implicit/core/types.h>

#include <algorithm>
#include <initializer_list>
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

// a . b.
template <typename Scalar>
Scalar VectorDot(Eigen::Ref<const Vector<Scalar>> a, Eigen::Ref<const Vector<Scalar>> b) {
  if constexpr (kHasKernels<Scalar>) {
    Scalar out;
    ColumnDotsKernel<Scalar>(a.data(), a.size(), 1, a.size(), b.data(), &out);
    return out;
  } else {
    return a.dot(b);
  }
}

// One term c x of Combine.
template <typename Scalar>
struct Term {
  Scalar coefficient;
  Eigen::Ref<const Vector<Scalar>> vector;
};

// out = sum_j c_j x_j over one to four terms, entry by entry (out may be one
// of the x_j): with c_j = +-1 the differences are rounded as Eigen rounds
// them, e.g. (a - b) - c.
template <typename Scalar>
void Combine(Eigen::Ref<Vector<Scalar>> out, std::initializer_list<Term<Scalar>> terms) {
  const int k = static_cast<int>(terms.size());
  if constexpr (kHasKernels<Scalar>) {
    const Scalar* x[4];
    Scalar coef[4];
    int j = 0;
    for (const Term<Scalar>& term : terms) {
      if (j < 4) x[j] = term.vector.data(), coef[j] = term.coefficient;
      ++j;
    }
    CombineKernel<Scalar>(out.size(), k, x, coef, out.data());
  } else {
    Vector<Scalar> sum = Vector<Scalar>::Zero(out.size());
    for (const Term<Scalar>& term : terms) sum += term.coefficient * term.vector;
    out = sum;
  }
}

// out = x (the C library's copy, itself chosen for the CPU).
template <typename Scalar>
void CopyVector(Eigen::Ref<const Vector<Scalar>> x, Eigen::Ref<Vector<Scalar>> out) {
  std::copy_n(x.data(), x.size(), out.data());
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
