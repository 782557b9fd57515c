// Problems and reference gradients for the implicit-differentiation tests (label ift).
//
//   HopfieldEnergy<S>  E(z; X, x) = 0.5|z|^2 - beta^-1 lse(beta X^T z) - x^T z, learnable
//                      patterns X ("X", n x N) and an input injection x per sample;
//                      CCCP fixed point z = X softmax(beta X^T z) + x.
//   LinearDeqMap<S>    f(z; x, A, c) = A z + B x + c, parameters "A", "c"; B fixed.
//   QuadraticLoss      L = sum_b w_b.z_b + 0.5|z_b|^2, dL/dz = w + z.
//   UnrolledGradient   reverse-mode accumulation through K Picard steps z_{k+1} = f(z_k).
//   FiniteDifference   central differences of a scalar function of many variables.
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/map.h>
#include <implicit/core/parameters.h>
#include <implicit/solvers/picard.h>

#include <Eigen/Dense>

#include <cmath>
#include <functional>
#include <vector>

#include "support/test_problems.h"

namespace implicit {
namespace testing {

template <typename Scalar>
class HopfieldEnergy : public Energy<Scalar> {
 public:
  HopfieldEnergy(Matrix<Scalar> patterns, Scalar beta) : beta_(beta) {
    params_.Add("X", patterns.rows(), patterns.cols());
    params_.Block("X") = patterns;
    n_ = patterns.rows();
  }
  void SetInput(Matrix<Scalar> x) { x_ = std::move(x); }
  const Matrix<Scalar>& input() const { return x_; }
  Scalar beta() const { return beta_; }

  Index dimension() const override { return n_; }
  void Value(ConstMatrixRef<Scalar> z, VectorRef<Scalar> values) const override;
  void Gradient(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> grad) const override {
    CccpUpdate(z, grad);
    grad = z - grad;
  }
  // grad Phi = X softmax(beta X^T z) + x.
  void CccpUpdate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    out.noalias() = X() * Softmax(z);
    out += Input(z);
  }
  // H v = v - beta X (diag p - p p^T) X^T v.
  void HessianVectorProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override {
    const Matrix<Scalar> p = Softmax(z);
    Matrix<Scalar> s = X().transpose() * v;
    CenterByP(p, s);
    out.noalias() = v - beta_ * X() * s;
  }
  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return &params_; }
  // d/dX sum_b <grad E, u_b> = -sum_b (u_b p_b^T + beta z_b q_b^T), q = (diag p - p p^T) X^T u.
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override;
  Index input_dimension() const override { return n_; }
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar>, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override {
    out = -u;
  }

  typename ParameterSet<Scalar>::ConstBlockMap X() const { return params_.Block("X"); }

 private:
  Matrix<Scalar> Input(ConstMatrixRef<Scalar> z) const {
    if (x_.size() == 0) return Matrix<Scalar>::Zero(n_, z.cols());
    internal::CheckShape("HopfieldEnergy input", x_, n_, z.cols());
    return x_;
  }
  Matrix<Scalar> Softmax(ConstMatrixRef<Scalar> z) const;
  // s_b <- (diag p_b - p_b p_b^T) s_b.
  static void CenterByP(const Matrix<Scalar>& p, Matrix<Scalar>& s) {
    for (Index b = 0; b < s.cols(); ++b) {
      const Scalar mean = p.col(b).dot(s.col(b));
      s.col(b) = (p.col(b).array() * (s.col(b).array() - mean)).matrix();
    }
  }

  Index n_ = 0;
  Scalar beta_;
  ParameterSet<Scalar> params_;
  Matrix<Scalar> x_;
};

template <typename Scalar>
void HopfieldEnergy<Scalar>::Value(ConstMatrixRef<Scalar> z, VectorRef<Scalar> values) const {
  Matrix<Scalar> s = beta_ * (X().transpose() * z);
  for (Index b = 0; b < z.cols(); ++b) {
    const Scalar m = s.col(b).maxCoeff();
    const Scalar lse = m + std::log((s.col(b).array() - m).exp().sum());
    values(b) = Scalar(0.5) * z.col(b).squaredNorm() - lse / beta_ - Input(z).col(b).dot(z.col(b));
  }
}

template <typename Scalar>
void HopfieldEnergy<Scalar>::ParameterVectorJacobianProduct(
    ConstMatrixRef<Scalar> z,
    ConstMatrixRef<Scalar> u,
    VectorRef<Scalar> out) const {
  const Matrix<Scalar> p = Softmax(z);
  Matrix<Scalar> q = X().transpose() * u;
  CenterByP(p, q);
  Matrix<Scalar> g = -(u * p.transpose() + beta_ * z * q.transpose());
  out = Eigen::Map<const Vector<Scalar>>(g.data(), g.size());
}

template <typename Scalar>
Matrix<Scalar> HopfieldEnergy<Scalar>::Softmax(ConstMatrixRef<Scalar> z) const {
  Matrix<Scalar> s = beta_ * (X().transpose() * z);
  for (Index b = 0; b < s.cols(); ++b) {
    s.col(b).array() -= s.col(b).maxCoeff();
    s.col(b) = s.col(b).array().exp().matrix();
    s.col(b) /= s.col(b).sum();
  }
  return s;
}

// f(z; x, A, c) = A z + B x + c. Allocation-free products (lazyProduct).
template <typename Scalar>
class LinearDeqMap : public FixedPointMap<Scalar> {
 public:
  LinearDeqMap(const Matrix<Scalar>& A, const Matrix<Scalar>& B, const Vector<Scalar>& c)
      : B_(B) {
    params_.Add("A", A.rows(), A.cols());
    params_.Add("c", c.size(), 1);
    params_.Block("A") = A;
    params_.Block("c") = c;
  }
  void SetInput(Matrix<Scalar> x) { x_ = std::move(x); }
  Index dimension() const override { return B_.rows(); }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    out.noalias() = A().lazyProduct(z);
    out.noalias() += B_.lazyProduct(x_);
    out.colwise() += Vector<Scalar>(params_.Block("c"));
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<Scalar>, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    out.noalias() = A().lazyProduct(v);
  }
  void VectorJacobianProduct(ConstMatrixRef<Scalar>, ConstMatrixRef<Scalar> u,
                             MatrixRef<Scalar> out) const override {
    out.noalias() = A().transpose().lazyProduct(u);
  }
  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return &params_; }
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    const Index n = B_.rows();
    Eigen::Map<Matrix<Scalar>>(out.data(), n, n).noalias() = u.lazyProduct(z.transpose());
    out.segment(n * n, n) = u.rowwise().sum();
  }
  Index input_dimension() const override { return B_.cols(); }
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar>, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override {
    out.noalias() = B_.transpose().lazyProduct(u);
  }
  typename ParameterSet<Scalar>::ConstBlockMap A() const { return params_.Block("A"); }

 private:
  Matrix<Scalar> B_;
  ParameterSet<Scalar> params_;
  Matrix<Scalar> x_;
};

// L(z) = sum_b w_b.z_b + 0.5 |z_b|^2.
struct QuadraticLoss {
  Matrix<double> w;
  double Value(const Matrix<double>& z) const {
    return (w.array() * z.array()).sum() + 0.5 * z.squaredNorm();
  }
  Matrix<double> Gradient(const Matrix<double>& z) const { return w + z; }
};

// Gradients of L(z_K) where z_{k+1} = f(z_k), by reverse accumulation through
// the stored trajectory (a test reference only: memory grows with K).
struct UnrolledGradient {
  Vector<double> parameters;  // empty when the map has none
  Matrix<double> input;       // empty when the map has no input
  Matrix<double> z_final;
};
inline UnrolledGradient UnrollPicard(const FixedPointMap<double>& map, const Matrix<double>& z0,
                                     int steps, const QuadraticLoss& loss) {
  std::vector<Matrix<double>> traj(steps + 1);
  traj[0] = z0;
  for (int k = 0; k < steps; ++k) {
    traj[k + 1].resize(z0.rows(), z0.cols());
    map.Evaluate(traj[k], traj[k + 1]);
  }
  UnrolledGradient g;
  g.z_final = traj[steps];
  Matrix<double> a = loss.Gradient(traj[steps]), next(z0.rows(), z0.cols());
  if (map.num_parameters() > 0) g.parameters.setZero(map.num_parameters());
  if (map.input_dimension() > 0) g.input.setZero(map.input_dimension(), z0.cols());
  Vector<double> tp(map.num_parameters());
  Matrix<double> tx(map.input_dimension(), z0.cols());
  for (int k = steps - 1; k >= 0; --k) {  // a = dL/dz_{k+1}
    if (map.num_parameters() > 0) {
      map.ParameterVectorJacobianProduct(traj[k], a, tp);
      g.parameters += tp;
    }
    if (map.input_dimension() > 0) {
      map.InputVectorJacobianProduct(traj[k], a, tx);
      g.input += tx;
    }
    map.VectorJacobianProduct(traj[k], a, next);
    a = next;
  }
  return g;
}

// Solves z = f(z) from zero by Picard to absolute tolerance `tol`.
inline Matrix<double> SolveTight(const FixedPointMap<double>& map, Index batch, double tol = 1e-13) {
  PicardSolver<double>::Options o;
  o.absolute_tolerance = tol;
  o.max_iterations = 5000;
  o.max_stall_iterations = 0;
  Matrix<double> z = Matrix<double>::Zero(map.dimension(), batch);
  PicardSolver<double>(o).Solve(map, z);
  return z;
}

// Central-difference gradient of loss() over `size` variables; perturb(i, d)
// adds d to variable i.
inline Vector<double> FiniteDifference(Index size, const std::function<void(Index, double)>& perturb,
                                       const std::function<double()>& loss, double h = 1e-5) {
  Vector<double> g(size);
  for (Index i = 0; i < size; ++i) {
    perturb(i, h);
    const double plus = loss();
    perturb(i, -2 * h);
    const double minus = loss();
    perturb(i, h);
    g(i) = (plus - minus) / (2 * h);
  }
  return g;
}

inline double RelativeError(const Eigen::Ref<const Matrix<double>>& a,
                            const Eigen::Ref<const Matrix<double>>& reference) {
  return (a - reference).norm() / std::max(reference.norm(), 1e-300);
}

// Compiled once for float and double (test/support/ift_problems.cc).
IMPLICIT_EXTERN_TEMPLATE_CLASS(HopfieldEnergy);
IMPLICIT_EXTERN_TEMPLATE_CLASS(LinearDeqMap);

}  // namespace testing
}  // namespace implicit
