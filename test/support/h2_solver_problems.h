// Test helpers for the solver suites (newton, lbfgs, gradient_flow, registry,
// conformance): a convex non-quadratic energy, wrappers that count and record
// every call a solver makes (to check Summary accounting and that converged
// samples stop changing), a map that poisons one sample, and an independent
// residual computation.
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/map.h>
#include <implicit/solvers/solver.h>

#include <Eigen/Dense>

#include <cmath>
#include <limits>
#include <ostream>
#include <vector>

#include "support/test_problems.h"

namespace implicit {

// Lets BOOST_TEST print a TerminationType (found by ADL).
inline std::ostream& boost_test_print_type(std::ostream& os, TerminationType type) {
  return os << TerminationTypeToString(type);
}

namespace testing {

// E(z) = sum_i log cosh((A z - m)_i) + 0.5 mu |z|^2, strictly convex:
// hess E = A^T diag(1 - tanh^2(A z - m)) A + mu I has eigenvalues in
// [mu, |A|_2^2 + mu]. With |A|_2 <= 1 and mu = 0.5 they lie in [0.5, 1.5], so
// EnergyRootMap (Jacobian I - hess E) is a contraction with factor <= 0.5.
template <typename Scalar>
class LogCoshEnergy : public Energy<Scalar> {
 public:
  LogCoshEnergy(Matrix<Scalar> A, Vector<Scalar> m, Scalar mu)
      : A_(std::move(A)), m_(std::move(m)), mu_(mu) {}
  Index dimension() const override { return A_.cols(); }
  void Value(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const override;
  void Gradient(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const override {
    Matrix<Scalar> u = A_ * x;
    u.colwise() -= m_;
    grad.noalias() = A_.transpose() * u.array().tanh().matrix();
    grad += mu_ * x;
  }
  void HessianVectorProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override;

 private:
  Matrix<Scalar> A_;
  Vector<Scalar> m_;
  Scalar mu_;
};

template <typename Scalar>
void LogCoshEnergy<Scalar>::Value(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const {
  for (Index b = 0; b < x.cols(); ++b) {
    const Vector<Scalar> u = A_ * x.col(b) - m_;
    Scalar e = Scalar(0.5) * mu_ * x.col(b).squaredNorm();
    for (Index i = 0; i < u.size(); ++i) {
      const Scalar a = std::abs(u(i));  // log cosh a = a + log1p(exp(-2a)) - log 2
      e += a + std::log1p(std::exp(Scalar(-2) * a)) - std::log(Scalar(2));
    }
    values(b) = e;
  }
}

template <typename Scalar>
void LogCoshEnergy<Scalar>::HessianVectorProduct(
    ConstMatrixRef<Scalar> x,
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> out) const {
  Matrix<Scalar> u = A_ * x;
  u.colwise() -= m_;
  const Matrix<Scalar> d = (Scalar(1) - u.array().tanh().square()).matrix();
  const Matrix<Scalar> av = (d.array() * (A_ * v).array()).matrix();
  out.noalias() = A_.transpose() * av;
  out += mu_ * v;
}

// Wraps a map; counts Evaluate and JVP calls and records every state z the
// solver passed in (all B columns, one matrix per call).
template <typename Scalar>
class SpyMap : public FixedPointMap<Scalar> {
 public:
  explicit SpyMap(const FixedPointMap<Scalar>& inner) : inner_(inner) {}
  Index dimension() const override { return inner_.dimension(); }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    ++evaluations;
    states.push_back(z);
    inner_.Evaluate(z, out);
  }
  bool HasJacobianProducts() const override { return inner_.HasJacobianProducts(); }
  void JacobianVectorProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    ++jacobian_products;
    states.push_back(z);
    inner_.JacobianVectorProduct(z, v, out);
  }
  void VectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                             MatrixRef<Scalar> out) const override {
    inner_.VectorJacobianProduct(z, u, out);
  }
  const Energy<Scalar>* energy() const override { return inner_.energy(); }

  mutable int evaluations = 0;
  mutable int jacobian_products = 0;
  mutable std::vector<Matrix<Scalar>> states;

 private:
  const FixedPointMap<Scalar>& inner_;
};

// Hides the Jacobian products of a map (for "needs JVPs" tests).
template <typename Scalar>
class NoJacobianMap : public FixedPointMap<Scalar> {
 public:
  explicit NoJacobianMap(const FixedPointMap<Scalar>& inner) : inner_(inner) {}
  Index dimension() const override { return inner_.dimension(); }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    inner_.Evaluate(z, out);
  }

 private:
  const FixedPointMap<Scalar>& inner_;
};

// Wraps an energy; counts calls of each method and records every state.
template <typename Scalar>
class SpyEnergy : public Energy<Scalar> {
 public:
  explicit SpyEnergy(const Energy<Scalar>& inner) : inner_(inner) {}
  Index dimension() const override { return inner_.dimension(); }
  void Value(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const override {
    ++values_calls;
    states.push_back(x);
    inner_.Value(x, values);
  }
  void Gradient(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const override {
    ++gradient_calls;
    states.push_back(x);
    inner_.Gradient(x, grad);
  }
  void HessianVectorProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override {
    ++hessian_calls;
    states.push_back(x);
    inner_.HessianVectorProduct(x, v, out);
  }
  void DescentDirection(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out) const override {
    ++descent_calls;
    states.push_back(x);
    inner_.DescentDirection(x, out);
  }

  mutable int values_calls = 0, gradient_calls = 0, hessian_calls = 0, descent_calls = 0;
  mutable std::vector<Matrix<Scalar>> states;

 private:
  const Energy<Scalar>& inner_;
};

// Returns NaN in column `poisoned` of every evaluation and JVP.
template <typename Scalar>
class PoisonedMap : public FixedPointMap<Scalar> {
 public:
  PoisonedMap(const FixedPointMap<Scalar>& inner, Index poisoned)
      : inner_(inner), poisoned_(poisoned) {}
  Index dimension() const override { return inner_.dimension(); }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    inner_.Evaluate(z, out);
    out.col(poisoned_).setConstant(std::numeric_limits<Scalar>::quiet_NaN());
  }
  bool HasJacobianProducts() const override { return inner_.HasJacobianProducts(); }
  void JacobianVectorProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    inner_.JacobianVectorProduct(z, v, out);
    out.col(poisoned_).setConstant(std::numeric_limits<Scalar>::quiet_NaN());
  }

 private:
  const FixedPointMap<Scalar>& inner_;
  Index poisoned_;
};

// |f(z_b) - z_b|_2 per sample, computed here (in double) from a fresh evaluation.
template <typename Scalar>
std::vector<double> IndependentResiduals(const FixedPointMap<Scalar>& map,
                                         const Matrix<Scalar>& z) {
  Matrix<Scalar> fz(z.rows(), z.cols());
  map.Evaluate(z, fz);
  std::vector<double> r(z.cols());
  for (Index b = 0; b < z.cols(); ++b) {
    r[b] = (fz.col(b).template cast<double>() - z.col(b).template cast<double>()).norm();
  }
  return r;
}

// True when column b of every recorded state equals `value` exactly.
template <typename Scalar>
bool ColumnNeverChanged(const std::vector<Matrix<Scalar>>& states, Index b,
                        const Vector<Scalar>& value) {
  for (const Matrix<Scalar>& s : states) {
    if (!(s.col(b).array() == value.array()).all()) return false;
  }
  return true;
}

// Number of distinct values column b took over the recorded states.
template <typename Scalar>
int DistinctColumnValues(const std::vector<Matrix<Scalar>>& states, Index b) {
  std::vector<Vector<Scalar>> seen;
  for (const Matrix<Scalar>& s : states) {
    bool found = false;
    for (const Vector<Scalar>& v : seen) found = found || (v.array() == s.col(b).array()).all();
    if (!found) seen.push_back(s.col(b));
  }
  return static_cast<int>(seen.size());
}

// Compiled once for float and double (test/support/h2_solver_problems.cc).
IMPLICIT_EXTERN_TEMPLATE_CLASS(LogCoshEnergy);
IMPLICIT_EXTERN_TEMPLATE_CLASS(SpyMap);
IMPLICIT_EXTERN_TEMPLATE_CLASS(NoJacobianMap);
IMPLICIT_EXTERN_TEMPLATE_CLASS(SpyEnergy);
IMPLICIT_EXTERN_TEMPLATE_CLASS(PoisonedMap);

}  // namespace testing
}  // namespace implicit
