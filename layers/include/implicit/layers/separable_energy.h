/// \file
/// internal::SeparableEnergy: the separable interaction energy shared by the
/// dense associative memories and the RBM-effective energies (rbm.h),
/// \code{.unparsed}
///   E(x) = (q/2)|x|^2 - <bias, x> - sum_mu G_mu(w_mu . x),
/// \endcode
/// value, gradient, Hessian-vector and parameter products from an entry-wise
/// evaluator of G, G' and G'' (internal: the energies wrap it).
///
/// \code
///   internal::SeparableEnergy<double> kernel;            // q = 1
///   auto eval = [&](const Matrix<double>& s, Matrix<double>* g, Matrix<double>* dg,
///                   Matrix<double>* d2g) { f.Evaluate<double>(s, g, dg, d2g); };
///   kernel.Value(W, nullptr, eval, x, values);           // W: n x N couplings
/// \endcode
#pragma once

#include <implicit/core/gemm.h>
#include <implicit/core/types.h>

#include <stdexcept>
#include <string>

namespace implicit {

namespace internal {

/// The separable interaction energy shared by dense associative memories and
/// RBM-effective energies.
/// \code{.unparsed}
///   E(x) = (q/2)|x|^2 - <bias, x> - sum_mu G_mu(w_mu . x)
/// \endcode
/// with eval(s, G*, G'*, G''*) evaluating G entry-wise (row mu = unit mu).
template <typename Scalar>
struct SeparableEnergy {
  Scalar q = Scalar(1);

  /// The unit inputs W^T x (N x B), the energy's large product.
  template <typename WT>
  static Matrix<Scalar> Scores(const WT& W, ConstMatrixRef<Scalar> x) {
    Matrix<Scalar> s(W.cols(), x.cols());
    GemmInto<Scalar>(s, W, /*transpose_a=*/true, x);
    return s;
  }

  template <typename WT, typename Eval>
  void Value(const WT& W, const Vector<Scalar>* bias, const Eval& eval,
             ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const {
    const Matrix<Scalar> s = Scores(W, x);
    Matrix<Scalar> g;
    eval(s, &g, nullptr, nullptr);
    values = (Scalar(0.5) * q) * x.colwise().squaredNorm().transpose() -
             g.colwise().sum().transpose();
    if (bias != nullptr) values.noalias() -= x.transpose() * (*bias);
  }
  /// *r = bias + W G'(W^T x) and values = E(x), from one product W^T x.
  template <typename WT, typename Eval>
  void RetrievalAndValue(const WT& W, const Vector<Scalar>* bias, const Eval& eval,
                         ConstMatrixRef<Scalar> x, Matrix<Scalar>* r,
                         VectorRef<Scalar> values) const {
    const Matrix<Scalar> s = Scores(W, x);
    Matrix<Scalar> g, dg;
    eval(s, &g, &dg, nullptr);
    values = (Scalar(0.5) * q) * x.colwise().squaredNorm().transpose() -
             g.colwise().sum().transpose();
    if (bias != nullptr) values.noalias() -= x.transpose() * (*bias);
    r->resize(W.rows(), x.cols());
    GemmInto<Scalar>(*r, W, false, dg);
    if (bias != nullptr) r->colwise() += *bias;
  }
  /// grad = q x - bias - W G'(W^T x);   *retrieval (optional) = bias + W G'(W^T x).
  template <typename WT, typename Eval>
  void Gradient(const WT& W, const Vector<Scalar>* bias, const Eval& eval,
                ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const {
    Matrix<Scalar> r;
    Retrieval(W, bias, eval, x, &r);
    grad = q * x - r;
  }
  template <typename WT, typename Eval>
  void Retrieval(const WT& W, const Vector<Scalar>* bias, const Eval& eval,
                 ConstMatrixRef<Scalar> x, Matrix<Scalar>* r) const {
    const Matrix<Scalar> s = Scores(W, x);
    Matrix<Scalar> dg;
    eval(s, nullptr, &dg, nullptr);
    r->resize(W.rows(), x.cols());
    GemmInto<Scalar>(*r, W, false, dg);
    if (bias != nullptr) r->colwise() += *bias;
  }
  /// H v = q v - W (G''(s) .* W^T v).
  template <typename WT, typename Eval>
  void HessianVectorProduct(const WT& W, const Eval& eval, ConstMatrixRef<Scalar> x,
                            ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const {
    const Matrix<Scalar> s = Scores(W, x);
    Matrix<Scalar> d2g;
    eval(s, nullptr, nullptr, &d2g);
    const Matrix<Scalar> wv = (d2g.array() * (W.transpose() * v).array()).matrix();
    out = q * v;
    out.noalias() -= W * wv;
  }
  /// d/dW sum_b <grad E(x_b), u_b> = -(U G'(S)^T + X (G''(S) .* W^T U)^T).
  template <typename WT, typename Eval>
  Matrix<Scalar> WeightVjp(const WT& W, const Eval& eval, ConstMatrixRef<Scalar> x,
                           ConstMatrixRef<Scalar> u) const {
    const Matrix<Scalar> s = Scores(W, x);
    Matrix<Scalar> dg, d2g;
    eval(s, nullptr, &dg, &d2g);
    const Matrix<Scalar> wu = (d2g.array() * (W.transpose() * u).array()).matrix();
    Matrix<Scalar> out = -(u * dg.transpose());
    out.noalias() -= x * wu.transpose();
    return out;
  }
};

template <typename Scalar>
void CheckNonEmpty(const char* who, const Matrix<Scalar>& m) {
  if (m.rows() == 0 || m.cols() == 0) {
    throw std::invalid_argument(std::string(who) + ": must be non-empty, got " +
                                std::to_string(m.rows()) + "x" + std::to_string(m.cols()));
  }
}

}  // namespace internal

}  // namespace implicit
