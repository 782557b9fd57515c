/// \file
/// DiscreteLogNormalizer: the log-normaliser of a discrete base measure over N
/// keys K (d x N) with log-weights m, log Z(eta) = lse(K^T eta + m), as an
/// Energy of the query eta: its gradient K softmax(K^T eta + m) is softmax
/// attention, its Hessian K (diag p - p p^T) K^T the covariance of the keys
/// (log_normalizer.h has the family). The keys may be trainable (block "K").
///
/// \code
///   implicit::DiscreteLogNormalizer<double> logz(keys);  // keys: d x N
///   implicit::Matrix<double> attn(d, B);
///   logz.Gradient(eta, attn);                             // K softmax(K^T eta)
/// \endcode
#pragma once

#include <implicit/core/types.h>
#include <implicit/layers/log_normalizer_base.h>
#include <implicit/layers/log_sum_exp.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace implicit {

/// The log-normaliser of a discrete base measure over the keys K (d x N), as a
/// function of the query eta (d x B): softmax attention as a gradient.
/// log Z(eta) = log sum_i exp(k_i . eta + m_i), with the log-weights m set by
/// SetLogBaseMeasure (0 by default).
template <typename Scalar>
class DiscreteLogNormalizer : public LogNormalizerBase<Scalar> {
  using Base = LogNormalizerBase<Scalar>;

 public:
  /// Whether the keys are trained.
  struct Options {
    /// Trainable keys: parameter block "K" (d x N). False (the default): fixed
    /// data.
    bool learn_keys = false;
  };

  /// Builds log Z over the keys (d x N, one key per column; copied into block
  /// "K" when learn_keys), with the uniform counting measure.
  /// \throws std::invalid_argument when the keys are empty.
  explicit DiscreteLogNormalizer(Matrix<Scalar> keys, const Options& options = Options())
      : Base("DiscreteLogNormalizer"), options_(options) {
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
  /// The number of keys N.
  Index num_keys() const { return N_; }
  /// The keys K (d x N): the parameter block "K" when learn_keys, else the
  /// fixed data.
  ConstMatrixRef<Scalar> keys() const {
    if (options_.learn_keys) return params_.Block("K");
    return K_;
  }
  /// Log weights m of the intrinsic measure (N x 1 or N x B); -inf removes a
  /// key (masking). Empty = uniform counting measure.
  /// \throws std::invalid_argument when m is not empty and does not have N rows.
  void SetLogBaseMeasure(Matrix<Scalar> m) {
    if (m.size() != 0 && m.rows() != N_) {
      throw std::invalid_argument("DiscreteLogNormalizer::SetLogBaseMeasure(m): expected " +
                                  std::to_string(N_) + " rows, got " + std::to_string(m.rows()));
    }
    mask_ = std::move(m);
  }

  /// p = softmax(K^T eta + m) (N x B): the tilted measure on the keys.
  void Weights(ConstMatrixRef<Scalar> eta, MatrixRef<Scalar> p) const {
    internal::CheckBatch("DiscreteLogNormalizer::Weights(eta)", eta, d_);
    internal::CheckShape("DiscreteLogNormalizer::Weights(p)", p, N_, eta.cols());
    p = Head(eta, "DiscreteLogNormalizer::Weights").p;
  }
  /// out = V p: the attention output for values V (d_v x N). With V = K this is
  /// grad log Z; in general it is d/dt log Z(eta, t) at t = 0 for the family with
  /// sufficient statistic (k_i, v_i). eta: d x B; out: d_v x B.
  /// \throws std::invalid_argument when eta, values or out have the wrong shape.
  void ExpectedValues(ConstMatrixRef<Scalar> eta, ConstMatrixRef<Scalar> values,
                      MatrixRef<Scalar> out) const;

  /// log Z (-inf when every key is masked).
  void Value(ConstMatrixRef<Scalar> eta, VectorRef<Scalar> values) const override {
    internal::CheckBatch("DiscreteLogNormalizer::Value(eta)", eta, d_);
    internal::CheckShape("DiscreteLogNormalizer::Value(values)", values, eta.cols(), 1);
    values = Head(eta, "DiscreteLogNormalizer::Value").lse;
  }
  /// grad log Z = K p (0 when every key is masked).
  void Gradient(ConstMatrixRef<Scalar> eta, MatrixRef<Scalar> grad) const override {
    internal::CheckBatch("DiscreteLogNormalizer::Gradient(eta)", eta, d_);
    internal::CheckShape("DiscreteLogNormalizer::Gradient(grad)", grad, d_, eta.cols());
    grad.noalias() = keys() * Head(eta, "DiscreteLogNormalizer::Gradient").p;
  }
  /// grad log Z and log Z from one softmax head.
  void GradientAndValue(ConstMatrixRef<Scalar> eta, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override;
  /// The same function for every sample unless the base measure is per sample (N x B).
  bool SupportsSubsets() const override { return mask_.size() == 0 || mask_.cols() == 1; }
  void HessianVectorProduct(ConstMatrixRef<Scalar> eta, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override {
    internal::CheckBatch("DiscreteLogNormalizer::HessianVectorProduct(eta)", eta, d_);
    internal::CheckShape("DiscreteLogNormalizer::HessianVectorProduct(v)", v, d_, eta.cols());
    internal::CheckShape("DiscreteLogNormalizer::HessianVectorProduct(out)", out, d_, eta.cols());
    out = Head(eta, "DiscreteLogNormalizer::HessianVectorProduct").CovarianceProduct(keys(), v, Scalar(1));
  }
  /// d/dK sum_b <K p_b, u_b> = U P^T + Eta W^T, W = (diag p - p p^T) K^T U.
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> eta, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override;

 private:
  internal::SoftmaxHead<Scalar> Head(ConstMatrixRef<Scalar> eta, const char* who) const {
    internal::SoftmaxHead<Scalar> head;
    head.Compute(keys(), eta, Scalar(1), mask_, who);
    return head;
  }

  Options options_;
  Index d_ = 0, N_ = 0;
  Matrix<Scalar> K_, mask_;
  using Base::params_;
};

template <typename Scalar>
void DiscreteLogNormalizer<Scalar>::ExpectedValues(
    ConstMatrixRef<Scalar> eta,
    ConstMatrixRef<Scalar> values,
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

template <typename Scalar>
void DiscreteLogNormalizer<Scalar>::GradientAndValue(
    ConstMatrixRef<Scalar> eta,
    MatrixRef<Scalar> grad,
    VectorRef<Scalar> values) const {
  internal::CheckBatch("DiscreteLogNormalizer::GradientAndValue(eta)", eta, d_);
  internal::CheckShape("DiscreteLogNormalizer::GradientAndValue(grad)", grad, d_, eta.cols());
  internal::CheckShape("DiscreteLogNormalizer::GradientAndValue(values)", values, eta.cols(), 1);
  const auto head = Head(eta, "DiscreteLogNormalizer::GradientAndValue");
  values = head.lse;
  grad.noalias() = keys() * head.p;
}

template <typename Scalar>
void DiscreteLogNormalizer<Scalar>::ParameterVectorJacobianProduct(
    ConstMatrixRef<Scalar> eta,
    ConstMatrixRef<Scalar> u,
    VectorRef<Scalar> out) const {
  internal::CheckBatch("DiscreteLogNormalizer::ParameterVectorJacobianProduct(eta)", eta, d_);
  internal::CheckShape("DiscreteLogNormalizer::ParameterVectorJacobianProduct(u)", u, d_, eta.cols());
  internal::CheckShape("DiscreteLogNormalizer::ParameterVectorJacobianProduct(out)", out,
                       this->num_parameters(), 1);
  if (!options_.learn_keys) return;
  Matrix<Scalar> dK = Matrix<Scalar>::Zero(d_, N_);
  Head(eta, "DiscreteLogNormalizer::ParameterVectorJacobianProduct")
      .RetrievalVjp(keys(), eta, u, Scalar(1), Scalar(1), &dK, nullptr);
  params_.BlockOf(out, "K") = dK;
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(DiscreteLogNormalizer);

}  // namespace implicit
