// Log-normaliser attention: grad log Z of the discrete family is softmax
// attention, of the Gaussian family mu + Sigma eta (also as the limit of a
// discrete family over Gaussian samples); derivatives against automatic
// derivatives and finite differences; the residual LayerNorm map's Jacobian
// products; robustness; training through the implicit backward pass; the
// one-pass evaluations and subset evaluation.
#define BOOST_TEST_MODULE log_normalizer
#include <boost/test/unit_test.hpp>

#include <implicit/core/autodiff_energy.h>
#include <implicit/core/energy_maps.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/log_normalizer.h>
#include <implicit/layers/modern_hopfield_energy.h>
#include <implicit/solvers/picard.h>

#include "support/dual_products.h"
#include "support/energy_checks.h"
#include "support/fused_energy_checks.h"
#include "support/test_problems.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using implicit::DiscreteLogNormalizer;
using implicit::GaussianLogNormalizer;
using implicit::Index;
using implicit::Matrix;
using implicit::ResidualLogNormalizerMap;
using implicit::Vector;
using implicit::testing::RandomMatrix;
using implicit::testing::RelativeError;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// log Z of the discrete family as a plain templated function; theta = K.
struct DiscreteLogZ {
  Index d, N;
  template <typename T>
  T operator()(const Vector<T>& eta, const Vector<T>& theta) const {
    using std::exp;
    using std::log;
    Eigen::Map<const Matrix<T>> K(theta.data(), d, N);
    Vector<T> s = implicit::testing::MatVec(K.transpose(), eta);
    T m = s(0);
    for (Index i = 1; i < N; ++i) if (s(i) > m) m = s(i);
    T sum(0);
    for (Index i = 0; i < N; ++i) sum += exp(s(i) - m);
    return m + log(sum);
  }
};

// log Z of the Gaussian family; theta = [mu; Sigma].
struct GaussianLogZ {
  Index d;
  template <typename T>
  T operator()(const Vector<T>& eta, const Vector<T>& theta) const {
    Eigen::Map<const Vector<T>> mu(theta.data(), d);
    Eigen::Map<const Matrix<T>> S(theta.data() + d, d, d);
    const Matrix<T> Ssym = T(0.5) * (S + S.transpose());
    return mu.dot(eta) + T(0.5) * eta.dot(implicit::testing::MatVec(Ssym, eta));
  }
};

// Softmax-weighted average of the values, one sample at a time.
Matrix<double> Attention(const Matrix<double>& K, const Matrix<double>& V, const Matrix<double>& q) {
  Matrix<double> out(V.rows(), q.cols());
  for (Index b = 0; b < q.cols(); ++b) {
    Vector<double> s = K.transpose() * q.col(b);
    s.array() -= s.maxCoeff();
    Vector<double> w = s.array().exp().matrix();
    out.col(b) = V * w / w.sum();
  }
  return out;
}

DiscreteLogNormalizer<double> MakeDiscrete(const Matrix<double>& K, bool learn = true) {
  DiscreteLogNormalizer<double>::Options o;
  o.learn_keys = learn;
  return DiscreteLogNormalizer<double>(K, o);
}

Matrix<double> Spd(Index d, unsigned seed) { return implicit::testing::RandomSpd<double>(d, 0.2, 1.5, seed); }

}  // namespace

BOOST_AUTO_TEST_CASE(discrete_gradient_is_softmax_attention) {
  const Index d = 5, N = 8, B = 4;
  const Matrix<double> K = RandomMatrix<double>(d, N, 1);
  const Matrix<double> V = RandomMatrix<double>(3, N, 2);
  const Matrix<double> eta = RandomMatrix<double>(d, B, 3);
  auto logz = MakeDiscrete(K);
  Matrix<double> g(d, B), ev(3, B);
  logz.Gradient(eta, g);
  BOOST_TEST(RelativeError(g, Attention(K, K, eta)) <= 1e-14);
  logz.ExpectedValues(eta, V, ev);
  BOOST_TEST(RelativeError(ev, Attention(K, V, eta)) <= 1e-14);
  // Derivatives against autodiff and finite differences.
  implicit::AutoDiffEnergy<DiscreteLogZ, double> reference(DiscreteLogZ{d, N}, d, logz.parameter_set());
  implicit::testing::CheckEnergyAgainstReference(logz, reference, eta, 1e-12, "discrete");
  implicit::testing::CheckEnergyFiniteDifferences(logz, eta, 1e-7, "discrete");
  // The energy 0.5|eta|^2 - log Z is the modern Hopfield energy at beta = 1:
  // its CCCP step is the attention.
  implicit::LogNormalizerEnergy<double> energy(logz);
  implicit::ModernHopfieldEnergy<double> hopfield(K);
  Vector<double> e1(B), e2(B);
  Matrix<double> s1(d, B), s2(d, B);
  energy.Value(eta, e1);
  hopfield.Value(eta, e2);
  energy.CccpUpdate(eta, s1);
  hopfield.CccpUpdate(eta, s2);
  BOOST_TEST(RelativeError(e1, e2) <= 1e-14);
  BOOST_TEST(RelativeError(s1, s2) <= 1e-14);
  implicit::testing::CheckEnergyFiniteDifferences(energy, eta, 1e-7, "log-normaliser energy");
}

BOOST_AUTO_TEST_CASE(discrete_masking_and_huge_scores) {
  const Index d = 4, N = 6, B = 3;
  const Matrix<double> K = RandomMatrix<double>(d, N, 4);
  const Matrix<double> eta = RandomMatrix<double>(d, B, 5);
  auto logz = MakeDiscrete(K, false);
  Vector<double> m = Vector<double>::Zero(N);
  m(1) = -kInf;
  m(4) = -kInf;
  logz.SetLogBaseMeasure(m);
  Matrix<double> p(N, B), g(d, B);
  logz.Weights(eta, p);
  BOOST_TEST(p.row(1).norm() == 0.0);
  BOOST_TEST(p.row(4).norm() == 0.0);
  // Masking = removing the keys.
  Matrix<double> kept(d, N - 2);
  kept << K.col(0), K.col(2), K.col(3), K.col(5);
  logz.Gradient(eta, g);
  BOOST_TEST(RelativeError(g, Attention(kept, kept, eta)) <= 1e-14);
  implicit::testing::CheckEnergyFiniteDifferences(logz, eta, 1e-7, "masked");
  // Scores of 1e8: finite, and the attention picks the best key.
  logz.SetLogBaseMeasure(Matrix<double>());
  const Matrix<double> big = 1e8 * eta;
  Vector<double> lz(B);
  logz.Value(big, lz);
  logz.Gradient(big, g);
  BOOST_TEST(lz.allFinite());
  BOOST_TEST(g.allFinite());
  for (Index b = 0; b < B; ++b) {
    Index best;
    (K.transpose() * eta.col(b)).maxCoeff(&best);
    BOOST_TEST((g.col(b) - K.col(best)).norm() <= 1e-12);
  }
  // float
  DiscreteLogNormalizer<float> lf(K.cast<float>());
  Matrix<float> gf(d, B);
  lf.Gradient((1e8 * eta).cast<float>(), gf);
  BOOST_TEST(gf.allFinite());
  lf.Gradient(eta.cast<float>(), gf);
  logz.Gradient(eta, g);
  BOOST_TEST(RelativeError(gf.cast<double>(), g) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(gaussian_measure_gives_mu_plus_sigma_eta) {
  const Index d = 4, B = 3;
  const Vector<double> mu = RandomMatrix<double>(d, 1, 6);
  const Matrix<double> Sigma = Spd(d, 7);
  const Matrix<double> eta = RandomMatrix<double>(d, B, 8);
  GaussianLogNormalizer<double> logz(mu, Sigma);
  Matrix<double> g(d, B), hv(d, B);
  logz.Gradient(eta, g);
  for (Index b = 0; b < B; ++b) BOOST_TEST(RelativeError(g.col(b), mu + Sigma * eta.col(b)) <= 1e-14);
  logz.HessianVectorProduct(eta, eta, hv);
  BOOST_TEST(RelativeError(hv, Sigma * eta) <= 1e-14);
  implicit::AutoDiffEnergy<GaussianLogZ, double> reference(GaussianLogZ{d}, d, logz.parameter_set());
  implicit::testing::CheckEnergyAgainstReference(logz, reference, eta, 1e-12, "gaussian");
  implicit::testing::CheckEnergyFiniteDifferences(logz, eta, 1e-7, "gaussian");
  // The Gaussian log-normaliser is the limit of the discrete one over samples
  // k ~ N(mu, Sigma) with equal weights 1/N (Monte Carlo, N = 40000).
  const Index N = 40000;
  std::mt19937 gen(9);
  std::normal_distribution<double> normal;
  const Matrix<double> L = Sigma.llt().matrixL();
  Matrix<double> samples(d, N);
  for (Index i = 0; i < N; ++i) {
    Vector<double> z(d);
    for (Index r = 0; r < d; ++r) z(r) = normal(gen);
    samples.col(i) = mu + L * z;
  }
  auto discrete = MakeDiscrete(samples, false);
  discrete.SetLogBaseMeasure(Vector<double>::Constant(N, -std::log(double(N))));
  const Matrix<double> small = 0.3 * eta;
  Matrix<double> gd(d, B), gg(d, B);
  Vector<double> vd(B), vg(B);
  discrete.Gradient(small, gd);
  logz.Gradient(small, gg);
  discrete.Value(small, vd);
  logz.Value(small, vg);
  BOOST_TEST((gd - gg).cwiseAbs().maxCoeff() <= 0.05);
  BOOST_TEST((vd - vg).cwiseAbs().maxCoeff() <= 0.05);
}

// A log-normaliser is a function to ascend, not an energy: CccpUpdate throws
// std::logic_error naming the class and the two wrappers; the parameters are
// reported only when something is learned.
BOOST_AUTO_TEST_CASE(log_normalizers_have_no_cccp_step) {
  const Index d = 3, B = 2;
  const Matrix<double> eta = RandomMatrix<double>(d, B, 31);
  Matrix<double> out(d, B);
  DiscreteLogNormalizer<double> discrete(RandomMatrix<double>(d, 5, 32));
  GaussianLogNormalizer<double> gaussian(Vector<double>::Zero(d), Spd(d, 33));
  const std::vector<std::pair<implicit::Energy<double>*, std::string>> cases = {
      {&discrete, "DiscreteLogNormalizer"}, {&gaussian, "GaussianLogNormalizer"}};
  for (const auto& [energy, name] : cases) {
    try {
      energy->CccpUpdate(eta, out);
      BOOST_ERROR(name + "::CccpUpdate did not throw");
    } catch (const std::logic_error& e) {
      BOOST_TEST(std::string(e.what()) ==
                 name + " is a log-normaliser, not an energy: wrap it in "
                        "LogNormalizerEnergy or ResidualLogNormalizerMap");
    }
  }
  BOOST_TEST(discrete.num_parameters() == 0);
  BOOST_TEST(discrete.parameters() == nullptr);
  BOOST_TEST(gaussian.num_parameters() == d + d * d);
  BOOST_TEST(gaussian.parameters() == &gaussian.parameter_set());
}

BOOST_AUTO_TEST_CASE(residual_map_jacobian_products_match_finite_differences) {
  const Index d = 6, N = 7, B = 3;
  const Matrix<double> z = RandomMatrix<double>(d, B, 10);
  const Matrix<double> c = RandomMatrix<double>(d, B, 11);
  ResidualLogNormalizerMap<double>::Options o;
  o.step = 0.7;
  o.gamma = 1.3;
  o.delta = 0.2;
  auto discrete = MakeDiscrete(RandomMatrix<double>(d, N, 12));
  ResidualLogNormalizerMap<double> map(discrete, o);
  map.SetInput(c);
  implicit::testing::CheckMapFiniteDifferences(
      map, z, 1e-7, "discrete residual", discrete.parameters(),
      [&](const Matrix<double>& x) { map.SetInput(x); }, c);
  GaussianLogNormalizer<double> gaussian(RandomMatrix<double>(d, 1, 13), Spd(d, 14));
  ResidualLogNormalizerMap<double> gmap(gaussian, o);
  gmap.SetInput(c);
  implicit::testing::CheckMapFiniteDifferences(
      gmap, z, 1e-7, "gaussian residual", gaussian.parameters(),
      [&](const Matrix<double>& x) { gmap.SetInput(x); }, c);
  // The output is LayerNorm'd: per column, mean delta and standard deviation
  // gamma (up to epsilon).
  Matrix<double> f(d, B);
  map.Evaluate(z, f);
  for (Index b = 0; b < B; ++b) {
    const double mean = f.col(b).mean();
    const double sd = std::sqrt((f.col(b).array() - mean).square().mean());
    BOOST_TEST(mean == 0.2, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(sd == 1.3, boost::test_tools::tolerance(1e-4));
  }
  // The map is one gradient-ascent step on log Z before the LayerNorm.
  Matrix<double> grad(d, B), y(d, B);
  discrete.Gradient(z, grad);
  map.layer_norm().Apply(z + 0.7 * grad + c, y);
  BOOST_TEST(RelativeError(f, y) <= 1e-15);
  ResidualLogNormalizerMap<double>::Options bad;
  bad.gamma = 0;
  BOOST_CHECK_THROW(ResidualLogNormalizerMap<double>(discrete, bad), std::invalid_argument);
}

// The residual map trains as a DEQ layer: keys (discrete) or mean and
// covariance (Gaussian) learned through the implicit backward pass so that the
// equilibria for given inputs match a teacher's.
BOOST_AUTO_TEST_CASE(residual_map_trains_through_implicit_backward) {
  const Index d = 6, N = 5, B = 8;
  const Matrix<double> inputs = 2.0 * RandomMatrix<double>(d, B, 20);
  ResidualLogNormalizerMap<double>::Options o;
  o.step = 1.0;
  o.gamma = 0.5;
  typename implicit::PicardSolver<double>::Options po;
  po.absolute_tolerance = 1e-12;
  po.max_iterations = 500;
  implicit::PicardSolver<double> solver(po);
  auto train = [&](implicit::Energy<double>& teacher_logz, implicit::Energy<double>& student_logz,
                   double lr, const std::string& what) {
    ResidualLogNormalizerMap<double> teacher(teacher_logz, o), student(student_logz, o);
    teacher.SetInput(inputs);
    student.SetInput(inputs);
    Matrix<double> targets = Matrix<double>::Zero(d, B);
    const implicit::Summary ts = solver.Solve(teacher, targets);
    BOOST_REQUIRE_MESSAGE(ts.IsConverged(), what << ": teacher " << ts.BriefReport());
    implicit::ImplicitLayer<double> layer(student, solver);
    double first = 0, last = 0;
    for (int step = 0; step < 40; ++step) {
      Matrix<double> z = Matrix<double>::Zero(d, B);
      BOOST_REQUIRE(layer.Forward(z).IsConverged());
      const double loss = 0.5 * (z - targets).squaredNorm();
      if (step == 0) first = loss;
      last = loss;
      const auto g = layer.Backward(z - targets);
      BOOST_REQUIRE_MESSAGE(g.ok(), g.summary.BriefReport());
      student.parameters()->values() -= lr * g.parameter_gradient;
    }
    BOOST_TEST_MESSAGE(what << ": loss " << first << " -> " << last);
    BOOST_TEST(last < 0.2 * first, what << ": loss " << first << " -> " << last);
  };
  const Matrix<double> K = RandomMatrix<double>(d, N, 21);
  auto teacher = MakeDiscrete(K, false);
  auto student = MakeDiscrete(K + 0.5 * RandomMatrix<double>(d, N, 22), true);
  train(teacher, student, 0.5, "discrete keys");
  GaussianLogNormalizer<double> gteacher(RandomMatrix<double>(d, 1, 23), Spd(d, 24));
  GaussianLogNormalizer<double> gstudent(Vector<double>::Zero(d), Matrix<double>::Identity(d, d));
  train(gteacher, gstudent, 0.5, "gaussian mean and covariance");
}

using OnePassScalars = std::tuple<float, double>;

// GradientAndValue (one softmax head / one product Sigma eta) agrees with the
// separate calls, and LogNormalizerEnergy's CccpUpdateAndValue with CccpUpdate
// + Value, in float and double, with and without a base measure; subsets of a
// batch evaluate like those columns unless the base measure is per sample.
BOOST_AUTO_TEST_CASE_TEMPLATE(one_pass_evaluations_and_subsets, S, OnePassScalars) {
  const double tol = sizeof(S) == 4 ? 1e-5 : 1e-13;
  const S inf = std::numeric_limits<S>::infinity();
  const Index d = 4, N = 7, B = 4;
  const Matrix<S> K = RandomMatrix<S>(d, N, 90), eta = RandomMatrix<S>(d, B, 91);
  DiscreteLogNormalizer<S> discrete(K);
  Matrix<S> shared = RandomMatrix<S>(N, 1, 92, 0.3);
  shared(2, 0) = -inf;
  Matrix<S> per_sample = Matrix<S>::Zero(N, B);
  per_sample(1, 2) = -inf;
  for (const Matrix<S>& m : {Matrix<S>(), shared, per_sample}) {
    BOOST_TEST_CONTEXT("base measure " << m.rows() << "x" << m.cols()) {
      discrete.SetLogBaseMeasure(m);
      implicit::LogNormalizerEnergy<S> energy(discrete);
      implicit::testing::CheckOnePassEvaluations<S>(discrete, eta, tol, /*cccp=*/false);
      implicit::testing::CheckOnePassEvaluations<S>(energy, eta, tol);
      BOOST_TEST(discrete.SupportsSubsets() == (m.cols() <= 1));
      BOOST_TEST(energy.SupportsSubsets() == (m.cols() <= 1));
      if (m.cols() <= 1) {
        implicit::testing::CheckSubsetEvaluation<S>(discrete, eta, tol, false);
        implicit::testing::CheckSubsetEvaluation<S>(energy, eta, tol);
      }
    }
  }
  const Matrix<S> A = RandomMatrix<S>(d, d, 93, 0.3);
  GaussianLogNormalizer<S> gaussian(RandomMatrix<S>(d, 1, 94).col(0), A * A.transpose());
  implicit::LogNormalizerEnergy<S> gaussian_energy(gaussian);
  implicit::testing::CheckOnePassEvaluations<S>(gaussian, eta, tol, false);
  implicit::testing::CheckOnePassEvaluations<S>(gaussian_energy, eta, tol);
  implicit::testing::CheckSubsetEvaluation<S>(gaussian, eta, tol, false);
  implicit::testing::CheckSubsetEvaluation<S>(gaussian_energy, eta, tol);
}
