// User energies: write E once, get gradient, Hessian-vector and parameter
// products automatically and exactly (forward-mode dual numbers, ceres::Jet,
// or reverse mode on an ADOL-C tape; see "Two ways to differentiate" below).
//
// The user writes a functor templated on the scalar type T that returns the
// energy of ONE sample x (length n) given the parameter vector theta:
//
//   struct SoftRetrieval {
//     implicit::Matrix<double> X;   // stored patterns, n x N
//     double beta;
//     template <typename T>
//     T operator()(const implicit::Vector<T>& x, const implicit::Vector<T>& theta) const {
//       implicit::Vector<T> s(X.cols());   // s = beta X^T x, one dot product each
//       for (implicit::Index i = 0; i < X.cols(); ++i) s(i) = T(beta) * X.col(i).cast<T>().dot(x);
//       // max-shifted, branch-free (ad_functions.h)
//       return T(0.5) * x.squaredNorm() - implicit::ad::LogSumExp(s) / T(beta);
//     }
//   };
//   implicit::AutoDiffEnergy<SoftRetrieval, double> energy(SoftRetrieval{X, 2.0}, n);
//
// The functor is compiled for three scalar types: Scalar, ceres::Jet<Scalar, K>
// and the nested ceres::Jet<internal::DirectionalJet<Scalar>, K>, and for
// ADOL-C's adouble when libimplicit has reverse mode. Eigen matrix
// products (A * x, A * B) work on all of them but instantiate Eigen's general
// matrix-vector / matrix-matrix kernels for each dual type, which is slow to
// compile (minutes for a few products, more in sanitizer or debug builds).
// Element-wise operations, reductions and dot products are cheap; prefer them,
// or plain loops, for the products that involve T (the states are small).
//
// Parameters: pass a ParameterSet to the constructor; theta is its flat
// values() vector (empty when there are none).
//
// An input: an energy conditioned on a per-sample input c (queries, context
// tokens, an injection) takes it as a second argument,
//   T operator()(const Vector<T>& x, const Vector<T>& c, const Vector<T>& theta) const,
// is constructed with the input's dimension, and is given the input batch
// (input_dimension x B, one column per sample) with SetInput before use:
//   implicit::AutoDiffEnergy<Injected, double> energy(Injected{X, 2.0}, n, m);
//   energy.SetInput(c);                        // m x B
// InputVectorJacobianProduct then gives d/dc <grad_x E, u> per sample, so that
// ImplicitBackward returns dL/dc (BackwardResult::input_gradient) like the
// built-in layers do. Its samples carry their own input, so solvers evaluate
// blocks of them with their input columns (Energy::GradientColumns).
//
// Two ways to differentiate, forward mode (dual numbers) and reverse mode (an
// ADOL-C tape): set_mode, AutoDiffMode and their costs in autodiff_mode.h.
// GradientAndValue costs what Gradient costs (E comes with the derivatives),
// and SupportsSubsets() is true when E has no per-sample input (with one, the
// active set evaluates blocks of samples with their inputs: GradientColumns).
#pragma once

#include <implicit/core/ad_functions.h>
#include <implicit/core/autodiff_mode.h>
#include <implicit/core/energy.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#if IMPLICIT_HAVE_ADOLC
#include <implicit/core/reverse_tape.h>
#endif

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace implicit {

template <typename Functor, typename Scalar, int kChunk = 8>
class AutoDiffEnergy : public Energy<Scalar> {
  static_assert(kChunk >= 1, "AutoDiffEnergy: kChunk must be at least 1");
  // Whether the functor takes a per-sample input: E(x, c, theta).
  static constexpr bool kHasInput =
      std::is_invocable<const Functor&, const Vector<Scalar>&, const Vector<Scalar>&,
                        const Vector<Scalar>&>::value;
  // Reverse mode: built with ADOL-C, and the functor has not opted out.
  static constexpr bool kCanReverse =
      kHaveReverseMode && !internal::ForwardModeOnly<Functor>::value;

 public:
  using Dual = ceres::Jet<Scalar, kChunk>;        // first derivatives
  using Inner = internal::DirectionalJet<Scalar>;  // one direction
  using Dual2 = ceres::Jet<Inner, kChunk>;        // directional second derivatives

  // An energy E(x, theta) of states of `dimension`.
  AutoDiffEnergy(Functor functor, Index dimension,
                 ParameterSet<Scalar> parameters = ParameterSet<Scalar>())
      : AutoDiffEnergy(std::move(functor), dimension, 0, std::move(parameters)) {}
  // An energy E(x, c, theta) with an input c of `input_dimension` per sample.
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

  const Functor& functor() const { return functor_; }

  // How derivatives are computed (default kAutomatic). kReverse throws
  // std::invalid_argument when libimplicit was built without ADOL-C.
  void set_mode(AutoDiffMode mode) {
    if (mode == AutoDiffMode::kReverse && !kHaveReverseMode) {
      throw std::invalid_argument(
          "AutoDiffEnergy::set_mode: reverse mode needs ADOL-C, and this libimplicit was built "
          "without it (install libadolc-dev and rebuild with IMPLICIT_WITH_ADOLC=ON)");
    }
    if (mode == AutoDiffMode::kReverse && !kCanReverse) {
      throw std::invalid_argument(
          "AutoDiffEnergy::set_mode: the functor declares kForwardModeOnly, so it has no "
          "reverse mode");
    }
    mode_ = mode;
  }
  AutoDiffMode mode() const { return mode_; }
  // Whether the products use reverse mode now (kAutomatic resolved).
  bool uses_reverse_mode() const {
    if (!kCanReverse || mode_ == AutoDiffMode::kForward) return false;
    return mode_ == AutoDiffMode::kReverse || num_variables() >= kReverseModeMinVariables;
  }

  Index dimension() const override { return dimension_; }
  Index num_parameters() const override { return parameters_.size(); }
  ParameterSet<Scalar>* parameters() override { return &parameters_; }
  Index input_dimension() const override { return input_dimension_; }

  // The input batch, input_dimension() x B (column b conditions sample b).
  // Every later evaluation needs a batch of the same B samples.
  void SetInput(ConstMatrixRef<Scalar> input) {
    if (!kHasInput) {
      throw std::invalid_argument("AutoDiffEnergy::SetInput: the functor takes no input");
    }
    internal::CheckBatch("AutoDiffEnergy::SetInput(input)", input, input_dimension_);
    input_ = input;
  }
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

  // The gradient's dual evaluations carry E in their value part: no extra
  // evaluation for the value.
  void GradientAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override {
    internal::CheckBatch("AutoDiffEnergy::GradientAndValue(x)", x, dimension_);
    internal::CheckShape("AutoDiffEnergy::GradientAndValue(grad)", grad, x.rows(), x.cols());
    internal::CheckShape("AutoDiffEnergy::GradientAndValue(values)", values, x.cols(), 1);
    GradientWithValue(x, grad, &values);
  }
  // x - grad E (Energy's default CCCP update) and E.
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override {
    GradientAndValue(x, out, values);
    out = x - out;
  }
  // Without an input E depends on x and theta only: any subset of a batch's
  // columns may be evaluated. With one, each sample has its own input column,
  // which GradientColumns picks for a block of samples.
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
#if IMPLICIT_HAVE_ADOLC
    if constexpr (kCanReverse) {
      if (uses_reverse_mode()) {
        return ReverseSecondOrder(x, v, [&](Index b, const std::vector<double>& hv) {
          for (Index i = 0; i < dimension_; ++i) out(i, b) = static_cast<Scalar>(hv[i]);
        });
      }
    }
#endif
    const Vector<Dual2> theta = Lift<Dual2>(parameters_.values());
    for (Index b = 0; b < x.cols(); ++b) {
      Vector<Dual2> xd = LiftWithDirection(x.col(b), v.col(b));
      const Vector<Dual2> input = InputOf<Dual2>(b);
      ForEachChunk(dimension_, [&](Index c, Index len) {
        for (Index k = 0; k < len; ++k) xd(c + k).v[k] = Inner(Scalar(1));
        const Dual2 e = Call(xd, input, theta);
        for (Index k = 0; k < len; ++k) {
          out(c + k, b) = e.v[k].v[0];
          xd(c + k).v[k] = Inner(Scalar(0));
        }
      });
    }
  }

  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x,
                                      ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    internal::CheckBatch("AutoDiffEnergy::ParameterVectorJacobianProduct(x)", x, dimension_);
    internal::CheckShape("AutoDiffEnergy::ParameterVectorJacobianProduct(u)", u, x.rows(), x.cols());
    internal::CheckShape("AutoDiffEnergy::ParameterVectorJacobianProduct(out)", out,
                         num_parameters(), 1);
    CheckInput("AutoDiffEnergy::ParameterVectorJacobianProduct", x.cols());
    out.setZero();
#if IMPLICIT_HAVE_ADOLC
    if constexpr (kCanReverse) {
      if (uses_reverse_mode()) {
        const Index offset = dimension_ + input_dimension_;
        return ReverseSecondOrder(x, u, [&](Index, const std::vector<double>& hv) {
          for (Index i = 0; i < out.size(); ++i) out(i) += static_cast<Scalar>(hv[offset + i]);
        });
      }
    }
#endif
    Vector<Dual2> theta = Lift<Dual2>(parameters_.values());
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
#if IMPLICIT_HAVE_ADOLC
    if constexpr (kCanReverse) {
      if (uses_reverse_mode()) {
        return ReverseSecondOrder(x, u, [&](Index b, const std::vector<double>& hv) {
          for (Index i = 0; i < input_dimension_; ++i) {
            out(i, b) = static_cast<Scalar>(hv[dimension_ + i]);
          }
        });
      }
    }
#endif
    Vector<Dual2> theta = Lift<Dual2>(parameters_.values());
    for (Index b = 0; b < x.cols(); ++b) {
      MixedProducts(x, u, b, /*wrt_input=*/true, &theta,
                    [&](Index i, Scalar d) { out(i, b) = d; });
    }
  }

 private:
  // grad.col(b) = grad E(x_b) by forward-mode duals, K directions per
  // evaluation; (*values)(b) = E(x_b) from the first evaluation's value part.
  // Column b of x is batch sample (*columns)[b] (its input), or b.
  void GradientWithValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad, VectorRef<Scalar>* values,
                         const std::vector<Index>* columns = nullptr) const {
    if (columns == nullptr) CheckInput("AutoDiffEnergy::Gradient", x.cols());
    const auto sample = [columns](Index b) { return columns == nullptr ? b : (*columns)[b]; };
#if IMPLICIT_HAVE_ADOLC
    if constexpr (kCanReverse) {
      if (uses_reverse_mode()) return ReverseGradient(x, grad, values, sample);
    }
#endif
    const Vector<Dual> theta = Lift<Dual>(parameters_.values());
    for (Index b = 0; b < x.cols(); ++b) {
      Vector<Dual> xd = Lift<Dual>(x.col(b));
      const Vector<Dual> input = InputOf<Dual>(sample(b));
      ForEachChunk(dimension_, [&](Index c, Index len) {
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

  // sink(i, d/dw_i <grad_x E(x_b), u_b>) for w = theta or (wrt_input) c_b, by
  // nested duals: the inner dual carries the direction u_b on x, the outer
  // one a chunk of w's coordinates. `theta` is the lifted parameter vector
  // (lifted once by the caller); its derivative parts are zero again on return.
  template <typename Sink>
  void MixedProducts(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u, Index b,
                     bool wrt_input, Vector<Dual2>* theta, Sink&& sink) const {
    Vector<Dual2> input = InputOf<Dual2>(b);
    const Vector<Dual2> xd = LiftWithDirection(x.col(b), u.col(b));
    Vector<Dual2>& w = wrt_input ? input : *theta;
    ForEachChunk(w.size(), [&](Index c, Index len) {
      for (Index k = 0; k < len; ++k) w(c + k).v[k] = Inner(Scalar(1));
      const Dual2 e = Call(xd, input, *theta);
      for (Index k = 0; k < len; ++k) {
        sink(c + k, e.v[k].v[0]);
        w(c + k).v[k] = Inner(Scalar(0));
      }
    });
  }

  // x, c and theta: the variables of the reverse-mode tape.
  Index num_variables() const { return dimension_ + input_dimension_ + parameters_.size(); }

#if IMPLICIT_HAVE_ADOLC
  // z = (x_b, c_s, theta) in double, the tape's variables for column b of x,
  // batch sample s (its input column).
  void PackVariables(ConstMatrixRef<Scalar> x, Index b, Index s, std::vector<double>* z) const {
    z->resize(num_variables());
    double* out = z->data();
    for (Index i = 0; i < dimension_; ++i) *out++ = static_cast<double>(x(i, b));
    if constexpr (kHasInput) {
      for (Index i = 0; i < input_dimension_; ++i) *out++ = static_cast<double>(input_(i, s));
    }
    const Vector<Scalar>& theta = parameters_.values();
    for (Index i = 0; i < theta.size(); ++i) *out++ = static_cast<double>(theta(i));
  }
  // Records E at z (the caller holds ReverseTape::Lock()).
  void RecordTape(const std::vector<double>& z) const {
    if (tape_.size() != num_variables()) tape_ = internal::ReverseTape(num_variables());
    tape_.Record(z.data(), [&](const Vector<adouble>& za) {
      const Vector<adouble> xa = za.head(dimension_);
      const Vector<adouble> ca = za.segment(dimension_, input_dimension_);
      const Vector<adouble> ta = za.tail(parameters_.size());
      return adouble(Call(xa, ca, ta));
    });
  }
  // Replays op (a ReverseTape product returning false on a branch switch) at
  // z, recording the tape there first when it is missing or another branch.
  template <typename Op>
  void Replay(const std::vector<double>& z, Op&& op) const {
    if (!tape_.recorded() || tape_.size() != num_variables()) RecordTape(z);
    if (op()) return;
    RecordTape(z);
    if (!op()) {
      throw std::runtime_error(
          "AutoDiffEnergy: the ADOL-C tape reports a branch switch at its own recording point "
          "(a comparison of equal values?); use forward mode (set_mode) for this energy");
    }
  }
  template <typename Sample>
  void ReverseGradient(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad, VectorRef<Scalar>* values,
                       Sample&& sample) const {
    const auto lock = internal::ReverseTape::Lock();
    std::vector<double> z, g(num_variables());
    for (Index b = 0; b < x.cols(); ++b) {
      PackVariables(x, b, sample(b), &z);
      double e = 0;
      Replay(z, [&] { return tape_.GradientAndValue(z.data(), &e, g.data()); });
      for (Index i = 0; i < dimension_; ++i) grad(i, b) = static_cast<Scalar>(g[i]);
      if (values != nullptr) (*values)(b) = static_cast<Scalar>(e);
    }
  }
  // sink(b, H_b (u_b, 0, 0)) per sample, H_b the Hessian of E in (x, c, theta):
  // its x rows are the Hessian-vector product, its c and theta rows the input
  // and parameter products d/dw <grad_x E, u_b>.
  template <typename Sink>
  void ReverseSecondOrder(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                          Sink&& sink) const {
    const auto lock = internal::ReverseTape::Lock();
    std::vector<double> z, v(num_variables(), 0.0), hv(num_variables());
    for (Index b = 0; b < x.cols(); ++b) {
      PackVariables(x, b, b, &z);
      for (Index i = 0; i < dimension_; ++i) v[i] = static_cast<double>(u(i, b));
      Replay(z, [&] { return tape_.HessianVectorProduct(z.data(), v.data(), hv.data()); });
      sink(b, hv);
    }
  }
#endif

  // E(x; c, theta) for any of the scalar types; c is ignored without an input.
  template <typename T>
  T Call(const Vector<T>& x, const Vector<T>& input, const Vector<T>& theta) const {
    if constexpr (kHasInput) {
      return functor_(x, input, theta);
    } else {
      (void)input;
      return functor_(x, theta);
    }
  }
  // Sample b's input as constants of dual type D (empty without an input).
  template <typename D>
  Vector<D> InputOf(Index b) const {
    if constexpr (kHasInput) {
      return Lift<D>(input_.col(b));
    } else {
      (void)b;
      return Vector<D>();
    }
  }
  // With an input: SetInput was called for a batch of `batch` samples.
  void CheckInput(const char* who, Index batch) const {
    if (!kHasInput) return;
    if (input_.cols() != batch) {
      throw std::invalid_argument(
          std::string(who) + ": the input has " + std::to_string(input_.cols()) +
          " columns (SetInput), the batch " + std::to_string(batch) + " samples");
    }
  }

  template <typename F>
  static void ForEachChunk(Index n, F&& f) {
    for (Index c = 0; c < n; c += kChunk) f(c, std::min<Index>(kChunk, n - c));
  }

  // Constants (all derivative parts zero) of dual type D.
  template <typename D, typename Derived>
  static Vector<D> Lift(const Eigen::MatrixBase<Derived>& values) {
    Vector<D> out(values.size());
    for (Index i = 0; i < values.size(); ++i) out(i) = D(LiftScalar<D>(values(i)));
    return out;
  }
  template <typename D>
  static auto LiftScalar(Scalar s) {
    if constexpr (std::is_same<D, Dual2>::value) {
      return Inner(s);
    } else {
      return s;
    }
  }
  // x + eps * dir in the inner dual, derivative parts of the outer zero.
  template <typename A, typename B>
  static Vector<Dual2> LiftWithDirection(const Eigen::MatrixBase<A>& x,
                                         const Eigen::MatrixBase<B>& dir) {
    Vector<Dual2> out(x.size());
    for (Index i = 0; i < x.size(); ++i) {
      Inner inner(x(i));
      inner.v[0] = dir(i);
      out(i) = Dual2(inner);
    }
    return out;
  }

  Functor functor_;
  Index dimension_;
  Index input_dimension_ = 0;
  ParameterSet<Scalar> parameters_;
  Matrix<Scalar> input_;  // input_dimension_ x B, when the functor takes an input
  AutoDiffMode mode_ = AutoDiffMode::kAutomatic;
#if IMPLICIT_HAVE_ADOLC
  // E recorded for reverse mode (at the first reverse-mode product).
  mutable internal::ReverseTape tape_{1};
#endif
};

}  // namespace implicit
