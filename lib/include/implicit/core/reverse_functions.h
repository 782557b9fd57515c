/// \file
/// Elementary functions of reverse::Var (reverse_tape.h): exp, log, log1p,
/// expm1, sqrt, tanh, sin, cos, sinh, cosh, tan, atan, atan2, erf, abs, pow,
/// isfinite, isnan. Each records one node with its value and derivative,
/// computed in V's own arithmetic (so that the dual values of forward over
/// reverse carry their tangents). Found by argument-dependent lookup, as for
/// any scalar type:
///
/// \code
///   using std::exp;
///   T e = exp(x(0)) * sqrt(x(1));   // T = double, a Jet or a reverse::Var
/// \endcode
///
/// Included by reverse_tape.h; a Var is never without its functions.
#pragma once

#include <implicit/core/reverse_tape.h>

#include <cmath>
#include <type_traits>

namespace implicit {
namespace reverse {

/// Exponential e^a, recorded as one node (derivative e^a).
template <typename V>
Var<V> exp(const Var<V>& a) {
  using std::exp;
  const V e = exp(ValueOf(a));
  return Var<V>::Node(e, a, e);
}
/// Natural logarithm of a (derivative 1 / a).
template <typename V>
Var<V> log(const Var<V>& a) {
  using std::log;
  return Var<V>::Node(log(ValueOf(a)), a, V(1.0) / ValueOf(a));
}
/// log(1 + a), accurate for small a (derivative 1 / (1 + a)).
template <typename V>
Var<V> log1p(const Var<V>& a) {
  using std::log1p;
  return Var<V>::Node(log1p(ValueOf(a)), a, V(1.0) / (V(1.0) + ValueOf(a)));
}
/// e^a - 1, accurate for small a (derivative e^a).
template <typename V>
Var<V> expm1(const Var<V>& a) {
  using std::exp;
  using std::expm1;
  return Var<V>::Node(expm1(ValueOf(a)), a, exp(ValueOf(a)));
}
/// Square root of a (derivative 1 / (2 sqrt(a))).
template <typename V>
Var<V> sqrt(const Var<V>& a) {
  using std::sqrt;
  const V s = sqrt(ValueOf(a));
  return Var<V>::Node(s, a, V(0.5) / s);
}
/// Hyperbolic tangent of a (derivative 1 - tanh(a)^2).
template <typename V>
Var<V> tanh(const Var<V>& a) {
  using std::tanh;
  const V t = tanh(ValueOf(a));
  return Var<V>::Node(t, a, V(1.0) - t * t);
}
/// Sine of a (derivative cos(a)).
template <typename V>
Var<V> sin(const Var<V>& a) {
  using std::cos;
  using std::sin;
  return Var<V>::Node(sin(ValueOf(a)), a, cos(ValueOf(a)));
}
/// Cosine of a (derivative -sin(a)).
template <typename V>
Var<V> cos(const Var<V>& a) {
  using std::cos;
  using std::sin;
  return Var<V>::Node(cos(ValueOf(a)), a, -sin(ValueOf(a)));
}
/// Hyperbolic sine of a (derivative cosh(a)).
template <typename V>
Var<V> sinh(const Var<V>& a) {
  using std::cosh;
  using std::sinh;
  return Var<V>::Node(sinh(ValueOf(a)), a, cosh(ValueOf(a)));
}
/// Hyperbolic cosine of a (derivative sinh(a)).
template <typename V>
Var<V> cosh(const Var<V>& a) {
  using std::cosh;
  using std::sinh;
  return Var<V>::Node(cosh(ValueOf(a)), a, sinh(ValueOf(a)));
}
/// Tangent of a (derivative 1 + tan(a)^2).
template <typename V>
Var<V> tan(const Var<V>& a) {
  using std::tan;
  const V t = tan(ValueOf(a));
  return Var<V>::Node(t, a, V(1.0) + t * t);
}
/// Arc tangent of a (derivative 1 / (1 + a^2)).
template <typename V>
Var<V> atan(const Var<V>& a) {
  using std::atan;
  return Var<V>::Node(atan(ValueOf(a)), a, V(1.0) / (V(1.0) + ValueOf(a) * ValueOf(a)));
}
/// atan(y / x) in the quadrant of (x, y).
template <typename V>
Var<V> atan2(const Var<V>& y, const Var<V>& x) {
  using std::atan2;
  const V r2 = ValueOf(x) * ValueOf(x) + ValueOf(y) * ValueOf(y);
  return Var<V>::Node(atan2(ValueOf(y), ValueOf(x)), y, ValueOf(x) / r2, x, -ValueOf(y) / r2);
}
/// Error function of a (derivative 2 / sqrt(pi) exp(-a^2)).
template <typename V>
Var<V> erf(const Var<V>& a) {
  using std::erf;
  using std::exp;
  const V scale(1.1283791670955126);  // 2 / sqrt(pi)
  return Var<V>::Node(erf(ValueOf(a)), a, scale * exp(-ValueOf(a) * ValueOf(a)));
}
/// |a|, with derivative 0 at a = 0.
template <typename V>
Var<V> abs(const Var<V>& a) {
  const bool negative = ValueOf(a) < V(0.0);
  const bool zero = ValueOf(a) == V(0.0);
  return Var<V>::Node(negative ? V(-ValueOf(a)) : ValueOf(a), a,
                      V(zero ? 0.0 : (negative ? -1.0 : 1.0)));
}
/// |a|, as abs().
template <typename V>
Var<V> fabs(const Var<V>& a) {
  return abs(a);
}
/// a^p for a number p.
template <typename V, typename A, typename = std::enable_if_t<std::is_arithmetic<A>::value>>
Var<V> pow(const Var<V>& a, A p) {
  using std::pow;
  const V x = ValueOf(a);
  return Var<V>::Node(pow(x, V(p)), a, V(p) * pow(x, V(p - 1)));
}
/// a^b = exp(b log a) for a > 0.
template <typename V>
Var<V> pow(const Var<V>& a, const Var<V>& b) {
  return exp(b * log(a));
}
/// Whether a's value is finite (nothing is recorded).
template <typename V>
bool isfinite(const Var<V>& a) {
  using std::isfinite;
  return isfinite(ValueOf(a));
}
/// Whether a's value is NaN (nothing is recorded).
template <typename V>
bool isnan(const Var<V>& a) {
  using std::isnan;
  return isnan(ValueOf(a));
}

}  // namespace reverse
}  // namespace implicit
