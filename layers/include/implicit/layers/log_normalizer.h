// Attention as the gradient of a log-normaliser (A. Shim).
//
// For an exponential family over keys k with natural parameter eta (the
// query) and intrinsic (base) measure nu,
//
//   log Z(eta) = log integral exp(<k, eta>) dnu(k),   grad log Z(eta) = E_eta[k],
//
// the mean of the keys under the tilted measure. Two intrinsic measures:
//
//   DiscreteLogNormalizer   nu = sum_i exp(m_i) delta_{k_i} over N keys K (d x N):
//       log Z = lse(K^T eta + m),  grad = K softmax(K^T eta + m)   = softmax attention
//                                  hess = K (diag p - p p^T) K^T   = covariance of the keys
//   GaussianLogNormalizer   nu = N(mu, Sigma):
//       log Z = mu . eta + 0.5 eta^T Sigma eta,   grad = mu + Sigma eta,   hess = Sigma
//
// Both derive from Energy<S> as *scalar functions of eta*: Value is log Z,
// Gradient its gradient (the attention output), HessianVectorProduct the
// covariance times v, ParameterVectorJacobianProduct d/dtheta <grad log Z, u>;
// GradientAndValue gives both from one pass, and SupportsSubsets() holds
// unless the discrete base measure is per sample (N x B).
// (They are convex functions to ascend, not energies to minimise: do not hand
// them to an energy minimiser.) Any user log-normaliser written as a templated
// functor and wrapped in AutoDiffEnergy plugs in the same way.
//
// Two ways to turn a log-normaliser into an equilibrium layer:
//   LogNormalizerEnergy      E(eta) = 0.5 |eta|^2 - log Z(eta): its CCCP step
//                            eta <- grad log Z(eta) is the attention update
//                            (the discrete case is the modern Hopfield energy at
//                            beta = 1)
//   ResidualLogNormalizerMap f(z; c) = LN(z + a grad log Z(z) + c): the residual
//                            update, one gradient-ascent step of size a on
//                            log Z, followed by the LayerNorm contraction
//                            LN(y) = gamma (y - mean y) / sqrt(var y + eps) + delta,
//                            with an optional input injection c. A FixedPointMap
//                            with JVP / VJP, parameter and input VJPs.
//
//   implicit::DiscreteLogNormalizer<double> logz(keys);          // keys: d x N
//   implicit::ResidualLogNormalizerMap<double>::Options o;       // a = 1, gamma = 1
//   implicit::ResidualLogNormalizerMap<double> map(logz, o);
//   map.SetInput(c);                                             // d x B
//   implicit::PicardSolver<double>().Solve(map, z);              // z = f(z; c)
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/map.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#include <implicit/layers/layer_norm.h>
#include <implicit/layers/log_sum_exp.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace implicit {

// log Z(eta) = log sum_i exp(k_i . eta + m_i) over the keys K (d x N).
template <typename Scalar>
class DiscreteLogNormalizer : public Energy<Scalar> {
 public:
  struct Options {
    // Trainable keys: parameter block "K" (d x N). False: fixed data.
    bool learn_keys = false;
  };

  explicit DiscreteLogNormalizer(Matrix<Scalar> keys, const Options& options = Options())
      : options_(options) {
    if (keys.rows() == 0 || keys.cols() == 0) {
      throw std::invalid_argument("DiscreteLogNormalizer(keys): must be non-empty, got " +
                                  std::to_string(keys.rows()) + "x" + std::to_string(keys.cols()));
    }
    d_ = keys.rows();
    N_ = keys.cols();
    if (options.learn_keys) {
      params_.Add("K", d_, N_);
      params_.Block("K") = keys;
    } else {
      K_ = std::move(keys);
    }
  }

  Index dimension() const override { return d_; }
  Index num_keys() const { return N_; }
  ConstMatrixRef<Scalar> keys() const {
    if (options_.learn_keys) return params_.Block("K");
    return K_;
  }
  // Log weights m of the intrinsic measure (N x 1 or N x B); -inf removes a
  // key (masking). Empty = uniform counting measure.
  void SetLogBaseMeasure(Matrix<Scalar> m) {
    if (m.size() != 0 && m.rows() != N_) {
      throw std::invalid_argument("DiscreteLogNormalizer::SetLogBaseMeasure(m): expected " +
                                  std::to_string(N_) + " rows, got " + std::to_string(m.rows()));
    }
    mask_ = std::move(m);
  }

  // p = softmax(K^T eta + m) (N x B): the tilted measure on the keys.
  void Weights(ConstMatrixRef<Scalar> eta, MatrixRef<Scalar> p) const {
    internal::CheckBatch("DiscreteLogNormalizer::Weights(eta)", eta, d_);
    internal::CheckShape("DiscreteLogNormalizer::Weights(p)", p, N_, eta.cols());
    p = Head(eta, "DiscreteLogNormalizer::Weights").p;
  }
  // out = V p: the attention output for values V (d_v x N). With V = K this is
  // grad log Z; in general it is d/dt log Z(eta, t) at t = 0 for the family with
  // sufficient statistic (k_i, v_i).
  void ExpectedValues(ConstMatrixRef<Scalar> eta, ConstMatrixRef<Scalar> values,
                      MatrixRef<Scalar> out) const {
    internal::CheckBatch("DiscreteLogNormalizer::ExpectedValues(eta)", eta, d_);
    if (values.cols() != N_) {
      throw std::invalid_argument("DiscreteLogNormalizer::ExpectedValues(values): expected " +
                                  std::to_string(N_) + " columns, got " +
                                  std::to_string(values.cols()));
    }
    internal::CheckShape("DiscreteLogNormalizer::ExpectedValues(out)", out, values.rows(), eta.cols());
    out.noalias() = values * Head(eta, "DiscreteLogNormalizer::ExpectedValues").p;
  }

  // log Z (-inf when every key is masked).
  void Value(ConstMatrixRef<Scalar> eta, VectorRef<Scalar> values) const override {
    internal::CheckBatch("DiscreteLogNormalizer::Value(eta)", eta, d_);
    internal::CheckShape("DiscreteLogNormalizer::Value(values)", values, eta.cols(), 1);
    values = Head(eta, "DiscreteLogNormalizer::Value").lse;
  }
  // grad log Z = K p (0 when every key is masked).
  void Gradient(ConstMatrixRef<Scalar> eta, MatrixRef<Scalar> grad) const override {
    internal::CheckBatch("DiscreteLogNormalizer::Gradient(eta)", eta, d_);
    internal::CheckShape("DiscreteLogNormalizer::Gradient(grad)", grad, d_, eta.cols());
    grad.noalias() = keys() * Head(eta, "DiscreteLogNormalizer::Gradient").p;
  }
  // grad log Z and log Z from one softmax head.
  void GradientAndValue(ConstMatrixRef<Scalar> eta, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override {
    internal::CheckBatch("DiscreteLogNormalizer::GradientAndValue(eta)", eta, d_);
    internal::CheckShape("DiscreteLogNormalizer::GradientAndValue(grad)", grad, d_, eta.cols());
    internal::CheckShape("DiscreteLogNormalizer::GradientAndValue(values)", values, eta.cols(), 1);
    const auto head = Head(eta, "DiscreteLogNormalizer::GradientAndValue");
    values = head.lse;
    grad.noalias() = keys() * head.p;
  }
  // The same function for every sample unless the base measure is per sample (N x B).
  bool SupportsSubsets() const override { return mask_.size() == 0 || mask_.cols() == 1; }
  void HessianVectorProduct(ConstMatrixRef<Scalar> eta, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override {
    internal::CheckBatch("DiscreteLogNormalizer::HessianVectorProduct(eta)", eta, d_);
    internal::CheckShape("DiscreteLogNormalizer::HessianVectorProduct(v)", v, d_, eta.cols());
    internal::CheckShape("DiscreteLogNormalizer::HessianVectorProduct(out)", out, d_, eta.cols());
    out = Head(eta, "DiscreteLogNormalizer::HessianVectorProduct").CovarianceProduct(keys(), v, Scalar(1));
  }
  // Not an energy to minimise: the "CCCP step" of log Z is meaningless; use
  // LogNormalizerEnergy or ResidualLogNormalizerMap.
  void CccpUpdate(ConstMatrixRef<Scalar>, MatrixRef<Scalar>) const override {
    throw std::logic_error("DiscreteLogNormalizer is a log-normaliser, not an energy: wrap it in "
                           "LogNormalizerEnergy or ResidualLogNormalizerMap");
  }

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return params_.size() > 0 ? &params_ : nullptr; }
  const ParameterSet<Scalar>& parameter_set() const { return params_; }
  // d/dK sum_b <K p_b, u_b> = U P^T + Eta W^T, W = (diag p - p p^T) K^T U.
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> eta, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    internal::CheckBatch("DiscreteLogNormalizer::ParameterVectorJacobianProduct(eta)", eta, d_);
    internal::CheckShape("DiscreteLogNormalizer::ParameterVectorJacobianProduct(u)", u, d_, eta.cols());
    internal::CheckShape("DiscreteLogNormalizer::ParameterVectorJacobianProduct(out)", out,
                         num_parameters(), 1);
    if (!options_.learn_keys) return;
    Matrix<Scalar> dK = Matrix<Scalar>::Zero(d_, N_);
    Head(eta, "DiscreteLogNormalizer::ParameterVectorJacobianProduct")
        .RetrievalVjp(keys(), eta, u, Scalar(1), Scalar(1), &dK, nullptr);
    params_.BlockOf(out, "K") = dK;
  }

 private:
  internal::SoftmaxHead<Scalar> Head(ConstMatrixRef<Scalar> eta, const char* who) const {
    internal::SoftmaxHead<Scalar> head;
    head.Compute(keys(), eta, Scalar(1), mask_, who);
    return head;
  }

  Options options_;
  Index d_ = 0, N_ = 0;
  Matrix<Scalar> K_, mask_;
  ParameterSet<Scalar> params_;
};

// log Z(eta) = mu . eta + 0.5 eta^T Sigma eta  (Gaussian intrinsic measure
// N(mu, Sigma)). Sigma is used through its symmetric part (Sigma + Sigma^T)/2,
// so that grad log Z = mu + Sigma eta for a symmetric Sigma and the parameter
// derivative stays symmetric.
template <typename Scalar>
class GaussianLogNormalizer : public Energy<Scalar> {
 public:
  struct Options {
    // Trainable mean (block "mu", d x 1) and covariance (block "Sigma", d x d).
    bool learn_mean = true;
    bool learn_covariance = true;
  };

  GaussianLogNormalizer(Vector<Scalar> mean, Matrix<Scalar> covariance,
                        const Options& options = Options())
      : options_(options) {
    d_ = mean.size();
    if (d_ == 0) throw std::invalid_argument("GaussianLogNormalizer(mean): empty");
    internal::CheckShape("GaussianLogNormalizer(covariance)", covariance, d_, d_);
    if (options.learn_mean) {
      params_.Add("mu", d_, 1);
      params_.Block("mu") = mean;
    } else {
      mu_ = std::move(mean);
    }
    if (options.learn_covariance) {
      params_.Add("Sigma", d_, d_);
      params_.Block("Sigma") = covariance;
    } else {
      Sigma_ = std::move(covariance);
    }
  }

  Index dimension() const override { return d_; }
  Vector<Scalar> mean() const {
    return options_.learn_mean ? Vector<Scalar>(params_.Block("mu")) : mu_;
  }
  // The symmetric part of Sigma.
  Matrix<Scalar> covariance() const {
    const Matrix<Scalar> S = options_.learn_covariance ? Matrix<Scalar>(params_.Block("Sigma")) : Sigma_;
    return Scalar(0.5) * (S + S.transpose());
  }

  void Value(ConstMatrixRef<Scalar> eta, VectorRef<Scalar> values) const override {
    internal::CheckBatch("GaussianLogNormalizer::Value(eta)", eta, d_);
    internal::CheckShape("GaussianLogNormalizer::Value(values)", values, eta.cols(), 1);
    const Matrix<Scalar> Se = covariance() * eta;
    values = eta.transpose() * mean();
    values += Scalar(0.5) * (eta.array() * Se.array()).colwise().sum().transpose().matrix();
  }
  // mu + Sigma eta.
  void Gradient(ConstMatrixRef<Scalar> eta, MatrixRef<Scalar> grad) const override {
    internal::CheckBatch("GaussianLogNormalizer::Gradient(eta)", eta, d_);
    internal::CheckShape("GaussianLogNormalizer::Gradient(grad)", grad, d_, eta.cols());
    grad.noalias() = covariance() * eta;
    grad.colwise() += mean();
  }
  // mu + Sigma eta and log Z from one product Sigma eta.
  void GradientAndValue(ConstMatrixRef<Scalar> eta, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override {
    internal::CheckBatch("GaussianLogNormalizer::GradientAndValue(eta)", eta, d_);
    internal::CheckShape("GaussianLogNormalizer::GradientAndValue(grad)", grad, d_, eta.cols());
    internal::CheckShape("GaussianLogNormalizer::GradientAndValue(values)", values, eta.cols(), 1);
    const Matrix<Scalar> Se = covariance() * eta;
    const Vector<Scalar> mu = mean();
    values = eta.transpose() * mu;
    values += Scalar(0.5) * (eta.array() * Se.array()).colwise().sum().transpose().matrix();
    grad = Se;
    grad.colwise() += mu;
  }
  bool SupportsSubsets() const override { return true; }
  void HessianVectorProduct(ConstMatrixRef<Scalar> eta, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override {
    internal::CheckBatch("GaussianLogNormalizer::HessianVectorProduct(eta)", eta, d_);
    internal::CheckShape("GaussianLogNormalizer::HessianVectorProduct(v)", v, d_, eta.cols());
    internal::CheckShape("GaussianLogNormalizer::HessianVectorProduct(out)", out, d_, eta.cols());
    out.noalias() = covariance() * v;
  }
  void CccpUpdate(ConstMatrixRef<Scalar>, MatrixRef<Scalar>) const override {
    throw std::logic_error("GaussianLogNormalizer is a log-normaliser, not an energy: wrap it in "
                           "LogNormalizerEnergy or ResidualLogNormalizerMap");
  }

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return params_.size() > 0 ? &params_ : nullptr; }
  const ParameterSet<Scalar>& parameter_set() const { return params_; }
  // d/dmu = sum_b u_b;  d/dSigma = 0.5 sum_b (u_b eta_b^T + eta_b u_b^T).
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> eta, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    internal::CheckBatch("GaussianLogNormalizer::ParameterVectorJacobianProduct(eta)", eta, d_);
    internal::CheckShape("GaussianLogNormalizer::ParameterVectorJacobianProduct(u)", u, d_, eta.cols());
    internal::CheckShape("GaussianLogNormalizer::ParameterVectorJacobianProduct(out)", out,
                         num_parameters(), 1);
    if (options_.learn_mean) params_.BlockOf(out, "mu") = u.rowwise().sum();
    if (options_.learn_covariance) {
      const Matrix<Scalar> ue = u * eta.transpose();
      params_.BlockOf(out, "Sigma") = Scalar(0.5) * (ue + ue.transpose());
    }
  }

 private:
  Options options_;
  Index d_ = 0;
  Vector<Scalar> mu_;
  Matrix<Scalar> Sigma_;
  ParameterSet<Scalar> params_;
};

// E(eta) = 0.5 |eta|^2 - log Z(eta) for any log-normaliser (an Energy whose
// Value is log Z). CCCP step: eta <- grad log Z(eta). Parameters are the log
// normaliser's (same ParameterSet). Holds a reference: log_z must outlive it.
template <typename Scalar>
class LogNormalizerEnergy : public Energy<Scalar> {
 public:
  explicit LogNormalizerEnergy(Energy<Scalar>& log_z) : log_z_(log_z) {}
  Index dimension() const override { return log_z_.dimension(); }
  void Value(ConstMatrixRef<Scalar> eta, VectorRef<Scalar> values) const override {
    log_z_.Value(eta, values);
    values = Scalar(0.5) * eta.colwise().squaredNorm().transpose() - values;
  }
  void Gradient(ConstMatrixRef<Scalar> eta, MatrixRef<Scalar> grad) const override {
    log_z_.Gradient(eta, grad);
    grad = eta - grad;
  }
  void CccpUpdate(ConstMatrixRef<Scalar> eta, MatrixRef<Scalar> out) const override {
    log_z_.Gradient(eta, out);
  }
  // One pass of the log-normaliser (its GradientAndValue) for both.
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> eta, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override {
    log_z_.GradientAndValue(eta, out, values);
    values = Scalar(0.5) * eta.colwise().squaredNorm().transpose() - values;
  }
  void GradientAndValue(ConstMatrixRef<Scalar> eta, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override {
    log_z_.GradientAndValue(eta, grad, values);
    values = Scalar(0.5) * eta.colwise().squaredNorm().transpose() - values;
    grad = eta - grad;
  }
  bool SupportsSubsets() const override { return log_z_.SupportsSubsets(); }
  void HessianVectorProduct(ConstMatrixRef<Scalar> eta, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override {
    log_z_.HessianVectorProduct(eta, v, out);
    out = v - out;
  }
  Index num_parameters() const override { return log_z_.num_parameters(); }
  ParameterSet<Scalar>* parameters() override { return log_z_.parameters(); }
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> eta, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    log_z_.ParameterVectorJacobianProduct(eta, u, out);
    out = -out;
  }

 private:
  Energy<Scalar>& log_z_;
};

// f(z; c) = LN(z + a grad log Z(z) + c): the residual attention update as a
// fixed-point map (see the top of this file). Parameters are the log
// normaliser's (parameters() returns its ParameterSet); the LayerNorm gain and
// bias are fixed options. Holds a reference: log_z must outlive the map.
template <typename Scalar>
class ResidualLogNormalizerMap : public FixedPointMap<Scalar> {
 public:
  struct Options {
    // Step a >= 0 of the gradient ascent on log Z.
    double step = 1.0;
    // LayerNorm gain gamma (> 0), bias delta, and epsilon (> 0) under the square root.
    double gamma = 1.0;
    double delta = 0.0;
    double epsilon = 1e-5;
    bool IsValid(std::string* error) const {
      auto fail = [error](const std::string& m) {
        if (error) *error = m;
        return false;
      };
      if (!(step >= 0.0) || !std::isfinite(step)) return fail("step must be finite and >= 0");
      if (!(gamma > 0.0) || !std::isfinite(gamma)) return fail("gamma must be finite and > 0");
      if (!std::isfinite(delta)) return fail("delta must be finite");
      if (!(epsilon > 0.0)) return fail("epsilon must be > 0");
      return true;
    }
  };

  ResidualLogNormalizerMap(Energy<Scalar>& log_z, const Options& options = Options())
      : log_z_(log_z), options_(options) {
    std::string error;
    if (!options.IsValid(&error)) throw std::invalid_argument("ResidualLogNormalizerMap: " + error);
    ln_.gamma = static_cast<Scalar>(options.gamma);
    ln_.delta = static_cast<Scalar>(options.delta);
    ln_.epsilon = static_cast<Scalar>(options.epsilon);
    a_ = static_cast<Scalar>(options.step);
  }

  // The input injection c (d x B); empty = none (input_dimension() 0).
  void SetInput(Matrix<Scalar> c) {
    if (c.size() != 0 && c.rows() != dimension()) {
      throw std::invalid_argument("ResidualLogNormalizerMap::SetInput(c): expected " +
                                  std::to_string(dimension()) + " rows, got " +
                                  std::to_string(c.rows()));
    }
    c_ = std::move(c);
  }
  const Matrix<Scalar>& input() const { return c_; }
  const ColumnLayerNorm<Scalar>& layer_norm() const { return ln_; }

  Index dimension() const override { return log_z_.dimension(); }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    internal::CheckBatch("ResidualLogNormalizerMap::Evaluate(z)", z, dimension());
    internal::CheckShape("ResidualLogNormalizerMap::Evaluate(out)", out, z.rows(), z.cols());
    ln_.Apply(PreNorm(z), out);
  }
  bool HasJacobianProducts() const override { return true; }
  // J v = J_LN (v + a H v).
  void JacobianVectorProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    internal::CheckBatch("ResidualLogNormalizerMap::JacobianVectorProduct(z)", z, dimension());
    Matrix<Scalar> hv(z.rows(), z.cols());
    log_z_.HessianVectorProduct(z, v, hv);
    hv = v + a_ * hv;
    ln_.JacobianProduct(PreNorm(z), hv, out);
  }
  // J^T u = (I + a H) J_LN u  (both factors symmetric).
  void VectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                             MatrixRef<Scalar> out) const override {
    internal::CheckBatch("ResidualLogNormalizerMap::VectorJacobianProduct(z)", z, dimension());
    Matrix<Scalar> w(z.rows(), z.cols());
    ln_.JacobianProduct(PreNorm(z), u, w);
    log_z_.HessianVectorProduct(z, w, out);
    out = w + a_ * out;
  }
  Index num_parameters() const override { return log_z_.num_parameters(); }
  ParameterSet<Scalar>* parameters() override { return log_z_.parameters(); }
  // (df/dtheta)^T u = a d/dtheta <grad log Z, J_LN u>.
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    Matrix<Scalar> w(z.rows(), z.cols());
    ln_.JacobianProduct(PreNorm(z), u, w);
    log_z_.ParameterVectorJacobianProduct(z, w, out);
    out *= a_;
  }
  Index input_dimension() const override { return c_.size() != 0 ? dimension() : 0; }
  // (df/dc)^T u = J_LN u.
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override {
    ln_.JacobianProduct(PreNorm(z), u, out);
  }

 private:
  // y = z + a grad log Z(z) + c.
  Matrix<Scalar> PreNorm(ConstMatrixRef<Scalar> z) const {
    Matrix<Scalar> y(z.rows(), z.cols());
    log_z_.Gradient(z, y);
    y = z + a_ * y;
    if (c_.size() != 0) {
      internal::CheckShape("ResidualLogNormalizerMap: input c", c_, z.rows(), z.cols());
      y += c_;
    }
    return y;
  }

  Energy<Scalar>& log_z_;
  Options options_;
  ColumnLayerNorm<Scalar> ln_;
  Scalar a_;
  Matrix<Scalar> c_;
};

IMPLICIT_EXTERN_TEMPLATE_CLASS(DiscreteLogNormalizer);
IMPLICIT_EXTERN_TEMPLATE_CLASS(GaussianLogNormalizer);
IMPLICIT_EXTERN_TEMPLATE_CLASS(LogNormalizerEnergy);
IMPLICIT_EXTERN_TEMPLATE_CLASS(ResidualLogNormalizerMap);

}  // namespace implicit
