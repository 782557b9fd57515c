/// \file
/// GaussianLogNormalizer: the log-normaliser of a Gaussian base measure
/// N(mu, Sigma) as an Energy of the query eta. log Z(eta) = mu . eta + 0.5 eta^T
/// Sigma eta (gradient mu + Sigma eta, Hessian Sigma; log_normalizer.h has the
/// family). Mean and covariance may be trainable (blocks "mu", "Sigma").
///
/// \code
///   implicit::GaussianLogNormalizer<double> logz(mu, Sigma);  // d, d x d
///   implicit::Matrix<double> grad(d, B);
///   logz.Gradient(eta, grad);                                  // mu + Sigma eta
/// \endcode
#pragma once

#include <implicit/core/types.h>
#include <implicit/layers/log_normalizer_base.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace implicit {

/// The log-normaliser of a Gaussian intrinsic measure N(mu, Sigma), as a
/// function of the query eta (d x B).
/// log Z(eta) = mu . eta + 0.5 eta^T Sigma eta. Sigma is used through its symmetric part (Sigma + Sigma^T)/2,
/// so that grad log Z = mu + Sigma eta for a symmetric Sigma and the parameter
/// derivative stays symmetric.
template <typename Scalar>
class GaussianLogNormalizer : public LogNormalizerBase<Scalar> {
  using Base = LogNormalizerBase<Scalar>;

 public:
  /// Whether the mean and the covariance are trained.
  struct Options {
    ///@{
    /// Trainable mean (block "mu", d x 1) and covariance (block "Sigma", d x d);
    /// both true by default. False: fixed data.
    bool learn_mean = true;
    bool learn_covariance = true;
    ///@}
  };

  /// Builds log Z for the mean (length d) and the covariance (d x d; used
  /// through its symmetric part), copied into the trainable blocks.
  /// \throws std::invalid_argument when the mean is empty or the covariance is
  ///   not d x d.
  GaussianLogNormalizer(Vector<Scalar> mean, Matrix<Scalar> covariance,
                        const Options& options = Options())
      : Base("GaussianLogNormalizer"), options_(options) {
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
  /// The mean mu (length d): block "mu" when learn_mean, else the fixed data.
  Vector<Scalar> mean() const {
    return options_.learn_mean ? Vector<Scalar>(params_.Block("mu")) : mu_;
  }
  /// The covariance in use: the symmetric part (Sigma + Sigma^T)/2 of Sigma
  /// (block "Sigma" when learn_covariance, else the fixed data).
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
  /// mu + Sigma eta.
  void Gradient(ConstMatrixRef<Scalar> eta, MatrixRef<Scalar> grad) const override {
    internal::CheckBatch("GaussianLogNormalizer::Gradient(eta)", eta, d_);
    internal::CheckShape("GaussianLogNormalizer::Gradient(grad)", grad, d_, eta.cols());
    grad.noalias() = covariance() * eta;
    grad.colwise() += mean();
  }
  /// mu + Sigma eta and log Z from one product Sigma eta.
  void GradientAndValue(ConstMatrixRef<Scalar> eta, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override;
  bool SupportsSubsets() const override { return true; }
  void HessianVectorProduct(ConstMatrixRef<Scalar> eta, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override {
    internal::CheckBatch("GaussianLogNormalizer::HessianVectorProduct(eta)", eta, d_);
    internal::CheckShape("GaussianLogNormalizer::HessianVectorProduct(v)", v, d_, eta.cols());
    internal::CheckShape("GaussianLogNormalizer::HessianVectorProduct(out)", out, d_, eta.cols());
    out.noalias() = covariance() * v;
  }
  /// d/dmu = sum_b u_b;  d/dSigma = 0.5 sum_b (u_b eta_b^T + eta_b u_b^T).
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> eta, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override;

 private:
  Options options_;
  Index d_ = 0;
  Vector<Scalar> mu_;
  Matrix<Scalar> Sigma_;
  using Base::params_;
};

template <typename Scalar>
void GaussianLogNormalizer<Scalar>::GradientAndValue(
    ConstMatrixRef<Scalar> eta,
    MatrixRef<Scalar> grad,
    VectorRef<Scalar> values) const {
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

template <typename Scalar>
void GaussianLogNormalizer<Scalar>::ParameterVectorJacobianProduct(
    ConstMatrixRef<Scalar> eta,
    ConstMatrixRef<Scalar> u,
    VectorRef<Scalar> out) const {
  internal::CheckBatch("GaussianLogNormalizer::ParameterVectorJacobianProduct(eta)", eta, d_);
  internal::CheckShape("GaussianLogNormalizer::ParameterVectorJacobianProduct(u)", u, d_, eta.cols());
  internal::CheckShape("GaussianLogNormalizer::ParameterVectorJacobianProduct(out)", out,
                       this->num_parameters(), 1);
  if (options_.learn_mean) params_.BlockOf(out, "mu") = u.rowwise().sum();
  if (options_.learn_covariance) {
    const Matrix<Scalar> ue = u * eta.transpose();
    params_.BlockOf(out, "Sigma") = Scalar(0.5) * (ue + ue.transpose());
  }
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(GaussianLogNormalizer);

}  // namespace implicit
