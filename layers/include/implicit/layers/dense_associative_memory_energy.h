/// \file
/// DenseAssociativeMemoryEnergy: the continuous energy of a dense associative
/// memory (Krotov & Hopfield; dense_associative_memory.h has the family) with
/// N stored patterns xi_mu (columns of X, n x N) and an interaction function F
/// (interaction_function.h):
///
/// \code{.unparsed}
///   continuous states, kEuclidean:     E(x) = - sum_mu F(xi_mu . x) + 0.5 |x|^2
///   continuous states in the box, kBox: E(x) = - sum_mu F(xi_mu . x) + (1/T) sum_i phi(x_i),
///       x in (-1, 1)^n, phi(x) = (1+x)/2 log((1+x)/2) + (1-x)/2 log((1-x)/2)
///       (the entropy barrier of the classical continuous Hopfield network; T > 0)
/// \endcode
///
/// DenseAssociativeMemoryEnergy is the continuous energy (an Energy with
/// closed-form gradient, Hessian-vector product and parameter VJP w.r.t.
/// learnable patterns). Update rules (CccpUpdate), valid CCCP steps when F is
/// convex (quadratic, even n, rectified, exponential):
/// \code{.unparsed}
///   kEuclidean: x <- X F'(X^T x)              (= x - grad E)
///   kBox:       x <- tanh(T X F'(X^T x))      (the continuous Hopfield update)
/// \endcode
/// Which domain fits: kEuclidean is bounded below only where F grows at most
/// quadratically (quadratic F with |X|_2 < 1, or locally); for higher degrees and
/// the exponential a stored pattern is a saddle of the kEuclidean energy, so use
/// kBox (bounded below: F is continuous on the box), whose minima approach the
/// +-1 patterns as T grows. For kBox, CccpMap's Jacobian products are those of
/// the gradient step (I - hess E), not of the tanh update: fine for Picard /
/// Anderson and for implicit differentiation (the fixed points are the same),
/// use EnergyRootMap for Newton. CccpUpdateAndValue / GradientAndValue give E
/// with the update from one product X^T x; no per-sample data, so
/// SupportsSubsets() is true.
///
/// \code
///   implicit::DenseAssociativeMemoryEnergy<double>::Options o;
///   o.interaction = implicit::Interaction::Exponential(2.0);
///   o.domain = implicit::StateDomain::kBox;
///   implicit::DenseAssociativeMemoryEnergy<double> energy(X, o);   // X: n x N
///   implicit::CccpMap<double> map(energy);
///   implicit::PicardSolver<double>().Solve(map, x);                // x: n x B
/// \endcode
#pragma once

#include <implicit/core/activations.h>
#include <implicit/core/energy.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#include <implicit/layers/interaction_function.h>
#include <implicit/layers/separable_energy.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace implicit {

// ---------------------------------------------------------------------------
/// The state domain of a continuous dense associative memory: kEuclidean
/// (states in R^n, energy + 0.5 |x|^2) or kBox (states in (-1, 1)^n, energy +
/// the entropy barrier (1/T) sum_i phi(x_i)).
enum class StateDomain { kEuclidean, kBox };

/// The continuous energy of a dense associative memory with stored patterns X
/// (n x N) and an interaction function F.
/// E(x) = -sum_mu F(xi_mu . x) + 0.5 |x|^2 (kEuclidean) or + (1/T) sum_i phi(x_i)
/// (kBox), continuous states; the file comment has the update rules and which
/// domain fits.
template <typename Scalar>
class DenseAssociativeMemoryEnergy : public Energy<Scalar> {
 public:
  /// The interaction function, state domain and trainability.
  struct Options {
    /// The interaction function F (default: quadratic, the classical network).
    Interaction interaction;
    /// kEuclidean (+ 0.5|x|^2, the default) or kBox (entropy barrier on (-1, 1)^n).
    StateDomain domain = StateDomain::kEuclidean;
    /// kBox only: the gain T > 0 of the update x <- tanh(T X F'(X^T x))
    /// (default 1).
    double box_gain = 1.0;
    /// Trainable patterns: parameter block "X" (n x N). False (the default):
    /// fixed data.
    bool learn_patterns = false;
    /// True when the options are usable (a valid interaction, box_gain finite
    /// and > 0); otherwise false, with the reason written to *error when error
    /// is not nullptr.
    bool IsValid(std::string* error) const {
      if (!interaction.IsValid(error)) {
        if (error) *error = "interaction." + *error;
        return false;
      }
      if (!(box_gain > 0.0) || !std::isfinite(box_gain)) {
        if (error) *error = "box_gain must be finite and > 0, got " + std::to_string(box_gain);
        return false;
      }
      return true;
    }
  };

  /// Builds the energy of the stored patterns (n x N, one pattern per column;
  /// copied into block "X" when learn_patterns).
  /// \throws std::invalid_argument when the options are invalid or the
  ///   patterns are empty.
  DenseAssociativeMemoryEnergy(Matrix<Scalar> patterns, const Options& options)
      : options_(options) {
    std::string error;
    if (!options.IsValid(&error)) {
      throw std::invalid_argument("DenseAssociativeMemoryEnergy: " + error);
    }
    internal::CheckNonEmpty("DenseAssociativeMemoryEnergy(patterns)", patterns);
    n_ = patterns.rows();
    box_ = options.domain == StateDomain::kBox;
    kernel_.q = box_ ? Scalar(0) : Scalar(1);
    T_ = static_cast<Scalar>(options.box_gain);
    if (options.learn_patterns) {
      params_.Add("X", patterns.rows(), patterns.cols());
      params_.Block("X") = patterns;
    } else {
      X_ = std::move(patterns);
    }
  }

  /// The options the energy was built with.
  const Options& options() const { return options_; }
  Index dimension() const override { return n_; }
  /// The stored patterns X (n x N): the parameter block "X" when
  /// learn_patterns, else the fixed data.
  ConstMatrixRef<Scalar> patterns() const {
    if (options_.learn_patterns) return params_.Block("X");
    return X_;
  }

  /// kBox: +inf outside [-1, 1]^n.
  void Value(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const override {
    internal::CheckBatch("DenseAssociativeMemoryEnergy::Value(x)", x, n_);
    internal::CheckShape("DenseAssociativeMemoryEnergy::Value(values)", values, x.cols(), 1);
    kernel_.Value(patterns(), nullptr, Eval(), x, values);
    AddBarrier(x, values);
  }
  /// kEuclidean: x - X F'(X^T x); kBox: atanh(x) / T - X F'(X^T x).
  void Gradient(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const override {
    internal::CheckBatch("DenseAssociativeMemoryEnergy::Gradient(x)", x, n_);
    internal::CheckShape("DenseAssociativeMemoryEnergy::Gradient(grad)", grad, n_, x.cols());
    kernel_.Gradient(patterns(), nullptr, Eval(), x, grad);
    if (box_) grad += (x.array().atanh() / T_).matrix();
  }
  /// kEuclidean: x <- X F'(X^T x); kBox: x <- tanh(T X F'(X^T x)).
  void CccpUpdate(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out) const override;
  /// The update and E from one product X^T x.
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override;
  /// grad E and E from one product X^T x.
  void GradientAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override;
  /// No per-sample data: any subset of a batch's columns may be evaluated.
  bool SupportsSubsets() const override { return true; }
  void HessianVectorProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override;

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return params_.size() > 0 ? &params_ : nullptr; }
  /// The trainable parameters (block "X" when learn_patterns; empty otherwise).
  const ParameterSet<Scalar>& parameter_set() const { return params_; }
  /// d/dX sum_b <grad E(x_b), u_b> = -(U F'(S)^T + Xb (F''(S) .* X^T U)^T), S = X^T Xb.
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override;

 private:
  auto Eval() const {
    const Interaction f = options_.interaction;
    return [f](const Matrix<Scalar>& s, Matrix<Scalar>* g, Matrix<Scalar>* dg, Matrix<Scalar>* d2g) {
      f.Evaluate(s, g, dg, d2g);
    };
  }
  /// out = the CCCP update from the retrieval r = X F'(X^T x): r for kEuclidean,
  /// tanh(T r) for kBox.
  void StoreUpdate(const Matrix<Scalar>& r, MatrixRef<Scalar> out) const {
    if (box_) {
      Tanh<Scalar>(T_ * r, out);
    } else {
      out = r;
    }
  }
  /// kBox: values += (1/T) sum_i phi(x_i); nothing for kEuclidean.
  void AddBarrier(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const;
  /// phi(x) = u log u + w log w, u = (1+x)/2, w = (1-x)/2; 0 log 0 = 0.
  static Scalar Barrier(Scalar x) {
    if (!(x >= Scalar(-1) && x <= Scalar(1))) return std::numeric_limits<Scalar>::infinity();
    const Scalar u = (Scalar(1) + x) / Scalar(2), w = (Scalar(1) - x) / Scalar(2);
    return (u > Scalar(0) ? u * std::log(u) : Scalar(0)) + (w > Scalar(0) ? w * std::log(w) : Scalar(0));
  }

  Options options_;
  Index n_ = 0;
  bool box_ = false;
  Scalar T_ = Scalar(1);
  Matrix<Scalar> X_;
  ParameterSet<Scalar> params_;
  internal::SeparableEnergy<Scalar> kernel_;
};

template <typename Scalar>
void DenseAssociativeMemoryEnergy<Scalar>::CccpUpdate(
    ConstMatrixRef<Scalar> x,
    MatrixRef<Scalar> out) const {
  internal::CheckBatch("DenseAssociativeMemoryEnergy::CccpUpdate(x)", x, n_);
  internal::CheckShape("DenseAssociativeMemoryEnergy::CccpUpdate(out)", out, n_, x.cols());
  Matrix<Scalar> r;
  kernel_.Retrieval(patterns(), nullptr, Eval(), x, &r);
  StoreUpdate(r, out);
}

template <typename Scalar>
void DenseAssociativeMemoryEnergy<Scalar>::CccpUpdateAndValue(
    ConstMatrixRef<Scalar> x,
    MatrixRef<Scalar> out,
    VectorRef<Scalar> values) const {
  internal::CheckBatch("DenseAssociativeMemoryEnergy::CccpUpdateAndValue(x)", x, n_);
  internal::CheckShape("DenseAssociativeMemoryEnergy::CccpUpdateAndValue(out)", out, n_, x.cols());
  internal::CheckShape("DenseAssociativeMemoryEnergy::CccpUpdateAndValue(values)", values,
                       x.cols(), 1);
  Matrix<Scalar> r;
  kernel_.RetrievalAndValue(patterns(), nullptr, Eval(), x, &r, values);
  AddBarrier(x, values);
  StoreUpdate(r, out);
}

template <typename Scalar>
void DenseAssociativeMemoryEnergy<Scalar>::GradientAndValue(
    ConstMatrixRef<Scalar> x,
    MatrixRef<Scalar> grad,
    VectorRef<Scalar> values) const {
  internal::CheckBatch("DenseAssociativeMemoryEnergy::GradientAndValue(x)", x, n_);
  internal::CheckShape("DenseAssociativeMemoryEnergy::GradientAndValue(grad)", grad, n_, x.cols());
  internal::CheckShape("DenseAssociativeMemoryEnergy::GradientAndValue(values)", values,
                       x.cols(), 1);
  Matrix<Scalar> r;
  kernel_.RetrievalAndValue(patterns(), nullptr, Eval(), x, &r, values);
  AddBarrier(x, values);
  grad = kernel_.q * x - r;
  if (box_) grad += (x.array().atanh() / T_).matrix();
}

template <typename Scalar>
void DenseAssociativeMemoryEnergy<Scalar>::HessianVectorProduct(
    ConstMatrixRef<Scalar> x,
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> out) const {
  internal::CheckBatch("DenseAssociativeMemoryEnergy::HessianVectorProduct(x)", x, n_);
  internal::CheckShape("DenseAssociativeMemoryEnergy::HessianVectorProduct(v)", v, n_, x.cols());
  internal::CheckShape("DenseAssociativeMemoryEnergy::HessianVectorProduct(out)", out, n_, x.cols());
  kernel_.HessianVectorProduct(patterns(), Eval(), x, v, out);
  if (box_) out.array() += v.array() / (T_ * (Scalar(1) - x.array().square()));
}

template <typename Scalar>
void DenseAssociativeMemoryEnergy<Scalar>::ParameterVectorJacobianProduct(
    ConstMatrixRef<Scalar> x,
    ConstMatrixRef<Scalar> u,
    VectorRef<Scalar> out) const {
  internal::CheckBatch("DenseAssociativeMemoryEnergy::ParameterVectorJacobianProduct(x)", x, n_);
  internal::CheckShape("DenseAssociativeMemoryEnergy::ParameterVectorJacobianProduct(u)", u, n_,
                       x.cols());
  internal::CheckShape("DenseAssociativeMemoryEnergy::ParameterVectorJacobianProduct(out)", out,
                       num_parameters(), 1);
  if (!options_.learn_patterns) return;
  params_.BlockOf(out, "X") = kernel_.WeightVjp(patterns(), Eval(), x, u);
}

template <typename Scalar>
void DenseAssociativeMemoryEnergy<Scalar>::AddBarrier(
    ConstMatrixRef<Scalar> x,
    VectorRef<Scalar> values) const {
  if (!box_) return;
  for (Index b = 0; b < x.cols(); ++b) {
    Scalar sum(0);
    for (Index i = 0; i < n_; ++i) sum += Barrier(x(i, b));
    values(b) += sum / T_;
  }
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(DenseAssociativeMemoryEnergy);

}  // namespace implicit
