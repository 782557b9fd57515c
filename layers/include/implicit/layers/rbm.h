/// \file
/// RBM-effective energies: attention and associative memories as restricted
/// Boltzmann machines with the hidden units integrated out (M. Bal).
///
/// An RBM with visible units v (n), hidden units h_mu (M), couplings W (n x M)
/// and hidden priors q_mu has joint weight exp(sum_i a_i(v_i) + sum_mu h_mu
/// w_mu . v) prod_mu q_mu(h_mu). Integrating out h_mu gives
/// E[exp(h_mu t)] = exp(K_mu(t)), K_mu the cumulant generating function (CGF) of
/// q_mu, so the effective energy of the visible units is
///
/// \code{.unparsed}
///   E(v) = -sum_i a_i(v_i) - sum_mu K_mu(w_mu . v),       w_mu = column mu of W.
/// \endcode
///
/// The hidden prior is the user's choice (HiddenPrior, one K per unit; hidden_prior.h):
/// \code{.unparsed}
///   GaussianPrior(m, s)  K(t) = m t + s^2 t^2 / 2   -> classical quadratic Hopfield
///   PoissonPrior(l)      K(t) = l (e^t - 1)          -> exponential dense memory
///   BernoulliPrior(p)    K(t) = log(1 - p + p e^t)   -> interactions of all orders
///   ConstantPrior(c)     K(t) = c t                  (h = c with certainty)
///   CustomPrior          any K with K', K'' (CGFs are convex: K'' >= 0)
/// \endcode
/// Visible units:
/// \code{.unparsed}
///   kGaussian  a_i(v) = -v^2/2 + b_i v :  E(v) = 0.5|v|^2 - b.v - sum_mu K_mu(w_mu.v)
///   kBinary    a_i(v) = b_i v, v = +-1  :  E(v) =         - b.v - sum_mu K_mu(w_mu.v)
/// \endcode
/// (for kBinary, Value/Gradient/Hessian are those of the same formula on R^n,
/// and RetrieveBinary runs the +-1 dynamics.)
///
/// A constant hidden unit is one component of the modern Hopfield mixture:
/// with one hidden unit of value 1 and weights x_mu (K(t) = t) the effective
/// energy is E_mu(v) = 0.5|v|^2 - x_mu . v, and the free energy of the mixture
/// of these N one-unit RBMs at inverse temperature beta,
/// \code{.unparsed}
///   -(1/beta) log sum_mu exp(-beta E_mu(v)) = 0.5|v|^2 - (1/beta) lse(beta X^T v),
/// \endcode
/// is exactly the modern Hopfield energy (ModernHopfieldEnergy, hopfield.h).
/// An RBM with M constant units instead *sums* them: E = 0.5|v|^2 - c sum_mu w_mu.v.
///
/// Closed form, for S = W^T V (M x B): grad E = q v - b - W K'(S); hess E =
/// q I - W diag(K''(S)) W^T; CCCP step (Gaussian visible; K is convex)
/// v <- b + W K'(W^T v); parameter VJP w.r.t. W (and b when learned).
/// CccpUpdateAndValue / GradientAndValue give E with the update from one
/// product W^T v; no per-sample data, so SupportsSubsets() is true.
///
/// \code
///   auto prior = std::make_shared<implicit::BernoulliPrior<double>>(0.3);
///   implicit::RbmEnergy<double> energy(W, prior);               // Gaussian visible
///   implicit::CccpMap<double> map(energy);                       // retrieval map
/// \endcode
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#include <implicit/layers/dense_associative_memory.h>
#include <implicit/layers/hidden_prior.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace implicit {

/// The visible units of an RbmEnergy: kGaussian (real-valued, a_i(v) =
/// -v^2/2 + b_i v) or kBinary (+-1 states, a_i(v) = b_i v).
enum class VisibleType { kGaussian, kBinary };

/// The effective energy of an RBM's visible units with the hidden units
/// integrated out. E(v) = -sum_i a_i(v_i) - sum_mu K_mu(w_mu . v) (the file
/// comment has the derivation and the priors).
template <typename Scalar>
class RbmEnergy : public Energy<Scalar> {
 public:
  /// The visible units and which blocks are trained.
  struct Options {
    /// Visible units: kGaussian (adds 0.5|v|^2; the default) or kBinary (+-1
    /// states).
    VisibleType visible = VisibleType::kGaussian;
    /// Trainable couplings: parameter block "W" (n x M; the default). False:
    /// fixed data.
    bool learn_weights = true;
    /// Visible bias b: parameter block "b" (n x 1), initialised to 0. False (the
    /// default): b = 0.
    bool learn_bias = false;
  };

  /// Builds the energy of the couplings (n x M, column mu = couplings of hidden
  /// unit mu; copied into block "W" when learn_weights) and the hidden prior
  /// (shared, one K per hidden unit); the bias starts at 0.
  /// \throws std::invalid_argument when the weights are empty, the prior is
  ///   null, or it holds per-unit values for fewer hidden units than the
  ///   weights have columns.
  RbmEnergy(Matrix<Scalar> weights, std::shared_ptr<const HiddenPrior<Scalar>> prior,
            const Options& options = Options())
      : options_(options), prior_(std::move(prior)) {
    internal::CheckNonEmpty("RbmEnergy(weights)", weights);
    if (!prior_) throw std::invalid_argument("RbmEnergy(prior): null prior");
    if (prior_->units() != 0 && prior_->units() < weights.cols()) {
      throw std::invalid_argument("RbmEnergy(prior): the " + prior_->name() + " prior has values for " +
                                  std::to_string(prior_->units()) + " hidden units, the weights have " +
                                  std::to_string(weights.cols()));
    }
    n_ = weights.rows();
    kernel_.q = options.visible == VisibleType::kGaussian ? Scalar(1) : Scalar(0);
    if (options.learn_weights) {
      params_.Add("W", weights.rows(), weights.cols());
      params_.Block("W") = weights;
    } else {
      W_ = std::move(weights);
    }
    if (options.learn_bias) params_.Add("b", n_, 1);
  }

  /// The options the energy was built with.
  const Options& options() const { return options_; }
  /// The hidden prior (the CGFs K_mu).
  const HiddenPrior<Scalar>& prior() const { return *prior_; }
  Index dimension() const override { return n_; }
  /// The number of hidden units M.
  Index num_hidden() const { return weights().cols(); }
  /// The couplings W (n x M): block "W" when learn_weights, else the fixed
  /// data.
  ConstMatrixRef<Scalar> weights() const {
    if (options_.learn_weights) return params_.Block("W");
    return W_;
  }
  /// The visible bias b (length n): block "b" when learn_bias, else zero.
  Vector<Scalar> bias() const {
    return options_.learn_bias ? Vector<Scalar>(params_.Block("b")) : Vector<Scalar>::Zero(n_);
  }

  void Value(ConstMatrixRef<Scalar> v, VectorRef<Scalar> values) const override {
    internal::CheckBatch("RbmEnergy::Value(v)", v, n_);
    internal::CheckShape("RbmEnergy::Value(values)", values, v.cols(), 1);
    const Vector<Scalar> b = bias();
    kernel_.Value(weights(), &b, Eval(), v, values);
  }
  void Gradient(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> grad) const override {
    internal::CheckBatch("RbmEnergy::Gradient(v)", v, n_);
    internal::CheckShape("RbmEnergy::Gradient(grad)", grad, n_, v.cols());
    const Vector<Scalar> b = bias();
    kernel_.Gradient(weights(), &b, Eval(), v, grad);
  }
  /// Gaussian visible units: v <- b + W K'(W^T v). Binary: throws std::logic_error
  /// (use RetrieveBinary).
  void CccpUpdate(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const override;
  /// The CCCP update (Gaussian visible units; binary: std::logic_error) and E
  /// from one product W^T v.
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override;
  /// grad E = q v - b - W K'(W^T v) and E from one product W^T v.
  void GradientAndValue(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override;
  /// No per-sample data (the bias is per visible unit): any subset of a batch's
  /// columns may be evaluated.
  bool SupportsSubsets() const override { return true; }
  void HessianVectorProduct(ConstMatrixRef<Scalar> v, ConstMatrixRef<Scalar> dv,
                            MatrixRef<Scalar> out) const override {
    internal::CheckBatch("RbmEnergy::HessianVectorProduct(v)", v, n_);
    internal::CheckShape("RbmEnergy::HessianVectorProduct(direction)", dv, n_, v.cols());
    internal::CheckShape("RbmEnergy::HessianVectorProduct(out)", out, n_, v.cols());
    kernel_.HessianVectorProduct(weights(), Eval(), v, dv, out);
  }
  /// The Hessian at v keeping K''(W^T v + ...): a product there is two GEMMs.
  /// \throws std::invalid_argument when v is not n x B (B >= 1).
  std::unique_ptr<Linearization<Scalar>> LinearizeHessian(ConstMatrixRef<Scalar> v) const override {
    internal::CheckBatch("RbmEnergy::LinearizeHessian(v)", v, n_);
    return kernel_.HessianAt([this] { return weights(); }, Eval(), v);
  }
  /// The update and E as CccpUpdateAndValue / GradientAndValue, and the
  /// Hessian as LinearizeHessian, from one product W^T v (K'' from the pass
  /// that gives K and K').
  std::unique_ptr<Linearization<Scalar>> EvaluateAndLinearizeHessian(ConstMatrixRef<Scalar> v, EnergyUpdate update,
                                                                     MatrixRef<Scalar> out,
                                                                     VectorRef<Scalar> values) const override;
  bool LinearizesWithEvaluation() const override { return true; }

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return params_.size() > 0 ? &params_ : nullptr; }
  /// The trainable parameters (blocks "W" and "b" as enabled; empty when
  /// nothing is learned).
  const ParameterSet<Scalar>& parameter_set() const { return params_; }
  /// d/dW = -(U K'(S)^T + V (K''(S) .* W^T U)^T), d/db = -sum_b u_b.
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> v, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override;

  /// +-1 dynamics on the visible units: v_i <- the sign with the lower energy
  /// (others fixed), asynchronously or synchronously (BinaryRetrievalOptions).
  /// Works for either visible type (v_i^2 = 1 is constant on +-1 states).
  /// states: n x B, updated in place (any nonzero entry read as its sign).
  /// \throws std::invalid_argument when the options are invalid or states is
  ///   not n x B with B >= 1.
  BinaryRetrievalSummary RetrieveBinary(MatrixRef<Scalar> states,
                                        const BinaryRetrievalOptions& options = BinaryRetrievalOptions()) const;

 private:
  auto Eval() const {
    const HiddenPrior<Scalar>* prior = prior_.get();
    return [prior](const Matrix<Scalar>& s, Matrix<Scalar>* k, Matrix<Scalar>* dk, Matrix<Scalar>* d2k) {
      prior->Evaluate(s, k, dk, d2k);
    };
  }

  Options options_;
  std::shared_ptr<const HiddenPrior<Scalar>> prior_;
  Index n_ = 0;
  Matrix<Scalar> W_;
  ParameterSet<Scalar> params_;
  internal::SeparableEnergy<Scalar> kernel_;
};

template <typename Scalar>
void RbmEnergy<Scalar>::CccpUpdate(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const {
  if (options_.visible != VisibleType::kGaussian) {
    throw std::logic_error("RbmEnergy::CccpUpdate: binary visible units have no CCCP step; "
                           "use RetrieveBinary");
  }
  internal::CheckBatch("RbmEnergy::CccpUpdate(v)", v, n_);
  internal::CheckShape("RbmEnergy::CccpUpdate(out)", out, n_, v.cols());
  const Vector<Scalar> b = bias();
  Matrix<Scalar> r;
  kernel_.Retrieval(weights(), &b, Eval(), v, &r);
  out = r;
}

template <typename Scalar>
void RbmEnergy<Scalar>::CccpUpdateAndValue(
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> out,
    VectorRef<Scalar> values) const {
  if (options_.visible != VisibleType::kGaussian) {
    throw std::logic_error("RbmEnergy::CccpUpdateAndValue: binary visible units have no CCCP "
                           "step; use RetrieveBinary");
  }
  internal::CheckBatch("RbmEnergy::CccpUpdateAndValue(v)", v, n_);
  internal::CheckShape("RbmEnergy::CccpUpdateAndValue(out)", out, n_, v.cols());
  internal::CheckShape("RbmEnergy::CccpUpdateAndValue(values)", values, v.cols(), 1);
  const Vector<Scalar> b = bias();
  Matrix<Scalar> r;
  kernel_.RetrievalAndValue(weights(), &b, Eval(), v, &r, values);
  out = r;
}

template <typename Scalar>
void RbmEnergy<Scalar>::GradientAndValue(
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> grad,
    VectorRef<Scalar> values) const {
  internal::CheckBatch("RbmEnergy::GradientAndValue(v)", v, n_);
  internal::CheckShape("RbmEnergy::GradientAndValue(grad)", grad, n_, v.cols());
  internal::CheckShape("RbmEnergy::GradientAndValue(values)", values, v.cols(), 1);
  const Vector<Scalar> b = bias();
  Matrix<Scalar> r;
  kernel_.RetrievalAndValue(weights(), &b, Eval(), v, &r, values);
  grad = kernel_.q * v - r;
}

template <typename Scalar>
std::unique_ptr<Linearization<Scalar>> RbmEnergy<Scalar>::EvaluateAndLinearizeHessian(ConstMatrixRef<Scalar> v,
                                                                                    EnergyUpdate update,
                                                                                    MatrixRef<Scalar> out,
                                                                                    VectorRef<Scalar> values) const {
  const bool cccp = update == EnergyUpdate::kCccp;
  if (cccp && options_.visible != VisibleType::kGaussian) {
    throw std::logic_error("RbmEnergy::EvaluateAndLinearizeHessian: binary visible units have no CCCP "
                           "step; use RetrieveBinary");
  }
  internal::CheckBatch("RbmEnergy::EvaluateAndLinearizeHessian(v)", v, n_);
  internal::CheckShape("RbmEnergy::EvaluateAndLinearizeHessian(out)", out, n_, v.cols());
  internal::CheckShape("RbmEnergy::EvaluateAndLinearizeHessian(values)", values, v.cols(), 1);
  const Vector<Scalar> b = bias();
  Matrix<Scalar> r;
  auto hessian = kernel_.RetrievalValueAndHessian([this] { return weights(); }, &b, Eval(), v, &r, values);
  if (cccp) {
    out = r;
  } else {
    out = kernel_.q * v - r;
  }
  return hessian;
}

template <typename Scalar>
void RbmEnergy<Scalar>::ParameterVectorJacobianProduct(
    ConstMatrixRef<Scalar> v,
    ConstMatrixRef<Scalar> u,
    VectorRef<Scalar> out) const {
  internal::CheckBatch("RbmEnergy::ParameterVectorJacobianProduct(v)", v, n_);
  internal::CheckShape("RbmEnergy::ParameterVectorJacobianProduct(u)", u, n_, v.cols());
  internal::CheckShape("RbmEnergy::ParameterVectorJacobianProduct(out)", out, num_parameters(), 1);
  if (options_.learn_weights) params_.BlockOf(out, "W") = kernel_.WeightVjp(weights(), Eval(), v, u);
  if (options_.learn_bias) params_.BlockOf(out, "b") = -u.rowwise().sum();
}

template <typename Scalar>
BinaryRetrievalSummary RbmEnergy<Scalar>::RetrieveBinary(
    MatrixRef<Scalar> states,
    const BinaryRetrievalOptions& options) const {
  const Matrix<double> W = weights().template cast<double>();
  const Vector<double> b = bias().template cast<double>();
  Matrix<Scalar> tp(W.cols(), 1), tm(W.cols(), 1), kp, km;
  auto gain = [&](Index i, const Vector<double>& s, double si) {
    // E(v_i = -1) - E(v_i = +1) = 2 b_i + sum_mu K(t + W_i) - K(t - W_i).
    for (Index mu = 0; mu < W.cols(); ++mu) {
      const double t = s(mu) - si * W(i, mu);
      tp(mu, 0) = static_cast<Scalar>(t + W(i, mu));
      tm(mu, 0) = static_cast<Scalar>(t - W(i, mu));
    }
    prior_->Evaluate(tp, &kp, nullptr, nullptr);
    prior_->Evaluate(tm, &km, nullptr, nullptr);
    return 2.0 * b(i) + static_cast<double>((kp - km).sum());
  };
  return internal::RunBinaryDynamics<Scalar>(W, states, options, gain, "RbmEnergy::RetrieveBinary");
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(RbmEnergy);

}  // namespace implicit
