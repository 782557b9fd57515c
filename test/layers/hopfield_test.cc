// Modern Hopfield energy and the Hopfield layers: closed-form derivatives
// against automatic derivatives and finite differences, the CCCP step as
// softmax attention, retrieval of stored patterns, numerical robustness, and
// training through the implicit backward pass. Also the column softmax's
// special columns, the one-pass evaluations (update and value together),
// subset evaluation, and concurrent calls on one energy.
#define BOOST_TEST_MODULE hopfield
#include <boost/test/unit_test.hpp>

#include <implicit/core/autodiff_energy.h>
#include <implicit/core/energy_maps.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/hopfield.h>
#include <implicit/solvers/picard.h>

#include "support/active_set_checks.h"
#include "support/energy_checks.h"
#include "support/fused_energy_checks.h"
#include "support/test_problems.h"

#include <bitset>
#include <cmath>
#include <limits>
#include <thread>
#include <tuple>
#include <vector>

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;
using implicit::testing::RandomMatrix;
using implicit::testing::RelativeError;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// The modern Hopfield energy written as a plain templated function of one
// sample; theta = [X (column-major, when learned); beta (when learned)].
struct HopfieldFunctor {
  Index n, N;
  bool learn_X, learn_beta;
  Matrix<double> X_fixed;
  double beta_fixed;
  Vector<double> mask;  // empty or N
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    using std::exp;
    using std::log;
    Matrix<T> X = X_fixed.cast<T>();
    Index k = 0;
    if (learn_X) {
      X = Eigen::Map<const Matrix<T>>(theta.data(), n, N);
      k = n * N;
    }
    const T beta = learn_beta ? theta(k) : T(beta_fixed);
    std::vector<T> a;
    for (Index i = 0; i < N; ++i) {
      if (mask.size() > 0 && mask(i) == -kInf) continue;
      T s = T(0);
      for (Index r = 0; r < n; ++r) s += X(r, i) * x(r);
      a.push_back(beta * s + T(mask.size() > 0 ? mask(i) : 0.0));
    }
    T m = a[0];
    for (const T& v : a) if (v > m) m = v;
    T sum(0);
    for (const T& v : a) sum += exp(v - m);
    return T(0.5) * x.squaredNorm() - (m + log(sum)) / beta;
  }
};

// Softmax attention computed independently, one sample at a time, in long double.
Matrix<double> ReferenceAttention(const Matrix<double>& K, const Matrix<double>& V,
                                  const Matrix<double>& q, double beta) {
  Matrix<double> out(V.rows(), q.cols());
  for (Index b = 0; b < q.cols(); ++b) {
    std::vector<long double> w(K.cols());
    long double m = -1e300L, sum = 0;
    for (Index i = 0; i < K.cols(); ++i) {
      long double s = 0;
      for (Index r = 0; r < K.rows(); ++r) s += (long double)K(r, i) * q(r, b);
      w[i] = beta * s;
      m = std::max(m, w[i]);
    }
    for (auto& v : w) sum += (v = std::exp(v - m));
    for (Index r = 0; r < V.rows(); ++r) {
      long double acc = 0;
      for (Index i = 0; i < K.cols(); ++i) acc += V(r, i) * w[i] / sum;
      out(r, b) = static_cast<double>(acc);
    }
  }
  return out;
}

implicit::ModernHopfieldEnergy<double> MakeEnergy(const Matrix<double>& X, double beta,
                                                  bool learn_X, bool learn_beta) {
  implicit::ModernHopfieldEnergy<double>::Options o;
  o.beta = beta;
  o.learn_patterns = learn_X;
  o.learn_beta = learn_beta;
  return implicit::ModernHopfieldEnergy<double>(X, o);
}

}  // namespace

BOOST_AUTO_TEST_CASE(energy_matches_autodiff_and_finite_differences) {
  const Index n = 5, N = 7, B = 3;
  const Matrix<double> X = RandomMatrix<double>(n, N, 1);
  const Matrix<double> xi = RandomMatrix<double>(n, B, 2);
  for (int variant = 0; variant < 4; ++variant) {
    const bool learn_X = variant & 1, learn_beta = variant & 2;
    auto energy = MakeEnergy(X, 1.7, learn_X, learn_beta);
    HopfieldFunctor f{n, N, learn_X, learn_beta, X, 1.7, Vector<double>()};
    implicit::AutoDiffEnergy<HopfieldFunctor, double> reference(f, n, energy.parameter_set());
    const std::string what = "learn_X=" + std::to_string(learn_X) + " learn_beta=" +
                             std::to_string(learn_beta);
    implicit::testing::CheckEnergyAgainstReference(energy, reference, xi, 1e-12, what);
    implicit::testing::CheckEnergyFiniteDifferences(energy, xi, 1e-7, what);
  }
}

BOOST_AUTO_TEST_CASE(masked_energy_matches_autodiff_and_gives_zero_weight) {
  const Index n = 4, N = 6, B = 3;
  const Matrix<double> X = RandomMatrix<double>(n, N, 3);
  const Matrix<double> xi = RandomMatrix<double>(n, B, 4);
  Vector<double> mask(N);
  mask << 0.0, -kInf, 0.3, -kInf, -1.2, 0.0;  // finite entries: log prior weights
  auto energy = MakeEnergy(X, 2.3, true, true);
  energy.SetMask(mask);
  HopfieldFunctor f{n, N, true, true, X, 2.3, mask};
  implicit::AutoDiffEnergy<HopfieldFunctor, double> reference(f, n, energy.parameter_set());
  implicit::testing::CheckEnergyAgainstReference(energy, reference, xi, 1e-12, "mask");
  implicit::testing::CheckEnergyFiniteDifferences(energy, xi, 1e-7, "mask");
  Matrix<double> p(N, B);
  energy.Attention(xi, p);
  BOOST_TEST(p.row(1).norm() == 0.0);
  BOOST_TEST(p.row(3).norm() == 0.0);
  BOOST_TEST(p.allFinite());
  // Everything masked: E = +inf, grad E = xi, no NaN.
  energy.SetMask(Vector<double>::Constant(N, -kInf));
  Vector<double> e(B);
  Matrix<double> g(n, B);
  energy.Value(xi, e);
  energy.Gradient(xi, g);
  BOOST_TEST((e.array() == kInf).all());
  BOOST_TEST((g - xi).norm() == 0.0);
  // Per-sample masks (N x B).
  Matrix<double> mask2 = Matrix<double>::Zero(N, B);
  mask2(0, 0) = -kInf;
  mask2(5, 2) = -kInf;
  energy.SetMask(mask2);
  energy.Attention(xi, p);
  BOOST_TEST(p(0, 0) == 0.0);
  BOOST_TEST(p(5, 2) == 0.0);
  BOOST_TEST(p(0, 1) > 0.0);
  energy.SetMask(Matrix<double>());
}

BOOST_AUTO_TEST_CASE(cccp_step_is_softmax_attention) {
  const Index n = 6, N = 9, B = 4;
  const Matrix<double> X = RandomMatrix<double>(n, N, 5);
  const Matrix<double> xi = RandomMatrix<double>(n, B, 6);
  for (double beta : {0.25, 1.0, 4.0}) {
    auto energy = MakeEnergy(X, beta, false, true);
    Matrix<double> step(n, B), grad(n, B);
    energy.CccpUpdate(xi, step);
    BOOST_TEST(RelativeError(step, ReferenceAttention(X, X, xi, beta)) <= 1e-13);
    // ... and equals xi - grad E (the CCCP step of E = 0.5|xi|^2 - Phi).
    energy.Gradient(xi, grad);
    BOOST_TEST(RelativeError(step, xi - grad) <= 1e-13);
  }
}

BOOST_AUTO_TEST_CASE(well_separated_patterns_are_fixed_points) {
  const Index n = 32, N = 10;
  // Random +-1 patterns are nearly orthogonal: separation ~ n.
  Matrix<double> X = RandomMatrix<double>(n, N, 7).array().sign().matrix();
  auto energy = MakeEnergy(X, 1.0, false, false);
  Matrix<double> fx(n, N);
  energy.CccpUpdate(X, fx);
  BOOST_TEST((fx - X).cwiseAbs().maxCoeff() <= 1e-6);
  Matrix<double> g(n, N);
  energy.Gradient(X, g);
  BOOST_TEST(g.cwiseAbs().maxCoeff() <= 1e-6);
  // Retrieval from corrupted patterns (a quarter of the signs flipped).
  Matrix<double> xi = X;
  for (Index b = 0; b < N; ++b)
    for (Index i = 0; i < n / 4; ++i) xi((3 * i + b) % n, b) *= -1;
  implicit::CccpMap<double> map(energy);
  implicit::Summary s = implicit::PicardSolver<double>().Solve(map, xi);
  BOOST_TEST(s.IsConverged());
  BOOST_TEST((xi - X).cwiseAbs().maxCoeff() <= 1e-6);
}

BOOST_AUTO_TEST_CASE(huge_scores_and_extreme_beta_give_no_nan) {
  const Index n = 4, N = 5, B = 3;
  const Matrix<double> X = RandomMatrix<double>(n, N, 8);
  const Matrix<double> xi = RandomMatrix<double>(n, B, 9);
  // Scores of order 1e8 (and 1e11 with beta = 1e3).
  for (double beta : {1e-3, 1.0, 1e3}) {
    auto energy = MakeEnergy(X * 1e4, beta, false, false);
    const Matrix<double> big = xi * 1e4;
    Vector<double> e(B);
    Matrix<double> g(n, B), hv(n, B), step(n, B), p(N, B);
    energy.Value(big, e);
    energy.Gradient(big, g);
    energy.HessianVectorProduct(big, xi, hv);
    energy.CccpUpdate(big, step);
    energy.Attention(big, p);
    BOOST_TEST(e.allFinite());
    BOOST_TEST(g.allFinite());
    BOOST_TEST(hv.allFinite());
    BOOST_TEST(p.allFinite());
    BOOST_TEST((p.colwise().sum().array() - 1.0).abs().maxCoeff() <= 1e-12);
    // At huge scores the softmax is the argmax: the step is the best-matching pattern.
    const Matrix<double> scores = (X * 1e4).transpose() * big;
    for (Index b = 0; b < B; ++b) {
      Index best;
      scores.col(b).maxCoeff(&best);
      BOOST_TEST((step.col(b) - 1e4 * X.col(best)).norm() <= 1e-6 * 1e4 * X.col(best).norm());
    }
  }
  // beta = 1e-3 at ordinary scores: derivatives still agree with finite differences,
  // and the step is close to the mean of the patterns (uniform weights).
  auto small = MakeEnergy(X, 1e-3, true, true);
  implicit::testing::CheckEnergyFiniteDifferences(small, xi, 1e-6, "beta=1e-3");
  Matrix<double> step(n, B);
  small.CccpUpdate(xi, step);
  for (Index b = 0; b < B; ++b) {
    BOOST_TEST((step.col(b) - X.rowwise().mean()).norm() <= 1e-2);
  }
  // beta = 1e3 at ordinary scores.
  auto large = MakeEnergy(X, 1e3, false, true);
  HopfieldFunctor f{n, N, false, true, X, 1e3, Vector<double>()};
  implicit::AutoDiffEnergy<HopfieldFunctor, double> reference(f, n, large.parameter_set());
  implicit::testing::CheckEnergyAgainstReference(large, reference, xi, 1e-9, "beta=1e3");
}

BOOST_AUTO_TEST_CASE(float_energy_agrees_with_double) {
  const Index n = 6, N = 8, B = 3;
  const Matrix<double> X = RandomMatrix<double>(n, N, 10);
  const Matrix<double> xi = RandomMatrix<double>(n, B, 11);
  implicit::ModernHopfieldEnergy<float>::Options o;
  o.beta = 2.0;
  o.learn_patterns = true;
  implicit::ModernHopfieldEnergy<float> ef(X.cast<float>(), o);
  auto ed = MakeEnergy(X, 2.0, true, true);
  Vector<float> vf(B);
  Vector<double> vd(B);
  ef.Value(xi.cast<float>(), vf);
  ed.Value(xi, vd);
  BOOST_TEST(RelativeError(vf.cast<double>(), vd) <= 1e-5);
  Matrix<float> gf(n, B), hf(n, B);
  Matrix<double> gd(n, B), hd(n, B);
  ef.Gradient(xi.cast<float>(), gf);
  ed.Gradient(xi, gd);
  BOOST_TEST(RelativeError(gf.cast<double>(), gd) <= 1e-5);
  ef.HessianVectorProduct(xi.cast<float>(), xi.cast<float>(), hf);
  ed.HessianVectorProduct(xi, xi, hd);
  BOOST_TEST(RelativeError(hf.cast<double>(), hd) <= 1e-5);
  Vector<float> pf(ef.num_parameters());
  Vector<double> pd(ed.num_parameters());
  ef.ParameterVectorJacobianProduct(xi.cast<float>(), xi.cast<float>(), pf);
  ed.ParameterVectorJacobianProduct(xi, xi, pd);
  BOOST_TEST(RelativeError(pf.cast<double>(), pd) <= 1e-5);
  // Scores of 1e8 in float: still finite.
  Matrix<float> big = (xi * 1e4).cast<float>();
  ef.SetPatterns((X * 1e4).cast<float>());
  ef.Value(big, vf);
  ef.Gradient(big, gf);
  BOOST_TEST(vf.allFinite());
  BOOST_TEST(gf.allFinite());
}

BOOST_AUTO_TEST_CASE(invalid_arguments_throw_and_name_the_argument) {
  const Matrix<double> X = RandomMatrix<double>(4, 5, 12);
  implicit::ModernHopfieldEnergy<double>::Options o;
  o.beta = -1;
  BOOST_CHECK_THROW(implicit::ModernHopfieldEnergy<double>(X, o), std::invalid_argument);
  auto energy = MakeEnergy(X, 1.0, false, true);
  Matrix<double> bad(3, 2), g(3, 2);
  try {
    energy.Gradient(bad, g);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("Gradient(xi)") != std::string::npos);
  }
  BOOST_CHECK_THROW(energy.SetMask(Vector<double>::Zero(3)), std::invalid_argument);
  implicit::HopfieldLayer<double>::Options lo;
  lo.query_dim = 6;
  lo.pattern_dim = 5;
  lo.num_heads = 4;  // does not divide 6
  BOOST_CHECK_THROW(implicit::HopfieldLayer<double>{lo}, std::invalid_argument);
}

// ---------------------------------------------------------------------------
// Hopfield layer.

namespace {

implicit::HopfieldLayer<double>::Options LayerOptions(bool one_step, double a) {
  implicit::HopfieldLayer<double>::Options o;
  o.query_dim = 6;
  o.pattern_dim = 5;
  o.num_heads = 2;
  o.head_dim = 3;
  o.value_dim = 2;
  o.output_dim = 4;
  o.beta_per_head = true;
  o.beta = 0.5;
  o.one_step = one_step;
  o.query_weight = a;
  typename implicit::PicardSolver<double>::Options po;
  po.absolute_tolerance = 1e-13;
  po.max_iterations = 2000;
  o.solver = std::make_shared<implicit::PicardSolver<double>>(po);
  o.backward.tolerance = 1e-13;
  return o;
}

double HalfSquaredError(const Matrix<double>& Z, const Matrix<double>& T) {
  return 0.5 * (Z - T).squaredNorm();
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_step_layer_is_multi_head_attention) {
  auto o = LayerOptions(true, 0.0);
  implicit::HopfieldLayer<double> layer(o);
  const Matrix<double> R = RandomMatrix<double>(6, 3, 20), Y = RandomMatrix<double>(5, 7, 21);
  const Matrix<double> Z = layer.Forward(R, Y);
  const auto& P = layer.parameters();
  Matrix<double> A(4, 3);
  for (Index h = 0; h < 2; ++h) {
    const Matrix<double> K = P.Block("W_K").middleRows(3 * h, 3) * Y;
    const Matrix<double> V = P.Block("W_V").middleRows(2 * h, 2) * Y;
    const Matrix<double> q = P.Block("W_Q").middleRows(3 * h, 3) * R;
    A.middleRows(2 * h, 2) = ReferenceAttention(K, V, q, P.Block("beta")(h, 0));
  }
  BOOST_TEST(RelativeError(Z, P.Block("W_O") * A) <= 1e-13);
}

// With a query anchor (query_weight > 0) or a per-sample mask the layer's
// energy has per-sample data: its CCCP map evaluates blocks of samples with
// their anchors and masks (Energy::CccpUpdateColumns), and the active set
// gives the same iterates as whole-batch solves.
BOOST_AUTO_TEST_CASE(layer_active_set_uses_each_samples_anchor_and_mask) {
  const Index B = 8;
  const Matrix<double> R = RandomMatrix<double>(6, B, 26), Y = RandomMatrix<double>(5, 7, 27);
  Matrix<double> mask = Matrix<double>::Zero(7, B);
  for (Index b = 0; b < B; ++b) mask(b % 7, b) = -kInf;
  for (double a : {0.0, 0.3}) {
    BOOST_TEST_CONTEXT("query_weight " << a) {
      implicit::HopfieldLayer<double> layer(LayerOptions(false, a));
      layer.Forward(R, Y, mask);
      const implicit::FixedPointMap<double>& map = layer.map();
      BOOST_REQUIRE(!map.SupportsSubsets());
      const Matrix<double> xi0 = layer.energy().ProjectQueries(R);
      implicit::testing::CheckColumnEvaluation<double>(map, xi0, 1e-12);
      implicit::testing::CheckActiveSetMatchesWholeBatch<double>(map, xi0,
                                                                {"picard", "anderson", "broyden", "lbfgs"});
    }
  }
}

// The layer's energy reuses its keys K = W_K Y between evaluations; a change
// of the W_K values (an optimiser step without a new Forward) and new stored
// patterns (SetInputs) are still seen: each CCCP step is attention with the
// current keys.
BOOST_AUTO_TEST_CASE(layer_energy_keys_follow_weights_and_stored_patterns) {
  implicit::HopfieldLayer<double> layer(LayerOptions(false, 0.0));
  const Matrix<double> R = RandomMatrix<double>(6, 3, 60);
  layer.Forward(R, RandomMatrix<double>(5, 7, 61));
  auto& energy = const_cast<implicit::HopfieldLayerEnergy<double>&>(layer.energy());
  auto& P = layer.parameters();
  const Matrix<double> xi = RandomMatrix<double>(6, 3, 62);
  auto check = [&](const char* when) {
    BOOST_TEST_CONTEXT(when) {
      Matrix<double> step(6, 3), expected(6, 3);
      energy.CccpUpdate(xi, step);
      for (Index h = 0; h < 2; ++h) {
        const Matrix<double> K = P.Block("W_K").middleRows(3 * h, 3) * energy.stored_patterns();
        expected.middleRows(3 * h, 3) = ReferenceAttention(K, K, xi.middleRows(3 * h, 3), P.Block("beta")(h, 0));
      }
      BOOST_TEST(RelativeError(step, expected) <= 1e-13);
    }
  };
  check("after Forward");
  check("evaluated again");
  P.Block("W_K")(1, 2) += 0.5;
  check("after a change of W_K");
  P.Block("W_K").array() *= 0.9;
  check("after a second change of W_K");
  energy.SetInputs(energy.queries(), RandomMatrix<double>(5, 9, 63), Matrix<double>());
  check("after new stored patterns");
}

BOOST_AUTO_TEST_CASE(layer_energy_matches_finite_differences) {
  auto o = LayerOptions(false, 0.3);
  implicit::HopfieldLayer<double> layer(o);
  const Matrix<double> R = RandomMatrix<double>(6, 3, 22), Y = RandomMatrix<double>(5, 7, 23);
  Vector<double> mask = Vector<double>::Zero(7);
  mask(2) = -kInf;
  layer.Forward(R, Y, mask);
  auto& energy = const_cast<implicit::HopfieldLayerEnergy<double>&>(layer.energy());
  const Matrix<double> xi = RandomMatrix<double>(6, 3, 24);
  implicit::testing::CheckEnergyFiniteDifferences(energy, xi, 1e-7, "layer energy");
  // The CCCP map's input VJP (through the query anchor) and the stored-pattern VJP.
  const Matrix<double> u = RandomMatrix<double>(6, 3, 25);
  Matrix<double> dR(6, 3), dY(5, 7);
  energy.InputVectorJacobianProduct(xi, u, dR);
  energy.StoredPatternVectorJacobianProduct(xi, u, dY);
  const double h = 1e-5;
  Matrix<double> gp(6, 3), gm(6, 3);
  auto pair = [&](const Matrix<double>& Rx, const Matrix<double>& Yx) {
    energy.SetInputs(Rx, Yx, mask);
    energy.Gradient(xi, gp);
    return (gp.array() * u.array()).sum();
  };
  for (Index i = 0; i < 6; ++i) {
    for (Index b = 0; b < 3; ++b) {
      Matrix<double> Rp = R, Rm = R;
      Rp(i, b) += h;
      Rm(i, b) -= h;
      BOOST_TEST(dR(i, b) == (pair(Rp, Y) - pair(Rm, Y)) / (2 * h),
                 boost::test_tools::tolerance(1e-6));
    }
  }
  for (Index i = 0; i < 5; ++i) {
    for (Index j = 0; j < 7; ++j) {
      Matrix<double> Yp = Y, Ym = Y;
      Yp(i, j) += h;
      Ym(i, j) -= h;
      const double fd = (pair(R, Yp) - pair(R, Ym)) / (2 * h);
      BOOST_TEST(std::abs(dY(i, j) - fd) <= 1e-7 * (1 + std::abs(fd)));
    }
  }
}

// The layer's Backward agrees with finite differences of its Forward, in both
// modes (retrieval: the implicit-function-theorem gradient).
BOOST_AUTO_TEST_CASE(layer_backward_matches_finite_differences_of_forward) {
  for (bool one_step : {true, false}) {
    auto o = LayerOptions(one_step, 0.4);
    implicit::HopfieldLayer<double> layer(o);
    const Matrix<double> R = RandomMatrix<double>(6, 3, 30), Y = RandomMatrix<double>(5, 7, 31);
    const Matrix<double> T = RandomMatrix<double>(4, 3, 32);
    const Matrix<double> Z = layer.Forward(R, Y);
    BOOST_REQUIRE(layer.summary().IsConverged());
    const auto g = layer.Backward(Z - T);
    BOOST_TEST_CONTEXT("one_step=" << one_step) {
      BOOST_TEST(g.ok());
      const double h = 1e-6;
      auto& theta = layer.parameters().values();
      Vector<double> fd(theta.size());
      for (Index k = 0; k < theta.size(); ++k) {
        const double saved = theta(k);
        theta(k) = saved + h;
        const double lp = HalfSquaredError(layer.Forward(R, Y), T);
        theta(k) = saved - h;
        const double lm = HalfSquaredError(layer.Forward(R, Y), T);
        theta(k) = saved;
        fd(k) = (lp - lm) / (2 * h);
      }
      BOOST_TEST(RelativeError(g.parameters, fd) <= 1e-6);
      Matrix<double> fdR(6, 3), fdY(5, 7);
      for (Index i = 0; i < R.size(); ++i) {
        Matrix<double> Rp = R, Rm = R;
        Rp(i) += h;
        Rm(i) -= h;
        fdR(i) = (HalfSquaredError(layer.Forward(Rp, Y), T) -
                  HalfSquaredError(layer.Forward(Rm, Y), T)) / (2 * h);
      }
      for (Index i = 0; i < Y.size(); ++i) {
        Matrix<double> Yp = Y, Ym = Y;
        Yp(i) += h;
        Ym(i) -= h;
        fdY(i) = (HalfSquaredError(layer.Forward(R, Yp), T) -
                  HalfSquaredError(layer.Forward(R, Ym), T)) / (2 * h);
      }
      BOOST_TEST(RelativeError(g.queries, fdR) <= 1e-6);
      BOOST_TEST(RelativeError(g.stored_patterns, fdY) <= 1e-6);
    }
  }
}

BOOST_AUTO_TEST_CASE(retrieval_without_query_anchor_has_zero_query_gradient) {
  auto o = LayerOptions(false, 0.0);
  implicit::HopfieldLayer<double> layer(o);
  const Matrix<double> R = RandomMatrix<double>(6, 3, 33), Y = RandomMatrix<double>(5, 7, 34);
  const Matrix<double> Z = layer.Forward(R, Y);
  const auto g = layer.Backward(Z);
  BOOST_TEST(g.ok());
  BOOST_TEST(g.queries.norm() == 0.0);
  BOOST_TEST(layer.parameters().BlockOf(const_cast<Vector<double>&>(g.parameters), "W_Q").norm() == 0.0);
  BOOST_TEST(g.stored_patterns.norm() > 0.0);
}

// ---------------------------------------------------------------------------
// Training through the implicit backward pass.

// Learned stored patterns of the energy itself: fit X so that retrieval from
// fixed queries lands on targets (ImplicitLayer on the CCCP map).
BOOST_AUTO_TEST_CASE(energy_with_learned_patterns_trains_through_implicit_backward) {
  // Each query should retrieve its own target (well separated +-1 vectors);
  // the patterns start as noisy copies of the targets and learn.
  const Index n = 8, B = 5;
  Matrix<double> targets(n, B);  // columns of a Sylvester-Hadamard matrix: orthogonal
  for (Index i = 0; i < n; ++i)
    for (Index b = 0; b < B; ++b) targets(i, b) = std::bitset<8>(unsigned(i & (b + 1))).count() % 2 ? -1 : 1;
  auto energy = MakeEnergy(targets + 0.5 * RandomMatrix<double>(n, B, 40), 1.0, true, false);
  implicit::CccpMap<double> map(energy);
  typename implicit::PicardSolver<double>::Options po;
  po.absolute_tolerance = 1e-11;
  po.max_iterations = 1000;
  implicit::PicardSolver<double> solver(po);
  implicit::ImplicitLayer<double> layer(map, solver);
  const Matrix<double> queries = targets + 0.3 * RandomMatrix<double>(n, B, 41);
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    Matrix<double> z = queries;
    BOOST_REQUIRE(layer.Forward(z).IsConverged());
    const double loss = HalfSquaredError(z, targets);
    if (step == 0) first = loss;
    last = loss;
    const auto g = layer.Backward(z - targets);
    BOOST_REQUIRE(g.ok());
    energy.parameters()->values() -= 0.2 * g.parameter_gradient;
  }
  BOOST_TEST_MESSAGE("learned patterns: loss " << first << " -> " << last);
  BOOST_TEST(last < 0.1 * first);
}

namespace {
template <typename LayerT, typename F>
void TrainLayer(LayerT& layer, F forward, const Matrix<double>& T, double lr, int steps,
                double factor, const std::string& what) {
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    const Matrix<double> Z = forward();
    const double loss = HalfSquaredError(Z, T);
    if (step == 0) first = loss;
    last = loss;
    const auto g = layer.Backward(Z - T);
    BOOST_REQUIRE(g.ok());
    layer.parameters().values() -= lr * g.parameters;
  }
  BOOST_TEST_MESSAGE(what << ": loss " << first << " -> " << last);
  BOOST_TEST(last < factor * first, what << ": loss " << first << " -> " << last);
}
}  // namespace

BOOST_AUTO_TEST_CASE(hopfield_layer_trains_by_retrieval_to_convergence) {
  // Pure retrieval (query_weight 0): W_K, W_V, W_O and beta learn. The
  // targets come from a teacher layer of the same form, so they are reachable.
  auto o = LayerOptions(false, 0.0);
  implicit::HopfieldLayer<double> layer(o);
  o.seed = 77;
  implicit::HopfieldLayer<double> teacher(o);
  const Matrix<double> R = RandomMatrix<double>(6, 5, 50), Y = RandomMatrix<double>(5, 7, 51);
  const Matrix<double> T = teacher.Forward(R, Y);
  TrainLayer(layer, [&] { return layer.Forward(R, Y); }, T, 0.1, 40, 0.2, "HopfieldLayer");
}

BOOST_AUTO_TEST_CASE(hopfield_pooling_and_lookup_train) {
  auto o = LayerOptions(false, 0.3);
  o.learned_queries = 2;
  implicit::HopfieldPooling<double> pooling(o);
  const Matrix<double> Y = RandomMatrix<double>(5, 7, 53);
  const Matrix<double> T = RandomMatrix<double>(4, 2, 54);
  TrainLayer(pooling, [&] { return pooling.Forward(Y); }, T, 0.05, 40, 0.5, "HopfieldPooling");

  auto o2 = LayerOptions(false, 0.3);
  o2.learned_patterns = 6;
  implicit::HopfieldLookup<double> lookup(o2);
  const Matrix<double> R = RandomMatrix<double>(6, 4, 55);
  const Matrix<double> T2 = RandomMatrix<double>(4, 4, 56);
  TrainLayer(lookup, [&] { return lookup.Forward(R); }, T2, 0.05, 40, 0.5, "HopfieldLookup");
}

BOOST_AUTO_TEST_CASE(float_layer_agrees_with_double) {
  for (bool one_step : {true, false}) {
    implicit::HopfieldLayer<double>::Options od;
    od.query_dim = 6;
    od.pattern_dim = 5;
    od.num_heads = 2;
    od.one_step = one_step;
    od.query_weight = 0.3;
    implicit::HopfieldLayer<float>::Options of;
    of.query_dim = 6;
    of.pattern_dim = 5;
    of.num_heads = 2;
    of.one_step = one_step;
    of.query_weight = 0.3;
    of.backward.tolerance = 1e-5;
    implicit::HopfieldLayer<double> ld(od);
    implicit::HopfieldLayer<float> lf(of);  // same seed: the same weights up to rounding
    const Matrix<double> R = RandomMatrix<double>(6, 3, 60), Y = RandomMatrix<double>(5, 7, 61);
    const Matrix<double> Zd = ld.Forward(R, Y);
    const Matrix<float> Zf = lf.Forward(R.cast<float>(), Y.cast<float>());
    BOOST_TEST(lf.summary().IsConverged());
    BOOST_TEST(RelativeError(Zf.cast<double>(), Zd) <= 1e-4);
    const auto gd = ld.Backward(Zd);
    const auto gf = lf.Backward(Zf);
    BOOST_TEST(gf.ok());
    BOOST_TEST(RelativeError(gf.parameters.cast<double>(), gd.parameters) <= 1e-3);
  }
}

// ---- The column softmax, one-pass evaluations, subsets, threads ------------

using Scalars = std::tuple<float, double>;

// Every documented special column, at lengths that exercise both the
// vectorised body and the scalar head/tail of each column, in place and not.
BOOST_AUTO_TEST_CASE_TEMPLATE(column_softmax_special_columns, S, Scalars) {
  const S inf = std::numeric_limits<S>::infinity(), nan = std::numeric_limits<S>::quiet_NaN();
  for (const Index N : {1, 3, 8, 17, 64}) {
    BOOST_TEST_CONTEXT("N = " << N) {
      const Index B = 8;
      Matrix<S> a = RandomMatrix<S>(N, B, 40, 3.0);
      // column 0: ordinary; 1: some entries masked; 2: all masked; 3: +inf entries
      // (and a masked one); 4: NaN (with +inf); 5: NaN among masked entries;
      // 6: huge scores; 7: NaN among finite scores.
      for (Index i = 0; i < N; i += 2) a(i, 1) = -inf;
      a(N - 1, 1) = S(0.5);
      a.col(2).setConstant(-inf);
      a(N / 2, 3) = inf;
      a(N - 1, 3) = inf;
      a(0, 3) = N > 2 ? -inf : a(0, 3);
      a(0, 4) = inf;
      a(N - 1, 4) = nan;
      a.col(5).setConstant(-inf);
      a(N / 2, 5) = nan;
      a.col(6) *= S(1e30);
      a(N / 2, 7) = nan;
      Matrix<S> p(N, B);
      Vector<S> lse;
      implicit::ColumnSoftmax<S>(a, p, &lse);
      // In place gives the same; ColumnLogSumExp the same lse.
      Matrix<S> q = a;
      Vector<S> lse2;
      implicit::ColumnSoftmax<S>(q, q, &lse2);
      Vector<S> lse3(B);
      implicit::ColumnLogSumExp<S>(a, lse3);
      const double tol = sizeof(S) == 4 ? 1e-6 : 1e-14;
      BOOST_TEST(implicit::testing::AgreeEntrywise(q, p, tol));
      BOOST_TEST(implicit::testing::AgreeEntrywise(lse2, lse, tol));
      BOOST_TEST(implicit::testing::AgreeEntrywise(lse3, lse, tol));
      for (const Index b : {0, 1, 6}) {
        // Reference in long double over the unmasked entries.
        long double m = -INFINITY, sum = 0;
        for (Index i = 0; i < N; ++i)
          if (a(i, b) != -inf) m = std::max<long double>(m, a(i, b));
        for (Index i = 0; i < N; ++i)
          if (a(i, b) != -inf) sum += std::exp(static_cast<long double>(a(i, b)) - m);
        BOOST_TEST(std::abs(lse(b) - static_cast<double>(m + std::log(sum))) <=
                   tol * (1 + std::abs(static_cast<double>(m))));
        for (Index i = 0; i < N; ++i) {
          if (a(i, b) == -inf) {
            BOOST_TEST(p(i, b) == S(0));  // exactly
          } else {
            const double ref = static_cast<double>(std::exp(a(i, b) - m) / sum);
            BOOST_TEST(std::abs(p(i, b) - ref) <= tol);
          }
        }
        BOOST_TEST(std::abs(p.col(b).sum() - S(1)) <= S(10 * tol));
      }
      BOOST_TEST(lse(2) == -inf);
      BOOST_TEST(p.col(2).norm() == S(0));
      BOOST_TEST(lse(3) == inf);
      for (Index i = 0; i < N; ++i) {
        BOOST_TEST(p(i, 3) == (a(i, 3) == inf ? S(1) / S(N == 1 ? 1 : 2) : S(0)));
      }
      for (const Index b : {4, 5, 7}) {
        BOOST_TEST(std::isnan(lse(b)));
        BOOST_TEST(p.col(b).array().isNaN().all());
      }
    }
  }
}

namespace {

template <typename S>
implicit::ModernHopfieldEnergy<S> MakeEnergyOf(const Matrix<double>& X, double beta) {
  typename implicit::ModernHopfieldEnergy<S>::Options o;
  o.beta = beta;
  return implicit::ModernHopfieldEnergy<S>(X.cast<S>(), o);
}

// The masks the energy accepts: none, one for every sample (log priors and
// -inf), and one per sample (including a sample with every pattern masked).
template <typename S>
std::vector<Matrix<S>> Masks(Index N, Index B) {
  const S inf = std::numeric_limits<S>::infinity();
  Matrix<S> shared = RandomMatrix<S>(N, 1, 41, 0.5);
  shared(1, 0) = -inf;
  shared(N - 1, 0) = -inf;
  Matrix<S> per_sample = RandomMatrix<S>(N, B, 42, 0.5);
  per_sample(0, 0) = -inf;
  per_sample.col(B - 1).setConstant(-inf);
  return {Matrix<S>(), shared, per_sample};
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(one_pass_evaluations_agree_with_separate_ones, S, Scalars) {
  const double tol = sizeof(S) == 4 ? 1e-5 : 1e-13;
  const Index n = 6, N = 11, B = 5;
  const Matrix<double> X = RandomMatrix<double>(n, N, 43);
  const Matrix<S> xi = RandomMatrix<S>(n, B, 44);
  for (const double beta : {0.5, 3.0}) {
    auto energy = MakeEnergyOf<S>(X, beta);
    for (const Matrix<S>& mask : Masks<S>(N, B)) {
      BOOST_TEST_CONTEXT("beta " << beta << ", mask " << mask.rows() << "x" << mask.cols()) {
        energy.SetMask(mask);
        implicit::testing::CheckOnePassEvaluations<S>(energy, xi, tol);
        // The fused update may overwrite its own input.
        Matrix<S> in_place = xi, expected(n, B);
        Vector<S> e(B), e1(B);
        energy.CccpUpdateAndValue(xi, expected, e);
        energy.CccpUpdateAndValue(in_place, in_place, e1);
        BOOST_TEST(implicit::testing::AgreeEntrywise(in_place, expected, 0.0));
        BOOST_TEST(implicit::testing::AgreeEntrywise(e1, e, 0.0));
      }
    }
  }
}

// A batch of many column blocks (internal::SoftmaxAttentionBlocks: about 64
// samples each, the last one shorter) gives, for every mask, what softmax
// attention gives sample by sample, and the same bits on 1 and 3 threads.
BOOST_AUTO_TEST_CASE_TEMPLATE(column_blocks_agree_with_attention_sample_by_sample, S, Scalars) {
  const double tol = sizeof(S) == 4 ? 1e-5 : 1e-13;
  const Index n = 8, N = 40, B = 301;
  const double beta = 2.0;
  const Matrix<double> X = RandomMatrix<double>(n, N, 53);
  const Matrix<S> xi = RandomMatrix<S>(n, B, 54), v = RandomMatrix<S>(n, B, 55);
  auto energy = MakeEnergyOf<S>(X, beta);
  for (const Matrix<S>& mask : Masks<S>(N, B)) {
    BOOST_TEST_CONTEXT("mask " << mask.rows() << "x" << mask.cols()) {
      energy.SetMask(mask);
      Matrix<double> expected_out(n, B), expected_grad(n, B);
      Vector<double> expected_e(B);
      for (Index b = 0; b < B; ++b) {  // in double, one sample at a time
        const Vector<double> x = xi.col(b).template cast<double>();
        Vector<double> s = beta * (X.transpose() * x);
        if (mask.size() > 0) s += mask.col(mask.cols() == 1 ? 0 : b).template cast<double>();
        const double m = s.maxCoeff();
        Vector<double> p = Vector<double>::Zero(N);
        double lse = -kInf;
        if (m > -kInf) {
          p = (s.array() - m).exp().matrix();
          lse = m + std::log(p.sum());
          p /= p.sum();
        }
        expected_out.col(b) = X * p;
        expected_grad.col(b) = x - X * p;
        expected_e(b) = 0.5 * x.squaredNorm() - lse / beta;
      }
      Matrix<S> out(n, B), grad(n, B), hv(n, B);
      Vector<S> e(B), e2(B), e3(B);
      energy.CccpUpdateAndValue(xi, out, e);
      energy.GradientAndValue(xi, grad, e2);
      energy.Value(xi, e3);
      BOOST_TEST(implicit::testing::AgreeEntrywise(out, expected_out, tol));
      BOOST_TEST(implicit::testing::AgreeEntrywise(grad, expected_grad, tol));
      BOOST_TEST(implicit::testing::AgreeEntrywise(e, expected_e, tol));
      BOOST_TEST(implicit::testing::AgreeEntrywise(e2, expected_e, tol));
      BOOST_TEST(implicit::testing::AgreeEntrywise(e3, expected_e, tol));
      if constexpr (sizeof(S) == 8) {  // H v against central differences of the gradient
        const double h = 1e-5;
        Matrix<S> plus(n, B), minus(n, B);
        energy.HessianVectorProduct(xi, v, hv);
        energy.Gradient(xi + h * v, plus);
        energy.Gradient(xi - h * v, minus);
        BOOST_TEST(implicit::testing::AgreeEntrywise(hv, (plus - minus) / (2 * h), 1e-7));
      }
      implicit::testing::CheckSameBitsOnThreads<S>(energy, xi, v);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(subsets_of_the_batch_evaluate_like_the_whole, S, Scalars) {
  const double tol = sizeof(S) == 4 ? 1e-5 : 1e-13;
  const Index n = 6, N = 11, B = 5;
  const Matrix<double> X = RandomMatrix<double>(n, N, 45);
  const Matrix<S> xi = RandomMatrix<S>(n, B, 46);
  auto energy = MakeEnergyOf<S>(X, 2.0);
  const auto masks = Masks<S>(N, B);
  energy.SetMask(masks[0]);
  implicit::testing::CheckSubsetEvaluation<S>(energy, xi, tol);
  energy.SetMask(masks[1]);
  implicit::testing::CheckSubsetEvaluation<S>(energy, xi, tol);
  energy.SetMask(masks[2]);  // per-sample mask: the samples differ
  BOOST_TEST(!energy.SupportsSubsets());
  implicit::CccpMap<S> map(energy);
  BOOST_TEST(!map.SupportsSubsets());
  energy.SetMask(Matrix<S>());
  BOOST_TEST(map.SupportsSubsets());
}

BOOST_AUTO_TEST_CASE(layer_energy_one_pass_and_subsets) {
  const Matrix<double> R = RandomMatrix<double>(6, 4, 47), Y = RandomMatrix<double>(5, 7, 48);
  const Matrix<double> xi = RandomMatrix<double>(6, 4, 49);
  Vector<double> shared = Vector<double>::Zero(7);
  shared(2) = -kInf;
  Matrix<double> per_sample = Matrix<double>::Zero(7, 4);
  per_sample(3, 1) = -kInf;
  for (const double a : {0.0, 0.3}) {
    auto o = LayerOptions(true, a);
    implicit::HopfieldLayer<double> layer(o);
    for (const Matrix<double>& mask : {Matrix<double>(), Matrix<double>(shared), per_sample}) {
      BOOST_TEST_CONTEXT("a " << a << ", mask " << mask.rows() << "x" << mask.cols()) {
        layer.Forward(R, Y, mask);
        const auto& energy = layer.energy();
        implicit::testing::CheckOnePassEvaluations<double>(energy, xi, 1e-13);
        const bool shared_energy = a == 0.0 && mask.cols() <= 1;
        BOOST_TEST(energy.SupportsSubsets() == shared_energy);
        if (shared_energy) implicit::testing::CheckSubsetEvaluation<double>(energy, xi, 1e-13);
      }
    }
  }
}

// One const energy called from several threads at once, with different batch
// sizes (each thread has its own scratch), gives the serial results.
BOOST_AUTO_TEST_CASE(concurrent_calls_on_one_energy_agree_with_serial_ones) {
  const Index n = 8, N = 40;
  const Matrix<double> X = RandomMatrix<double>(n, N, 50);
  const auto energy = MakeEnergyOf<double>(X, 2.0);
  const int T = 4;
  std::vector<Matrix<double>> xs, expected_out(T), out(T);
  std::vector<Vector<double>> expected_e(T), e(T);
  for (int t = 0; t < T; ++t) {
    xs.push_back(RandomMatrix<double>(n, 3 + 5 * t, 51 + t));
    expected_out[t].resize(n, xs[t].cols());
    expected_e[t].resize(xs[t].cols());
    energy.CccpUpdateAndValue(xs[t], expected_out[t], expected_e[t]);
  }
  std::vector<std::thread> threads;
  std::vector<int> ok(T, 1);
  for (int t = 0; t < T; ++t) {
    threads.emplace_back([&, t] {
      out[t].resize(n, xs[t].cols());
      e[t].resize(xs[t].cols());
      Matrix<double> g(n, xs[t].cols());
      Vector<double> v(xs[t].cols());
      for (int rep = 0; rep < 200; ++rep) {
        energy.CccpUpdateAndValue(xs[t], out[t], e[t]);
        energy.GradientAndValue(xs[(t + 1) % T].leftCols(2), g.leftCols(2), v.head(2));
        ok[t] &= (out[t] == expected_out[t]) && (e[t] == expected_e[t]);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < T; ++t) BOOST_TEST(ok[t] == 1);
}
