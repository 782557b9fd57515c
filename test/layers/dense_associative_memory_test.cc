// Dense associative memories: continuous energies against automatic
// derivatives and finite differences, the classical quadratic Hopfield energy,
// binary retrieval dynamics (energy descent, fixed points, capacity, no
// overflow), float32, training through the implicit backward pass, and the
// one-pass evaluations and subset evaluation.
#define BOOST_TEST_MODULE dense_associative_memory
#include <boost/test/unit_test.hpp>

#include <implicit/core/autodiff_energy.h>
#include <implicit/core/energy_maps.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/dense_associative_memory.h>
#include <implicit/solvers/picard.h>

#include "support/energy_checks.h"
#include "support/fused_energy_checks.h"
#include "support/test_problems.h"

#include <bitset>
#include <cmath>
#include <tuple>

using implicit::BinaryRetrievalOptions;
using implicit::DenseAssociativeMemoryEnergy;
using implicit::Index;
using implicit::Interaction;
using implicit::InteractionType;
using implicit::Matrix;
using implicit::StateDomain;
using implicit::Vector;
using implicit::testing::RandomMatrix;
using implicit::testing::RelativeError;

namespace {

// The same energies as plain templated functions of one sample; theta = X.
struct DamFunctor {
  Index n, N;
  Interaction f;
  bool box;
  double gain;
  template <typename T>
  T F(const T& t) const {
    using std::exp;
    switch (f.type) {
      case InteractionType::kQuadratic: return T(0.5) * t * t;
      case InteractionType::kPolynomial:
      case InteractionType::kRectifiedPolynomial: {
        if (f.type == InteractionType::kRectifiedPolynomial && !(t > T(0))) return T(0);
        T p(1);
        for (int k = 0; k < f.degree; ++k) p *= t;
        return p / T(double(f.degree));
      }
      case InteractionType::kExponential: return exp(T(f.beta) * t) / T(f.beta);
    }
    return T(0);
  }
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    using std::log;
    Eigen::Map<const Matrix<T>> X(theta.data(), n, N);
    T e(0);
    for (Index mu = 0; mu < N; ++mu) e -= F(T(X.col(mu).dot(x)));
    if (box) {
      for (Index i = 0; i < n; ++i) {
        const T u = (T(1) + x(i)) / T(2), w = (T(1) - x(i)) / T(2);
        e += (u * log(u) + w * log(w)) / T(gain);
      }
    } else {
      e += T(0.5) * x.squaredNorm();
    }
    return e;
  }
};

DenseAssociativeMemoryEnergy<double> MakeDam(const Matrix<double>& X, Interaction f,
                                             StateDomain domain, double gain = 1.0,
                                             bool learn = true) {
  DenseAssociativeMemoryEnergy<double>::Options o;
  o.interaction = f;
  o.domain = domain;
  o.box_gain = gain;
  o.learn_patterns = learn;
  return DenseAssociativeMemoryEnergy<double>(X, o);
}

const Interaction kInteractions[] = {
    Interaction::Quadratic(),          Interaction::Polynomial(3),
    Interaction::Polynomial(4),        Interaction::RectifiedPolynomial(2),
    Interaction::RectifiedPolynomial(3), Interaction::Exponential(0.7)};

Matrix<double> RandomSigns(Index n, Index N, unsigned seed) {
  return RandomMatrix<double>(n, N, seed).array().sign().matrix();
}

}  // namespace

BOOST_AUTO_TEST_CASE(continuous_energies_match_autodiff_and_finite_differences) {
  const Index n = 5, N = 4, B = 3;
  const Matrix<double> X = 0.5 * RandomMatrix<double>(n, N, 1);
  const Matrix<double> x = 0.6 * RandomMatrix<double>(n, B, 2).array().tanh().matrix();
  for (const Interaction& f : kInteractions) {
    for (StateDomain domain : {StateDomain::kEuclidean, StateDomain::kBox}) {
      const bool box = domain == StateDomain::kBox;
      auto energy = MakeDam(X, f, domain, 1.5);
      implicit::AutoDiffEnergy<DamFunctor, double> reference(DamFunctor{n, N, f, box, 1.5}, n,
                                                             energy.parameter_set());
      const std::string what = f.ToString() + (box ? " box" : " euclidean");
      implicit::testing::CheckEnergyAgainstReference(energy, reference, x, 1e-12, what);
      implicit::testing::CheckEnergyFiniteDifferences(energy, x, 1e-7, what);
      // The CCCP step: x - grad E (Euclidean) / tanh(T (x - grad E + atanh(x)/T)) (box).
      Matrix<double> step(n, B), grad(n, B);
      energy.CccpUpdate(x, step);
      energy.Gradient(x, grad);
      const Matrix<double> drive = box ? Matrix<double>(x.array().atanh().matrix() / 1.5 - grad)
                                       : Matrix<double>(x - grad);
      const Matrix<double> expected =
          box ? Matrix<double>((1.5 * drive.array()).tanh().matrix()) : drive;
      BOOST_TEST(RelativeError(step, expected) <= 1e-13, what);
    }
  }
}

BOOST_AUTO_TEST_CASE(quadratic_interaction_is_the_classical_hopfield_energy) {
  const Index n = 6, N = 4, B = 3;
  const Matrix<double> X = RandomMatrix<double>(n, N, 3);
  const Matrix<double> x = RandomMatrix<double>(n, B, 4);
  const Matrix<double> W = X * X.transpose();  // Hebbian couplings
  auto energy = MakeDam(X, Interaction::Quadratic(), StateDomain::kEuclidean);
  Vector<double> e(B);
  energy.Value(x, e);
  for (Index b = 0; b < B; ++b) {
    const double classical = -0.5 * x.col(b).dot(W * x.col(b)) + 0.5 * x.col(b).squaredNorm();
    BOOST_TEST(e(b) == classical, boost::test_tools::tolerance(1e-12));
  }
  // Binary: the classical rule s_i <- sign(sum_{j != i} W_ij s_j) (no self-coupling).
  const Matrix<double> P = RandomSigns(32, 3, 5);
  Matrix<double> s = RandomSigns(32, 4, 6);
  Matrix<double> Wz = P * P.transpose();
  Wz.diagonal().setZero();
  BinaryRetrievalOptions o;
  o.synchronous = true;
  o.max_sweeps = 1;
  Matrix<double> expected = s;
  for (Index b = 0; b < s.cols(); ++b) {
    const Vector<double> h = Wz * s.col(b);
    for (Index i = 0; i < 32; ++i) expected(i, b) = h(i) > 0 ? 1 : h(i) < 0 ? -1 : s(i, b);
  }
  implicit::RetrieveBinary<double>(P, Interaction::Quadratic(), s, o);
  BOOST_TEST((s - expected).norm() == 0.0);
}

BOOST_AUTO_TEST_CASE(asynchronous_dynamics_never_increase_the_energy) {
  const Index n = 40, N = 12, B = 5;
  const Matrix<double> X = RandomSigns(n, N, 7);
  for (const Interaction& f : kInteractions) {
    Matrix<double> s = RandomSigns(n, B, 8);
    Vector<double> before(B), after(B);
    for (int sweep = 0; sweep < 10; ++sweep) {
      implicit::BinaryEnergy<double>(X, f, s, before);
      BinaryRetrievalOptions o;
      o.max_sweeps = 1;
      o.seed = sweep;
      implicit::RetrieveBinary<double>(X, f, s, o);
      implicit::BinaryEnergy<double>(X, f, s, after);
      for (Index b = 0; b < B; ++b) {
        BOOST_TEST(after(b) <= before(b) + 1e-9 * std::abs(before(b)), f.ToString());
      }
    }
    // Converged states are fixed points: one more sweep flips nothing.
    BinaryRetrievalOptions o;
    o.max_sweeps = 200;
    auto summary = implicit::RetrieveBinary<double>(X, f, s, o);
    BOOST_TEST(summary.num_converged() == B, f.ToString());
    const Matrix<double> fixed = s;
    o.max_sweeps = 1;
    summary = implicit::RetrieveBinary<double>(X, f, s, o);
    BOOST_TEST((s - fixed).norm() == 0.0);
    BOOST_TEST(summary.flips[0] == 0);
  }
}

// Above the classical capacity (~0.14 n patterns) the quadratic memory loses
// its patterns while degree-3 polynomial and exponential memories keep them.
BOOST_AUTO_TEST_CASE(dense_memories_store_more_than_the_classical_capacity) {
  const Index n = 64, N = 24;  // N / n = 0.375
  const Matrix<double> X = RandomSigns(n, N, 9);
  auto retrieved_fraction = [&](const Interaction& f) {
    Matrix<double> s = X;
    for (Index b = 0; b < N; ++b)
      for (Index k = 0; k < 4; ++k) s((5 * k + 3 * b) % n, b) *= -1;  // 4 flipped bits
    implicit::RetrieveBinary<double>(X, f, s);
    int exact = 0;
    for (Index b = 0; b < N; ++b) exact += (s.col(b) - X.col(b)).norm() == 0.0;
    return double(exact) / N;
  };
  const double quadratic = retrieved_fraction(Interaction::Quadratic());
  BOOST_TEST_MESSAGE("retrieved: quadratic " << quadratic);
  BOOST_TEST(quadratic < 0.5);
  BOOST_TEST(retrieved_fraction(Interaction::Polynomial(3)) == 1.0);
  BOOST_TEST(retrieved_fraction(Interaction::RectifiedPolynomial(4)) == 1.0);
  BOOST_TEST(retrieved_fraction(Interaction::Exponential()) == 1.0);
}

BOOST_AUTO_TEST_CASE(synchronous_dynamics_may_cycle_asynchronous_converge) {
  Matrix<double> X(2, 1);
  X << 1, 1;  // couplings W_12 = 1
  Matrix<double> s(2, 1);
  s << 1, -1;
  BinaryRetrievalOptions o;
  o.synchronous = true;
  o.max_sweeps = 10;
  Matrix<double> sync = s;
  auto summary = implicit::RetrieveBinary<double>(X, Interaction::Quadratic(), sync, o);
  BOOST_TEST(!summary.converged[0]);  // (1,-1) -> (-1,1) -> (1,-1) ...
  o.synchronous = false;
  summary = implicit::RetrieveBinary<double>(X, Interaction::Quadratic(), s, o);
  BOOST_TEST(summary.converged[0]);
  BOOST_TEST(s(0) == s(1));
}

BOOST_AUTO_TEST_CASE(exponential_memory_with_huge_overlaps_does_not_overflow) {
  const Index n = 800, N = 30;  // overlaps up to 800: exp(800) overflows double
  const Matrix<double> X = RandomSigns(n, N, 10);
  Matrix<double> s = X;
  for (Index b = 0; b < N; ++b)
    for (Index k = 0; k < 200; ++k) s((7 * k + b) % n, b) *= -1;  // 25% noise
  auto summary = implicit::RetrieveBinary<double>(X, Interaction::Exponential(), s);
  BOOST_TEST(summary.num_converged() == N);
  BOOST_TEST((s - X).norm() == 0.0);
  // float states and patterns: the same.
  Matrix<float> sf = X.cast<float>();
  for (Index b = 0; b < N; ++b)
    for (Index k = 0; k < 200; ++k) sf((7 * k + b) % n, b) *= -1;
  implicit::RetrieveBinary<float>(X.cast<float>(), Interaction::Exponential(), sf);
  BOOST_TEST((sf.cast<double>() - X).norm() == 0.0);
}

BOOST_AUTO_TEST_CASE(float_energy_agrees_with_double) {
  const Index n = 6, N = 4, B = 3;
  const Matrix<double> X = 0.5 * RandomMatrix<double>(n, N, 11);
  const Matrix<double> x = 0.5 * RandomMatrix<double>(n, B, 12).array().tanh().matrix();
  for (StateDomain domain : {StateDomain::kEuclidean, StateDomain::kBox}) {
    DenseAssociativeMemoryEnergy<float>::Options o;
    o.interaction = Interaction::Polynomial(3);
    o.domain = domain;
    o.learn_patterns = true;
    DenseAssociativeMemoryEnergy<float> ef(X.cast<float>(), o);
    auto ed = MakeDam(X, Interaction::Polynomial(3), domain);
    Matrix<float> gf(n, B), hf(n, B);
    Matrix<double> gd(n, B), hd(n, B);
    ef.Gradient(x.cast<float>(), gf);
    ed.Gradient(x, gd);
    ef.HessianVectorProduct(x.cast<float>(), x.cast<float>(), hf);
    ed.HessianVectorProduct(x, x, hd);
    BOOST_TEST(RelativeError(gf.cast<double>(), gd) <= 1e-5);
    BOOST_TEST(RelativeError(hf.cast<double>(), hd) <= 1e-5);
    Vector<float> pf(ef.num_parameters());
    Vector<double> pd(ed.num_parameters());
    ef.ParameterVectorJacobianProduct(x.cast<float>(), x.cast<float>(), pf);
    ed.ParameterVectorJacobianProduct(x, x, pd);
    BOOST_TEST(RelativeError(pf.cast<double>(), pd) <= 1e-5);
  }
}

BOOST_AUTO_TEST_CASE(invalid_arguments_throw) {
  const Matrix<double> X = RandomMatrix<double>(4, 3, 13);
  BOOST_CHECK_THROW(MakeDam(X, Interaction::Polynomial(1), StateDomain::kEuclidean),
                    std::invalid_argument);
  BOOST_CHECK_THROW(MakeDam(X, Interaction::Exponential(-1), StateDomain::kEuclidean),
                    std::invalid_argument);
  BOOST_CHECK_THROW(MakeDam(X, Interaction::Quadratic(), StateDomain::kBox, 0.0),
                    std::invalid_argument);
  Matrix<double> s(5, 2);
  s.setOnes();
  BOOST_CHECK_THROW(implicit::RetrieveBinary<double>(X, Interaction::Quadratic(), s),
                    std::invalid_argument);
  BinaryRetrievalOptions o;
  o.max_sweeps = 0;
  Matrix<double> s4 = Matrix<double>::Ones(4, 2);
  BOOST_CHECK_THROW(implicit::RetrieveBinary<double>(X, Interaction::Quadratic(), s4, o),
                    std::invalid_argument);
}

// Learned patterns of a continuous (box) memory, trained through the implicit
// backward pass of its CCCP map so that probes retrieve a teacher's states.
BOOST_AUTO_TEST_CASE(continuous_memory_trains_through_implicit_backward) {
  const Index n = 8, N = 3, B = 6;
  Matrix<double> H(n, N);  // orthogonal +-1 columns (Sylvester-Hadamard)
  for (Index i = 0; i < n; ++i)
    for (Index mu = 0; mu < N; ++mu)
      H(i, mu) = std::bitset<8>(unsigned(i & (mu + 1))).count() % 2 ? -1 : 1;
  const Matrix<double> Xt = H / std::sqrt(double(n));
  Matrix<double> probes(n, B);
  for (Index b = 0; b < B; ++b) probes.col(b) = 0.5 * H.col(b % N);
  probes += 0.2 * RandomMatrix<double>(n, B, 14);
  typename implicit::PicardSolver<double>::Options po;
  po.absolute_tolerance = 1e-12;
  po.max_iterations = 500;
  implicit::PicardSolver<double> solver(po);
  // Teacher retrievals.
  auto teacher = MakeDam(Xt, Interaction::Quadratic(), StateDomain::kBox, 2.0, false);
  implicit::CccpMap<double> teacher_map(teacher);
  Matrix<double> targets = probes;
  BOOST_REQUIRE(solver.Solve(teacher_map, targets).IsConverged());
  // Student: perturbed patterns, learned.
  auto student = MakeDam(Xt + 0.05 * RandomMatrix<double>(n, N, 15), Interaction::Quadratic(),
                         StateDomain::kBox, 2.0, true);
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
    BOOST_REQUIRE_MESSAGE(g.ok(), "step " << step << ": " << g.summary.BriefReport());
    student.parameters()->values() -= 0.02 * g.parameter_gradient;
  }
  BOOST_TEST_MESSAGE("dense associative memory: loss " << first << " -> " << last);
  BOOST_TEST(last < 0.1 * first);
}

using OnePassScalars = std::tuple<float, double>;

// CccpUpdateAndValue / GradientAndValue (one product X^T x) agree with the
// separate calls for every interaction and both domains, in float and double;
// no per-sample data, so any subset of a batch evaluates like those columns.
BOOST_AUTO_TEST_CASE_TEMPLATE(one_pass_evaluations_and_subsets, S, OnePassScalars) {
  const double tol = sizeof(S) == 4 ? 1e-5 : 1e-13;
  const Index n = 6, N = 5, B = 4;
  const Matrix<S> X = RandomMatrix<S>(n, N, 80, 0.4);
  const Matrix<S> x = (0.6 * RandomMatrix<double>(n, B, 81).array().tanh()).matrix().cast<S>();
  for (const Interaction f : {Interaction::Quadratic(), Interaction::Polynomial(3),
                              Interaction::RectifiedPolynomial(4), Interaction::Exponential(0.7)}) {
    for (const StateDomain domain : {StateDomain::kEuclidean, StateDomain::kBox}) {
      BOOST_TEST_CONTEXT(f.ToString() << (domain == StateDomain::kBox ? ", box" : ", euclidean")) {
        typename DenseAssociativeMemoryEnergy<S>::Options o;
        o.interaction = f;
        o.domain = domain;
        o.box_gain = 1.5;
        DenseAssociativeMemoryEnergy<S> energy(X, o);
        implicit::testing::CheckOnePassEvaluations<S>(energy, x, tol);
        BOOST_TEST(energy.SupportsSubsets());
        implicit::testing::CheckSubsetEvaluation<S>(energy, x, tol);
      }
    }
  }
}
