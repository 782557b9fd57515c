/// \file
/// The fixed-point linear solvers "fixed_point", "anderson" and "broyden": A u
/// = rhs as the fixed point of u -> u + rhs - A u, solved by the forward
/// solvers (picard.h, anderson.h, broyden.h) with their safeguards. Called
/// through SolveLinearSystem (linear_solvers.h) or directly:
///
/// \code
///   implicit::LinearSolveSummary s =
///       implicit::AndersonLinearSolve<double>(apply, rhs, u, options);
/// \endcode
#pragma once

#include <implicit/solvers/anderson.h>
#include <implicit/solvers/broyden.h>
#include <implicit/solvers/internal/batch_monitor.h>
#include <implicit/solvers/picard.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace implicit {

namespace internal {

/// A u = rhs in fixed-point form, u = u + (rhs - A u): the map whose fixed
/// point the forward solvers find (for A = I - J^T, u = J^T u + rhs).
template <typename Scalar>
class LinearFixedPointMap final : public FixedPointMap<Scalar> {
 public:
  LinearFixedPointMap(const LinearOperator<Scalar>& apply, const Matrix<Scalar>& rhs)
      : apply_(apply), rhs_(rhs) {}
  Index dimension() const override { return rhs_.rows(); }
  void Evaluate(ConstMatrixRef<Scalar> u, MatrixRef<Scalar> out) const override {
    apply_(u, out);
    out = u + rhs_ - out;
  }

 private:
  const LinearOperator<Scalar>& apply_;
  const Matrix<Scalar>& rhs_;
};

/// Solves A u = rhs with the forward solver `solver` (picard, anderson,
/// broyden) on LinearFixedPointMap, so that the adjoint solve has the forward
/// solve's safeguards and per-sample bookkeeping. Every column is scaled by
/// 1 / |rhs_b| first, so that the forward solver's one absolute tolerance is
/// the per-sample relative one; the result is then checked on the true residual
/// like every linear solve. The forward solver aims at half the tolerance: the
/// scaled residual it measures and the true residual checked afterwards differ
/// by rounding, and a solve stopped exactly at the tolerance would otherwise be
/// judged unconverged now and then when the tolerance is close to rounding
/// (1e-13 in double). Half costs about one contraction step more.
template <typename Scalar, typename SolverT>
LinearSolveSummary SolveInFixedPointForm(const char* name, typename SolverT::Options forward,
                                         const LinearOperator<Scalar>& apply,
                                         ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                         const LinearSolverOptions& options) {
  BatchMonitor<Scalar> m(name, apply, rhs, u, options);
  const Index batch = rhs.cols();
  Vector<Scalar> scale(batch);
  double largest = 0.0;
  for (Index b = 0; b < batch; ++b) {
    const Scalar norm = rhs.col(b).norm();
    scale(b) = norm > Scalar(0) && std::isfinite(static_cast<double>(norm)) ? norm : Scalar(1);
    largest = std::max(largest, static_cast<double>(scale(b)));
  }
  const Matrix<Scalar> scaled_rhs = rhs * scale.cwiseInverse().asDiagonal();
  u = u * scale.cwiseInverse().asDiagonal();
  forward.max_iterations = options.max_iterations;
  forward.absolute_tolerance = 0.5 * (options.tolerance + options.absolute_tolerance / largest);
  forward.relative_tolerance = 0.0;
  forward.divergence_threshold = options.divergence_threshold;
  const Summary solved =
      SolverT(forward).Solve(LinearFixedPointMap<Scalar>(apply, scaled_rhs), u);
  u = u * scale.asDiagonal();
  Matrix<Scalar> r(rhs.rows(), batch);
  m.CountWork(solved.iterations, solved.function_evaluations);
  m.Residual(u, r);
  for (Index b = 0; b < batch; ++b) {
    if (solved.sample_status[b] != TerminationType::kConverged) m.StopSample(b, solved.sample_status[b]);
  }
  LinearSolveSummary summary = m.FinishLinear();
  summary.sample_iterations = solved.sample_iterations;
  return summary;
}

}  // namespace internal

/// The linear solver "fixed_point": Richardson iteration u <- u + (rhs - A u)
/// for A u_b = rhs_b, run by PicardSolver with its safeguards, for every
/// column b of rhs (n x B); u (n x B) holds the initial guess on entry and
/// the result on return. Converges iff the spectral radius of I - A is < 1.
/// \throws std::invalid_argument on invalid options or when rhs is empty or
///         u's shape differs from rhs's.
template <typename Scalar>
LinearSolveSummary FixedPointLinearSolve(const LinearOperator<Scalar>& apply,
                                         ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                         const LinearSolverOptions& options) {
  return internal::SolveInFixedPointForm<Scalar, PicardSolver<Scalar>>(
      "fixed_point", typename PicardSolver<Scalar>::Options(), apply, rhs, u, options);
}

/// The linear solver "anderson": AndersonSolver (window options.memory,
/// relative ridge options.regularization) on the fixed point
/// u <- u + (rhs - A u), for every column b of rhs (n x B); u (n x B) holds
/// the initial guess on entry and the result on return.
/// \throws std::invalid_argument on invalid options or when rhs is empty or
///         u's shape differs from rhs's.
template <typename Scalar>
LinearSolveSummary AndersonLinearSolve(const LinearOperator<Scalar>& apply,
                                       ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                       const LinearSolverOptions& options) {
  typename AndersonSolver<Scalar>::Options forward;
  forward.memory = options.memory;
  forward.ridge = options.regularization;
  return internal::SolveInFixedPointForm<Scalar, AndersonSolver<Scalar>>(
      "anderson", forward, apply, rhs, u, options);
}

/// The linear solver "broyden": BroydenSolver (options.memory stored updates)
/// on the fixed point u <- u + (rhs - A u), for every column b of rhs
/// (n x B); u (n x B) holds the initial guess on entry and the result on
/// return.
/// \throws std::invalid_argument on invalid options or when rhs is empty or
///         u's shape differs from rhs's.
template <typename Scalar>
LinearSolveSummary BroydenLinearSolve(const LinearOperator<Scalar>& apply,
                                      ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                      const LinearSolverOptions& options) {
  typename BroydenSolver<Scalar>::Options forward;
  forward.memory = options.memory;
  return internal::SolveInFixedPointForm<Scalar, BroydenSolver<Scalar>>(
      "broyden", forward, apply, rhs, u, options);
}

/// \cond INTERNAL
IMPLICIT_EXTERN_LINEAR_SOLVE(FixedPointLinearSolve);
IMPLICIT_EXTERN_LINEAR_SOLVE(AndersonLinearSolve);
IMPLICIT_EXTERN_LINEAR_SOLVE(BroydenLinearSolve);
/// \endcond

}  // namespace implicit
