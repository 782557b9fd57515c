/// \file
/// ResidualLogNormalizerMap: f(z; c) = LN(z + a grad log Z(z) + c), the
/// residual attention update of a log-normaliser (log_normalizer.h) as a
/// fixed-point map: one gradient-ascent step of size a on log Z, an optional
/// input injection c, then the LayerNorm contraction (layer_norm.h). JVP / VJP,
/// parameter and input VJPs in closed form, for solvers and the IFT.
///
/// \code
///   implicit::DiscreteLogNormalizer<double> logz(keys);          // keys: d x N
///   implicit::ResidualLogNormalizerMap<double>::Options o;       // a = 1, gamma = 1
///   implicit::ResidualLogNormalizerMap<double> map(logz, o);
///   map.SetInput(c);                                             // d x B
///   implicit::PicardSolver<double>().Solve(map, z);              // z = f(z; c)
/// \endcode
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/map.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#include <implicit/layers/layer_norm.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace implicit {

/// f(z; c) = LN(z + a grad log Z(z) + c): the residual attention update as a
/// fixed-point map (see the file comment). Parameters are the log
/// normaliser's (parameters() returns its ParameterSet); the LayerNorm gain and
/// bias are fixed options. Holds a reference: log_z must outlive the map.
template <typename Scalar>
class ResidualLogNormalizerMap : public FixedPointMap<Scalar> {
 public:
  /// The ascent step and the LayerNorm constants.
  struct Options {
    /// Step a >= 0 of the gradient ascent on log Z (default 1).
    double step = 1.0;
    ///@{
    /// LayerNorm gain gamma (> 0, default 1), bias delta (default 0), and
    /// epsilon (> 0, default 1e-5) under the square root.
    double gamma = 1.0;
    double delta = 0.0;
    double epsilon = 1e-5;
    ///@}
    /// True when the options are usable (step finite and >= 0, gamma finite
    /// and > 0, delta finite, epsilon > 0); otherwise false, with the reason
    /// written to *error when error is not nullptr.
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

  /// Builds the map of the log-normaliser log_z (held by reference: it must
  /// outlive the map), with no input injection.
  /// \throws std::invalid_argument when the options are invalid.
  ResidualLogNormalizerMap(Energy<Scalar>& log_z, const Options& options = Options())
      : log_z_(log_z), options_(options) {
    std::string error;
    if (!options.IsValid(&error)) throw std::invalid_argument("ResidualLogNormalizerMap: " + error);
    ln_.gamma = static_cast<Scalar>(options.gamma);
    ln_.delta = static_cast<Scalar>(options.delta);
    ln_.epsilon = static_cast<Scalar>(options.epsilon);
    a_ = static_cast<Scalar>(options.step);
  }

  /// The input injection c (d x B); empty = none (input_dimension() 0).
  /// \throws std::invalid_argument when c is not empty and does not have d
  ///   rows.
  void SetInput(Matrix<Scalar> c);
  /// The input injection c of the last SetInput (empty when none).
  const Matrix<Scalar>& input() const { return c_; }
  /// The LayerNorm applied after the residual step (gain, bias and epsilon
  /// from the options).
  const ColumnLayerNorm<Scalar>& layer_norm() const { return ln_; }

  Index dimension() const override { return log_z_.dimension(); }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    internal::CheckBatch("ResidualLogNormalizerMap::Evaluate(z)", z, dimension());
    internal::CheckShape("ResidualLogNormalizerMap::Evaluate(out)", out, z.rows(), z.cols());
    ln_.Apply(PreNorm(z), out);
  }
  bool HasJacobianProducts() const override { return true; }
  /// J v = J_LN (v + a H v).
  void JacobianVectorProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override;
  /// J^T u = (I + a H) J_LN u  (both factors symmetric).
  void VectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                             MatrixRef<Scalar> out) const override;
  Index num_parameters() const override { return log_z_.num_parameters(); }
  ParameterSet<Scalar>* parameters() override { return log_z_.parameters(); }
  /// (df/dtheta)^T u = a d/dtheta <grad log Z, J_LN u>.
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    Matrix<Scalar> w(z.rows(), z.cols());
    ln_.JacobianProduct(PreNorm(z), u, w);
    log_z_.ParameterVectorJacobianProduct(z, w, out);
    out *= a_;
  }
  Index input_dimension() const override { return c_.size() != 0 ? dimension() : 0; }
  /// (df/dc)^T u = J_LN u.
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override {
    ln_.JacobianProduct(PreNorm(z), u, out);
  }

 private:
  /// y = z + a grad log Z(z) + c.
  Matrix<Scalar> PreNorm(ConstMatrixRef<Scalar> z) const;

  Energy<Scalar>& log_z_;
  Options options_;
  ColumnLayerNorm<Scalar> ln_;
  Scalar a_;
  Matrix<Scalar> c_;
};

template <typename Scalar>
void ResidualLogNormalizerMap<Scalar>::SetInput(Matrix<Scalar> c) {
  if (c.size() != 0 && c.rows() != dimension()) {
    throw std::invalid_argument("ResidualLogNormalizerMap::SetInput(c): expected " +
                                std::to_string(dimension()) + " rows, got " +
                                std::to_string(c.rows()));
  }
  c_ = std::move(c);
}

template <typename Scalar>
void ResidualLogNormalizerMap<Scalar>::JacobianVectorProduct(
    ConstMatrixRef<Scalar> z,
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> out) const {
  internal::CheckBatch("ResidualLogNormalizerMap::JacobianVectorProduct(z)", z, dimension());
  Matrix<Scalar> hv(z.rows(), z.cols());
  log_z_.HessianVectorProduct(z, v, hv);
  hv = v + a_ * hv;
  ln_.JacobianProduct(PreNorm(z), hv, out);
}

template <typename Scalar>
void ResidualLogNormalizerMap<Scalar>::VectorJacobianProduct(
    ConstMatrixRef<Scalar> z,
    ConstMatrixRef<Scalar> u,
    MatrixRef<Scalar> out) const {
  internal::CheckBatch("ResidualLogNormalizerMap::VectorJacobianProduct(z)", z, dimension());
  Matrix<Scalar> w(z.rows(), z.cols());
  ln_.JacobianProduct(PreNorm(z), u, w);
  log_z_.HessianVectorProduct(z, w, out);
  out = w + a_ * out;
}

template <typename Scalar>
Matrix<Scalar> ResidualLogNormalizerMap<Scalar>::PreNorm(ConstMatrixRef<Scalar> z) const {
  Matrix<Scalar> y(z.rows(), z.cols());
  log_z_.Gradient(z, y);
  y = z + a_ * y;
  if (c_.size() != 0) {
    internal::CheckShape("ResidualLogNormalizerMap: input c", c_, z.rows(), z.cols());
    y += c_;
  }
  return y;
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(ResidualLogNormalizerMap);

}  // namespace implicit
