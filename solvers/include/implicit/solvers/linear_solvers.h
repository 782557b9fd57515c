/// \file
/// Matrix-free linear solvers for the backward (adjoint) pass.
///
/// Each solves A u_b = rhs_b for every column b of a batch, where the operator
/// is only available as a product on the whole batch:
///
/// \code
///   apply(v, out):  out.col(b) = A_b v.col(b)        (v, out: n x B)
/// \endcode
///
/// (the implicit backward pass uses A = (I - df/dz)^T, see
/// <implicit/diff/implicit_diff.h>). Samples are independent and converge
/// independently: a converged column stops changing while the others go on
/// (the operator is still applied to the whole batch).
///
/// \code
///   implicit::LinearSolverOptions options;
///   options.tolerance = 1e-10;
///   implicit::Matrix<double> u = implicit::Matrix<double>::Zero(n, B);  // initial guess
///   implicit::LinearSolveSummary s = implicit::SolveLinearSystem<double>(
///       implicit::LinearSolverType::kGmres,
///       [&](implicit::ConstMatrixRef<double> v, implicit::MatrixRef<double> out) {
///         out.noalias() = A * v;
///       },
///       rhs, u, options);
///   if (!s.IsConverged()) std::cerr << s.BriefReport() << "\n";
/// \endcode
///
/// Solvers (type in C++, name at run time via StringToLinearSolverType):
/// \verbatim
///   "fixed_point"  Richardson u <- u + (rhs - A u); for A = I - J^T this is the
///                  adjoint fixed point u <- J^T u + g. Converges iff the spectral
///                  radius of I - A is < 1.
///   "anderson"     Anderson acceleration (window `memory`, relative ridge
///                  `regularization`) of that fixed point.
///   "broyden"      limited-memory "good" Broyden (`memory` stored updates) on it.
///                  These three run the forward solvers (PicardSolver,
///                  AndersonSolver, BroydenSolver) on the map u -> u + rhs - A u,
///                  with their safeguards (residual guard, stall rule, best
///                  iterate) and per-sample bookkeeping.
///   "cg"           conjugate gradients; A symmetric positive definite.
///   "minres"       MINRES (Paige-Saunders); A symmetric, may be indefinite.
///   "gmres"        restarted GMRES(restart) with modified Gram-Schmidt; any A.
///   "direct"       builds each sample's n x n matrix from n batch products and
///                  solves it by LU with full pivoting; a numerically singular
///                  matrix is a kFailure. Memory n*n*B: small problems only.
/// \endverbatim
///
/// Convergence is decided on the TRUE residual, never on a recurrence estimate:
/// sample b converged when |rhs_b - A u_b| <= tolerance |rhs_b| + absolute_tolerance.
/// Krylov methods whose estimate says "converged" recompute the true residual and
/// restart if it disagrees. Memory is bounded by the options (a few n x B
/// matrices; 2 memory of them for Anderson / Broyden, restart + 1 for GMRES),
/// independent of the number of iterations. Failures (budget spent, divergence,
/// NaN, breakdown, singular matrix) are reported per sample, never hidden; the
/// column of u then holds the last iterate.
#pragma once

#include <implicit/solvers/direct_linear_solver.h>
#include <implicit/solvers/fixed_point_linear_solvers.h>
#include <implicit/solvers/krylov_linear_solvers.h>
#include <implicit/solvers/linear_solver_options.h>

#include <stdexcept>

namespace implicit {

/// Solves A u = rhs column by column with the solver `type`; u (n x B) holds
/// the initial guess on entry and the result on return.
/// \param type which solver runs.
/// \param apply the operator: apply(v, out) sets out = A v on the whole batch.
/// \param rhs n x B, one right-hand side per sample.
/// \param u n x B: the initial guess on entry, the result on return.
/// \param options tolerances, budget and the solvers' settings.
/// \return the per-sample outcome and the work done.
/// \throws std::invalid_argument on bad options or shapes, or a `type`
///         outside the enum.
template <typename Scalar>
LinearSolveSummary SolveLinearSystem(LinearSolverType type, const LinearOperator<Scalar>& apply,
                                     ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                     const LinearSolverOptions& options = LinearSolverOptions()) {
  switch (type) {
    case LinearSolverType::kFixedPoint: return FixedPointLinearSolve<Scalar>(apply, rhs, u, options);
    case LinearSolverType::kAnderson: return AndersonLinearSolve<Scalar>(apply, rhs, u, options);
    case LinearSolverType::kBroyden: return BroydenLinearSolve<Scalar>(apply, rhs, u, options);
    case LinearSolverType::kCg: return ConjugateGradientSolve<Scalar>(apply, rhs, u, options);
    case LinearSolverType::kMinres: return MinresSolve<Scalar>(apply, rhs, u, options);
    case LinearSolverType::kGmres: return GmresSolve<Scalar>(apply, rhs, u, options);
    case LinearSolverType::kDirect: return DirectLinearSolve<Scalar>(apply, rhs, u, options);
  }
  throw std::invalid_argument("SolveLinearSystem: unknown LinearSolverType");
}

/// \cond INTERNAL
/// Compiled once for float and double (solvers/src/linear_solvers.cc), like
/// each solver (IMPLICIT_EXTERN_LINEAR_SOLVE in its header).
#define IMPLICIT_SOLVE_LINEAR_SYSTEM_INSTANCE(prefix, Scalar)                  \
  prefix template LinearSolveSummary SolveLinearSystem<Scalar>(                \
      LinearSolverType, const LinearOperator<Scalar>&, ConstMatrixRef<Scalar>, \
      MatrixRef<Scalar>, const LinearSolverOptions&)
#ifndef IMPLICIT_NO_EXTERN_TEMPLATES
IMPLICIT_SOLVE_LINEAR_SYSTEM_INSTANCE(extern, float);
IMPLICIT_SOLVE_LINEAR_SYSTEM_INSTANCE(extern, double);
#endif
/// \endcond

}  // namespace implicit
