/// \file
/// reverse::Var<V>: a scalar recorded on this thread's reverse::Tape<V> (or a
/// constant), the type a user energy's functor is compiled for in reverse mode:
/// arithmetic, comparisons and mixed operations with numbers, and Var as an
/// Eigen scalar. Included by reverse_tape.h (the tape, reverse::Gradient and the
/// elementary functions of reverse_functions.h), which is what to include.
///
/// \code
///   implicit::reverse::Var<double> y = x(0) * x(1) + 2.0;   // x: Vector<Var<double>>
/// \endcode
#pragma once

#include <implicit/core/dual_matrix_product.h>

#include <Eigen/Core>

#include <cstdint>
#include <type_traits>

namespace implicit {
namespace internal {
/// The number type under V: V itself, or a dual's value part's (recursively).
template <typename V, typename = void>
struct NumberTypeOf {
  using type = V;
};
template <typename V>
struct NumberTypeOf<V, std::enable_if_t<IsDual<V>::value>> {
  using type = typename NumberTypeOf<std::decay_t<decltype(std::declval<const V&>().a)>>::type;
};
}  // namespace internal

namespace reverse {

template <typename V>
class Tape;

/// A scalar recorded on this thread's Tape<V> (index() >= 0: its node's id),
/// or a constant (index() < 0, nothing recorded). Constructs from numbers as a
/// constant. A variable is an affine function of its node: its derivative in
/// the node is scale() (1 for the node itself), so that a sum with a constant,
/// a product with a number, a negation or a division by a number records
/// nothing (its partials are multiplied in where the Var is used): a scalar
/// loop's `acc += X(k, i) * x(k)` records one node of two operands, not two.
template <typename V>
class Var {
 public:
  /// The value type V: a number, or a first-order dual (forward over reverse).
  using Value = V;
  /// The number type under V (V itself, or a dual's value part's).
  using Number = typename internal::NumberTypeOf<V>::type;
  /// The constant 0.
  Var() : value_(0.0) {}
  /// The constant `value` (nothing recorded); values of type V convert implicitly.
  Var(const V& value) : value_(value) {}  // NOLINT: constants convert implicitly
  /// The constant `value` of an arithmetic type other than V.
  template <typename A, typename = std::enable_if_t<std::is_arithmetic<A>::value &&
                                                    !std::is_same<A, V>::value>>
  Var(A value) : value_(static_cast<V>(value)) {}  // NOLINT

  /// A new independent variable of value `value` on this thread's tape.
  static Var Independent(const V& value) { return Var(value, Tape<V>::ThisThread().Push0()); }
  ///@{
  /// A node on this thread's tape with one or two operands (constants among
  /// them are left out).
  /// da and db are the partial derivatives of the node in a and b.
  static Var Node(const V& value, const Var& a, const V& da) {
    if (a.index_ < 0) return Var(value);
    return Var(value, Tape<V>::ThisThread().Push1(a.index_, da * a.scale_));
  }
  static Var Node(const V& value, const Var& a, const V& da, const Var& b, const V& db) {
    if (a.index_ < 0) return Node(value, b, db);
    if (b.index_ < 0) return Node(value, a, da);
    return Var(value, Tape<V>::ThisThread().Push2(a.index_, da * a.scale_, b.index_, db * b.scale_));
  }
  ///@}
  /// value, as an affine function of a with derivative s: no node.
  static Var Affine(const V& value, const Var& a, Number s) {
    Var r(value, a.index_);
    r.scale_ = a.scale_ * s;
    return a.index_ < 0 ? Var(value) : r;
  }
  /// A Var of node id `index` (the library's recorded operations).
  Var(const V& value, std::int64_t index) : value_(value), index_(index) {}

  /// The id of this Var's node on the tape, or a negative number for a constant.
  std::int64_t index() const { return index_; }
  /// Whether this Var is recorded on the tape (index() >= 0) rather than a constant.
  bool is_variable() const { return index_ >= 0; }
  /// Whether a constant's value is a plain number (a dual's tangent zero),
  /// and that number: *s.
  static bool IsNumber(const V& value, Number* s) {
    if constexpr (std::is_same<V, Number>::value) {
      *s = value;
      return true;
    } else {
      *s = value.a;
      return internal::IsAllZero(value.v[0]) && V::DIMENSION == 1;
    }
  }
  /// The derivative d(this) / d(its node) (1 for the node itself).
  Number scale() const { return scale_; }
  /// Whether scale() is 1.
  bool unit_scale() const { return scale_ == Number(1); }
  /// The same value as a Var whose derivative in its node is 1 (a node of
  /// its own when its scale is not).
  Var Materialized() const {
    if (index_ < 0 || unit_scale()) return *this;
    return Var(value_, Tape<V>::ThisThread().Push1(index_, V(scale_)));
  }

  ///@{
  /// Compound assignment: *this = *this op b, recorded like op.
  Var& operator+=(const Var& b) { return *this = *this + b; }
  Var& operator-=(const Var& b) { return *this = *this - b; }
  Var& operator*=(const Var& b) { return *this = *this * b; }
  Var& operator/=(const Var& b) { return *this = *this / b; }
  ///@}

  /// The value. Not a conversion: computing with it would lose derivatives
  /// (the library's own recorded operations use it).
  friend const V& ValueOf(const Var& a) { return a.value_; }

  ///@{
  /// Arithmetic of Vars: the value, recorded as at most one node (a sum with a constant, a
  /// product with or division by a number and a negation record nothing).
  friend Var operator+(const Var& a) { return a; }
  friend Var operator-(const Var& a) { return Affine(-a.value_, a, Number(-1)); }
  friend Var operator+(const Var& a, const Var& b) {
    if (b.index_ < 0) return Affine(a.value_ + b.value_, a, Number(1));
    if (a.index_ < 0) return Affine(a.value_ + b.value_, b, Number(1));
    return Node(a.value_ + b.value_, a, V(1.0), b, V(1.0));
  }
  friend Var operator-(const Var& a, const Var& b) {
    if (b.index_ < 0) return Affine(a.value_ - b.value_, a, Number(1));
    if (a.index_ < 0) return Affine(a.value_ - b.value_, b, Number(-1));
    return Node(a.value_ - b.value_, a, V(1.0), b, V(-1.0));
  }
  friend Var operator*(const Var& a, const Var& b) {
    Number s;
    if (a.index_ < 0 && IsNumber(a.value_, &s)) return Affine(a.value_ * b.value_, b, s);
    if (b.index_ < 0 && IsNumber(b.value_, &s)) return Affine(a.value_ * b.value_, a, s);
    return Node(a.value_ * b.value_, a, b.value_, b, a.value_);
  }
  friend Var operator/(const Var& a, const Var& b) {
    Number s;
    if (b.index_ < 0 && IsNumber(b.value_, &s)) return Affine(a.value_ / b.value_, a, Number(1) / s);
    const V inverse = V(1.0) / b.value_;
    const V q = a.value_ * inverse;
    return Node(q, a, inverse, b, -q * inverse);
  }
  ///@}
/// Comparisons of two Vars compare their values (nothing is recorded).
#define IMPLICIT_VAR_COMPARISON(op)                                            \
  friend bool operator op(const Var& a, const Var& b) { return a.value_ op b.value_; }
  IMPLICIT_VAR_COMPARISON(<)
  IMPLICIT_VAR_COMPARISON(<=)
  IMPLICIT_VAR_COMPARISON(>)
  IMPLICIT_VAR_COMPARISON(>=)
  IMPLICIT_VAR_COMPARISON(==)
  IMPLICIT_VAR_COMPARISON(!=)
#undef IMPLICIT_VAR_COMPARISON

 private:
  V value_;
  Number scale_ = Number(1);
  std::int64_t index_ = -1;
};

/// Mixed operations with numbers: the number as a constant.
#define IMPLICIT_VAR_MIXED(op)                                                              \
  template <typename V, typename A, typename = std::enable_if_t<std::is_arithmetic<A>::value>> \
  auto operator op(const Var<V>& a, A b) {                                                   \
    return a op Var<V>(b);                                                                   \
  }                                                                                          \
  template <typename V, typename A, typename = std::enable_if_t<std::is_arithmetic<A>::value>> \
  auto operator op(A a, const Var<V>& b) {                                                   \
    return Var<V>(a) op b;                                                                   \
  }
IMPLICIT_VAR_MIXED(+)
IMPLICIT_VAR_MIXED(-)
IMPLICIT_VAR_MIXED(*)
IMPLICIT_VAR_MIXED(/)
IMPLICIT_VAR_MIXED(<)
IMPLICIT_VAR_MIXED(<=)
IMPLICIT_VAR_MIXED(>)
IMPLICIT_VAR_MIXED(>=)
IMPLICIT_VAR_MIXED(==)
IMPLICIT_VAR_MIXED(!=)
#undef IMPLICIT_VAR_MIXED

/// Whether T is a reverse::Var (std::false_type otherwise).
template <typename T>
struct IsVar : std::false_type {};
/// Any reverse::Var: std::true_type.
template <typename V>
struct IsVar<Var<V>> : std::true_type {};

}  // namespace reverse
}  // namespace implicit

namespace Eigen {
/// reverse::Var as an Eigen scalar (element-wise operations, reductions, products).
template <typename V>
struct NumTraits<implicit::reverse::Var<V>> : NumTraits<double> {
  ///@{
  /// A Var is its own real, non-integer, nested and literal type.
  typedef implicit::reverse::Var<V> Real;
  typedef implicit::reverse::Var<V> NonInteger;
  typedef implicit::reverse::Var<V> Nested;
  typedef implicit::reverse::Var<V> Literal;
  ///@}
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 1,
    ReadCost = 1,
    AddCost = 3,
    MulCost = 3
  };
};
}  // namespace Eigen
