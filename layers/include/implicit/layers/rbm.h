// RBM-effective energies: attention and associative memories as restricted
// Boltzmann machines with the hidden units integrated out (M. Bal).
//
// An RBM with visible units v (n), hidden units h_mu (M), couplings W (n x M)
// and hidden priors q_mu has joint weight exp(sum_i a_i(v_i) + sum_mu h_mu
// w_mu . v) prod_mu q_mu(h_mu). Integrating out h_mu gives
// E[exp(h_mu t)] = exp(K_mu(t)), K_mu the cumulant generating function (CGF) of
// q_mu, so the effective energy of the visible units is
//
//   E(v) = -sum_i a_i(v_i) - sum_mu K_mu(w_mu . v),       w_mu = column mu of W.
//
// The hidden prior is the user's choice (HiddenPrior, one K per unit):
//   GaussianPrior(m, s)  K(t) = m t + s^2 t^2 / 2   -> classical quadratic Hopfield
//   PoissonPrior(l)      K(t) = l (e^t - 1)          -> exponential dense memory
//   BernoulliPrior(p)    K(t) = log(1 - p + p e^t)   -> interactions of all orders
//   ConstantPrior(c)     K(t) = c t                  (h = c with certainty)
//   CustomPrior          any K with K', K'' (CGFs are convex: K'' >= 0)
// Visible units:
//   kGaussian  a_i(v) = -v^2/2 + b_i v :  E(v) = 0.5|v|^2 - b.v - sum_mu K_mu(w_mu.v)
//   kBinary    a_i(v) = b_i v, v = +-1  :  E(v) =         - b.v - sum_mu K_mu(w_mu.v)
// (for kBinary, Value/Gradient/Hessian are those of the same formula on R^n,
// and RetrieveBinary runs the +-1 dynamics.)
//
// A constant hidden unit is one component of the modern Hopfield mixture:
// with one hidden unit of value 1 and weights x_mu (K(t) = t) the effective
// energy is E_mu(v) = 0.5|v|^2 - x_mu . v, and the free energy of the mixture
// of these N one-unit RBMs at inverse temperature beta,
//   -(1/beta) log sum_mu exp(-beta E_mu(v)) = 0.5|v|^2 - (1/beta) lse(beta X^T v),
// is exactly the modern Hopfield energy (ModernHopfieldEnergy, hopfield.h).
// An RBM with M constant units instead *sums* them: E = 0.5|v|^2 - c sum_mu w_mu.v.
//
// Closed form, for S = W^T V (M x B): grad E = q v - b - W K'(S); hess E =
// q I - W diag(K''(S)) W^T; CCCP step (Gaussian visible; K is convex)
// v <- b + W K'(W^T v); parameter VJP w.r.t. W (and b when learned).
// CccpUpdateAndValue / GradientAndValue give E with the update from one
// product W^T v; no per-sample data, so SupportsSubsets() is true.
//
//   auto prior = std::make_shared<implicit::BernoulliPrior<double>>(0.3);
//   implicit::RbmEnergy<double> energy(W, prior);               // Gaussian visible
//   implicit::CccpMap<double> map(energy);                       // retrieval map
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#include <implicit/layers/dense_associative_memory.h>

#include <cmath>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace implicit {

// The cumulant generating function K_mu(t) = log E[exp(t h_mu)] of the prior of
// hidden unit mu. Implement K, dK, d2K (scalar); Evaluate (row mu of t = unit
// mu) loops over them by default, built-in priors vectorise it.
template <typename Scalar>
class HiddenPrior {
 public:
  virtual ~HiddenPrior() = default;
  virtual std::string name() const = 0;
  virtual Scalar K(Scalar t, Index mu) const = 0;
  virtual Scalar dK(Scalar t, Index mu) const = 0;
  virtual Scalar d2K(Scalar t, Index mu) const = 0;
  // Entry-wise K, K', K'' of t (M x B); any output may be nullptr.
  virtual void Evaluate(const Matrix<Scalar>& t, Matrix<Scalar>* k, Matrix<Scalar>* dk,
                        Matrix<Scalar>* d2k) const;
};

template <typename Scalar>
void HiddenPrior<Scalar>::Evaluate(
    const Matrix<Scalar>& t,
    Matrix<Scalar>* k,
    Matrix<Scalar>* dk,
    Matrix<Scalar>* d2k) const {
  if (k) k->resize(t.rows(), t.cols());
  if (dk) dk->resize(t.rows(), t.cols());
  if (d2k) d2k->resize(t.rows(), t.cols());
  for (Index b = 0; b < t.cols(); ++b) {
    for (Index mu = 0; mu < t.rows(); ++mu) {
      if (k) (*k)(mu, b) = K(t(mu, b), mu);
      if (dk) (*dk)(mu, b) = dK(t(mu, b), mu);
      if (d2k) (*d2k)(mu, b) = d2K(t(mu, b), mu);
    }
  }
}

namespace internal {
// A per-unit parameter: one value for every unit, or one per unit.
template <typename Scalar>
Scalar PerUnit(const Vector<Scalar>& v, Index mu, const char* who) {
  if (v.size() == 1) return v(0);
  if (mu >= v.size()) {
    throw std::invalid_argument(std::string(who) + ": the prior has " + std::to_string(v.size()) +
                                " per-unit values but unit " + std::to_string(mu) + " was asked for");
  }
  return v(mu);
}
}  // namespace internal

// Gaussian N(m, s^2): K(t) = m t + s^2 t^2 / 2. Scalars apply to every unit;
// vectors give one value per hidden unit.
template <typename Scalar>
class GaussianPrior : public HiddenPrior<Scalar> {
 public:
  explicit GaussianPrior(Scalar mean = Scalar(0), Scalar stddev = Scalar(1))
      : GaussianPrior(Vector<Scalar>::Constant(1, mean), Vector<Scalar>::Constant(1, stddev)) {}
  GaussianPrior(Vector<Scalar> mean, Vector<Scalar> stddev)
      : m_(std::move(mean)), s_(std::move(stddev)) {
    if (m_.size() == 0 || s_.size() == 0) throw std::invalid_argument("GaussianPrior: empty parameters");
  }
  std::string name() const override { return "gaussian"; }
  Scalar K(Scalar t, Index mu) const override {
    const Scalar s = internal::PerUnit(s_, mu, "GaussianPrior");
    return internal::PerUnit(m_, mu, "GaussianPrior") * t + Scalar(0.5) * s * s * t * t;
  }
  Scalar dK(Scalar t, Index mu) const override {
    const Scalar s = internal::PerUnit(s_, mu, "GaussianPrior");
    return internal::PerUnit(m_, mu, "GaussianPrior") + s * s * t;
  }
  Scalar d2K(Scalar, Index mu) const override {
    const Scalar s = internal::PerUnit(s_, mu, "GaussianPrior");
    return s * s;
  }

 private:
  Vector<Scalar> m_, s_;
};

// Poisson(l): K(t) = l (e^t - 1).
template <typename Scalar>
class PoissonPrior : public HiddenPrior<Scalar> {
 public:
  explicit PoissonPrior(Scalar rate = Scalar(1)) : PoissonPrior(Vector<Scalar>::Constant(1, rate)) {}
  explicit PoissonPrior(Vector<Scalar> rate) : l_(std::move(rate)) {
    if (l_.size() == 0 || (l_.array() < Scalar(0)).any())
      throw std::invalid_argument("PoissonPrior: rates must be non-empty and >= 0");
  }
  std::string name() const override { return "poisson"; }
  Scalar K(Scalar t, Index mu) const override {
    return internal::PerUnit(l_, mu, "PoissonPrior") * std::expm1(t);
  }
  Scalar dK(Scalar t, Index mu) const override {
    return internal::PerUnit(l_, mu, "PoissonPrior") * std::exp(t);
  }
  Scalar d2K(Scalar t, Index mu) const override { return dK(t, mu); }
  void Evaluate(const Matrix<Scalar>& t, Matrix<Scalar>* k, Matrix<Scalar>* dk,
                Matrix<Scalar>* d2k) const override;

 private:
  void ScaleRows(Matrix<Scalar>& m) const {
    for (Index mu = 0; mu < m.rows(); ++mu) m.row(mu) *= internal::PerUnit(l_, mu, "PoissonPrior");
  }
  Vector<Scalar> l_;
};

template <typename Scalar>
void PoissonPrior<Scalar>::Evaluate(
    const Matrix<Scalar>& t,
    Matrix<Scalar>* k,
    Matrix<Scalar>* dk,
    Matrix<Scalar>* d2k) const {
  Matrix<Scalar> e = t.array().exp().matrix();
  ScaleRows(e);
  if (k) {
    *k = t.array().unaryExpr([](Scalar x) { return Scalar(std::expm1(x)); }).matrix();
    ScaleRows(*k);
  }
  if (dk) *dk = e;
  if (d2k) *d2k = e;
}

// Bernoulli(p) on {0, 1}: K(t) = log(1 - p + p e^t), K' = sigmoid(t + logit p),
// K'' = K'(1 - K'). Computed without overflow for any t.
template <typename Scalar>
class BernoulliPrior : public HiddenPrior<Scalar> {
 public:
  explicit BernoulliPrior(Scalar p = Scalar(0.5)) : BernoulliPrior(Vector<Scalar>::Constant(1, p)) {}
  explicit BernoulliPrior(Vector<Scalar> p) : p_(std::move(p)) {
    if (p_.size() == 0 || (p_.array() <= Scalar(0)).any() || (p_.array() >= Scalar(1)).any())
      throw std::invalid_argument("BernoulliPrior: probabilities must be in (0, 1)");
  }
  std::string name() const override { return "bernoulli"; }
  Scalar K(Scalar t, Index mu) const override {
    const Scalar p = internal::PerUnit(p_, mu, "BernoulliPrior");
    if (t > Scalar(0)) return t + std::log(p + (Scalar(1) - p) * std::exp(-t));
    return std::log1p(p * std::expm1(t));
  }
  Scalar dK(Scalar t, Index mu) const override {
    const Scalar p = internal::PerUnit(p_, mu, "BernoulliPrior");
    const Scalar z = t + std::log(p) - std::log1p(-p);
    return z >= Scalar(0) ? Scalar(1) / (Scalar(1) + std::exp(-z))
                          : std::exp(z) / (Scalar(1) + std::exp(z));
  }
  Scalar d2K(Scalar t, Index mu) const override {
    const Scalar s = dK(t, mu);
    return s * (Scalar(1) - s);
  }

 private:
  Vector<Scalar> p_;
};

// A hidden unit fixed at h = c: K(t) = c t (see the top of this file).
template <typename Scalar>
class ConstantPrior : public HiddenPrior<Scalar> {
 public:
  explicit ConstantPrior(Scalar c = Scalar(1)) : ConstantPrior(Vector<Scalar>::Constant(1, c)) {}
  explicit ConstantPrior(Vector<Scalar> c) : c_(std::move(c)) {
    if (c_.size() == 0) throw std::invalid_argument("ConstantPrior: empty values");
  }
  std::string name() const override { return "constant"; }
  Scalar K(Scalar t, Index mu) const override { return internal::PerUnit(c_, mu, "ConstantPrior") * t; }
  Scalar dK(Scalar, Index mu) const override { return internal::PerUnit(c_, mu, "ConstantPrior"); }
  Scalar d2K(Scalar, Index) const override { return Scalar(0); }

 private:
  Vector<Scalar> c_;
};

// A user-supplied CGF given as three callables of (t, mu).
template <typename Scalar>
class CustomPrior : public HiddenPrior<Scalar> {
 public:
  using Function = std::function<Scalar(Scalar t, Index mu)>;
  CustomPrior(std::string name, Function k, Function dk, Function d2k)
      : name_(std::move(name)), k_(std::move(k)), dk_(std::move(dk)), d2k_(std::move(d2k)) {
    if (!k_ || !dk_ || !d2k_) throw std::invalid_argument("CustomPrior: K, dK and d2K are required");
  }
  std::string name() const override { return name_; }
  Scalar K(Scalar t, Index mu) const override { return k_(t, mu); }
  Scalar dK(Scalar t, Index mu) const override { return dk_(t, mu); }
  Scalar d2K(Scalar t, Index mu) const override { return d2k_(t, mu); }

 private:
  std::string name_;
  Function k_, dk_, d2k_;
};

enum class VisibleType { kGaussian, kBinary };

// E(v) = -sum_i a_i(v_i) - sum_mu K_mu(w_mu . v) (see the top of this file).
template <typename Scalar>
class RbmEnergy : public Energy<Scalar> {
 public:
  struct Options {
    // Visible units: kGaussian (adds 0.5|v|^2) or kBinary (+-1 states).
    VisibleType visible = VisibleType::kGaussian;
    // Trainable couplings: parameter block "W" (n x M). False: fixed data.
    bool learn_weights = true;
    // Visible bias b: parameter block "b" (n x 1), initialised to 0. False: b = 0.
    bool learn_bias = false;
  };

  // weights: n x M (column mu = couplings of hidden unit mu). Throws on an
  // empty W or a null prior.
  RbmEnergy(Matrix<Scalar> weights, std::shared_ptr<const HiddenPrior<Scalar>> prior,
            const Options& options = Options())
      : options_(options), prior_(std::move(prior)) {
    internal::CheckNonEmpty("RbmEnergy(weights)", weights);
    if (!prior_) throw std::invalid_argument("RbmEnergy(prior): null prior");
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

  const Options& options() const { return options_; }
  const HiddenPrior<Scalar>& prior() const { return *prior_; }
  Index dimension() const override { return n_; }
  Index num_hidden() const { return weights().cols(); }
  ConstMatrixRef<Scalar> weights() const {
    if (options_.learn_weights) return params_.Block("W");
    return W_;
  }
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
  // Gaussian visible units: v <- b + W K'(W^T v). Binary: throws std::logic_error
  // (use RetrieveBinary).
  void CccpUpdate(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const override;
  // The CCCP update (Gaussian visible units; binary: std::logic_error) and E
  // from one product W^T v.
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override;
  // grad E = q v - b - W K'(W^T v) and E from one product W^T v.
  void GradientAndValue(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override;
  // No per-sample data (the bias is per visible unit): any subset of a batch's
  // columns may be evaluated.
  bool SupportsSubsets() const override { return true; }
  void HessianVectorProduct(ConstMatrixRef<Scalar> v, ConstMatrixRef<Scalar> dv,
                            MatrixRef<Scalar> out) const override {
    internal::CheckBatch("RbmEnergy::HessianVectorProduct(v)", v, n_);
    internal::CheckShape("RbmEnergy::HessianVectorProduct(direction)", dv, n_, v.cols());
    internal::CheckShape("RbmEnergy::HessianVectorProduct(out)", out, n_, v.cols());
    kernel_.HessianVectorProduct(weights(), Eval(), v, dv, out);
  }

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return params_.size() > 0 ? &params_ : nullptr; }
  const ParameterSet<Scalar>& parameter_set() const { return params_; }
  // d/dW = -(U K'(S)^T + V (K''(S) .* W^T U)^T), d/db = -sum_b u_b.
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> v, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override;

  // +-1 dynamics on the visible units: v_i <- the sign with the lower energy
  // (others fixed), asynchronously or synchronously (BinaryRetrievalOptions).
  // Works for either visible type (v_i^2 = 1 is constant on +-1 states).
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

IMPLICIT_EXTERN_TEMPLATE_CLASS(GaussianPrior);
IMPLICIT_EXTERN_TEMPLATE_CLASS(PoissonPrior);
IMPLICIT_EXTERN_TEMPLATE_CLASS(BernoulliPrior);
IMPLICIT_EXTERN_TEMPLATE_CLASS(ConstantPrior);
IMPLICIT_EXTERN_TEMPLATE_CLASS(CustomPrior);
IMPLICIT_EXTERN_TEMPLATE_CLASS(RbmEnergy);

}  // namespace implicit
