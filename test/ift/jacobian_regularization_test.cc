#define BOOST_TEST_MODULE jacobian_regularization
#include <boost/test/unit_test.hpp>

#include <implicit/core/energy_maps.h>
#include <implicit/core/jacobian_regularization.h>

#include <random>

#include "support/ift_problems.h"
#include "support/test_problems.h"

using namespace implicit;
using namespace implicit::testing;

namespace {

// Exact |J(z_b)|_F^2 per sample from n Jacobian-vector products.
Vector<double> ExactFrobeniusSquared(const FixedPointMap<double>& map, const Matrix<double>& z) {
  const Index n = map.dimension();
  Vector<double> total = Vector<double>::Zero(z.cols());
  Matrix<double> e = Matrix<double>::Zero(n, z.cols()), je(n, z.cols());
  for (Index i = 0; i < n; ++i) {
    e.row(i).setOnes();
    map.JacobianVectorProduct(z, e, je);
    e.row(i).setZero();
    total += je.colwise().squaredNorm().transpose();
  }
  return total;
}

}  // namespace

BOOST_AUTO_TEST_CASE(estimate_is_unbiased) {
  const Index n = 5, B = 2;
  TanhDeqMap<double> map(n, 3, 0.8, 5);
  map.SetInput(RandomMatrix<double>(3, B, 6));
  const Matrix<double> z = SolveTight(map, B);
  const Vector<double> exact = ExactFrobeniusSquared(map, z);
  for (ProbeDistribution d : {ProbeDistribution::kRademacher, ProbeDistribution::kGaussian}) {
    JacobianRegularizationOptions o;
    o.distribution = d;
    o.compute_parameter_gradient = false;
    std::mt19937_64 rng(7);
    const int trials = 4000;
    Vector<double> sum = Vector<double>::Zero(B), sum_sq = Vector<double>::Zero(B);
    for (int k = 0; k < trials; ++k) {
      const JacobianRegularization<double> r = EstimateJacobianFrobeniusNorm(map, z, rng, o);
      sum += r.sample_estimate;
      sum_sq += r.sample_estimate.cwiseAbs2();
      BOOST_TEST(std::abs(r.value - r.sample_estimate.sum()) < 1e-12);
    }
    for (Index b = 0; b < B; ++b) {
      const double mean = sum(b) / trials;
      const double var = sum_sq(b) / trials - mean * mean;
      const double standard_error = std::sqrt(var / trials);
      BOOST_TEST_MESSAGE((d == ProbeDistribution::kRademacher ? "rademacher" : "gaussian")
                         << " sample " << b << ": exact " << exact(b) << ", mean " << mean
                         << " +- " << standard_error);
      BOOST_TEST(std::abs(mean - exact(b)) < 4 * standard_error);
      BOOST_TEST(standard_error > 0.0);
    }
  }
  // Averaging many probes in one call converges to the exact value as well.
  JacobianRegularizationOptions many;
  many.num_probes = 20000;
  many.compute_parameter_gradient = false;
  std::mt19937_64 rng(8);
  const JacobianRegularization<double> r = EstimateJacobianFrobeniusNorm(map, z, rng, many);
  BOOST_TEST(RelativeError(r.sample_estimate, exact) < 0.02);
}

BOOST_AUTO_TEST_CASE(gradients_match_finite_differences_of_the_estimate) {
  // With the probes fixed (same seed), the estimate is a smooth function of
  // theta, z and x; its reported gradients must match central differences.
  const Index n = 5, p = 3, B = 2;
  TanhDeqMap<double> map(n, p, 0.8, 9);
  map.SetInput(RandomMatrix<double>(p, B, 10));
  Matrix<double> z = SolveTight(map, B);
  JacobianRegularizationOptions o;
  o.num_probes = 3;
  o.compute_state_gradient = true;
  o.compute_input_gradient = true;
  auto value = [&] {
    std::mt19937_64 rng(11);
    JacobianRegularizationOptions v = o;
    v.compute_parameter_gradient = v.compute_state_gradient = v.compute_input_gradient = false;
    return static_cast<double>(EstimateJacobianFrobeniusNorm(map, z, rng, v).value);
  };
  std::mt19937_64 rng(11);
  const JacobianRegularization<double> r = EstimateJacobianFrobeniusNorm(map, z, rng, o);
  Vector<double>& theta = map.parameters()->values();
  const Vector<double> fd_theta =
      FiniteDifference(theta.size(), [&](Index i, double d) { theta(i) += d; }, value);
  const Vector<double> fd_z =
      FiniteDifference(z.size(), [&](Index i, double d) { z(i) += d; }, value);
  const Vector<double> fd_x = FiniteDifference(
      p * B,
      [&](Index i, double d) {
        Matrix<double> x = map.input();
        x(i) += d;
        map.SetInput(x);
      },
      value);
  BOOST_TEST(RelativeError(r.parameter_gradient, fd_theta) < 1e-6);
  BOOST_TEST(RelativeError(Eigen::Map<const Vector<double>>(r.state_gradient.data(), z.size()), fd_z) < 1e-6);
  BOOST_TEST(RelativeError(Eigen::Map<const Vector<double>>(r.input_gradient.data(), p * B), fd_x) < 1e-6);
}

BOOST_AUTO_TEST_CASE(energy_map_parameter_gradient) {
  // Gradient-step map of the Hopfield energy: J = I - a hess E; the gradient
  // needs third derivatives of E, taken by differences of the parameter VJP.
  const Index n = 4, B = 2;
  HopfieldEnergy<double> energy(RandomMatrixWithNorm<double>(n, 3, 1.5, 12), 2.0);
  energy.SetInput(RandomMatrix<double>(n, B, 13, 0.5));
  GradientStepMap<double> map(energy, 0.5);
  const Matrix<double> z = SolveTight(map, B);
  JacobianRegularizationOptions o;
  o.num_probes = 2;
  auto value = [&] {
    std::mt19937_64 rng(14);
    JacobianRegularizationOptions v = o;
    v.compute_parameter_gradient = false;
    return static_cast<double>(EstimateJacobianFrobeniusNorm(map, z, rng, v).value);
  };
  std::mt19937_64 rng(14);
  const JacobianRegularization<double> r = EstimateJacobianFrobeniusNorm(map, z, rng, o);
  Vector<double>& theta = energy.parameters()->values();
  const Vector<double> fd =
      FiniteDifference(theta.size(), [&](Index i, double d) { theta(i) += d; }, value);
  BOOST_TEST(RelativeError(r.parameter_gradient, fd) < 1e-6);
  BOOST_TEST(r.state_gradient.size() == 0);  // not requested
}

BOOST_AUTO_TEST_CASE(invalid_options_throw) {
  TanhDeqMap<double> map(3, 1, 0.5, 1);
  map.SetInput(Matrix<double>::Zero(1, 1));
  std::mt19937_64 rng(1);
  const Matrix<double> z = Matrix<double>::Zero(3, 1);
  JacobianRegularizationOptions o;
  o.num_probes = 0;
  try {
    EstimateJacobianFrobeniusNorm(map, z, rng, o);
    BOOST_TEST(false, "no exception");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("num_probes") != std::string::npos);
  }
  o = JacobianRegularizationOptions();
  o.finite_difference_step = -1;
  BOOST_CHECK_THROW(EstimateJacobianFrobeniusNorm(map, z, rng, o), std::invalid_argument);
  BOOST_CHECK_THROW(EstimateJacobianFrobeniusNorm(map, Matrix<double>::Zero(4, 1), rng),
                    std::invalid_argument);
}
