// Energy -> map adapters: fixed points are stationary points, Jacobians are
// I - a hess E (checked against finite differences), and parameter products
// are the energy's scaled by -a.
#define BOOST_TEST_MODULE energy_maps
#include <boost/test/unit_test.hpp>

#include <implicit/core/autodiff_energy.h>
#include <implicit/core/energy_maps.h>
#include <implicit/solvers/picard.h>

#include "support/dual_products.h"
#include "support/test_problems.h"

using namespace implicit;

namespace {
// E(x) = 0.5|x|^2 - Phi(x), Phi(x) = log sum exp(a_i . x) / 1 + theta . x  (convex Phi)
struct SplitEnergy {
  Matrix<double> A;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    using std::exp;
    using std::log;
    Vector<T> s = testing::MatVec(A.cast<T>().transpose(), x);
    const T m = s.maxCoeff();
    T sum(0);
    for (Index i = 0; i < s.size(); ++i) sum += exp(s(i) - m);
    return T(0.5) * x.squaredNorm() - (m + log(sum)) - theta.dot(x);
  }
};

AutoDiffEnergy<SplitEnergy, double> MakeEnergy(Index n) {
  ParameterSet<double> p;
  p.Add("theta", n, 1);
  p.values() = testing::RandomMatrix<double>(n, 1, 9, 0.1);
  return AutoDiffEnergy<SplitEnergy, double>(SplitEnergy{testing::RandomMatrix<double>(n, 7, 8, 0.5)}, n, p);
}
}  // namespace

BOOST_AUTO_TEST_CASE(cccp_step_equals_unit_gradient_step_and_fixed_points_are_stationary) {
  const Index n = 5, B = 3;
  auto energy = MakeEnergy(n);
  CccpMap<double> cccp(energy);
  GradientStepMap<double> step1(energy, 1.0);
  Matrix<double> z = testing::RandomMatrix<double>(n, B, 1), a(n, B), b(n, B);
  cccp.Evaluate(z, a);
  step1.Evaluate(z, b);
  BOOST_TEST((a - b).norm() <= 1e-12);

  PicardSolver<double>::Options options;
  options.absolute_tolerance = 1e-12;
  options.max_iterations = 1000;
  Summary s = PicardSolver<double>(options).Solve(cccp, z);
  BOOST_TEST(s.IsConverged());
  Matrix<double> grad(n, B);
  energy.Gradient(z, grad);
  BOOST_TEST(grad.colwise().norm().maxCoeff() <= 1e-11);  // residual of f is -grad E
}

BOOST_AUTO_TEST_CASE(gradient_step_jacobian_matches_finite_differences) {
  const Index n = 4, B = 2;
  const double a = 0.3, h = 1e-6;
  auto energy = MakeEnergy(n);
  GradientStepMap<double> map(energy, a);
  BOOST_TEST(map.HasSymmetricJacobian());
  BOOST_TEST(map.energy() == &energy);
  Matrix<double> z = testing::RandomMatrix<double>(n, B, 2), v = testing::RandomMatrix<double>(n, B, 3);
  Matrix<double> jv(n, B), vj(n, B), fp(n, B), fm(n, B);
  map.JacobianVectorProduct(z, v, jv);
  map.VectorJacobianProduct(z, v, vj);
  map.Evaluate(z + h * v, fp);
  map.Evaluate(z - h * v, fm);
  BOOST_TEST((jv - (fp - fm) / (2 * h)).norm() <= 1e-7);
  BOOST_TEST((jv - vj).norm() <= 1e-12);  // symmetric

  // d f / d theta: f = z - a grad E, grad E contains -theta, so df/dtheta = a I.
  Vector<double> pv(map.num_parameters());
  map.ParameterVectorJacobianProduct(z, v, pv);
  BOOST_TEST((pv - a * v.rowwise().sum()).norm() <= 1e-10);
}

BOOST_AUTO_TEST_CASE(invalid_step_is_rejected) {
  auto energy = MakeEnergy(3);
  BOOST_CHECK_THROW(GradientStepMap<double>(energy, 0.0), std::invalid_argument);
  BOOST_CHECK_THROW(GradientStepMap<double>(energy, -1.0), std::invalid_argument);
}
