// Equilibrium problems with known properties, shared by the test suites.
//
//   AffineMap<S>     f(z) = A z + c, |A|_2 < 1: exact solution (I - A)^{-1} c
//   TanhDeqMap<S>    f(z) = tanh(W z + U x + b), |W|_2 < 1, parameters W, U, b
//   HopfieldMap<S>   f(xi) = X softmax(beta X^T xi), the modern Hopfield update
//   QuadraticEnergy  E(z) = 0.5 z^T H z - c^T z, H SPD
//
// plus finite-difference helpers for derivative tests.
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/map.h>
#include <implicit/core/parameters.h>
#include <implicit/core/spectral_norm.h>

#include <Eigen/Dense>

#include <cmath>
#include <functional>
#include <random>

namespace implicit {
namespace testing {

// A random matrix with spectral norm exactly `norm` (deterministic in seed).
template <typename Scalar>
Matrix<Scalar> RandomMatrixWithNorm(Index rows, Index cols, double norm, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  Matrix<double> m(rows, cols);
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) m(i, j) = dist(gen);
  m *= norm / SpectralNorm(m);
  return m.cast<Scalar>();
}

template <typename Scalar>
Matrix<Scalar> RandomMatrix(Index rows, Index cols, unsigned seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, scale);
  Matrix<double> m(rows, cols);
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) m(i, j) = dist(gen);
  return m.cast<Scalar>();
}

template <typename Scalar>
class AffineMap : public FixedPointMap<Scalar> {
 public:
  AffineMap(Matrix<Scalar> A, Vector<Scalar> c) : A_(std::move(A)), c_(std::move(c)) {}
  Index dimension() const override { return A_.rows(); }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    out.noalias() = A_.lazyProduct(z);  // lazy: no temporary, no allocation
    out.colwise() += c_;
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<Scalar>, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    out.noalias() = A_.lazyProduct(v);
  }
  void VectorJacobianProduct(ConstMatrixRef<Scalar>, ConstMatrixRef<Scalar> u,
                             MatrixRef<Scalar> out) const override {
    out.noalias() = A_.transpose().lazyProduct(u);
  }
  Vector<Scalar> Solution() const {
    Matrix<double> I = Matrix<double>::Identity(A_.rows(), A_.cols());
    return ((I - A_.template cast<double>()).lu().solve(c_.template cast<double>()))
        .template cast<Scalar>();
  }
  const Matrix<Scalar>& A() const { return A_; }

 private:
  Matrix<Scalar> A_;
  Vector<Scalar> c_;
};

// f(z; x, theta) = tanh(W z + U x + b) with theta = (W, U, b) in a ParameterSet
// and input injection x (input_dim x B) held by the map.
template <typename Scalar>
class TanhDeqMap : public FixedPointMap<Scalar> {
 public:
  TanhDeqMap(Index n, Index input_dim, double w_norm, unsigned seed) {
    params_.Add("W", n, n);
    params_.Add("U", n, input_dim);
    params_.Add("b", n, 1);
    params_.Block("W") = RandomMatrixWithNorm<Scalar>(n, n, w_norm, seed);
    params_.Block("U") = RandomMatrix<Scalar>(n, input_dim, seed + 1, 1.0 / std::sqrt(double(input_dim)));
    params_.Block("b") = RandomMatrix<Scalar>(n, 1, seed + 2, 0.1);
    n_ = n;
    input_dim_ = input_dim;
  }
  void SetInput(Matrix<Scalar> x) { x_ = std::move(x); }
  const Matrix<Scalar>& input() const { return x_; }

  Index dimension() const override { return n_; }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    Preactivation(z, out);
    out = out.array().tanh().matrix();
  }
  bool HasJacobianProducts() const override { return true; }
  // J v = diag(1 - f^2) W v
  void JacobianVectorProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    Matrix<Scalar> d = Derivative(z);
    out.noalias() = W() * v;
    out.array() *= d.array();
  }
  // J^T u = W^T (diag(1 - f^2) u)
  void VectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                             MatrixRef<Scalar> out) const override {
    Matrix<Scalar> du = (Derivative(z).array() * u.array()).matrix();
    out.noalias() = W().transpose() * du;
  }
  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return &params_; }
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override;
  Index input_dimension() const override { return input_dim_; }
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override {
    Matrix<Scalar> du = (Derivative(z).array() * u.array()).matrix();
    out.noalias() = U().transpose() * du;
  }

  typename ParameterSet<Scalar>::ConstBlockMap W() const { return params_.Block("W"); }
  typename ParameterSet<Scalar>::ConstBlockMap U() const { return params_.Block("U"); }
  typename ParameterSet<Scalar>::ConstBlockMap b() const { return params_.Block("b"); }

 private:
  void Preactivation(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const {
    internal::CheckShape("TanhDeqMap input", x_, input_dim_, z.cols());
    out.noalias() = W() * z;
    out.noalias() += U() * x_;
    out.colwise() += Vector<Scalar>(b());
  }
  Matrix<Scalar> Derivative(ConstMatrixRef<Scalar> z) const {
    Matrix<Scalar> f(z.rows(), z.cols());
    Evaluate(z, f);
    return (Scalar(1) - f.array().square()).matrix();
  }

  Index n_ = 0, input_dim_ = 0;
  ParameterSet<Scalar> params_;
  Matrix<Scalar> x_;
};

template <typename Scalar>
void TanhDeqMap<Scalar>::ParameterVectorJacobianProduct(
    ConstMatrixRef<Scalar> z,
    ConstMatrixRef<Scalar> u,
    VectorRef<Scalar> out) const {
  Matrix<Scalar> du = (Derivative(z).array() * u.array()).matrix();
  Vector<Scalar> flat(params_.size());
  params_.BlockOf(flat, "W").noalias() = du * z.transpose();
  params_.BlockOf(flat, "U").noalias() = du * x_.transpose();
  params_.BlockOf(flat, "b") = du.rowwise().sum();
  out = flat;
}

// Modern Hopfield retrieval: f(xi) = X softmax(beta X^T xi), patterns X (n x N).
template <typename Scalar>
class HopfieldMap : public FixedPointMap<Scalar> {
 public:
  HopfieldMap(Matrix<Scalar> patterns, Scalar beta) : X_(std::move(patterns)), beta_(beta) {}
  Index dimension() const override { return X_.rows(); }
  void Evaluate(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> out) const override {
    Matrix<Scalar> p = Softmax(xi);
    out.noalias() = X_ * p;
  }
  bool HasJacobianProducts() const override { return true; }
  // J = beta X (diag(p) - p p^T) X^T, symmetric.
  void JacobianVectorProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override;
  void VectorJacobianProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> u,
                             MatrixRef<Scalar> out) const override {
    JacobianVectorProduct(xi, u, out);
  }
  Matrix<Scalar> Softmax(ConstMatrixRef<Scalar> xi) const;

 private:
  Matrix<Scalar> X_;
  Scalar beta_;
};

template <typename Scalar>
void HopfieldMap<Scalar>::JacobianVectorProduct(
    ConstMatrixRef<Scalar> xi,
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> out) const {
  Matrix<Scalar> p = Softmax(xi);
  Matrix<Scalar> s = X_.transpose() * v;  // N x B
  for (Index b = 0; b < s.cols(); ++b) {
    const Scalar mean = p.col(b).dot(s.col(b));
    s.col(b) = (p.col(b).array() * (s.col(b).array() - mean)).matrix();
  }
  out.noalias() = beta_ * X_ * s;
}

template <typename Scalar>
Matrix<Scalar> HopfieldMap<Scalar>::Softmax(ConstMatrixRef<Scalar> xi) const {
  Matrix<Scalar> s = beta_ * (X_.transpose() * xi);
  for (Index b = 0; b < s.cols(); ++b) {
    s.col(b).array() -= s.col(b).maxCoeff();
    s.col(b) = s.col(b).array().exp().matrix();
    s.col(b) /= s.col(b).sum();
  }
  return s;
}

// E(z) = 0.5 z^T H z - c^T z with H symmetric positive definite; minimiser H^{-1} c.
template <typename Scalar>
class QuadraticEnergy : public Energy<Scalar> {
 public:
  QuadraticEnergy(Matrix<Scalar> H, Vector<Scalar> c) : H_(std::move(H)), c_(std::move(c)) {}
  Index dimension() const override { return H_.rows(); }
  void Value(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const override {
    for (Index b = 0; b < x.cols(); ++b)
      values(b) = Scalar(0.5) * x.col(b).dot(H_ * x.col(b)) - c_.dot(x.col(b));
  }
  void Gradient(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const override {
    grad.noalias() = H_ * x;
    grad.colwise() -= c_;
  }
  void HessianVectorProduct(ConstMatrixRef<Scalar>, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override {
    out.noalias() = H_ * v;
  }
  Vector<Scalar> Minimiser() const { return H_.ldlt().solve(c_); }

 private:
  Matrix<Scalar> H_;
  Vector<Scalar> c_;
};

// A random SPD matrix with eigenvalues in [lo, hi].
template <typename Scalar>
Matrix<Scalar> RandomSpd(Index n, double lo, double hi, unsigned seed) {
  Matrix<double> q = RandomMatrix<double>(n, n, seed).householderQr().householderQ();
  Vector<double> ev = Vector<double>::LinSpaced(n, lo, hi);
  return (q * ev.asDiagonal() * q.transpose()).cast<Scalar>();
}

// Central finite difference of a scalar function along direction d.
inline double CentralDifference(const std::function<double(double)>& f, double h = 1e-6) {
  return (f(h) - f(-h)) / (2 * h);
}

// Compiled once for float and double (test/support/test_problems.cc).
IMPLICIT_EXTERN_TEMPLATE_CLASS(AffineMap);
IMPLICIT_EXTERN_TEMPLATE_CLASS(TanhDeqMap);
IMPLICIT_EXTERN_TEMPLATE_CLASS(HopfieldMap);
IMPLICIT_EXTERN_TEMPLATE_CLASS(QuadraticEnergy);
#ifndef IMPLICIT_NO_EXTERN_TEMPLATES
extern template Matrix<float> RandomMatrixWithNorm<float>(Index, Index, double, unsigned);
extern template Matrix<double> RandomMatrixWithNorm<double>(Index, Index, double, unsigned);
extern template Matrix<float> RandomSpd<float>(Index, double, double, unsigned);
extern template Matrix<double> RandomSpd<double>(Index, double, double, unsigned);
#endif

}  // namespace testing
}  // namespace implicit
