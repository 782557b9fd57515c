#define BOOST_TEST_MODULE gradient_flow
#include <boost/test/unit_test.hpp>

#include <implicit/core/energy_maps.h>
#include <implicit/solvers/gradient_flow.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "support/h2_solver_problems.h"
#include "support/test_problems.h"

using namespace implicit;

namespace {

// A quadratic energy whose dynamics move along 2 grad E (as the Energy
// Transformer's move along dE/dg instead of dE/dx).
class DoubledDescent : public Energy<double> {
 public:
  explicit DoubledDescent(const Energy<double>& inner) : inner_(inner) {}
  Index dimension() const override { return inner_.dimension(); }
  void Value(ConstMatrixRef<double> x, VectorRef<double> v) const override { inner_.Value(x, v); }
  void Gradient(ConstMatrixRef<double> x, MatrixRef<double> g) const override {
    inner_.Gradient(x, g);
  }
  void HessianVectorProduct(ConstMatrixRef<double> x, ConstMatrixRef<double> v,
                            MatrixRef<double> out) const override {
    inner_.HessianVectorProduct(x, v, out);
  }
  void DescentDirection(ConstMatrixRef<double> x, MatrixRef<double> out) const override {
    inner_.Gradient(x, out);
    out *= 2.0;
  }

 private:
  const Energy<double>& inner_;
};

}  // namespace

BOOST_AUTO_TEST_CASE(converges_at_the_rate_of_the_flow) {
  // x <- x - a (H x - c) contracts |grad E| by max |1 - a lambda| per step.
  const Index n = 6, B = 3;
  const double lo = 0.5, hi = 1.5, step = 0.8;
  testing::QuadraticEnergy<double> energy(testing::RandomSpd<double>(n, lo, hi, 1),
                                          testing::RandomMatrix<double>(n, 1, 2));
  EnergyRootMap<double> map(energy);
  Matrix<double> z = testing::RandomMatrix<double>(n, B, 3);
  const auto r0 = testing::IndependentResiduals(map, z);
  GradientFlowSolver<double>::Options options;
  options.step_size = step;
  options.absolute_tolerance = 1e-10;
  Summary s = GradientFlowSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged(), s.FullReport());
  const double rate = std::max(std::abs(1 - step * lo), std::abs(1 - step * hi));
  for (Index b = 0; b < B; ++b) {
    BOOST_TEST((z.col(b) - energy.Minimiser()).norm() <= 1e-9);
    const double bound = std::ceil(std::log(1e-10 / r0[b]) / std::log(rate));
    BOOST_TEST(s.sample_iterations[b] <= bound + 1);
  }
  for (double r : testing::IndependentResiduals(map, z)) BOOST_TEST(r <= 1e-10);
}

BOOST_AUTO_TEST_CASE(works_in_float) {
  const Index n = 6, B = 2;
  testing::LogCoshEnergy<float> energy(testing::RandomMatrixWithNorm<float>(n, n, 1.0, 5),
                                       testing::RandomMatrix<float>(n, 1, 6), 0.5f);
  EnergyRootMap<float> map(energy);
  Matrix<float> z = testing::RandomMatrix<float>(n, B, 7);
  GradientFlowSolver<float>::Options options;
  options.step_size = 1.0;
  options.absolute_tolerance = 1e-5;
  options.check_monotone = true;
  Summary s = GradientFlowSolver<float>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged(), s.FullReport());
  for (double r : testing::IndependentResiduals(map, z)) BOOST_TEST(r <= 1e-5);
}

BOOST_AUTO_TEST_CASE(uses_the_energy_descent_direction) {
  // Moving along 2 grad E with step a is the same flow as grad E with step 2a.
  const Index n = 5, B = 2;
  testing::QuadraticEnergy<double> quadratic(testing::RandomSpd<double>(n, 0.5, 1.5, 11),
                                             testing::RandomMatrix<double>(n, 1, 12));
  DoubledDescent doubled(quadratic);
  EnergyRootMap<double> map_doubled(doubled), map_plain(quadratic);
  Matrix<double> z1 = testing::RandomMatrix<double>(n, B, 13), z2 = z1;
  GradientFlowSolver<double>::Options options;
  options.absolute_tolerance = 1e-10;
  options.step_size = 0.3;
  Summary s1 = GradientFlowSolver<double>(options).Solve(map_doubled, z1);
  options.step_size = 0.6;
  Summary s2 = GradientFlowSolver<double>(options).Solve(map_plain, z2);
  BOOST_TEST(s1.IsConverged());
  BOOST_TEST(s2.IsConverged());
  BOOST_TEST(s1.iterations == s2.iterations);
  BOOST_TEST((z1 - z2).norm() <= 1e-12);
}

BOOST_AUTO_TEST_CASE(energy_never_increases_and_increases_are_reported) {
  const Index n = 5, B = 3;
  testing::QuadraticEnergy<double> inner(testing::RandomSpd<double>(n, 0.5, 1.5, 21),
                                         testing::RandomMatrix<double>(n, 1, 22));
  testing::SpyEnergy<double> energy(inner);
  EnergyRootMap<double> map(energy);
  GradientFlowSolver<double>::Options options;
  options.check_monotone = true;
  options.step_size = 1.0;  // a descent step for eigenvalues < 2
  options.absolute_tolerance = 1e-10;
  Matrix<double> z = testing::RandomMatrix<double>(n, B, 23);
  Summary s = GradientFlowSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged());
  BOOST_TEST(s.message.find("energy increased") == std::string::npos);
  // Every state the solver touched (in order) has energy <= the previous one's.
  Vector<double> previous, current(B);
  for (const Matrix<double>& state : energy.states) {
    inner.Value(state, current);
    if (previous.size() == B) {
      for (Index b = 0; b < B; ++b) BOOST_TEST(current(b) <= previous(b) + 1e-12);
    }
    previous = current;
  }

  // Step 3 with eigenvalues up to 1.5: |1 - 3 lambda| reaches 3.5, E grows.
  testing::QuadraticEnergy<double> stiff(testing::RandomSpd<double>(n, 0.5, 1.5, 24),
                                         testing::RandomMatrix<double>(n, 1, 25));
  EnergyRootMap<double> stiff_map(stiff);
  Matrix<double> z0 = testing::RandomMatrix<double>(n, B, 26), w = z0;
  options.step_size = 3.0;
  Summary bad = GradientFlowSolver<double>(options).Solve(stiff_map, w);
  const auto r0 = testing::IndependentResiduals(stiff_map, z0);
  const auto r = testing::IndependentResiduals(stiff_map, w);
  for (Index b = 0; b < B; ++b) {
    BOOST_TEST(bad.sample_status[b] == TerminationType::kFailure);
    BOOST_TEST(r[b] <= r0[b]);  // returned at its best iterate
  }
  BOOST_TEST(bad.termination_type == TerminationType::kFailure);
  BOOST_TEST(bad.message.find("energy increased for 3 samples") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(needs_an_energy_and_valid_options) {
  testing::AffineMap<double> map(testing::RandomMatrixWithNorm<double>(4, 4, 0.5, 1),
                                 testing::RandomMatrix<double>(4, 1, 2));
  Matrix<double> z = Matrix<double>::Zero(4, 2);
  try {
    GradientFlowSolver<double>().Solve(map, z);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "gradient_flow needs an energy; this map has none");
  }
  GradientFlowSolver<double>::Options options;
  options.step_size = 0.0;
  try {
    GradientFlowSolver<double> solver(options);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("step_size") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(summary_counts_and_converged_samples_stop) {
  const Index n = 5, B = 3;
  testing::QuadraticEnergy<double> inner(testing::RandomSpd<double>(n, 0.5, 1.5, 31),
                                         testing::RandomMatrix<double>(n, 1, 32));
  testing::SpyEnergy<double> energy(inner);
  EnergyRootMap<double> root(energy);
  testing::SpyMap<double> map(root);
  Matrix<double> z = testing::RandomMatrix<double>(n, B, 33);
  const Vector<double> solution = inner.Minimiser();
  z.col(1) = solution;
  for (bool monotone : {false, true}) {
    energy.values_calls = energy.descent_calls = 0;
    energy.states.clear();
    map.evaluations = 0;
    map.states.clear();
    Matrix<double> w = z;
    GradientFlowSolver<double>::Options options;
    options.step_size = 1.0;
    options.check_monotone = monotone;
    options.record_trace = true;
    options.absolute_tolerance = 1e-11;
    Summary s = GradientFlowSolver<double>(options).Solve(map, w);
    BOOST_TEST(s.IsConverged());
    BOOST_TEST(s.function_evaluations ==
               map.evaluations + energy.descent_calls + energy.values_calls);
    BOOST_TEST(map.evaluations == s.iterations + 1);
    BOOST_TEST(energy.values_calls == (monotone ? s.iterations + 1 : 0));
    BOOST_TEST(s.trace.size() == static_cast<std::size_t>(s.iterations + 1));
    BOOST_TEST(s.sample_iterations[1] == 0);
    BOOST_TEST(testing::ColumnNeverChanged(map.states, 1, solution));
    BOOST_TEST(testing::ColumnNeverChanged(energy.states, 1, solution));
    BOOST_TEST((w.col(1).array() == solution.array()).all());
  }
}
