/// \file
/// Linearization: a map's Jacobian (or an energy's Hessian) at one batch point,
/// kept for the many products a Krylov solve makes there — Newton-Krylov's
/// steps and the implicit backward pass's adjoint solve. Made by
/// FixedPointMap::Linearize (map.h) and Energy::LinearizeHessian (energy.h);
/// an implementation keeps what the products at that point share (the
/// derivative of an activation, the attention weights, a small dense Jacobian).
///
/// \code
///   std::unique_ptr<implicit::Linearization<double>> jacobian = map.Linearize(z);
///   jacobian->JacobianVectorProduct(v, out);   // = map.JacobianVectorProduct(z, v, out)
///   jacobian->VectorJacobianProduct(u, out);   // = map.VectorJacobianProduct(z, u, out)
/// \endcode
#pragma once

#include <implicit/core/types.h>

#include <stdexcept>
#include <vector>

namespace implicit {

/// A Jacobian J at one batch point: out.col(b) = J_b v_b and J_b^T u_b for the
/// point's B samples. Valid while what made it lives and its parameters (and
/// inputs) do not change. Const and safe to use from several threads.
template <typename Scalar>
class Linearization {
 public:
  virtual ~Linearization() = default;
  /// out = J v, column by column (v, out: dimension() x B of the point).
  virtual void JacobianVectorProduct(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const = 0;
  /// out = J^T u, column by column.
  virtual void VectorJacobianProduct(ConstMatrixRef<Scalar> u, MatrixRef<Scalar> out) const = 0;

  /// True when JacobianVectorProductColumns is provided and costs in
  /// proportion to the columns asked for (false by default).
  virtual bool HasColumnProducts() const { return false; }
  /// out.col(j) = J_c v.col(j) with c = columns[j]: products for some of the
  /// point's samples (v, out: dimension() x columns.size()). Newton-CG makes
  /// them as its samples' inner solves finish at different iterations.
  /// \throws std::logic_error unless HasColumnProducts() (the default).
  virtual void JacobianVectorProductColumns(const std::vector<Index>& columns, ConstMatrixRef<Scalar> v,
                                            MatrixRef<Scalar> out) const {
    (void)columns; (void)v; (void)out;
    throw std::logic_error("this linearisation has no products on a subset of its columns");
  }
};

namespace internal {
/// The default linearisations (FixedPointMap::Linearize, Energy::
/// LinearizeHessian): the owner's own point products at a copy of the point,
/// through the member functions `jvp` and `vjp` (the same one for a Hessian).
template <typename Scalar, typename Owner>
class ProductsAtPoint final : public Linearization<Scalar> {
 public:
  using Product = void (Owner::*)(ConstMatrixRef<Scalar>, ConstMatrixRef<Scalar>, MatrixRef<Scalar>) const;
  ProductsAtPoint(const Owner& owner, ConstMatrixRef<Scalar> point, Product jvp, Product vjp)
      : owner_(owner), point_(point), jvp_(jvp), vjp_(vjp) {}
  void JacobianVectorProduct(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const override {
    (owner_.*jvp_)(point_, v, out);
  }
  void VectorJacobianProduct(ConstMatrixRef<Scalar> u, MatrixRef<Scalar> out) const override {
    (owner_.*vjp_)(point_, u, out);
  }

 private:
  const Owner& owner_;
  const Matrix<Scalar> point_;
  const Product jvp_, vjp_;
};
}  // namespace internal

}  // namespace implicit
