#define BOOST_TEST_MODULE broyden
#include <boost/test/unit_test.hpp>

#include <implicit/solvers/broyden.h>
#include <implicit/solvers/picard.h>

#include "support/solver_checks.h"
#include "support/solver_test_maps.h"
#include "support/test_problems.h"

#include <cmath>
#include <string>

using namespace implicit;
using implicit::testing::Residuals;

BOOST_AUTO_TEST_CASE(broyden_solves_standard_problems_double) {
  for (double residual_factor : {0.0, 1.0}) {
    BOOST_TEST_CONTEXT("residual_factor " << residual_factor) {
      BroydenSolver<double>::Options options;
      options.residual_factor = residual_factor;
      options.max_iterations = 200;
      testing::CheckSolvesStandardProblems<BroydenSolver, double>(options, 1e-10);
    }
  }
}

BOOST_AUTO_TEST_CASE(broyden_solves_standard_problems_float) {
  for (double residual_factor : {0.0, 1.0}) {
    BOOST_TEST_CONTEXT("residual_factor " << residual_factor) {
      BroydenSolver<float>::Options options;
      options.residual_factor = residual_factor;
      options.max_iterations = 200;
      testing::CheckSolvesStandardProblems<BroydenSolver, float>(options, 1e-4);
    }
  }
}

BOOST_AUTO_TEST_CASE(broyden_bounded_memory_converges) {
  // Memory 1 restarts every iteration (storage stays one pair per sample);
  // iterations far beyond the memory never need more storage.
  testing::AffineMap<double> map(testing::RandomSpd<double>(20, -0.5, 0.9, 3),
                                 testing::RandomMatrix<double>(20, 1, 4));
  for (int memory : {1, 2, 5, 20}) {
    BOOST_TEST_CONTEXT("memory " << memory) {
      BroydenSolver<double>::Options options;
      options.memory = memory;
      options.max_iterations = 500;
      Matrix<double> z = Matrix<double>::Zero(20, 3);
      const Summary s = testing::SolveAndCheck<BroydenSolver, double>(options, map, z, 1e-10);
      BOOST_TEST((z.col(0) - map.Solution()).norm() <= 1e-10 / (1 - 0.9) * 1.01);
      if (memory <= 2) BOOST_TEST(s.iterations > memory);
    }
  }
}

BOOST_AUTO_TEST_CASE(broyden_beats_picard_on_ill_conditioned_contraction) {
  const Index n = 30;
  testing::AffineMap<double> map(testing::RandomSpd<double>(n, -0.5, 0.95, 5),
                                 testing::RandomMatrix<double>(n, 1, 6));
  PicardSolver<double>::Options picard_options;
  picard_options.max_iterations = 5000;
  picard_options.max_stall_iterations = 0;
  Matrix<double> zp = Matrix<double>::Zero(n, 2);
  const Summary picard = testing::SolveAndCheck<PicardSolver, double>(picard_options, map, zp, 1e-10);
  BroydenSolver<double>::Options options;
  options.max_iterations = 5000;
  Matrix<double> zb = Matrix<double>::Zero(n, 2);
  const Summary broyden = testing::SolveAndCheck<BroydenSolver, double>(options, map, zb, 1e-10);
  BOOST_TEST_MESSAGE("picard " << picard.iterations << " iterations, broyden " << broyden.iterations);
  BOOST_TEST(3 * broyden.iterations < picard.iterations);
}

BOOST_AUTO_TEST_CASE(broyden_one_evaluation_per_iteration_without_guard) {
  testing::AffineMap<double> map(testing::RandomMatrixWithNorm<double>(8, 8, 0.9, 7),
                                 testing::RandomMatrix<double>(8, 1, 8));
  Matrix<double> z = Matrix<double>::Zero(8, 2);
  const Summary s = testing::SolveAndCheck<BroydenSolver, double>(
      BroydenSolver<double>::Options(), map, z, 1e-10);
  BOOST_TEST(s.function_evaluations == s.iterations + 1);
  BOOST_TEST(s.solver == "broyden");
}

BOOST_AUTO_TEST_CASE(residual_guard_rescues_far_starts_per_sample) {
  // g(z) = -atan(z): full secant steps overshoot from |z0| >~ 1.4 and cycle.
  // A batch mixes near and far starts; the batched residual guard backtracks
  // towards the safe step only where needed and every sample converges.
  testing::AtanMap<double> map(3);
  Matrix<double> z0(3, 4);
  z0.col(0).setConstant(0.5);
  z0.col(1).setConstant(3.0);
  z0.col(2).setConstant(-10.0);
  z0.col(3) << 30.0, -2.0, 0.1;
  BroydenSolver<double>::Options options;
  options.residual_factor = 1.0;
  options.max_iterations = 100;
  Matrix<double> z = z0;
  const Summary s = testing::SolveAndCheck<BroydenSolver, double>(options, map, z, 1e-10);
  BOOST_TEST(z.cwiseAbs().maxCoeff() <= 1e-9);  // the only root is 0
  BOOST_TEST(s.function_evaluations > s.iterations + 1);  // it did backtrack

  // Without the guard the Picard fallback rescues them (it restarts a sample
  // from its best iterate with plain steps when its full steps make no
  // progress) ...
  options.residual_factor = 0.0;
  z = z0;
  testing::SolveAndCheck<BroydenSolver, double>(options, map, z, 1e-10);
  BOOST_TEST(z.cwiseAbs().maxCoeff() <= 1e-9);

  // ... and without the fallback too the far samples do not converge; that
  // is reported honestly, at their best iterate.
  options.progress_window = 0;
  options.warmup_iterations = 0;
  z = z0;
  const Summary full = BroydenSolver<double>(options).Solve(map, z);
  BOOST_TEST(!full.IsConverged());
  BOOST_TEST(full.sample_status[0] == TerminationType::kConverged);
  const Vector<double> r0 = Residuals(map, z0), r = Residuals(map, z);
  for (Index b = 0; b < 4; ++b) {
    BOOST_TEST(z.col(b).allFinite());
    BOOST_TEST(r(b) <= r0(b));
    BOOST_TEST(r(b) == full.sample_residual[b], boost::test_tools::tolerance(1e-12));
  }
}

BOOST_AUTO_TEST_CASE(residual_guard_limits_and_float) {
  testing::AtanMap<float> map(2);
  Matrix<float> z = Matrix<float>::Constant(2, 3, 8.0f);
  z.col(1).setConstant(-0.3f);
  BroydenSolver<float>::Options options;
  options.residual_factor = 1.0;
  options.max_backtracks = 2;
  options.backtrack_factor = 0.3;
  options.max_iterations = 100;
  testing::SolveAndCheck<BroydenSolver, float>(options, map, z, 1e-5);
}

BOOST_AUTO_TEST_CASE(converged_samples_stop_changing) {
  const Index n = 10;
  testing::AffineMap<double> inner(testing::RandomMatrixWithNorm<double>(n, n, 0.9, 12),
                                   testing::RandomMatrix<double>(n, 1, 13));
  testing::ColumnRecorderMap<double> map(inner, 0);
  const Vector<double> start = inner.Solution();  // easy: already at the fixed point
  for (double residual_factor : {0.0, 1.0}) {
    Matrix<double> z(n, 2);
    z.col(0) = start;
    z.col(1) = testing::RandomMatrix<double>(n, 1, 14, 10.0);  // hard: far away
    BroydenSolver<double>::Options options;
    options.residual_factor = residual_factor;
    const Summary s = BroydenSolver<double>(options).Solve(map, z);
    BOOST_TEST(s.IsConverged());
    BOOST_TEST(s.sample_iterations[0] == 0);
    BOOST_TEST(s.sample_iterations[1] > 1);
    for (const Vector<double>& state : map.states()) BOOST_TEST((state - start).norm() == 0.0);
    BOOST_TEST((z.col(0) - start).norm() == 0.0);
  }
}

// The fast-contraction rule (testing::CheckFastContractionRule, solver_checks.h):
// H restarts from the newest pair where the map contracts 10x per step.
BOOST_AUTO_TEST_CASE(fast_contraction_restarts_from_the_newest_pair) {
  testing::CheckFastContractionRule<BroydenSolver>(20);
}

BOOST_AUTO_TEST_CASE(options_validation_names_field) {
  auto expect = [](BroydenSolver<double>::Options o, const std::string& field) {
    BOOST_TEST_CONTEXT(field) {
      std::string error;
      BOOST_TEST(!o.IsValid(&error));
      BOOST_TEST(error.find(field) != std::string::npos);
      BOOST_CHECK_EXCEPTION(BroydenSolver<double>{o}, std::invalid_argument,
                            [&](const std::invalid_argument& e) {
                              return std::string(e.what()).find(field) != std::string::npos &&
                                     std::string(e.what()).find("broyden") != std::string::npos;
                            });
    }
  };
  BroydenSolver<double>::Options o;
  std::string error;
  BOOST_TEST(o.IsValid(&error));
  { auto b = o; b.memory = 0; expect(b, "memory"); }
  { auto b = o; b.fast_contraction = 1.0; expect(b, "fast_contraction"); }
  { auto b = o; b.fast_contraction = std::nan(""); expect(b, "fast_contraction"); }
  { auto b = o; b.max_backtracks = -1; expect(b, "max_backtracks"); }
  { auto b = o; b.backtrack_factor = 1.0; expect(b, "backtrack_factor"); }
  { auto b = o; b.backtrack_factor = 0.0; expect(b, "backtrack_factor"); }
  { auto b = o; b.sufficient_decrease = 1.5; expect(b, "sufficient_decrease"); }
  { auto b = o; b.sufficient_decrease = -0.1; expect(b, "sufficient_decrease"); }
  { auto b = o; b.relative_tolerance = -1; expect(b, "relative_tolerance"); }
  { auto b = o; b.divergence_threshold = 1; expect(b, "divergence_threshold"); }
}
