/// \file
/// SolveMixedPrecision: a batch solved in float first, then finished in double.
///
/// Most of an equilibrium solve is its transient (hopfield-digits: Anderson
/// needs about 58 of its 62 iterations to bring the residual to 1e-3, four to
/// go on to 1e-8), and float evaluations cost about half of double ones. So
/// the float stage runs `float_solver` on `float_map` (the same map built in
/// float) from z until each sample meets the float solver's own tolerance
/// (choose it above float's reach, e.g. 1e-4 for states of norm ~10), and the
/// double stage runs `double_solver` on `double_map` from there. The verdict
/// is the double stage's alone: a sample is converged only when its residual,
/// computed in double, meets the double solver's tolerance — never a float
/// residual reported as a double convergence.
///
/// \code
///   implicit::AndersonSolver<float>::Options coarse;
///   coarse.absolute_tolerance = 1e-4;
///   implicit::AndersonSolver<double>::Options fine;            // 1e-8 by default
///   implicit::MixedPrecisionSummary s = implicit::SolveMixedPrecision(
///       implicit::AndersonSolver<float>(coarse), map_float,
///       implicit::AndersonSolver<double>(fine), map_double, z); // z: n x B, double
///   if (!s.IsConverged()) std::cerr << s.full.FullReport();
/// \endcode
///
/// Per sample: the float stage starts from z rounded to float; where its
/// result is not finite (a sample that overflowed float's range or failed
/// there) the double stage starts from the sample's original z instead. Both
/// solvers are per-sample (solver.h): a sample that meets a stage's tolerance
/// stops there while the others go on.
#pragma once

#include <implicit/solvers/solver.h>

namespace implicit {

/// What SolveMixedPrecision did: each stage's own Summary.
struct MixedPrecisionSummary {
  Summary single;  ///< the float stage (its residuals are float residuals)
  Summary full;    ///< the double stage: the verdict, residuals computed in double
  /// Whether every sample converged in double (full.IsConverged()).
  bool IsConverged() const { return full.IsConverged(); }
};

/// Solves the batch z (n x B) with `float_solver` on `float_map`, then with
/// `double_solver` on `double_map` from the float result (see above); z holds
/// the double stage's result on return.
/// \throws std::invalid_argument when the maps' dimensions differ from each
///         other or from z's rows (before anything is evaluated), and what the
///         solvers throw.
MixedPrecisionSummary SolveMixedPrecision(const Solver<float>& float_solver, const FixedPointMap<float>& float_map,
                                          const Solver<double>& double_solver,
                                          const FixedPointMap<double>& double_map, MatrixRef<double> z);

}  // namespace implicit
