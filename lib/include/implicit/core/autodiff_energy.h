/// \file
/// User energies: write E once, get gradient, Hessian-vector and parameter
/// products automatically and exactly (forward-mode dual numbers, ceres::Jet,
/// or reverse mode on a tape, reverse_tape.h; see "Two ways to differentiate"
/// below).
///
/// The user writes a functor templated on the scalar type T that returns the
/// energy of ONE sample x (length n) given the parameter vector theta:
///
/// \code
///   struct SoftRetrieval {
///     implicit::Matrix<double> X;   // stored patterns, n x N
///     double beta;
///     template <typename T>
///     T operator()(const implicit::Vector<T>& x, const implicit::Vector<T>& theta) const {
///       const implicit::Vector<T> s = beta * (X.transpose() * x);   // one tape block
///       const T m = s.maxCoeff();                                   // max-shifted
///       using std::log;
///       return 0.5 * x.squaredNorm() - (m + log((s.array() - m).exp().sum())) / beta;
///     }
///   };
///   implicit::AutoDiffEnergy<SoftRetrieval, double> energy(SoftRetrieval{X, 2.0}, n);
/// \endcode
///
/// The functor is compiled for five scalar types (autodiff_mode.h). Write it
/// in ordinary Eigen: in reverse mode its matrix products are recorded as
/// whole blocks and its sums as single nodes (reverse_eigen.h), data it holds
/// is read in place, and numbers of the energy's scalar type mix with T
/// without a cast. The ad:: blocks (ad_functions.h) are an alternative of the
/// same speed.
///
/// Parameters: pass a ParameterSet to the constructor; theta is its flat
/// values() vector (empty when there are none).
///
/// An input: an energy conditioned on a per-sample input c (queries, context
/// tokens, an injection) takes it as a second argument,
/// \code
///   T operator()(const Vector<T>& x, const Vector<T>& c, const Vector<T>& theta) const,
/// \endcode
/// is constructed with the input's dimension, and is given the input batch
/// (input_dimension x B, one column per sample) with SetInput before use:
/// \code
///   implicit::AutoDiffEnergy<Injected, double> energy(Injected{X, 2.0}, n, m);
///   energy.SetInput(c);                        // m x B
/// \endcode
/// InputVectorJacobianProduct then gives d/dc <grad_x E, u> per sample, so that
/// ImplicitBackward returns dL/dc (BackwardResult::input_gradient) like the
/// built-in layers do. Its samples carry their own input, so solvers evaluate
/// blocks of them with their input columns (Energy::GradientColumns).
///
/// Forward mode (dual numbers) or reverse mode (a tape): set_mode, AutoDiffMode
/// and their costs in autodiff_mode.h. GradientAndValue costs what Gradient
/// costs; with a per-sample input the active set evaluates blocks of samples
/// with their inputs (GradientColumns).
#pragma once

#include <implicit/core/ad_functions.h>
#include <implicit/core/autodiff_mode.h>
#include <implicit/core/energy.h>
#include <implicit/core/parameters.h>
#include <implicit/core/reverse_tape.h>
#include <implicit/core/types.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace implicit {

/// An Energy from a user functor that returns E of one sample: its gradient, Hessian-vector,
/// parameter and input products come from automatic differentiation (forward or reverse mode).
///
/// \tparam Functor the user's callable, `template <typename T> T operator()(const Vector<T>& x,
///         const Vector<T>& theta) const`, or (x, c, theta) with a per-sample input c.
/// \tparam Scalar float or double.
/// \tparam kChunk the directions per forward-mode evaluation (the width K of the duals).
template <typename Functor, typename Scalar, int kChunk = 8>
class AutoDiffEnergy : public Energy<Scalar> {
  static_assert(kChunk >= 1, "AutoDiffEnergy: kChunk must be at least 1");
  /// Whether the functor takes a per-sample input: E(x, c, theta).
  static constexpr bool kHasInput =
      std::is_invocable<const Functor&, const Vector<Scalar>&, const Vector<Scalar>&,
                        const Vector<Scalar>&>::value;
  /// Whether the functor can be called with vectors of Scalar as (x, theta) or (x, c, theta).
  static constexpr bool kCallable =
      kHasInput || std::is_invocable<const Functor&, const Vector<Scalar>&, const Vector<Scalar>&>::value;
  static_assert(kCallable,
                "AutoDiffEnergy: the functor must be callable as `template <typename T> T operator()(const "
                "implicit::Vector<T>& x, const implicit::Vector<T>& theta) const`, or (x, c, theta) with a "
                "per-sample input c");
  /// Whether it is a template on the scalar type: called with dual numbers it
  /// returns one, not a number (a functor on Vector<double> alone would take
  /// the duals' vectors converted to numbers and return a double).
  static constexpr bool kTemplateOnT =
      !kCallable || internal::ReturnsScalarOf<Functor, ceres::Jet<Scalar, kChunk>, kHasInput>::value;
  static_assert(kTemplateOnT,
                "AutoDiffEnergy: the functor's operator() must be a template on the scalar type T (it is "
                "called with dual numbers and tape variables, not only with Scalar): `template <typename T> "
                "T operator()(const implicit::Vector<T>& x, const implicit::Vector<T>& theta) const`");
  /// Reverse mode, unless the functor has opted out.
  static constexpr bool kCanReverse = !internal::ForwardModeOnly<Functor>::value;

 public:
  using Dual = ceres::Jet<Scalar, kChunk>;        ///< Forward-mode dual of kChunk first derivatives.
  using Inner = internal::DirectionalJet<Scalar>;  ///< Dual number of one direction (the inner dual of Dual2).
  using Dual2 = ceres::Jet<Inner, kChunk>;        ///< Nested dual: directional second derivatives.

  /// An energy E(x, theta) of states of `dimension`.
  /// \throws std::invalid_argument when `dimension` <= 0, or the functor takes an input.
  AutoDiffEnergy(Functor functor, Index dimension,
                 ParameterSet<Scalar> parameters = ParameterSet<Scalar>())
      : AutoDiffEnergy(std::move(functor), dimension, 0, std::move(parameters)) {}
  /// An energy E(x, c, theta) with an input c of `input_dimension` per sample.
  /// \throws std::invalid_argument when `dimension` <= 0, or `input_dimension` is not > 0 for
  ///         a functor with an input (x, c, theta), or not 0 for one without.
  AutoDiffEnergy(Functor functor, Index dimension, Index input_dimension,
                 ParameterSet<Scalar> parameters = ParameterSet<Scalar>())
      : functor_(std::move(functor)),
        dimension_(dimension),
        input_dimension_(input_dimension),
        parameters_(std::move(parameters)) {
    if (dimension <= 0) {
      throw std::invalid_argument("AutoDiffEnergy: dimension must be > 0, got " +
                                  std::to_string(dimension));
    }
    if (kHasInput && input_dimension <= 0) {
      throw std::invalid_argument(
          "AutoDiffEnergy: the functor takes an input (x, c, theta), so input_dimension must "
          "be > 0, got " + std::to_string(input_dimension));
    }
    if (!kHasInput && input_dimension != 0) {
      throw std::invalid_argument(
          "AutoDiffEnergy: input_dimension " + std::to_string(input_dimension) +
          " given, but the functor takes no input (its call is (x, theta))");
    }
  }

  /// The wrapped functor.
  const Functor& functor() const { return functor_; }

  /// Sets how derivatives are computed (default kAutomatic).
  /// \throws std::invalid_argument when `mode` is kReverse for a functor that declares kForwardModeOnly.
  void set_mode(AutoDiffMode mode) {
    if (mode == AutoDiffMode::kReverse && !kCanReverse) {
      throw std::invalid_argument(
          "AutoDiffEnergy::set_mode: the functor declares kForwardModeOnly, so it has no "
          "reverse mode");
    }
    mode_ = mode;
  }
  /// How derivatives are computed, as set by set_mode() (kAutomatic by default).
  AutoDiffMode mode() const { return mode_; }
  /// Whether the products use reverse mode now (kAutomatic resolved).
  bool uses_reverse_mode() const {
    if (!kCanReverse || mode_ == AutoDiffMode::kForward) return false;
    return mode_ == AutoDiffMode::kReverse || num_variables() >= kReverseModeMinVariables;
  }

  Index dimension() const override { return dimension_; }
  Index num_parameters() const override { return parameters_.size(); }
  ParameterSet<Scalar>* parameters() override { return &parameters_; }
  Index input_dimension() const override { return input_dimension_; }

  /// The input batch, input_dimension() x B (column b conditions sample b).
  /// Every later evaluation needs a batch of the same B samples.
  /// \throws std::invalid_argument when the functor takes no input, or `input` is not
  ///         input_dimension() x B with B > 0.
  void SetInput(ConstMatrixRef<Scalar> input) {
    if (!kHasInput) {
      throw std::invalid_argument("AutoDiffEnergy::SetInput: the functor takes no input");
    }
    internal::CheckBatch("AutoDiffEnergy::SetInput(input)", input, input_dimension_);
    input_ = input;
  }
  /// The input batch set by SetInput(), input_dimension() x B (empty before).
  const Matrix<Scalar>& input() const { return input_; }

  void Value(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const override {
    internal::CheckBatch("AutoDiffEnergy::Value(x)", x, dimension_);
    internal::CheckShape("AutoDiffEnergy::Value(values)", values, x.cols(), 1);
    CheckInput("AutoDiffEnergy::Value", x.cols());
    const Vector<Scalar>& theta = parameters_.values();
    Vector<Scalar> xb(dimension_);
    for (Index b = 0; b < x.cols(); ++b) {
      xb = x.col(b);
      values(b) = Call(xb, InputOf<Scalar>(b), theta);
    }
  }

  void Gradient(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const override {
    internal::CheckBatch("AutoDiffEnergy::Gradient(x)", x, dimension_);
    internal::CheckShape("AutoDiffEnergy::Gradient(grad)", grad, x.rows(), x.cols());
    GradientWithValue(x, grad, nullptr);
  }

  /// grad.col(b) = grad_x E(x_b) and values(b) = E(x_b) in one pass.
  ///
  /// The gradient's dual evaluations carry E in their value part: no extra
  /// evaluation for the value.
  void GradientAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override {
    internal::CheckBatch("AutoDiffEnergy::GradientAndValue(x)", x, dimension_);
    internal::CheckShape("AutoDiffEnergy::GradientAndValue(grad)", grad, x.rows(), x.cols());
    internal::CheckShape("AutoDiffEnergy::GradientAndValue(values)", values, x.cols(), 1);
    GradientWithValue(x, grad, &values);
  }
  /// x - grad E (Energy's default CCCP update) and E.
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override {
    GradientAndValue(x, out, values);
    out = x - out;
  }
  /// Without an input E depends on x and theta only: any subset of a batch's
  /// columns may be evaluated. With one, each sample has its own input column,
  /// which GradientColumns picks for a block of samples.
  bool SupportsSubsets() const override { return !kHasInput; }
  bool SupportsColumnSubsets() const override { return true; }
  void GradientColumns(ConstMatrixRef<Scalar> x, const std::vector<Index>& columns, MatrixRef<Scalar> grad,
                       VectorRef<Scalar> values) const override {
    if constexpr (!kHasInput) {
      Energy<Scalar>::GradientColumns(x, columns, grad, values);
    } else {
      internal::CheckBatch("AutoDiffEnergy::GradientColumns(x)", x, dimension_);
      internal::CheckShape("AutoDiffEnergy::GradientColumns(grad)", grad, x.rows(), x.cols());
      internal::CheckOptionalValues("AutoDiffEnergy::GradientColumns(values)", values, x.cols());
      internal::CheckColumns("AutoDiffEnergy::GradientColumns", columns, x.cols(), input_.cols());
      GradientWithValue(x, grad, values.size() != 0 ? &values : nullptr, &columns);
    }
  }

  void HessianVectorProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override {
    internal::CheckBatch("AutoDiffEnergy::HessianVectorProduct(x)", x, dimension_);
    internal::CheckShape("AutoDiffEnergy::HessianVectorProduct(v)", v, x.rows(), x.cols());
    internal::CheckShape("AutoDiffEnergy::HessianVectorProduct(out)", out, x.rows(), x.cols());
    CheckInput("AutoDiffEnergy::HessianVectorProduct", x.cols());
    if constexpr (kCanReverse) {
      if (uses_reverse_mode()) {
        return ReverseSecondOrder(x, v, kWrtState, [&](Index b, const std::vector<Scalar>& hv) {
          for (Index i = 0; i < dimension_; ++i) out(i, b) = hv[i];
        });
      }
    }
    const Vector<Dual2> theta = internal::LiftConstants<Dual2>(parameters_.values());
    for (Index b = 0; b < x.cols(); ++b) {
      Vector<Dual2> xd = internal::LiftWithDirection<kChunk>(x.col(b), v.col(b));
      const Vector<Dual2> input = InputOf<Dual2>(b);
      internal::ForEachChunk<kChunk>(dimension_, [&](Index c, Index len) {
        for (Index k = 0; k < len; ++k) xd(c + k).v[k] = Inner(Scalar(1));
        const Dual2 e = Call(xd, input, theta);
        for (Index k = 0; k < len; ++k) {
          out(c + k, b) = e.v[k].v[0];
          xd(c + k).v[k] = Inner(Scalar(0));
        }
      });
    }
  }

  /// The Hessian at x for many products there (the implicit backward pass's
  /// adjoint solve, Newton-Krylov). In reverse mode each sample's energy is
  /// recorded once with its second derivatives, and every product then
  /// recomputes that recording's tangents for its direction and sweeps it
  /// (reverse::Tape::SetDirection): no call of the functor per product. A
  /// sample whose recording does not check out (the functor records an
  /// operation without second derivatives: a reverse::Var::Node of its own)
  /// or that would take the linearisation's tapes past
  /// kMaxLinearizationBytes gets HessianVectorProduct at the point instead.
  /// In forward mode: Energy's default (HessianVectorProduct at the point).
  /// The kept tapes go back to the energy when the linearisation is
  /// destroyed and hold the next one's recordings (the energy keeps that
  /// memory, about one recording per sample, until it is destroyed).
  std::unique_ptr<Linearization<Scalar>> LinearizeHessian(ConstMatrixRef<Scalar> x) const override {
    internal::CheckBatch("AutoDiffEnergy::LinearizeHessian(x)", x, dimension_);
    CheckInput("AutoDiffEnergy::LinearizeHessian", x.cols());
    if constexpr (kCanReverse) {
      if (uses_reverse_mode()) return std::make_unique<RecordedHessian>(*this, x);
    }
    return Energy<Scalar>::LinearizeHessian(x);
  }
  /// The most bytes the recorded tapes of one LinearizeHessian hold
  /// (samples beyond it are differentiated at the point for each product).
  static constexpr std::size_t kMaxLinearizationBytes = std::size_t(1) << 30;

 private:
  /// The tapes of finished linearisations (RecordedHessian), reused by the
  /// next: a linearisation copies its recordings into storage grown before
  /// instead of new memory. Shared by copies of the energy.
  class TapePool {
   public:
    /// A tape of the pool, or a new one.
    std::unique_ptr<reverse::Tape<Inner>> Take() {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (tapes_.empty()) return std::make_unique<reverse::Tape<Inner>>();
      std::unique_ptr<reverse::Tape<Inner>> tape = std::move(tapes_.back());
      tapes_.pop_back();
      return tape;
    }
    /// Returns a tape to the pool.
    void Give(std::unique_ptr<reverse::Tape<Inner>> tape) {
      const std::lock_guard<std::mutex> lock(mutex_);
      tapes_.push_back(std::move(tape));
    }

   private:
    std::mutex mutex_;
    std::vector<std::unique_ptr<reverse::Tape<Inner>>> tapes_;
  };

 public:
  /// LinearizeHessian's linearisation in reverse mode: a recording kept per
  /// sample (or, for a sample whose recording did not check out, products at
  /// the point).
  class RecordedHessian final : public Linearization<Scalar> {
   public:
    /// Records `energy` at each sample of x (LinearizeHessian).
    RecordedHessian(const AutoDiffEnergy& energy, ConstMatrixRef<Scalar> x)
        : energy_(energy), tapes_(energy.tapes_), point_(x), samples_(static_cast<std::size_t>(x.cols())) {
      std::size_t bytes = 0;
      for (Index b = 0; b < x.cols(); ++b) {
        Sample& s = samples_[static_cast<std::size_t>(b)];
        if (bytes > kMaxLinearizationBytes) break;  // the rest at the point
        s.tape = tapes_->Take();
        bool usable = false;
        s.output = energy.RecordLinearization(x, b, s.tape.get(), &usable);
        bytes += s.tape->bytes();
        if (!usable) tapes_->Give(std::move(s.tape));
      }
    }
    ~RecordedHessian() override {
      for (Sample& s : samples_) {
        if (s.tape != nullptr) tapes_->Give(std::move(s.tape));
      }
    }
    RecordedHessian(const RecordedHessian&) = delete;
    RecordedHessian& operator=(const RecordedHessian&) = delete;
    /// How many of the point's samples have their recording kept (the others
    /// are differentiated at the point for each product).
    Index samples_recorded() const {
      Index count = 0;
      for (const Sample& s : samples_) count += s.tape != nullptr ? 1 : 0;
      return count;
    }
    /// out = H v, sample by sample.
    void JacobianVectorProduct(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const override {
      Products(v, out);
    }
    /// The Hessian is symmetric: the same products.
    void VectorJacobianProduct(ConstMatrixRef<Scalar> u, MatrixRef<Scalar> out) const override {
      Products(u, out);
    }

   private:
    struct Sample {
      std::unique_ptr<reverse::Tape<Inner>> tape;  ///< null: differentiated at the point
      std::int32_t output = -1;                    ///< the energy's node (-1: a constant)
      mutable std::mutex mutex;                    ///< one product at a time on the tape
    };
    void Products(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const {
      const Index n = energy_.dimension_;
      internal::CheckShape("AutoDiffEnergy::LinearizeHessian products (v)", v, n, point_.cols());
      internal::CheckShape("AutoDiffEnergy::LinearizeHessian products (out)", out, n, point_.cols());
      Vector<Scalar> hv(n);
      for (Index b = 0; b < point_.cols(); ++b) {
        const Sample& s = samples_[static_cast<std::size_t>(b)];
        if (s.tape == nullptr) {
          energy_.HessianVectorProduct(point_.col(b), v.col(b), out.col(b));
        } else if (s.output < 0) {
          out.col(b).setZero();
        } else {
          const std::lock_guard<std::mutex> lock(s.mutex);
          const Vector<Scalar> direction = v.col(b);
          s.tape->SetDirection(direction.data(), n);
          s.tape->TangentSweepFrom(s.output, n, hv.data());
          out.col(b) = hv;
        }
      }
    }
    const AutoDiffEnergy& energy_;
    const std::shared_ptr<TapePool> tapes_;  ///< where the tapes go back to
    const Matrix<Scalar> point_;
    std::vector<Sample> samples_;
  };


  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x,
                                      ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    internal::CheckBatch("AutoDiffEnergy::ParameterVectorJacobianProduct(x)", x, dimension_);
    internal::CheckShape("AutoDiffEnergy::ParameterVectorJacobianProduct(u)", u, x.rows(), x.cols());
    internal::CheckShape("AutoDiffEnergy::ParameterVectorJacobianProduct(out)", out,
                         num_parameters(), 1);
    CheckInput("AutoDiffEnergy::ParameterVectorJacobianProduct", x.cols());
    out.setZero();
    if constexpr (kCanReverse) {
      if (uses_reverse_mode()) {
        const Index offset = dimension_ + input_dimension_;
        return ReverseSecondOrder(x, u, kWrtState | kWrtParameters, [&](Index, const std::vector<Scalar>& hv) {
          for (Index i = 0; i < out.size(); ++i) out(i) += hv[offset + i];
        });
      }
    }
    Vector<Dual2> theta = internal::LiftConstants<Dual2>(parameters_.values());
    for (Index b = 0; b < x.cols(); ++b) {
      MixedProducts(x, u, b, /*wrt_input=*/false, &theta,
                    [&](Index i, Scalar d) { out(i) += d; });
    }
  }

  void InputVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override {
    if (!kHasInput) Energy<Scalar>::InputVectorJacobianProduct(x, u, out);  // throws
    internal::CheckBatch("AutoDiffEnergy::InputVectorJacobianProduct(x)", x, dimension_);
    internal::CheckShape("AutoDiffEnergy::InputVectorJacobianProduct(u)", u, x.rows(), x.cols());
    internal::CheckShape("AutoDiffEnergy::InputVectorJacobianProduct(out)", out,
                         input_dimension_, x.cols());
    CheckInput("AutoDiffEnergy::InputVectorJacobianProduct", x.cols());
    if constexpr (kCanReverse) {
      if (uses_reverse_mode()) {
        return ReverseSecondOrder(x, u, kWrtState | kWrtInput, [&](Index b, const std::vector<Scalar>& hv) {
          for (Index i = 0; i < input_dimension_; ++i) {
            out(i, b) = hv[dimension_ + i];
          }
        });
      }
    }
    Vector<Dual2> theta = internal::LiftConstants<Dual2>(parameters_.values());
    for (Index b = 0; b < x.cols(); ++b) {
      MixedProducts(x, u, b, /*wrt_input=*/true, &theta,
                    [&](Index i, Scalar d) { out(i, b) = d; });
    }
  }

 private:
  /// grad.col(b) = grad E(x_b) by forward-mode duals, K directions per
  /// evaluation; (*values)(b) = E(x_b) from the first evaluation's value part.
  /// Column b of x is batch sample (*columns)[b] (its input), or b.
  void GradientWithValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad, VectorRef<Scalar>* values,
                         const std::vector<Index>* columns = nullptr) const {
    if (columns == nullptr) CheckInput("AutoDiffEnergy::Gradient", x.cols());
    const auto sample = [columns](Index b) { return columns == nullptr ? b : (*columns)[b]; };
    if constexpr (kCanReverse) {
      if (uses_reverse_mode()) return ReverseGradient(x, grad, values, sample);
    }
    const Vector<Dual> theta = internal::LiftConstants<Dual>(parameters_.values());
    for (Index b = 0; b < x.cols(); ++b) {
      Vector<Dual> xd = internal::LiftConstants<Dual>(x.col(b));
      const Vector<Dual> input = InputOf<Dual>(sample(b));
      internal::ForEachChunk<kChunk>(dimension_, [&](Index c, Index len) {
        for (Index k = 0; k < len; ++k) xd(c + k).v[k] = Scalar(1);
        const Dual e = Call(xd, input, theta);
        if (c == 0 && values != nullptr) (*values)(b) = e.a;
        for (Index k = 0; k < len; ++k) {
          grad(c + k, b) = e.v[k];
          xd(c + k).v[k] = Scalar(0);
        }
      });
    }
  }

  /// sink(i, d/dw_i <grad_x E(x_b), u_b>) for w = theta or (wrt_input) c_b, by
  /// nested duals: the inner dual carries the direction u_b on x, the outer
  /// one a chunk of w's coordinates. `theta` is the lifted parameter vector
  /// (lifted once by the caller); its derivative parts are zero again on return.
  template <typename Sink>
  void MixedProducts(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u, Index b,
                     bool wrt_input, Vector<Dual2>* theta, Sink&& sink) const {
    Vector<Dual2> input = InputOf<Dual2>(b);
    const Vector<Dual2> xd = internal::LiftWithDirection<kChunk>(x.col(b), u.col(b));
    Vector<Dual2>& w = wrt_input ? input : *theta;
    internal::ForEachChunk<kChunk>(w.size(), [&](Index c, Index len) {
      for (Index k = 0; k < len; ++k) w(c + k).v[k] = Inner(Scalar(1));
      const Dual2 e = Call(xd, input, *theta);
      for (Index k = 0; k < len; ++k) {
        sink(c + k, e.v[k].v[0]);
        w(c + k).v[k] = Inner(Scalar(0));
      }
    });
  }

  /// x, c and theta: the variables of the reverse-mode tape.
  Index num_variables() const { return dimension_ + input_dimension_ + parameters_.size(); }

  /// z = (x_b, c_s, theta) as values of type V, theta only `with_parameters`:
  /// the variables of reverse mode for column b of x, batch sample s (its
  /// input column).
  template <typename V>
  void PackVariables(ConstMatrixRef<Scalar> x, Index b, Index s, bool with_parameters, std::vector<V>* z) const {
    z->resize(static_cast<std::size_t>(dimension_ + input_dimension_ + (with_parameters ? parameters_.size() : 0)));
    V* out = z->data();
    for (Index i = 0; i < dimension_; ++i) *out++ = V(x(i, b));
    if constexpr (kHasInput) {
      for (Index i = 0; i < input_dimension_; ++i) *out++ = V(input_(i, s));
    }
    if (!with_parameters) return;
    const Vector<Scalar>& theta = parameters_.values();
    for (Index i = 0; i < theta.size(); ++i) *out++ = V(theta(i));
  }
  /// Which of the reverse-mode variables a sweep differentiates in (the others
  /// enter the functor as constants and cost nothing in the sweep): x (the
  /// state, always: a second-order sweep's direction is on x), c, theta.
  enum Wrt : unsigned { kWrtState = 1, kWrtInput = 2, kWrtParameters = 4 };
  /// finish(E) for E at z recorded in *recording, with the variables of z
  /// named by `wrt` (x always; c and theta enter as constants otherwise, z
  /// holding theta only when `wrt` names it): finish's result. x, c and
  /// theta are the functor's vectors (this thread's, kept for the next
  /// recording: no allocation per sample); the variables among them are
  /// known runs of the tape (their values are z's), which products and
  /// ad::Dot read as vectors. theta, when constant, is kept between
  /// recordings and remade only when the parameters change (a comparison
  /// instead of a Var per parameter). The functor's data (its members)
  /// outlive the recording's sweeps: products read it in place.
  template <typename V, typename Finish>
  auto Record(reverse::Recording<V>* recording, const std::vector<V>& z, unsigned wrt, Finish&& finish) const {
    static thread_local Vector<reverse::Var<V>> x, c, theta;
    static thread_local typename reverse::Recording<V>::KeptConstants constant_theta;
    const bool wrt_input = (wrt & kWrtInput) != 0, wrt_parameters = (wrt & kWrtParameters) != 0;
    recording->Variables(z.data(), dimension_, true, &x);
    recording->Variables(z.data() + dimension_, input_dimension_, wrt_input, &c);
    if (wrt_parameters) {
      recording->Variables(z.data() + dimension_ + input_dimension_, parameters_.size(), true, &theta);
    } else {
      recording->Constants(parameters_.values().data(), parameters_.size(), &constant_theta);
    }
    const reverse::PersistentScope persistent(&functor_, sizeof(Functor));
    return finish(Call<reverse::Var<V>>(x, c, wrt_parameters ? theta : constant_theta.vars));
  }
  /// E at z, recorded on this thread's tape, and its gradient in the parts of
  /// z named by `wrt` (the others are not written); z holds theta only when
  /// `wrt` names it (PackVariables), the parameters' own values are read otherwise.
  template <typename V>
  V ReverseSweep(const std::vector<V>& z, unsigned wrt, std::vector<V>* gradient) const {
    gradient->resize(z.size());
    reverse::Recording<V> recording;
    const V value = Record(&recording, z, wrt, [&](const reverse::Var<V>& e) {
      return recording.Gradient(e, gradient->data());
    });
    const bool wrt_input = (wrt & kWrtInput) != 0, wrt_parameters = (wrt & kWrtParameters) != 0;
    // The independent variables' derivatives in place: x's, then c's and
    // theta's where they were variables.
    if (!wrt_input && wrt_parameters) {
      std::copy_backward(gradient->begin() + dimension_, gradient->begin() + dimension_ + parameters_.size(),
                         gradient->end());
    }
    return value;
  }
  template <typename Sample>
  void ReverseGradient(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad, VectorRef<Scalar>* values,
                       Sample&& sample) const {
    std::vector<Scalar> z, g;
    for (Index b = 0; b < x.cols(); ++b) {
      PackVariables(x, b, sample(b), false, &z);
      const Scalar e = ReverseSweep(z, kWrtState, &g);
      for (Index i = 0; i < dimension_; ++i) grad(i, b) = g[static_cast<std::size_t>(i)];
      if (values != nullptr) (*values)(b) = e;
    }
  }
  /// sink(b, H_b (u_b, 0, 0)) per sample, H_b the Hessian of E in (x, c, theta):
  /// its x rows are the Hessian-vector product, its c and theta rows the input
  /// and parameter products d/dw <grad_x E, u_b> (those `wrt` names; 0 in the
  /// others). One recording in values whose tangents are (u_b, 0, 0) and one
  /// reverse sweep (forward over reverse).
  template <typename Sink>
  void ReverseSecondOrder(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u, unsigned wrt,
                          Sink&& sink) const {
    std::vector<Inner> z, g;
    std::vector<Scalar> hv(static_cast<std::size_t>(num_variables()));
    for (Index b = 0; b < x.cols(); ++b) {
      PackVariables(x, b, b, (wrt & kWrtParameters) != 0, &z);
      for (Index i = 0; i < dimension_; ++i) z[static_cast<std::size_t>(i)].v[0] = u(i, b);
      ReverseSweep(z, wrt, &g);
      for (std::size_t i = 0; i < g.size(); ++i) hv[i] = g[i].v[0];  // theta's only when wrt names it
      sink(b, hv);
    }
  }

  /// Sample b of x recorded in values whose tangents are a fixed
  /// pseudo-random direction, with its second derivatives (a linearizing
  /// recording), into *kept: the output's node (-1: E does not depend on
  /// the variables), and in *usable whether the recording checked out
  /// (reverse::Tape::CheckLinearization against that direction).
  std::int32_t RecordLinearization(ConstMatrixRef<Scalar> x, Index b, reverse::Tape<Inner>* kept,
                                   bool* usable) const {
    std::vector<Inner> z;
    PackVariables(x, b, b, false, &z);
    std::vector<Scalar> direction(static_cast<std::size_t>(dimension_));
    std::uint64_t state = 0x9e3779b97f4a7c15ull;
    for (Index i = 0; i < dimension_; ++i) {  // splitmix64, mapped to [-1, 1)
      std::uint64_t r = (state += 0x9e3779b97f4a7c15ull);
      r = (r ^ (r >> 30)) * 0xbf58476d1ce4e5b9ull;
      r = (r ^ (r >> 27)) * 0x94d049bb133111ebull;
      r ^= r >> 31;
      direction[static_cast<std::size_t>(i)] = static_cast<Scalar>(static_cast<double>(r >> 11) * 0x1.0p-52 - 1.0);
      z[static_cast<std::size_t>(i)].v[0] = direction[static_cast<std::size_t>(i)];
    }
    reverse::Recording<Inner> recording(/*linearize=*/true);
    const std::int32_t output = Record(&recording, z, kWrtState,
                                       [&](const reverse::Var<Inner>& e) { return recording.Keep(e, kept); });
    // Recomputed and recorded tangents agree to round-off when every node has
    // its second derivatives; a node without them is off by its whole tangent.
    const Scalar tolerance = std::is_same<Scalar, float>::value ? Scalar(1e-2) : Scalar(1e-6);
    *usable = output < 0 || kept->CheckLinearization(direction.data(), dimension_, tolerance);
    return output;
  }
  /// E(x; c, theta) for any of the scalar types; c is ignored without an input.
  template <typename T>
  T Call(const Vector<T>& x, const Vector<T>& input, const Vector<T>& theta) const {
    if constexpr (!kCallable || !kTemplateOnT) {  // a static_assert above has said why
      return T(0.0);
    } else if constexpr (kHasInput) {
      return functor_(x, input, theta);
    } else {
      (void)input;
      return functor_(x, theta);
    }
  }
  /// Sample b's input as constants of dual type D (empty without an input).
  template <typename D>
  Vector<D> InputOf(Index b) const {
    if constexpr (kHasInput) {
      return internal::LiftConstants<D>(input_.col(b));
    } else {
      (void)b;
      return Vector<D>();
    }
  }
  /// With an input: SetInput was called for a batch of `batch` samples.
  void CheckInput(const char* who, Index batch) const {
    if (!kHasInput) return;
    if (input_.cols() != batch) {
      throw std::invalid_argument(
          std::string(who) + ": the input has " + std::to_string(input_.cols()) +
          " columns (SetInput), the batch " + std::to_string(batch) + " samples");
    }
  }

  std::shared_ptr<TapePool> tapes_ = std::make_shared<TapePool>();

  Functor functor_;
  Index dimension_;
  Index input_dimension_ = 0;
  ParameterSet<Scalar> parameters_;
  Matrix<Scalar> input_;  ///< input_dimension_ x B, when the functor takes an input
  AutoDiffMode mode_ = AutoDiffMode::kAutomatic;
};

}  // namespace implicit
