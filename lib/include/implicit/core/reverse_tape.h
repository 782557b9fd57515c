// Reverse-mode derivatives of a scalar function written on a scalar type T:
// the engine behind AutoDiffEnergy's reverse mode (autodiff_energy.h), usable
// on its own for any f: R^n -> R written as a template on T.
//
// reverse::Var<V> is a value of type V together with its place on this
// thread's reverse::Tape<V>: every operation on Vars (and each function of
// reverse_functions.h) appends one node holding its operands and the partial
// derivatives there. One reverse sweep over the tape then
// gives the derivatives of the result in every variable, so a gradient costs
// a small multiple of one evaluation whatever n is. With V a first-order dual
// number (internal::DirectionalJet, value and one tangent), the same sweep
// gives the gradient and, in the tangents, the Hessian-vector product H v
// (forward over reverse): the function is recorded with the variables'
// tangents set to v, and the adjoints' tangents are d/dt grad f(z + t v).
//
//   using Var = implicit::reverse::Var<double>;
//   std::vector<double> grad(n);
//   const double value = implicit::reverse::Gradient<double>(
//       z.data(), n, [&](const implicit::Vector<Var>& x) { return f(x); }, grad.data());
//
// The tape is recorded again at every evaluation, so an `if` on values, a max
// or a sort are differentiated on the branch taken at that point. A Var does
// not convert to its value: code that computes with extracted values would
// get derivatives that miss their dependence, so it does not compile.
// Several operations on whole vectors are recorded as one node each
// (ad::LogSumExp, ad::Dot in ad_functions.h): far fewer nodes than their
// scalar loops, which is what makes dense products cheap to differentiate.
//
// Tapes are per thread (thread_local): threads differentiate at the same time
// without locks. One recording per thread and value type at a time (a nested
// reverse::Gradient on the same thread and type throws std::logic_error); Vars
// live only during their recording (one used in a later recording, or on
// another thread, throws std::logic_error). A thread's tape keeps its memory for the
// next recording (about 12 bytes per operand for double values).
#pragma once

#include <implicit/core/types.h>

#include <ceres/jet.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace implicit {
namespace internal {
// Whether a vector expression exposes its storage (data(), innerStride()):
// plain vectors, blocks, maps (Eigen's strided IndexedView has no data()).
template <typename E, typename = void>
struct ExposesStorage : std::false_type {};
template <typename E>
struct ExposesStorage<E, std::void_t<decltype(std::declval<const E&>().data()),
                                     decltype(std::declval<const E&>().innerStride())>>
    : std::true_type {};
}  // namespace internal

namespace reverse {

template <typename V>
class Var;

// The nodes recorded on one thread for values of type V. Node i has the
// partial derivatives partials_[ends_[i-1] .. ends_[i]) in the operands listed
// at the same places of operands_, or is a run: a vector node over the
// consecutive nodes first, first + 1, ... (a dot product of numbers with a
// block of variables) whose partials are numbers (constants even when V is a
// dual: their tangents are zero), stored once in numbers_; such a node has one
// operand, ~(its index in runs_) < 0. Independent variables are nodes without
// operands. A Var knows its node by an id, the recording's number times 2^32
// plus the node: an id of another recording (a Var kept from an earlier
// evaluation, or from another thread) is refused with std::logic_error, never
// read as a node of this one.
template <typename V>
class Tape {
 public:
  // This thread's tape.
  static Tape& ThisThread() {
    static thread_local Tape tape;
    return tape;
  }

  Index size() const { return static_cast<Index>(ends_.size()); }

  // Clears the tape and marks it recording until EndRecording (throws
  // std::logic_error when it already is: nested recordings on one thread).
  void BeginRecording() {
    if (recording_) {
      throw std::logic_error(
          "reverse::Tape: a recording is already in progress on this thread (nested "
          "reverse-mode evaluations of the same scalar type are not supported)");
    }
    ends_.clear();
    operands_.clear();
    partials_.clear();
    runs_.clear();
    numbers_.clear();
    known_runs_.clear();
    recording_ = true;
    recording_number_ = (recording_number_ + 1) & 0x7fffffff;
  }
  void EndRecording() { recording_ = false; }

  // Appends a node (operands by their ids); returns its id.
  std::int64_t Push0() { return Close(); }
  std::int64_t Push1(std::int64_t a, const V& da) {
    operands_.push_back(Node(a));
    partials_.push_back(da);
    return Close();
  }
  std::int64_t Push2(std::int64_t a, const V& da, std::int64_t b, const V& db) {
    operands_.push_back(Node(a));
    operands_.push_back(Node(b));
    partials_.push_back(da);
    partials_.push_back(db);
    return Close();
  }
  // A node of many operands: AddOperand for each, then Close.
  void AddOperand(std::int64_t a, const V& da) {
    operands_.push_back(Node(a));
    partials_.push_back(da);
  }
  // A node whose operands are the numbers.size() consecutive nodes of ids
  // first, first + 1, ..., with the partials `numbers` (a vector of numbers:
  // double or float); returns its id. The node must have no other operands.
  // With `persistent` the caller promises that the numbers' storage stays
  // unchanged until the sweeps of this recording are done (ad::Persistent):
  // the node then points to it (when it is contiguous, of the tape's number
  // type) instead of copying it.
  template <typename Numbers>
  std::int64_t PushRun(std::int64_t first, const Numbers& numbers, bool persistent = false) {
    if (operands_.size() != (ends_.empty() ? 0 : ends_.back())) {
      throw std::logic_error("reverse::Tape::PushRun: the node already has operands");
    }
    const Index count = numbers.size();
    if (count <= 0) return Close();
    const std::int32_t node = Node(first);
    Node(first + count - 1);  // the last one is of this recording too
    if (runs_.size() >= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
      throw std::length_error("reverse::Tape: more than 2^31 runs in one recording");
    }
    runs_.push_back({node, numbers_.size(), static_cast<std::size_t>(count), nullptr});
    operands_.push_back(~static_cast<std::int32_t>(runs_.size() - 1));
    partials_.push_back(V(0.0));  // unused
    // Pointed to, or appended as a range (no zero-filling first), when stored
    // contiguously.
    using Stored = typename Numbers::Scalar;
    if constexpr (std::is_same<Stored, Number>::value && internal::ExposesStorage<Numbers>::value) {
      if (numbers.innerStride() == 1) {
        if (persistent) {
          runs_.back().held = numbers.data();
        } else {
          numbers_.insert(numbers_.end(), numbers.data(), numbers.data() + count);
        }
        return Close();
      }
    }
    const std::size_t begin = numbers_.size();
    numbers_.resize(begin + static_cast<std::size_t>(count));
    Number* out = numbers_.data() + begin;
    for (Index i = 0; i < count; ++i) out[i] = static_cast<Number>(numbers.coeff(i));
    return Close();
  }
  std::int64_t Close() {
    if (ends_.size() >= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
      throw std::length_error("reverse::Tape: more than 2^31 nodes in one recording");
    }
    ends_.push_back(operands_.size());
    return (static_cast<std::int64_t>(recording_number_) << 32) |
           static_cast<std::int64_t>(ends_.size() - 1);
  }
  // The node of id `id` on this recording (throws for an id of another).
  std::int32_t Node(std::int64_t id) const {
    const std::int64_t node = id & 0xffffffff;
    if (!recording_ || (id >> 32) != recording_number_ ||
        node >= static_cast<std::int64_t>(ends_.size())) {
      throw std::logic_error(
          "reverse::Var: a variable of another recording (kept from an earlier evaluation or "
          "made on another thread) used in this one");
    }
    return static_cast<std::int32_t>(node);
  }

  // Declares vars[0 .. size) a known run: Vars of consecutive nodes (checked;
  // std::logic_error otherwise) whose values are also stored contiguously at
  // values[0 .. size), both unchanged until the recording ends (the caller's
  // promise). A vector operation on a stretch of it (ad::Dot) then finds its
  // nodes and values by one lookup instead of reading every Var.
  void AddKnownRun(const Var<V>* vars, Index size, const V* values) {
    if (size <= 0) return;
    const std::int64_t first = vars[0].index();
    for (Index i = 0; i < size; ++i) {
      if (first < 0 || vars[i].index() != first + static_cast<std::int64_t>(i)) {
        throw std::logic_error("reverse::Tape::AddKnownRun: the Vars are not consecutive nodes");
      }
    }
    Node(first + size - 1);  // of this recording
    known_runs_.push_back({vars, size, first, values});
  }
  // When vars[0 .. size) lies within a known run: true, with the id of its
  // first node and where its values are.
  bool FindKnownRun(const Var<V>* vars, Index size, std::int64_t* first, const V** values) const {
    const std::less<const Var<V>*> before;
    for (const KnownRun& run : known_runs_) {
      if (before(vars, run.vars) || before(run.vars + run.size, vars + size)) continue;
      const Index offset = static_cast<Index>(vars - run.vars);
      *first = run.first + offset;
      *values = run.values + offset;
      return true;
    }
    return false;
  }

  // The adjoints d(node of id output)/d(node i) of the first `count` nodes
  // (the independent variables when they were recorded first) into
  // adjoints[i].
  void Adjoints(std::int64_t output, Index count, V* adjoints) const {
    const std::size_t out = static_cast<std::size_t>(Node(output));
    adjoints_.assign(ends_.size(), V(0.0));
    adjoints_[out] = V(1.0);
    for (std::size_t i = out + 1; i-- > 0;) {
      const V g = adjoints_[i];
      if (IsZero(g)) continue;
      const std::size_t begin = i == 0 ? 0 : ends_[i - 1], end = ends_[i];
      if (begin == end) continue;
      if (operands_[begin] < 0) {  // a run
        const Run& run = runs_[static_cast<std::size_t>(~operands_[begin])];
        V* adjoint = adjoints_.data() + run.first;
        const Number* partial = run.held != nullptr ? run.held : numbers_.data() + run.begin;
        for (std::size_t k = 0; k < run.count; ++k) adjoint[k] += g * partial[k];
        continue;
      }
      for (std::size_t k = begin; k < end; ++k) {
        adjoints_[static_cast<std::size_t>(operands_[k])] += partials_[k] * g;
      }
    }
    for (Index i = 0; i < count; ++i) adjoints[i] = adjoints_[static_cast<std::size_t>(i)];
  }

 private:
  template <typename S, typename = std::enable_if_t<std::is_arithmetic<S>::value>>
  static bool IsZero(S s) {
    return s == S(0);
  }
  template <typename S, int N>
  static bool IsZero(const ceres::Jet<S, N>& s) {
    if (s.a != S(0)) return false;
    for (int k = 0; k < N; ++k) {
      if (s.v[k] != S(0)) return false;
    }
    return true;
  }

  // The number type under V (V itself, or a dual's value part's).
  template <typename S, typename = void>
  struct NumberType {
    using type = S;
  };
  template <typename S>
  struct NumberType<S, std::enable_if_t<!std::is_arithmetic<S>::value>> {
    using type = typename NumberType<std::decay_t<decltype(std::declval<const S&>().a)>>::type;
  };
  using Number = typename NumberType<V>::type;

  struct Run {
    std::int32_t first;  // the first operand's node
    std::size_t begin;   // its partials: numbers_[begin .. begin + count),
    std::size_t count;
    const Number* held;  // or held[0 .. count) (the caller's, persistent)
  };
  struct KnownRun {
    const Var<V>* vars;
    Index size;
    std::int64_t first;
    const V* values;
  };

  std::vector<std::size_t> ends_;
  std::vector<KnownRun> known_runs_;
  std::vector<std::int32_t> operands_;
  std::vector<V> partials_;
  std::vector<Run> runs_;
  std::vector<Number> numbers_;
  mutable std::vector<V> adjoints_;
  bool recording_ = false;
  std::int64_t recording_number_ = 0;  // < 2^31
};

// A scalar recorded on this thread's Tape<V> (index() >= 0: its node's id),
// or a constant (index() < 0, nothing recorded). Constructs from numbers as a
// constant.
template <typename V>
class Var {
 public:
  using Value = V;
  Var() : value_(0.0) {}
  Var(const V& value) : value_(value) {}  // NOLINT: constants convert implicitly
  template <typename A, typename = std::enable_if_t<std::is_arithmetic<A>::value &&
                                                    !std::is_same<A, V>::value>>
  Var(A value) : value_(static_cast<V>(value)) {}  // NOLINT

  // A new independent variable of value `value` on this thread's tape.
  static Var Independent(const V& value) { return Var(value, Tape<V>::ThisThread().Push0()); }
  // A node on this thread's tape with one or two operands (constants among
  // them are left out).
  static Var Node(const V& value, const Var& a, const V& da) {
    if (a.index_ < 0) return Var(value);
    return Var(value, Tape<V>::ThisThread().Push1(a.index_, da));
  }
  static Var Node(const V& value, const Var& a, const V& da, const Var& b, const V& db) {
    if (a.index_ < 0) return Node(value, b, db);
    if (b.index_ < 0) return Node(value, a, da);
    return Var(value, Tape<V>::ThisThread().Push2(a.index_, da, b.index_, db));
  }
  // A Var of node id `index` (the library's recorded operations).
  Var(const V& value, std::int64_t index) : value_(value), index_(index) {}

  std::int64_t index() const { return index_; }
  bool is_variable() const { return index_ >= 0; }

  Var& operator+=(const Var& b) { return *this = *this + b; }
  Var& operator-=(const Var& b) { return *this = *this - b; }
  Var& operator*=(const Var& b) { return *this = *this * b; }
  Var& operator/=(const Var& b) { return *this = *this / b; }

  // The value. Not a conversion: computing with it would lose derivatives
  // (the library's own recorded operations use it).
  friend const V& ValueOf(const Var& a) { return a.value_; }

  friend Var operator+(const Var& a) { return a; }
  friend Var operator-(const Var& a) { return Node(-a.value_, a, V(-1.0)); }
  friend Var operator+(const Var& a, const Var& b) {
    return Node(a.value_ + b.value_, a, V(1.0), b, V(1.0));
  }
  friend Var operator-(const Var& a, const Var& b) {
    return Node(a.value_ - b.value_, a, V(1.0), b, V(-1.0));
  }
  friend Var operator*(const Var& a, const Var& b) {
    return Node(a.value_ * b.value_, a, b.value_, b, a.value_);
  }
  friend Var operator/(const Var& a, const Var& b) {
    const V inverse = V(1.0) / b.value_;
    const V q = a.value_ * inverse;
    return Node(q, a, inverse, b, -q * inverse);
  }
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
  std::int64_t index_ = -1;
};

// Mixed operations with numbers: the number as a constant.
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

template <typename T>
struct IsVar : std::false_type {};
template <typename V>
struct IsVar<Var<V>> : std::true_type {};

// f(z) (f: Vector<Var<V>> -> Var<V>, z of `size` values) and its gradient in
// z into gradient[0 .. size). With V a DirectionalJet the values' tangents
// are the direction: gradient[i].v[0] is then (H v)_i.
template <typename V, typename F>
V Gradient(const V* z, Index size, F&& f, V* gradient) {
  Tape<V>& tape = Tape<V>::ThisThread();
  tape.BeginRecording();
  struct EndAtExit {
    Tape<V>& tape;
    ~EndAtExit() { tape.EndRecording(); }
  } end_at_exit{tape};
  Vector<Var<V>> vars(size);
  for (Index i = 0; i < size; ++i) vars(i) = Var<V>::Independent(z[i]);
  tape.AddKnownRun(vars.data(), size, z);
  const Var<V> out = f(static_cast<const Vector<Var<V>>&>(vars));
  if (out.is_variable()) {
    tape.Adjoints(out.index(), size, gradient);
  } else {
    for (Index i = 0; i < size; ++i) gradient[i] = V(0.0);
  }
  return ValueOf(out);
}

}  // namespace reverse
}  // namespace implicit

namespace Eigen {
// ad::Var as an Eigen scalar (element-wise operations, reductions, products).
template <typename V>
struct NumTraits<implicit::reverse::Var<V>> : NumTraits<double> {
  typedef implicit::reverse::Var<V> Real;
  typedef implicit::reverse::Var<V> NonInteger;
  typedef implicit::reverse::Var<V> Nested;
  typedef implicit::reverse::Var<V> Literal;
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

// exp, log, sqrt, tanh, ... of Vars (found by argument-dependent lookup).
#include <implicit/core/reverse_functions.h>
