#define BOOST_TEST_MODULE anderson
#include <boost/test/unit_test.hpp>

#include <implicit/core/digits.h>
#include <implicit/core/energy_maps.h>
#include <implicit/layers/hopfield.h>
#include <implicit/solvers/anderson.h>
#include <implicit/solvers/picard.h>

#include "support/solver_checks.h"
#include "support/solver_test_maps.h"
#include "support/test_problems.h"

#include <cmath>

using namespace implicit;
using implicit::testing::CosMap;
using implicit::testing::Residuals;

BOOST_AUTO_TEST_CASE(anderson_solves_standard_problems_double) {
  AndersonSolver<double>::Options options;
  options.max_iterations = 200;
  testing::CheckSolvesStandardProblems<AndersonSolver, double>(options, 1e-10);
}

BOOST_AUTO_TEST_CASE(anderson_solves_standard_problems_float) {
  AndersonSolver<float>::Options options;
  options.max_iterations = 200;
  testing::CheckSolvesStandardProblems<AndersonSolver, float>(options, 1e-4);
}

BOOST_AUTO_TEST_CASE(anderson_variants_converge) {
  // Memory 1, damped mixing, large memory, no ridge: all reach the tolerance.
  for (int memory : {1, 3, 20}) {
    for (double mixing : {0.5, 1.0}) {
      for (double ridge : {0.0, 1e-10, 1e-6}) {
        BOOST_TEST_CONTEXT("memory " << memory << " mixing " << mixing << " ridge " << ridge) {
          AndersonSolver<double>::Options options;
          options.memory = memory;
          options.mixing = mixing;
          options.ridge = ridge;
          options.max_iterations = 300;
          testing::AffineMap<double> map(testing::RandomMatrixWithNorm<double>(10, 10, 0.8, 3),
                                         testing::RandomMatrix<double>(10, 1, 4));
          Matrix<double> z = Matrix<double>::Zero(10, 3);
          testing::SolveAndCheck<AndersonSolver, double>(options, map, z, 1e-10);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(anderson_beats_picard_on_ill_conditioned_contraction) {
  // Symmetric A with spectrum in [-0.5, 0.95]: spectral radius = |A| = 0.95,
  // so Picard's error shrinks by only 0.95 per iteration.
  const Index n = 30, B = 3;
  testing::AffineMap<double> map(testing::RandomSpd<double>(n, -0.5, 0.95, 5),
                                 testing::RandomMatrix<double>(n, 1, 6));
  PicardSolver<double>::Options picard_options;
  picard_options.max_iterations = 5000;
  picard_options.max_stall_iterations = 0;
  Matrix<double> zp = Matrix<double>::Zero(n, B);
  const Summary picard =
      testing::SolveAndCheck<PicardSolver, double>(picard_options, map, zp, 1e-10);

  AndersonSolver<double>::Options options;
  options.max_iterations = 5000;
  Matrix<double> za = Matrix<double>::Zero(n, B);
  const Summary anderson = testing::SolveAndCheck<AndersonSolver, double>(options, map, za, 1e-10);
  BOOST_TEST_MESSAGE("picard " << picard.iterations << " iterations, anderson "
                               << anderson.iterations);
  BOOST_TEST(anderson.iterations < picard.iterations);
  BOOST_TEST(3 * anderson.iterations < picard.iterations);
  // Same fixed point.
  BOOST_TEST((za - zp).norm() <= 1e-8);
}

// The predicted-gain gate (max_predicted_residual) only replaces proposals by
// plain steps: with any threshold Anderson reaches the same fixed point, the
// gate never costs an evaluation (one per iteration on a map without an
// energy, whose guard accepts every trial here); with the gate off (1) every
// iteration after the first takes an accelerated step, with a strict one
// (0.1) some are plain.
BOOST_AUTO_TEST_CASE(predicted_gain_gate_takes_plain_steps_only) {
  const Index n = 30, B = 3;
  testing::AffineMap<double> map(testing::RandomSpd<double>(n, -0.5, 0.99, 15),
                                 testing::RandomMatrix<double>(n, 1, 16));
  Matrix<double> reference;
  for (double threshold : {1.0, 0.9, 0.5, 0.1}) {
    BOOST_TEST_CONTEXT("max_predicted_residual " << threshold) {
      AndersonSolver<double>::Options options;
      options.max_iterations = 5000;
      options.max_predicted_residual = threshold;
      options.fast_contraction = 0.0;  // the gate alone decides
      options.residual_factor = 0.0;   // accept every trial: steps are the gate's choice
      options.warmup_iterations = 0;   // and no Picard fallback
      options.progress_window = 0;
      Matrix<double> z = Matrix<double>::Zero(n, B);
      const Summary s = testing::SolveAndCheck<AndersonSolver, double>(options, map, z, 1e-10);
      int accelerated = 0, steps = 0;
      for (Index b = 0; b < B; ++b) {
        BOOST_TEST(s.sample_evaluations[b] == s.sample_iterations[b] + 1);
        accelerated += s.sample_accelerated_steps[b];
        steps += s.sample_iterations[b] - 1;  // the first step has no history
      }
      if (threshold == 1.0) {
        reference = z;
        BOOST_TEST(accelerated == steps);
      } else {
        // |z - z*| <= |g| / (1 - 0.99) per column, for both solutions.
        BOOST_TEST((z - reference).norm() <= 2 * std::sqrt(double(B)) * 1e-10 / 0.01);
      }
      if (threshold == 0.1) BOOST_TEST(accelerated < steps);
    }
  }
}

// The fast-contraction rule (testing::CheckFastContractionRule, solver_checks.h).
BOOST_AUTO_TEST_CASE(fast_contraction_cuts_the_history_to_the_newest_pair) {
  testing::CheckFastContractionRule<AndersonSolver>(5);
}

BOOST_AUTO_TEST_CASE(anderson_one_evaluation_per_iteration) {
  testing::AffineMap<double> map(testing::RandomMatrixWithNorm<double>(8, 8, 0.9, 7),
                                 testing::RandomMatrix<double>(8, 1, 8));
  Matrix<double> z = Matrix<double>::Zero(8, 2);
  const Summary s = testing::SolveAndCheck<AndersonSolver, double>(
      AndersonSolver<double>::Options(), map, z, 1e-10);
  BOOST_TEST(s.function_evaluations == s.iterations + 1);
  BOOST_TEST(s.solver == "anderson");
}

BOOST_AUTO_TEST_CASE(anderson_max_iterations_reported_honestly) {
  testing::AffineMap<double> map(testing::RandomMatrixWithNorm<double>(8, 8, 0.99, 9),
                                 testing::RandomMatrix<double>(8, 1, 10));
  AndersonSolver<double>::Options options;
  options.max_iterations = 3;
  options.absolute_tolerance = 1e-14;
  testing::CallbackLog log;
  Matrix<double> z = Matrix<double>::Zero(8, 2);
  const Vector<double> r0 = Residuals(map, z);
  const Summary s = AndersonSolver<double>(testing::Instrumented(options, &log)).Solve(map, z);
  BOOST_TEST(s.termination_type == TerminationType::kMaxIterations);
  BOOST_TEST(s.iterations == 3);
  testing::CheckSummaryConsistent(s, testing::Instrumented(options, &log), 2, log);
  const Vector<double> r = Residuals(map, z);
  for (Index b = 0; b < 2; ++b) {
    BOOST_TEST(s.sample_status[b] == TerminationType::kMaxIterations);
    // Returned at the best iterate: its residual is the reported one, <= initial.
    BOOST_TEST(r(b) == s.sample_residual[b], boost::test_tools::tolerance(1e-12));
    BOOST_TEST(r(b) <= r0(b));
  }
}

BOOST_AUTO_TEST_CASE(converged_samples_stop_changing) {
  const Index n = 10;
  testing::AffineMap<double> inner(testing::RandomMatrixWithNorm<double>(n, n, 0.9, 12),
                                   testing::RandomMatrix<double>(n, 1, 13));
  testing::ColumnRecorderMap<double> map(inner, 0);
  Matrix<double> z(n, 2);
  z.col(0) = inner.Solution();  // easy: already at the fixed point
  z.col(1) = testing::RandomMatrix<double>(n, 1, 14, 10.0);  // hard: far away
  const Vector<double> start = z.col(0);
  AndersonSolver<double>::Options options;
  options.absolute_tolerance = 1e-8;
  const Summary s = AndersonSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged());
  BOOST_TEST(s.sample_iterations[0] == 0);
  BOOST_TEST(s.sample_iterations[1] > 1);
  BOOST_TEST(map.states().size() > 2u);
  for (const Vector<double>& state : map.states()) BOOST_TEST((state - start).norm() == 0.0);
  BOOST_TEST((z.col(0) - start).norm() == 0.0);
  BOOST_TEST(Residuals(inner, z).maxCoeff() <= 1e-8);
}

BOOST_AUTO_TEST_CASE(rank_deficient_history_repeated_directions) {
  // Started from a constant vector, every iterate of f(z) = cos(z) is a
  // multiple of the ones vector: dG has rank one while k > 1 pairs are stored.
  for (double ridge : {0.0, 1e-10}) {
    for (int memory : {2, 5}) {
      BOOST_TEST_CONTEXT("ridge " << ridge << " memory " << memory) {
        CosMap<double> map(6);
        Matrix<double> z = Matrix<double>::Constant(6, 2, 0.2);
        z.col(1).setConstant(-1.0);
        AndersonSolver<double>::Options options;
        options.ridge = ridge;
        options.memory = memory;
        const Summary s = AndersonSolver<double>(options).Solve(map, z);
        BOOST_TEST_INFO(s.BriefReport() << " " << s.message);
        BOOST_TEST(z.allFinite());
        BOOST_TEST(s.IsConverged());
        BOOST_TEST(Residuals(map, z).maxCoeff() <= options.absolute_tolerance);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(rank_deficient_history_low_dimension_float) {
  // n = 2 < memory: any 3 stored differences are linearly dependent.
  CosMap<float> map(2, 0.9f, 0.1f);
  Matrix<float> z(2, 3);
  z << 0.0f, 1.0f, -2.0f, 3.0f, 0.5f, 2.0f;
  for (double ridge : {0.0, 1e-10}) {
    Matrix<float> zs = z;
    AndersonSolver<float>::Options options;
    options.memory = 8;
    options.ridge = ridge;
    options.absolute_tolerance = 1e-5;
    const Summary s = AndersonSolver<float>(options).Solve(map, zs);
    BOOST_TEST_INFO(s.BriefReport() << " " << s.message);
    BOOST_TEST(zs.allFinite());
    BOOST_TEST(s.IsConverged());
    BOOST_TEST(Residuals(map, zs).maxCoeff() <= 1e-5);
  }
}

BOOST_AUTO_TEST_CASE(relative_ridge_reaches_small_residuals) {
  // A ridge as large as 1e-4 still lets Anderson reach 1e-13, because it is
  // relative to the history (an absolute one would dominate near convergence).
  testing::AffineMap<double> map(testing::RandomMatrixWithNorm<double>(20, 20, 0.95, 15),
                                 testing::RandomMatrix<double>(20, 1, 16));
  AndersonSolver<double>::Options options;
  options.ridge = 1e-4;
  options.max_iterations = 400;
  Matrix<double> z = Matrix<double>::Zero(20, 2);
  testing::SolveAndCheck<AndersonSolver, double>(options, map, z, 1e-13);
}

BOOST_AUTO_TEST_CASE(restart_falls_back_instead_of_cycling_on_hopfield_retrieval) {
  // Modern Hopfield retrieval of 100 digits with the bottom half hidden, beta 4.
  // Undamped Anderson overshoots on some queries; restarting from the best
  // iterate and re-extrapolating at once repeated the same bad step until the
  // stall limit (99/100 converged). With the fallback to plain CCCP steps every
  // query reaches a fixed point, as Picard's do.
  const Matrix<double> patterns =
      LoadDigits(std::string(IMPLICIT_DATA_DIR) + "/digits.csv.gz").Scaled().leftCols(100);
  ModernHopfieldEnergy<double>::Options energy_options;
  energy_options.beta = 4.0;
  ModernHopfieldEnergy<double> energy(patterns, energy_options);
  CccpMap<double> map(energy);
  Matrix<double> z = patterns;
  z.bottomRows(32).setZero();
  AndersonSolver<double>::Options options;
  options.max_iterations = 200;
  const Summary summary = AndersonSolver<double>(options).Solve(map, z);
  BOOST_TEST(summary.num_converged() == 100, summary.BriefReport());
  BOOST_TEST(Residuals(map, z).maxCoeff() <= options.absolute_tolerance);
}

BOOST_AUTO_TEST_CASE(options_validation_names_field) {
  auto expect = [](AndersonSolver<double>::Options o, const std::string& field) {
    BOOST_TEST_CONTEXT(field) {
      std::string error;
      BOOST_TEST(!o.IsValid(&error));
      BOOST_TEST(error.find(field) != std::string::npos);
      BOOST_CHECK_EXCEPTION(AndersonSolver<double>{o}, std::invalid_argument,
                            [&](const std::invalid_argument& e) {
                              return std::string(e.what()).find(field) != std::string::npos &&
                                     std::string(e.what()).find("anderson") != std::string::npos;
                            });
    }
  };
  AndersonSolver<double>::Options o;
  std::string error;
  BOOST_TEST(o.IsValid(&error));
  { auto b = o; b.memory = 0; expect(b, "memory"); }
  { auto b = o; b.mixing = 0; expect(b, "mixing"); }
  { auto b = o; b.mixing = -1; expect(b, "mixing"); }
  { auto b = o; b.ridge = -1e-3; expect(b, "ridge"); }
  { auto b = o; b.residual_factor = 0.5; expect(b, "residual_factor"); }
  { auto b = o; b.condition_limit = 1.0; expect(b, "condition_limit"); }
  { auto b = o; b.condition_limit = -1.0; expect(b, "condition_limit"); }
  { auto b = o; b.max_predicted_residual = 0.0; expect(b, "max_predicted_residual"); }
  { auto b = o; b.max_predicted_residual = 1.5; expect(b, "max_predicted_residual"); }
  { auto b = o; b.max_predicted_residual = std::nan(""); expect(b, "max_predicted_residual"); }
  { auto b = o; b.fast_contraction = 1.0; expect(b, "fast_contraction"); }
  { auto b = o; b.fast_contraction = -0.1; expect(b, "fast_contraction"); }
  { auto b = o; b.fast_contraction = std::nan(""); expect(b, "fast_contraction"); }
  { auto b = o; b.absolute_tolerance = -1; expect(b, "absolute_tolerance"); }
  { auto b = o; b.max_iterations = -1; expect(b, "max_iterations"); }
  { auto b = o; b.residual_factor = 0.0; BOOST_TEST(b.IsValid(&error)); }
}
