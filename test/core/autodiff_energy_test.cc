// Automatic derivatives of user energies agree with central finite differences;
// the one-pass GradientAndValue / CccpUpdateAndValue agree with the separate
// calls, and subsets of a batch evaluate like those columns.
#define BOOST_TEST_MODULE autodiff_energy
#include <boost/test/unit_test.hpp>

#include <implicit/core/autodiff_energy.h>
#include <implicit/core/energy_maps.h>

#include "support/fused_energy_checks.h"
#include "support/test_problems.h"

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;

namespace {

// Log-sum-exp retrieval energy (modern Hopfield) with a learnable beta.
struct LseEnergy {
  Matrix<double> X;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    using std::exp;
    using std::log;
    const T beta = theta(0);
    Vector<T> s(X.cols());
    for (Index i = 0; i < X.cols(); ++i) s(i) = beta * X.col(i).cast<T>().dot(x);
    const T m = s.maxCoeff();
    T sum(0);
    for (Index i = 0; i < s.size(); ++i) sum += exp(s(i) - m);
    return T(0.5) * x.squaredNorm() - (m + log(sum)) / beta;
  }
};

// Quartic coupling with a parameter matrix: E = sum_i (W x)_i^4 / 4 + a^T x.
// W * x is an Eigen matrix-vector product in the dual types on purpose: the one
// place that covers Eigen's product kernels on ceres::Jet and on the nested
// Jet<DirectionalJet> (the other reference functors use plain loops, which
// compile much faster; see support/dual_products.h).
struct QuarticEnergy {
  Index n;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    Eigen::Map<const Matrix<T>> W(theta.data(), n, n);
    Vector<T> y = W * x;
    T e(0);
    for (Index i = 0; i < n; ++i) e += y(i) * y(i) * y(i) * y(i) / T(4);
    for (Index i = 0; i < n; ++i) e += theta(n * n + i) * x(i);
    return e;
  }
};

template <typename EnergyT>
void CheckAgainstFiniteDifferences(EnergyT& energy, const Matrix<double>& x, double tol) {
  const Index n = x.rows(), B = x.cols();
  Matrix<double> grad(n, B), hv(n, B);
  const Matrix<double> v = implicit::testing::RandomMatrix<double>(n, B, 7);
  energy.Gradient(x, grad);
  energy.HessianVectorProduct(x, v, hv);
  Vector<double> e_plus(B), e_minus(B);
  const double h = 1e-5;
  for (Index i = 0; i < n; ++i) {
    Matrix<double> xp = x, xm = x;
    xp.row(i).array() += h;
    xm.row(i).array() -= h;
    energy.Value(xp, e_plus);
    energy.Value(xm, e_minus);
    for (Index b = 0; b < B; ++b) {
      BOOST_TEST(grad(i, b) == (e_plus(b) - e_minus(b)) / (2 * h),
                 boost::test_tools::tolerance(tol));
    }
  }
  // H v against the finite difference of the gradient along v.
  Matrix<double> gp(n, B), gm(n, B);
  energy.Gradient(x + h * v, gp);
  energy.Gradient(x - h * v, gm);
  const Matrix<double> fd = (gp - gm) / (2 * h);
  BOOST_TEST((hv - fd).norm() <= tol * (1 + fd.norm()));
  // Parameter VJP: d/dtheta <grad E, u> against finite differences in theta.
  if (energy.num_parameters() > 0) {
    const Matrix<double> u = implicit::testing::RandomMatrix<double>(n, B, 11);
    Vector<double> pvjp(energy.num_parameters());
    energy.ParameterVectorJacobianProduct(x, u, pvjp);
    auto& theta = energy.parameters()->values();
    for (Index k = 0; k < theta.size(); ++k) {
      const double saved = theta(k);
      theta(k) = saved + h;
      energy.Gradient(x, gp);
      theta(k) = saved - h;
      energy.Gradient(x, gm);
      theta(k) = saved;
      const double fd_k = ((gp - gm).array() * u.array()).sum() / (2 * h);
      BOOST_TEST(pvjp(k) == fd_k, boost::test_tools::tolerance(tol));
    }
  }
}

struct Sq {  // E = 0.5 |x|^2
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>&) const { return T(0.5) * x.squaredNorm(); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(lse_energy_derivatives_match_finite_differences) {
  const Index n = 6, N = 9, B = 3;
  implicit::ParameterSet<double> p;
  p.Add("beta", 1, 1);
  p.Block("beta")(0, 0) = 1.7;
  implicit::AutoDiffEnergy<LseEnergy, double> energy(
      LseEnergy{implicit::testing::RandomMatrix<double>(n, N, 1)}, n, p);
  CheckAgainstFiniteDifferences(energy, implicit::testing::RandomMatrix<double>(n, B, 2), 1e-6);
}

BOOST_AUTO_TEST_CASE(quartic_energy_with_matrix_parameters_matches_finite_differences) {
  const Index n = 11, B = 2;  // n not a multiple of the dual chunk width
  implicit::ParameterSet<double> p;
  p.Add("W", n, n);
  p.Add("a", n, 1);
  p.values() = implicit::testing::RandomMatrix<double>(p.size(), 1, 3, 0.3);
  implicit::AutoDiffEnergy<QuarticEnergy, double> energy(QuarticEnergy{n}, n, p);
  CheckAgainstFiniteDifferences(energy, implicit::testing::RandomMatrix<double>(n, B, 4), 1e-6);
}

BOOST_AUTO_TEST_CASE(float_energies_evaluate_and_differentiate) {
  implicit::AutoDiffEnergy<Sq, float> energy(Sq{}, 4);
  Matrix<float> x = implicit::testing::RandomMatrix<float>(4, 3, 5), g(4, 3);
  energy.Gradient(x, g);
  BOOST_TEST((g - x).norm() <= 1e-6f);  // grad of 0.5|x|^2 is x
}

BOOST_AUTO_TEST_CASE(shape_errors_name_the_argument) {
  implicit::AutoDiffEnergy<Sq, double> energy(Sq{}, 4);
  Matrix<double> x(3, 2), g(3, 2);
  x.setZero();
  try {
    energy.Gradient(x, g);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("AutoDiffEnergy::Gradient(x)") != std::string::npos);
    BOOST_TEST(std::string(e.what()).find("3x2") != std::string::npos);
  }
  Matrix<double> empty(4, 0);
  BOOST_CHECK_THROW(energy.Gradient(empty, g), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(one_pass_evaluations_and_subsets) {
  const Index n = 11, N = 5, B = 4;  // n not a multiple of the dual chunk width
  implicit::ParameterSet<double> p;
  p.Add("beta", 1, 1);
  p.Block("beta")(0, 0) = 1.3;
  implicit::AutoDiffEnergy<LseEnergy, double> lse(
      LseEnergy{implicit::testing::RandomMatrix<double>(n, N, 21)}, n, p);
  const Matrix<double> x = implicit::testing::RandomMatrix<double>(n, B, 22);
  implicit::testing::CheckOnePassEvaluations<double>(lse, x, 1e-14);
  BOOST_TEST(lse.SupportsSubsets());
  implicit::testing::CheckSubsetEvaluation<double>(lse, x, 1e-14);
  implicit::AutoDiffEnergy<Sq, float> sq(Sq{}, 4);
  const Matrix<float> xf = implicit::testing::RandomMatrix<float>(4, 3, 23);
  implicit::testing::CheckOnePassEvaluations<float>(sq, xf, 1e-6);
  implicit::testing::CheckSubsetEvaluation<float>(sq, xf, 1e-6);
}
