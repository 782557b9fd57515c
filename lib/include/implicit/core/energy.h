/// \file
/// The Energy concept: a scalar energy E(x; theta) per sample of a batch.
///
/// An energy-based layer's forward pass is a stationary point grad_x E = 0. A
/// built-in energy implements every method below in closed form (GEMM-based, all
/// samples at once); a user energy is written once as a templated callable and
/// wrapped by AutoDiffEnergy (autodiff_energy.h), which derives the rest.
///
/// \code
///   class Quadratic : public implicit::Energy<double> {  // E = 0.5 |x|^2
///    public:
///     Index dimension() const override { return 3; }
///     void Value(ConstMatrixRef<double> x, VectorRef<double> e) const override {
///       e = 0.5 * x.colwise().squaredNorm().transpose();
///     }
///     void Gradient(ConstMatrixRef<double> x, MatrixRef<double> g) const override { g = x; }
///     void HessianVectorProduct(ConstMatrixRef<double>, ConstMatrixRef<double> v,
///                               MatrixRef<double> hv) const override { hv = v; }
///   };
/// \endcode
///
/// Shapes: x, gradients and directions are dimension() x B; values are B x 1.
/// Parameter derivatives are summed over the batch (they feed one gradient).
#pragma once

#include <implicit/core/linearization.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {

/// Which update Energy::EvaluateAndLinearizeHessian computes with the value:
/// grad E (GradientAndValue) or the CCCP update x - grad E (CccpUpdateAndValue).
enum class EnergyUpdate { kGradient, kCccp };

/// A batched scalar energy E(x; theta): one value per sample (column) of a batch.
///
/// Implement dimension(), Value(), Gradient() and HessianVectorProduct(); the
/// other methods have defaults. x, gradients and directions are dimension() x B,
/// values B x 1; the library's implementations throw std::invalid_argument for
/// arguments of the wrong shape.
/// \tparam Scalar float or double.
template <typename Scalar>
class Energy {
 public:
  virtual ~Energy() = default;

  /// Dimension n of one sample's state.
  virtual Index dimension() const = 0;

  /// The energies of a batch: values(b) = E(x_b).
  virtual void Value(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const = 0;
  /// The gradients of a batch: grad.col(b) = grad_x E(x_b).
  virtual void Gradient(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const = 0;
  /// Hessian-vector products of a batch: out.col(b) = hess_x E(x_b) v_b.
  virtual void HessianVectorProduct(ConstMatrixRef<Scalar> x,
                                    ConstMatrixRef<Scalar> v,
                                    MatrixRef<Scalar> out) const = 0;
  /// The Hessian at x for many products there (linearization.h; it is
  /// symmetric, so both products are the same): the implicit backward pass's
  /// adjoint solve through GradientStepMap / CccpMap. The default keeps a copy
  /// of x and calls HessianVectorProduct; an energy whose products at one point
  /// share work (the attention weights) overrides it.
  virtual std::unique_ptr<Linearization<Scalar>> LinearizeHessian(ConstMatrixRef<Scalar> x) const;

  /// The direction the energy's own dynamics move along, x <- x - a * D(x).
  /// Defaults to the gradient. The Energy Transformer overrides it with
  /// dE/dg (g = LayerNorm(x)), which also never increases E and vanishes
  /// exactly where the gradient does.
  virtual void DescentDirection(ConstMatrixRef<Scalar> x,
                                MatrixRef<Scalar> out) const {
    Gradient(x, out);
  }

  /// The concave-convex (CCCP) update for energies E = 0.5|x|^2 - Phi(x) with
  /// Phi convex: x <- grad Phi(x) = x - grad E(x). Energies that can compute
  /// grad Phi directly (e.g. X softmax(beta X^T x)) override this for accuracy.
  virtual void CccpUpdate(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out) const {
    Gradient(x, out);
    out = x - out;
  }

  // ---- One pass for several quantities (optional, for speed) --------------
  ///@{
  /// The CCCP update (or the gradient, or the descent direction) and the
  /// energies in one pass.
  ///
  /// Energy-guarded solvers need E at every point where they evaluate the map.
  /// Energies whose update and value share work (the attention energies: one
  /// score GEMM gives both lse and softmax) override these; the defaults make
  /// two calls. values is B x 1, out/grad dimension() x B.
  virtual void CccpUpdateAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                                  VectorRef<Scalar> values) const {
    CccpUpdate(x, out);
    Value(x, values);
  }
  virtual void GradientAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad,
                                VectorRef<Scalar> values) const {
    Gradient(x, grad);
    Value(x, values);
  }
  virtual void DescentDirectionAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                                        VectorRef<Scalar> values) const {
    DescentDirection(x, out);
    Value(x, values);
  }
  ///@}
  /// CccpUpdateAndValue (update = kCccp) or GradientAndValue (kGradient) and
  /// LinearizeHessian(x), in one pass where the energy shares their work
  /// (LinearizesWithEvaluation()): RbmEnergy keeps K'' of the scores W^T v
  /// that the update computes anyway. GradientStepMap and CccpMap call it for Newton-CG, which
  /// linearises at every point it evaluates. The default makes the two calls.
  virtual std::unique_ptr<Linearization<Scalar>> EvaluateAndLinearizeHessian(ConstMatrixRef<Scalar> x,
                                                                             EnergyUpdate update,
                                                                             MatrixRef<Scalar> out,
                                                                             VectorRef<Scalar> values) const {
    if (update == EnergyUpdate::kCccp) {
      CccpUpdateAndValue(x, out, values);
    } else {
      GradientAndValue(x, out, values);
    }
    return LinearizeHessian(x);
  }
  /// True when EvaluateAndLinearizeHessian costs about one evaluation (false
  /// by default: then it costs a LinearizeHessian more).
  virtual bool LinearizesWithEvaluation() const { return false; }

  /// Active set: true when the energy is the same function of every sample
  /// (no per-sample inputs, masks or clamps), so that it may be evaluated on any
  /// subset of a batch's columns. Solvers then evaluate only the samples still
  /// iterating. The default, false, is safe for every energy.
  virtual bool SupportsSubsets() const { return false; }

  /// Whether the energy evaluates compacted blocks of a batch's samples (GradientColumns()).
  ///
  /// Energies with per-sample data (an input, an anchor, clamps) join the
  /// active set by overriding SupportsColumnSubsets() to return true and
  /// GradientColumns (CccpUpdateColumns too when CccpUpdate is overridden):
  /// x is a compacted block and columns[j] the batch index of its column j
  /// (ascending), as in FixedPointMap::EvaluateColumns, so that
  ///
  ///   grad.col(j) = grad E(x.col(j)) of batch sample columns[j],
  ///   values(j)   = E(x.col(j)) of that sample when values has x.cols() entries
  ///                 (values may be empty: then only grad is written).
  ///
  /// GradientStepMap and CccpMap call them. The defaults serve energies that
  /// SupportsSubsets() (the column indices are only checked).
  virtual bool SupportsColumnSubsets() const { return SupportsSubsets(); }
  /// The gradient of a compacted block x of the batch samples `columns`, and its
  /// energies when `values` is not empty (see SupportsColumnSubsets()).
  /// \throws std::logic_error when the energy has per-sample data and does not override it.
  /// \throws std::invalid_argument when `columns` is not one ascending index per column of x.
  virtual void GradientColumns(ConstMatrixRef<Scalar> x, const std::vector<Index>& columns,
                               MatrixRef<Scalar> grad, VectorRef<Scalar> values) const {
    DefaultColumns(
        "Energy::GradientColumns", x, columns, values, [&] { Gradient(x, grad); },
        [&] { GradientAndValue(x, grad, values); });
  }
  /// out.col(j) = the CCCP update of x.col(j) for sample columns[j] (values as above).
  /// \throws std::logic_error when the energy has per-sample data and does not override it.
  /// \throws std::invalid_argument when `columns` is not one ascending index per column of x.
  virtual void CccpUpdateColumns(ConstMatrixRef<Scalar> x, const std::vector<Index>& columns,
                                 MatrixRef<Scalar> out, VectorRef<Scalar> values) const {
    if (!SupportsSubsets()) {  // CccpUpdate's default through the column gradient
      GradientColumns(x, columns, out, values);
      out = x - out;
      return;
    }
    DefaultColumns(
        "Energy::CccpUpdateColumns", x, columns, values, [&] { CccpUpdate(x, out); },
        [&] { CccpUpdateAndValue(x, out, values); });
  }

  // ---- Training -----------------------------------------------------------
  /// Number of trainable parameters theta (0: none).
  virtual Index num_parameters() const { return 0; }
  /// The parameters, or nullptr when there are none.
  virtual ParameterSet<Scalar>* parameters() { return nullptr; }
  /// Parameter vector-Jacobian product of the gradient: out = d/dtheta sum_b <grad_x E(x_b; theta), u_b>   (num_parameters() x 1).
  /// \throws std::logic_error when the energy has no parameter derivatives (the default).
  virtual void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x,
                                              ConstMatrixRef<Scalar> u,
                                              VectorRef<Scalar> out) const {
    (void)x; (void)u; (void)out;
    throw std::logic_error("this energy has no parameter derivatives");
  }
  /// Dimension of a conditioning input c the energy depends on (0: none).
  virtual Index input_dimension() const { return 0; }
  /// Input vector-Jacobian products of the gradient: out.col(b) = d/dc <grad_x E(x_b; c_b), u_b>   (input_dimension() x B).
  /// \throws std::logic_error when the energy has no input derivatives (the default).
  virtual void InputVectorJacobianProduct(ConstMatrixRef<Scalar> x,
                                          ConstMatrixRef<Scalar> u,
                                          MatrixRef<Scalar> out) const {
    (void)x; (void)u; (void)out;
    throw std::logic_error("this energy has no input derivatives");
  }

 private:
  static constexpr const char* kNoColumnEvaluation =
      "this energy has per-sample data and no column evaluation: override GradientColumns "
      "or keep SupportsColumnSubsets() false";
  /// The column defaults' shape: an energy without per-sample data evaluates
  /// the block like any batch (`plain`, or `fused` when values are asked for)
  /// once the indices are checked; one with per-sample data throws.
  template <typename Plain, typename Fused>
  void DefaultColumns(const char* what, ConstMatrixRef<Scalar> x, const std::vector<Index>& columns,
                      VectorRef<Scalar> values, Plain plain, Fused fused) const {
    internal::CheckSubsetColumns(SupportsSubsets(), kNoColumnEvaluation, what, columns, x.cols());
    if (values.size() == 0) {
      plain();
    } else {
      fused();
    }
  }
};

template <typename Scalar>
std::unique_ptr<Linearization<Scalar>> Energy<Scalar>::LinearizeHessian(ConstMatrixRef<Scalar> x) const {
  return std::make_unique<internal::ProductsAtPoint<Scalar, Energy<Scalar>>>(
      *this, x, &Energy<Scalar>::HessianVectorProduct, &Energy<Scalar>::HessianVectorProduct);  // symmetric
}

}  // namespace implicit
