/// \file
/// The dense linear solver "direct": each sample's n x n matrix built from n
/// batch products and solved by LU with full pivoting (small problems only).
///
/// \code
///   implicit::LinearSolveSummary s = implicit::DirectLinearSolve<double>(apply, rhs, u, options);
/// \endcode
#pragma once

#include <implicit/solvers/internal/batch_monitor.h>

#include <Eigen/LU>

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

/// The linear solver "direct": solves A u_b = rhs_b for every column b of
/// rhs (n x B) by building each sample's n x n matrix from n batch products
/// and solving it by LU with full pivoting (memory n*n*B: small problems
/// only). u (n x B) holds the initial guess on entry and the result on
/// return; a numerically singular matrix makes the sample kFailure.
/// \throws std::invalid_argument on invalid options or when rhs is empty or
///         u's shape differs from rhs's.
template <typename Scalar>
LinearSolveSummary DirectLinearSolve(const LinearOperator<Scalar>& apply,
                                     ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                     const LinearSolverOptions& options) {
  internal::BatchMonitor<Scalar> m("direct", apply, rhs, u, options);
  const Index n = u.rows(), batch = u.cols();
  Matrix<Scalar> r(n, batch);
  if (m.Residual(u, r)) {
    // Column i of every sample's matrix from one batch product with e_i.
    std::vector<Matrix<Scalar>> A(batch, Matrix<Scalar>(n, n));
    Matrix<Scalar> e = Matrix<Scalar>::Zero(n, batch), ae(n, batch);
    for (Index i = 0; i < n; ++i) {
      e.row(i).setOnes();
      m.Apply(e, ae);
      e.row(i).setZero();
      for (Index b = 0; b < batch; ++b) A[b].col(i) = ae.col(b);
    }
    for (Index b = 0; b < batch; ++b) {
      if (!m.active(b)) continue;
      if (!A[b].allFinite()) {
        m.StopSample(b, TerminationType::kNonFinite);
        continue;
      }
      Eigen::FullPivLU<Matrix<Scalar>> lu(A[b]);
      if (!lu.isInvertible()) {
        m.Note("direct: singular matrix (rank " + std::to_string(lu.rank()) + " < " +
               std::to_string(n) + ")");
        m.StopSample(b, TerminationType::kFailure);
        continue;
      }
      // Solve for the correction from the current residual (one refinement-ready step).
      u.col(b) += lu.solve(r.col(b));
    }
    m.CountIteration();
    m.Residual(u, r);
  }
  return m.FinishLinear();
}

/// \cond INTERNAL
IMPLICIT_EXTERN_LINEAR_SOLVE(DirectLinearSolve);
/// \endcond

}  // namespace implicit
