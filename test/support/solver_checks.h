// Checks shared by the forward-solver test suites: run a solver on the
// standard problems of test_problems.h and verify, independently of the
// Summary, that each returned column is a fixed point; and verify that a
// Summary agrees with what the iteration callback saw. Include after
// <boost/test/unit_test.hpp>.
//
//   auto s = implicit::testing::SolveAndCheck(solver, map, z, 1e-10);
#pragma once

#include <implicit/solvers/picard.h>
#include <implicit/solvers/solver.h>

#include "support/solver_test_maps.h"
#include "support/test_problems.h"

#include <algorithm>
#include <string>

namespace implicit {
namespace testing {

// What the iteration callback observed during one Solve().
struct CallbackLog {
  int calls = 0;
  int last_iteration = -1;
  int last_evaluations = 0;
  bool iterations_consecutive = true;
};

// Options with record_trace on and a callback that fills *log.
template <typename Options>
Options Instrumented(Options options, CallbackLog* log) {
  options.record_trace = true;
  options.callback = [log](const IterationSummary& it) {
    if (it.iteration != log->last_iteration + 1) log->iterations_consecutive = false;
    log->last_iteration = it.iteration;
    log->last_evaluations = it.function_evaluations;
    ++log->calls;
    return CallbackReturnType::kContinue;
  };
  return options;
}

// The Summary agrees with what happened (callback log, options, batch size).
inline void CheckSummaryConsistent(const Summary& s, const SolverOptions& options, Index batch,
                                   const CallbackLog& log) {
  BOOST_TEST(s.num_samples() == batch);
  BOOST_TEST(s.sample_residual.size() == static_cast<size_t>(batch));
  BOOST_TEST(s.sample_iterations.size() == static_cast<size_t>(batch));
  BOOST_TEST(s.iterations <= options.max_iterations);
  BOOST_TEST(s.iterations >= 0);
  // One callback per iteration plus one for the initial point.
  BOOST_TEST(log.calls == s.iterations + 1);
  BOOST_TEST(log.iterations_consecutive);
  BOOST_TEST(log.last_iteration == s.iterations);
  BOOST_TEST(log.last_evaluations == s.function_evaluations);
  // At least one batch evaluation per iteration plus the initial one.
  BOOST_TEST(s.function_evaluations >= s.iterations + 1);
  if (options.record_trace) {
    BOOST_TEST(s.trace.size() == static_cast<size_t>(s.iterations + 1));
    for (size_t i = 0; i < s.trace.size(); ++i) {
      BOOST_TEST(s.trace[i].iteration == static_cast<int>(i));
      if (i > 0) BOOST_TEST(s.trace[i].function_evaluations > s.trace[i - 1].function_evaluations);
    }
    if (!s.trace.empty()) BOOST_TEST(s.trace.back().function_evaluations == s.function_evaluations);
  }
  double max_residual = 0.0;
  int converged = 0;
  BOOST_TEST(s.sample_evaluations.size() == static_cast<size_t>(batch));
  for (Index b = 0; b < batch; ++b) {
    BOOST_TEST(s.sample_iterations[b] <= s.iterations);
    // Evaluated at the start and at least once in every iteration it took part in.
    BOOST_TEST(s.sample_evaluations[b] >= s.sample_iterations[b] + 1);
    BOOST_TEST(s.sample_evaluations[b] <= s.function_evaluations);
    max_residual = std::max(max_residual, s.sample_residual[b]);
    if (s.sample_status[b] == TerminationType::kConverged) {
      ++converged;
      BOOST_TEST(s.sample_residual[b] <= options.absolute_tolerance);
    }
  }
  BOOST_TEST(s.absolute_residual == max_residual);
  BOOST_TEST(s.num_converged() == converged);
  BOOST_TEST(s.IsConverged() == (converged == batch));
}

// Solves with `solver_options` (instrumented), then checks: converged, every
// column's independently recomputed residual |f(z_b) - z_b| <= tolerance,
// Summary consistent. Returns the Summary.
template <template <typename> class SolverT, typename Scalar>
Summary SolveAndCheck(typename SolverT<Scalar>::Options options, const FixedPointMap<Scalar>& map,
                      Matrix<Scalar>& z, double tolerance) {
  options.absolute_tolerance = tolerance;
  CallbackLog log;
  SolverT<Scalar> solver(Instrumented(options, &log));
  Summary s = solver.Solve(map, z);
  BOOST_TEST_INFO(s.BriefReport());
  BOOST_TEST(s.IsConverged());
  BOOST_TEST(z.allFinite());
  const Vector<double> r = Residuals(map, z);
  for (Index b = 0; b < z.cols(); ++b) {
    BOOST_TEST_INFO("sample " << b << ": " << s.BriefReport());
    BOOST_TEST(r(b) <= tolerance * (1 + 1e-6));
  }
  CheckSummaryConsistent(s, options, z.cols(), log);
  return s;
}

// Runs SolveAndCheck on AffineMap (|A| = 0.7), TanhDeqMap (|W| = 0.8) and
// HopfieldMap, each with a batch of 4, for Scalar = float or double.
template <template <typename> class SolverT, typename Scalar>
void CheckSolvesStandardProblems(const typename SolverT<Scalar>::Options& options,
                                 double tolerance) {
  const Index n = 12, batch = 4;
  {
    AffineMap<Scalar> map(RandomMatrixWithNorm<Scalar>(n, n, 0.7, 11), RandomMatrix<Scalar>(n, 1, 12));
    Matrix<Scalar> z = RandomMatrix<Scalar>(n, batch, 13);
    BOOST_TEST_CONTEXT("AffineMap") {
      SolveAndCheck<SolverT, Scalar>(options, map, z, tolerance);
      // |z - z*| <= |f(z) - z| / (1 - |A|) for a contraction of modulus |A|.
      for (Index b = 0; b < batch; ++b) {
        const double error = (z.col(b) - map.Solution()).template cast<double>().norm();
        BOOST_TEST(error <= tolerance / (1 - 0.7) * 1.01 + 1e-12);
      }
    }
  }
  {
    TanhDeqMap<Scalar> map(n, 5, 0.8, 21);
    map.SetInput(RandomMatrix<Scalar>(5, batch, 22));
    Matrix<Scalar> z = Matrix<Scalar>::Zero(n, batch);
    BOOST_TEST_CONTEXT("TanhDeqMap") { SolveAndCheck<SolverT, Scalar>(options, map, z, tolerance); }
  }
  {
    const Index patterns = 6;
    Matrix<Scalar> X = RandomMatrix<Scalar>(n, patterns, 31);
    X.colwise().normalize();
    HopfieldMap<Scalar> map(X, Scalar(2));
    Matrix<Scalar> z = X.leftCols(batch) + RandomMatrix<Scalar>(n, batch, 32, 0.3);
    BOOST_TEST_CONTEXT("HopfieldMap") { SolveAndCheck<SolverT, Scalar>(options, map, z, tolerance); }
  }
}

// The fast-contraction rule of Anderson and Broyden (fast_contraction, 0.1).
// On f(z) = A z + c with A = diag(0.01 .. 0.05) every step contracts by at
// most 0.05: the first two iterates are Picard's (no history, then the first
// fast step is plain), later steps use the newest pair alone (memory `many`
// takes memory 1's steps; with the rule off the two differ) and the solver
// needs fewer evaluations than Picard. At A = 0.5 I the rule does not apply
// and the solver extrapolates. The Picard fallback and its warm-up are off:
// the rule is checked alone, from the first step.
template <template <typename> class SolverT>
void CheckFastContractionRule(int many) {
  const Index n = 6, B = 3;
  const Matrix<double> z0 = RandomMatrix<double>(n, B, 17, 4.0);
  const Matrix<double> c = RandomMatrix<double>(n, 1, 18);
  const AffineMap<double> fast_map(Vector<double>::LinSpaced(n, 0.01, 0.05).asDiagonal().toDenseMatrix(), c);
  auto solve = [&](const AffineMap<double>& map, int memory, double fast, int max_iterations, Matrix<double>* z) {
    typename SolverT<double>::Options options;
    options.absolute_tolerance = 1e-12;
    options.memory = memory;
    options.fast_contraction = fast;
    options.max_iterations = max_iterations;
    options.warmup_iterations = 0;  // the rule alone, from the first step
    options.progress_window = 0;
    *z = z0;
    return SolverT<double>(options).Solve(map, *z);
  };
  auto accelerated = [](const Summary& s) {
    int sum = 0;
    for (int a : s.sample_accelerated_steps) sum += a;
    return sum;
  };
  PicardSolver<double>::Options picard_options;
  picard_options.absolute_tolerance = 1e-12;
  Matrix<double> z_picard = z0, z_two = z0;
  const Summary picard = PicardSolver<double>(picard_options).Solve(fast_map, z_picard);
  BOOST_REQUIRE(picard.IsConverged());
  picard_options.max_iterations = 2;
  PicardSolver<double>(picard_options).Solve(fast_map, z_two);

  Matrix<double> z, z1;
  BOOST_TEST(accelerated(solve(fast_map, many, 0.1, 2, &z)) == 0);
  BOOST_TEST((z - z_two).cwiseAbs().maxCoeff() <= 1e-14);

  const Summary s_many = solve(fast_map, many, 0.1, 100, &z);
  BOOST_TEST(s_many.IsConverged(), s_many.FullReport());
  BOOST_TEST(accelerated(s_many) > 0);
  BOOST_TEST(s_many.total_sample_evaluations() < picard.total_sample_evaluations());
  const Summary s_one = solve(fast_map, 1, 0.1, 100, &z1);
  BOOST_TEST(s_many.sample_evaluations == s_one.sample_evaluations, boost::test_tools::per_element());
  BOOST_TEST((z - z1).cwiseAbs().maxCoeff() <= 1e-14);

  // The rule off: the older pairs are used, memory `many` and 1 differ after 4 steps.
  BOOST_TEST(accelerated(solve(fast_map, many, 0.0, 4, &z)) > 0);
  solve(fast_map, 1, 0.0, 4, &z1);
  BOOST_TEST((z - z1).cwiseAbs().maxCoeff() > 1e-10);

  const AffineMap<double> slow_map(0.5 * Matrix<double>::Identity(n, n), c);
  const Summary slow = solve(slow_map, many, 0.1, 100, &z);
  BOOST_TEST(slow.IsConverged(), slow.FullReport());
  BOOST_TEST(accelerated(slow) > 0);
}

}  // namespace testing
}  // namespace implicit
