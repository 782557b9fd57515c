/// \file
/// Adapters that turn an Energy into an equilibrium problem for the solvers.
///
///   GradientStepMap  f(z) = z - a grad E(z)        fixed points: grad E = 0
///   CccpMap          f(z) = grad Phi(z)            for E = 0.5|z|^2 - Phi(z)
///   EnergyRootMap    f(z) = z - grad E(z)          the root problem grad E = 0
///
/// For E = 0.5|z|^2 - Phi the CCCP step equals the gradient step with a = 1
/// (grad Phi = z - grad E); CccpMap calls Energy::CccpUpdate so that energies
/// such as modern Hopfield compute X softmax(beta X^T z) directly. EnergyRootMap
/// is the form Newton and the energy minimisers use: its residual f(z) - z is
/// -grad E, so "residual below tol" means |grad E| below tol.
///
/// All three have Jacobian I - a hess E, symmetric, so the implicit backward
/// pass may use CG or MINRES; energy() gives the minimisers the energy back.
///
/// \code
///   MyEnergy energy(...);
///   implicit::CccpMap<double> map(energy);
///   implicit::AndersonSolver<double> solver;
///   implicit::Summary s = solver.Solve(map, z);
/// \endcode
///
/// The map keeps a reference: the energy must outlive it.
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/map.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace implicit {

/// The gradient step f(z) = z - a grad E(z) of an energy E, a = step(): its fixed
/// points are the stationary points grad E = 0.
///
/// Its Jacobian I - a hess E is symmetric. Holds a reference: the energy must
/// outlive the map.
template <typename Scalar>
class GradientStepMap : public FixedPointMap<Scalar> {
 public:
  /// The gradient-step map of `energy` with step a = `step`.
  /// \throws std::invalid_argument when `step` is not finite and > 0.
  GradientStepMap(const Energy<Scalar>& energy, Scalar step)
      : energy_(energy), step_(step) {
    if (!(step > Scalar(0)) || !std::isfinite(static_cast<double>(step))) {
      throw std::invalid_argument("GradientStepMap: step must be finite and > 0, got " +
                                  std::to_string(static_cast<double>(step)));
    }
  }

  /// The step a.
  Scalar step() const { return step_; }
  Index dimension() const override { return energy_.dimension(); }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    energy_.Gradient(z, out);
    out = z - step_ * out;
  }
  bool HasJacobianProducts() const override { return true; }
  bool HasSymmetricJacobian() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    energy_.HessianVectorProduct(z, v, out);
    out = v - step_ * out;
  }
  void VectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                             MatrixRef<Scalar> out) const override {
    JacobianVectorProduct(z, u, out);  // the Hessian is symmetric
  }
  /// I - a H with the energy's Hessian linearisation at z (Energy::LinearizeHessian).
  std::unique_ptr<Linearization<Scalar>> Linearize(ConstMatrixRef<Scalar> z) const override {
    return Jacobian(energy_.LinearizeHessian(z));
  }
  Index num_parameters() const override { return energy_.num_parameters(); }
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> z,
                                      ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    energy_.ParameterVectorJacobianProduct(z, u, out);
    out *= -step_;
  }
  Index input_dimension() const override { return energy_.input_dimension(); }
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar> z,
                                  ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override {
    energy_.InputVectorJacobianProduct(z, u, out);
    out *= -step_;
  }
  const Energy<Scalar>* energy() const override { return &energy_; }
  void EvaluateWithEnergy(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out,
                          VectorRef<Scalar> energies) const override {
    energy_.GradientAndValue(z, out, energies);
    out = z - step_ * out;
  }
  /// EvaluateWithEnergy and Linearize from Energy::EvaluateAndLinearizeHessian.
  std::unique_ptr<Linearization<Scalar>> EvaluateWithEnergyAndLinearize(ConstMatrixRef<Scalar> z,
                                                                        MatrixRef<Scalar> out,
                                                                        VectorRef<Scalar> energies) const override {
    auto hessian = energy_.EvaluateAndLinearizeHessian(z, EnergyUpdate::kGradient, out, energies);
    out = z - step_ * out;
    return Jacobian(std::move(hessian));
  }
  bool LinearizesWithEvaluation() const override { return energy_.LinearizesWithEvaluation(); }
  bool SupportsSubsets() const override { return energy_.SupportsSubsets(); }
  bool SupportsColumnSubsets() const override { return energy_.SupportsColumnSubsets(); }
  void EvaluateColumns(ConstMatrixRef<Scalar> z, const std::vector<Index>& columns,
                       MatrixRef<Scalar> out) const override {
    Vector<Scalar> no_values;
    energy_.GradientColumns(z, columns, out, no_values);
    out = z - step_ * out;
  }
  void EvaluateColumnsWithEnergy(ConstMatrixRef<Scalar> z, const std::vector<Index>& columns,
                                 MatrixRef<Scalar> out, VectorRef<Scalar> energies) const override {
    energy_.GradientColumns(z, columns, out, energies);
    out = z - step_ * out;
  }

 protected:
  /// I - a H from the linearised Hessian H.
  std::unique_ptr<Linearization<Scalar>> Jacobian(std::unique_ptr<Linearization<Scalar>> hessian) const {
    return std::make_unique<StepJacobian>(std::move(hessian), step_);
  }

 private:
  // J = I - a H from a linearised Hessian H (symmetric: both products are one).
  class StepJacobian final : public Linearization<Scalar> {
   public:
    StepJacobian(std::unique_ptr<Linearization<Scalar>> hessian, Scalar step)
        : hessian_(std::move(hessian)), step_(step) {}
    void JacobianVectorProduct(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const override {
      hessian_->JacobianVectorProduct(v, out);
      out = v - step_ * out;
    }
    void VectorJacobianProduct(ConstMatrixRef<Scalar> u, MatrixRef<Scalar> out) const override {
      JacobianVectorProduct(u, out);
    }
    bool HasColumnProducts() const override { return hessian_->HasColumnProducts(); }
    void JacobianVectorProductColumns(const std::vector<Index>& columns, ConstMatrixRef<Scalar> v,
                                      MatrixRef<Scalar> out) const override {
      hessian_->JacobianVectorProductColumns(columns, v, out);
      out = v - step_ * out;
    }

   private:
    std::unique_ptr<Linearization<Scalar>> hessian_;
    Scalar step_;
  };

  const Energy<Scalar>& energy_;
  Scalar step_;
};

/// The CCCP step x <- grad Phi(x) of an energy E = 0.5|x|^2 - Phi(x).
///
/// Calls Energy::CccpUpdate (and CccpUpdateAndValue, CccpUpdateColumns). Holds a
/// reference: the energy must outlive the map.
template <typename Scalar>
class CccpMap : public GradientStepMap<Scalar> {
 public:
  /// The CCCP map of `energy`.
  explicit CccpMap(const Energy<Scalar>& energy)
      : GradientStepMap<Scalar>(energy, Scalar(1)) {}
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    this->energy()->CccpUpdate(z, out);
  }
  void EvaluateWithEnergy(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out,
                          VectorRef<Scalar> energies) const override {
    this->energy()->CccpUpdateAndValue(z, out, energies);
  }
  /// EvaluateWithEnergy and Linearize from Energy::EvaluateAndLinearizeHessian.
  std::unique_ptr<Linearization<Scalar>> EvaluateWithEnergyAndLinearize(ConstMatrixRef<Scalar> z,
                                                                        MatrixRef<Scalar> out,
                                                                        VectorRef<Scalar> energies) const override {
    return this->Jacobian(this->energy()->EvaluateAndLinearizeHessian(z, EnergyUpdate::kCccp, out, energies));
  }
  void EvaluateColumns(ConstMatrixRef<Scalar> z, const std::vector<Index>& columns,
                       MatrixRef<Scalar> out) const override {
    Vector<Scalar> no_values;
    this->energy()->CccpUpdateColumns(z, columns, out, no_values);
  }
  void EvaluateColumnsWithEnergy(ConstMatrixRef<Scalar> z, const std::vector<Index>& columns,
                                 MatrixRef<Scalar> out, VectorRef<Scalar> energies) const override {
    this->energy()->CccpUpdateColumns(z, columns, out, energies);
  }
};

/// The root problem grad E(z) = 0, posed as the fixed point of z - grad E(z).
///
/// Its residual f(z) - z is -grad E(z). Holds a reference: the energy must outlive the map.
template <typename Scalar>
class EnergyRootMap : public GradientStepMap<Scalar> {
 public:
  /// The root map z - grad E(z) of `energy`.
  explicit EnergyRootMap(const Energy<Scalar>& energy)
      : GradientStepMap<Scalar>(energy, Scalar(1)) {}
};

IMPLICIT_EXTERN_TEMPLATE_CLASS(GradientStepMap);
IMPLICIT_EXTERN_TEMPLATE_CLASS(CccpMap);
IMPLICIT_EXTERN_TEMPLATE_CLASS(EnergyRootMap);

}  // namespace implicit
