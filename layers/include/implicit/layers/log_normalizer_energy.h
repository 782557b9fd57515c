/// \file
/// LogNormalizerEnergy: E(eta) = 0.5 |eta|^2 - log Z(eta) for any log-normaliser
/// (an Energy whose Value is log Z, e.g.\ DiscreteLogNormalizer): its CCCP step
/// eta <- grad log Z(eta) is the attention update, so the discrete case is the
/// modern Hopfield energy at beta = 1 (log_normalizer.h has the family).
///
/// \code
///   implicit::DiscreteLogNormalizer<double> logz(keys);
///   implicit::LogNormalizerEnergy<double> energy(logz);
///   implicit::CccpMap<double> map(energy);
///   implicit::PicardSolver<double>().Solve(map, eta);   // eta = grad log Z(eta)
/// \endcode
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>

namespace implicit {

/// E(eta) = 0.5 |eta|^2 - log Z(eta) for any log-normaliser (an Energy whose
/// Value is log Z). CCCP step: eta <- grad log Z(eta). Parameters are the log
/// normaliser's (same ParameterSet). Holds a reference: log_z must outlive it.
template <typename Scalar>
class LogNormalizerEnergy : public Energy<Scalar> {
 public:
  /// Wraps the log-normaliser log_z (held by reference: it must outlive the
  /// energy).
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
  /// One pass of the log-normaliser (its GradientAndValue) for both.
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

IMPLICIT_EXTERN_TEMPLATE_CLASS(LogNormalizerEnergy);

}  // namespace implicit
