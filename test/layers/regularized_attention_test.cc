// Sparse Hopfield / Hopfield-Fenchel-Young energy (regularized_attention.h):
// closed-form derivatives against automatic derivatives of the same energy
// written as a plain templated function and against finite differences; the
// CCCP update is (sparse) attention; stored patterns are exact fixed points;
// the one-pass evaluations and subset evaluation.
#define BOOST_TEST_MODULE regularized_attention
#include <boost/test/unit_test.hpp>

#include <implicit/core/autodiff_energy.h>
#include <implicit/core/energy_maps.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/regularized_attention.h>
#include <implicit/solvers/picard.h>

#include "support/dual_products.h"
#include "support/energy_checks.h"
#include "support/fused_energy_checks.h"
#include "support/test_problems.h"

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;
using implicit::testing::RandomMatrix;
using Energy = implicit::SparseHopfieldEnergy<double>;

namespace {

double Val(double x) { return x; }
template <typename U, int K>
double Val(const ceres::Jet<U, K>& x) { return Val(x.a); }

// E(x) = 0.5|x|^2 - Omega*_alpha(beta X^T x) / beta written from the
// definition: p_i = [(alpha-1) s_i - tau]_+^{1/(alpha-1)}, sum p = 1, and
// Omega* = <p,s> - (sum p^alpha - 1)/(alpha(alpha-1)). tau is located by
// bisection on the values, then refined by Newton steps in the dual type so
// that its derivatives (with respect to x, X and alpha) are exact.
struct HfyFunctor {
  // tau's bisection runs on the values (Val): a replayed reverse-mode tape
  // would keep the recording point's support, so forward mode only.
  static constexpr bool kForwardModeOnly = true;
  Index d, N;
  double beta, alpha;
  bool learn_alpha;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    using std::exp;
    using std::log;
    Eigen::Map<const Matrix<T>> X(theta.data(), d, N);
    const T a = learn_alpha ? theta(d * N) : T(alpha);
    Vector<T> s = implicit::testing::MatVec(X.transpose(), x);
    s *= T(beta);
    T conj;
    if (!learn_alpha && alpha == 1.0) {
      T m = s(0);
      for (Index i = 1; i < N; ++i) if (s(i) > m) m = s(i);
      T sum(0);
      for (Index i = 0; i < N; ++i) sum += exp(s(i) - m);
      conj = m + log(sum);
    } else {
      const double av = Val(a);
      Vector<double> sv(N);
      for (Index i = 0; i < N; ++i) sv(i) = (av - 1) * Val(s(i));
      auto mass = [&](double tau) {
        double acc = 0;
        for (Index i = 0; i < N; ++i) if (sv(i) > tau) acc += std::pow(sv(i) - tau, 1 / (av - 1));
        return acc;
      };
      double lo = sv.maxCoeff() - 1, hi = sv.maxCoeff();
      for (int it = 0; it < 200; ++it) {
        const double mid = 0.5 * (lo + hi);
        if (mass(mid) >= 1) lo = mid; else hi = mid;
      }
      T tau(lo);
      for (int it = 0; it < 3; ++it) {  // Newton on the fixed support
        T f(-1), df(0);
        for (Index i = 0; i < N; ++i) {
          if (!(sv(i) > lo)) continue;
          const T base = (a - T(1)) * s(i) - tau;
          f += exp(log(base) / (a - T(1)));
          df -= exp(log(base) * ((T(2) - a) / (a - T(1)))) / (a - T(1));
        }
        tau -= f / df;
      }
      T dot(0), reg(0);
      for (Index i = 0; i < N; ++i) {
        if (!(sv(i) > lo)) continue;
        const T p = exp(log((a - T(1)) * s(i) - tau) / (a - T(1)));
        dot += p * s(i);
        reg += exp(a * log(p));
      }
      conj = dot - (reg - T(1)) / (a * (a - T(1)));
    }
    return T(0.5) * x.squaredNorm() - conj / T(beta);
  }
};

Energy::Options MakeOptions(double alpha, double beta, bool learn_alpha = false) {
  Energy::Options o;
  o.alpha = alpha;
  o.beta = beta;
  o.learn_alpha = learn_alpha;
  return o;
}

}  // namespace

BOOST_AUTO_TEST_CASE(derivatives_match_autodiff_and_finite_differences) {
  const Index d = 5, N = 7, B = 3;
  const Matrix<double> X = RandomMatrix<double>(d, N, 1);
  const Matrix<double> xi = RandomMatrix<double>(d, B, 2);
  for (double alpha : {1.0, 1.5, 2.0, 1.3, 2.6}) {
    for (bool learn_alpha : {false, true}) {
      if (learn_alpha && alpha == 1.0) continue;
      BOOST_TEST_CONTEXT("alpha = " << alpha << " learn_alpha = " << learn_alpha) {
        Energy energy(X, MakeOptions(alpha, 1.7, learn_alpha));
        implicit::AutoDiffEnergy<HfyFunctor, double> reference(
            HfyFunctor{d, N, 1.7, alpha, learn_alpha}, d, *energy.parameters());
        implicit::testing::CheckEnergyAgainstReference(energy, reference, xi, 1e-9);
        implicit::testing::CheckEnergyFiniteDifferences(energy, xi, 1e-6);
        Matrix<double> p(N, B);
        energy.Weights(xi, p);
        if (alpha > 1) BOOST_TEST((p.array() == 0).count() > 0);  // sparse
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(cccp_step_with_alpha_one_is_softmax_attention) {
  const Index d = 6, N = 9, B = 4;
  const Matrix<double> X = RandomMatrix<double>(d, N, 3);
  const Matrix<double> xi = RandomMatrix<double>(d, B, 4);
  Energy energy(X, MakeOptions(1.0, 2.5));
  implicit::testing::HopfieldMap<double> attention(X, 2.5);
  Matrix<double> a(d, B), b(d, B), g(d, B);
  energy.CccpUpdate(xi, a);
  attention.Evaluate(xi, b);
  BOOST_TEST((a - b).norm() <= 1e-13);
  energy.Gradient(xi, g);
  BOOST_TEST((xi - g - b).norm() <= 1e-13);  // CCCP = x - grad E
}

BOOST_AUTO_TEST_CASE(well_separated_patterns_are_exact_fixed_points) {
  // Orthogonal patterns of norm 2: scores beta |x_i|^2 = 4 against 0, a gap
  // that makes every alpha > 1 one-hot ((alpha - 1) gap >= 1).
  const Index d = 12, N = 5;
  const Matrix<double> Q = RandomMatrix<double>(d, d, 5).householderQr().householderQ();
  const Matrix<double> X = 2.0 * Q.leftCols(N);
  for (double alpha : {1.5, 2.0, 1.4, 3.0}) {
    BOOST_TEST_CONTEXT("alpha = " << alpha) {
      Energy energy(X, MakeOptions(alpha, 1.0));
      Matrix<double> out(d, N), g(d, N);
      energy.CccpUpdate(X, out);
      BOOST_TEST((out - X).norm() == 0.0);  // exactly: the weights are one-hot
      energy.Gradient(X, g);
      BOOST_TEST(g.norm() == 0.0);
      // Noisy queries are retrieved exactly by the sparse update.
      Matrix<double> xi = X + RandomMatrix<double>(d, N, 6, 0.15);
      implicit::CccpMap<double> map(energy);
      implicit::PicardSolver<double>::Options options;
      options.absolute_tolerance = 1e-14;
      const implicit::Summary summary = implicit::PicardSolver<double>(options).Solve(map, xi);
      BOOST_TEST(summary.IsConverged());
      BOOST_TEST((xi - X).cwiseAbs().maxCoeff() <= 1e-14);
    }
  }
  // Random (non-orthogonal) patterns with a large enough score gap: still exact.
  const Matrix<double> R = RandomMatrix<double>(32, 6, 7);
  Matrix<double> S = R.transpose() * R;
  double gap = std::numeric_limits<double>::infinity();
  for (Index i = 0; i < 6; ++i)
    for (Index j = 0; j < 6; ++j)
      if (i != j) gap = std::min(gap, S(i, i) - S(j, i));
  BOOST_REQUIRE(gap > 1.0);  // sparsemax is one-hot for a score gap >= 1
  Energy sparse(R, MakeOptions(2.0, 1.0));
  Matrix<double> out(32, 6);
  sparse.CccpUpdate(R, out);
  BOOST_TEST((out - R).norm() == 0.0);
}

BOOST_AUTO_TEST_CASE(cccp_steps_never_increase_the_energy) {
  const Index d = 6, N = 10, B = 5;
  const Matrix<double> X = RandomMatrix<double>(d, N, 8);
  for (double alpha : {1.0, 1.5, 2.0, 1.7}) {
    Energy energy(X, MakeOptions(alpha, 3.0));
    Matrix<double> xi = RandomMatrix<double>(d, B, 9), next(d, B);
    Vector<double> e(B), e_next(B);
    energy.Value(xi, e);
    for (int it = 0; it < 20; ++it) {
      energy.CccpUpdate(xi, next);
      energy.Value(next, e_next);
      BOOST_TEST((e_next.array() <= e.array() + 1e-12).all());
      xi = next;
      e = e_next;
    }
  }
}

BOOST_AUTO_TEST_CASE(extreme_beta_float_and_masked_patterns) {
  const Index d = 4, N = 6, B = 3;
  const Matrix<double> X = RandomMatrix<double>(d, N, 10);
  const Matrix<double> xi = RandomMatrix<double>(d, B, 11);
  for (double alpha : {1.0, 1.5, 2.0, 1.25}) {
    BOOST_TEST_CONTEXT("alpha = " << alpha) {
      // beta = 1e3: the weights are one-hot on the best score (generic data).
      Energy sharp(X, MakeOptions(alpha, 1e3));
      Matrix<double> p(N, B), g(d, B);
      Vector<double> e(B);
      sharp.Weights(xi, p);
      sharp.Value(xi, e);
      sharp.Gradient(xi, g);
      BOOST_TEST(e.allFinite());
      BOOST_TEST(g.allFinite());
      const Matrix<double> scores = X.transpose() * xi;
      for (Index b = 0; b < B; ++b) {
        Index arg;
        scores.col(b).maxCoeff(&arg);
        BOOST_TEST(p(arg, b) == 1.0);
      }
      // beta = 1e-3: nearly uniform weights, E ~ 0.5|xi|^2 - max-regularised value.
      Energy flat(X, MakeOptions(alpha, 1e-3));
      flat.Weights(xi, p);
      BOOST_TEST((p.array() - 1.0 / N).abs().maxCoeff() <= 1e-2);
      implicit::testing::CheckEnergyFiniteDifferences(flat, xi, 1e-5);
      // float32 agrees with double.
      implicit::SparseHopfieldEnergy<float>::Options fo;
      fo.alpha = alpha;
      fo.beta = 2.0;
      implicit::SparseHopfieldEnergy<float> ef(X.cast<float>(), fo);
      Energy ed(X, MakeOptions(alpha, 2.0));
      Matrix<float> gf(d, B), hf(d, B);
      Matrix<double> gd(d, B), hd(d, B);
      ef.Gradient(xi.cast<float>(), gf);
      ed.Gradient(xi, gd);
      BOOST_TEST((gf.cast<double>() - gd).norm() <= 1e-5 * (1 + gd.norm()));
      ef.HessianVectorProduct(xi.cast<float>(), xi.cast<float>(), hf);
      ed.HessianVectorProduct(xi, xi, hd);
      BOOST_TEST((hf.cast<double>() - hd).norm() <= 1e-4 * (1 + hd.norm()));
      // Scores of order 1e8 (huge patterns): finite everything.
      Energy huge(1e4 * X, MakeOptions(alpha, 1.0));
      huge.Gradient(1e4 * xi, g);
      huge.Value(1e4 * xi, e);
      BOOST_TEST(g.allFinite());
      BOOST_TEST(e.allFinite());
      // A masked pattern gets exactly zero weight; the energy equals the one
      // without that pattern.
      Energy masked(X, MakeOptions(alpha, 2.0));
      std::vector<bool> active(N, true);
      active[2] = false;
      masked.SetPatternMask(active);
      masked.Weights(xi, p);
      BOOST_TEST(p.row(2).norm() == 0.0);
      Matrix<double> X5(d, N - 1);
      X5 << X.leftCols(2), X.rightCols(N - 3);
      Energy removed(X5, MakeOptions(alpha, 2.0));
      Vector<double> em(B), er(B);
      masked.Value(xi, em);
      removed.Value(xi, er);
      BOOST_TEST((em - er).norm() <= 1e-12);
    }
  }
}

BOOST_AUTO_TEST_CASE(invalid_options_and_shapes_throw) {
  const Matrix<double> X = RandomMatrix<double>(3, 4, 12);
  BOOST_CHECK_THROW(Energy(X, MakeOptions(0.5, 1.0)), std::invalid_argument);
  BOOST_CHECK_THROW(Energy(X, MakeOptions(1.5, 0.0)), std::invalid_argument);
  BOOST_CHECK_THROW(Energy(X, MakeOptions(1.0, 1.0, true)), std::invalid_argument);
  Energy energy(X);
  Matrix<double> wrong(4, 2), g(4, 2);
  try {
    energy.Gradient(wrong, g);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("4x2") != std::string::npos);
  }
  BOOST_CHECK_THROW(energy.SetPatternMask(std::vector<bool>(3, true)), std::invalid_argument);
}

// Learn the stored patterns (and alpha) so that the sparse retrieval of given
// queries lands on given targets: loss 0.5 mean_b |xi*_b - t_b|^2, gradients by
// implicit differentiation of the CCCP fixed point, plain gradient descent.
BOOST_AUTO_TEST_CASE(sparse_hopfield_trains_through_implicit_differentiation) {
  const Index d = 4, N = 3, B = 6;
  Energy energy(RandomMatrix<double>(d, N, 20), MakeOptions(1.5, 1.0, true));
  implicit::CccpMap<double> map(energy);
  implicit::PicardSolver<double>::Options options;
  options.absolute_tolerance = 1e-13;
  options.max_iterations = 2000;
  implicit::PicardSolver<double> solver(options);
  implicit::ImplicitLayer<double> layer(map, solver);
  const Matrix<double> queries = RandomMatrix<double>(d, B, 21);
  const Matrix<double> target = RandomMatrix<double>(d, B, 22, 0.5);
  auto loss_at = [&](Matrix<double>* grad) {
    Matrix<double> z = queries;
    BOOST_REQUIRE(layer.Forward(z).IsConverged());
    if (grad) *grad = (z - target) / double(B);
    return 0.5 * (z - target).squaredNorm() / double(B);
  };
  Matrix<double> dldz;
  loss_at(&dldz);
  implicit::BackwardResult<double> g = layer.Backward(dldz);
  BOOST_REQUIRE(g.ok());
  Vector<double>& theta = energy.parameters()->values();
  for (Index k = 0; k < theta.size(); ++k) {  // includes alpha (the last entry)
    const double saved = theta(k), h = 1e-6;
    theta(k) = saved + h;
    const double lp = loss_at(nullptr);
    theta(k) = saved - h;
    const double lm = loss_at(nullptr);
    theta(k) = saved;
    BOOST_TEST(std::abs(g.parameter_gradient(k) - (lp - lm) / (2 * h)) <= 1e-6);
  }
  const double initial = loss_at(nullptr);
  for (int step = 0; step < 60; ++step) {
    loss_at(&dldz);
    g = layer.Backward(dldz);
    BOOST_REQUIRE(g.ok());
    theta -= 0.5 * g.parameter_gradient;
    theta(theta.size() - 1) = std::max(theta(theta.size() - 1), 1.05);  // keep alpha > 1
  }
  const double final_loss = loss_at(nullptr);
  BOOST_TEST_MESSAGE("loss " << initial << " -> " << final_loss);
  BOOST_TEST(final_loss < 0.5 * initial);
}

using OnePassScalars = std::tuple<float, double>;

// CccpUpdateAndValue / GradientAndValue (one score GEMM, one entmax pass)
// agree with the separate calls, for softmax, entmax15, sparsemax and a
// bisection alpha, with and without masked patterns, in float and double; the
// pattern mask is shared by all samples, so any subset of a batch evaluates
// like those columns of the whole batch.
BOOST_AUTO_TEST_CASE_TEMPLATE(one_pass_evaluations_and_subsets, S, OnePassScalars) {
  const double tol = sizeof(S) == 4 ? 1e-5 : 1e-12;
  const Index d = 5, N = 9, B = 4;
  const Matrix<S> X = RandomMatrix<S>(d, N, 60), xi = RandomMatrix<S>(d, B, 61);
  for (const double alpha : {1.0, 1.5, 2.0, 1.7}) {
    for (const bool masked : {false, true}) {
      BOOST_TEST_CONTEXT("alpha " << alpha << (masked ? ", masked" : "")) {
        implicit::SparseHopfieldEnergy<S> energy(X, MakeOptions(alpha, 2.0));
        if (masked) {
          std::vector<bool> active(N, true);
          active[0] = active[4] = false;
          energy.SetPatternMask(active);
        }
        implicit::testing::CheckOnePassEvaluations<S>(energy, xi, tol);
        BOOST_TEST(energy.SupportsSubsets());
        implicit::testing::CheckSubsetEvaluation<S>(energy, xi, tol);
      }
    }
  }
}

// A batch of many column blocks (internal::ScoreBlocks: about 64 samples each,
// the last one shorter) gives what the whole batch's scores and entmax give
// (Scores, Weights), for several alphas, with masked patterns, and the same
// bits on 1 and 3 threads; H v against central differences of the gradient.
BOOST_AUTO_TEST_CASE(column_blocks_agree_with_the_whole_batch) {
  const Index d = 6, N = 40, B = 301;
  const double beta = 2.0;
  const Matrix<double> X = RandomMatrix<double>(d, N, 62), xi = RandomMatrix<double>(d, B, 63);
  const Matrix<double> v = RandomMatrix<double>(d, B, 64);
  for (const double alpha : {1.5, 2.0, 1.7}) {
    BOOST_TEST_CONTEXT("alpha " << alpha) {
      Energy energy(X, MakeOptions(alpha, beta));
      std::vector<bool> active(N, true);
      active[3] = active[17] = false;
      energy.SetPatternMask(active);
      Matrix<double> s(N, B), p(N, B);
      Vector<double> conj(B);
      energy.Scores(xi, s);
      implicit::entmax::EntmaxAndConjugate<double>(s, alpha, p, conj);
      energy.Weights(xi, p);
      const Matrix<double> expected_out = X * p;
      const Vector<double> expected_e = 0.5 * xi.colwise().squaredNorm().transpose() - conj / beta;
      Matrix<double> out(d, B), grad(d, B), hv(d, B);
      Vector<double> e(B), e2(B), e3(B);
      energy.CccpUpdateAndValue(xi, out, e);
      energy.GradientAndValue(xi, grad, e2);
      energy.Value(xi, e3);
      energy.HessianVectorProduct(xi, v, hv);
      BOOST_TEST(implicit::testing::AgreeEntrywise(out, expected_out, 1e-13));
      BOOST_TEST(implicit::testing::AgreeEntrywise(grad, xi - expected_out, 1e-13));
      BOOST_TEST(implicit::testing::AgreeEntrywise(e, expected_e, 1e-13));
      BOOST_TEST(implicit::testing::AgreeEntrywise(e2, expected_e, 1e-13));
      BOOST_TEST(implicit::testing::AgreeEntrywise(e3, expected_e, 1e-13));
      const double h = 1e-6;
      Matrix<double> plus(d, B), minus(d, B);
      energy.Gradient(xi + h * v, plus);
      energy.Gradient(xi - h * v, minus);
      BOOST_TEST(implicit::testing::AgreeEntrywise(hv, (plus - minus) / (2 * h), 1e-6));
      implicit::testing::CheckSameBitsOnThreads<double>(energy, xi, v);
    }
  }
}
