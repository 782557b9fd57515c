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

#include <implicit/core/autodiff_mode.h>
#include <implicit/core/dual_matrix_product.h>

#include <Eigen/Core>

#include <array>
#include <cstdint>
#include <type_traits>

/// \def IMPLICIT_REVERSE_NOINLINE
/// A function kept out of line, so that the hot paths of the tape that call
/// it stay small enough for the compiler to inline them.
#if defined(__GNUC__)
#define IMPLICIT_REVERSE_NOINLINE __attribute__((noinline))
#else
#define IMPLICIT_REVERSE_NOINLINE
#endif
/// \def IMPLICIT_REVERSE_INLINE
/// A hot path of the tape (a node's recording) inlined into its caller.
#if defined(__GNUC__)
#define IMPLICIT_REVERSE_INLINE inline __attribute__((always_inline))
#else
#define IMPLICIT_REVERSE_INLINE inline
#endif

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
/// The number under a value: v itself, or a dual's value part's (recursively).
template <typename V>
typename NumberTypeOf<V>::type NumberPart(const V& v) {
  if constexpr (IsDual<V>::value) {
    return NumberPart(v.a);
  } else {
    return v;
  }
}
/// The square of a value's number part (a factor of second derivatives).
template <typename V>
typename NumberTypeOf<V>::type SquaredNumber(const V& v) {
  const typename NumberTypeOf<V>::type n = NumberPart(v);
  return n * n;
}
}  // namespace internal

namespace reverse {

template <typename V>
class Tape;

/// A scalar recorded on this thread's Tape<V> (index() >= 0: its node's id),
/// or a constant (index() < 0, nothing recorded). Constructs from numbers as a
/// constant. A variable is an affine function of its node: its derivative in
/// the node is scale() (1 for the node itself), so that a sum with a constant,
/// a product with a number, a negation or a division by a number records
/// nothing (its partials are multiplied in where the Var is used).
///
/// Accumulation: `acc += b` (and `-=`) where acc holds the last node recorded
/// and no other Var refers to that node adds b as one more operand of that
/// node instead of recording a new one; and when b is a temporary holding the
/// last node (`acc += x(k) * y(k)`), acc is added to b's node, which acc then
/// holds. So a scalar loop's `acc += X(k, i) * x(k)` costs one operand (a
/// partial and a node number) per term, and `acc += x(k) * y(k)` one node.
/// To know that no other Var refers to a node, a Var carries a flag set on
/// both sides when it is copied (or another Var is made from it by a number:
/// a scaled or shifted Var); a flagged Var's node is never changed. A named
/// Var given as `acc += std::move(b)` may be taken the same way; it is then
/// left unusable (using it as a variable throws std::logic_error).
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
  IMPLICIT_REVERSE_INLINE static Var Node(const V& value, const Var& a, const V& da) {
    if (a.index_ < 0) return Var(value);
    return Var(value, Tape<V>::ThisThread().Push1(a.index(), da * a.scale_));
  }
  IMPLICIT_REVERSE_INLINE static Var Node(const V& value, const Var& a, const V& da, const Var& b, const V& db) {
    if (a.index_ < 0) return Node(value, b, db);
    if (b.index_ < 0) return Node(value, a, da);
    return Var(value, Tape<V>::ThisThread().Push2(a.index(), da * a.scale_, b.index(), db * b.scale_));
  }
  ///@}
  ///@{
  /// Node() of an operation whose partials depend on its operands' values:
  /// `second()` returns its second derivatives in the operands' values (a
  /// number haa; for two operands {haa, hab, hbb}), called only when the tape
  /// keeps them (a linearizing recording: Tape::SetDirection).
  template <typename H>
  IMPLICIT_REVERSE_INLINE static Var Node(const V& value, const Var& a, const V& da, H&& second) {
    if (a.index_ < 0) return Var(value);
    Tape<V>& tape = Tape<V>::ThisThread();
    if constexpr (Tape<V>::kLinearizable) {
      if (tape.linearizing()) {
        return Var(value, tape.Push1(a.index(), da * a.scale_, Number(second()) * a.scale_ * a.scale_));
      }
    }
    return Var(value, tape.Push1(a.index(), da * a.scale_));
  }
  template <typename H>
  IMPLICIT_REVERSE_INLINE static Var Node(const V& value, const Var& a, const V& da, const Var& b, const V& db,
                                          H&& second) {
    if (a.index_ < 0) return Node(value, b, db, [&] { return second()[2]; });
    if (b.index_ < 0) return Node(value, a, da, [&] { return second()[0]; });
    Tape<V>& tape = Tape<V>::ThisThread();
    if constexpr (Tape<V>::kLinearizable) {
      if (tape.linearizing()) {
        const std::array<Number, 3> h = second();
        return Var(value, tape.Push2(a.index(), da * a.scale_, b.index(), db * b.scale_, h[0] * a.scale_ * a.scale_,
                                     h[1] * a.scale_ * b.scale_, h[2] * b.scale_ * b.scale_));
      }
    }
    return Var(value, tape.Push2(a.index(), da * a.scale_, b.index(), db * b.scale_));
  }
  ///@}
  /// value, as an affine function of a with derivative s: no node.
  static Var Affine(const V& value, const Var& a, Number s) {
    if (a.index_ < 0) return Var(value);
    a.index_ |= kShared;  // both refer to a's node now
    Var r(value, a.index_);
    r.scale_ = a.scale_ * s;
    return r;
  }
  /// A Var of node id `index` (the library's recorded operations).
  Var(const V& value, std::int64_t index) : value_(value), index_(index) {}
  ///@{
  /// Copies: the copy and the original refer to the same node, so both are
  /// flagged as sharing it (see "Accumulation" above).
  Var(const Var& other) : value_(other.value_), scale_(other.scale_), index_(other.Share()) {}
  Var& operator=(const Var& other) {
    index_ = other.Share();
    value_ = other.value_;
    scale_ = other.scale_;
    return *this;
  }
  ///@}

  /// The id of this Var's node on the tape, or a negative number for a constant.
  std::int64_t index() const { return index_ < 0 ? index_ : index_ & ~kShared; }
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
    return Var(value_, Tape<V>::ThisThread().Push1(index(), V(scale_)));
  }

  ///@{
  /// Compound assignment: *this = *this op b, recorded like op; a sum or
  /// difference may instead add b to this Var's node (see "Accumulation").
  Var& operator+=(const Var& b) { return Accumulate(b, Number(1), false); }
  Var& operator-=(const Var& b) { return Accumulate(b, Number(-1), false); }
  Var& operator+=(Var&& b) { return Accumulate(b, Number(1), &b != this); }
  Var& operator-=(Var&& b) { return Accumulate(b, Number(-1), &b != this); }
  Var& operator*=(const Var& b) { return Take(*this * b); }
  Var& operator/=(const Var& b) { return Take(*this / b); }
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
    return Node(a.value_ * b.value_, a, b.value_, b, a.value_,
                [] { return std::array<Number, 3>{Number(0), Number(1), Number(0)}; });
  }
  friend Var operator/(const Var& a, const Var& b) {
    Number s;
    if (b.index_ < 0 && IsNumber(b.value_, &s)) return Affine(a.value_ / b.value_, a, Number(1) / s);
    const V inverse = V(1.0) / b.value_;
    const V q = a.value_ * inverse;
    // q = a / b: d2q/da2 = 0, d2q/da db = -1/b^2, d2q/db2 = 2 q / b^2.
    return Node(q, a, inverse, b, -q * inverse, [&] {
      const Number i = internal::NumberPart(inverse), n = internal::NumberPart(q);
      return std::array<Number, 3>{Number(0), -i * i, Number(2) * n * i * i};
    });
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
  /// The flag of a Var whose node another Var refers to too (bit 62 of a
  /// variable's index_; the tape's ids leave it clear).
  static constexpr std::int64_t kShared = std::int64_t(1) << 62;

  /// index_, flagged as shared (a variable's) for a copy of this Var.
  std::int64_t Share() const {
    if (index_ >= 0) index_ |= kShared;
    return index_;
  }
  /// *this = r, r a Var made for it (not a copy: r's node is not shared with r).
  Var& Take(const Var& r) {
    value_ = r.value_;
    scale_ = r.scale_;
    index_ = r.index_;
    return *this;
  }
  /// Whether a derivative in a node is 1 or -1 (its own inverse).
  static bool UnitMagnitude(Number scale) { return scale == Number(1) || scale == Number(-1); }
  /// *this += sign * b (sign 1 or -1), recorded as an operand added to this
  /// Var's node, or to b's node when b is `disposable` (a temporary or moved
  /// from: it is then left unusable), or else as a new node. A node gets an
  /// operand only when it is the last one recorded (Tape::Extend) and no
  /// other Var refers to it; a constant b shifts the value only. The common
  /// case (a term added to this Var's node) inline, the others out of line
  /// (AddOther, given copies: a loop's accumulator stays in registers).
  Var& Accumulate(const Var& b, Number sign, bool disposable) {
    const V sum = sign > 0 ? value_ + b.value_ : value_ - b.value_;
    // this node + sign b.scale_ scale_ b: times scale_ (scale_^2 = 1) the sum.
    if (b.index_ < 0 || (index_ >= 0 && (index_ & kShared) == 0 && UnitMagnitude(scale_) &&
                         Tape<V>::ThisThread().Extend(index_, b.index(), V(sign * b.scale_ * scale_)))) {
      value_ = sum;
      return *this;
    }
    const Recorded r = AddOther({scale_, index_}, {b.scale_, b.index_}, sign, disposable);
    b.index_ = r.b_index;
    scale_ = r.scale;
    index_ = r.index;
    value_ = sum;
    return *this;
  }
  /// A Var's place on the tape: its derivative in its node and the node's id.
  struct Place {
    Number scale;
    std::int64_t index;
  };
  /// Accumulate's result when a's node takes no operand (b a variable): the
  /// sum's place, and b's index after it (flagged as shared, or given up).
  struct Recorded : Place {
    std::int64_t b_index;
  };
  IMPLICIT_REVERSE_NOINLINE static Recorded AddOther(Place a, Place b, Number sign, bool disposable) {
    const Number t = sign * b.scale;  // the sum = a.scale (a's node) + t (b's node)
    const bool take_b = disposable && (b.index & kShared) == 0;
    if (a.index < 0) {  // a constant plus b: b's node, held by the sum alone when b is given up
      if (take_b) return {{t, b.index}, kGivenUp};
      return {{t, b.index | kShared}, b.index | kShared};
    }
    const std::int64_t a_node = a.index & ~kShared;
    if (take_b && UnitMagnitude(b.scale) &&
        Tape<V>::ThisThread().Extend(b.index, a_node, V(a.scale * t))) {
      return {{t, b.index}, kGivenUp};  // b's node + a.scale t (a's node): times t (t^2 = 1) the sum
    }
    const std::int64_t node = Tape<V>::ThisThread().Push2(a_node, V(a.scale), b.index & ~kShared, V(t));
    return {{Number(1), node}, take_b ? kGivenUp : b.index};
  }
  /// The index of a Var given up to an accumulation (no recording's node: using it throws).
  static constexpr std::int64_t kGivenUp = (std::int64_t(0x3fffffff) << 32) | 0xffffffff;

  V value_;
  Number scale_ = Number(1);
  /// The node's id (a variable), or -1 (a constant); the kShared flag aside.
  mutable std::int64_t index_ = -1;
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

namespace internal {
/// Eigen's heap storage of the tape's Var types: allocated without
/// default-constructing each Var, as Eigen allocates a matrix of doubles
/// (uninitialised until written). Every matrix of Vars Eigen allocates is
/// written before it is read -- a product's or an expression's result, a
/// resize before an assignment -- and constructing first was a second pass
/// over it: for an attention energy's 256 x 256 scores 1.5 MB (2 MB with
/// duals) written twice per recording, about 5% of its gradient.
/// `Var()` itself is still the constant 0, so a Var default-constructed
/// elsewhere (a fixed-size Eigen matrix, a std::vector) is 0 as before. Code
/// that reads a dynamic matrix's coefficient before writing it was wrong with
/// doubles and stays wrong: use setZero() / Zero() as with doubles.
/// Trivially destructible, so Eigen's destruction loop before freeing is empty.
#define IMPLICIT_VAR_UNCONSTRUCTED_STORAGE(Value, Align)                                              \
  template <>                                                                                         \
  inline implicit::reverse::Var<Value>* conditional_aligned_new_auto<implicit::reverse::Var<Value>, Align>( \
      std::size_t size) {                                                                             \
    static_assert(std::is_trivially_destructible<implicit::reverse::Var<Value>>::value,               \
                  "a Var's storage is freed without destroying its elements");                       \
    if (size == 0) return nullptr;                                                                    \
    check_size_for_overflow<implicit::reverse::Var<Value>>(size);                                     \
    return static_cast<implicit::reverse::Var<Value>*>(                                               \
        conditional_aligned_malloc<Align>(sizeof(implicit::reverse::Var<Value>) * size));             \
  }
IMPLICIT_VAR_UNCONSTRUCTED_STORAGE(double, true)
IMPLICIT_VAR_UNCONSTRUCTED_STORAGE(double, false)
IMPLICIT_VAR_UNCONSTRUCTED_STORAGE(float, true)
IMPLICIT_VAR_UNCONSTRUCTED_STORAGE(float, false)
IMPLICIT_VAR_UNCONSTRUCTED_STORAGE(implicit::internal::DirectionalJet<double>, true)
IMPLICIT_VAR_UNCONSTRUCTED_STORAGE(implicit::internal::DirectionalJet<double>, false)
IMPLICIT_VAR_UNCONSTRUCTED_STORAGE(implicit::internal::DirectionalJet<float>, true)
IMPLICIT_VAR_UNCONSTRUCTED_STORAGE(implicit::internal::DirectionalJet<float>, false)
#undef IMPLICIT_VAR_UNCONSTRUCTED_STORAGE
}  // namespace internal
}  // namespace Eigen
