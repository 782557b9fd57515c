// Reverse-mode AutoDiffEnergy (ADOL-C tapes): every product equals the
// forward-mode one on the same functor (float and double), on energies with
// branches at points on both sides of each branch (the tape is recorded at one
// point and replayed at the others), from several threads at once, and the
// automatic mode choice and the errors behave as documented.
#define BOOST_TEST_MODULE reverse_autodiff
#include <boost/test/unit_test.hpp>

#include <implicit/core/ad_functions.h>
#include <implicit/core/autodiff_energy.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "support/test_problems.h"

using implicit::AutoDiffEnergy;
using implicit::AutoDiffMode;
using implicit::Index;
using implicit::Matrix;
using implicit::Vector;

namespace {

// E(x; s) = 0.5|x|^2 - lse(beta * s * P^T x) / beta with the patterns P fixed
// and the scale s a parameter; the max-shift written branch-free
// (ad::LogSumExp) or, with `compare`, as Eigen's maxCoeff (a comparison per
// pattern: samples with another winning pattern than the recording point
// switch branches).
struct Retrieval {
  Matrix<double> P;
  double beta;
  bool compare;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    using std::exp;
    using std::log;
    Vector<T> s(P.cols());
    for (Index i = 0; i < P.cols(); ++i) {
      T dot = T(0.0);
      for (Index k = 0; k < x.size(); ++k) dot += T(P(k, i)) * x(k);
      s(i) = T(beta) * theta(0) * dot;
    }
    if (!compare) return T(0.5) * x.squaredNorm() - implicit::ad::LogSumExp(s) / T(beta);
    const T m = s.maxCoeff();
    T sum = T(0.0);
    for (Index i = 0; i < s.size(); ++i) sum += exp(s(i) - m);
    return T(0.5) * x.squaredNorm() - (m + log(sum)) / T(beta);
  }
};

// E(x; c, w) = sum_i w * relu(x_i - c_i)^3 + 0.5|x|^2 + (sorted x) . ramp: a
// ReLU written as an `if` (or as ad::Max with `branch_free`), an input c, and
// a sort (piecewise smooth in x, as entmax's threshold is).
struct Piecewise {
  bool branch_free;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& c, const Vector<T>& theta) const {
    T e = T(0.5) * x.squaredNorm();
    for (Index i = 0; i < x.size(); ++i) {
      T d = x(i) - c(i);
      if (branch_free) {
        d = implicit::ad::Max(d, T(0.0));
        e += theta(0) * d * d * d;
      } else if (d > T(0.0)) {
        e += theta(0) * d * d * d;
      }
    }
    std::vector<T> sorted(x.data(), x.data() + x.size());
    std::sort(sorted.begin(), sorted.end(), [](const T& a, const T& b) { return b < a; });
    for (std::size_t i = 0; i < sorted.size(); ++i) {
      e += T(0.1 / (1.0 + static_cast<double>(i))) * sorted[i] * sorted[i];
    }
    return e;
  }
};

template <typename Scalar>
implicit::ParameterSet<Scalar> OneParameter(double value) {
  implicit::ParameterSet<Scalar> params;
  params.Add("w", 1, 1);
  params.Block("w")(0, 0) = static_cast<Scalar>(value);
  return params;
}

template <typename Scalar>
double Tolerance() {
  return std::is_same<Scalar, float>::value ? 2e-5 : 1e-11;
}

template <typename Scalar>
void CheckClose(const Matrix<Scalar>& reverse, const Matrix<Scalar>& forward,
                const std::string& what) {
  const double scale = 1.0 + static_cast<double>(forward.template cast<double>().norm());
  const double error = (reverse - forward).template cast<double>().norm();
  BOOST_TEST(error <= Tolerance<Scalar>() * scale,
             what << ": reverse differs from forward by " << error << " (|forward| " << scale
                  << ")");
}

// Every product of `reverse` equals that of `forward` (the same energy in the
// other mode) at x, with direction v; with an input when E takes one.
template <typename Functor, typename Scalar>
void CheckAllProducts(const AutoDiffEnergy<Functor, Scalar>& forward,
                      const AutoDiffEnergy<Functor, Scalar>& reverse, const Matrix<Scalar>& x,
                      const Matrix<Scalar>& v, const std::string& name) {
  const Index n = x.rows(), B = x.cols();
  BOOST_REQUIRE(!forward.uses_reverse_mode());
  BOOST_REQUIRE(reverse.uses_reverse_mode());
  Matrix<Scalar> gf(n, B), gr(n, B), hf(n, B), hr(n, B);
  Vector<Scalar> ef(B), er(B), vf(B);
  forward.GradientAndValue(x, gf, ef);
  reverse.GradientAndValue(x, gr, er);
  forward.Value(x, vf);
  CheckClose<Scalar>(gr, gf, name + " gradient (GradientAndValue)");
  CheckClose<Scalar>(er, vf, name + " value (GradientAndValue)");
  reverse.Gradient(x, gr);
  CheckClose<Scalar>(gr, gf, name + " gradient");
  forward.HessianVectorProduct(x, v, hf);
  reverse.HessianVectorProduct(x, v, hr);
  CheckClose<Scalar>(hr, hf, name + " Hessian-vector product");
  const Index p = forward.num_parameters();
  Vector<Scalar> pf(p), pr(p);
  forward.ParameterVectorJacobianProduct(x, v, pf);
  reverse.ParameterVectorJacobianProduct(x, v, pr);
  CheckClose<Scalar>(pr, pf, name + " parameter VJP");
  if (forward.input_dimension() > 0) {
    Matrix<Scalar> cf(forward.input_dimension(), B), cr(forward.input_dimension(), B);
    forward.InputVectorJacobianProduct(x, v, cf);
    reverse.InputVectorJacobianProduct(x, v, cr);
    CheckClose<Scalar>(cr, cf, name + " input VJP");
  }
}

template <typename Functor, typename Scalar>
struct ModePair {
  AutoDiffEnergy<Functor, Scalar> forward, reverse;
  ModePair(const AutoDiffEnergy<Functor, Scalar>& energy) : forward(energy), reverse(energy) {
    forward.set_mode(AutoDiffMode::kForward);
    reverse.set_mode(AutoDiffMode::kReverse);
  }
};

// Retrieval on n-dimensional states with N patterns; samples spread so that
// different patterns win the max for different samples.
template <typename Scalar>
AutoDiffEnergy<Retrieval, Scalar> MakeRetrieval(Index n, Index N, bool compare) {
  const Matrix<double> P = implicit::testing::RandomMatrix<double>(n, N, 7);
  return AutoDiffEnergy<Retrieval, Scalar>(Retrieval{P, 2.0, compare}, n,
                                           OneParameter<Scalar>(0.8));
}

template <typename Scalar>
AutoDiffEnergy<Piecewise, Scalar> MakePiecewise(Index n, Index B, bool branch_free) {
  AutoDiffEnergy<Piecewise, Scalar> energy(Piecewise{branch_free}, n, n,
                                           OneParameter<Scalar>(1.5));
  energy.SetInput(implicit::testing::RandomMatrix<Scalar>(n, B, 21, 0.5));
  return energy;
}

}  // namespace

#if IMPLICIT_HAVE_ADOLC

using Scalars = std::tuple<float, double>;

BOOST_AUTO_TEST_CASE_TEMPLATE(retrieval_products_match_forward_mode, Scalar, Scalars) {
  const Index n = 40, N = 9, B = 12;
  for (bool compare : {false, true}) {
    const ModePair<Retrieval, Scalar> pair(MakeRetrieval<Scalar>(n, N, compare));
    const Matrix<Scalar> x = implicit::testing::RandomMatrix<Scalar>(n, B, 3);
    const Matrix<Scalar> v = implicit::testing::RandomMatrix<Scalar>(n, B, 5);
    // The winning pattern differs between samples (the tape is replayed at
    // points where another branch of the max is taken).
    const Matrix<double> scores =
        pair.forward.functor().P.transpose() * x.template cast<double>();
    std::vector<Index> winners;
    for (Index b = 0; b < B; ++b) {
      Index winner = 0;
      scores.col(b).maxCoeff(&winner);
      winners.push_back(winner);
    }
    std::sort(winners.begin(), winners.end());
    BOOST_REQUIRE(std::unique(winners.begin(), winners.end()) - winners.begin() >= 3);
    CheckAllProducts(pair.forward, pair.reverse, x, v,
                     compare ? "retrieval (maxCoeff)" : "retrieval (LogSumExp)");
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(branches_on_both_sides_match_forward_mode, Scalar, Scalars) {
  const Index n = 30, B = 10;
  for (bool branch_free : {false, true}) {
    const ModePair<Piecewise, Scalar> pair(MakePiecewise<Scalar>(n, B, branch_free));
    // x - c has both signs in every sample, and the sort order differs.
    const Matrix<Scalar> x = implicit::testing::RandomMatrix<Scalar>(n, B, 9);
    const Matrix<Scalar> d = x - pair.forward.input();
    BOOST_REQUIRE((d.array() > 0).count() > 0 && (d.array() < 0).count() > 0);
    const Matrix<Scalar> v = implicit::testing::RandomMatrix<Scalar>(n, B, 13);
    const std::string name = branch_free ? "relu (ad::Max)" : "relu (if)";
    CheckAllProducts(pair.forward, pair.reverse, x, v, name);
    // Replayed in the opposite order: the tape now comes from the last sample.
    const Matrix<Scalar> flipped = x.rowwise().reverse();
    CheckAllProducts(pair.forward, pair.reverse, flipped, v, name + ", samples reversed");
  }
}

BOOST_AUTO_TEST_CASE(reverse_gradient_matches_central_differences) {
  const Index n = 70, B = 3;
  AutoDiffEnergy<Retrieval, double> energy = MakeRetrieval<double>(n, 11, false);
  energy.set_mode(AutoDiffMode::kReverse);
  const Matrix<double> x = implicit::testing::RandomMatrix<double>(n, B, 17);
  Matrix<double> grad(n, B);
  energy.Gradient(x, grad);
  const double h = 1e-6;
  for (Index b = 0; b < B; ++b) {
    for (Index i = 0; i < n; i += 7) {
      Matrix<double> xp = x.col(b), xm = x.col(b);
      xp(i) += h;
      xm(i) -= h;
      Vector<double> ep(1), em(1);
      energy.Value(xp, ep);
      energy.Value(xm, em);
      const double fd = (ep(0) - em(0)) / (2 * h);
      BOOST_TEST(std::abs(grad(i, b) - fd) <= 1e-7 * (1 + std::abs(fd)),
                 "dE/dx(" << i << ", " << b << ") = " << grad(i, b) << ", fd " << fd);
    }
  }
}

BOOST_AUTO_TEST_CASE(threads_give_the_results_of_one_thread) {
  const Index n = 32, B = 16;
  const int threads = 4;
  AutoDiffEnergy<Piecewise, double> shared = MakePiecewise<double>(n, B, false);
  shared.set_mode(AutoDiffMode::kReverse);
  std::vector<Matrix<double>> x, v, grad(threads), hvp(threads);
  for (int t = 0; t < threads; ++t) {
    x.push_back(implicit::testing::RandomMatrix<double>(n, B, 100 + t));
    v.push_back(implicit::testing::RandomMatrix<double>(n, B, 200 + t));
  }
  // One thread first: the expected results.
  std::vector<Matrix<double>> grad1(threads, Matrix<double>(n, B)),
      hvp1(threads, Matrix<double>(n, B));
  for (int t = 0; t < threads; ++t) {
    shared.Gradient(x[t], grad1[t]);
    shared.HessianVectorProduct(x[t], v[t], hvp1[t]);
  }
  // Then every thread on its own batch, through the shared energy and through
  // its own copy (its own tape), several times over.
  std::vector<std::thread> pool;
  std::vector<double> worst(threads, 0.0);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      AutoDiffEnergy<Piecewise, double> own = shared;
      Matrix<double> g(n, B), h(n, B);
      for (int repeat = 0; repeat < 5; ++repeat) {
        const AutoDiffEnergy<Piecewise, double>& energy = repeat % 2 ? own : shared;
        energy.Gradient(x[t], g);
        energy.HessianVectorProduct(x[t], v[t], h);
        worst[t] = std::max({worst[t], (g - grad1[t]).cwiseAbs().maxCoeff(),
                             (h - hvp1[t]).cwiseAbs().maxCoeff()});
      }
    });
  }
  for (std::thread& thread : pool) thread.join();
  for (int t = 0; t < threads; ++t) {
    BOOST_TEST(worst[t] <= 1e-13, "thread " << t << " differs by " << worst[t]);
  }
}

BOOST_AUTO_TEST_CASE(automatic_mode_chooses_by_the_number_of_variables) {
  AutoDiffEnergy<Retrieval, double> small = MakeRetrieval<double>(10, 3, false);
  AutoDiffEnergy<Retrieval, double> large =
      MakeRetrieval<double>(implicit::kReverseModeMinVariables, 3, false);
  BOOST_TEST((small.mode() == AutoDiffMode::kAutomatic));
  BOOST_TEST(!small.uses_reverse_mode());  // 10 + 1 variables
  BOOST_TEST(large.uses_reverse_mode());   // 64 + 1 variables
  large.set_mode(AutoDiffMode::kForward);
  BOOST_TEST(!large.uses_reverse_mode());
  small.set_mode(AutoDiffMode::kReverse);
  BOOST_TEST(small.uses_reverse_mode());
}

// A functor that throws while it is being recorded: the exception reaches the
// caller and the energy records again (and works) at the next call.
struct ThrowsOnce {
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>&) const {
    if ((*calls)++ == 0) throw std::domain_error("first call fails");
    return T(0.5) * x.squaredNorm();
  }
};

BOOST_AUTO_TEST_CASE(an_exception_while_recording_propagates_and_leaves_a_usable_energy) {
  AutoDiffEnergy<ThrowsOnce, double> energy(ThrowsOnce{}, 5);
  energy.set_mode(AutoDiffMode::kReverse);
  const Matrix<double> x = implicit::testing::RandomMatrix<double>(5, 2, 3);
  Matrix<double> grad(5, 2);
  BOOST_CHECK_THROW(energy.Gradient(x, grad), std::domain_error);
  energy.Gradient(x, grad);
  BOOST_TEST((grad - x).norm() <= 1e-15);
}

#else

BOOST_AUTO_TEST_CASE(reverse_mode_without_adolc_is_refused) {
  BOOST_TEST_MESSAGE("libimplicit built without ADOL-C: only the refusal of kReverse is tested");
  AutoDiffEnergy<Retrieval, double> energy = MakeRetrieval<double>(100, 3, false);
  BOOST_TEST(!energy.uses_reverse_mode());
  BOOST_CHECK_THROW(energy.set_mode(AutoDiffMode::kReverse), std::invalid_argument);
}

#endif

// In every build: the branch-free helpers give the values of their plain forms.
BOOST_AUTO_TEST_CASE(branch_free_helpers_equal_their_definitions) {
  BOOST_TEST(implicit::ad::Max(2.0, -1.0) == 2.0);
  BOOST_TEST(implicit::ad::Max(-3.0, 1.0) == 1.0);
  BOOST_TEST(implicit::ad::Where(0.5, 1.0, 2.0) == 1.0);
  BOOST_TEST(implicit::ad::Where(-0.5, 1.0, 2.0) == 2.0);
  BOOST_TEST(implicit::ad::Where(0.0, 1.0, 2.0) == 2.0);
  Vector<double> s(3);
  s << 1000.0, 999.0, -5.0;  // exp(1000) overflows without the shift
  const double expected = 1000.0 + std::log(1.0 + std::exp(-1.0) + std::exp(-1005.0));
  BOOST_TEST(std::abs(implicit::ad::LogSumExp(s) - expected) <= 1e-12);
}
