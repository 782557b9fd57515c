/// \file
/// How AutoDiffEnergy (autodiff_energy.h) differentiates a user energy: the
/// modes, the threshold of the automatic choice, and the dual numbers of
/// forward mode.
///
/// \code
///   implicit::AutoDiffEnergy<MyFunctor, double> energy(MyFunctor{}, n);
///   energy.set_mode(implicit::AutoDiffMode::kForward);   // or kReverse, kAutomatic
/// \endcode
///
/// Two ways to differentiate (AutoDiffEnergy::set_mode; AutoDiffMode below):
///  * forward mode, dual numbers (ceres::Jet), with n the state dimension, p the
///    number of parameters, K = kChunk (default 8) and C the cost of one
///    scalar evaluation of E:
///      Gradient              ceil(n/K) evaluations in K-wide duals: about n*C
///      HessianVectorProduct  ceil(n/K) evaluations in nested duals:  about 2n*C
///      ParameterVJP          ceil(p/K) evaluations in nested duals:  about 2p*C
///    so a gradient of an energy whose own cost grows like n costs O(n^2);
///  * reverse mode: E is recorded on a tape at each evaluation (the functor is
///    also compiled for reverse::Var, reverse_tape.h) and swept backwards once: a
///    gradient costs a small multiple of C whatever n is, and the
///    Hessian-vector, parameter and input products come from one recording in
///    dual values and one sweep (forward over reverse), about twice that.
///    Tapes are per thread, so threads differentiate at the same time. The
///    recording follows the branches taken at each point (an `if` on values,
///    a max, a sort). ad::Dot and ad::LogSumExp (ad_functions.h) record a whole
///    dot product or log-sum-exp as one node, which is what makes dense
///    products cheap.
/// The functor is therefore compiled for five scalar types: Scalar,
/// ceres::Jet<Scalar, K> and the nested ceres::Jet<DirectionalJet<Scalar>, K>
/// (forward mode), reverse::Var<Scalar> and reverse::Var<DirectionalJet<Scalar>>
/// (reverse mode). Eigen matrix products (A * x, A * B) work on all of them:
/// on Vars each is one recorded block (reverse_eigen.h), and a product of data
/// with forward mode's duals runs as products of numbers; a product of two
/// dual matrices in forward mode instantiates Eigen's general kernels for the
/// dual type, which is slow to compile (minutes for a few products, more in
/// sanitizer or debug builds).
/// A Var does not convert to its value, so a functor that computes with
/// extracted values (which would lose their derivatives) does not compile for
/// it; a functor that needs that (a bisection on values, say) declares
/// \code
///   static constexpr bool kForwardModeOnly = true;
/// \endcode
/// and is used in forward mode only (and not compiled for the reverse types).
/// The default, AutoDiffMode::kAutomatic, takes reverse mode when x, c and
/// theta have kReverseModeMinVariables or more variables together;
/// docs/energies.md has the measured costs of both.
#pragma once

#include <implicit/core/types.h>

#include <ceres/jet.h>

#include <algorithm>
#include <type_traits>

namespace implicit {
namespace internal {

/// ceres::Jet<Scalar, 1> that converts implicitly from arithmetic values and
/// from its base, so that the nested dual ceres::Jet<DirectionalJet, K> can be
/// built from literals (T(0.5), Eigen's Scalar(0)) like any other scalar.
template <typename Scalar>
struct DirectionalJet : ceres::Jet<Scalar, 1> {
  using Base = ceres::Jet<Scalar, 1>;
  DirectionalJet() = default;
  DirectionalJet(const Base& jet) : Base(jet) {}  // NOLINT: implicit by design
  template <typename A, typename = std::enable_if_t<std::is_arithmetic<A>::value>>
  DirectionalJet(A value) : Base(static_cast<Scalar>(value)) {}  // NOLINT
};

/// Comparisons look at the value part only, as ceres::Jet's do.
#define IMPLICIT_DIRECTIONAL_JET_COMPARISON(op)                                        \
  template <typename S>                                                                \
  bool operator op(const DirectionalJet<S>& f, const DirectionalJet<S>& g) {           \
    return f.a op g.a;                                                                 \
  }                                                                                    \
  template <typename S, typename A, typename = std::enable_if_t<std::is_arithmetic<A>::value>> \
  bool operator op(const DirectionalJet<S>& f, A g) {                                  \
    return f.a op static_cast<S>(g);                                                   \
  }                                                                                    \
  template <typename S, typename A, typename = std::enable_if_t<std::is_arithmetic<A>::value>> \
  bool operator op(A f, const DirectionalJet<S>& g) {                                  \
    return static_cast<S>(f) op g.a;                                                   \
  }
IMPLICIT_DIRECTIONAL_JET_COMPARISON(<)
IMPLICIT_DIRECTIONAL_JET_COMPARISON(<=)
IMPLICIT_DIRECTIONAL_JET_COMPARISON(>)
IMPLICIT_DIRECTIONAL_JET_COMPARISON(>=)
IMPLICIT_DIRECTIONAL_JET_COMPARISON(==)
IMPLICIT_DIRECTIONAL_JET_COMPARISON(!=)
#undef IMPLICIT_DIRECTIONAL_JET_COMPARISON

/// Numbers of type S with the nested dual `ceres::Jet<DirectionalJet<S>, K>`
/// (second-order forward mode), as `ceres::Jet<S, K>` has them: X(i, k) * x(k)
/// in a scalar loop, or X.transpose() * x in Eigen, without a cast.
#define IMPLICIT_NESTED_JET_MIXED(op)                                                         \
  template <typename S, int K>                                                                \
  ceres::Jet<DirectionalJet<S>, K> operator op(const ceres::Jet<DirectionalJet<S>, K>& f, S s) { \
    return f op ceres::Jet<DirectionalJet<S>, K>(DirectionalJet<S>(s));                       \
  }                                                                                           \
  template <typename S, int K>                                                                \
  ceres::Jet<DirectionalJet<S>, K> operator op(S s, const ceres::Jet<DirectionalJet<S>, K>& f) { \
    return ceres::Jet<DirectionalJet<S>, K>(DirectionalJet<S>(s)) op f;                       \
  }
IMPLICIT_NESTED_JET_MIXED(+)
IMPLICIT_NESTED_JET_MIXED(-)
IMPLICIT_NESTED_JET_MIXED(*)
IMPLICIT_NESTED_JET_MIXED(/)
#undef IMPLICIT_NESTED_JET_MIXED

}  // namespace internal

/// How AutoDiffEnergy computes derivatives.
enum class AutoDiffMode {
  kAutomatic,  ///< reverse when available and the variables are many enough
  kForward,    ///< dual numbers: cost grows with the number of variables
  kReverse,    ///< a tape swept backwards (reverse_tape.h)
};
/// kAutomatic's threshold: reverse mode from this many variables (x, the
/// input c and theta together). Measured by implicit-bench --autodiff
/// --autodiff-dims 16,32,64,128: reverse mode is cheaper already at n = 16, the
/// bench's smallest size (retrieval gradient 4.4-4.7 against 29 value
/// evaluations, HVP 5.9-6.4 against 82-83); smaller energies stay in forward mode, unmeasured.
constexpr Index kReverseModeMinVariables = 16;
/// Whether this build of libimplicit has reverse mode (always, since its tape
/// is libimplicit's own; kept for code written when it needed ADOL-C).
constexpr bool kHaveReverseMode = true;

namespace internal {
/// A functor that declares `static constexpr bool kForwardModeOnly = true;` is
/// never compiled for reverse mode (see AutoDiffEnergy).
template <typename Functor, typename = void>
struct ForwardModeOnly : std::false_type {};
template <typename Functor>
struct ForwardModeOnly<Functor, std::void_t<decltype(Functor::kForwardModeOnly)>>
    : std::integral_constant<bool, Functor::kForwardModeOnly> {};

// ---- forward mode's bookkeeping (AutoDiffEnergy) ----

/// f(c, len) for the chunks [c, c + len) of 0 .. n-1, K wide.
template <int K, typename F>
void ForEachChunk(Index n, F&& f) {
  for (Index c = 0; c < n; c += K) f(c, std::min<Index>(K, n - c));
}

/// The nested dual ceres::Jet<DirectionalJet<S>, K> (second derivatives).
template <typename D>
struct IsNestedDual : std::false_type {};
template <typename S, int K>
struct IsNestedDual<ceres::Jet<DirectionalJet<S>, K>> : std::true_type {};

/// Constants (every derivative part zero) of type D: the scalar itself,
/// ceres::Jet<S, K> or the nested dual.
template <typename D, typename Derived>
Vector<D> LiftConstants(const Eigen::MatrixBase<Derived>& values) {
  using S = typename Derived::Scalar;
  Vector<D> out(values.size());
  for (Index i = 0; i < values.size(); ++i) {
    if constexpr (IsNestedDual<D>::value) {
      out(i) = D(DirectionalJet<S>(values(i)));
    } else {
      out(i) = D(values(i));
    }
  }
  return out;
}

/// x + eps * dir in the inner dual of ceres::Jet<DirectionalJet<S>, K>, the
/// outer derivative parts zero.
template <int K, typename A, typename B>
auto LiftWithDirection(const Eigen::MatrixBase<A>& x, const Eigen::MatrixBase<B>& dir) {
  using Inner = DirectionalJet<typename A::Scalar>;
  Vector<ceres::Jet<Inner, K>> out(x.size());
  for (Index i = 0; i < x.size(); ++i) {
    Inner inner(x(i));
    inner.v[0] = dir(i);
    out(i) = ceres::Jet<Inner, K>(inner);
  }
  return out;
}

/// Whether f(x, theta) (kInput: f(x, c, theta)) of vectors of T returns
/// something other than a plain number: a functor that is no template on T
/// takes such vectors converted to numbers and returns a number.
template <typename F, typename T, bool kInput, typename = void>
struct ReturnsScalarOf : std::false_type {};
template <typename F, typename T>
struct ReturnsScalarOf<F, T, false,
                       std::void_t<std::invoke_result_t<const F&, const Vector<T>&, const Vector<T>&>>>
    : std::bool_constant<
          !std::is_arithmetic<std::invoke_result_t<const F&, const Vector<T>&, const Vector<T>&>>::value> {};
template <typename F, typename T>
struct ReturnsScalarOf<
    F, T, true, std::void_t<std::invoke_result_t<const F&, const Vector<T>&, const Vector<T>&, const Vector<T>&>>>
    : std::bool_constant<!std::is_arithmetic<
          std::invoke_result_t<const F&, const Vector<T>&, const Vector<T>&, const Vector<T>&>>::value> {};
}  // namespace internal

}  // namespace implicit

namespace Eigen {
/// Numbers mix with the nested dual in Eigen expressions (see
/// IMPLICIT_NESTED_JET_MIXED above).
template <typename S, int K, typename BinaryOp>
struct ScalarBinaryOpTraits<ceres::Jet<implicit::internal::DirectionalJet<S>, K>, S, BinaryOp> {
  typedef ceres::Jet<implicit::internal::DirectionalJet<S>, K> ReturnType;
};
template <typename S, int K, typename BinaryOp>
struct ScalarBinaryOpTraits<S, ceres::Jet<implicit::internal::DirectionalJet<S>, K>, BinaryOp> {
  typedef ceres::Jet<implicit::internal::DirectionalJet<S>, K> ReturnType;
};
}  // namespace Eigen
