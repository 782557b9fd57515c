// Small fixed-point maps and checks shared by the forward-solver tests
// (anderson, broyden, failure cases, no-allocation). Every map here evaluates
// without heap allocation, so the no-allocation test can use them.
//
//   implicit::testing::CosMap<double> map(4);          // f(z) = cos(z), elementwise
//   Vector<double> r = implicit::testing::Residuals(map, z);  // |f(z_b) - z_b| per sample
#pragma once

#include <implicit/core/map.h>
#include <implicit/core/types.h>
#include <implicit/solvers/solver.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <utility>
#include <vector>

namespace implicit {

// So that Boost.Test can print TerminationType values in failed assertions.
inline std::ostream& operator<<(std::ostream& os, TerminationType type) {
  return os << TerminationTypeToString(type);
}

namespace testing {

// |f(z_b) - z_b|_2 for every column, computed independently of any Summary.
template <typename Scalar>
Vector<double> Residuals(const FixedPointMap<Scalar>& map, const Matrix<Scalar>& z) {
  Matrix<Scalar> fz(z.rows(), z.cols());
  map.Evaluate(z, fz);
  Vector<double> r(z.cols());
  for (Index b = 0; b < z.cols(); ++b) {
    r(b) = (fz.col(b) - z.col(b)).template cast<double>().norm();
  }
  return r;
}

// f(z) = scale * cos(z) + shift, elementwise: a nonlinear contraction when
// |scale| < 1. Started from a constant vector every iterate stays a multiple
// of the ones vector, so any solver history is rank one (repeated directions).
template <typename Scalar>
class CosMap : public FixedPointMap<Scalar> {
 public:
  explicit CosMap(Index n, Scalar scale = Scalar(1), Scalar shift = Scalar(0))
      : n_(n), scale_(scale), shift_(shift) {}
  Index dimension() const override { return n_; }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    out = (scale_ * z.array().cos() + shift_).matrix();
  }

 private:
  Index n_;
  Scalar scale_, shift_;
};

// f(z) = a z + c, elementwise. a = 2, c = 1 is the divergent map z <- 2z + 1
// (fixed point -1, repelling for Picard).
template <typename Scalar>
class ScalarAffineMap : public FixedPointMap<Scalar> {
 public:
  ScalarAffineMap(Index n, Scalar a, Scalar c) : n_(n), a_(a), c_(c) {}
  Index dimension() const override { return n_; }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    out = (a_ * z.array() + c_).matrix();
  }

 private:
  Index n_;
  Scalar a_, c_;
};

// f(z) = z + 1 + sum(z^2) (in every component): g(z) = f(z) - z >= 1 never
// vanishes, so there is no fixed point at all and no solver may converge.
template <typename Scalar>
class NoFixedPointMap : public FixedPointMap<Scalar> {
 public:
  explicit NoFixedPointMap(Index n) : n_(n) {}
  Index dimension() const override { return n_; }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    for (Index b = 0; b < z.cols(); ++b) {
      out.col(b) = (z.col(b).array() + (Scalar(1) + z.col(b).squaredNorm())).matrix();
    }
  }

 private:
  Index n_;
};

// f(z) = z - scale * atan(z), elementwise: root of g = -scale atan(z) at 0.
// Full quasi-Newton steps overshoot from far away (|z| >~ 1.4 for Newton);
// a line search on |g| fixes that.
template <typename Scalar>
class AtanMap : public FixedPointMap<Scalar> {
 public:
  explicit AtanMap(Index n, Scalar scale = Scalar(1)) : n_(n), scale_(scale) {}
  Index dimension() const override { return n_; }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    out = (z.array() - scale_ * z.array().atan()).matrix();
  }

 private:
  Index n_;
  Scalar scale_;
};

// Wraps a map; from its (after+1)-th batch evaluation on, column `bad` of the
// output is NaN (a sample that "turns NaN after k iterations"). Other columns
// are untouched.
template <typename Scalar>
class NanAfterMap : public FixedPointMap<Scalar> {
 public:
  NanAfterMap(const FixedPointMap<Scalar>& inner, int after, Index bad)
      : inner_(inner), after_(after), bad_(bad) {}
  Index dimension() const override { return inner_.dimension(); }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    inner_.Evaluate(z, out);
    if (evaluations_++ >= after_) out.col(bad_).setConstant(std::numeric_limits<Scalar>::quiet_NaN());
  }
  int evaluations() const { return evaluations_; }

 private:
  const FixedPointMap<Scalar>& inner_;
  int after_;
  Index bad_;
  mutable int evaluations_ = 0;
};

// Wraps a map and records column `column` of every state it is evaluated at
// (to watch one sample through a batched solve).
template <typename Scalar>
class ColumnRecorderMap : public FixedPointMap<Scalar> {
 public:
  ColumnRecorderMap(const FixedPointMap<Scalar>& inner, Index column)
      : inner_(inner), column_(column) {}
  Index dimension() const override { return inner_.dimension(); }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    states_.push_back(z.col(column_));
    inner_.Evaluate(z, out);
  }
  const std::vector<Vector<Scalar>>& states() const { return states_; }

 private:
  const FixedPointMap<Scalar>& inner_;
  Index column_;
  mutable std::vector<Vector<Scalar>> states_;
};

// Compiled once for float and double (test/support/solver_test_maps.cc).
IMPLICIT_EXTERN_TEMPLATE_CLASS(CosMap);
IMPLICIT_EXTERN_TEMPLATE_CLASS(ScalarAffineMap);
IMPLICIT_EXTERN_TEMPLATE_CLASS(NoFixedPointMap);
IMPLICIT_EXTERN_TEMPLATE_CLASS(AtanMap);
IMPLICIT_EXTERN_TEMPLATE_CLASS(NanAfterMap);
IMPLICIT_EXTERN_TEMPLATE_CLASS(ColumnRecorderMap);

// f(z) = 0.5 tanh(z) + c_b for sample b: per-sample data c, with column
// evaluations and column JVPs so that blocks of samples are evaluated alone
// (without temporaries).
class PerSampleShiftMap : public FixedPointMap<double> {
 public:
  explicit PerSampleShiftMap(Matrix<double> c) : c_(std::move(c)) {}
  Index dimension() const override { return c_.rows(); }
  void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override {
    out = 0.5 * z.array().tanh().matrix() + c_;
  }
  bool SupportsColumnSubsets() const override { return true; }
  void EvaluateColumns(ConstMatrixRef<double> z, const std::vector<Index>& columns,
                       MatrixRef<double> out) const override {
    for (Index j = 0; j < z.cols(); ++j) {
      out.col(j) = 0.5 * z.col(j).array().tanh().matrix() + c_.col(columns[j]);
    }
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<double> z, ConstMatrixRef<double> v,
                             MatrixRef<double> out) const override {
    out = (0.5 * (1.0 - z.array().tanh().square()) * v.array()).matrix();
  }
  bool SupportsColumnJacobianProducts() const override { return true; }
  void JacobianVectorProductColumns(ConstMatrixRef<double> z, const std::vector<Index>&,
                                    ConstMatrixRef<double> v, MatrixRef<double> out) const override {
    JacobianVectorProduct(z, v, out);  // J does not depend on c
  }

 private:
  Matrix<double> c_;
};

}  // namespace testing
}  // namespace implicit
