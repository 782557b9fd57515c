/// \file
/// The vocabulary of the linear solvers (linear_solvers.h): which solver
/// (LinearSolverType and its names), its options, what a solve reports
/// (LinearSolveSummary, named like the forward solvers' Summary), and the
/// batched operator they solve with.
///
/// \code
///   implicit::LinearSolverOptions options;      // tolerance 1e-10, 200 iterations
///   options.restart = 50;                         // GMRES
///   implicit::LinearSolverType type;
///   implicit::StringToLinearSolverType("minres", &type);
/// \endcode
#pragma once

#include <implicit/core/types.h>
#include <implicit/solvers/solver.h>

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

/// Which linear solver SolveLinearSystem runs (linear_solvers.h describes
/// each): kFixedPoint "fixed_point" (Richardson), kAnderson "anderson",
/// kBroyden "broyden", kCg "cg" (A symmetric positive definite), kMinres
/// "minres" (A symmetric), kGmres "gmres" (any A), kDirect "direct" (dense LU,
/// small problems only).
enum class LinearSolverType { kFixedPoint, kAnderson, kBroyden, kCg, kMinres, kGmres, kDirect };

/// The name of a linear solver type: "fixed_point", "anderson", "broyden",
/// "cg", "minres", "gmres", "direct" ("unknown" for a value outside the enum).
inline const char* LinearSolverTypeToString(LinearSolverType type) {
  switch (type) {
    case LinearSolverType::kFixedPoint: return "fixed_point";
    case LinearSolverType::kAnderson: return "anderson";
    case LinearSolverType::kBroyden: return "broyden";
    case LinearSolverType::kCg: return "cg";
    case LinearSolverType::kMinres: return "minres";
    case LinearSolverType::kGmres: return "gmres";
    case LinearSolverType::kDirect: return "direct";
  }
  return "unknown";
}

/// Parses a name as printed by LinearSolverTypeToString into *type (when not
/// nullptr); false when unknown.
inline bool StringToLinearSolverType(const std::string& name, LinearSolverType* type) {
  for (LinearSolverType t :
       {LinearSolverType::kFixedPoint, LinearSolverType::kAnderson, LinearSolverType::kBroyden,
        LinearSolverType::kCg, LinearSolverType::kMinres, LinearSolverType::kGmres,
        LinearSolverType::kDirect}) {
    if (name == LinearSolverTypeToString(t)) {
      if (type != nullptr) *type = t;
      return true;
    }
  }
  return false;
}

/// True for the solvers that assume a symmetric operator (cg, minres).
inline bool LinearSolverRequiresSymmetry(LinearSolverType type) {
  return type == LinearSolverType::kCg || type == LinearSolverType::kMinres;
}

/// Options of the linear solvers: tolerances, iteration budget and the
/// settings of the individual methods.
struct LinearSolverOptions {
  /// Relative tolerance: sample b converged when
  /// |rhs_b - A u_b|_2 <= tolerance * |rhs_b|_2 + absolute_tolerance. >= 0.
  double tolerance = 1e-10;
  /// Absolute part of the convergence test above (default 0: relative only). >= 0.
  double absolute_tolerance = 0.0;
  /// Maximum number of iterations (Krylov steps / fixed-point updates), >= 0.
  /// "direct" ignores it.
  int max_iterations = 200;
  /// GMRES: Krylov vectors per cycle before a restart, 1..kMaxSolverMemory.
  int restart = 30;
  /// Anderson: window of stored differences; Broyden: stored rank-one updates
  /// before a restart. 1..kMaxSolverMemory.
  int memory = 5;
  /// Anderson: ridge added to the least-squares normal equations, relative to
  /// their mean diagonal (scale-free, so it does not stall at small residuals). >= 0.
  double regularization = 1e-12;
  /// A sample diverged when its residual exceeds divergence_threshold times its
  /// initial residual. > 1.
  double divergence_threshold = 1e8;

  /// Checks every field; on failure names it in *error.
  /// \return true when every field is in range.
  bool IsValid(std::string* error) const {
    auto fail = [error](const std::string& m) {
      if (error != nullptr) *error = m;
      return false;
    };
    if (!(tolerance >= 0.0) || !std::isfinite(tolerance))
      return fail("tolerance must be finite and >= 0, got " + std::to_string(tolerance));
    if (!(absolute_tolerance >= 0.0) || !std::isfinite(absolute_tolerance))
      return fail("absolute_tolerance must be finite and >= 0, got " +
                  std::to_string(absolute_tolerance));
    if (max_iterations < 0)
      return fail("max_iterations must be >= 0, got " + std::to_string(max_iterations));
    if (restart < 1 || restart > kMaxSolverMemory)
      return fail("restart must be in 1.." + std::to_string(kMaxSolverMemory) + ", got " + std::to_string(restart));
    if (memory < 1 || memory > kMaxSolverMemory)
      return fail("memory must be in 1.." + std::to_string(kMaxSolverMemory) + ", got " + std::to_string(memory));
    if (!(regularization >= 0.0) || !std::isfinite(regularization))
      return fail("regularization must be finite and >= 0, got " +
                  std::to_string(regularization));
    if (!(divergence_threshold > 1.0))
      return fail("divergence_threshold must be > 1, got " +
                  std::to_string(divergence_threshold));
    return true;
  }
};

/// What a linear solve reports: the overall outcome, the work done, and every
/// sample's status and residuals. The field names are the forward Summary's
/// (solver.h) where they mean the same.
struct LinearSolveSummary {
  std::string solver;  ///< the solver's name ("gmres", ...)
  /// kConverged only when every sample converged; otherwise the most severe
  /// sample status: kNonFinite, kDiverged, kFailure, kStalled, kMaxIterations.
  TerminationType termination_type = TerminationType::kInvalidInput;
  /// Human-readable details of the outcome (breakdowns, notes, failure reasons).
  std::string message;
  int iterations = 0;         ///< batch iterations (Krylov steps / updates)
  /// Batch applications of the operator A: in the IFT backward pass, (I - J)^T u,
  /// one batch of vector-Jacobian products each.
  int jacobian_products = 0;
  /// Max over samples of |rhs_b - A u_b| / |rhs_b| (|rhs_b - A u_b| when rhs_b = 0);
  /// infinity before a solve.
  double relative_residual = std::numeric_limits<double>::infinity();
  /// Max over samples of |rhs_b - A u_b|; infinity before a solve.
  double absolute_residual = std::numeric_limits<double>::infinity();
  /// Per sample: why it stopped.
  std::vector<TerminationType> sample_status;
  std::vector<double> sample_residual;           ///< per sample: |rhs_b - A u_b|, as in Summary
  std::vector<double> sample_relative_residual;  ///< per sample: that divided by |rhs_b| (when > 0)
  std::vector<int> sample_iterations;            ///< per sample: iterations until it stopped
  double wall_time_seconds = 0.0;                ///< wall-clock time of the solve

  /// True when every sample converged (termination_type is kConverged).
  bool IsConverged() const { return termination_type == TerminationType::kConverged; }
  /// The batch size B (the length of the per-sample vectors).
  int num_samples() const { return static_cast<int>(sample_status.size()); }
  /// The number of samples whose status is kConverged.
  int num_converged() const {
    return static_cast<int>(
        std::count(sample_status.begin(), sample_status.end(), TerminationType::kConverged));
  }
  /// One line: solver, status, samples, iterations, products, residual, time.
  std::string BriefReport() const {
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s: %s, %d/%d samples converged, %d iterations, %d products, relative "
                  "residual %.3e, %.3f s",
                  solver.c_str(), TerminationTypeToString(termination_type), num_converged(),
                  num_samples(), iterations, jacobian_products, relative_residual,
                  wall_time_seconds);
    return line;
  }
};

/// The operator of a linear solve, as a product on the whole batch:
/// apply(v, out) sets out.col(b) = A_b v.col(b) (v, out: n x B); out never aliases v.
template <typename Scalar>
using LinearOperator = std::function<void(ConstMatrixRef<Scalar>, MatrixRef<Scalar>)>;

/// \cond INTERNAL
/// One linear solve function compiled once for float and double (see "Compile
/// once" in types.h): IMPLICIT_EXTERN_LINEAR_SOLVE(GmresSolve) in its header,
/// IMPLICIT_INSTANTIATE_LINEAR_SOLVE(GmresSolve) in solvers/src/linear_solvers.cc.
#define IMPLICIT_LINEAR_SOLVE_INSTANCE(prefix, Solve, Scalar)                                \
  prefix template LinearSolveSummary Solve<Scalar>(const LinearOperator<Scalar>&,           \
                                                   ConstMatrixRef<Scalar>, MatrixRef<Scalar>, \
                                                   const LinearSolverOptions&)
#ifdef IMPLICIT_NO_EXTERN_TEMPLATES
#define IMPLICIT_EXTERN_LINEAR_SOLVE(Solve) static_assert(true, "")
#else
#define IMPLICIT_EXTERN_LINEAR_SOLVE(Solve)              \
  IMPLICIT_LINEAR_SOLVE_INSTANCE(extern, Solve, float); \
  IMPLICIT_LINEAR_SOLVE_INSTANCE(extern, Solve, double)
#endif
#define IMPLICIT_INSTANTIATE_LINEAR_SOLVE(Solve)   \
  IMPLICIT_LINEAR_SOLVE_INSTANCE(, Solve, float); \
  IMPLICIT_LINEAR_SOLVE_INSTANCE(, Solve, double)
/// \endcond

namespace internal {
/// The shared forward-solver fields of a linear solve's options: its iteration
/// budget, tolerances (tolerance as relative_tolerance) and divergence
/// threshold; no stall rule and no energy (a linear solve has neither). Used
/// by the per-sample monitor of the linear solvers and by the device adjoint
/// solves, which run forward solvers on the adjoint map.
inline SolverOptions AsSolverOptions(const LinearSolverOptions& linear) {
  SolverOptions options;
  options.max_iterations = linear.max_iterations;
  options.absolute_tolerance = linear.absolute_tolerance;
  options.relative_tolerance = linear.tolerance;
  options.max_stall_iterations = 0;
  options.use_energy = false;
  options.divergence_threshold = linear.divergence_threshold;
  return options;
}
}  // namespace internal

}  // namespace implicit
