// A user energy conditioned on a per-sample input c, written once as a functor
// E(x, c, theta): its input derivatives d/dc <grad_x E, u> agree with central
// finite differences and with a closed-form energy of the same formula, and the
// implicit backward pass returns dL/dc through it (checked against finite
// differences of the loss at the solved equilibrium).
#define BOOST_TEST_MODULE autodiff_input
#include <boost/test/unit_test.hpp>

#include <implicit/core/autodiff_energy.h>
#include <implicit/core/energy_maps.h>
#include <implicit/diff/implicit_diff.h>

#include <string>
#include <vector>

#include "support/active_set_checks.h"
#include "support/energy_checks.h"
#include "support/fused_energy_checks.h"
#include "support/ift_problems.h"
#include "support/test_problems.h"

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;

namespace {

// E(x; c, X) = 0.5|x|^2 - lse(beta X^T x) / beta - c^T x, the patterns X
// (n x N, column-major) as parameters: the modern Hopfield energy with an
// input injection, as testing::HopfieldEnergy writes it in closed form.
struct InjectedHopfield {
  Index n, N;
  double beta;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& c, const Vector<T>& theta) const {
    using std::exp;
    using std::log;
    Vector<T> s(N);
    for (Index i = 0; i < N; ++i) {
      T dot(0);
      for (Index k = 0; k < n; ++k) dot += theta(i * n + k) * x(k);
      s(i) = T(beta) * dot;
    }
    const T m = s.maxCoeff();
    T sum(0);
    for (Index i = 0; i < N; ++i) sum += exp(s(i) - m);
    return T(0.5) * x.squaredNorm() - (m + log(sum)) / T(beta) - c.dot(x);
  }
};

// E(x, theta) = |x|^2: a functor without an input.
struct NoInput {
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>&) const {
    return x.squaredNorm();
  }
};

// The same energy in both forms, on the same patterns and inputs.
struct Pair {
  implicit::testing::HopfieldEnergy<double> closed;
  implicit::AutoDiffEnergy<InjectedHopfield, double> autodiff;
};

// The modes AutoDiffEnergy offers.
std::vector<implicit::AutoDiffMode> Modes() {
  std::vector<implicit::AutoDiffMode> modes = {implicit::AutoDiffMode::kForward};
  if (implicit::kHaveReverseMode) modes.push_back(implicit::AutoDiffMode::kReverse);
  return modes;
}

Pair MakePair(Index n, Index N, Index B, double beta, implicit::AutoDiffMode mode) {
  const Matrix<double> X = implicit::testing::RandomMatrix<double>(n, N, 3, 0.8);
  const Matrix<double> c = implicit::testing::RandomMatrix<double>(n, B, 5, 0.3);
  implicit::ParameterSet<double> params;
  params.Add("X", n, N);
  params.Block("X") = X;
  Pair pair{implicit::testing::HopfieldEnergy<double>(X, beta),
            implicit::AutoDiffEnergy<InjectedHopfield, double>(InjectedHopfield{n, N, beta}, n, n,
                                                               params)};
  pair.closed.SetInput(c);
  pair.autodiff.SetInput(c);
  pair.autodiff.set_mode(mode);
  return pair;
}

}  // namespace

BOOST_AUTO_TEST_CASE(input_products_match_the_closed_form_and_finite_differences) {
  const Index n = 6, N = 4, B = 3;  // n not a multiple of the dual chunk width
  for (implicit::AutoDiffMode mode : Modes()) {
    BOOST_TEST_CONTEXT("mode " << static_cast<int>(mode)) {
      Pair pair = MakePair(n, N, B, 2.0, mode);
      const Matrix<double> x = implicit::testing::RandomMatrix<double>(n, B, 11);
      BOOST_TEST(pair.autodiff.input_dimension() == n);
      BOOST_TEST(!pair.autodiff.SupportsSubsets());
      implicit::testing::CheckEnergyAgainstReference(pair.closed, pair.autodiff, x, 1e-10, "values");

      const Matrix<double> u = implicit::testing::RandomMatrix<double>(n, B, 13);
      Matrix<double> from_autodiff(n, B), closed_form(n, B);
      pair.autodiff.InputVectorJacobianProduct(x, u, from_autodiff);
      pair.closed.InputVectorJacobianProduct(x, u, closed_form);
      BOOST_TEST((from_autodiff - closed_form).norm() <= 1e-12 * (1 + closed_form.norm()));

      // The gradient-step map's input VJP against central differences in c.
      implicit::GradientStepMap<double> map(pair.autodiff, 0.5);
      const Matrix<double> c = pair.autodiff.input();
      implicit::testing::CheckMapFiniteDifferences(
          map, x, 1e-6, "gradient step", pair.autodiff.parameters(),
          [&](const Matrix<double>& input) { pair.autodiff.SetInput(input); }, c);
    }
  }
}

BOOST_AUTO_TEST_CASE(implicit_backward_returns_the_input_gradient) {
  const Index n = 5, N = 3, B = 2;
  for (implicit::AutoDiffMode mode : Modes()) {
    BOOST_TEST_CONTEXT("mode " << static_cast<int>(mode)) {
      Pair pair = MakePair(n, N, B, 1.0, mode);
      implicit::CccpMap<double> map(pair.autodiff);
      const Matrix<double> c = pair.autodiff.input();
      const Matrix<double> w = implicit::testing::RandomMatrix<double>(n, B, 17);
      // L = sum_b w_b . z*_b, z* the equilibrium for input c.
      auto loss_at = [&](const Matrix<double>& input) {
        pair.autodiff.SetInput(input);
        const Matrix<double> z = implicit::testing::SolveTight(map, B);
        return (w.array() * z.array()).sum();
      };
      pair.autodiff.SetInput(c);
      const Matrix<double> z_star = implicit::testing::SolveTight(map, B);
      const implicit::BackwardResult<double> g = implicit::ImplicitBackward(map, z_star, w);
      BOOST_REQUIRE(g.ok());
      BOOST_REQUIRE(g.input_gradient.rows() == n && g.input_gradient.cols() == B);
      const double h = 1e-6;
      for (Index b = 0; b < B; ++b) {
        for (Index i = 0; i < n; ++i) {
          Matrix<double> cp = c, cm = c;
          cp(i, b) += h;
          cm(i, b) -= h;
          const double fd = (loss_at(cp) - loss_at(cm)) / (2 * h);
          BOOST_TEST(std::abs(g.input_gradient(i, b) - fd) <= 1e-6 * (1 + std::abs(fd)),
                     "dL/dc(" << i << ", " << b << ") = " << g.input_gradient(i, b) << ", fd " << fd);
        }
      }
    }
  }
}

// The active set evaluates blocks of samples with their own input columns
// (Energy::GradientColumns): the same iterates as whole-batch solves, in both
// modes.
BOOST_AUTO_TEST_CASE(active_set_evaluates_blocks_with_their_inputs) {
  const Index n = 6, N = 5, B = 8;
  for (implicit::AutoDiffMode mode : Modes()) {
    BOOST_TEST_CONTEXT("mode " << static_cast<int>(mode)) {
      Pair pair = MakePair(n, N, B, 2.0, mode);
      implicit::CccpMap<double> map(pair.autodiff);
      BOOST_REQUIRE(!map.SupportsSubsets());
      const Matrix<double> z0 = implicit::testing::RandomMatrix<double>(n, B, 19);
      implicit::testing::CheckColumnEvaluation<double>(map, z0, 1e-12);
      implicit::testing::CheckActiveSetMatchesWholeBatch<double>(map, z0,
                                                                {"picard", "anderson", "broyden", "lbfgs"});
      Matrix<double> grad(n, 2);
      Vector<double> values(2);
      BOOST_CHECK_THROW(pair.autodiff.GradientColumns(z0.leftCols(2), {0, B}, grad, values),
                        std::invalid_argument);  // sample B: beyond the input batch
    }
  }
}

BOOST_AUTO_TEST_CASE(input_errors_name_the_problem) {
  const InjectedHopfield f{4, 2, 1.0};
  implicit::ParameterSet<double> params;
  params.Add("X", 4, 2);
  // A functor with an input needs its dimension; one without takes none.
  BOOST_CHECK_THROW((implicit::AutoDiffEnergy<InjectedHopfield, double>(f, 4, 0, params)),
                    std::invalid_argument);
  BOOST_CHECK_THROW((implicit::AutoDiffEnergy<NoInput, double>(NoInput{}, 4, 3)),
                    std::invalid_argument);
  implicit::AutoDiffEnergy<NoInput, double> plain(NoInput{}, 4);
  BOOST_CHECK_THROW(plain.SetInput(Matrix<double>::Zero(4, 2)), std::invalid_argument);
  BOOST_TEST(plain.SupportsSubsets());

  implicit::AutoDiffEnergy<InjectedHopfield, double> energy(f, 4, 4, params);
  const Matrix<double> x = Matrix<double>::Ones(4, 3);
  Vector<double> values(3);
  try {  // no input set yet
    energy.Value(x, values);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("SetInput") != std::string::npos, e.what());
  }
  BOOST_CHECK_THROW(energy.SetInput(Matrix<double>::Zero(3, 3)), std::invalid_argument);
  energy.SetInput(Matrix<double>::Zero(4, 2));  // 2 samples, the batch has 3
  BOOST_CHECK_THROW(energy.Value(x, values), std::invalid_argument);
  energy.SetInput(Matrix<double>::Zero(4, 3));
  BOOST_CHECK_NO_THROW(energy.Value(x, values));
}
