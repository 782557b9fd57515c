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

#include <array>
#include <cmath>
#include <type_traits>

namespace implicit {
namespace reverse {

/// Exponential e^a, recorded as one node (derivative e^a).
template <typename V>
Var<V> exp(const Var<V>& a) {
  using std::exp;
  const V e = exp(ValueOf(a));
  return Var<V>::Node(e, a, e, [&] { return internal::NumberPart(e); });
}
/// Natural logarithm of a (derivative 1 / a).
template <typename V>
Var<V> log(const Var<V>& a) {
  using std::log;
  const V d = V(1.0) / ValueOf(a);
  return Var<V>::Node(log(ValueOf(a)), a, d, [&] { return -internal::SquaredNumber(d); });
}
/// log(1 + a), accurate for small a (derivative 1 / (1 + a)).
template <typename V>
Var<V> log1p(const Var<V>& a) {
  using std::log1p;
  const V d = V(1.0) / (V(1.0) + ValueOf(a));
  return Var<V>::Node(log1p(ValueOf(a)), a, d, [&] { return -internal::SquaredNumber(d); });
}
/// e^a - 1, accurate for small a (derivative e^a).
template <typename V>
Var<V> expm1(const Var<V>& a) {
  using std::exp;
  using std::expm1;
  const V d = exp(ValueOf(a));
  return Var<V>::Node(expm1(ValueOf(a)), a, d, [&] { return internal::NumberPart(d); });
}
/// Square root of a (derivative 1 / (2 sqrt(a))).
template <typename V>
Var<V> sqrt(const Var<V>& a) {
  using std::sqrt;
  const V s = sqrt(ValueOf(a));
  const V d = V(0.5) / s;  // d' = -1 / (4 s^3) = -2 d^3
  return Var<V>::Node(s, a, d, [&] { return -2 * internal::SquaredNumber(d) * internal::NumberPart(d); });
}
/// Hyperbolic tangent of a (derivative 1 - tanh(a)^2).
template <typename V>
Var<V> tanh(const Var<V>& a) {
  using std::tanh;
  const V t = tanh(ValueOf(a));
  const V d = V(1.0) - t * t;
  return Var<V>::Node(t, a, d, [&] { return -2 * internal::NumberPart(t) * internal::NumberPart(d); });
}
/// Sine of a (derivative cos(a)).
template <typename V>
Var<V> sin(const Var<V>& a) {
  using std::cos;
  using std::sin;
  const V value = sin(ValueOf(a));
  return Var<V>::Node(value, a, cos(ValueOf(a)), [&] { return -internal::NumberPart(value); });
}
/// Cosine of a (derivative -sin(a)).
template <typename V>
Var<V> cos(const Var<V>& a) {
  using std::cos;
  using std::sin;
  const V value = cos(ValueOf(a));
  return Var<V>::Node(value, a, -sin(ValueOf(a)), [&] { return -internal::NumberPart(value); });
}
/// Hyperbolic sine of a (derivative cosh(a)).
template <typename V>
Var<V> sinh(const Var<V>& a) {
  using std::cosh;
  using std::sinh;
  const V value = sinh(ValueOf(a));
  return Var<V>::Node(value, a, cosh(ValueOf(a)), [&] { return internal::NumberPart(value); });
}
/// Hyperbolic cosine of a (derivative sinh(a)).
template <typename V>
Var<V> cosh(const Var<V>& a) {
  using std::cosh;
  using std::sinh;
  const V value = cosh(ValueOf(a));
  return Var<V>::Node(value, a, sinh(ValueOf(a)), [&] { return internal::NumberPart(value); });
}
/// Tangent of a (derivative 1 + tan(a)^2).
template <typename V>
Var<V> tan(const Var<V>& a) {
  using std::tan;
  const V t = tan(ValueOf(a));
  const V d = V(1.0) + t * t;
  return Var<V>::Node(t, a, d, [&] { return 2 * internal::NumberPart(t) * internal::NumberPart(d); });
}
/// Arc tangent of a (derivative 1 / (1 + a^2)).
template <typename V>
Var<V> atan(const Var<V>& a) {
  using std::atan;
  const V d = V(1.0) / (V(1.0) + ValueOf(a) * ValueOf(a));
  return Var<V>::Node(atan(ValueOf(a)), a, d, [&] { return -2 * internal::NumberPart(ValueOf(a)) * internal::SquaredNumber(d); });
}
/// atan(y / x) in the quadrant of (x, y).
template <typename V>
Var<V> atan2(const Var<V>& y, const Var<V>& x) {
  using std::atan2;
  const V r2 = ValueOf(x) * ValueOf(x) + ValueOf(y) * ValueOf(y);
  // f = atan2(y, x): f_yy = -2xy / r^4 = -f_xx, f_xy = (y^2 - x^2) / r^4.
  return Var<V>::Node(atan2(ValueOf(y), ValueOf(x)), y, ValueOf(x) / r2, x, -ValueOf(y) / r2, [&] {
    using Number = typename Var<V>::Number;
    const Number xn = internal::NumberPart(ValueOf(x)), yn = internal::NumberPart(ValueOf(y));
    const Number r4 = internal::SquaredNumber(r2);
    return std::array<Number, 3>{-2 * xn * yn / r4, (yn * yn - xn * xn) / r4, 2 * xn * yn / r4};
  });
}
/// Error function of a (derivative 2 / sqrt(pi) exp(-a^2)).
template <typename V>
Var<V> erf(const Var<V>& a) {
  using std::erf;
  using std::exp;
  const V scale(1.1283791670955126);  // 2 / sqrt(pi)
  const V d = scale * exp(-ValueOf(a) * ValueOf(a));
  return Var<V>::Node(erf(ValueOf(a)), a, d, [&] { return -2 * internal::NumberPart(ValueOf(a)) * internal::NumberPart(d); });
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
  return Var<V>::Node(pow(x, V(p)), a, V(p) * pow(x, V(p - 1)), [&] {
    using Number = typename Var<V>::Number;
    const Number base = internal::NumberPart(x);
    return Number(p) * Number(p - 1) * pow(base, Number(p - 2));
  });
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
