// RBM-effective energies: every hidden prior and visible type against
// automatic derivatives and finite differences; the Gaussian prior is the
// classical quadratic Hopfield energy, the Poisson prior the exponential one,
// the Bernoulli prior has cumulants of all orders, constant units mix into the
// modern Hopfield energy; binary dynamics; float32; training through the
// implicit backward pass; the one-pass evaluations and subset evaluation.
#define BOOST_TEST_MODULE rbm
#include <boost/test/unit_test.hpp>

#include <implicit/core/autodiff_energy.h>
#include <implicit/core/energy_maps.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/dense_associative_memory.h>
#include <implicit/layers/modern_hopfield_energy.h>
#include <implicit/layers/rbm.h>
#include <implicit/solvers/picard.h>

#include "support/energy_checks.h"
#include "support/fused_energy_checks.h"
#include "support/test_problems.h"

#include <bitset>
#include <cmath>
#include <limits>
#include <memory>
#include <tuple>
#include <vector>

using implicit::Index;
using implicit::Matrix;
using implicit::RbmEnergy;
using implicit::Vector;
using implicit::VisibleType;
using implicit::testing::RandomMatrix;
using implicit::testing::RelativeError;

namespace {

enum class PriorKind { kGaussian, kPoisson, kBernoulli, kConstant, kLogCosh };

// The effective energy as a plain templated function; theta = [W; b].
struct RbmFunctor {
  Index n, M;
  PriorKind kind;
  Vector<double> a, c;  // per-unit prior parameters (Gaussian: mean a, std c)
  bool gaussian_visible, learn_bias;
  template <typename T>
  T K(const T& t, Index mu) const {
    using std::cosh;
    using std::exp;
    using std::log;
    switch (kind) {
      case PriorKind::kGaussian: return T(a(mu)) * t + T(0.5 * c(mu) * c(mu)) * t * t;
      case PriorKind::kPoisson: return T(a(mu)) * (exp(t) - T(1));
      case PriorKind::kBernoulli: return log(T(1 - a(mu)) + T(a(mu)) * exp(t));
      case PriorKind::kConstant: return T(a(mu)) * t;
      case PriorKind::kLogCosh: return log(cosh(t));
    }
    return T(0);
  }
  template <typename T>
  T operator()(const Vector<T>& v, const Vector<T>& theta) const {
    Eigen::Map<const Matrix<T>> W(theta.data(), n, M);
    T e = gaussian_visible ? T(0.5) * v.squaredNorm() : T(0);
    if (learn_bias) {
      for (Index i = 0; i < n; ++i) e -= theta(n * M + i) * v(i);
    }
    for (Index mu = 0; mu < M; ++mu) e -= K(T(W.col(mu).dot(v)), mu);
    return e;
  }
};

std::shared_ptr<const implicit::HiddenPrior<double>> MakePrior(PriorKind kind, const Vector<double>& a,
                                                               const Vector<double>& c) {
  switch (kind) {
    case PriorKind::kGaussian: return std::make_shared<implicit::GaussianPrior<double>>(a, c);
    case PriorKind::kPoisson: return std::make_shared<implicit::PoissonPrior<double>>(a);
    case PriorKind::kBernoulli: return std::make_shared<implicit::BernoulliPrior<double>>(a);
    case PriorKind::kConstant: return std::make_shared<implicit::ConstantPrior<double>>(a);
    case PriorKind::kLogCosh:  // a user CGF: the +-1 (Rademacher) hidden unit
      return std::make_shared<implicit::CustomPrior<double>>(
          "rademacher", [](double t, Index) { return std::log(std::cosh(t)); },
          [](double t, Index) { return std::tanh(t); },
          [](double t, Index) { return 1 - std::tanh(t) * std::tanh(t); });
  }
  return nullptr;
}

RbmEnergy<double> MakeRbm(const Matrix<double>& W, std::shared_ptr<const implicit::HiddenPrior<double>> prior,
                          VisibleType visible, bool learn_bias, bool learn_weights = true) {
  RbmEnergy<double>::Options o;
  o.visible = visible;
  o.learn_bias = learn_bias;
  o.learn_weights = learn_weights;
  return RbmEnergy<double>(W, std::move(prior), o);
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_prior_matches_autodiff_and_finite_differences) {
  const Index n = 5, M = 4, B = 3;
  const Matrix<double> W = 0.5 * RandomMatrix<double>(n, M, 1);
  const Matrix<double> v = RandomMatrix<double>(n, B, 2);
  Vector<double> a(M), c(M);
  a << 0.3, 0.6, 0.2, 0.8;  // means / rates / probabilities / constants, per unit
  c << 1.2, 0.5, 0.9, 1.0;
  for (PriorKind kind : {PriorKind::kGaussian, PriorKind::kPoisson, PriorKind::kBernoulli,
                         PriorKind::kConstant, PriorKind::kLogCosh}) {
    for (VisibleType visible : {VisibleType::kGaussian, VisibleType::kBinary}) {
      for (bool learn_bias : {false, true}) {
        auto prior = MakePrior(kind, a, c);
        auto energy = MakeRbm(W, prior, visible, learn_bias);
        if (learn_bias) energy.parameters()->Block("b") = RandomMatrix<double>(n, 1, 3);
        RbmFunctor f{n, M, kind, a, c, visible == VisibleType::kGaussian, learn_bias};
        implicit::AutoDiffEnergy<RbmFunctor, double> reference(f, n, energy.parameter_set());
        const std::string what = prior->name() + (visible == VisibleType::kGaussian ? " gaussian" : " binary") +
                                 (learn_bias ? " bias" : "");
        implicit::testing::CheckEnergyAgainstReference(energy, reference, v, 1e-12, what);
        implicit::testing::CheckEnergyFiniteDifferences(energy, v, 1e-7, what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(gaussian_prior_is_the_classical_quadratic_hopfield_energy) {
  const Index n = 6, M = 4, B = 3;
  const Matrix<double> W = RandomMatrix<double>(n, M, 4);
  const Matrix<double> v = RandomMatrix<double>(n, B, 5);
  // Standard normal hidden units: exactly the quadratic memory with X = W.
  auto rbm = MakeRbm(W, std::make_shared<implicit::GaussianPrior<double>>(), VisibleType::kGaussian, false);
  implicit::DenseAssociativeMemoryEnergy<double>::Options o;
  o.interaction = implicit::Interaction::Quadratic();
  implicit::DenseAssociativeMemoryEnergy<double> hopfield(W, o);
  Vector<double> e1(B), e2(B);
  Matrix<double> g1(n, B), g2(n, B), h1(n, B), h2(n, B);
  rbm.Value(v, e1);
  hopfield.Value(v, e2);
  rbm.Gradient(v, g1);
  hopfield.Gradient(v, g2);
  rbm.HessianVectorProduct(v, v, h1);
  hopfield.HessianVectorProduct(v, v, h2);
  BOOST_TEST(RelativeError(e1, e2) <= 1e-14);
  BOOST_TEST(RelativeError(g1, g2) <= 1e-14);
  BOOST_TEST(RelativeError(h1, h2) <= 1e-14);
  // N(m, s^2): couplings s^2 W W^T plus the field m sum_mu w_mu.
  auto rbm2 = MakeRbm(W, std::make_shared<implicit::GaussianPrior<double>>(0.7, 1.3),
                      VisibleType::kGaussian, false);
  rbm2.Value(v, e1);
  const Matrix<double> J = 1.3 * 1.3 * W * W.transpose();
  const Vector<double> field = 0.7 * W.rowwise().sum();
  for (Index b = 0; b < B; ++b) {
    const double classical =
        0.5 * v.col(b).squaredNorm() - 0.5 * v.col(b).dot(J * v.col(b)) - field.dot(v.col(b));
    BOOST_TEST(e1(b) == classical, boost::test_tools::tolerance(1e-12));
  }
}

BOOST_AUTO_TEST_CASE(poisson_prior_is_the_exponential_memory_up_to_a_constant) {
  const Index n = 6, M = 5, B = 4;
  const Matrix<double> W = 0.4 * RandomMatrix<double>(n, M, 6);
  const Matrix<double> v = RandomMatrix<double>(n, B, 7);
  auto rbm = MakeRbm(W, std::make_shared<implicit::PoissonPrior<double>>(1.0), VisibleType::kGaussian, false);
  implicit::DenseAssociativeMemoryEnergy<double>::Options o;
  o.interaction = implicit::Interaction::Exponential(1.0);
  implicit::DenseAssociativeMemoryEnergy<double> dam(W, o);
  Vector<double> e1(B), e2(B);
  Matrix<double> g1(n, B), g2(n, B);
  rbm.Value(v, e1);
  dam.Value(v, e2);
  rbm.Gradient(v, g1);
  dam.Gradient(v, g2);
  // E_rbm = 0.5|v|^2 - sum_mu (e^t - 1) = E_dam + M.
  for (Index b = 0; b < B; ++b) BOOST_TEST(e1(b) - e2(b) == double(M), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(RelativeError(g1, g2) <= 1e-14);
}

BOOST_AUTO_TEST_CASE(bernoulli_prior_has_interactions_of_all_orders) {
  // The cumulants kappa_k = K^(k)(0) of Bernoulli(p) are all nonzero for p not
  // in {0, 1/2 +- sqrt(3)/6, 1}: kappa_1 = p, kappa_2 = p q, kappa_3 = p q (1 - 2p),
  // kappa_4 = p q (1 - 6 p q), q = 1 - p. Checked against the closed-form K', K''
  // and finite differences of them.
  const double p = 0.3, q = 0.7, h = 1e-4;
  implicit::BernoulliPrior<double> prior(p);
  BOOST_TEST(prior.K(0.0, 0) == 0.0);
  BOOST_TEST(prior.dK(0.0, 0) == p, boost::test_tools::tolerance(1e-14));
  BOOST_TEST(prior.d2K(0.0, 0) == p * q, boost::test_tools::tolerance(1e-14));
  const double k3 = (prior.d2K(h, 0) - prior.d2K(-h, 0)) / (2 * h);
  const double k4 = (prior.d2K(h, 0) - 2 * prior.d2K(0, 0) + prior.d2K(-h, 0)) / (h * h);
  BOOST_TEST(k3 == p * q * (1 - 2 * p), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(k4 == p * q * (1 - 6 * p * q), boost::test_tools::tolerance(1e-4));
  BOOST_TEST(std::abs(k3) > 0.01);
  BOOST_TEST(std::abs(k4) > 0.01);
  // Stable at huge arguments.
  BOOST_TEST(std::isfinite(prior.K(1e4, 0)));
  BOOST_TEST(prior.K(1e4, 0) == 1e4 + std::log(p), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(prior.dK(-1e4, 0) == 0.0);
  BOOST_TEST(prior.dK(1e4, 0) == 1.0);
}

// The vectorised matrix evaluation of the Bernoulli prior equals its per-entry
// K and K' and long double sigmoids (K'' = sigmoid(z) sigmoid(-z) to full
// relative accuracy) over arguments from -1e4 to 1e4, with one p for all units
// and with one per unit; too few per-unit values are refused.
BOOST_AUTO_TEST_CASE(bernoulli_prior_matrix_evaluation_equals_the_entrywise_one) {
  // (and small arguments, where expm1 and log1p must keep their relative accuracy)
  const std::vector<double> small = {-0.7, -0.5, -0.49, -0.3, -1e-3, -1e-8, -1e-13, -1e-300, 0.0,
                                     1e-300, 1e-13, 1e-8, 1e-3, 0.3, 0.5, 0.7};
  const Index M = 5, B = 41 + static_cast<Index>(small.size());
  Matrix<double> t(M, B);
  for (Index b = 0; b < 41; ++b)
    for (Index mu = 0; mu < M; ++mu) t(mu, b) = (b - 20) * (b - 20) * (b < 20 ? -25.0 : 25.0) + 0.1 * mu;
  for (Index j = 0; j < static_cast<Index>(small.size()); ++j)
    for (Index mu = 0; mu < M; ++mu) t(mu, 41 + j) = small[j] * (1 + 0.1 * mu);
  Vector<double> per_unit(M);
  per_unit << 0.05, 0.3, 0.5, 0.7, 0.999;
  for (const Vector<double>& p : {Vector<double>(Vector<double>::Constant(1, 0.3)), per_unit}) {
    implicit::BernoulliPrior<double> prior(p);
    Matrix<double> k, dk, d2k;
    prior.Evaluate(t, &k, &dk, &d2k);
    for (Index b = 0; b < B; ++b) {
      for (Index mu = 0; mu < M; ++mu) {
        BOOST_TEST_CONTEXT("t = " << t(mu, b) << ", unit " << mu) {
          BOOST_TEST(k(mu, b) == prior.K(t(mu, b), mu), boost::test_tools::tolerance(1e-14));
          // sigmoid(z) and sigmoid(z) sigmoid(-z), z = t + logit p, in long double
          const long double pm = p.size() == 1 ? p(0) : p(mu);
          const long double z = t(mu, b) + std::log(pm) - std::log1p(-pm);
          const long double s = 1 / (1 + std::exp(-z)), s_minus = 1 / (1 + std::exp(z));
          // (relative error |z| eps: z itself is rounded, and exp magnifies it)
          const double tol = 4e-16 * (4 + std::abs(static_cast<double>(z)));
          BOOST_TEST(dk(mu, b) == static_cast<double>(s), boost::test_tools::tolerance(tol));
          BOOST_TEST(d2k(mu, b) == static_cast<double>(s * s_minus), boost::test_tools::tolerance(tol));
          BOOST_TEST(dk(mu, b) == prior.dK(t(mu, b), mu), boost::test_tools::tolerance(tol));
          BOOST_TEST(std::isfinite(k(mu, b)));
        }
      }
    }
  }
  implicit::BernoulliPrior<double> two_units(Vector<double>::Constant(2, 0.4));
  Matrix<double> k;
  BOOST_CHECK_THROW(two_units.Evaluate(t, &k, nullptr, nullptr), std::invalid_argument);
}

// -(1/beta) log sum_mu exp(-beta E_mu(v)) over one-constant-unit RBMs with
// weights x_mu is the modern Hopfield energy 0.5|v|^2 - (1/beta) lse(beta X^T v).
BOOST_AUTO_TEST_CASE(constant_units_mix_into_the_modern_hopfield_energy) {
  const Index n = 5, N = 6, B = 3;
  const double beta = 1.7;
  const Matrix<double> X = RandomMatrix<double>(n, N, 8);
  const Matrix<double> v = RandomMatrix<double>(n, B, 9);
  auto constant = std::make_shared<implicit::ConstantPrior<double>>(1.0);
  Matrix<double> components(N, B);  // E_mu(v_b)
  std::vector<Matrix<double>> grads;
  for (Index mu = 0; mu < N; ++mu) {
    auto rbm = MakeRbm(X.col(mu), constant, VisibleType::kGaussian, false);
    Vector<double> e(B);
    rbm.Value(v, e);
    components.row(mu) = e.transpose();
    Matrix<double> g(n, B);
    rbm.Gradient(v, g);
    grads.push_back(g);
  }
  implicit::ModernHopfieldEnergy<double>::Options o;
  o.beta = beta;
  implicit::ModernHopfieldEnergy<double> hopfield(X, o);
  Vector<double> eh(B);
  Matrix<double> gh(n, B);
  hopfield.Value(v, eh);
  hopfield.Gradient(v, gh);
  for (Index b = 0; b < B; ++b) {
    const double m = (-beta * components.col(b)).maxCoeff();
    const Vector<double> w = (-beta * components.col(b).array() - m).exp().matrix();
    const double free_energy = -(m + std::log(w.sum())) / beta;
    BOOST_TEST(free_energy == eh(b), boost::test_tools::tolerance(1e-12));
    // Its gradient: the Boltzmann average of the component gradients.
    Vector<double> g = Vector<double>::Zero(n);
    for (Index mu = 0; mu < N; ++mu) g += w(mu) / w.sum() * grads[mu].col(b);
    BOOST_TEST(RelativeError(g, gh.col(b)) <= 1e-12);
  }
}

BOOST_AUTO_TEST_CASE(binary_visible_dynamics) {
  const Index n = 40, M = 8, B = 6;
  const Matrix<double> W = RandomMatrix<double>(n, M, 10).array().sign().matrix();
  const Matrix<double> s0 = RandomMatrix<double>(n, B, 11).array().sign().matrix();
  implicit::BinaryRetrievalOptions o;
  o.seed = 3;
  // Gaussian prior = the quadratic memory; Poisson(1) = the exponential memory:
  // the same dynamics step for step (same visiting order).
  auto pairs = {std::make_pair(std::shared_ptr<const implicit::HiddenPrior<double>>(
                                   std::make_shared<implicit::GaussianPrior<double>>()),
                               implicit::Interaction::Quadratic()),
                std::make_pair(std::shared_ptr<const implicit::HiddenPrior<double>>(
                                   std::make_shared<implicit::PoissonPrior<double>>(1.0)),
                               implicit::Interaction::Exponential(1.0))};
  for (const auto& pr : pairs) {
    auto rbm = MakeRbm(W, pr.first, VisibleType::kBinary, false);
    Matrix<double> s1 = s0, s2 = s0;
    const auto r1 = rbm.RetrieveBinary(s1, o);
    const auto r2 = implicit::RetrieveBinary<double>(W, pr.second, s2, o);
    BOOST_TEST((s1 - s2).norm() == 0.0, pr.first->name());
    BOOST_TEST(r1.num_converged() == B);
    BOOST_TEST(r2.num_converged() == B);
  }
  // Bernoulli prior with a visible bias: every sweep lowers (or keeps) the energy.
  auto rbm = MakeRbm(0.3 * W, std::make_shared<implicit::BernoulliPrior<double>>(0.3),
                     VisibleType::kBinary, true);
  rbm.parameters()->Block("b") = 0.2 * RandomMatrix<double>(n, 1, 12);
  Matrix<double> s = s0;
  Vector<double> before(B), after(B);
  implicit::BinaryRetrievalOptions one;
  one.max_sweeps = 1;
  for (int sweep = 0; sweep < 8; ++sweep) {
    rbm.Value(s, before);
    one.seed = sweep;
    rbm.RetrieveBinary(s, one);
    rbm.Value(s, after);
    for (Index b = 0; b < B; ++b) BOOST_TEST(after(b) <= before(b) + 1e-12);
  }
  BOOST_CHECK_THROW(rbm.CccpUpdate(s, s), std::logic_error);
}

BOOST_AUTO_TEST_CASE(float_energy_agrees_with_double) {
  const Index n = 6, M = 4, B = 3;
  const Matrix<double> W = 0.5 * RandomMatrix<double>(n, M, 13);
  const Matrix<double> v = RandomMatrix<double>(n, B, 14);
  RbmEnergy<float> ef(W.cast<float>(), std::make_shared<implicit::BernoulliPrior<float>>(0.3f));
  auto ed = MakeRbm(W, std::make_shared<implicit::BernoulliPrior<double>>(0.3), VisibleType::kGaussian, false);
  Vector<float> vf(B);
  Vector<double> vd(B);
  Matrix<float> gf(n, B), hf(n, B);
  Matrix<double> gd(n, B), hd(n, B);
  ef.Value(v.cast<float>(), vf);
  ed.Value(v, vd);
  ef.Gradient(v.cast<float>(), gf);
  ed.Gradient(v, gd);
  ef.HessianVectorProduct(v.cast<float>(), v.cast<float>(), hf);
  ed.HessianVectorProduct(v, v, hd);
  BOOST_TEST(RelativeError(vf.cast<double>(), vd) <= 1e-5);
  BOOST_TEST(RelativeError(gf.cast<double>(), gd) <= 1e-5);
  BOOST_TEST(RelativeError(hf.cast<double>(), hd) <= 1e-5);
  Vector<float> pf(ef.num_parameters());
  Vector<double> pd(ed.num_parameters());
  ef.ParameterVectorJacobianProduct(v.cast<float>(), v.cast<float>(), pf);
  ed.ParameterVectorJacobianProduct(v, v, pd);
  BOOST_TEST(RelativeError(pf.cast<double>(), pd) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(invalid_arguments_throw) {
  BOOST_CHECK_THROW(implicit::BernoulliPrior<double>(1.5), std::invalid_argument);
  BOOST_CHECK_THROW(implicit::PoissonPrior<double>(-1.0), std::invalid_argument);
  // Values that are not finite are refused where they are given (NaN makes
  // every comparison false, so the range checks used to let it through, and
  // every energy was then NaN).
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  BOOST_CHECK_THROW(implicit::BernoulliPrior<double>{nan}, std::invalid_argument);
  BOOST_CHECK_THROW(implicit::PoissonPrior<double>{nan}, std::invalid_argument);
  BOOST_CHECK_THROW(implicit::PoissonPrior<double>{inf}, std::invalid_argument);
  BOOST_CHECK_THROW(implicit::GaussianPrior<double>(nan, 1.0), std::invalid_argument);
  BOOST_CHECK_THROW(implicit::GaussianPrior<double>(0.0, inf), std::invalid_argument);
  BOOST_CHECK_THROW(implicit::ConstantPrior<double>{nan}, std::invalid_argument);
  const Matrix<double> W = RandomMatrix<double>(4, 3, 15);
  BOOST_CHECK_THROW(RbmEnergy<double>(W, nullptr), std::invalid_argument);
  // A per-unit prior with values for fewer hidden units than W has: refused
  // when the energy is built, for each prior (not at the first evaluation).
  BOOST_CHECK_THROW(MakeRbm(W, std::make_shared<implicit::PoissonPrior<double>>(Vector<double>::Ones(2)),
                            VisibleType::kGaussian, false),
                    std::invalid_argument);
  BOOST_CHECK_THROW(MakeRbm(W, std::make_shared<implicit::BernoulliPrior<double>>(Vector<double>::Constant(2, 0.5)),
                            VisibleType::kGaussian, false),
                    std::invalid_argument);
  BOOST_CHECK_THROW(MakeRbm(W,
                            std::make_shared<implicit::GaussianPrior<double>>(Vector<double>::Zero(3),
                                                                              Vector<double>::Ones(2)),
                            VisibleType::kGaussian, false),
                    std::invalid_argument);
  BOOST_CHECK_THROW(MakeRbm(W, std::make_shared<implicit::ConstantPrior<double>>(Vector<double>::Ones(2)),
                            VisibleType::kGaussian, false),
                    std::invalid_argument);
  // Enough values (or one for all) are accepted.
  MakeRbm(W, std::make_shared<implicit::PoissonPrior<double>>(Vector<double>::Ones(3)), VisibleType::kGaussian,
          false);
  MakeRbm(W, std::make_shared<implicit::GaussianPrior<double>>(Vector<double>::Zero(1), Vector<double>::Ones(3)),
          VisibleType::kGaussian, false);
  Matrix<double> bad(3, 2), gbad(3, 2);
  BOOST_CHECK_THROW(MakeRbm(W, std::make_shared<implicit::GaussianPrior<double>>(), VisibleType::kGaussian,
                            false).Gradient(bad, gbad),
                    std::invalid_argument);
}

// Bernoulli hidden units, Gaussian visible units: W learned through the
// implicit backward pass of the CCCP map v <- W K'(W^T v) so that probes
// retrieve a teacher RBM's states.
BOOST_AUTO_TEST_CASE(rbm_trains_through_implicit_backward) {
  const Index n = 8, M = 3, B = 6;
  Matrix<double> H(n, M);  // orthogonal +-1 columns
  for (Index i = 0; i < n; ++i)
    for (Index mu = 0; mu < M; ++mu) H(i, mu) = std::bitset<8>(unsigned(i & (mu + 1))).count() % 2 ? -1 : 1;
  const Matrix<double> Wt = 2.0 * H / std::sqrt(double(n));
  auto prior = std::make_shared<implicit::BernoulliPrior<double>>(0.5);
  Matrix<double> probes(n, B);
  for (Index b = 0; b < B; ++b) probes.col(b) = 1.5 * H.col(b % M) / std::sqrt(double(n));
  probes += 0.1 * RandomMatrix<double>(n, B, 17);
  typename implicit::PicardSolver<double>::Options po;
  po.absolute_tolerance = 1e-12;
  po.max_iterations = 2000;
  implicit::PicardSolver<double> solver(po);
  auto teacher = MakeRbm(Wt, prior, VisibleType::kGaussian, false, false);
  implicit::CccpMap<double> teacher_map(teacher);
  Matrix<double> targets = probes;
  BOOST_REQUIRE(solver.Solve(teacher_map, targets).IsConverged());
  auto student = MakeRbm(Wt + 0.1 * RandomMatrix<double>(n, M, 18), prior, VisibleType::kGaussian, false);
  implicit::CccpMap<double> map(student);
  implicit::ImplicitLayer<double> layer(map, solver);
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    Matrix<double> z = probes;
    BOOST_REQUIRE(layer.Forward(z).IsConverged());
    const double loss = 0.5 * (z - targets).squaredNorm();
    if (step == 0) first = loss;
    last = loss;
    const auto g = layer.Backward(z - targets);
    BOOST_REQUIRE_MESSAGE(g.ok(), g.summary.BriefReport());
    student.parameters()->values() -= 0.1 * g.parameter_gradient;
  }
  BOOST_TEST_MESSAGE("rbm: loss " << first << " -> " << last);
  BOOST_TEST(last < 0.1 * first);
}

namespace {

template <typename S>
std::shared_ptr<const implicit::HiddenPrior<S>> MakePriorOf(PriorKind kind, Index M) {
  const Vector<S> a = (Vector<double>::LinSpaced(M, 0.2, 0.7)).cast<S>();
  switch (kind) {
    case PriorKind::kGaussian: return std::make_shared<implicit::GaussianPrior<S>>(a, a);
    case PriorKind::kPoisson: return std::make_shared<implicit::PoissonPrior<S>>(a);
    case PriorKind::kBernoulli: return std::make_shared<implicit::BernoulliPrior<S>>(a);
    case PriorKind::kConstant: return std::make_shared<implicit::ConstantPrior<S>>(a);
    case PriorKind::kLogCosh:
      return std::make_shared<implicit::CustomPrior<S>>(
          "rademacher", [](S t, Index) { return S(std::log(std::cosh(t))); },
          [](S t, Index) { return S(std::tanh(t)); },
          [](S t, Index) { return S(1 - std::tanh(t) * std::tanh(t)); });
  }
  return nullptr;
}

}  // namespace

using OnePassScalars = std::tuple<float, double>;

// CccpUpdateAndValue / GradientAndValue (one product W^T v) agree with the
// separate calls for every prior, both visible types (binary: no CCCP step, it
// throws like CccpUpdate), with a bias, in float and double; no per-sample
// data, so any subset of a batch evaluates like those columns of the whole.
BOOST_AUTO_TEST_CASE_TEMPLATE(one_pass_evaluations_and_subsets, S, OnePassScalars) {
  const double tol = sizeof(S) == 4 ? 1e-5 : 1e-13;
  const Index n = 5, M = 4, B = 4;
  const Matrix<S> W = RandomMatrix<S>(n, M, 70, 0.5), v = RandomMatrix<S>(n, B, 71);
  for (const auto kind : {PriorKind::kGaussian, PriorKind::kPoisson, PriorKind::kBernoulli,
                          PriorKind::kConstant, PriorKind::kLogCosh}) {
    for (const auto visible : {VisibleType::kGaussian, VisibleType::kBinary}) {
      BOOST_TEST_CONTEXT("prior " << static_cast<int>(kind) << ", visible "
                                  << static_cast<int>(visible)) {
        typename RbmEnergy<S>::Options o;
        o.visible = visible;
        o.learn_bias = true;
        RbmEnergy<S> energy(W, MakePriorOf<S>(kind, M), o);
        energy.parameters()->Block("b") = RandomMatrix<S>(n, 1, 72);
        const bool cccp = visible == VisibleType::kGaussian;
        implicit::testing::CheckOnePassEvaluations<S>(energy, v, tol, cccp);
        implicit::testing::CheckSubsetEvaluation<S>(energy, v, tol, cccp);
        if (!cccp) {
          Matrix<S> out(n, B);
          Vector<S> e(B);
          BOOST_CHECK_THROW(energy.CccpUpdateAndValue(v, out, e), std::logic_error);
        }
      }
    }
  }
}

// A Hessian linearisation borrows its G'' storage from the energy's pool and
// gives it back when destroyed (separable_energy.h): linearisations alive at
// once never share it, and one made in storage given back by a wider one
// (Newton-CG's shrinking active sets) has its own point's products.
BOOST_AUTO_TEST_CASE(linearisations_keep_their_own_curvatures) {
  const Index n = 6, M = 9;
  const Matrix<double> W = RandomMatrix<double>(n, M, 80, 0.6);
  auto energy = MakeRbm(W, std::make_shared<implicit::BernoulliPrior<double>>(0.3), VisibleType::kGaussian,
                        false, false);
  const Matrix<double> x1 = RandomMatrix<double>(n, 5, 81, 2.0), x2 = RandomMatrix<double>(n, 3, 82, 2.0);
  auto check = [&](const implicit::Linearization<double>& hessian, const Matrix<double>& x, unsigned seed) {
    const Matrix<double> v = RandomMatrix<double>(n, x.cols(), seed);
    Matrix<double> expected(n, x.cols()), got(n, x.cols());
    energy.HessianVectorProduct(x, v, expected);
    hessian.JacobianVectorProduct(v, got);
    BOOST_TEST(RelativeError(got, expected) <= 1e-13);
  };
  auto first = energy.LinearizeHessian(x1);
  {
    auto second = energy.LinearizeHessian(x2);  // made while the first lives
    check(*first, x1, 83);
    check(*second, x2, 84);
  }
  first.reset();  // its 5-column storage goes back to the pool ...
  auto narrow = energy.LinearizeHessian(x2);
  check(*narrow, x2, 85);  // ... and serves a 3-column point
  auto wide = energy.LinearizeHessian(x1);
  check(*wide, x1, 86);
  check(*narrow, x2, 87);
}

// A batch of many column blocks (internal::ColumnBlocks: about 64 samples
// each, the last one shorter) evaluates like its columns alone and like the
// whole-batch chunks of the Hessian kept at the point (LinearizeHessian), for
// the Bernoulli prior with a bias, and gives the same bits on 1 and 3 threads.
BOOST_AUTO_TEST_CASE(column_blocks_agree_with_subsets_chunks_and_threads) {
  const Index n = 6, M = 40, B = 301;
  const Matrix<double> W = RandomMatrix<double>(n, M, 73, 0.5), x = RandomMatrix<double>(n, B, 74);
  const Matrix<double> u = RandomMatrix<double>(n, B, 75);
  RbmEnergy<double>::Options o;
  o.learn_bias = true;
  RbmEnergy<double> energy(W, MakePriorOf<double>(PriorKind::kBernoulli, M), o);
  energy.parameters()->Block("b") = RandomMatrix<double>(n, 1, 76);
  implicit::testing::CheckOnePassEvaluations<double>(energy, x, 1e-13, true);
  implicit::testing::CheckSubsetEvaluation<double>(energy, x, 1e-13, true);
  Matrix<double> hv(n, B), kept(n, B);
  energy.HessianVectorProduct(x, u, hv);
  energy.LinearizeHessian(x)->JacobianVectorProduct(u, kept);  // G'' in chunks of 256 columns
  BOOST_TEST(implicit::testing::AgreeEntrywise(hv, kept, 1e-13));
  implicit::testing::CheckSameBitsOnThreads<double>(energy, x, u);
}
