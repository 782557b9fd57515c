/// \file
/// The Map concept: a batched fixed-point map z <- f(z; x, theta).
///
/// Every forward solver finds z* = f(z*) for each column of a batch; its
/// residual is f(z) - z. Root problems g(z) = 0 are posed as f(z) = z - g(z)
/// (see energy_maps.h for the adapters from an Energy). Jacobian products are
/// optional for solving (Picard, Anderson and Broyden need none; Newton does)
/// and required for implicit differentiation.
///
/// \code
///   class Affine : public implicit::FixedPointMap<double> {  // f(z) = A z + c
///    public:
///     Affine(Matrix<double> A, Vector<double> c) : A_(std::move(A)), c_(std::move(c)) {}
///     Index dimension() const override { return A_.rows(); }
///     void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override {
///       out.noalias() = A_ * z;
///       out.colwise() += c_;
///     }
///     bool HasJacobianProducts() const override { return true; }
///     void JacobianVectorProduct(ConstMatrixRef<double>, ConstMatrixRef<double> v,
///                                MatrixRef<double> out) const override { out.noalias() = A_ * v; }
///     void VectorJacobianProduct(ConstMatrixRef<double>, ConstMatrixRef<double> u,
///                                MatrixRef<double> out) const override {
///       out.noalias() = A_.transpose() * u;
///     }
///    private:
///     Matrix<double> A_; Vector<double> c_;
///   };
/// \endcode
///
/// Samples are independent: column b of the output depends on column b of z
/// (and of the input) only. Shapes: z, v, u and outputs are dimension() x B.
///
/// A map with per-sample data joins the solvers' active set by evaluating a
/// compacted block of samples with their data (see SupportsColumnSubsets):
///
/// \code
///   class Shifted : public implicit::FixedPointMap<double> {  // f(z_b) = tanh(z_b) / 2 + c_b
///    public:
///     explicit Shifted(Matrix<double> c) : c_(std::move(c)) {}
///     Index dimension() const override { return c_.rows(); }
///     void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override {
///       out = (z.array().tanh() / 2).matrix() + c_;
///     }
///     bool SupportsColumnSubsets() const override { return true; }
///     void EvaluateColumns(ConstMatrixRef<double> z, const std::vector<Index>& columns,
///                          MatrixRef<double> out) const override {
///       for (Index j = 0; j < z.cols(); ++j)
///         out.col(j) = (z.col(j).array().tanh() / 2).matrix() + c_.col(columns[j]);
///     }
///    private:
///     Matrix<double> c_;  // n x B: one shift per sample
///   };
/// \endcode
///
/// Newton-Krylov and the implicit backward pass make many Jacobian products at
/// one point z. Linearize(z) returns the map's Jacobian there as an object
/// (Linearization, linearization.h); a map whose products share work at one
/// point (the derivative of an activation, a small dense Jacobian) overrides it:
///
/// \code
///   std::unique_ptr<implicit::Linearization<double>> jacobian = map.Linearize(z);
///   jacobian->JacobianVectorProduct(v, out);   // = map.JacobianVectorProduct(z, v, out)
/// \endcode
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/linearization.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>

#include <memory>
#include <stdexcept>
#include <vector>

namespace implicit {

/// A batched fixed-point map z <- f(z; x, theta), applied to each column of a batch.
///
/// Implement dimension() and Evaluate(); Jacobian products (for Newton and for
/// implicit differentiation), parameter and input derivatives, an energy and the
/// active-set evaluations are optional. z, v, u and outputs are dimension() x B;
/// the library's implementations throw std::invalid_argument for arguments of
/// the wrong shape.
/// \tparam Scalar float or double.
template <typename Scalar>
class FixedPointMap {
 public:
  virtual ~FixedPointMap() = default;

  /// Dimension n of one sample's state z.
  virtual Index dimension() const = 0;
  /// Evaluates the map on a batch: out.col(b) = f(z_b). `out` never aliases `z`.
  virtual void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const = 0;

  // ---- Jacobian products (optional) -------------------------------------
  /// Whether JacobianVectorProduct() and VectorJacobianProduct() are available (default false).
  virtual bool HasJacobianProducts() const { return false; }
  /// Jacobian-vector products: out.col(b) = (df/dz)(z_b) v_b.
  /// \throws std::logic_error when the map provides none (the default).
  virtual void JacobianVectorProduct(ConstMatrixRef<Scalar> z,
                                     ConstMatrixRef<Scalar> v,
                                     MatrixRef<Scalar> out) const {
    (void)z; (void)v; (void)out;
    throw std::logic_error("this map provides no Jacobian-vector products");
  }
  /// Vector-Jacobian products: out.col(b) = (df/dz)(z_b)^T u_b.
  /// \throws std::logic_error when the map provides none (the default).
  virtual void VectorJacobianProduct(ConstMatrixRef<Scalar> z,
                                     ConstMatrixRef<Scalar> u,
                                     MatrixRef<Scalar> out) const {
    (void)z; (void)u; (void)out;
    throw std::logic_error("this map provides no vector-Jacobian products");
  }
  /// True when I - df/dz is symmetric (maps built from an energy), so that the
  /// backward pass may use CG or MINRES.
  virtual bool HasSymmetricJacobian() const { return false; }
  /// The Jacobian at z, for repeated products there (see Linearization). The
  /// default keeps a copy of z and calls JacobianVectorProduct /
  /// VectorJacobianProduct with it; override it when the products at one point
  /// share work. Newton-Krylov and ImplicitBackward use it.
  /// \throws std::logic_error when the map provides no Jacobian products.
  virtual std::unique_ptr<Linearization<Scalar>> Linearize(ConstMatrixRef<Scalar> z) const;
  /// The Jacobian at z when the caller already has fz = f(z) (Newton-Krylov
  /// linearises at the iterate whose image it has just evaluated). Override it
  /// when the Jacobian follows from f(z) — z -> tanh(W z + b) has Jacobian
  /// diag(1 - f(z)^2) W — so that f is not evaluated again. The default ignores
  /// fz and returns Linearize(z).
  virtual std::unique_ptr<Linearization<Scalar>> LinearizeWithValue(ConstMatrixRef<Scalar> z,
                                                                     ConstMatrixRef<Scalar> fz) const {
    (void)fz;
    return Linearize(z);
  }

  // ---- Training (optional) -----------------------------------------------
  /// Number of trainable parameters theta (0: none).
  virtual Index num_parameters() const { return 0; }
  /// The parameters, or nullptr when there are none.
  virtual ParameterSet<Scalar>* parameters() { return nullptr; }
  /// Parameter vector-Jacobian product: out = sum_b (df/dtheta)(z_b)^T u_b   (num_parameters() x 1).
  /// \throws std::logic_error when the map has no parameter derivatives (the default).
  virtual void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> z,
                                              ConstMatrixRef<Scalar> u,
                                              VectorRef<Scalar> out) const {
    (void)z; (void)u; (void)out;
    throw std::logic_error("this map has no parameter derivatives");
  }
  /// Dimension of the input injection x the map is conditioned on (0: none).
  virtual Index input_dimension() const { return 0; }
  /// Input vector-Jacobian products: out.col(b) = (df/dx)(z_b; x_b)^T u_b   (input_dimension() x B).
  /// \throws std::logic_error when the map has no input derivatives (the default).
  virtual void InputVectorJacobianProduct(ConstMatrixRef<Scalar> z,
                                          ConstMatrixRef<Scalar> u,
                                          MatrixRef<Scalar> out) const {
    (void)z; (void)u; (void)out;
    throw std::logic_error("this map has no input derivatives");
  }

  /// The energy this map was built from (energy_maps.h), or nullptr. Energy
  /// minimisers (L-BFGS, gradient flow) require one; Picard, Anderson and
  /// Broyden use it as a merit function (energy-guarded steps, stall rule).
  virtual const Energy<Scalar>* energy() const { return nullptr; }

  /// out = f(z) and energies(b) = E(z_b) (E = *energy()) at the same points.
  /// Only called when energy() != nullptr. The default makes two calls; maps
  /// whose f and E share work (CccpMap over the attention energies: one score
  /// GEMM for both) override it.
  virtual void EvaluateWithEnergy(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out,
                                  VectorRef<Scalar> energies) const {
    Evaluate(z, out);
    energy()->Value(z, energies);
  }
  /// EvaluateWithEnergy(z, out, energies) and Linearize(z) at the same points,
  /// in one pass where the map shares their work (LinearizesWithEvaluation()):
  /// Newton-CG calls it at every point it evaluates, so that the Jacobian of
  /// each step's point is at hand when the step begins. The default makes the
  /// two calls.
  virtual std::unique_ptr<Linearization<Scalar>> EvaluateWithEnergyAndLinearize(ConstMatrixRef<Scalar> z,
                                                                                MatrixRef<Scalar> out,
                                                                                VectorRef<Scalar> energies) const {
    EvaluateWithEnergy(z, out, energies);
    return Linearize(z);
  }
  /// True when EvaluateWithEnergyAndLinearize costs about one
  /// EvaluateWithEnergy (false by default: then it costs a Linearize more).
  virtual bool LinearizesWithEvaluation() const { return false; }

  // ---- Active set (optional) -----------------------------------------------
  /// True when f is the same function for every sample, so that Evaluate (and
  /// EvaluateWithEnergy) may be called on any subset of the batch's columns:
  /// solvers then evaluate only the samples still iterating, compacted into
  /// one block. Maps with per-sample data (an input injection, per-sample
  /// masks or clamps) keep the default, false: see SupportsColumnSubsets.
  virtual bool SupportsSubsets() const { return false; }

  /// Whether the map evaluates compacted blocks of a batch's samples (EvaluateColumns()).
  ///
  /// Maps with per-sample data can join the active set too: they override
  /// SupportsColumnSubsets() to return true, and EvaluateColumns (with an
  /// energy, EvaluateColumnsWithEnergy too), which pick each sample's data
  /// (input, mask, clamp) by its index in the batch the data were set for.
  /// Solvers call them on compacted blocks of the samples still iterating:
  ///
  ///   out.col(j) = f(z.col(j)) for batch sample columns[j],   j < z.cols()
  ///
  /// with `columns` ascending and without repeats. The defaults serve maps that
  /// SupportsSubsets(), which need no column indices (they are still checked:
  /// one per column, ascending); such a map's override may call them for its
  /// case without per-sample data.
  virtual bool SupportsColumnSubsets() const { return SupportsSubsets(); }
  /// out.col(j) = f(z.col(j)) for the compacted block z of the batch samples `columns`
  /// (see SupportsColumnSubsets()).
  /// \throws std::logic_error when the map has per-sample data and does not override it.
  /// \throws std::invalid_argument when `columns` is not one ascending index per column of z.
  virtual void EvaluateColumns(ConstMatrixRef<Scalar> z, const std::vector<Index>& columns,
                               MatrixRef<Scalar> out) const {
    internal::CheckSubsetColumns(SupportsSubsets(), kNoColumnEvaluation, "FixedPointMap::EvaluateColumns", columns,
                                 z.cols());
    Evaluate(z, out);
  }
  /// out as EvaluateColumns, energies(j) = E(z.col(j)) of sample columns[j].
  /// \throws std::logic_error when the map has per-sample data and does not override it.
  /// \throws std::invalid_argument when `columns` is not one ascending index per column of z.
  virtual void EvaluateColumnsWithEnergy(ConstMatrixRef<Scalar> z, const std::vector<Index>& columns,
                                         MatrixRef<Scalar> out, VectorRef<Scalar> energies) const {
    internal::CheckSubsetColumns(SupportsSubsets(), kNoColumnEvaluation,
                                 "FixedPointMap::EvaluateColumnsWithEnergy", columns, z.cols());
    EvaluateWithEnergy(z, out, energies);
  }

  /// Whether the map has Jacobian-vector products on compacted blocks (JacobianVectorProductColumns()).
  ///
  /// Jacobian-vector products on such a block (Newton's JVPs join the active
  /// set with them): out.col(j) = J_f(z.col(j)) v.col(j) of sample columns[j].
  /// Available when SupportsColumnJacobianProducts(); by default for maps with
  /// Jacobian products and without per-sample data, where it is the plain JVP
  /// of the block. A map with per-sample data overrides both, like
  /// EvaluateColumns.
  virtual bool SupportsColumnJacobianProducts() const { return SupportsSubsets() && HasJacobianProducts(); }
  /// out.col(j) = J_f(z.col(j)) v.col(j) for the compacted block z of the batch samples
  /// `columns` (see SupportsColumnJacobianProducts()).
  /// \throws std::logic_error when the map has per-sample data and does not override it.
  /// \throws std::invalid_argument when `columns` is not one ascending index per column of z.
  virtual void JacobianVectorProductColumns(ConstMatrixRef<Scalar> z, const std::vector<Index>& columns,
                                            ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const {
    internal::CheckSubsetColumns(SupportsSubsets(), kNoColumnJacobianProducts,
                                 "FixedPointMap::JacobianVectorProductColumns", columns, z.cols());
    JacobianVectorProduct(z, v, out);
  }

 private:
  static constexpr const char* kNoColumnEvaluation =
      "this map has per-sample data and no column evaluation: override EvaluateColumns "
      "(and EvaluateColumnsWithEnergy) or keep SupportsColumnSubsets() false";
  static constexpr const char* kNoColumnJacobianProducts =
      "this map has per-sample data and no column Jacobian products: override "
      "JacobianVectorProductColumns or keep SupportsColumnJacobianProducts() false";
};

template <typename Scalar>
std::unique_ptr<Linearization<Scalar>> FixedPointMap<Scalar>::Linearize(ConstMatrixRef<Scalar> z) const {
  if (!HasJacobianProducts()) throw std::logic_error("this map provides no Jacobian products to linearize");
  return std::make_unique<internal::ProductsAtPoint<Scalar, FixedPointMap<Scalar>>>(
      *this, z, &FixedPointMap<Scalar>::JacobianVectorProduct, &FixedPointMap<Scalar>::VectorJacobianProduct);
}

}  // namespace implicit
