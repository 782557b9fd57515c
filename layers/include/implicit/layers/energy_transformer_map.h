/// \file
/// EnergyTransformerMap: the Energy Transformer (energy_transformer_energy.h)
/// as a fixed-point map, for forward solvers and implicit differentiation, with
/// clamped tokens for image completion.
///
/// Forward pass and training: EnergyTransformerMap is the fixed-point map
/// x <- x - a dE/dg of the ET dynamics, with exact Jacobian, parameter and
/// input products, for any forward solver (Picard, Anderson, GradientFlowSolver
/// via its energy()) and for implicit differentiation (ImplicitLayer). Its fixed
/// points are the zeros of dE/dg, which are stationary points of E. (Solving
/// grad E = 0 through EnergyRootMap / GradientStepMap also works forward, but E
/// is invariant to shifting a token, so grad E = 0 does not pin a token's mean
/// and the IFT system of those maps is singular.) The ET output is usually read
/// out as LayerNorm(x*) (EnergyTransformer::LayerNorm()).
///
/// Masked tokens (image completion): SetClamp(mask, image) lets only the free
/// (masked) tokens move while the others stay clamped at their values, which
/// become the map's input; ClampedEnergy (implicit/core/clamped_energy.h) does
/// the same for any energy. TokenMask() (token_mask.h) expands a per-token mask
/// (N x B) to the coordinate mask.
///
/// \code
///   implicit::EnergyTransformer<double> et(o);  // energy_transformer_energy.h
///   // Image completion: masked patches free, the rest clamped at their values;
///   // trained by implicit differentiation through the equilibrium.
///   implicit::EnergyTransformerMap<double> map(et, 0.5);  // x <- x - 0.5 dE/dg
///   map.SetClamp(implicit::TokenMask<double>(token_is_masked, 32), image);
///   implicit::ImplicitLayer<double> layer(map, anderson_solver);
///   layer.Forward(z);                                     // z <- completion
///   auto grads = layer.Backward(dLdz);                    // d loss / d theta
/// \endcode
#pragma once

#include <implicit/core/clamped_energy.h>
#include <implicit/core/energy.h>
#include <implicit/core/map.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#include <implicit/layers/energy_transformer_energy.h>
#include <implicit/layers/token_mask.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace implicit {

/// The Energy Transformer dynamics as a fixed-point map, for solvers and for
/// implicit differentiation:
///
/// \code{.unparsed}
///   f(x) = x - a r(x),   r = dE/dg = x + dF/dG   (a = step > 0; a = 1 gives
///                                                 f(x) = -dF/dG(LayerNorm(x)))
/// \endcode
///
/// Its fixed points are the zeros of r, where the dynamics stop. These are
/// isolated, whereas grad E = 0 is not (E is invariant to shifting a token), so
/// the IFT backward pass (I - J)^T u = g is well posed here but singular for
/// GradientStepMap / EnergyRootMap of the ET energy. J = I - a (I + H_F M) is
/// not symmetric (HasSymmetricJacobian() is false: GMRES, not MINRES).
///
/// Masked tokens: SetClamp(free_mask, values) (n x B, 1 = free) keeps the
/// clamped coordinates at `values` (the map's input, input_dimension() = n):
/// \code{.unparsed}
///   f(x) = m (.) (y - a r(y)) + (1 - m) (.) c,   y = m (.) x + (1 - m) (.) c,
/// \endcode
/// and InputVectorJacobianProduct gives the gradient with respect to c.
/// energy() is the ET energy (or, with a clamp, the matching ClampedEnergy), so
/// GradientFlowSolver follows exactly these dynamics.
///
/// Holds a reference: the EnergyTransformer must outlive it.
template <typename Scalar>
class EnergyTransformerMap : public FixedPointMap<Scalar> {
 public:
  /// The map x <- x - step dE/dg of the energy et (held by reference), with no
  /// clamp.
  /// \throws std::invalid_argument when step is not finite and > 0.
  explicit EnergyTransformerMap(EnergyTransformer<Scalar>& et, Scalar step = Scalar(1))
      : et_(et), clamped_(et), step_(step) {
    if (!(step > Scalar(0)) || !std::isfinite(static_cast<double>(step))) {
      throw std::invalid_argument("EnergyTransformerMap: step must be finite and > 0, got " +
                                  std::to_string(static_cast<double>(step)));
    }
  }

  /// Clamp the coordinates where free_mask is 0 at `values` (both n x B).
  /// \throws std::invalid_argument when free_mask is not n x B (B >= 1), values
  ///   has another shape, or an entry of free_mask is not 0 or 1.
  void SetClamp(Matrix<Scalar> free_mask, Matrix<Scalar> values) {
    clamped_.SetClamp(std::move(free_mask), std::move(values));
    has_clamp_ = true;
  }
  /// Replaces the clamped values (same shape as in SetClamp).
  /// \throws std::invalid_argument before SetClamp, or when values does not
  ///   have the clamp's shape.
  void SetInput(Matrix<Scalar> values) {
    if (!has_clamp_) {
      throw std::invalid_argument("EnergyTransformerMap::SetInput: call SetClamp first");
    }
    clamped_.SetInput(std::move(values));
  }
  /// Removes the clamp: every coordinate is free again (input_dimension() 0).
  void ClearClamp() { has_clamp_ = false; }
  /// True while a clamp set by SetClamp is in force.
  bool has_clamp() const { return has_clamp_; }
  /// The step a of the dynamics x <- x - a dE/dg.
  Scalar step() const { return step_; }

  Index dimension() const override { return et_.dimension(); }
  void Evaluate(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out) const override;
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    Product(x, v, out, false);
  }
  void VectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                             MatrixRef<Scalar> out) const override {
    Product(x, u, out, true);
  }
  /// The Jacobian at x keeps each sample's LayerNorm and attention
  /// (EnergyTransformer::LinearizeDescent): a product there costs the second-order
  /// products only. Valid while the parameters and the clamp do not change.
  std::unique_ptr<Linearization<Scalar>> Linearize(ConstMatrixRef<Scalar> x) const override;
  Index num_parameters() const override { return et_.num_parameters(); }
  ParameterSet<Scalar>* parameters() override { return et_.parameters(); }
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override;
  Index input_dimension() const override { return has_clamp_ ? et_.dimension() : 0; }
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override;
  const Energy<Scalar>* energy() const override {
    return has_clamp_ ? static_cast<const Energy<Scalar>*>(&clamped_)
                      : static_cast<const Energy<Scalar>*>(&et_);
  }
  /// Active set: the clamp is per sample, so a block of samples is evaluated
  /// with their clamps (EvaluateColumns); without one any subset is a batch.
  bool SupportsSubsets() const override { return !has_clamp_ && et_.SupportsSubsets(); }
  bool SupportsColumnSubsets() const override { return et_.SupportsSubsets(); }
  void EvaluateColumns(ConstMatrixRef<Scalar> x, const std::vector<Index>& columns,
                       MatrixRef<Scalar> out) const override;
  /// The step and the energy from one pass over each sample (the softmaxes
  /// once: EnergyTransformer::DescentDirectionAndValue).
  void EvaluateWithEnergy(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                          VectorRef<Scalar> energies) const override;
  void EvaluateColumnsWithEnergy(ConstMatrixRef<Scalar> x, const std::vector<Index>& columns,
                                 MatrixRef<Scalar> out, VectorRef<Scalar> energies) const override;

 private:
  void Mask(MatrixRef<Scalar> m) const { m.array() *= clamped_.free_mask().array(); }
  /// out = m (.) (y - a r(y)) + (1 - m) (.) c with y = m (.) x + (1 - m) (.) c,
  /// for the free mask m and clamped values c of x's samples; with `energies`
  /// also the clamped energy there, from the same pass.
  void ClampedStep(ConstMatrixRef<Scalar> x, const Matrix<Scalar>& mask, const Matrix<Scalar>& clamped,
                   MatrixRef<Scalar> out, VectorRef<Scalar>* energies = nullptr) const {
    const Matrix<Scalar> y = ClampedEnergy<Scalar>::Merge(x, mask, clamped);
    if (energies != nullptr) {
      et_.DescentDirectionAndValue(y, out, *energies);
      ClampedEnergy<Scalar>::AddPenalty(x, mask, clamped, *energies);
    } else {
      et_.DescentDirection(y, out);
    }
    out = (mask.array() * (y - step_ * out).array() + (Scalar(1) - mask.array()) * clamped.array()).matrix();
  }
  /// J v = m (.) (w - a dr/dy w), w = m (.) v   (transpose: dr/dy^T); no clamp: m = 1.
  void Product(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out,
               bool transpose) const;
  /// The same with the caches of dr/dy at y (`at`, of `batch` samples; the
  /// merged point when clamped). v and out are checked before the mask is applied.
  void ProductAt(const typename EnergyTransformer<Scalar>::DescentPoint& at, Index batch,
                 ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out, bool transpose) const;
  class Jacobian;

  EnergyTransformer<Scalar>& et_;
  ClampedEnergy<Scalar> clamped_;
  Scalar step_;
  bool has_clamp_ = false;
};

template <typename Scalar>
void EnergyTransformerMap<Scalar>::Evaluate(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out) const {
  internal::CheckShape("EnergyTransformerMap::Evaluate(out)", out, x.rows(), x.cols());
  if (!has_clamp_) {
    et_.DescentDirection(x, out);
    out = x - step_ * out;
    return;
  }
  clamped_.Check("EnergyTransformerMap::Evaluate(x)", x);
  ClampedStep(x, clamped_.free_mask(), clamped_.input(), out);
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::EvaluateColumns(
    ConstMatrixRef<Scalar> x,
    const std::vector<Index>& columns,
    MatrixRef<Scalar> out) const {
  internal::CheckShape("EnergyTransformerMap::EvaluateColumns(out)", out, x.rows(), x.cols());
  if (!has_clamp_) {
    FixedPointMap<Scalar>::EvaluateColumns(x, columns, out);
    return;
  }
  Matrix<Scalar> mask, clamped;
  clamped_.GatherClamp("EnergyTransformerMap::EvaluateColumns", x, columns, &mask, &clamped);
  ClampedStep(x, mask, clamped, out);
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::EvaluateWithEnergy(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                                                      VectorRef<Scalar> energies) const {
  internal::CheckShape("EnergyTransformerMap::EvaluateWithEnergy(out)", out, x.rows(), x.cols());
  if (!has_clamp_) {
    et_.DescentDirectionAndValue(x, out, energies);
    out = x - step_ * out;
    return;
  }
  clamped_.Check("EnergyTransformerMap::EvaluateWithEnergy(x)", x);
  internal::CheckShape("EnergyTransformerMap::EvaluateWithEnergy(energies)", energies, x.cols(), 1);
  ClampedStep(x, clamped_.free_mask(), clamped_.input(), out, &energies);
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::EvaluateColumnsWithEnergy(ConstMatrixRef<Scalar> x,
                                                             const std::vector<Index>& columns,
                                                             MatrixRef<Scalar> out,
                                                             VectorRef<Scalar> energies) const {
  internal::CheckShape("EnergyTransformerMap::EvaluateColumnsWithEnergy(out)", out, x.rows(), x.cols());
  if (!has_clamp_) {
    FixedPointMap<Scalar>::EvaluateColumnsWithEnergy(x, columns, out, energies);
    return;
  }
  internal::CheckShape("EnergyTransformerMap::EvaluateColumnsWithEnergy(energies)", energies, x.cols(), 1);
  Matrix<Scalar> mask, clamped;
  clamped_.GatherClamp("EnergyTransformerMap::EvaluateColumnsWithEnergy", x, columns, &mask, &clamped);
  ClampedStep(x, mask, clamped, out, &energies);
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::ParameterVectorJacobianProduct(
    ConstMatrixRef<Scalar> x,
    ConstMatrixRef<Scalar> u,
    VectorRef<Scalar> out) const {
  if (!has_clamp_) {
    et_.DescentParameterVectorJacobianProduct(x, u, out);
  } else {
    internal::CheckShape("EnergyTransformerMap::ParameterVectorJacobianProduct(u)", u, x.rows(), x.cols());
    const Matrix<Scalar> y = clamped_.Merge(x);  // checks x against the clamp before the mask is applied
    Matrix<Scalar> mu = u;
    Mask(mu);
    et_.DescentParameterVectorJacobianProduct(y, mu, out);
  }
  out *= -step_;
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::InputVectorJacobianProduct(
    ConstMatrixRef<Scalar> x,
    ConstMatrixRef<Scalar> u,
    MatrixRef<Scalar> out) const {
  if (!has_clamp_) {
    throw std::logic_error("EnergyTransformerMap: no input without a clamp (SetClamp)");
  }
  internal::CheckShape("EnergyTransformerMap::InputVectorJacobianProduct(out)", out, x.rows(),
                       x.cols());
  internal::CheckShape("EnergyTransformerMap::InputVectorJacobianProduct(u)", u, x.rows(), x.cols());
  // d f / d c = m (I - a dr/dy) (1 - m) + (1 - m): transpose applied to u.
  const Matrix<Scalar> y = clamped_.Merge(x);  // checks x against the clamp before the mask is applied
  Matrix<Scalar> mu = u;
  Mask(mu);
  et_.DescentJacobianTransposeProduct(y, mu, out);
  out = mu - step_ * out;
  out = ((Scalar(1) - clamped_.free_mask().array()) * (out + u).array()).matrix();
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::Product(
    ConstMatrixRef<Scalar> x,
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> out,
    bool transpose) const {
  // Merge checks x against the clamp, ProductAt v and out before the mask is applied.
  const auto at = et_.LinearizeDescent(has_clamp_ ? clamped_.Merge(x) : Matrix<Scalar>(x));
  ProductAt(*at, x.cols(), v, out, transpose);
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::ProductAt(const typename EnergyTransformer<Scalar>::DescentPoint& at,
                                             Index batch, ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out,
                                             bool transpose) const {
  internal::CheckShape("EnergyTransformerMap: direction", v, dimension(), batch);
  internal::CheckShape("EnergyTransformerMap: output", out, dimension(), batch);
  Matrix<Scalar> w = v;
  if (has_clamp_) Mask(w);
  if (transpose) {
    et_.DescentJacobianTransposeProduct(at, w, out);
  } else {
    et_.DescentJacobianProduct(at, w, out);
  }
  out = w - step_ * out;
  if (has_clamp_) Mask(out);
}

/// \cond INTERNAL
template <typename Scalar>
class EnergyTransformerMap<Scalar>::Jacobian final : public Linearization<Scalar> {
 public:
  Jacobian(const EnergyTransformerMap& map, std::shared_ptr<const typename EnergyTransformer<Scalar>::DescentPoint> at,
           Index batch)
      : map_(map), at_(std::move(at)), batch_(batch) {}
  void JacobianVectorProduct(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const override {
    map_.ProductAt(*at_, batch_, v, out, false);
  }
  void VectorJacobianProduct(ConstMatrixRef<Scalar> u, MatrixRef<Scalar> out) const override {
    map_.ProductAt(*at_, batch_, u, out, true);
  }

 private:
  const EnergyTransformerMap& map_;
  std::shared_ptr<const typename EnergyTransformer<Scalar>::DescentPoint> at_;
  Index batch_;
};
/// \endcond

template <typename Scalar>
std::unique_ptr<Linearization<Scalar>> EnergyTransformerMap<Scalar>::Linearize(ConstMatrixRef<Scalar> x) const {
  const auto at = et_.LinearizeDescent(has_clamp_ ? clamped_.Merge(x) : Matrix<Scalar>(x));
  return std::make_unique<Jacobian>(*this, at, x.cols());
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(EnergyTransformerMap);

}  // namespace implicit
