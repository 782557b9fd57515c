/// \file
/// Reverse-mode derivatives of a scalar function written on a scalar type T:
/// the engine behind AutoDiffEnergy's reverse mode (autodiff_energy.h), usable
/// on its own for any f: R^n -> R written as a template on T.
///
/// reverse::Var<V> (reverse_var.h) is a value of type V together with its place on this
/// thread's reverse::Tape<V>: every operation on Vars (and each function of
/// reverse_functions.h) appends one node holding its operands and the partial
/// derivatives there. One reverse sweep over the tape then
/// gives the derivatives of the result in every variable, so a gradient costs
/// a small multiple of one evaluation whatever n is. With V a first-order dual
/// number (internal::DirectionalJet, value and one tangent), the same sweep
/// gives the gradient and, in the tangents, the Hessian-vector product H v
/// (forward over reverse): the function is recorded with the variables'
/// tangents set to v, and the adjoints' tangents are d/dt grad f(z + t v).
/// A linearizing recording (Recording's `linearize`) also keeps the nodes'
/// second derivatives, so that a recording kept at a point (CopyRecordingTo)
/// gives H v for any v without recording again: Tape::SetDirection, then
/// Tape::TangentSweepFrom (AutoDiffEnergy::LinearizeHessian does this).
///
/// \code
///   using Var = implicit::reverse::Var<double>;
///   std::vector<double> grad(n);
///   const double value = implicit::reverse::Gradient<double>(
///       z.data(), n, [&](const implicit::Vector<Var>& x) { return f(x); }, grad.data());
/// \endcode
///
/// The tape is recorded again at every evaluation, so an `if` on values, a max
/// or a sort are differentiated on the branch taken at that point. A Var does
/// not convert to its value: code that computes with extracted values would
/// get derivatives that miss their dependence, so it does not compile.
/// Several operations on whole vectors are recorded as one node each
/// (ad::LogSumExp, ad::Dot in ad_functions.h), and a matrix product as one
/// block whose reverse is two matrix products (ad::Product): far fewer nodes
/// than their scalar loops, which is what makes dense products cheap to
/// differentiate.
///
/// Tapes are per thread (thread_local): threads differentiate at the same time
/// without locks. One recording per thread and value type at a time (a nested
/// reverse::Gradient on the same thread and type throws std::logic_error); Vars
/// live only during their recording (one used in a later recording, or on
/// another thread, throws std::logic_error). A thread's tape keeps its memory for the
/// next recording (about 12 bytes per operand for double values).
#pragma once

#include <implicit/core/dual_matrix_product.h>
#include <implicit/core/gemm.h>
#include <implicit/core/reverse_var.h>
#include <implicit/core/types.h>

#include <ceres/jet.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

/// \def IMPLICIT_REVERSE_COLD
/// A function kept out of the callers' code (its errors), so that the hot
/// paths of the tape stay small enough for the compiler to inline them.
#if defined(__GNUC__)
#define IMPLICIT_REVERSE_COLD __attribute__((noinline, cold))
#else
#define IMPLICIT_REVERSE_COLD
#endif

namespace implicit {
namespace internal {
/// Whether a vector expression exposes its storage (data(), innerStride()):
/// plain vectors, blocks, maps (Eigen's strided IndexedView has no data()).
template <typename E, typename = void>
struct ExposesStorage : std::false_type {};
template <typename E>
struct ExposesStorage<E, std::void_t<decltype(std::declval<const E&>().data()),
                                     decltype(std::declval<const E&>().innerStride())>>
    : std::true_type {};

/// Whether V is a dual number whose value part is a number (not a dual).
template <typename V, typename = void>
struct IsDualOfNumber : std::false_type {};
template <typename V>
struct IsDualOfNumber<V, std::enable_if_t<IsDual<V>::value>>
    : std::is_arithmetic<std::decay_t<decltype(std::declval<const V&>().a)>> {};

}  // namespace internal

namespace reverse {

/// The nodes recorded on one thread for values of type V. Node i has the
/// operands entries_[ends_[i-1] .. ends_[i]) (each a node and the partial
/// derivative in it), or is a run: a vector node over the
/// consecutive nodes first, first + 1, ... (a dot product of numbers with a
/// block of variables) whose partials are numbers (constants even when V is a
/// dual: their tangents are zero), stored once in numbers_; such a node has one
/// operand, ~(its index in runs_) < 0. Independent variables are nodes without
/// operands. A Var knows its node by an id, the recording's number times 2^32
/// plus the node: an id of another recording (a Var kept from an earlier
/// evaluation, or from another thread) is refused with std::logic_error, never
/// read as a node of this one.
template <typename V>
class Tape {
 public:
  /// The number type under V (V itself, or a dual's value part's).
  using Number = typename internal::NumberTypeOf<V>::type;
  /// Whether V is a dual number (forward over reverse) rather than a number.
  static constexpr bool kDual = !std::is_same<V, Number>::value;
  static_assert(!kDual || internal::IsDual<V>::value,
                "reverse::Tape: values are numbers or first-order duals of one tangent");
  /// Whether a recording can be linearised (BeginRecording's `linearize`):
  /// dual values of one tangent whose value part is a number.
  static constexpr bool kLinearizable = internal::IsDualOfNumber<V>::value;
  /// This thread's tape.
  IMPLICIT_REVERSE_INLINE static Tape& ThisThread() {
    static thread_local Tape tape;
    return tape;
  }

  /// Number of nodes recorded so far in this recording.
  Index size() const { return static_cast<Index>(ends_.size()); }

  /// Clears the tape and marks it recording until EndRecording (throws
  /// std::logic_error when it already is: nested recordings on one thread).
  /// With `linearize` (dual values of numbers only: kLinearizable), the
  /// nodes' second derivatives are recorded too, so that the recording can be
  /// kept and its tangents recomputed for other directions (SetDirection).
  /// \throws std::logic_error when a recording is already in progress on this thread.
  void BeginRecording(bool linearize = false) {
    if (recording_) {
      throw std::logic_error(
          "reverse::Tape: a recording is already in progress on this thread (nested "
          "reverse-mode evaluations of the same scalar type are not supported)");
    }
    ends_.clear();
    entries_.clear();
    runs_.clear();
    numbers_.clear();
    known_runs_.clear();
    known_constants_.clear();
    products_.clear();
    product_nodes_.clear();
    owned_used_ = 0;
    outputs_used_ = 0;
    for (ReadFactor& r : read_) r.data = nullptr;
    curvatures_.clear();
    linearizing_ = kLinearizable && linearize;
    linearized_ = false;
    adjoint_values_output_ = -1;
    last_ordinary_ = -1;
    recording_ = true;
    recording_number_ = (recording_number_ + 1) & 0x3fffffff;  // bit 62 of an id is free (reverse_var.h)
  }
  /// Ends the recording begun by BeginRecording(); its nodes stay readable until the next one.
  void EndRecording() {
    recording_ = false;
    last_ordinary_ = -1;
  }

  ///@{
  /// Appends a node (operands by their ids); returns its id.
  /// \throws std::logic_error when an operand is of another recording.
  /// \throws std::length_error when the recording would exceed 2^31 nodes.
  std::int64_t Push0() { return Close(); }
  std::int64_t Push1(std::int64_t a, const V& da) {
    entries_.Push(da, Node(a));
    return last_ordinary_ = Close();
  }
  std::int64_t Push2(std::int64_t a, const V& da, std::int64_t b, const V& db) {
    const std::int32_t na = Node(a), nb = Node(b);
    entries_.Push(da, na);
    entries_.Push(db, nb);
    return last_ordinary_ = Close();
  }
  ///@}
  ///@{
  /// Push1 and Push2 of a node whose partials depend on its operands: haa,
  /// hab, hbb are the second derivatives of the node in its operand nodes
  /// (the partials' derivatives), recorded when the tape is linearizing.
  std::int64_t Push1(std::int64_t a, const V& da, Number haa) {
    const std::int64_t id = Push1(a, da);
    if (linearizing_) Curve(entries_.size() - 1, a, haa);
    return id;
  }
  std::int64_t Push2(std::int64_t a, const V& da, std::int64_t b, const V& db, Number haa, Number hab,
                     Number hbb) {
    const std::int64_t id = Push2(a, da, b, db);
    if (linearizing_) {
      const std::size_t ka = entries_.size() - 2, kb = entries_.size() - 1;
      Curve(ka, a, haa);
      Curve(ka, b, hab);
      Curve(kb, a, hab);
      Curve(kb, b, hbb);
    }
    return id;
  }
  ///@}
  /// Whether this recording keeps second derivatives (BeginRecording's `linearize`).
  bool linearizing() const { return linearizing_; }
  /// For the operand just added for `a` (AddOperand returned true): its
  /// partial da depends on y's value with derivative h (recorded when the
  /// tape is linearizing and y is a variable; the Vars' scales are applied
  /// here).
  void AddCurvature(const Var<V>& a, const Var<V>& y, Number h) {
    if (linearizing_ && y.is_variable()) Curve(entries_.size() - 1, y.index(), h * a.scale() * y.scale());
  }
  /// For the operand just added for `a`: its partial depends on the value of
  /// the node being built (closed next) with derivative h.
  void AddCurvatureInResult(const Var<V>& a, Number h) {
    if (linearizing_ && h != Number(0)) {
      curvatures_.push_back({static_cast<std::uint32_t>(entries_.size() - 1),
                             static_cast<std::int32_t>(ends_.size()), h * a.scale()});
    }
  }
  /// Adds operand b with partial db to node `last` when it is the last node
  /// recorded and one of one or two operands (Push1, Push2, or one extended
  /// since: not a run, a product's, an independent variable's or a node of
  /// AddOperand), and b is another node; returns whether it did (Var's
  /// accumulation: the caller knows no other Var refers to `last`).
  /// \throws std::logic_error when b is a variable of another recording.
  bool Extend(std::int64_t last, std::int64_t b, const V& db) {
    if (last != last_ordinary_) return false;
    // last is a node of this recording: b is one when its recording number
    // is last's, and then an earlier node unless it is last itself.
    if ((b ^ last) >> 32 != 0) ThrowForeignVar();
    if (b == last) return false;
    entries_.Push(db, static_cast<std::int32_t>(b & 0xffffffff));
    ++ends_.back();
    return true;
  }
  /// A node of many operands: AddOperand for each, then Close. The partial
  /// da is in the Var; its scale is multiplied in, and a constant adds
  /// nothing. Returns whether it is a variable.
  /// \throws std::logic_error when `a` is a variable of another recording.
  bool AddOperand(const Var<V>& a, const V& da) {
    if (!a.is_variable()) return false;
    entries_.Push(da * a.scale(), Node(a.index()));
    return true;
  }
  /// AddOperand(a[i], partial(i)) for i < count, the tape's state read once
  /// (one call per operand reads it again after every store: the largest
  /// part of recording a log-sum-exp over many scores). On a linearizing
  /// tape, curvature(i) adds a[i]'s second derivatives (AddCurvature) right
  /// after a[i] is added, to which they refer: there the operands go one at a
  /// time. Returns whether any a[i] is a variable.
  /// \throws std::logic_error when an a[i] is a variable of another recording.
  template <typename Partial, typename Curvature>
  bool AddOperands(const Var<V>* a, std::size_t count, const Partial& partial, const Curvature& curvature) {
    return AddOperandsAt(a, count, [](std::size_t j) { return j; }, partial, curvature);
  }
  /// AddOperands for operands without second derivatives (a linear node).
  template <typename Partial>
  bool AddOperands(const Var<V>* a, std::size_t count, const Partial& partial) {
    return AddOperandsAt(a, count, [](std::size_t j) { return j; }, partial);
  }
  /// AddOperands of count operands a[at(j)], j < count (a selection: the
  /// coefficients a clamp kept), with partial(at(j)) and curvature(at(j)).
  template <typename At, typename Partial, typename Curvature>
  bool AddOperandsAt(const Var<V>* a, std::size_t count, const At& at, const Partial& partial,
                     const Curvature& curvature) {
    if (!linearizing_) return AddOperandsAt(a, count, at, partial);
    bool any = false;
    for (std::size_t j = 0; j < count; ++j) {
      const std::size_t i = at(j);
      if (AddOperand(a[i], partial(i))) {
        any = true;
        curvature(i);
      }
    }
    return any;
  }
  /// AddOperandsAt for operands without second derivatives.
  template <typename At, typename Partial>
  bool AddOperandsAt(const Var<V>* a, std::size_t count, const At& at, const Partial& partial) {
    entries_.Reserve(entries_.used + count);
    V* partials = entries_.partials.data() + entries_.used;
    std::int32_t* operands = entries_.operands.data() + entries_.used;
    const std::int64_t recording = recording_ ? recording_number_ : -1;
    const std::int64_t nodes = static_cast<std::int64_t>(ends_.size());
    std::size_t added = 0;
    for (std::size_t j = 0; j < count; ++j) {
      const std::size_t i = at(j);
      const Var<V>& x = a[i];
      if (!x.is_variable()) continue;
      const std::int64_t id = x.index(), node = id & 0xffffffff;
      if ((id >> 32) != recording || node >= nodes) ThrowForeignVar();
      partials[added] = partial(i) * x.scale();
      operands[added] = static_cast<std::int32_t>(node);
      ++added;
    }
    entries_.used += added;
    return added > 0;
  }
  /// Records out_i = f(x_i, s), i < count, an elementwise operation of Vars
  /// x[0 .. count) with one scalar Var s (x - s, x / s, s * x, ...), as a
  /// block: a step node, then count output nodes without operands whose ids
  /// are returned's, returned + 1, ...; d out_i / d x_i = a[i] and
  /// d out_i / d s = b[i]. Its reverse, once every reader of the outputs is
  /// swept (at the step node, recorded before them), is two vector
  /// operations: adj x_i += a_i adj out_i and adj s += sum_i b_i adj out_i
  /// (a node per output added to s's adjoint one output at a time, each
  /// waiting on the last). Numbers only (duals' partials have tangents). x
  /// may alias the outputs' destination: everything is read before this returns.
  /// \throws std::logic_error when a node is open, or s or an x_i is of another recording.
  std::int64_t PushElementwise(const Var<V>* x, std::size_t count, const Var<V>& s, const Number* a,
                               const Number* b) {
    static_assert(!kDual, "reverse::Tape::PushElementwise: values are numbers");
    if (entries_.size() != (ends_.empty() ? 0 : ends_.back())) {
      throw std::logic_error("reverse::Tape::PushElementwise: a node is open");
    }
    CheckRoom(count + 2);
    Run run{0, numbers_.size(), count, nullptr};
    run.scalar = Node(s.index());
    const std::size_t listed = product_nodes_.size();
    product_nodes_.resize(listed + count);
    std::int32_t* nodes = product_nodes_.data() + listed;
    bool consecutive = count > 0;
    for (std::size_t i = 0; i < count; ++i) {
      nodes[i] = x[i].is_variable() ? Node(x[i].index()) : -1;
      consecutive = consecutive && nodes[i] >= 0 && nodes[i] == nodes[0] + static_cast<std::int32_t>(i);
    }
    if (consecutive) {
      run.first = nodes[0];
      product_nodes_.resize(listed);
    } else {
      run.listed = static_cast<std::int64_t>(listed);
    }
    numbers_.resize(run.begin + 2 * count);
    Number* partials = numbers_.data() + run.begin;
    const Number scale = s.scale();
    for (std::size_t i = 0; i < count; ++i) {
      partials[i] = x[i].is_variable() ? a[i] * x[i].scale() : Number(0);
      partials[count + i] = b[i] * scale;
    }
    run.outputs = static_cast<std::int32_t>(ends_.size() + 1);
    AddRunOperand(run);
    Close();
    ends_.insert(ends_.end(), count, static_cast<std::uint32_t>(entries_.size()));
    last_ordinary_ = -1;
    return (static_cast<std::int64_t>(recording_number_) << 32) | static_cast<std::int64_t>(run.outputs);
  }
  /// A node whose operands are the numbers.size() consecutive nodes of ids
  /// first, first + 1, ..., with the partials `numbers` (a vector of numbers:
  /// double or float); returns its id. The node must have no other operands.
  /// With `persistent` the caller promises that the numbers' storage stays
  /// unchanged until the sweeps of this recording are done (ad::Persistent):
  /// the node then points to it (when it is contiguous, of the tape's number
  /// type) instead of copying it.
  /// \throws std::logic_error when the node already has operands or a node is of another
  ///         recording.
  template <typename Numbers>
  std::int64_t PushRun(std::int64_t first, const Numbers& numbers, bool persistent = false) {
    if (entries_.size() != (ends_.empty() ? 0 : ends_.back())) {
      throw std::logic_error("reverse::Tape::PushRun: the node already has operands");
    }
    const Index count = numbers.size();
    if (count <= 0) return Close();
    const std::int32_t node = Node(first);
    Node(first + count - 1);  // the last one is of this recording too
    AddRunOperand({node, numbers_.size(), static_cast<std::size_t>(count), nullptr});
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
  /// Closes the node whose operands were added (AddOperand()), or appends one without
  /// operands; returns its id.
  /// \throws std::length_error when the recording would exceed 2^31 nodes or 2^32 operands.
  std::int64_t Close() {
    CheckRoom(1);
    last_ordinary_ = -1;
    ends_.push_back(static_cast<std::uint32_t>(entries_.size()));
    return (static_cast<std::int64_t>(recording_number_) << 32) |
           static_cast<std::int64_t>(ends_.size() - 1);
  }
  /// The node of id `id` on this recording (throws for an id of another).
  /// \throws std::logic_error when `id` is not a node of this recording.
  std::int32_t Node(std::int64_t id) const {
    const std::int64_t node = id & 0xffffffff;
    if (!recording_ || (id >> 32) != recording_number_ ||
        node >= static_cast<std::int64_t>(ends_.size())) {
      ThrowForeignVar();
    }
    return static_cast<std::int32_t>(node);
  }

  // ---- Recorded matrix products (reverse_eigen.h records them) ----

  /// A factor of a recorded product, as it is used in the product (op(F),
  /// rows x cols): constant numbers, or variables. Constants are `numbers`
  /// (a matrix of the caller's that outlives the sweeps, or one of the tape's
  /// own: owned >= 0), used transposed or not; variables are values (and, for
  /// dual V, tangents) in the tape's own matrices, column-major in the used
  /// orientation, or held where they are (a known run, a block of an earlier
  /// product's output), with their nodes: laid out like the held values or
  /// consecutive from `first` in the used orientation, or one per entry at
  /// product_nodes_[ids ..) (-1 for a constant entry).
  struct ProductFactor {
    ///@{
    /// The shape of the factor as used in the product, rows x cols of op(F).
    Index rows = 0, cols = 0;
    ///@}
    internal::GemmOperand<Number> numbers;  ///< A constant's numbers (data null when owned).
    int owned = -1;                          ///< A constant in the tape's own matrix of this slot (-1: none).
    ///@{
    /// A variable's values and tangents: slots of the tape's own matrices (-1: none).
    int values = -1, tangents = -1;
    ///@}
    /// Or a variable's values where they are (a known run, an earlier
    /// product's output).
    const Number* held = nullptr;
    /// A held variable's tangents where they are (null: none).
    const Number* held_tangents = nullptr;
    /// A variable's first node when its nodes are laid out regularly (-1
    /// otherwise): the node of entry (i, j) of the stored matrix is first +
    /// i + j * stride, held values lie at held[i + j * stride] alike.
    std::int32_t first = -1;
    /// The leading dimension of the stored matrix of `first` and `held`.
    Index stride = 0;
    /// Whether op(F) is the stored matrix's transpose (`first`, `held`).
    bool stored_transposed = false;
    /// Where a variable's per-entry nodes start among the product nodes (kNoIds: consecutive).
    std::size_t ids = kNoIds;
    /// Whether the factor is a variable (values in the tape or held) rather than constant numbers.
    bool variable() const { return values >= 0 || held != nullptr; }
  };
  /// ProductFactor::ids of a factor without a node list.
  static constexpr std::size_t kNoIds = static_cast<std::size_t>(-1);

  /// A matrix of the tape's own for this recording (rows x cols, contents
  /// unspecified), kept until the next recording: its slot.
  int OwnedMatrix(Index rows, Index cols) { return TakeMatrix(&owned_, &owned_used_, rows, cols); }
  /// The tape's own matrix in slot `slot` (from OwnedMatrix()).
  Matrix<Number>& Owned(int slot) { return owned_[static_cast<std::size_t>(slot)]; }
  /// How many numbers this recording's products hold in the tape's own
  /// matrices (their variables' values and tangents, and data copied because
  /// it was not persistent).
  std::size_t owned_numbers() const {
    std::size_t total = 0;
    for (std::size_t i = 0; i < owned_used_; ++i) total += static_cast<std::size_t>(owned_[i].size());
    return total;
  }
  /// A stored matrix of Vars read as a variable product factor in this
  /// recording (FactorBuilder), and the factor made of it: a later product
  /// that reads the same matrix checks it unchanged against the factor's
  /// values and nodes instead of copying it again.
  struct ReadFactor {
    const void* data = nullptr;  ///< the matrix's first entry
    ///@{
    /// The matrix's shape and leading dimension.
    Index rows = 0, cols = 0, outer_stride = 0;
    ///@}
    bool transposed = false;  ///< whether the product used its transpose
    ProductFactor factor;     ///< the factor made of it
  };
  /// Remembers `read` among the last kReadFactors factors read.
  void RememberRead(const ReadFactor& read) { read_[next_read_++ % kReadFactors] = read; }
  /// The factor remembered for the matrix at `data` read this way, or null.
  const ReadFactor* FindRead(const void* data, Index rows, Index cols, Index outer_stride, bool transposed) const {
    for (const ReadFactor& r : read_) {
      if (r.data == data && r.rows == rows && r.cols == cols && r.outer_stride == outer_stride &&
          r.transposed == transposed) {
        return &r;
      }
    }
    return nullptr;
  }
  /// The nodes of a factor's entries listed at product_nodes_[ids ..).
  const std::int32_t* ProductNodes(std::size_t ids) const { return product_nodes_.data() + ids; }
  /// Per-entry nodes of a variable factor: where they start in product_nodes_.
  std::size_t AddProductNodes(const std::int32_t* nodes, std::size_t count) {
    const std::size_t at = product_nodes_.size();
    product_nodes_.insert(product_nodes_.end(), nodes, nodes + count);
    return at;
  }

  /// S = alpha op(A) op(B) (A m x k, B k x n as used) into *out, recorded
  /// as a block of m n new nodes without operands (S's entries column-major)
  /// when a factor is variable, as constants otherwise. The reverse sweep
  /// differentiates the block at once when it reaches its last node:
  /// d op(A) += alpha dS op(B)^T, d op(B) += alpha op(A)^T dS, each a matrix
  /// product of numbers.
  /// \throws std::logic_error when a node is open.
  /// \throws std::invalid_argument when op(A) and op(B) cannot be multiplied.
  void PushProduct(const ProductFactor& a, const ProductFactor& b, Number alpha, Matrix<Var<V>>* out) {
    if (entries_.size() != (ends_.empty() ? 0 : ends_.back())) {
      throw std::logic_error("reverse::Tape::PushProduct: a node is open");
    }
    if (a.cols != b.rows) {
      throw std::invalid_argument("reverse::Tape::PushProduct: a " + std::to_string(a.rows) + "x" +
                                  std::to_string(a.cols) + " times b " + std::to_string(b.rows) + "x" +
                                  std::to_string(b.cols));
    }
    const Index m = a.rows, n = b.cols;
    out->resize(m, n);
    const std::size_t outputs = static_cast<std::size_t>(m * n);
    if (outputs == 0) return;
    const bool variable = a.variable() || b.variable();
    if (variable) CheckRoom(outputs + 1);  // the block, and room for one more node after it
    // The value (and for duals the tangent: op(A).v op(B) + op(A) op(B).v),
    // kept by the tape for a variable product: a later product whose factor
    // is (a block of) this one's output reads them there.
    Product p;
    if (variable) {
      p.values = OutputMatrix(m, n);
      if constexpr (kDual) p.tangents = OutputMatrix(m, n);
    }
    Matrix<Number>& s = variable ? outputs_[static_cast<std::size_t>(p.values)] : product_scratch_[0];
    Matrix<Number>& t = kDual && variable ? outputs_[static_cast<std::size_t>(p.tangents)] : product_scratch_[1];
    s.resize(m, n);
    internal::Gemm(alpha, Operand(a, false), Operand(b, false), Number(0), s.data(), m);
    if constexpr (kDual) ProductTangents(a, b, alpha, &t);
    const auto value = [&](Index i) {
      if constexpr (kDual) {
        V v(s(i));
        v.v[0] = t(i);
        return v;
      } else {
        return s(i);
      }
    };
    Var<V>* entries = out->data();
    if (!variable) {
      for (Index i = 0; i < m * n; ++i) entries[i] = Var<V>(value(i));
      return;
    }
    p.first = static_cast<std::int32_t>(ends_.size());
    p.a = a;
    p.b = b;
    p.alpha = alpha;
    products_.push_back(p);
    ends_.insert(ends_.end(), outputs, static_cast<std::uint32_t>(entries_.size()));
    last_ordinary_ = -1;
    const std::int64_t first = (static_cast<std::int64_t>(recording_number_) << 32) | static_cast<std::int64_t>(p.first);
    for (Index i = 0; i < m * n; ++i) entries[i] = Var<V>(value(i), first + i);
  }

  /// Declares vars[0 .. size) a known run: Vars of consecutive nodes (checked;
  /// std::logic_error otherwise) whose values are also stored contiguously at
  /// values[0 .. size), both unchanged until the recording ends (the caller's
  /// promise). A vector operation on a stretch of it (ad::Dot) then finds its
  /// nodes and values by one lookup instead of reading every Var.
  /// \throws std::logic_error when the Vars are not consecutive nodes of this recording.
  void AddKnownRun(const Var<V>* vars, Index size, const V* values) {
    if (size <= 0) return;
    const std::int64_t first = vars[0].index();
    for (Index i = 0; i < size; ++i) {
      if (first < 0 || vars[i].index() != first + static_cast<std::int64_t>(i) || !vars[i].unit_scale()) {
        throw std::logic_error("reverse::Tape::AddKnownRun: the Vars are not consecutive nodes");
      }
    }
    Node(first + size - 1);  // of this recording
    known_runs_.push_back({vars, size, first, values});
  }
  /// When vars[0 .. size) lies within a known run: true, with the id of its
  /// first node and where its values are.
  bool FindKnownRun(const Var<V>* vars, Index size, std::int64_t* first, const V** values) const {
    const KnownRun* run = Find(known_runs_, vars, size);
    if (run == nullptr) return false;
    const Index offset = static_cast<Index>(vars - run->vars);
    *first = run->first + offset;
    *values = run->values + offset;
    return true;
  }
  /// Declares vars[0 .. size) known constants: Vars of no node whose values
  /// are numbers (a dual's tangent zero), also stored at values[0 .. size),
  /// both unchanged until the recording ends (the caller's promise). A
  /// product's factor on a stretch of them then reads those numbers instead
  /// of every Var (AutoDiffEnergy's parameters in a sweep in x alone).
  void AddKnownConstants(const Var<V>* vars, Index size, const V* values) {
    if (size > 0) known_constants_.push_back({vars, size, -1, values});
  }
  /// When vars[0 .. size) lies within known constants: true, with where their values are.
  bool FindKnownConstants(const Var<V>* vars, Index size, const V** values) const {
    const KnownRun* run = Find(known_constants_, vars, size);
    if (run == nullptr) return false;
    *values = run->values + (vars - run->vars);
    return true;
  }

  /// The output of a recorded product as the tape holds it: S = op(A) op(B)
  /// (rows x cols), its entries the nodes first + i + j rows, their values
  /// values[i + j rows] and, for duals, tangents (null when it has none).
  struct ProductOutput {
    std::int32_t first = -1;  ///< the node of S(0, 0)
    ///@{
    /// The shape of S.
    Index rows = 0, cols = 0;
    ///@}
    const Number* values = nullptr;    ///< S's values, column-major
    const Number* tangents = nullptr;  ///< their tangents (duals; null otherwise)
  };
  /// When node `node` (of this recording) is an entry of a product's output:
  /// true, with that output.
  bool FindProductOutput(std::int32_t node, ProductOutput* out) const {
    // The products in the order recorded: the last one that starts at or below the node.
    const auto after = std::upper_bound(products_.begin(), products_.end(), node,
                                        [](std::int32_t n, const Product& p) { return n < p.first; });
    if (after == products_.begin()) return false;
    const Product& p = *(after - 1);
    const Index rows = p.a.rows, cols = p.b.cols;
    if (static_cast<Index>(node - p.first) >= rows * cols) return false;
    out->first = p.first;
    out->rows = rows;
    out->cols = cols;
    out->values = outputs_[static_cast<std::size_t>(p.values)].data();
    out->tangents = p.tangents >= 0 ? outputs_[static_cast<std::size_t>(p.tangents)].data() : nullptr;
    return true;
  }

  /// The adjoints d(node of id output)/d(node i) of the first `count` nodes
  /// (the independent variables when they were recorded first) into
  /// adjoints[i].
  /// \throws std::logic_error when `output` is not a node of this recording.
  void Adjoints(std::int64_t output, Index count, V* adjoints) const {
    SweepFrom(Node(output), count, adjoints);
  }
  /// Adjoints() from node `output` of the recording this tape holds (a
  /// recording kept by CopyRecordingTo, whose nodes' ids are no longer checked).
  void SweepFrom(std::int32_t output, Index count, V* adjoints) const {
    const std::size_t out = static_cast<std::size_t>(output);
    adjoints_.assign(ends_.size(), V(0.0));
    adjoints_[out] = V(1.0);
    const std::int32_t* operands = entries_.operands.data();
    const V* partials = entries_.partials.data();
    Sweep(out, [&](std::size_t i, std::size_t begin, std::size_t end) {
      const V g = adjoints_[i];
      if (operands[begin] < 0) {
        const Run& run = runs_[static_cast<std::size_t>(~operands[begin])];
        if (run.outputs >= 0) {
          if constexpr (!kDual) BackwardElementwise(run);
          return;
        }
        if (internal::IsAllZero(g)) return;
        V* adjoint = adjoints_.data() + run.first;  // a run
        const Number* partial = RunPartials(run);
        for (std::size_t k = 0; k < run.count; ++k) adjoint[k] += g * partial[k];
        return;
      }
      if (internal::IsAllZero(g)) return;
      for (std::size_t k = begin; k < end; ++k) {
        adjoints_[static_cast<std::size_t>(operands[k])] += partials[k] * g;
      }
    }, [&](const Product& p) { BackwardProduct(p); });
    for (Index i = 0; i < count; ++i) adjoints[i] = adjoints_[static_cast<std::size_t>(i)];
  }
  /// The tangents alone of SweepFrom's adjoints, for the direction
  /// SetDirection set last: the Hessian-vector product, into hv[0 .. count).
  /// The adjoints' values do not depend on the direction: they are swept
  /// once per kept recording, and each direction then sweeps tangents only
  /// (a third less arithmetic, and products of numbers for the values' part
  /// of a product's reverse are not repeated).
  /// \throws std::logic_error when the recording was not linearised (CheckLinearization).
  void TangentSweepFrom(std::int32_t output, Index count, Number* hv) const {
    if constexpr (!kLinearizable) {
      (void)output;
      (void)count;
      (void)hv;
      throw std::logic_error("reverse::Tape::TangentSweepFrom: values are not duals of numbers");
    } else {
      if (!linearized_) throw std::logic_error("reverse::Tape::TangentSweepFrom: the recording was not linearised");
      const std::size_t out = static_cast<std::size_t>(output);
      if (adjoint_values_output_ != output) {  // the values, once
        SweepFrom(output, 0, nullptr);
        adjoint_values_.resize(ends_.size());
        for (std::size_t i = 0; i < ends_.size(); ++i) adjoint_values_[i] = adjoints_[i].a;
        adjoint_values_output_ = output;
      }
      tangent_adjoints_.assign(ends_.size(), Number(0));
      const std::int32_t* operands = entries_.operands.data();
      const V* partials = entries_.partials.data();
      Number* t = tangent_adjoints_.data();
      Sweep(out, [&](std::size_t i, std::size_t begin, std::size_t end) {
        const Number g = adjoint_values_[i], gt = t[i];
        if (g == Number(0) && gt == Number(0)) return;
        if (operands[begin] < 0) {  // a run: number partials, no tangents
          const Run& run = runs_[static_cast<std::size_t>(~operands[begin])];
          Number* adjoint = t + run.first;
          const Number* partial = RunPartials(run);
          for (std::size_t k = 0; k < run.count; ++k) adjoint[k] += gt * partial[k];
          return;
        }
        for (std::size_t k = begin; k < end; ++k) {
          t[static_cast<std::size_t>(operands[k])] += partials[k].v[0] * g + partials[k].a * gt;
        }
      }, [&](const Product& p) {
        // (d op(A)).v = alpha (dS.v op(B)^T + dS op(B).v^T), (d op(B)).v = alpha (op(A).v^T dS + op(A)^T dS.v).
        const Index m = p.a.rows, n = p.b.cols;
        const internal::GemmOperand<Number> dS{adjoint_values_.data() + p.first, m, n, m, false};
        const internal::GemmOperand<Number> dS_t{t + p.first, m, n, m, false};
        if (p.a.variable()) {
          AddToNumbers(p.a, p.alpha, dS_t, Transposed(Operand(p.b, false)), dS, Transposed(Operand(p.b, true)), t);
        }
        if (p.b.variable()) {
          AddToNumbers(p.b, p.alpha, Transposed(Operand(p.a, false)), dS_t, Transposed(Operand(p.a, true)), dS, t);
        }
      });
      for (Index i = 0; i < count; ++i) hv[i] = t[i];
    }
  }

  // ---- A linearised recording (BeginRecording's `linearize`) ----
  /// Recomputes every tangent of the recording this tape holds for the
  /// direction u[0 .. count) of its first `count` nodes (the independent
  /// variables; other nodes without operands get tangent 0), as if it had
  /// been recorded with those tangents: the nodes' tangents from their
  /// partials (a forward pass; a product's by two products), the partials'
  /// tangents from the second derivatives recorded. A sweep (SweepFrom) then
  /// gives the Hessian-vector product in that direction without recording
  /// again. Requires a linearizing recording (else std::logic_error).
  /// \throws std::logic_error when the recording was not linearizing.
  void SetDirection(const Number* u, Index count) {
    if constexpr (!kLinearizable) {
      (void)u;
      (void)count;
      throw std::logic_error("reverse::Tape::SetDirection: values are not duals of numbers");
    } else {
      if (!linearized_) throw std::logic_error("reverse::Tape::SetDirection: the recording was not linearizing");
      const std::size_t nodes = ends_.size();
      tangents_.assign(nodes, Number(0));
      const std::size_t independent = std::min(nodes, static_cast<std::size_t>(std::max<Index>(count, 0)));
      std::copy(u, u + independent, tangents_.begin());
      const std::int32_t* operands = entries_.operands.data();
      V* partials = entries_.partials.data();
      std::size_t next = 0;  // the next product
      for (std::size_t i = independent; i < nodes; ++i) {
        if (next < products_.size() && static_cast<std::size_t>(products_[next].first) == i) {
          const Product& p = products_[next++];
          RefreshFactorTangents(p.a);
          RefreshFactorTangents(p.b);
          Matrix<Number>& t = outputs_[static_cast<std::size_t>(p.tangents)];
          ProductTangents(p.a, p.b, p.alpha, &t);
          std::copy(t.data(), t.data() + t.size(), tangents_.begin() + static_cast<std::ptrdiff_t>(i));
          i += static_cast<std::size_t>(t.size()) - 1;
          continue;
        }
        const std::size_t begin = i == 0 ? 0 : ends_[i - 1], end = ends_[i];
        if (begin == end) continue;
        Number t(0);
        if (operands[begin] < 0) {  // a run
          const Run& run = runs_[static_cast<std::size_t>(~operands[begin])];
          const Number* partial = RunPartials(run);
          const Number* operand = tangents_.data() + run.first;
          for (std::size_t k = 0; k < run.count; ++k) t += partial[k] * operand[k];
        } else {
          for (std::size_t k = begin; k < end; ++k) t += partials[k].a * tangents_[static_cast<std::size_t>(operands[k])];
        }
        tangents_[i] = t;
      }
      for (std::size_t k = 0; k < entries_.size(); ++k) partials[k].v[0] = Number(0);
      for (const Curvature& c : curvatures_) {
        partials[c.entry].v[0] += c.h * tangents_[static_cast<std::size_t>(c.node)];
      }
    }
  }
  /// Ends a linearizing recording's check: recomputes its tangents for the
  /// direction it was recorded with (u[0 .. count), SetDirection) and
  /// compares them with the recorded ones, every partial's and every
  /// product's output, each within `tolerance` relative to its terms. True
  /// when they agree: every node of the recording has its second
  /// derivatives (an operation recorded without them, such as a Var::Node
  /// of the caller's own, makes them disagree, and the recording must not be
  /// used with SetDirection). The recording's own tangents are lost.
  bool CheckLinearization(const Number* u, Index count, Number tolerance) {
    if constexpr (!kLinearizable) {
      (void)u;
      (void)count;
      (void)tolerance;
      return false;
    } else {
      if (!linearizing_ && !linearized_) return false;
      linearized_ = true;
      const std::size_t entries = entries_.size();
      std::vector<Number> recorded(entries);
      for (std::size_t k = 0; k < entries; ++k) recorded[k] = entries_.partials[k].v[0];
      std::vector<Matrix<Number>> recorded_outputs;
      for (const Product& p : products_) recorded_outputs.push_back(outputs_[static_cast<std::size_t>(p.tangents)]);
      SetDirection(u, count);
      using std::abs;
      std::vector<Number> terms(entries, Number(0));
      for (const Curvature& c : curvatures_) terms[c.entry] += abs(c.h * tangents_[static_cast<std::size_t>(c.node)]);
      for (std::size_t k = 0; k < entries; ++k) {
        const Number now = entries_.partials[k].v[0];
        if (!(abs(now - recorded[k]) <= tolerance * (abs(recorded[k]) + terms[k]))) return linearized_ = false;
      }
      for (std::size_t j = 0; j < products_.size(); ++j) {
        const Matrix<Number>& now = outputs_[static_cast<std::size_t>(products_[j].tangents)];
        const Number scale = recorded_outputs[j].norm() + now.norm();
        if (!((now - recorded_outputs[j]).norm() <= tolerance * scale)) return linearized_ = false;
      }
      return true;
    }
  }
  /// Copies the recording this tape holds (its nodes, products and second
  /// derivatives) to *kept, in storage of kept's own sized to it; this tape
  /// keeps its storage, grown for the next recording. The kept recording is
  /// read by CheckLinearization, SetDirection and SweepFrom (its Vars are
  /// gone with this tape's next recording).
  void CopyRecordingTo(Tape* kept) const {
    kept->ends_ = ends_;
    kept->entries_.partials.assign(entries_.partials.begin(),
                                   entries_.partials.begin() + static_cast<std::ptrdiff_t>(entries_.used));
    kept->entries_.operands.assign(entries_.operands.begin(),
                                   entries_.operands.begin() + static_cast<std::ptrdiff_t>(entries_.used));
    kept->entries_.used = entries_.used;
    kept->runs_ = runs_;
    kept->numbers_ = numbers_;
    kept->product_nodes_ = product_nodes_;
    kept->owned_.assign(owned_.begin(), owned_.begin() + static_cast<std::ptrdiff_t>(owned_used_));
    kept->owned_used_ = owned_used_;
    kept->outputs_.assign(outputs_.begin(), outputs_.begin() + static_cast<std::ptrdiff_t>(outputs_used_));
    kept->outputs_used_ = outputs_used_;
    kept->curvatures_ = curvatures_;
    kept->linearizing_ = linearizing_;
    kept->linearized_ = false;
    kept->adjoint_values_output_ = -1;
    // Factors held in an earlier product's output point into this tape's
    // outputs: into kept's copies there.
    const auto rebase = [&](const Number* p) -> const Number* {
      if (p == nullptr) return p;
      const std::less<const Number*> before;
      for (std::size_t k = 0; k < outputs_used_; ++k) {
        const Number* begin = outputs_[k].data();
        if (!before(p, begin) && before(p, begin + outputs_[k].size())) return kept->outputs_[k].data() + (p - begin);
      }
      return p;  // held elsewhere (a known run)
    };
    kept->products_ = products_;
    for (Product& product : kept->products_) {
      for (ProductFactor* f : {&product.a, &product.b}) {
        f->held = rebase(f->held);
        f->held_tangents = rebase(f->held_tangents);
      }
    }
  }
  /// The bytes this tape's storage takes (its capacity).
  std::size_t bytes() const {
    std::size_t total = ends_.capacity() * sizeof(std::uint32_t) +
                        entries_.partials.capacity() * (sizeof(V) + sizeof(std::int32_t)) +
                        runs_.capacity() * sizeof(Run) + numbers_.capacity() * sizeof(Number) +
                        products_.capacity() * sizeof(Product) + product_nodes_.capacity() * sizeof(std::int32_t) +
                        curvatures_.capacity() * sizeof(Curvature) + tangents_.capacity() * sizeof(Number) +
                        adjoints_.capacity() * sizeof(V);
    for (const auto* pool : {&owned_, &outputs_}) {
      for (const Matrix<Number>& m : *pool) total += static_cast<std::size_t>(m.size()) * sizeof(Number);
    }
    return total;
  }

 private:
  struct Product {
    std::int32_t first = 0;  ///< its first node
    ProductFactor a, b;
    Number alpha = Number(1);
    /// Its output's values and (duals) tangents: slots of outputs_.
    int values = -1, tangents = -1;
  };

  /// The reverse sweep's order from node `out` down: node(i, begin, end)
  /// for each node with operands (entries [begin, end)), product(p) for each
  /// product's block at once when the sweep reaches its last node (or the
  /// output, within it): every node after the block that reads one of its
  /// entries has been swept then, and the block's nodes have no operands of
  /// their own, so the sweep goes on below the block.
  template <typename NodeStep, typename ProductStep>
  void Sweep(std::size_t out, NodeStep&& node, ProductStep&& product) const {
    std::size_t products = products_.size();
    while (products > 0 && static_cast<std::size_t>(products_[products - 1].first) > out) --products;
    const auto top_of_next = [&] {
      if (products == 0) return ends_.size();
      const Product& p = products_[products - 1];
      const std::size_t last = static_cast<std::size_t>(p.first) + static_cast<std::size_t>(p.a.rows * p.b.cols) - 1;
      return std::min(last, out);
    };
    std::size_t next_product = top_of_next();
    for (std::size_t i = out + 1; i-- > 0;) {
      if (i == next_product) {
        const Product& p = products_[--products];
        product(p);
        i = static_cast<std::size_t>(p.first);  // the loop goes on below the block
        next_product = top_of_next();
        continue;
      }
      const std::size_t begin = i == 0 ? 0 : ends_[i - 1], end = ends_[i];
      if (begin != end) node(i, begin, end);
    }
  }
  /// target[f's nodes] += alpha (L R + L2 R2) (the second term left out where
  /// L2 or R2 is none): a product's reverse into numbers per node.
  void AddToNumbers(const ProductFactor& f, Number alpha, const internal::GemmOperand<Number>& L,
                    const internal::GemmOperand<Number>& R, const internal::GemmOperand<Number>& L2,
                    const internal::GemmOperand<Number>& R2, Number* target) const {
    const bool second = L2.data != nullptr && R2.data != nullptr;
    if (f.first >= 0) {  // straight into nodes laid out as a matrix
      Number* at = target + f.first;
      if (f.stored_transposed) {  // d F = (d op(F))^T = R^T L^T
        internal::Gemm(alpha, Transposed(R), Transposed(L), Number(1), at, f.stride);
        if (second) internal::Gemm(alpha, Transposed(R2), Transposed(L2), Number(1), at, f.stride);
      } else {
        internal::Gemm(alpha, L, R, Number(1), at, f.stride);
        if (second) internal::Gemm(alpha, L2, R2, Number(1), at, f.stride);
      }
      return;
    }
    Matrix<Number>& d = product_scratch_[2];
    d.resize(f.rows, f.cols);
    internal::Gemm(alpha, L, R, Number(0), d.data(), f.rows);
    if (second) internal::Gemm(alpha, L2, R2, Number(1), d.data(), f.rows);
    ForEachNode(f, [&](Index i, std::size_t node) { target[node] += d(i); });
  }
  /// fn(i, node) for each entry i (column-major in op(F)) of variable factor
  /// f that is a node: laid out from `first` (entry (r, c) of op(F) is node
  /// first + r + c stride, or first + c + r stride when stored transposed),
  /// or listed among the product nodes (-1, a constant entry, left out).
  /// fn(r, c, node) alike, with the entry's row and column in op(F).
  template <typename Fn>
  void ForEachNode(const ProductFactor& f, Fn&& fn) const {
    if constexpr (std::is_invocable_v<Fn&, Index, std::size_t>) {
      ForEachNode(f, [&](Index r, Index c, std::size_t node) { fn(r + c * f.rows, node); });
    } else if (f.first >= 0) {
      const std::size_t first = static_cast<std::size_t>(f.first), stride = static_cast<std::size_t>(f.stride);
      const std::size_t row_step = f.stored_transposed ? stride : 1, col_step = f.stored_transposed ? 1 : stride;
      for (Index c = 0; c < f.cols; ++c) {
        for (Index r = 0; r < f.rows; ++r) {
          fn(r, c, first + static_cast<std::size_t>(r) * row_step + static_cast<std::size_t>(c) * col_step);
        }
      }
    } else {
      const std::int32_t* nodes = product_nodes_.data() + f.ids;
      for (Index c = 0; c < f.cols; ++c, nodes += f.rows) {
        for (Index r = 0; r < f.rows; ++r) {
          if (nodes[r] >= 0) fn(r, c, static_cast<std::size_t>(nodes[r]));
        }
      }
    }
  }

  /// A second derivative of a linearizing recording: the partial of operand
  /// `entry` changes with the value of node `node` at rate h.
  struct Curvature {
    std::uint32_t entry;
    std::int32_t node;
    Number h;
  };
  /// Records that the partial of entry k depends on node id a's value at rate h (h = 0: nothing).
  void Curve(std::size_t k, std::int64_t a, Number h) {
    if (h != Number(0)) curvatures_.push_back({static_cast<std::uint32_t>(k), Node(a), h});
  }
  /// *t = alpha (op(A).v op(B) + op(A) op(B).v): the tangent of a product's output.
  void ProductTangents(const ProductFactor& a, const ProductFactor& b, Number alpha, Matrix<Number>* t) const {
    const Index m = a.rows, n = b.cols;
    t->resize(m, n);
    const internal::GemmOperand<Number> a_tangents = Operand(a, true), b_tangents = Operand(b, true);
    if (a_tangents.data != nullptr && b_tangents.data != nullptr) {
      const Index k = a.cols;
      if (Stacks(m, n, k)) {  // one product [op(A).v | op(A)] [op(B); op(B).v] of depth 2k
        Matrix<Number>& left = product_scratch_[4];
        Matrix<Number>& right = product_scratch_[5];
        left.resize(m, 2 * k);
        right.resize(2 * k, n);
        CopyOperand(a_tangents, left.data(), m);
        CopyOperand(Operand(a, false), left.data() + m * k, m);
        CopyOperand(Operand(b, false), right.data(), 2 * k);
        CopyOperand(b_tangents, right.data() + k, 2 * k);
        internal::Gemm(alpha, {left.data(), m, 2 * k, m, false}, {right.data(), 2 * k, n, 2 * k, false}, Number(0),
                       t->data(), m);
        return;
      }
    }
    SumOfProducts(alpha, a_tangents, Operand(b, false), Operand(a, false), b_tangents, t);
  }
  /// *c = alpha (L1 R1 + L2 R2), a term left out where one of its factors is
  /// none (data null); zero when both are.
  static void SumOfProducts(Number alpha, const internal::GemmOperand<Number>& L1,
                            const internal::GemmOperand<Number>& R1, const internal::GemmOperand<Number>& L2,
                            const internal::GemmOperand<Number>& R2, Matrix<Number>* c) {
    Number beta(0);
    for (const auto& [L, R] : {std::pair(L1, R1), std::pair(L2, R2)}) {
      if (L.data == nullptr || R.data == nullptr) continue;
      internal::Gemm(alpha, L, R, beta, c->data(), c->rows());
      beta = Number(1);
    }
    if (beta == Number(0)) c->setZero();
  }
  /// Whether the two products of a dual product's tangent (m x n, depth k)
  /// are worth computing as one of twice the depth: the copies of the small
  /// factors that makes (m k + k n numbers) are small against the product.
  static bool Stacks(Index m, Index n, Index k) { return m >= 8 && n >= 8 && k > 0; }
  /// dst (op(f), at leading dimension ld) = op(f).
  static void CopyOperand(const internal::GemmOperand<Number>& f, Number* dst, Index ld) {
    using Stride = Eigen::OuterStride<>;
    Eigen::Map<Matrix<Number>, 0, Stride> out(dst, f.op_rows(), f.op_cols(), Stride(ld));
    const Eigen::Map<const Matrix<Number>, 0, Stride> in(f.data, f.rows, f.cols, Stride(f.stride));
    if (f.transposed) {
      out = in.transpose();
    } else {
      out = in;
    }
  }
  /// A variable factor's tangents copied from its nodes' (tangents_), where
  /// the tape holds a copy of them (a factor held where it is, an earlier
  /// product's output, has its tangents there).
  void RefreshFactorTangents(const ProductFactor& f) {
    if (f.tangents < 0) return;
    Matrix<Number>& t = owned_[static_cast<std::size_t>(f.tangents)];
    t.setZero();  // a constant entry's tangent
    ForEachNode(f, [&](Index i, std::size_t node) { t(i) = tangents_[node]; });
  }

  /// Factor f as a product operand: its numbers (a constant) or its values or
  /// tangents (a variable; the tangent of a constant is none: data null).
  internal::GemmOperand<Number> Operand(const ProductFactor& f, bool tangent) const {
    if (!f.variable()) {
      if (tangent) return {};
      if (f.owned < 0) return f.numbers;
      internal::GemmOperand<Number> o = f.numbers;
      o.data = owned_[static_cast<std::size_t>(f.owned)].data();
      return o;
    }
    if (f.held != nullptr) {
      const Number* data = tangent ? f.held_tangents : f.held;
      if (data == nullptr) return {};
      return {data, f.stored_transposed ? f.cols : f.rows, f.stored_transposed ? f.rows : f.cols, f.stride,
              f.stored_transposed};
    }
    const int slot = tangent ? f.tangents : f.values;
    if (slot < 0) return {};
    return {owned_[static_cast<std::size_t>(slot)].data(), f.rows, f.cols, f.rows, false};
  }
  /// A matrix for a variable product's output (rows x cols, contents
  /// unspecified), kept until the next recording: its slot in outputs_.
  int OutputMatrix(Index rows, Index cols) { return TakeMatrix(&outputs_, &outputs_used_, rows, cols); }
  /// The next unused matrix of `pool` (*used of them in use), made rows x
  /// cols (contents unspecified): its slot. Pools keep their matrices
  /// between recordings.
  static int TakeMatrix(std::vector<Matrix<Number>>* pool, std::size_t* used, Index rows, Index cols) {
    if (*used == pool->size()) pool->emplace_back();
    (*pool)[*used].resize(rows, cols);
    return static_cast<int>((*used)++);
  }
  static internal::GemmOperand<Number> Transposed(internal::GemmOperand<Number> o) {
    o.transposed = !o.transposed;
    return o;
  }

  /// d op(A) += alpha dS op(B)^T and d op(B) += alpha op(A)^T dS into the
  /// adjoints of A's and B's nodes; for duals also the tangents:
  /// (L R).v = L.v R + L R.v.
  void BackwardProduct(const Product& p) const {
    const Index m = p.a.rows, n = p.b.cols;
    internal::GemmOperand<Number> dS, dS_tangent;
    if constexpr (kDual) {
      Matrix<Number>& a = product_scratch_[0];
      Matrix<Number>& t = product_scratch_[1];
      a.resize(m, n);
      t.resize(m, n);
      const V* adjoint = adjoints_.data() + p.first;
      for (Index i = 0; i < m * n; ++i) {
        a(i) = adjoint[i].a;
        t(i) = adjoint[i].v[0];
      }
      dS = {a.data(), m, n, m, false};
      dS_tangent = {t.data(), m, n, m, false};
    } else {
      dS = {reinterpret_cast<const Number*>(adjoints_.data() + p.first), m, n, m, false};
    }
    if (p.a.variable()) {
      AddToAdjoints(p.a, p.alpha, dS, dS_tangent, Transposed(Operand(p.b, false)),
                    Transposed(Operand(p.b, true)));
    }
    if (p.b.variable()) {
      AddToAdjoints(p.b, p.alpha, Transposed(Operand(p.a, false)), Transposed(Operand(p.a, true)), dS,
                    dS_tangent);
    }
  }
  /// The adjoints of variable factor f's nodes += alpha L R (L, R: values;
  /// their tangents L_t, R_t when present, data null otherwise).
  void AddToAdjoints(const ProductFactor& f, Number alpha, const internal::GemmOperand<Number>& L,
                     const internal::GemmOperand<Number>& L_t, const internal::GemmOperand<Number>& R,
                     const internal::GemmOperand<Number>& R_t) const {
    if constexpr (!kDual) {  // numbers: the adjoints are a vector of them
      (void)L_t;
      (void)R_t;
      AddToNumbers(f, alpha, L, R, {}, {}, reinterpret_cast<Number*>(adjoints_.data()));
    } else {
      const Index rows = f.rows, cols = f.cols, depth = L.op_cols();
      if (L_t.data != nullptr && R_t.data != nullptr && Stacks(rows, cols, depth)) {
        // Two of the three products in one: the small factor's value and
        // tangent stacked, so the large one (the output's adjoints) is read once.
        Matrix<Number>& stacked = product_scratch_[4];
        Matrix<Number>& d = product_scratch_[2];
        if (R.op_rows() * R.op_cols() <= L.op_rows() * L.op_cols()) {  // L [R | R_t] = [L R | L R_t]
          stacked.resize(depth, 2 * cols);
          CopyOperand(R, stacked.data(), depth);
          CopyOperand(R_t, stacked.data() + depth * cols, depth);
          d.resize(rows, 2 * cols);
          internal::Gemm(alpha, L, {stacked.data(), depth, 2 * cols, depth, false}, Number(0), d.data(), rows);
          internal::Gemm(alpha, L_t, R, Number(1), d.data() + rows * cols, rows);
          AddToDualAdjoints(f, d.data(), d.data() + rows * cols, rows);
        } else {  // [L; L_t] R = [L R; L_t R]
          stacked.resize(2 * rows, depth);
          CopyOperand(L, stacked.data(), 2 * rows);
          CopyOperand(L_t, stacked.data() + rows, 2 * rows);
          d.resize(2 * rows, cols);
          internal::Gemm(alpha, {stacked.data(), 2 * rows, depth, 2 * rows, false}, R, Number(0), d.data(), 2 * rows);
          internal::Gemm(alpha, L, R_t, Number(1), d.data() + rows, 2 * rows);
          AddToDualAdjoints(f, d.data(), d.data() + rows, 2 * rows);
        }
        return;
      }
      Matrix<Number>& d = product_scratch_[2];
      Matrix<Number>& d_t = product_scratch_[3];
      d.resize(rows, cols);
      d_t.resize(rows, cols);
      internal::Gemm(alpha, L, R, Number(0), d.data(), rows);
      SumOfProducts(alpha, L_t, R, L, R_t, &d_t);
      AddToDualAdjoints(f, d.data(), d_t.data(), rows);
    }
  }
  /// The adjoints of variable factor f's nodes += (d, d_t): values and
  /// tangents of the adjoint of op(F), entry (r, c) at r + c ld.
  void AddToDualAdjoints(const ProductFactor& f, const Number* d, const Number* d_t, Index ld) const {
    if constexpr (kDual) {
      ForEachNode(f, [&](Index r, Index c, std::size_t node) {
        adjoints_[node].a += d[r + c * ld];
        adjoints_[node].v[0] += d_t[r + c * ld];
      });
    }
  }

  /// Throws when `nodes` more nodes would exceed the ids (2^31 nodes) or the
  /// 4-byte node ends (2^32 operands).
  void CheckRoom(std::size_t nodes) const {
    if (ends_.size() + nodes > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()) ||
        entries_.size() >= static_cast<std::size_t>(std::numeric_limits<std::uint32_t>::max())) {
      ThrowTooManyNodes();
    }
  }
  [[noreturn]] IMPLICIT_REVERSE_COLD static void ThrowTooManyNodes() {
    throw std::length_error("reverse::Tape: more than 2^31 nodes or 2^32 operands in one recording");
  }
  [[noreturn]] IMPLICIT_REVERSE_COLD static void ThrowForeignVar() {
    throw std::logic_error(
        "reverse::Var: a variable of another recording (kept from an earlier evaluation or "
        "made on another thread), or one given up to an accumulation (acc += std::move(b)), "
        "used in this one");
  }

  struct Run {
    std::int32_t first;  ///< the first operand's node
    std::size_t begin;   ///< its partials: numbers_[begin .. begin + count),
    std::size_t count;
    const Number* held;  ///< or held[0 .. count) (the caller's, persistent)
    /// An elementwise block's (PushElementwise) first output node, -1 for a
    /// run. Its operands x are the nodes first, first + 1, ... or, when
    /// listed >= 0, product_nodes_[listed ..] (-1: a constant); its partials
    /// in x at numbers_[begin ..), in the scalar's node at numbers_[begin + count ..).
    std::int32_t outputs = -1;
    std::int32_t scalar = -1;
    std::int64_t listed = -1;
  };
  /// A run's partials: the caller's numbers it points to, or the tape's.
  const Number* RunPartials(const Run& run) const {
    return run.held != nullptr ? run.held : numbers_.data() + run.begin;
  }
  /// Appends `run` to runs_ and, as the open node's operand, its index.
  void AddRunOperand(const Run& run) {
    if (runs_.size() >= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
      throw std::length_error("reverse::Tape: more than 2^31 runs in one recording");
    }
    runs_.push_back(run);
    entries_.Push(V(0.0), ~static_cast<std::int32_t>(runs_.size() - 1));  // partial unused
  }
  /// The reverse of an elementwise block (PushElementwise) into adjoints_.
  void BackwardElementwise(const Run& run) const {
    const Number* a = numbers_.data() + run.begin;
    const Number* b = a + run.count;
    const Number* d = reinterpret_cast<const Number*>(adjoints_.data()) + run.outputs;
    Number* adjoint = reinterpret_cast<Number*>(adjoints_.data());
    Number to_scalar(0);
    for (std::size_t k = 0; k < run.count; ++k) to_scalar += b[k] * d[k];
    adjoint[run.scalar] += to_scalar;
    if (run.listed < 0) {
      Number* x = adjoint + run.first;
      for (std::size_t k = 0; k < run.count; ++k) x[k] += a[k] * d[k];
    } else {
      const std::int32_t* nodes = product_nodes_.data() + run.listed;
      for (std::size_t k = 0; k < run.count; ++k) {
        if (nodes[k] >= 0) adjoint[nodes[k]] += a[k] * d[k];
      }
    }
  }
  struct KnownRun {
    const Var<V>* vars;
    Index size;
    std::int64_t first;  ///< -1 for known constants
    const V* values;
  };
  /// The run of `runs` that holds vars[0 .. size), or null.
  static const KnownRun* Find(const std::vector<KnownRun>& runs, const Var<V>* vars, Index size) {
    const std::less<const Var<V>*> before;
    for (const KnownRun& run : runs) {
      if (!before(vars, run.vars) && !before(run.vars + run.size, vars + size)) return &run;
    }
    return nullptr;
  }

  std::vector<std::uint32_t> ends_;
  std::vector<KnownRun> known_runs_, known_constants_;
  /// The nodes' operands: partial derivative and node (or ~(a run's index)),
  /// in two arrays (no padding between a double and an int) of one length,
  /// the first size() entries in use.
  struct Entries {
    std::vector<V> partials;
    std::vector<std::int32_t> operands;
    std::size_t used = 0;
    void Push(V partial, std::int32_t operand) {
      if (used == operands.size()) Grow();
      partials[used] = partial;
      operands[used] = operand;
      ++used;
    }
    std::size_t size() const { return used; }
    void clear() { used = 0; }
    // Room for `total` entries.
    void Reserve(std::size_t total) {
      while (operands.size() < total) Grow();
    }
    IMPLICIT_REVERSE_COLD void Grow() {
      if (operands.size() >= static_cast<std::size_t>(std::numeric_limits<std::uint32_t>::max())) {
        ThrowTooManyNodes();
      }
      const std::size_t capacity = std::min<std::size_t>(
          std::numeric_limits<std::uint32_t>::max(), std::max<std::size_t>(1024, 2 * operands.size()));
      partials.resize(capacity);
      operands.resize(capacity);
    }
  };
  Entries entries_;
  std::vector<Run> runs_;
  std::vector<Number> numbers_;
  std::vector<Product> products_;
  std::vector<std::int32_t> product_nodes_;
  std::vector<Matrix<Number>> owned_;  ///< the products' factors; owned_used_ in use
  std::size_t owned_used_ = 0;
  std::vector<Matrix<Number>> outputs_;  ///< the variable products' outputs; outputs_used_ in use
  std::size_t outputs_used_ = 0;
  static constexpr std::size_t kReadFactors = 4;
  ReadFactor read_[kReadFactors];  ///< the last matrices of Vars read as factors (data null: none)
  std::size_t next_read_ = 0;
  mutable std::vector<V> adjoints_;
  mutable Matrix<Number> product_scratch_[6];
  std::vector<Curvature> curvatures_;  ///< a linearizing recording's second derivatives
  std::vector<Number> tangents_;       ///< the nodes' tangents (SetDirection)
  mutable std::vector<Number> adjoint_values_;      ///< the adjoints' values (TangentSweepFrom)
  mutable std::int32_t adjoint_values_output_ = -1;  ///< their output node (-1: none swept)
  mutable std::vector<Number> tangent_adjoints_;    ///< the adjoints' tangents (TangentSweepFrom)
  bool linearizing_ = false;           ///< whether this recording keeps second derivatives
  bool linearized_ = false;            ///< whether CheckLinearization passed on it
  bool recording_ = false;
  std::int64_t recording_number_ = 0;  ///< The recording's number, below 2^30.
  /// The id of the last node when Extend may add operands to it, or -1.
  std::int64_t last_ordinary_ = -1;
};

/// One recording on this thread's Tape<V>, from construction to destruction:
/// its variables, made by Variables() (independent variables, numbered in the
/// order made, or constants that record nothing), and the gradient of a
/// result in them. reverse::Gradient is one of these; AutoDiffEnergy makes
/// its x, c and theta with it, the ones a sweep does not differentiate in as
/// constants, so that their part of the work is not done.
/// \throws std::logic_error (constructor) when a recording of V is already in
///         progress on this thread.
template <typename V>
class Recording {
 public:
  /// Begins a recording on this thread's tape; with `linearize`, one that
  /// keeps its second derivatives (Tape::BeginRecording), to be kept (Keep).
  explicit Recording(bool linearize = false) : tape_(Tape<V>::ThisThread()) { tape_.BeginRecording(linearize); }
  ~Recording() { tape_.EndRecording(); }
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

  /// (*vars)[i] = a Var of value values[i] for i < size: new independent
  /// variables (consecutive nodes, declared a known run of values) or,
  /// without `independent`, constants (their derivatives are not computed;
  /// declared known constants when their tangents are zero). The caller keeps
  /// `values` and *vars unchanged until the sweep.
  void Variables(const V* values, Index size, bool independent, Vector<Var<V>>* vars) {
    vars->resize(size);
    Var<V>* out = vars->data();
    if (!independent) {
      bool numbers = true;
      for (Index i = 0; i < size; ++i) {
        out[i] = Var<V>(values[i]);
        if constexpr (Tape<V>::kDual) {
          typename Var<V>::Number number;
          numbers = numbers && Var<V>::IsNumber(values[i], &number);
        }
      }
      if (numbers) tape_.AddKnownConstants(out, size, values);
      return;
    }
    for (Index i = 0; i < size; ++i) out[i] = Var<V>::Independent(values[i]);
    tape_.AddKnownRun(out, size, values);
    independent_ += size;
  }
  /// Number constants kept between recordings (Constants()): Vars of no
  /// node, made again only when the numbers they were made from change.
  struct KeptConstants {
    using Number = typename Tape<V>::Number;  ///< the number type under V
    Vector<Var<V>> vars;                      ///< the constants
    std::vector<V> values;                    ///< their values
    std::vector<Number> made_from;            ///< the numbers they were made from
  };
  /// kept->vars[i] = the constant Var of value numbers[i] for i < size, like
  /// Variables() without `independent`, but remade only when the numbers
  /// differ (bit for bit) from kept->made_from, those they were last made
  /// from: a functor's parameters, constant in a sweep in x alone, cost a
  /// comparison instead of a Var each per recording. Declared known
  /// constants of the tape. The caller keeps `kept` unchanged until the sweep.
  void Constants(const typename KeptConstants::Number* numbers, Index size, KeptConstants* kept) {
    const std::size_t count = static_cast<std::size_t>(size);
    // Bit for bit: equal bytes are equal numbers (a NaN too); bytes that
    // differ but compare equal (-0 and 0) only remake the Vars.
    if (kept->vars.size() != size || kept->made_from.size() != count ||
        (count > 0 && std::memcmp(kept->made_from.data(), numbers, count * sizeof(numbers[0])) != 0)) {
      kept->made_from.assign(numbers, numbers + count);
      kept->values.resize(count);
      kept->vars.resize(size);
      for (std::size_t i = 0; i < count; ++i) {
        kept->values[i] = V(numbers[i]);
        kept->vars[static_cast<Index>(i)] = Var<V>(kept->values[i]);
      }
    }
    tape_.AddKnownConstants(kept->vars.data(), size, kept->values.data());
  }
  /// Copies this recording, with `result` as its output, to *kept
  /// (Tape::CopyRecordingTo): for SetDirection and SweepFrom there, with the
  /// node returned (-1 when the result is a constant).
  std::int32_t Keep(const Var<V>& result, Tape<V>* kept) {
    const Var<V> out = result.Materialized();
    const std::int32_t node = out.is_variable() ? tape_.Node(out.index()) : -1;
    tape_.CopyRecordingTo(kept);
    return node;
  }
  /// How many independent variables Variables() made.
  Index num_independent() const { return independent_; }

  /// The value of `result` and its derivatives in the independent variables,
  /// in the order made, into gradient[0 .. num_independent()) (0 when the
  /// result is a constant).
  V Gradient(const Var<V>& result, V* gradient) const {
    const Var<V> out = result.Materialized();
    if (out.is_variable()) {
      tape_.Adjoints(out.index(), independent_, gradient);
    } else {
      for (Index i = 0; i < independent_; ++i) gradient[i] = V(0.0);
    }
    return ValueOf(out);
  }

 private:
  Tape<V>& tape_;
  Index independent_ = 0;
};

/// f(z) (f: Vector<Var<V>> -> Var<V>, z of `size` values) and its gradient in
/// z into gradient[0 .. size). With V a DirectionalJet the values' tangents
/// are the direction: gradient[i].v[0] is then (H v)_i.
/// \throws std::logic_error when a recording of V is already in progress on this thread.
template <typename V, typename F>
V Gradient(const V* z, Index size, F&& f, V* gradient) {
  Recording<V> recording;
  Vector<Var<V>> vars;
  recording.Variables(z, size, true, &vars);
  return recording.Gradient(Var<V>(f(static_cast<const Vector<Var<V>>&>(vars))), gradient);
}

}  // namespace reverse
}  // namespace implicit

// exp, log, sqrt, tanh, ... of Vars (found by argument-dependent lookup).
#include <implicit/core/reverse_functions.h>
// Eigen's products and sums of Vars recorded as whole matrices.
#include <implicit/core/reverse_eigen.h>
