// Branch-free building blocks for user energies (AutoDiffEnergy functors).
//
// A functor templated on the scalar type T is evaluated in Scalar, in
// forward-mode duals and, for reverse mode, on ADOL-C's adouble, whose tape is
// recorded at one point and replayed at others. An `if` on a value of T
// (std::max, a ReLU written as a comparison, Eigen's maxCoeff) is recorded as
// a comparison: a sample on the other side of it makes the replay report a
// branch switch, and AutoDiffEnergy records the tape again at that sample
// (correct, but each re-recording costs several evaluations and ADOL-C prints
// a warning). These functions are recorded without a branch (ADOL-C's fmax and
// condassign) and give the same values in every scalar type:
//
//   template <typename T>
//   T operator()(const implicit::Vector<T>& x, const implicit::Vector<T>& theta) const {
//     implicit::Vector<T> s = ...;                  // scores
//     T relu = implicit::ad::Max(x(0), T(0.0));     // max(x0, 0)
//     T step = implicit::ad::Where(x(1), T(1.0), T(0.0));  // x1 > 0 ? 1 : 0
//     return implicit::ad::LogSumExp(s) + relu;    // max-shifted, stable
//   }
#pragma once

#include <implicit/core/types.h>

#if IMPLICIT_HAVE_ADOLC
#include <implicit/core/reverse_tape.h>
#endif

#include <cmath>

namespace implicit {
namespace ad {

// max(a, b).
template <typename T>
T Max(const T& a, const T& b) {
  return a < b ? b : a;
}

// condition > 0 ? if_positive : otherwise.
template <typename T>
T Where(const T& condition, const T& if_positive, const T& otherwise) {
  return condition > T(0.0) ? if_positive : otherwise;
}

#if IMPLICIT_HAVE_ADOLC
// Recorded as ADOL-C conditional assignments (condassign), replayed without
// re-recording. (ADOL-C's fmax warns on stderr whenever its arguments are
// equal, e.g. every score of a zero state; a selection does not.)
inline adouble Where(const adouble& condition, const adouble& if_positive,
                     const adouble& otherwise) {
  adouble result;
  condassign(result, condition, if_positive, otherwise);
  return result;
}
inline adouble Max(const adouble& a, const adouble& b) { return Where(adouble(b - a), b, a); }
#endif

// log sum_i exp(s_i), computed as m + log sum_i exp(s_i - m) with m = max_i s_i
// (no overflow; the shift's derivatives cancel exactly). s is a vector.
template <typename Derived>
typename Derived::Scalar LogSumExp(const Eigen::MatrixBase<Derived>& s) {
  using T = typename Derived::Scalar;
  using std::exp;
  using std::log;
  T m = s(0);
  for (Index i = 1; i < s.size(); ++i) m = Max(m, T(s(i)));
  T sum = T(0.0);
  for (Index i = 0; i < s.size(); ++i) sum += exp(s(i) - m);
  return m + log(sum);
}

}  // namespace ad
}  // namespace implicit
