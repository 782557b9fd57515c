#define BOOST_TEST_MODULE lbfgs
#include <boost/test/unit_test.hpp>

#include <implicit/core/energy_maps.h>
#include <implicit/solvers/lbfgs.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "support/h2_solver_problems.h"
#include "support/test_problems.h"

using namespace implicit;

namespace {

template <typename Scalar>
testing::QuadraticEnergy<Scalar> MakeQuadratic(Index n, unsigned seed) {
  return testing::QuadraticEnergy<Scalar>(testing::RandomSpd<Scalar>(n, 0.2, 4.0, seed),
                                          testing::RandomMatrix<Scalar>(n, 1, seed + 1));
}

template <typename Scalar>
testing::LogCoshEnergy<Scalar> MakeLogCosh(Index n, unsigned seed) {
  return testing::LogCoshEnergy<Scalar>(testing::RandomMatrixWithNorm<Scalar>(n, n, 1.0, seed),
                                        testing::RandomMatrix<Scalar>(n, 1, seed + 1),
                                        Scalar(0.5));
}

}  // namespace

BOOST_AUTO_TEST_CASE(minimises_a_quadratic) {
  const Index n = 7, B = 3;
  auto energy = MakeQuadratic<double>(n, 1);
  EnergyRootMap<double> map(energy);
  Matrix<double> z = testing::RandomMatrix<double>(n, B, 3);
  LbfgsSolver<double>::Options options;
  options.absolute_tolerance = 1e-10;  // no floor: below E's rounding the guard uses |r|
  Summary s = LbfgsSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged(), s.FullReport());
  // |z - z*| <= |grad E| / lambda_min(H) = 5e-10.
  for (Index b = 0; b < B; ++b) BOOST_TEST((z.col(b) - energy.Minimiser()).norm() <= 5e-10);
  // For EnergyRootMap the residual is |grad E|, computed here independently.
  Matrix<double> grad(n, B);
  energy.Gradient(z, grad);
  for (Index b = 0; b < B; ++b) {
    BOOST_TEST(grad.col(b).norm() <= 1e-10);
    BOOST_TEST(std::abs(s.sample_residual[b] - grad.col(b).norm()) <= 1e-14);
  }
}

BOOST_AUTO_TEST_CASE(minimises_a_convex_energy_in_float_and_double) {
  const Index n = 6, B = 4;
  auto energy = MakeLogCosh<double>(n, 11);
  EnergyRootMap<double> map(energy);
  Matrix<double> z = 2.0 * testing::RandomMatrix<double>(n, B, 13);
  LbfgsSolver<double>::Options options;
  options.absolute_tolerance = 1e-10;
  Summary s = LbfgsSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged(), s.FullReport());
  for (double r : testing::IndependentResiduals(map, z)) BOOST_TEST(r <= 1e-10);
  // Strictly convex (hess E >= 0.5 I): one minimiser, |z_b - z*| <= 2 |grad E|.
  for (Index b = 1; b < B; ++b) BOOST_TEST((z.col(b) - z.col(0)).norm() <= 1e-8);

  auto energyf = MakeLogCosh<float>(n, 11);
  EnergyRootMap<float> mapf(energyf);
  Matrix<float> zf = 2.0f * testing::RandomMatrix<float>(n, B, 13);
  LbfgsSolver<float>::Options optionsf;
  optionsf.absolute_tolerance = 1e-4;
  Summary sf = LbfgsSolver<float>(optionsf).Solve(mapf, zf);
  BOOST_TEST(sf.IsConverged(), sf.FullReport());
  for (double r : testing::IndependentResiduals(mapf, zf)) BOOST_TEST(r <= 1e-4 * 1.001);
  for (Index b = 0; b < B; ++b) BOOST_TEST((zf.col(b).cast<double>() - z.col(b)).norm() <= 3e-4);
}

BOOST_AUTO_TEST_CASE(needs_an_energy) {
  testing::AffineMap<double> map(testing::RandomMatrixWithNorm<double>(4, 4, 0.5, 1),
                                 testing::RandomMatrix<double>(4, 1, 2));
  Matrix<double> z = Matrix<double>::Zero(4, 2);
  try {
    LbfgsSolver<double>().Solve(map, z);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "lbfgs needs an energy; this map has none");
  }
  LbfgsSolver<double>::Options bad;
  bad.memory = 0;
  BOOST_CHECK_THROW(LbfgsSolver<double>{bad}, std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(residual_is_that_of_the_given_map) {
  // A gradient-step map with step 0.25 has residual 0.25 |grad E|; the
  // minimiser is the same, the reported residual is the map's.
  const Index n = 5, B = 2;
  auto energy = MakeQuadratic<double>(n, 21);
  GradientStepMap<double> map(energy, 0.25);
  Matrix<double> z = Matrix<double>::Zero(n, B);
  LbfgsSolver<double>::Options options;
  options.absolute_tolerance = 5e-9;
  Summary s = LbfgsSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged(), s.FullReport());
  const auto r = testing::IndependentResiduals(map, z);
  Matrix<double> grad(n, B);
  energy.Gradient(z, grad);
  for (Index b = 0; b < B; ++b) {
    BOOST_TEST(std::abs(s.sample_residual[b] - r[b]) <= 1e-15);
    BOOST_TEST(std::abs(r[b] - 0.25 * grad.col(b).norm()) <= 1e-15);
  }
}

BOOST_AUTO_TEST_CASE(summary_counts_every_batched_call) {
  const Index n = 5, B = 3;
  auto inner = MakeLogCosh<double>(n, 31);
  testing::SpyEnergy<double> energy(inner);
  EnergyRootMap<double> root(energy);
  testing::SpyMap<double> map(root);
  Matrix<double> z = testing::RandomMatrix<double>(n, B, 32);
  LbfgsSolver<double>::Options options;
  options.absolute_tolerance = 3e-8;
  options.record_trace = true;
  Summary s = LbfgsSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged());
  // Every batch call is one evaluation of f with E at the same points (the
  // spy map has no fused call: f reaches the energy as a Gradient call, E as a
  // Value call), at least one per iteration plus the start, more when the
  // guard backtracks.
  BOOST_TEST(s.function_evaluations == map.evaluations);
  BOOST_TEST(energy.values_calls == map.evaluations);
  BOOST_TEST(energy.gradient_calls == map.evaluations);
  BOOST_TEST(map.evaluations >= s.iterations + 1);
  BOOST_TEST(s.jacobian_products == 0);
  BOOST_TEST(s.trace.size() == static_cast<std::size_t>(s.iterations + 1));
  // L-BFGS with a line search never increases E; the residual is not monotone.
  BOOST_TEST(s.trace.back().max_residual <= options.absolute_tolerance);
}

BOOST_AUTO_TEST_CASE(samples_are_independent) {
  const Index n = 5, B = 3;
  auto inner = MakeQuadratic<double>(n, 41);
  testing::SpyEnergy<double> energy(inner);
  EnergyRootMap<double> map(energy);
  Matrix<double> z = testing::RandomMatrix<double>(n, B, 42);
  z(2, 0) = std::numeric_limits<double>::infinity();  // sample 0 cannot be evaluated
  const Vector<double> solution = inner.Minimiser();
  z.col(2) = solution;                                  // sample 2 starts converged
  LbfgsSolver<double>::Options options;
  options.absolute_tolerance = 3e-8;
  Summary s = LbfgsSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.sample_status[0] == TerminationType::kNonFinite);
  BOOST_TEST(s.sample_status[1] == TerminationType::kConverged);
  BOOST_TEST(s.sample_status[2] == TerminationType::kConverged);
  BOOST_TEST(s.sample_iterations[2] == 0);
  BOOST_TEST(s.sample_iterations[1] > 0);
  BOOST_TEST(testing::ColumnNeverChanged(energy.states, 2, solution));
  BOOST_TEST((z.col(1) - solution).norm() <= 1.5e-7);
}

BOOST_AUTO_TEST_CASE(iteration_budget) {
  const Index n = 8, B = 2;
  auto energy = MakeQuadratic<double>(n, 51);
  EnergyRootMap<double> map(energy);
  Matrix<double> z = testing::RandomMatrix<double>(n, B, 52);
  LbfgsSolver<double>::Options options;
  options.absolute_tolerance = 1e-300;
  options.max_iterations = 3;
  Summary s = LbfgsSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.termination_type == TerminationType::kMaxIterations);
  BOOST_TEST(s.iterations == 3);
}
