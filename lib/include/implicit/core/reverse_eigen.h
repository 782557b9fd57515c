/// \file
/// Eigen expressions of reverse::Var recorded at the level of whole matrices:
/// what makes a user energy written in ordinary Eigen as cheap to
/// differentiate as one written with the ad:: blocks. Included by
/// reverse_tape.h; nothing to call.
///
/// \code
///   template <typename T>
///   T operator()(const implicit::Vector<T>& x, const implicit::Vector<T>&) const {
///     const implicit::Vector<T> s = beta * (X.transpose() * x);  // X: the functor's Matrix<double>
///     const T m = s.maxCoeff();
///     return 0.5 * x.squaredNorm() - (m + log((s.array() - m).exp().sum())) / beta;
///   }
/// \endcode
///
/// What is recorded how:
///  * every matrix product of Eigen (A * B, A * x, x^T A, u v^T, x^T y) whose
///    scalar is a Var is one block on the tape (Tape::PushProduct): its
///    value and its reverse are products of numbers (internal::Gemm), two per
///    sweep, instead of one tape node per multiply-add. A factor may be data
///    (numbers: X.cast<T>() or, mixed, X itself), variables (x, a Map of
///    theta, another product), transposed, negated or scaled by a number
///    (beta * X^T); data stays numbers, no Var is made per coefficient.
///  * data the functor holds (a Matrix, Map or Ref member of the functor, or a
///    block of one) is read by the tape where it is: AutoDiffEnergy marks its
///    functor's bytes as persistent while it records (PersistentScope below),
///    and a product factor whose storage belongs to an object inside them is
///    not copied. Any other data (a local matrix, an expression of numbers)
///    is copied once per evaluation.
///  * a product's output stays with the tape: a later product whose factor
///    is it or a block of it (K.middleRows(h * d, d) of K = W * X, each
///    head's keys), checked unchanged entry by entry, reads its values where
///    the tape holds them and adds to its adjoints with one product, where
///    other Var matrices are copied and their nodes listed (once: a matrix
///    read again, unchanged, by a later product uses the first copy).
///  * a sum of coefficients (sum(), squaredNorm(), dot(), norm(), mean()) is
///    one node of n operands, not n - 1 additions; a sum of squares
///    (squaredNorm, cwiseAbs2().sum(), square().sum(), of any expression) and
///    dot read their operands directly (partials 2 x_i, and y_i and x_i).
///  * an elementwise operation of stored Vars with a scalar Var (x - s, s - x,
///    x + s, x * s, x / s, s / x: a mean subtracted, a norm divided by)
///    assigned to a matrix or block is, in a gradient, one block of outputs
///    whose reverse is two vector operations (Tape::PushElementwise), not a
///    node per coefficient with s among its operands. Inside a larger
///    expression, and in the duals of a Hessian-vector product, a node per
///    coefficient.
///  * other coefficient-wise operations (exp, log, tanh, max, arithmetic with
///    numbers) record one node per coefficient, each small.
///  * numbers mix with Vars in expressions (ScalarBinaryOpTraits below):
///    X.transpose() * x with X of doubles needs no cast<T>().
#pragma once

#include <implicit/core/reverse_tape.h>

#include <Eigen/Core>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

namespace implicit {
namespace reverse {

/// Marks [begin, begin + size) as persistent on this thread while it exists:
/// data whose owning object (a Matrix, Map or Ref) lies there outlives the
/// recording's sweeps and is not copied into the tape. AutoDiffEnergy puts
/// one around its functor; nested scopes restore the outer one.
class PersistentScope {
 public:
  /// Makes the `size` bytes at `begin` this thread's persistent region until destruction.
  PersistentScope(const void* begin, std::size_t size) : saved_(Current()) {
    Current() = {static_cast<const char*>(begin), static_cast<const char*>(begin) + size};
  }
  ~PersistentScope() { Current() = saved_; }
  PersistentScope(const PersistentScope&) = delete;
  PersistentScope& operator=(const PersistentScope&) = delete;

  /// Whether the object at `object` lies in the current persistent region.
  static bool Contains(const void* object) {
    const Region& r = Current();
    const std::less<const char*> before;
    const char* p = static_cast<const char*>(object);
    return r.begin != nullptr && !before(p, r.begin) && before(p, r.end);
  }

 private:
  struct Region {
    const char* begin = nullptr;
    const char* end = nullptr;
  };
  static Region& Current() {
    static thread_local Region region;
    return region;
  }
  Region saved_;
};

namespace internal {

template <typename T>
struct IsConstantNullary : std::false_type {};
template <typename S, typename Plain>
struct IsConstantNullary<Eigen::CwiseNullaryOp<Eigen::internal::scalar_constant_op<S>, Plain>>
    : std::true_type {};

/// The object that owns a stored expression's coefficients: the expression
/// itself (a Matrix, Map, Ref), or for a block the one it is a block of.
template <typename E>
const void* OwnerOf(const E& e) {
  return &e;
}
template <typename X, int R, int C, bool I>
const void* OwnerOf(const Eigen::Block<X, R, C, I>& b) {
  return OwnerOf(b.nestedExpression());
}

/// One factor of a product being recorded, built from an Eigen expression:
/// transpositions, negations and constant scalings are folded in
/// (`transposed`, `alpha`), a variable scalar factor is kept aside
/// (`scale`), and what remains is read as numbers or as Vars.
template <typename V>
struct FactorBuilder {
  using Tape = reverse::Tape<V>;
  using Number = typename Tape::Number;
  using Factor = typename Tape::ProductFactor;

  Tape& tape = Tape::ThisThread();
  Factor factor;
  Number alpha = Number(1);
  bool transposed = false;
  bool scaled = false;  ///< by the variable `scale`
  Var<V> scale = Var<V>(1.0);

  /// A scalar factor s of the expression.
  void Scale(const Var<V>& s) {
    Number number;
    if (!s.is_variable() && Var<V>::IsNumber(ValueOf(s), &number)) {
      alpha *= number;
    } else {
      scale = scaled ? scale * s : s;
      scaled = true;
    }
  }
  template <typename A, typename = std::enable_if_t<std::is_arithmetic<A>::value>>
  void Scale(A s) {
    alpha *= static_cast<Number>(s);
  }

  /// Numbers (data): referenced when stored contiguously by an object in the
  /// persistent region, copied into the tape otherwise.
  template <typename E>
  void Numbers(const Eigen::MatrixBase<E>& e_in) {
    const E& e = e_in.derived();
    using S = typename E::Scalar;
    constexpr bool kRowMajor = (E::Flags & Eigen::RowMajorBit) != 0;
    if constexpr (std::is_same<S, Number>::value && Eigen::internal::has_direct_access<E>::ret) {
      if (e.innerStride() == 1 && PersistentScope::Contains(OwnerOf(e))) {
        // Stored column-major rows x cols, or row-major: its transpose column-major.
        const Index rows = kRowMajor ? e.cols() : e.rows(), cols = kRowMajor ? e.rows() : e.cols();
        factor.numbers = {e.data(), rows, cols, e.outerStride(), transposed != kRowMajor};
        factor.rows = factor.numbers.op_rows();
        factor.cols = factor.numbers.op_cols();
        return;
      }
    }
    factor.owned = tape.OwnedMatrix(e.rows(), e.cols());
    Matrix<Number>& copy = tape.Owned(factor.owned);
    copy = e.template cast<Number>();
    factor.numbers = {nullptr, e.rows(), e.cols(), e.rows(), transposed};
    factor.rows = factor.numbers.op_rows();
    factor.cols = factor.numbers.op_cols();
  }

  /// Vars: their values (and tangents) copied in the used orientation, their
  /// nodes consecutive or listed.
  template <typename E>
  void Vars(const E& e) {
    if (KnownConstants(e)) return;
    const Index rows = transposed ? e.cols() : e.rows(), cols = transposed ? e.rows() : e.cols();
    factor.rows = rows;
    factor.cols = cols;
    if constexpr (!Tape::kDual && Eigen::internal::has_direct_access<E>::ret) {
      // A contiguous stretch of a known run (the functor's x, c or theta, or
      // a Map of it): its values and nodes where they are, nothing read.
      std::int64_t first = -1;
      const V* known = nullptr;
      if (!transposed && rows * cols > 0 && e.innerStride() == 1 && (cols == 1 || e.outerStride() == rows) &&
          tape.FindKnownRun(e.data(), rows * cols, &first, &known)) {
        factor.held = known;
        factor.first = tape.Node(first);
        factor.stride = rows;
        return;
      }
    }
    if (ProductOutput(e) || ReadBefore(e)) return;
    factor.values = tape.OwnedMatrix(rows, cols);
    Number* values = tape.Owned(factor.values).data();
    Number* tangents = nullptr;
    if constexpr (Tape::kDual) {
      factor.tangents = tape.OwnedMatrix(rows, cols);
      tangents = tape.Owned(factor.tangents).data();
    }
    static thread_local std::vector<std::int32_t> nodes;
    nodes.resize(static_cast<std::size_t>(rows * cols));
    bool consecutive = rows * cols > 0, any_variable = false, any_tangent = false;
    // Each entry read where it is (no copy: a copy would flag the entry's
    // node as shared, a write per entry); a scaled one gets a node of its own.
    const auto record = [&](const Var<V>& x, Index i) {
      const V& value = ValueOf(x);
      if constexpr (Tape::kDual) {
        values[i] = value.a;
        tangents[i] = value.v[0];
        any_tangent = any_tangent || tangents[i] != Number(0);
      } else {
        values[i] = value;
      }
      const std::int32_t node = x.is_variable() ? tape.Node(x.index()) : -1;
      nodes[static_cast<std::size_t>(i)] = node;
      any_variable = any_variable || node >= 0;
      consecutive = consecutive && node >= 0 && node == nodes[0] + static_cast<std::int32_t>(i);
    };
    const auto read = [&](const Var<V>& entry, Index i) {
      if (entry.is_variable() && !entry.unit_scale()) {
        record(entry.Materialized(), i);
      } else {
        record(entry, i);
      }
    };
    for (Index j = 0, i = 0; j < cols; ++j) {
      for (Index r = 0; r < rows; ++r, ++i) {
        if (transposed) {
          read(e.coeff(j, r), i);
        } else {
          read(e.coeff(r, j), i);
        }
      }
    }
    if (!any_tangent && !tape.linearizing()) factor.tangents = -1;  // kept for SetDirection
    if (!any_variable) {  // constants after all: numbers
      factor.owned = factor.values;
      factor.values = -1;
      factor.tangents = -1;
      factor.numbers = {nullptr, rows, cols, rows, false};
      return;
    }
    if (consecutive) {
      factor.first = nodes[0];
      factor.stride = rows;
    } else {
      factor.ids = tape.AddProductNodes(nodes.data(), nodes.size());
    }
    if constexpr (Eigen::internal::has_direct_access<E>::ret) {
      tape.RememberRead({e.data(), e.rows(), e.cols(), e.outerStride(), transposed, factor});
    }
  }

  /// Whether `value` is the number values[i] (and, for duals, has the tangent
  /// tangents[i], or 0 where tangents is null).
  static bool SameValue(const V& value, const Number* values, const Number* tangents, Index i) {
    if constexpr (Tape::kDual) {
      return value.a == values[i] && value.v[0] == (tangents != nullptr ? tangents[i] : Number(0));
    } else {
      (void)tangents;
      return value == values[i];
    }
  }

  /// Stored Vars read as a variable factor before in this recording (G read
  /// by W_K G, W_Q G and Xi^T G), unchanged since: the factor made then
  /// (each entry checked: the same node, derivative 1 and value). Returns
  /// whether they were.
  template <typename E>
  bool ReadBefore(const E& e) {
    if constexpr (Eigen::internal::has_direct_access<E>::ret) {
      const typename Tape::ReadFactor* read =
          tape.FindRead(e.data(), e.rows(), e.cols(), e.outerStride(), transposed);
      if (read == nullptr) return false;
      const Factor& f = read->factor;
      const Number* values = tape.Owned(f.values).data();
      const Number* tangents = f.tangents >= 0 ? tape.Owned(f.tangents).data() : nullptr;
      const std::int32_t* nodes = f.first >= 0 ? nullptr : tape.ProductNodes(f.ids);
      const Index rows = f.rows, cols = f.cols;
      for (Index j = 0, i = 0; j < cols; ++j) {
        for (Index r = 0; r < rows; ++r, ++i) {
          const Var<V>& x = transposed ? e.coeff(j, r) : e.coeff(r, j);
          const std::int32_t node = nodes != nullptr ? nodes[i] : f.first + static_cast<std::int32_t>(i);
          const bool same_node = x.is_variable() ? x.unit_scale() && tape.Node(x.index()) == node : node < 0;
          if (!same_node || !SameValue(ValueOf(x), values, tangents, i)) return false;
        }
      }
      factor = f;
      return true;
    }
    (void)e;
    return false;
  }

  /// Stored Vars that are (a block of) an earlier product's output, unchanged
  /// since (K.middleRows(h * d, d) of K = W * X): its values, tangents and
  /// nodes where the tape holds them, read for the check only (each entry
  /// the output's node, unscaled, of the output's value). Returns whether
  /// they were.
  template <typename E>
  bool ProductOutput(const E& e) {
    if constexpr (Eigen::internal::has_direct_access<E>::ret && (E::Flags & Eigen::RowMajorBit) == 0) {
      const Index rows = e.rows(), cols = e.cols();
      if (rows * cols == 0 || e.innerStride() != 1) return false;
      const Var<V>* entries = e.data();  // read in place: a copy would flag them as shared
      const Var<V>& corner = entries[0];
      if (!corner.is_variable()) return false;
      typename Tape::ProductOutput out;
      const std::int64_t id = corner.index();
      const std::int32_t node = tape.Node(id);
      if (!tape.FindProductOutput(node, &out) || e.outerStride() != out.rows) return false;
      const Index offset = static_cast<Index>(node - out.first);
      const Index top = offset % out.rows, left = offset / out.rows;
      if (top + rows > out.rows || left + cols > out.cols) return false;
      const Number* values = out.values + offset;
      const Number* tangents = out.tangents != nullptr ? out.tangents + offset : nullptr;
      for (Index j = 0; j < cols; ++j) {
        for (Index i = 0; i < rows; ++i) {
          const Index at = i + j * out.rows;
          const Var<V>& x = entries[at];
          if (x.index() != id + at || !x.unit_scale() || !SameValue(ValueOf(x), values, tangents, at)) return false;
        }
      }
      factor.rows = transposed ? cols : rows;
      factor.cols = transposed ? rows : cols;
      factor.held = values;
      factor.held_tangents = tangents;
      factor.first = static_cast<std::int32_t>(out.first + offset);
      factor.stride = out.rows;
      factor.stored_transposed = transposed;
      return true;
    }
    (void)e;
    return false;
  }

  /// Vars that are known constants (Tape::AddKnownConstants: AutoDiffEnergy's
  /// parameters when a sweep does not differentiate in them), stored
  /// column-major: their numbers, read where they are (copied for dual
  /// values, whose tangents are zero there). Returns whether they were.
  template <typename E>
  bool KnownConstants(const E& e) {
    if constexpr (Eigen::internal::has_direct_access<E>::ret && (E::Flags & Eigen::RowMajorBit) == 0) {
      const Index rows = e.rows(), cols = e.cols();
      if (rows * cols == 0 || e.innerStride() != 1) return false;
      const Index span = (cols - 1) * e.outerStride() + rows;  // from the first entry to the last
      const V* values = nullptr;
      if (!tape.FindKnownConstants(e.data(), span, &values)) return false;
      if constexpr (!Tape::kDual) {
        factor.numbers = {values, rows, cols, e.outerStride(), transposed};
      } else {
        factor.owned = tape.OwnedMatrix(rows, cols);
        Matrix<Number>& copy = tape.Owned(factor.owned);
        for (Index j = 0; j < cols; ++j) {
          for (Index i = 0; i < rows; ++i) copy(i, j) = values[j * e.outerStride() + i].a;
        }
        factor.numbers = {nullptr, rows, cols, rows, transposed};
      }
      factor.rows = factor.numbers.op_rows();
      factor.cols = factor.numbers.op_cols();
      return true;
    }
    return false;
  }

  // ---- the expression's patterns ----
  template <typename E>
  void Add(const Eigen::MatrixBase<E>& e) {
    using S = typename E::Scalar;
    if constexpr (std::is_arithmetic<S>::value) {
      Numbers(e);
    } else if constexpr (Eigen::internal::has_direct_access<E>::ret) {
      Vars(e.derived());
    } else {
      const Matrix<Var<V>> evaluated = e;  // records its coefficients' nodes
      Vars(evaluated);
    }
  }
  template <typename E>
  void Add(const Eigen::Transpose<E>& e) {
    transposed = !transposed;
    Add(e.nestedExpression());
  }
  template <typename S, typename E>
  void Add(const Eigen::CwiseUnaryOp<Eigen::internal::scalar_cast_op<S, Var<V>>, E>& e) {
    if constexpr (std::is_arithmetic<S>::value) {
      Numbers(e.nestedExpression());
    } else {
      Add(static_cast<const Eigen::MatrixBase<Eigen::CwiseUnaryOp<Eigen::internal::scalar_cast_op<S, Var<V>>, E>>&>(e));
    }
  }
  template <typename E>
  void Add(const Eigen::CwiseUnaryOp<Eigen::internal::scalar_opposite_op<Var<V>>, E>& e) {
    alpha = -alpha;
    Add(e.nestedExpression());
  }
  template <typename S1, typename S2, typename L, typename R>
  void Add(const Eigen::CwiseBinaryOp<Eigen::internal::scalar_product_op<S1, S2>, L, R>& e) {
    using Lc = std::remove_const_t<L>;
    using Rc = std::remove_const_t<R>;
    if constexpr (IsConstantNullary<Lc>::value && !IsConstantNullary<Rc>::value) {
      Scale(e.lhs().functor().m_other);
      Add(e.rhs());
    } else if constexpr (IsConstantNullary<Rc>::value && !IsConstantNullary<Lc>::value) {
      Scale(e.rhs().functor().m_other);
      Add(e.lhs());
    } else {
      using Xpr = Eigen::CwiseBinaryOp<Eigen::internal::scalar_product_op<S1, S2>, L, R>;
      Add(static_cast<const Eigen::MatrixBase<Xpr>&>(e));
    }
  }

};

/// *out = lhs * rhs, recorded as one product block (Tape::PushProduct).
template <typename V, typename Lhs, typename Rhs>
void RecordProduct(const Lhs& lhs, const Rhs& rhs, Matrix<Var<V>>* out) {
  FactorBuilder<V> a, b;
  a.Add(lhs);
  b.Add(rhs);
  Tape<V>::ThisThread().PushProduct(a.factor, b.factor, a.alpha * b.alpha, out);
  if (a.scaled || b.scaled) {
    const Var<V> scale = a.scaled && b.scaled ? a.scale * b.scale : (a.scaled ? a.scale : b.scale);
    for (Index i = 0; i < out->size(); ++i) (*out)(i) = scale * (*out)(i);
  }
}

/// The scalar type under an expression's Var (V of Var<V>), or void.
template <typename S>
struct VarValue {
  using type = void;
};
template <typename V>
struct VarValue<Var<V>> {
  using type = V;
};

/// Stored coefficients (a matrix, a map, a block of one): read at no cost.
template <typename E>
constexpr bool kStored = Eigen::internal::has_direct_access<std::decay_t<E>>::ret;
/// A product of dual numbers (forward mode's ceres::Jet) by numbers.
template <typename Lhs, typename Rhs>
constexpr bool kDualTimesNumbers =
    (::implicit::internal::IsDual<typename Lhs::Scalar>::value &&
     std::is_arithmetic<typename Rhs::Scalar>::value) ||
    (std::is_arithmetic<typename Lhs::Scalar>::value &&
     ::implicit::internal::IsDual<typename Rhs::Scalar>::value);

/// e.cwiseAbs2() or e.array().square() of any expression e of Vars (its
/// coefficients are computed with their own nodes, the square is not), and
/// x.cwiseProduct(y) (or dot's conjugate product) of stored Vars.
template <typename Xpr>
struct IsAbs2 : std::false_type {};
template <typename V, typename E>
struct IsAbs2<Eigen::CwiseUnaryOp<Eigen::internal::scalar_abs2_op<Var<V>>, E>> : std::true_type {
  using Nested = E;
};
template <typename V, typename E>
struct IsAbs2<Eigen::CwiseUnaryOp<Eigen::internal::scalar_square_op<Var<V>>, E>> : std::true_type {
  using Nested = E;
};
template <typename Xpr>
struct IsProductOfVars : std::false_type {};
template <typename V, typename L, typename R>
struct IsProductOfVars<Eigen::CwiseBinaryOp<Eigen::internal::scalar_conj_product_op<Var<V>, Var<V>>, L, R>>
    : std::integral_constant<bool, kStored<L> && kStored<R>> {};
template <typename V, typename L, typename R>
struct IsProductOfVars<Eigen::CwiseBinaryOp<Eigen::internal::scalar_product_op<Var<V>, Var<V>>, L, R>>
    : std::integral_constant<bool, kStored<L> && kStored<R>> {};

/// A dual number (implicit::internal::IsDual) of floating-point value and
/// tangents, not of duals.
template <typename V, typename = void>
struct IsDualOfNumbers : std::false_type {};
template <typename V>
struct IsDualOfNumbers<V, std::enable_if_t<implicit::internal::IsDual<V>::value>>
    : std::is_floating_point<decltype(V::a)> {};

/// exp(s) or exp(s - m) coefficient-wise, s stored Vars (possibly through
/// .array()), m a scalar: the log-sum-exp and softmax idiom.
template <typename Xpr>
struct ExpOfShifted : std::false_type {};
template <typename V, typename E>
struct ExpOfShifted<Eigen::CwiseUnaryOp<Eigen::internal::scalar_exp_op<Var<V>>, E>>
    : std::integral_constant<bool, kStored<E>> {
  static constexpr bool kShifted = false;
};
template <typename V, typename A, typename Plain>
struct ExpOfShifted<Eigen::CwiseUnaryOp<
    Eigen::internal::scalar_exp_op<Var<V>>,
    const Eigen::CwiseBinaryOp<Eigen::internal::scalar_difference_op<Var<V>, Var<V>>, A,
                               const Eigen::CwiseNullaryOp<Eigen::internal::scalar_constant_op<Var<V>>, Plain>>>>
    : std::integral_constant<bool, kStored<A>> {
  static constexpr bool kShifted = true;
};

/// x.cwiseMax(c) or x.cwiseMin(c) (also as arrays: x.array().max(c)) of Vars
/// x and a constant c, Eigen's default NaN rule: std::max(x_i, c) is x_i
/// unless x_i < c (std::min: unless c < x_i), a NaN x_i included.
template <typename Xpr>
struct ClampByConstant : std::false_type {};
template <typename V, typename A, typename Plain>
struct ClampByConstant<Eigen::CwiseBinaryOp<
    Eigen::internal::scalar_max_op<Var<V>, Var<V>, Eigen::PropagateFast>, A,
    const Eigen::CwiseNullaryOp<Eigen::internal::scalar_constant_op<Var<V>>, Plain>>> : std::true_type {
  /// Whether x_i (not c) is the coefficient.
  static bool Keeps(const V& x, const V& c) { return !(x < c); }
};
template <typename V, typename A, typename Plain>
struct ClampByConstant<Eigen::CwiseBinaryOp<
    Eigen::internal::scalar_min_op<Var<V>, Var<V>, Eigen::PropagateFast>, A,
    const Eigen::CwiseNullaryOp<Eigen::internal::scalar_constant_op<Var<V>>, Plain>>> : std::true_type {
  static bool Keeps(const V& x, const V& c) { return !(c < x); }
};

/// The evaluators Eigen keeps, inside a unary (binary) expression's own
/// evaluator, of its argument (its left-hand side): coefficients read through
/// them are not computed again. A product in an expression is evaluated when
/// the expression's evaluator is built; an evaluator of its own would record
/// the product a second time ((W * x).squaredNorm()).
template <typename Xpr>
struct NestedEvaluators : Eigen::internal::evaluator<Xpr> {
  static const auto& Argument(const Eigen::internal::evaluator<Xpr>& e) {
    return (e.*(&NestedEvaluators::m_d)).argImpl;
  }
  static const auto& Lhs(const Eigen::internal::evaluator<Xpr>& e) { return (e.*(&NestedEvaluators::m_d)).lhsImpl; }
};

/// The coefficients (rows x cols) an evaluator gives, column by column.
template <typename V, typename Evaluator>
void ReadEvaluated(const Evaluator& coefficients, Index rows, Index cols, std::vector<Var<V>>* out) {
  out->resize(static_cast<std::size_t>(rows * cols));
  for (Index j = 0, i = 0; j < cols; ++j) {
    for (Index r = 0; r < rows; ++r, ++i) (*out)[static_cast<std::size_t>(i)] = coefficients.coeff(r, j);
  }
}

/// The coefficients of expression e (rows x cols), column by column.
template <typename V, typename E>
void ReadCoefficients(const E& e, Index rows, Index cols, std::vector<Var<V>>* out) {
  ReadEvaluated<V>(Eigen::internal::evaluator<E>(e), rows, cols, out);
}

/// Where e's coefficients (rows x cols) lie, column by column, when e is a
/// stored, contiguous, column-major run of Vars (a vector, a column of a
/// matrix, a whole matrix); nullptr otherwise.
template <typename V, typename E>
const Var<V>* StoredRun(const E& e, Index rows, Index cols) {
  if constexpr (kStored<E> && (std::decay_t<E>::Flags & Eigen::RowMajorBit) == 0) {
    if (e.innerStride() == 1 && (cols == 1 || e.outerStride() == rows)) return e.data();
  }
  (void)e;
  (void)rows;
  (void)cols;
  return nullptr;
}

/// The coefficients of e (rows x cols) column by column: where they are for a
/// stored run (StoredRun), else copied into *scratch. No copy of every Var
/// (a copy flags its source as shared, a write per coefficient).
template <typename V, typename E>
const Var<V>* CoefficientsOf(const E& e, Index rows, Index cols, std::vector<Var<V>>* scratch) {
  if (const Var<V>* run = StoredRun<V>(e, rows, cols)) return run;
  ReadCoefficients<V>(e, rows, cols, scratch);
  return scratch->data();
}

/// t(i) = exp(t(i)) for i < size, by Eigen's vectorised exp over whole
/// packets of an aligned array (t grows to size rounded up to a packet; the
/// padding is computed and not used): a short column (an Energy
/// Transformer's 17 tokens) or an unaligned tail no longer goes to libm. An
/// exp below the smallest normal number (t(i) < log(min), a masked -inf
/// included) is 0: computing its subnormal value cost a hundred cycles, and
/// it is below the rounding of any sum with a term near 1.
template <typename Number>
void ExpInPlace(Eigen::Array<Number, Eigen::Dynamic, 1>* t, Index size) {
  constexpr Index kPacket = Eigen::internal::packet_traits<Number>::size;
  const Index padded = (size + kPacket - 1) / kPacket * kPacket;
  if (t->size() < padded) t->conservativeResize(padded);
  Number* x = t->data();
  const Number low = std::log(std::numeric_limits<Number>::min());
  static thread_local std::vector<Index> underflows;
  underflows.clear();
  for (Index i = 0; i < size; ++i) {
    if (x[i] < low) underflows.push_back(i);  // not a NaN
  }
  for (const Index i : underflows) x[i] = Number(0);
  for (Index i = size; i < padded; ++i) x[i] = Number(0);
  t->head(padded) = t->head(padded).exp();
  for (const Index i : underflows) x[i] = Number(0);
}

/// sum_i c_i of an expression's coefficients (given by `coefficients`, its
/// evaluator) as one node; the coefficients are computed first, each with its
/// own nodes, except for sums of squares (squaredNorm, cwiseAbs2().sum(),
/// square().sum(): the squared expression's coefficients are the operands,
/// partials 2 c_i), dot (a sum of products) and sums of exp(s - m)
/// (log-sum-exp, softmax) of stored vectors, whose operands are read directly.
template <typename V, typename Xpr, typename Evaluator>
Var<V> RecordSum(const Xpr& xpr, const Evaluator& coefficients) {
  using Number = typename Tape<V>::Number;
  Tape<V>& tape = Tape<V>::ThisThread();
  static thread_local std::vector<Var<V>> a, b;
  const Index rows = xpr.rows(), cols = xpr.cols();
  V value(0.0);
  bool any = false;
  if constexpr (IsAbs2<Xpr>::value) {
    using Nested = std::decay_t<typename IsAbs2<Xpr>::Nested>;
    using Clamp = ClampByConstant<Nested>;
    // The squared expression's coefficients: where they lie when stored, else
    // read through the evaluator Eigen built for the sum (not evaluated again),
    // into a vector of this call's own (one may be a sum recorded here too: a
    // reduction inside the expression).
    std::vector<Var<V>> computed;
    const std::size_t count = static_cast<std::size_t>(rows * cols);
    if constexpr (Clamp::value) {
      // The squares of a clamp (a ReLU's squared norm): each coefficient is
      // x_i or the constant c, known from the values; the kept x_i are the
      // operands (Eigen's loop copied each through std::max).
      const auto& clamp = xpr.nestedExpression();
      const Var<V>& c = clamp.rhs().functor().m_other;
      if (!c.is_variable()) {
        using Clamped = std::decay_t<decltype(clamp.lhs())>;
        const Var<V>* x = nullptr;
        if constexpr (kStored<Clamped>) {
          x = CoefficientsOf<V>(clamp.lhs(), rows, cols, &a);
        } else {
          ReadEvaluated<V>(NestedEvaluators<Nested>::Lhs(NestedEvaluators<Xpr>::Argument(coefficients)), rows,
                           cols, &computed);
          x = computed.data();
        }
        const V& cv = ValueOf(c);
        // The kept coefficients' positions, without a branch on each (which
        // are kept is as unpredictable as the data).
        static thread_local std::vector<std::uint32_t> kept;
        kept.resize(count);
        std::size_t n = 0;
        for (std::size_t i = 0; i < count; ++i) {
          kept[n] = static_cast<std::uint32_t>(i);
          n += Clamp::Keeps(ValueOf(x[i]), cv);
        }
        for (std::size_t j = 0; j < n; ++j) value += ValueOf(x[kept[j]]) * ValueOf(x[kept[j]]);
        if (n < count) value += cv * cv * Number(static_cast<double>(count - n));
        const std::uint32_t* at = kept.data();
        any = tape.AddOperandsAt(
            x, n, [at](std::size_t j) { return static_cast<std::size_t>(at[j]); },
            [x](std::size_t i) { return V(2.0) * ValueOf(x[i]); },
            [&](std::size_t i) { tape.AddCurvature(x[i], x[i], Number(2)); });
        return any ? Var<V>(value, tape.Close()) : Var<V>(value);
      }
    }
    const Var<V>* x = nullptr;
    if constexpr (kStored<Nested>) {
      x = CoefficientsOf<V>(xpr.nestedExpression(), rows, cols, &a);
    } else {
      ReadEvaluated<V>(NestedEvaluators<Xpr>::Argument(coefficients), rows, cols, &computed);
      x = computed.data();
    }
    for (std::size_t i = 0; i < count; ++i) value += ValueOf(x[i]) * ValueOf(x[i]);
    // partial 2 x_i: second derivative 2
    any = tape.AddOperands(x, count, [x](std::size_t i) { return V(2.0) * ValueOf(x[i]); },
                           [&](std::size_t i) { tape.AddCurvature(x[i], x[i], Number(2)); });
  } else if constexpr (IsProductOfVars<Xpr>::value) {
    const std::size_t count = static_cast<std::size_t>(rows * cols);
    const Var<V>* x = CoefficientsOf<V>(xpr.lhs(), rows, cols, &a);
    const Var<V>* y = CoefficientsOf<V>(xpr.rhs(), rows, cols, &b);
    for (std::size_t i = 0; i < count; ++i) value += ValueOf(x[i]) * ValueOf(y[i]);
    // partials y_i and x_i: the mixed second derivative 1
    any = tape.AddOperands(x, count, [y](std::size_t i) { return ValueOf(y[i]); },
                           [&](std::size_t i) { tape.AddCurvature(x[i], y[i], Number(1)); });
    any = tape.AddOperands(y, count, [x](std::size_t i) { return ValueOf(x[i]); },
                           [&](std::size_t i) { tape.AddCurvature(y[i], x[i], Number(1)); }) ||
          any;
  } else if constexpr (ExpOfShifted<Xpr>::value) {
    // sum_i exp(s_i - m): partials exp(s_i - m), and -sum for m.
    using std::exp;
    Var<V> m(0.0);
    const Var<V>* s = nullptr;
    if constexpr (ExpOfShifted<Xpr>::kShifted) {
      s = CoefficientsOf<V>(xpr.nestedExpression().lhs(), rows, cols, &a);
      m = xpr.nestedExpression().rhs().functor().m_other;
    } else {
      s = CoefficientsOf<V>(xpr.nestedExpression(), rows, cols, &a);
    }
    const std::size_t count = static_cast<std::size_t>(rows * cols);
    const V* partials = nullptr;  // e_i = exp(s_i - m), the sum's partials
    if constexpr (IsDualOfNumbers<V>::value) {
      // Dual numbers (the Hessian-vector product's): values and tangents
      // apart, so that the values' exp is Eigen's vectorised one and both
      // sums run in packets (a running sum of the tangents waits on every add).
      using Number = decltype(V().a);
      static thread_local std::vector<V> e;
      static thread_local Eigen::Array<Number, Eigen::Dynamic, 1> values, tangents;
      const Index size = static_cast<Index>(count);
      e.resize(count);
      if (values.size() < size) values.resize(size);
      tangents.resize(size);
      const V shift = ValueOf(m);
      for (Index i = 0; i < size; ++i) {
        const V& si = ValueOf(s[i]);
        values(i) = si.a - shift.a;
        tangents(i) = si.v[0] - shift.v[0];
      }
      ExpInPlace(&values, size);  // exp(t)' = exp(t) t'
      tangents *= values.head(size);
      for (Index i = 0; i < size; ++i) {
        e[static_cast<std::size_t>(i)].a = values(i);
        e[static_cast<std::size_t>(i)].v[0] = tangents(i);
      }
      value.a = values.head(size).sum();  // the numbers' sum, in the order the gradient's recording uses
      value.v[0] = tangents.sum();
      partials = e.data();
    } else if constexpr (std::is_floating_point<V>::value) {
      // Eigen's vectorised exp (a log-sum-exp over N scores was N calls of libm's exp).
      static thread_local Eigen::Array<V, Eigen::Dynamic, 1> exps;
      const Index size = static_cast<Index>(count);
      if (exps.size() < size) exps.resize(size);
      const V shift = ValueOf(m);
      for (Index i = 0; i < size; ++i) exps(i) = ValueOf(s[i]) - shift;
      ExpInPlace(&exps, size);
      value = exps.head(size).sum();  // in packets: one running sum waited on every add
      // Scores that are consecutive nodes (a column of a product's output, as
      // an attention energy's are), some perhaps replaced by constants (a
      // masked score, -inf): one run of operands, the constants' partials 0,
      // stored as numbers and swept as one contiguous update, then m's operand.
      std::int64_t first = -1;
      bool run = size > 0 && !tape.linearizing();
      for (Index i = 0; run && i < size; ++i) {
        if (!s[i].is_variable()) continue;
        const std::int64_t id = s[i].index();
        run = s[i].unit_scale() && (id & 0xffffffff) >= i && (first < 0 || id - i == first);
        first = id - i;
      }
      if (run && first >= 0 && (first & 0xffffffff) + size <= tape.size()) {
        for (Index i = 0; i < size; ++i) {
          if (!s[i].is_variable()) exps(i) = V(0);
        }
        const Var<V> sum(value, tape.PushRun(first, exps.head(size)));
        return m.is_variable() ? Var<V>::Node(value, sum, V(1.0), m, -value) : sum;
      }
      partials = exps.data();
    } else {
      static thread_local std::vector<V> e;
      e.resize(count);
      for (std::size_t i = 0; i < count; ++i) e[i] = exp(V(ValueOf(s[i]) - ValueOf(m)));
      for (const V& t : e) value += t;
      partials = e.data();
    }
    // The partial e_i = exp(s_i - m) changes as e_i (ds_i - dm); m's, -sum_i
    // e_i, as minus the sum's own tangent.
    any = tape.AddOperands(s, count, [partials](std::size_t i) { return partials[i]; }, [&](std::size_t i) {
      const Number ei = ::implicit::internal::NumberPart(partials[i]);
      tape.AddCurvature(s[i], s[i], ei);
      tape.AddCurvature(s[i], m, -ei);
    });
    if (tape.AddOperand(m, -value)) {
      any = true;
      tape.AddCurvatureInResult(m, Number(-1));
    }
  } else {
    a.resize(static_cast<std::size_t>(rows * cols));
    for (Index j = 0, i = 0; j < cols; ++j) {
      for (Index r = 0; r < rows; ++r, ++i) {
        a[static_cast<std::size_t>(i)] =
            coefficients.coeffByOuterInner(Xpr::IsRowMajor ? r : j, Xpr::IsRowMajor ? j : r);
      }
    }
    for (const Var<V>& x : a) value += ValueOf(x);
    any = tape.AddOperands(a.data(), a.size(), [](std::size_t) { return V(1.0); });  // linear
  }
  return any ? Var<V>(value, tape.Close()) : Var<V>(value);
}

/// maxCoeff() / minCoeff() of stored contiguous Vars: the coefficient Eigen's
/// loop would return (std::max / std::min in order: the first of equal
/// values; a NaN kept once it is the running result), found by comparing
/// values, so that nothing but that one Var is copied (Eigen's loop copies
/// every coefficient, and a copy flags its source as shared: a write each).
/// Returns false (nothing found) for other expressions.
///
/// Two passes, as fast as the values can be read: the extreme value in four
/// independent running results (a single running result made every step wait
/// for the last comparison: a quarter of the attention energy's gradient),
/// then the first coefficient with that value. The same coefficient as the
/// one-pass loop: a NaN can be its result only as the first coefficient, never
/// replaces one, and equal values (0 and -0 included) keep the first.
template <typename V, bool kMax, typename Xpr>
bool SelectStoredCoefficient(const Xpr& xpr, Var<V>* out) {
  const Index size = xpr.rows() * xpr.cols();
  const Var<V>* c = size > 0 ? StoredRun<V>(xpr, xpr.rows(), xpr.cols()) : nullptr;
  if (c == nullptr) return false;
  using Number = typename implicit::internal::NumberTypeOf<V>::type;
  const auto value_of = [c](Index i) { return implicit::internal::NumberPart(ValueOf(c[i])); };
  const auto better = [](Number candidate, Number best) { return kMax ? best < candidate : candidate < best; };
  const Number first = value_of(0);
  if (first != first) {  // NaN first: no comparison replaces it
    *out = c[0];
    return true;
  }
  Number best[4] = {first, first, first, first};
  Index i = 1;
  for (; i + 4 <= size; i += 4) {
    for (int lane = 0; lane < 4; ++lane) {
      const Number value = value_of(i + lane);
      if (better(value, best[lane])) best[lane] = value;
    }
  }
  for (; i < size; ++i) {
    if (better(value_of(i), best[0])) best[0] = value_of(i);
  }
  for (int lane = 1; lane < 4; ++lane) {
    if (better(best[lane], best[0])) best[0] = best[lane];
  }
  Index at = 0;
  while (!(value_of(at) == best[0])) ++at;
  *out = c[at];
  return true;
}

/// The elementwise operations of Vars with a scalar Var that assignment
/// records as one block (AssignElementwise).
enum class Elementwise { kSum, kDifference, kProduct, kQuotient };

/// dst = src, src being x op s (or, kScalarLeft, s op x) for stored Vars x
/// and a variable scalar s, with plain numbers as values (a gradient's
/// recording): one elementwise block (Tape::PushElementwise) instead of a
/// node per coefficient, each with s as an operand. Where that does not apply
/// (dual numbers, x an expression, s a constant) Eigen's coefficient loop.
template <typename V, Elementwise kOp, bool kScalarLeft, typename Dst, typename Src, typename X, typename Func>
void AssignElementwise(Dst& dst, const Src& src, const X& x, const Var<V>& s, const Func& func) {
  if constexpr (!std::is_floating_point<V>::value || !kStored<X>) {
    (void)x;
    (void)s;
    Eigen::internal::call_dense_assignment_loop(dst, src, func);
  } else {
    if (!s.is_variable()) {
      Eigen::internal::call_dense_assignment_loop(dst, src, func);
      return;
    }
    const Index rows = x.rows(), cols = x.cols();
    const std::size_t count = static_cast<std::size_t>(rows * cols);
    static thread_local std::vector<Var<V>> copies;
    static thread_local std::vector<V> values, a, b;
    const Var<V>* xs = CoefficientsOf<V>(x, rows, cols, &copies);
    values.resize(count);
    a.resize(count);
    b.resize(count);
    const V sv = ValueOf(s);
    for (std::size_t i = 0; i < count; ++i) {
      const V xi = ValueOf(xs[i]);
      V out;
      if constexpr (kOp == Elementwise::kSum) {
        out = kScalarLeft ? sv + xi : xi + sv;
        a[i] = V(1);
        b[i] = V(1);
      } else if constexpr (kOp == Elementwise::kDifference) {
        out = kScalarLeft ? sv - xi : xi - sv;
        a[i] = kScalarLeft ? V(-1) : V(1);
        b[i] = kScalarLeft ? V(1) : V(-1);
      } else if constexpr (kOp == Elementwise::kProduct) {
        out = kScalarLeft ? sv * xi : xi * sv;
        a[i] = sv;
        b[i] = xi;
      } else if constexpr (kScalarLeft) {  // s / x_i
        out = sv / xi;
        a[i] = -out / xi;
        b[i] = V(1) / xi;
      } else {  // x_i / s
        out = xi / sv;
        a[i] = V(1) / sv;
        b[i] = -out / sv;
      }
      values[i] = out;
    }
    // Everything is read (x may be dst: x = x * s) before dst is written.
    const std::int64_t first = Tape<V>::ThisThread().PushElementwise(xs, count, s, a.data(), b.data());
    Eigen::internal::resize_if_allowed(dst, x, func);
    for (Index j = 0, i = 0; j < cols; ++j) {
      for (Index r = 0; r < rows; ++r, ++i) dst.coeffRef(r, j) = Var<V>(values[static_cast<std::size_t>(i)], first + i);
    }
  }
}

}  // namespace internal
}  // namespace reverse
}  // namespace implicit

namespace Eigen {

/// Numbers and Vars mix in expressions (the number as a constant).
#define IMPLICIT_VAR_NUMBER_TRAITS(Number)                                         \
  template <typename V, typename BinaryOp>                                         \
  struct ScalarBinaryOpTraits<implicit::reverse::Var<V>, Number, BinaryOp> {      \
    typedef implicit::reverse::Var<V> ReturnType;                                  \
  };                                                                               \
  template <typename V, typename BinaryOp>                                         \
  struct ScalarBinaryOpTraits<Number, implicit::reverse::Var<V>, BinaryOp> {      \
    typedef implicit::reverse::Var<V> ReturnType;                                  \
  };
IMPLICIT_VAR_NUMBER_TRAITS(double)
IMPLICIT_VAR_NUMBER_TRAITS(float)
IMPLICIT_VAR_NUMBER_TRAITS(int)
#undef IMPLICIT_VAR_NUMBER_TRAITS

namespace internal {

/// Products evaluated inside a larger expression. Eigen's product_evaluator
/// offers no way to specialise on the scalar type alone (its scalar
/// arguments are defaults that partial ordering cannot compare), so these
/// take the place of its general product evaluator for dense products of
/// every scalar type, in the same form as Eigen's own lazy-product
/// specialisation: for a Var scalar one recorded block, for any other scalar
/// exactly what Eigen's general evaluator does (evaluate into a temporary by
/// generic_product_impl). Lazy coefficient-based products of small fixed
/// sizes keep Eigen's evaluation.
#define IMPLICIT_VAR_PRODUCT_EVALUATOR(Tag)                                                         \
  template <typename Lhs, typename Rhs>                                                             \
  struct product_evaluator<Product<Lhs, Rhs, DefaultProduct>, Tag, DenseShape, DenseShape>         \
      : public evaluator<typename Product<Lhs, Rhs, DefaultProduct>::PlainObject> {                \
    typedef Product<Lhs, Rhs, DefaultProduct> XprType;                                              \
    typedef typename XprType::PlainObject PlainObject;                                              \
    typedef evaluator<PlainObject> Base;                                                            \
    enum { Flags = Base::Flags | EvalBeforeNestingBit };                                            \
    explicit product_evaluator(const XprType& xpr) : m_result(xpr.rows(), xpr.cols()) {             \
      ::new (static_cast<Base*>(this)) Base(m_result);                                              \
      using Value = typename implicit::reverse::internal::VarValue<typename XprType::Scalar>::type; \
      if constexpr (implicit::reverse::internal::kDualTimesNumbers<Lhs, Rhs>) {                     \
        implicit::Matrix<typename XprType::Scalar> result;                                          \
        implicit::internal::MatrixProduct(xpr.lhs(), xpr.rhs(), &result);                            \
        m_result = result;                                                                          \
      } else if constexpr (std::is_void<Value>::value) {                                            \
        generic_product_impl<Lhs, Rhs, DenseShape, DenseShape, Tag>::evalTo(m_result, xpr.lhs(), xpr.rhs()); \
      } else if constexpr (std::is_same<PlainObject, implicit::Matrix<implicit::reverse::Var<Value>>>::value) { \
        /* into the evaluator's own matrix (same size: its data stays where Base points) */        \
        implicit::reverse::internal::RecordProduct<Value>(xpr.lhs(), xpr.rhs(), &m_result);          \
      } else {                                                                                      \
        implicit::Matrix<implicit::reverse::Var<Value>> result;                                     \
        implicit::reverse::internal::RecordProduct<Value>(xpr.lhs(), xpr.rhs(), &result);            \
        m_result = result;                                                                          \
      }                                                                                             \
    }                                                                                               \
                                                                                                    \
   protected:                                                                                       \
    PlainObject m_result;                                                                           \
  };
IMPLICIT_VAR_PRODUCT_EVALUATOR(CoeffBasedProductMode)
IMPLICIT_VAR_PRODUCT_EVALUATOR(OuterProduct)
IMPLICIT_VAR_PRODUCT_EVALUATOR(InnerProduct)
IMPLICIT_VAR_PRODUCT_EVALUATOR(GemvProduct)
IMPLICIT_VAR_PRODUCT_EVALUATOR(GemmProduct)
#undef IMPLICIT_VAR_PRODUCT_EVALUATOR

/// dst = A * B, dst += A * B, dst -= A * B with Var scalars: one recorded block,
/// written straight into dst for `=` to a matrix of Vars (no temporary: for
/// the scores of an attention energy, megabytes per evaluation). The factors
/// are read into the tape before dst is written, so y = A * y is safe.
template <typename V, typename Dst, typename Src, typename Func>
void AssignRecordedProduct(Dst& dst, const Src& src, const Func& func) {
  if constexpr (std::is_same<Func, assign_op<implicit::reverse::Var<V>, implicit::reverse::Var<V>>>::value &&
                std::is_same<Dst, implicit::Matrix<implicit::reverse::Var<V>>>::value) {
    implicit::reverse::internal::RecordProduct<V>(src.lhs(), src.rhs(), &dst);
    return;
  }
  implicit::Matrix<implicit::reverse::Var<V>> result;
  implicit::reverse::internal::RecordProduct<V>(src.lhs(), src.rhs(), &result);
  call_assignment_no_alias(dst, result, func);  // resizes dst for =
}
/// Eigen's assignment of a product of Vars for the assignment op Op (=, +=, -=): one
/// recorded block (AssignRecordedProduct).
#define IMPLICIT_VAR_PRODUCT_ASSIGNMENT(Op)                                                                 \
  template <typename DstXprType, typename Lhs, typename Rhs, int Options, typename V>                    \
  struct Assignment<DstXprType, Product<Lhs, Rhs, Options>, Op<implicit::reverse::Var<V>, implicit::reverse::Var<V>>, \
                    Dense2Dense, typename enable_if<(Options == DefaultProduct || Options == AliasFreeProduct)>::type> { \
    static void run(DstXprType& dst, const Product<Lhs, Rhs, Options>& src,                              \
                    const Op<implicit::reverse::Var<V>, implicit::reverse::Var<V>>& func) {             \
      AssignRecordedProduct<V>(dst, src, func);                                                          \
    }                                                                                                    \
  };
IMPLICIT_VAR_PRODUCT_ASSIGNMENT(assign_op)
IMPLICIT_VAR_PRODUCT_ASSIGNMENT(add_assign_op)
IMPLICIT_VAR_PRODUCT_ASSIGNMENT(sub_assign_op)
#undef IMPLICIT_VAR_PRODUCT_ASSIGNMENT

/// dst = x op s and dst = s op x (op: + - * /) of Vars and a scalar Var s
/// (x.array() - mean, centred / sd): one elementwise block where
/// reverse::internal::AssignElementwise applies, Eigen's loop otherwise.
#define IMPLICIT_VAR_ELEMENTWISE_ASSIGNMENT(Op, kOp)                                                          \
  template <typename DstXprType, typename V, typename L, typename Plain>                                       \
  struct Assignment<DstXprType,                                                                                \
                    CwiseBinaryOp<Op<implicit::reverse::Var<V>, implicit::reverse::Var<V>>, L,                  \
                                  const CwiseNullaryOp<scalar_constant_op<implicit::reverse::Var<V>>, Plain>>,  \
                    assign_op<implicit::reverse::Var<V>, implicit::reverse::Var<V>>, Dense2Dense, void> {       \
    template <typename Src, typename Func>                                                                     \
    static void run(DstXprType& dst, const Src& src, const Func& func) {                                       \
      implicit::reverse::internal::AssignElementwise<V, implicit::reverse::internal::Elementwise::kOp, false>(  \
          dst, src, src.lhs(), src.rhs().functor().m_other, func);                                             \
    }                                                                                                          \
  };                                                                                                           \
  template <typename DstXprType, typename V, typename Plain, typename R>                                       \
  struct Assignment<DstXprType,                                                                                \
                    CwiseBinaryOp<Op<implicit::reverse::Var<V>, implicit::reverse::Var<V>>,                     \
                                  const CwiseNullaryOp<scalar_constant_op<implicit::reverse::Var<V>>, Plain>, R>, \
                    assign_op<implicit::reverse::Var<V>, implicit::reverse::Var<V>>, Dense2Dense,               \
                    std::enable_if_t<!implicit::reverse::internal::IsConstantNullary<std::remove_const_t<R>>::value>> { \
    template <typename Src, typename Func>                                                                     \
    static void run(DstXprType& dst, const Src& src, const Func& func) {                                       \
      implicit::reverse::internal::AssignElementwise<V, implicit::reverse::internal::Elementwise::kOp, true>(   \
          dst, src, src.rhs(), src.lhs().functor().m_other, func);                                             \
    }                                                                                                          \
  };
IMPLICIT_VAR_ELEMENTWISE_ASSIGNMENT(scalar_sum_op, kSum)
IMPLICIT_VAR_ELEMENTWISE_ASSIGNMENT(scalar_difference_op, kDifference)
IMPLICIT_VAR_ELEMENTWISE_ASSIGNMENT(scalar_product_op, kProduct)
IMPLICIT_VAR_ELEMENTWISE_ASSIGNMENT(scalar_quotient_op, kQuotient)
#undef IMPLICIT_VAR_ELEMENTWISE_ASSIGNMENT

/// dst = A * B with dual numbers (forward mode) and one factor of numbers:
/// products of numbers (internal::MatrixProduct); Eigen's mixed-scalar matrix
/// kernels do not take duals. Other products of duals keep Eigen's.
template <typename DstXprType, typename Lhs, typename Rhs, int Options, typename P, int K>
struct Assignment<DstXprType, Product<Lhs, Rhs, Options>, assign_op<ceres::Jet<P, K>, ceres::Jet<P, K>>,
                  Dense2Dense, typename enable_if<(Options == DefaultProduct || Options == AliasFreeProduct)>::type> {
  typedef Product<Lhs, Rhs, Options> SrcXprType;
  static void run(DstXprType& dst, const SrcXprType& src, const assign_op<ceres::Jet<P, K>, ceres::Jet<P, K>>&) {
    if constexpr (implicit::reverse::internal::kDualTimesNumbers<Lhs, Rhs>) {
      implicit::Matrix<ceres::Jet<P, K>> result;
      implicit::internal::MatrixProduct(src.lhs(), src.rhs(), &result);
      dst = result;
    } else {
      if (dst.rows() != src.rows() || dst.cols() != src.cols()) dst.resize(src.rows(), src.cols());
      generic_product_impl<Lhs, Rhs>::evalTo(dst, src.lhs(), src.rhs());
    }
  }
};

/// maxCoeff() and minCoeff() of Vars (Eigen's default NaN rule): a stored
/// contiguous vector or matrix is scanned by value (SelectStoredCoefficient);
/// anything else takes Eigen's own loop.
#define IMPLICIT_VAR_EXTREMUM(Op, kMax)                                                                      \
  template <typename V, typename Xpr>                                                                        \
  struct redux_impl<Op<implicit::reverse::Var<V>, implicit::reverse::Var<V>, PropagateFast>,               \
                    redux_evaluator<Xpr>, DefaultTraversal, NoUnrolling> {                                 \
    typedef implicit::reverse::Var<V> Scalar;                                                                \
    template <typename XprType>                                                                              \
    static Scalar run(const redux_evaluator<Xpr>& eval, const Op<Scalar, Scalar, PropagateFast>& func,       \
                      const XprType& xpr) {                                                                  \
      Scalar result;                                                                                         \
      if (implicit::reverse::internal::SelectStoredCoefficient<V, kMax>(xpr, &result)) return result;       \
      result = eval.coeffByOuterInner(0, 0);                                                                 \
      for (Index i = 1; i < xpr.innerSize(); ++i) result = func(result, eval.coeffByOuterInner(0, i));       \
      for (Index i = 1; i < xpr.outerSize(); ++i) {                                                          \
        for (Index j = 0; j < xpr.innerSize(); ++j) result = func(result, eval.coeffByOuterInner(i, j));     \
      }                                                                                                      \
      return result;                                                                                         \
    }                                                                                                        \
  };
IMPLICIT_VAR_EXTREMUM(scalar_max_op, true)
IMPLICIT_VAR_EXTREMUM(scalar_min_op, false)
#undef IMPLICIT_VAR_EXTREMUM

/// sum() (and what is built on it: squaredNorm, dot, norm, mean) of Vars:
/// one node.
template <typename V, typename Xpr>
struct redux_impl<scalar_sum_op<implicit::reverse::Var<V>, implicit::reverse::Var<V>>, redux_evaluator<Xpr>,
                  DefaultTraversal, NoUnrolling> {
  typedef implicit::reverse::Var<V> Scalar;
  template <typename XprType>
  static Scalar run(const redux_evaluator<Xpr>& eval, const scalar_sum_op<Scalar, Scalar>&,
                    const XprType& xpr) {
    return implicit::reverse::internal::RecordSum<V>(xpr, eval);
  }
};

}  // namespace internal
}  // namespace Eigen
