/// \file
/// Building blocks for user energies (AutoDiffEnergy functors) that are fast
/// in every scalar type the functor is compiled for. Ordinary Eigen code is
/// as fast in reverse mode (its products and sums are recorded whole,
/// reverse_eigen.h); these remain for functors written against them and for
/// what Eigen has no word for (ad::Persistent, ad::LogSumExp of a vector).
///
/// A functor templated on the scalar type T is evaluated in Scalar, in
/// forward-mode duals and, for reverse mode, on reverse::Var (reverse_tape.h), which
/// records one tape node per scalar operation. LogSumExp and Dot below record
/// one node for a whole vector: a retrieval energy's N dot products of length
/// n then cost N nodes instead of 2 n N, which is most of what makes its
/// reverse-mode gradient cheap; Product records a matrix product as one block
/// (its reverse: two matrix products). On a block of the functor's own x (or input, or
/// theta) Dot reads the variables as a vector; Persistent(P.col(i)) lets the
/// tape point to data the functor holds instead of copying it. Max and Where
/// are plain selections (the tape is recorded at every point, so the branch
/// taken there is the one differentiated); they are kept for functors written
/// against them.
///
/// \code
///   template <typename T>
///   T operator()(const implicit::Vector<T>& x, const implicit::Vector<T>& theta) const {
///     implicit::Vector<T> s(P.cols());   // P: the functor's member
///     for (implicit::Index i = 0; i < P.cols(); ++i)
///       s(i) = implicit::ad::Dot(implicit::ad::Persistent(P.col(i)), x);
///     T relu = implicit::ad::Max(x(0), T(0.0));     // max(x0, 0)
///     return implicit::ad::LogSumExp(s) + relu;    // max-shifted, stable
///   }
/// \endcode
#pragma once

#include <implicit/core/reverse_tape.h>
#include <implicit/core/types.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace implicit {
namespace ad {

/// The larger of a and b, max(a, b) (a plain selection).
template <typename T>
T Max(const T& a, const T& b) {
  return a < b ? b : a;
}

/// Selects by sign: condition > 0 ? if_positive : otherwise.
template <typename T>
T Where(const T& condition, const T& if_positive, const T& otherwise) {
  return condition > T(0.0) ? if_positive : otherwise;
}

namespace internal {
/// The number part of a value (a dual's value part).
template <typename S, typename = std::enable_if_t<std::is_arithmetic<S>::value>>
S NumberOf(S s) {
  return s;
}
template <typename S, int N>
S NumberOf(const ceres::Jet<S, N>& s) {
  return NumberOf(s.a);
}
/// A vector expression as stored values: itself when it reads stored
/// coefficients (a block, row or column of a matrix), else evaluated into a
/// vector (so that the nodes of an expression of Vars are recorded before the
/// node that uses them, and once).
template <typename E>
using Stored = std::conditional_t<Eigen::internal::has_direct_access<E>::ret, const E&,
                                  const Vector<typename E::Scalar>>;
/// The energy's scalar type of an operation on a vector of SA and one of SB:
/// the one that is not a plain number (a Var, a dual), else SB.
template <typename SA, typename SB>
using EnergyScalar =
    std::conditional_t<reverse::IsVar<SA>::value || !std::is_arithmetic<SA>::value, SA, SB>;

inline void CheckDotLengths(Index a, Index b) {
  if (a != b) {
    throw std::invalid_argument("ad::Dot: vectors of lengths " + std::to_string(a) + " and " +
                                std::to_string(b));
  }
}

/// sum_i numbers_i vars_i as one node whose partials are the numbers; a run
/// when the variables are consecutive nodes (a block of x).
template <typename T, typename Numbers, typename Vars>
T DotOfNumbersAndVars(const Numbers& numbers, const Vars& vars, bool persistent = false) {
  using V = typename T::Value;
  const Index n = vars.size();
  reverse::Tape<V>& tape = reverse::Tape<V>::ThisThread();
  if constexpr (::implicit::internal::ExposesStorage<std::decay_t<Vars>>::value) {
    // A stretch of a known run (the functor's x, input or theta): values read
    // contiguously, the numbers appended as the run's partials, no per-Var check.
    std::int64_t known_first = -1;
    const V* values = nullptr;
    if (n > 0 && vars.innerStride() == 1 && tape.FindKnownRun(vars.data(), n, &known_first, &values)) {
      const Eigen::Map<const Vector<V>> x(values, n);
      bool contiguous = false;  // numbers and values: one vectorised dot product
      if constexpr (std::is_arithmetic<V>::value && ::implicit::internal::ExposesStorage<Numbers>::value) {
        contiguous = numbers.innerStride() == 1;
      }
      V value(0.0);
      if (contiguous) {
        if constexpr (std::is_arithmetic<V>::value) value = numbers.template cast<V>().dot(x);
      } else {
        using Number = decltype(NumberOf(std::declval<V>()));  // dual * number
        for (Index i = 0; i < n; ++i) value += x(i) * static_cast<Number>(numbers.coeff(i));
      }
      return T(value, tape.PushRun(known_first, numbers, persistent));
    }
  }
  const std::int64_t first = n > 0 ? vars.coeff(0).index() : -1;
  bool run = first >= 0;
  V value(0.0);
  for (Index i = 0; i < n; ++i) {
    run = run && vars.coeff(i).index() == first + static_cast<std::int64_t>(i) && vars.coeff(i).unit_scale();
    value += V(numbers.coeff(i)) * ValueOf(vars.coeff(i));
  }
  if (run) return T(value, tape.PushRun(first, numbers, persistent));
  bool any = false;
  for (Index i = 0; i < n; ++i) any = tape.AddOperand(vars.coeff(i), V(numbers.coeff(i))) || any;
  return any ? T(value, tape.Close()) : T(value);
}
}  // namespace internal

/// log sum_i exp(s_i), computed as m + log sum_i exp(s_i - m) with m = max_i s_i
/// (no overflow; the shift's derivatives cancel exactly). s is a vector.
template <typename Derived>
typename Derived::Scalar LogSumExp(const Eigen::MatrixBase<Derived>& scores) {
  using T = typename Derived::Scalar;
  using std::exp;
  using std::log;
  if constexpr (reverse::IsVar<T>::value) {
    // One node: d lse / d s_i = softmax(s)_i.
    using V = typename T::Value;
    const internal::Stored<Derived> s = scores.derived();
    auto m = internal::NumberOf(ValueOf(T(s(0))));
    for (Index i = 1; i < s.size(); ++i) m = std::max(m, internal::NumberOf(ValueOf(T(s(i)))));
    static thread_local std::vector<V> shifted;
    shifted.resize(static_cast<std::size_t>(s.size()));
    V sum(0.0);
    for (Index i = 0; i < s.size(); ++i) {
      shifted[static_cast<std::size_t>(i)] = exp(ValueOf(T(s(i))) - V(m));
      sum += shifted[static_cast<std::size_t>(i)];
    }
    const V lse = V(m) + log(sum);
    const V inverse = V(1.0) / sum;
    reverse::Tape<V>& tape = reverse::Tape<V>::ThisThread();
    bool any = false;
    for (Index i = 0; i < s.size(); ++i) {
      // The partial p_i = softmax_i changes as p_i (ds_i - d lse).
      const T& si = s(i);
      const V p = shifted[static_cast<std::size_t>(i)] * inverse;
      if (tape.AddOperand(si, p)) {
        any = true;
        const auto pn = internal::NumberOf(p);
        tape.AddCurvature(si, si, pn);
        tape.AddCurvatureInResult(si, -pn);
      }
    }
    return any ? T(lse, tape.Close()) : T(lse);
  } else {
    const auto& s = scores;
    T m = s(0);
    for (Index i = 1; i < s.size(); ++i) m = Max(m, T(s(i)));
    T sum = T(0.0);
    for (Index i = 0; i < s.size(); ++i) sum += exp(s(i) - m);
    return m + log(sum);
  }
}

/// sum_i a_i b_i of two vectors of equal length; either may hold numbers
/// (data) and the other the energy's scalar T (the result's type).
/// \throws std::invalid_argument when the lengths differ.
template <typename A, typename B>
auto Dot(const Eigen::MatrixBase<A>& a_in, const Eigen::MatrixBase<B>& b_in) {
  using SA = typename A::Scalar;
  using SB = typename B::Scalar;
  using T = internal::EnergyScalar<SA, SB>;
  internal::CheckDotLengths(a_in.size(), b_in.size());
  if constexpr (reverse::IsVar<SA>::value || reverse::IsVar<SB>::value) {
    // One node: d/da_i = b_i, d/db_i = a_i.
    const internal::Stored<A> a = a_in.derived();
    const internal::Stored<B> b = b_in.derived();
    if constexpr (!reverse::IsVar<SA>::value) {
      return internal::DotOfNumbersAndVars<T>(a, b);
    } else if constexpr (!reverse::IsVar<SB>::value) {
      return internal::DotOfNumbersAndVars<T>(b, a);
    } else {
      using V = typename T::Value;
      const Index n = a.size();
      reverse::Tape<V>& tape = reverse::Tape<V>::ThisThread();
      V value(0.0);
      bool any = false;
      for (Index i = 0; i < n; ++i) value += ValueOf(a.coeff(i)) * ValueOf(b.coeff(i));
      for (Index i = 0; i < n; ++i) {  // partials b_i and a_i: the mixed second derivative 1
        const T& ai = a.coeff(i);
        const T& bi = b.coeff(i);
        if (tape.AddOperand(ai, ValueOf(bi))) {
          any = true;
          tape.AddCurvature(ai, bi, 1);
        }
        if (tape.AddOperand(bi, ValueOf(ai))) {
          any = true;
          tape.AddCurvature(bi, ai, 1);
        }
      }
      return any ? T(value, tape.Close()) : T(value);
    }
  } else {
    const auto& a = a_in;
    const auto& b = b_in;
    if constexpr (std::is_same<SA, SB>::value && std::is_arithmetic<SA>::value) {
      return T(a.dot(b));  // Eigen's vectorised dot product
    } else {
      T acc = T(0.0);
      for (Index i = 0; i < a.size(); ++i) acc += T(a(i)) * T(b(i));
      return acc;
    }
  }
}

/// The matrix product a b (a m x k, b k x n), as a Matrix of the energy's
/// scalar T; either factor may hold numbers (data) and the other T, or both T.
/// In reverse mode the whole product is one block on the tape, and its reverse
/// is two matrix products (dA = dS B^T, dB = A^T dS) instead of m n dot-product
/// nodes of up to 2 k operands each: write attention scores (K^T Q),
/// projections (W X) and memory overlaps (Xi^T G) with it.
/// \code
///   implicit::Matrix<T> scores = implicit::ad::Product(K.transpose(), Q);
/// \endcode
/// \throws std::invalid_argument when a.cols() != b.rows().
template <typename A, typename B>
auto Product(const Eigen::MatrixBase<A>& a_in, const Eigen::MatrixBase<B>& b_in) {
  using SA = typename A::Scalar;
  using SB = typename B::Scalar;
  using T = internal::EnergyScalar<SA, SB>;
  if (a_in.cols() != b_in.rows()) {
    throw std::invalid_argument("ad::Product: a " + std::to_string(a_in.rows()) + "x" +
                                std::to_string(a_in.cols()) + " times b " + std::to_string(b_in.rows()) +
                                "x" + std::to_string(b_in.cols()));
  }
  if constexpr (reverse::IsVar<SA>::value || reverse::IsVar<SB>::value) {
    // One recorded block (reverse_eigen.h), as Eigen's own product of Vars.
    Matrix<T> out;
    reverse::internal::RecordProduct<typename T::Value>(a_in.derived(), b_in.derived(), &out);
    return out;
  } else {
    Matrix<T> out;
    ::implicit::internal::MatrixProduct(a_in.derived().template cast<T>(), b_in.derived().template cast<T>(), &out);
    return out;
  }
}

/// Numbers whose storage outlives the derivative computation: data the functor
/// holds, such as a column of a member matrix. ad::Dot(ad::Persistent(P.col(i)), x)
/// is ad::Dot(P.col(i), x), except that in reverse mode the tape points to
/// P.col(i) instead of copying it (the copy is about a third of a retrieval
/// energy's gradient time). A promise the compiler cannot check: a temporary
/// (a local vector, an expression such as 2 * P.col(i)) or data changed during
/// an evaluation would be read after the fact, so mark only data that lives in
/// the functor and is not changed while the energy is in use. Stored numbers
/// only (a matrix, a block or column of one, a map); numbers of another type
/// than the energy's (float data in a double energy) are copied.
template <typename Derived>
struct PersistentNumbers {
  const Derived& numbers;  ///< The numbers (a reference, used within the full expression of the Dot call).
};
/// Marks stored numbers as persistent for ad::Dot: in reverse mode the tape points to them
/// instead of copying them (see PersistentNumbers for the promise this makes).
template <typename Derived>
PersistentNumbers<Derived> Persistent(const Eigen::MatrixBase<Derived>& numbers) {
  static_assert(::implicit::internal::ExposesStorage<Derived>::value,
                "ad::Persistent: the numbers must be stored (a matrix, a block or column of "
                "one, a map), not an expression");
  static_assert(std::is_arithmetic<typename Derived::Scalar>::value,
                "ad::Persistent: numbers (data), not the energy's scalars");
  return {numbers.derived()};
}

///@{
/// ad::Dot of persistent numbers (Persistent()) and a vector, in either order: in reverse
/// mode the node's partials point to the numbers instead of copying them.
/// \throws std::invalid_argument when the lengths differ.
template <typename A, typename B>
auto Dot(const PersistentNumbers<A>& a, const Eigen::MatrixBase<B>& b_in) {
  using SB = typename B::Scalar;
  if constexpr (reverse::IsVar<SB>::value) {
    internal::CheckDotLengths(a.numbers.size(), b_in.size());
    const internal::Stored<B> b = b_in.derived();
    return internal::DotOfNumbersAndVars<SB>(a.numbers, b, /*persistent=*/true);
  } else {
    return Dot(a.numbers, b_in);
  }
}
template <typename A, typename B>
auto Dot(const Eigen::MatrixBase<A>& a, const PersistentNumbers<B>& b) {
  return Dot(b, a);
}
///@}

}  // namespace ad
}  // namespace implicit
