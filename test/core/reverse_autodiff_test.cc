// Reverse-mode AutoDiffEnergy (reverse_tape.h): every product equals the
// forward-mode one on the same functor (float and double), on energies with
// branches at points on both sides of each branch, with the one-node
// operations (ad::Dot, ad::LogSumExp) and without, from several threads at
// once; the tape's elementary functions against central differences; the
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
#include <type_traits>
#include <vector>

#include "support/mode_checks.h"
#include "support/test_problems.h"

using implicit::AutoDiffEnergy;
using implicit::AutoDiffMode;
using implicit::Index;
using implicit::Matrix;
using implicit::Vector;
using implicit::testing::CheckAllProducts;
using implicit::testing::ModePair;

namespace {

// E(x; s) = 0.5|x|^2 - lse(beta * s * P^T x) / beta with the patterns P fixed
// and the scale s a parameter; the max-shift written branch-free
// (ad::LogSumExp) or, with `compare`, as Eigen's maxCoeff (a comparison per
// pattern: samples with another winning pattern take another branch); the
// scores as scalar loops or, with `dot`, as ad::Dot of a pattern and the
// expression s * x (one tape node each).
struct Retrieval {
  Matrix<double> P;
  double beta;
  bool compare;
  bool dot = false;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    using std::exp;
    using std::log;
    Vector<T> s(P.cols());
    for (Index i = 0; i < P.cols(); ++i) {
      if (dot) {
        s(i) = T(beta) * implicit::ad::Dot(P.col(i), theta(0) * x);
        continue;
      }
      T dot_product = T(0.0);
      for (Index k = 0; k < x.size(); ++k) dot_product += T(P(k, i)) * x(k);
      s(i) = T(beta) * theta(0) * dot_product;
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

// An attention energy on x = N tokens of width D (the D x N matrix X) with
// theta = (W_K, W_Q), each Y x D, and fixed memories Xi (D x M):
//   E = 0.5|x|^2 - sum_c lse_b(beta (K^T Q)_bc) / beta - 0.5 sum relu(Xi^T X)^2,
// K = W_K X, Q = W_Q X: products of variables by variables (two of them of
// products' results) and of numbers by variables, written with ad::Product
// or, without `product`, as scalar loops.
struct ProductAttention {
  Index N, D, Y;
  Matrix<double> Xi;
  double beta;
  bool product;
  template <typename A, typename B>
  auto Multiply(const Eigen::MatrixBase<A>& a, const Eigen::MatrixBase<B>& b) const {
    using T = std::conditional_t<std::is_same<typename A::Scalar, double>::value, typename B::Scalar,
                                 typename A::Scalar>;
    if (product) return implicit::ad::Product(a, b);
    Matrix<T> out(a.rows(), b.cols());
    for (Index i = 0; i < a.rows(); ++i) {
      for (Index j = 0; j < b.cols(); ++j) {
        T sum = T(0.0);
        for (Index k = 0; k < a.cols(); ++k) sum += T(a(i, k)) * T(b(k, j));
        out(i, j) = sum;
      }
    }
    return out;
  }
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    const Eigen::Map<const Matrix<T>> X(x.data(), D, N);
    const Eigen::Map<const Matrix<T>> WK(theta.data(), Y, D), WQ(theta.data() + Y * D, Y, D);
    const Matrix<T> K = Multiply(WK, X), Q = Multiply(WQ, X);
    const Matrix<T> S = Multiply(K.transpose(), Q);
    const Matrix<T> H = Multiply(Xi.transpose(), X);
    T e = T(0.5) * x.squaredNorm();
    for (Index c = 0; c < N; ++c) e -= implicit::ad::LogSumExp(Vector<T>(T(beta) * S.col(c))) / T(beta);
    for (Index i = 0; i < H.size(); ++i) {
      const T r = implicit::ad::Max(H(i), T(0.0));
      e -= T(0.5) * r * r;
    }
    return e;
  }
};

// z as values of type V: numbers, or first-order duals whose tangents are v.
template <typename V>
std::vector<V> PointWithTangents(const Vector<double>& z, const Vector<double>& v) {
  std::vector<V> point(static_cast<std::size_t>(z.size()));
  for (Index i = 0; i < z.size(); ++i) {
    point[static_cast<std::size_t>(i)] = V(z(i));
    if constexpr (!std::is_same<V, double>::value) point[static_cast<std::size_t>(i)].v[0] = v(i);
  }
  return point;
}

template <typename Scalar>
implicit::ParameterSet<Scalar> OneParameter(double value) {
  implicit::ParameterSet<Scalar> params;
  params.Add("w", 1, 1);
  params.Block("w")(0, 0) = static_cast<Scalar>(value);
  return params;
}

// Retrieval on n-dimensional states with N patterns; samples spread so that
// different patterns win the max for different samples.
template <typename Scalar>
AutoDiffEnergy<Retrieval, Scalar> MakeRetrieval(Index n, Index N, bool compare,
                                                bool dot = false) {
  const Matrix<double> P = implicit::testing::RandomMatrix<double>(n, N, 7);
  return AutoDiffEnergy<Retrieval, Scalar>(Retrieval{P, 2.0, compare, dot}, n,
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

using Scalars = std::tuple<float, double>;

BOOST_AUTO_TEST_CASE_TEMPLATE(retrieval_products_match_forward_mode, Scalar, Scalars) {
  const Index n = 40, N = 9, B = 12;
  for (int form = 0; form < 3; ++form) {
    const bool compare = form == 1, dot = form == 2;
    const ModePair<Retrieval, Scalar> pair(MakeRetrieval<Scalar>(n, N, compare, dot));
    const Matrix<Scalar> x = implicit::testing::RandomMatrix<Scalar>(n, B, 3);
    const Matrix<Scalar> v = implicit::testing::RandomMatrix<Scalar>(n, B, 5);
    // The winning pattern differs between samples (samples on different
    // branches of the max).
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
                     compare ? "retrieval (maxCoeff)"
                             : (dot ? "retrieval (ad::Dot)" : "retrieval (LogSumExp)"));
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
    // In the opposite order.
    const Matrix<Scalar> flipped = x.rowwise().reverse();
    CheckAllProducts(pair.forward, pair.reverse, flipped, v, name + ", samples reversed");
  }
}

// ad::Product (one tape block; in forward mode Eigen's product) gives the
// derivatives of the scalar loops it replaces, in both modes: gradient, HVP
// and parameter VJP of an attention energy whose products chain (K^T Q of
// K = W_K X) and mix data with variables, at points where the ReLU memory
// term is on both sides of its kink.
BOOST_AUTO_TEST_CASE_TEMPLATE(product_blocks_match_scalar_loops, Scalar, Scalars) {
  const Index N = 5, D = 4, Y = 3, M = 6, B = 4;
  implicit::ParameterSet<Scalar> params;
  params.Add("w_k", Y, D);
  params.Add("w_q", Y, D);
  params.Block("w_k") = implicit::testing::RandomMatrix<Scalar>(Y, D, 31, 0.5);
  params.Block("w_q") = implicit::testing::RandomMatrix<Scalar>(Y, D, 32, 0.5);
  const Matrix<double> Xi = implicit::testing::RandomMatrix<double>(D, M, 33);
  const auto make = [&](bool product, AutoDiffMode mode) {
    AutoDiffEnergy<ProductAttention, Scalar> energy(ProductAttention{N, D, Y, Xi, 1.5, product}, N * D,
                                                    params);
    energy.set_mode(mode);
    return energy;
  };
  const Matrix<Scalar> x = implicit::testing::RandomMatrix<Scalar>(N * D, B, 34);
  const Matrix<Scalar> v = implicit::testing::RandomMatrix<Scalar>(N * D, B, 35);
  const Matrix<double> overlaps = Xi.transpose() * Eigen::Map<const Matrix<Scalar>>(x.data(), D, N * B).template cast<double>();
  BOOST_REQUIRE((overlaps.array() > 0).count() > 0 && (overlaps.array() < 0).count() > 0);
  CheckAllProducts(make(false, AutoDiffMode::kForward), make(true, AutoDiffMode::kReverse), x, v,
                   "ad::Product in reverse mode");
  CheckAllProducts(make(true, AutoDiffMode::kForward), make(false, AutoDiffMode::kReverse), x, v,
                   "ad::Product in forward mode");
}

// On the tape directly: a function of one entry of a product (the rest of the
// block unused), of a product with constant entries among its variables, and
// of a product of constants; its gradient and H v (first-order duals) equal
// those of the same function written with ad::Dot. Factors of mismatched
// shapes are refused.
BOOST_AUTO_TEST_CASE(product_entries_constants_and_shapes) {
  namespace reverse = implicit::reverse;
  namespace ad = implicit::ad;
  const Matrix<double> A = implicit::testing::RandomMatrix<double>(2, 3, 41);
  const Vector<double> z = implicit::testing::RandomMatrix<double>(6, 1, 42);
  const Vector<double> v = implicit::testing::RandomMatrix<double>(6, 1, 43);
  const auto f = [&](const auto& x, bool product) {
    using T = typename std::decay_t<decltype(x)>::Scalar;
    Matrix<T> Bm(3, 3);
    Bm << x(0), x(1), T(0.5), x(2), x(3), x(4), x(5), T(-1.0), x(0);  // constants among the variables
    if (!product) {
      const T s10 = ad::Dot(A.row(1).transpose(), Bm.col(0).eval()), s01 = ad::Dot(A.row(0).transpose(), Bm.col(1).eval());
      return s10 * s01 + x(2);
    }
    const Matrix<T> S = ad::Product(A, Bm);
    const Matrix<T> C = ad::Product(Matrix<double>::Ones(2, 2).eval(), Matrix<double>::Ones(2, 2).eval()).template cast<T>();
    return S(1, 0) * S(0, 1) + x(2) * C(0, 0) / T(2.0);  // C(0, 0) = 2, a constant
  };
  const auto check = [&](auto value_type) {
    using V = decltype(value_type);
    using VarVector = Vector<reverse::Var<V>>;
    const std::vector<V> zv = PointWithTangents<V>(z, v);
    std::vector<V> with_dot(6), with_product(6);
    const V e_dot = reverse::Gradient<V>(zv.data(), 6, [&](const VarVector& x) { return f(x, false); }, with_dot.data());
    const V e_product =
        reverse::Gradient<V>(zv.data(), 6, [&](const VarVector& x) { return f(x, true); }, with_product.data());
    const auto close = [](const V& a, const V& b) {
      const double tolerance = 1e-13 * (1 + std::abs(ad::internal::NumberOf(b)));
      if constexpr (std::is_same<V, double>::value) {
        return std::abs(a - b) <= tolerance;
      } else {
        return std::abs(a.a - b.a) <= tolerance && std::abs(a.v[0] - b.v[0]) <= 1e-13 * (1 + std::abs(b.v[0]));
      }
    };
    BOOST_TEST(close(e_product, e_dot));
    for (std::size_t i = 0; i < 6; ++i) BOOST_TEST(close(with_product[i], with_dot[i]), "entry " << i);
  };
  check(double());
  check(implicit::internal::DirectionalJet<double>());
  BOOST_CHECK_THROW(ad::Product(Matrix<double>(2, 3), Matrix<double>(2, 2)), std::invalid_argument);
  Vector<double> g(6);
  BOOST_CHECK_THROW(reverse::Gradient<double>(
                        z.data(), 6,
                        [&](const Vector<reverse::Var<double>>& x) {
                          return ad::Product(x.head(2).transpose(), x.tail(3))(0, 0);
                        },
                        g.data()),
                    std::invalid_argument);
}

// internal::MatrixProduct (products of duals as products of numbers) equals
// Eigen's product of the duals, entry by entry in every part: one tangent
// with tangents on both factors, on one of them or on neither; several
// tangents; duals of duals.
BOOST_AUTO_TEST_CASE(dual_matrix_products_equal_products_of_duals) {
  using implicit::internal::MatrixProduct;
  const Index m = 3, k = 4, n = 5;
  const auto check = [&](auto dual, bool a_tangent, bool b_tangent) {
    using V = decltype(dual);
    int seed = 60;
    const auto fill = [&](Matrix<V>* x, bool tangent) {
      const Matrix<double> values = implicit::testing::RandomMatrix<double>(x->rows(), x->cols() * 9, seed++);
      for (Index i = 0; i < x->size(); ++i) {
        const double* r = values.data() + 9 * i;
        V& y = (*x)(i);
        y = V(r[0]);
        for (int t = 0; t < V::DIMENSION; ++t) y.v[t] = tangent ? decltype(y.a)(r[1 + t]) : decltype(y.a)(0.0);
        if constexpr (implicit::internal::IsDual<decltype(y.a)>::value) {
          y.a.v[0] = r[8];  // the inner tangents
          for (int t = 0; t < V::DIMENSION; ++t) y.v[t].v[0] = tangent ? r[7 - t] : 0.0;
        }
      }
    };
    Matrix<V> a(m, k), b(k, n), split;
    fill(&a, a_tangent);
    fill(&b, b_tangent);
    const Matrix<V> expected = a.lazyProduct(b);  // element by element, in duals
    MatrixProduct(a, b, &split);
    Matrix<V> transposed;
    MatrixProduct(b.transpose(), a.transpose(), &transposed);
    double error = 0;
    for (Index i = 0; i < expected.size(); ++i) {
      const auto parts = [](const V& x) {
        std::vector<double> p;
        if constexpr (implicit::internal::IsDual<decltype(x.a)>::value) {
          p.push_back(x.a.a);
          p.push_back(x.a.v[0]);
          for (int t = 0; t < V::DIMENSION; ++t) {
            p.push_back(x.v[t].a);
            p.push_back(x.v[t].v[0]);
          }
        } else {
          p.push_back(x.a);
          for (int t = 0; t < V::DIMENSION; ++t) p.push_back(x.v[t]);
        }
        return p;
      };
      const std::vector<double> e = parts(expected(i)), s1 = parts(split(i)),
                                s2 = parts(transposed((i / m) + n * (i % m)));  // (c, r) of b^T a^T
      for (std::size_t q = 0; q < e.size(); ++q) {
        error = std::max(error, std::abs(e[q] - s1[q]));
        error = std::max(error, std::abs(e[q] - s2[q]));
      }
    }
    BOOST_TEST(error <= 1e-13, "tangents on a " << a_tangent << ", on b " << b_tangent << ": " << error);
  };
  for (bool a_tangent : {true, false}) {
    for (bool b_tangent : {true, false}) {
      check(implicit::internal::DirectionalJet<double>(), a_tangent, b_tangent);
      check(ceres::Jet<double, 3>(), a_tangent, b_tangent);
      check(ceres::Jet<implicit::internal::DirectionalJet<double>, 3>(), a_tangent, b_tangent);
    }
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
  // Then every thread on its own batch (its own tape), through the shared
  // energy and through its own copy, several times over.
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
  BOOST_TEST(large.uses_reverse_mode());   // 16 + 1 variables
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


// f(z) with every elementary function of the tape, the one-node products
// (ad::Dot of two variable vectors, of numbers and variables, listed and as a
// run; ad::LogSumExp with a constant entry) and a branch.
template <typename T>
T Elementary(const Vector<T>& z) {
  using std::abs;
  using std::atan;
  using std::atan2;
  using std::cos;
  using std::cosh;
  using std::erf;
  using std::exp;
  using std::expm1;
  using std::log;
  using std::log1p;
  using std::pow;
  using std::sin;
  using std::sinh;
  using std::sqrt;
  using std::tan;
  using std::tanh;
  T e = sinh(z(0)) * cosh(z(1)) + tan(z(2)) * atan(z(3)) + atan2(z(4), -z(1)) + erf(z(2));
  e += exp(z(0)) * log(z(1)) + sqrt(z(2)) / tanh(z(3)) + sin(z(4)) * cos(z(0));
  e += pow(z(1), 2.5) + abs(z(2) - T(0.3)) + log1p(z(3)) + expm1(z(4)) * z(0);
  e -= z(1) / z(2) + pow(z(3), z(4)) - T(2.0) * (-z(0)) + (z(4) > T(0.5) ? z(4) * z(4) : z(4));
  Vector<T> s(3);
  s << z(0) * T(2.0), T(1.0), z(1) - z(3);
  e += implicit::ad::Dot(z.head(2), z.segment(2, 2)) * implicit::ad::LogSumExp(s);
  // Numbers against scattered variables (listed operands) and consecutive
  // variables against numbers (a run).
  Vector<double> c(2);
  c << 1.5, -0.5;
  Vector<T> w(2);
  w << z(4), z(0);
  e += implicit::ad::Dot(c, w) * implicit::ad::Dot(z.tail(3), Vector<double>::Constant(3, 0.25));
  // A strided row of variables (read in place) against an expression.
  Matrix<T> m(2, 3);
  m << z(0), z(1), z(2), z(3), z(4), z(0);
  e += implicit::ad::Dot(m.row(1), T(0.5) * z.segment(1, 3));
  return e;
}

BOOST_AUTO_TEST_CASE(tape_gradient_and_hessian_products_match_central_differences) {
  namespace reverse = implicit::reverse;
  using Inner = implicit::internal::DirectionalJet<double>;
  static_assert(!std::is_convertible<reverse::Var<double>, double>::value,
                "a Var must not convert to its value (its derivatives would be lost)");
  const auto gradient_at = [](const Vector<double>& z) {
    Vector<double> g(z.size());
    const double e = reverse::Gradient<double>(
        z.data(), z.size(), [](const Vector<reverse::Var<double>>& v) { return Elementary(v); },
        g.data());
    BOOST_TEST(std::abs(e - Elementary(z)) <= 1e-14 * (1 + std::abs(e)));
    return g;
  };
  const Vector<double> v = implicit::testing::RandomMatrix<double>(5, 1, 3);
  // Both sides of the branch z4 > 0.5.
  for (double z4 : {0.3, 0.8}) {
    Vector<double> z(5);
    z << 0.4, 1.3, 0.7, 0.9, z4;
    const Vector<double> g = gradient_at(z);
    const double h = 1e-6;
    Vector<double> fd_hv = Vector<double>::Zero(5);
    for (Index i = 0; i < 5; ++i) {
      Vector<double> zp = z, zm = z;
      zp(i) += h;
      zm(i) -= h;
      const double fd = (Elementary(zp) - Elementary(zm)) / (2 * h);
      BOOST_TEST(std::abs(g(i) - fd) <= 1e-7 * (1 + std::abs(fd)),
                 "df/dz" << i << " = " << g(i) << ", central difference " << fd);
    }
    // H v against central differences of the gradient along v.
    fd_hv = (gradient_at(z + h * v) - gradient_at(z - h * v)) / (2 * h);
    std::vector<Inner> zj(5), gj(5);
    for (Index i = 0; i < 5; ++i) {
      zj[static_cast<std::size_t>(i)] = Inner(z(i));
      zj[static_cast<std::size_t>(i)].v[0] = v(i);
    }
    reverse::Gradient<Inner>(
        zj.data(), 5, [](const Vector<reverse::Var<Inner>>& w) { return Elementary(w); },
        gj.data());
    for (Index i = 0; i < 5; ++i) {
      const Inner& gi = gj[static_cast<std::size_t>(i)];
      BOOST_TEST(std::abs(gi.a - g(i)) <= 1e-13 * (1 + std::abs(g(i))));
      BOOST_TEST(std::abs(gi.v[0] - fd_hv(i)) <= 1e-6 * (1 + std::abs(fd_hv(i))),
                 "(Hv)" << i << " = " << gi.v[0] << ", central difference " << fd_hv(i));
    }
    // Recorded once with its second derivatives (a linearizing recording, in
    // another direction u), the tape gives H v for any v by recomputing its
    // tangents (SetDirection) and one sweep: every elementary function's
    // second derivatives, checked against the recording's own tangents in u
    // and against the recording in v above.
    reverse::Tape<Inner> kept;
    std::int32_t output = -1;
    std::vector<double> u(5);
    {
      reverse::Recording<Inner> recording(/*linearize=*/true);
      std::vector<Inner> zu(5);
      for (Index i = 0; i < 5; ++i) {
        u[static_cast<std::size_t>(i)] = 0.3 - 0.25 * static_cast<double>(i);
        zu[static_cast<std::size_t>(i)] = Inner(z(i));
        zu[static_cast<std::size_t>(i)].v[0] = u[static_cast<std::size_t>(i)];
      }
      Vector<reverse::Var<Inner>> w;
      recording.Variables(zu.data(), 5, true, &w);
      output = recording.Keep(Elementary(w), &kept);
    }
    BOOST_TEST(kept.CheckLinearization(u.data(), 5, 1e-10));
    for (int repeat = 0; repeat < 2; ++repeat) {  // the kept recording is reused
      kept.SetDirection(v.data(), 5);
      std::vector<Inner> gk(5);
      kept.SweepFrom(output, 5, gk.data());
      for (Index i = 0; i < 5; ++i) {
        const Inner& want = gj[static_cast<std::size_t>(i)];
        const Inner& got = gk[static_cast<std::size_t>(i)];
        BOOST_TEST(std::abs(got.a - want.a) <= 1e-14 * (1 + std::abs(want.a)));
        BOOST_TEST(std::abs(got.v[0] - want.v[0]) <= 1e-12 * (1 + std::abs(want.v[0])),
                   "(Hv)" << i << " recomputed " << got.v[0] << ", recorded " << want.v[0]);
      }
      // The tangents alone, swept with the adjoints' values kept from the first sweep.
      std::vector<double> hv(5);
      kept.TangentSweepFrom(output, 5, hv.data());
      for (Index i = 0; i < 5; ++i) {
        const double want = gk[static_cast<std::size_t>(i)].v[0];
        BOOST_TEST(std::abs(hv[static_cast<std::size_t>(i)] - want) <= 1e-13 * (1 + std::abs(want)));
      }
    }
  }
}

// x^3 recorded as a node of the caller's own (reverse::Var::Node), which
// keeps no second derivatives.
template <typename T>
T Cubed(const T& a) {
  if constexpr (implicit::reverse::IsVar<T>::value) {
    const typename T::Value value = ValueOf(a);
    return T::Node(value * value * value, a, typename T::Value(3.0) * value * value);
  } else {
    return a * a * a;
  }
}
struct CubeEnergy {
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>&) const {
    T e(0.0);
    for (Index i = 0; i < x.size(); ++i) e += T(0.1) * Cubed(x(i)) + x(i) * x(i);
    return e;
  }
};

// A linearizing recording of an operation without second derivatives does
// not check out, and AutoDiffEnergy's recorded Hessian then differentiates
// those samples at the point: its products are still H v.
BOOST_AUTO_TEST_CASE(a_node_without_second_derivatives_is_differentiated_at_the_point) {
  AutoDiffEnergy<CubeEnergy, double> energy(CubeEnergy{}, 4);
  energy.set_mode(AutoDiffMode::kReverse);
  const Matrix<double> x = implicit::testing::RandomMatrix<double>(4, 3, 61);
  const Matrix<double> v = implicit::testing::RandomMatrix<double>(4, 3, 62);
  const Matrix<double> want = ((0.6 * x.array() + 2.0) * v.array()).matrix();  // H = diag(0.6 x + 2)
  const auto hessian = energy.LinearizeHessian(x);
  const auto* recorded =
      dynamic_cast<const AutoDiffEnergy<CubeEnergy, double>::RecordedHessian*>(hessian.get());
  BOOST_REQUIRE(recorded != nullptr);
  BOOST_TEST(recorded->samples_recorded() == 0);
  Matrix<double> got(4, 3);
  hessian->JacobianVectorProduct(v, got);
  BOOST_TEST((got - want).norm() <= 1e-13 * want.norm());
}

BOOST_AUTO_TEST_CASE(a_nested_recording_or_a_stale_var_is_refused_and_the_tape_stays_usable) {
  namespace reverse = implicit::reverse;
  using V = Vector<reverse::Var<double>>;
  const Vector<double> z = Vector<double>::Constant(3, 0.5);
  Vector<double> g(3);
  BOOST_CHECK_THROW(reverse::Gradient<double>(
                        z.data(), 3,
                        [&](const V& x) {
                          Vector<double> inner(3);
                          reverse::Gradient<double>(
                              z.data(), 3, [](const V& y) { return y.squaredNorm(); },
                              inner.data());
                          return x.squaredNorm();
                        },
                        g.data()),
                    std::logic_error);
  reverse::Gradient<double>(z.data(), 3, [](const V& x) { return x.squaredNorm(); }, g.data());
  BOOST_TEST((g - 2.0 * z).norm() <= 1e-15);
  // A Var kept from one recording is refused in the next (not read as one of
  // its nodes), in a scalar operation and in a vector node alike.
  reverse::Var<double> kept;
  Vector<reverse::Var<double>> kept_vector;
  reverse::Gradient<double>(
      z.data(), 3,
      [&](const V& x) {
        kept = x(0) * 2.0;
        kept_vector = x;
        return x.squaredNorm();
      },
      g.data());
  BOOST_CHECK_THROW(reverse::Gradient<double>(
                        z.data(), 3, [&](const V& x) { return x.squaredNorm() + kept * x(1); },
                        g.data()),
                    std::logic_error);
  BOOST_CHECK_THROW(reverse::Gradient<double>(
                        z.data(), 3,
                        [&](const V& x) { return x(0) * implicit::ad::Dot(z, kept_vector); },
                        g.data()),
                    std::logic_error);
  reverse::Gradient<double>(z.data(), 3, [](const V& x) { return x.squaredNorm(); }, g.data());
  BOOST_TEST((g - 2.0 * z).norm() <= 1e-15);
}

// Eigen allocates a dynamic matrix of Vars without constructing its
// coefficients, as it does a matrix of doubles (reverse_var.h); everywhere
// else a default-constructed Var is the constant 0. Storage freed by one
// matrix and taken by the next (the previous one's Vars, variables of an
// earlier recording, still in it) holds constants once set to zero, and a
// sum over it adds nothing to the gradient.
BOOST_AUTO_TEST_CASE(default_vars_are_zero_and_eigens_storage_is_written_before_it_is_read) {
  namespace reverse = implicit::reverse;
  using Var = reverse::Var<double>;
  using V = Vector<Var>;
  const auto is_zero_constant = [](const Var& v) { return !v.is_variable() && ValueOf(v) == 0.0; };
  BOOST_TEST(is_zero_constant(Var()));
  const std::vector<Var> list(5);
  BOOST_TEST(std::all_of(list.begin(), list.end(), is_zero_constant));
  const Eigen::Matrix<Var, 3, 2> fixed;
  BOOST_TEST(std::all_of(fixed.data(), fixed.data() + fixed.size(), is_zero_constant));

  const Vector<double> z = Vector<double>::LinSpaced(6, -1.0, 1.5);
  Vector<double> g(6);
  for (int round = 0; round < 3; ++round) {
    reverse::Gradient<double>(
        z.data(), 6,
        [&](const V& x) {
          Matrix<Var> outer = x * x.transpose();  // variables, freed at the end of the call
          return outer.sum();
        },
        g.data());
    BOOST_TEST((g - 2.0 * z.sum() * Vector<double>::Ones(6)).norm() <= 1e-12);
    bool all_constants = true;
    reverse::Gradient<double>(
        z.data(), 6,
        [&](const V& x) {
          Matrix<Var> zero(6, 6);  // (likely) the storage `outer` had
          zero.setZero();
          const Matrix<Var> constant = Matrix<Var>::Constant(6, 6, Var(2.0));
          all_constants = std::all_of(zero.data(), zero.data() + zero.size(), is_zero_constant) &&
                          std::none_of(constant.data(), constant.data() + constant.size(),
                                       [](const Var& v) { return v.is_variable() || ValueOf(v) != 2.0; });
          return x.squaredNorm() + zero.sum() + constant.sum();
        },
        g.data());
    BOOST_TEST(all_constants);
    BOOST_TEST((g - 2.0 * z).norm() <= 1e-15);
  }
}

// ad::Dot on a stretch of the recording's variables (a known run: values and
// nodes found by one lookup), and with ad::Persistent numbers (pointed to, not
// copied), records what it records on a copy of the variables, which it must
// check Var by Var: the same value and gradient, in values and in first-order
// duals (the tangents: H v). A stretch read backwards or with a stride is no
// run, and Vars that are not consecutive nodes are refused as one.
BOOST_AUTO_TEST_CASE(dot_on_a_known_run_and_persistent_numbers_equals_dot_on_copies) {
  namespace reverse = implicit::reverse;
  namespace ad = implicit::ad;
  using Inner = implicit::internal::DirectionalJet<double>;
  const Matrix<double> P = implicit::testing::RandomMatrix<double>(7, 4, 11);
  const Vector<double> z = implicit::testing::RandomMatrix<double>(9, 1, 12);
  const Vector<double> v = implicit::testing::RandomMatrix<double>(9, 1, 13);
  const auto energy = [&](const auto& x, bool persistent) {
    using T = typename std::decay_t<decltype(x)>::Scalar;
    const T d0 = persistent ? ad::Dot(ad::Persistent(P.col(0)), x.head(7)) : ad::Dot(P.col(0), x.head(7));
    const T d1 = persistent ? ad::Dot(x.tail(7), ad::Persistent(P.col(1))) : ad::Dot(x.tail(7), P.col(1));
    T e = d0 * d1 + ad::Dot(P.col(2).head(5), x.segment(2, 5)) * x(8);
    e += ad::Dot(P.col(3).head(4), x.head(8).reverse().head(4)) * ad::Dot(P.col(3).head(4), x(Eigen::seqN(0, 4, 2)));
    return e;
  };
  const auto check = [&](auto value_type) {
    using V = decltype(value_type);
    using VarVector = Vector<reverse::Var<V>>;
    const std::vector<V> zv = PointWithTangents<V>(z, v);
    std::vector<V> expected(9), g(9);
    const V e_copied = reverse::Gradient<V>(
        zv.data(), 9, [&](const VarVector& x) { return energy(VarVector(x), false); }, expected.data());
    const double value = ad::internal::NumberOf(e_copied);
    for (bool known : {true, false}) {
      for (bool persistent : {true, false}) {
        const V e = reverse::Gradient<V>(
            zv.data(), 9,
            [&](const VarVector& x) { return known ? energy(x, persistent) : energy(VarVector(x), persistent); },
            g.data());
        BOOST_TEST_CONTEXT("known run " << known << ", persistent " << persistent) {
          BOOST_TEST(std::abs(ad::internal::NumberOf(e) - value) <= 1e-14 * (1 + std::abs(value)));
          for (std::size_t i = 0; i < 9; ++i) {
            if constexpr (std::is_same<V, double>::value) {
              BOOST_TEST(std::abs(g[i] - expected[i]) <= 1e-14 * (1 + std::abs(expected[i])));
            } else {
              BOOST_TEST(std::abs(g[i].a - expected[i].a) <= 1e-14 * (1 + std::abs(expected[i].a)));
              BOOST_TEST(std::abs(g[i].v[0] - expected[i].v[0]) <= 1e-14 * (1 + std::abs(expected[i].v[0])));
            }
          }
        }
      }
    }
  };
  check(double());
  check(Inner());
  // In the other scalar types ad::Persistent is the plain product.
  BOOST_TEST(ad::Dot(ad::Persistent(P.col(0)), z.head(7)) == ad::Dot(P.col(0), z.head(7)));
  Vector<double> g(9);
  BOOST_CHECK_THROW(reverse::Gradient<double>(
                        z.data(), 9,
                        [&](const Vector<reverse::Var<double>>& x) {
                          const Vector<reverse::Var<double>> backwards = x.reverse();
                          reverse::Tape<double>::ThisThread().AddKnownRun(backwards.data(), 9, z.data());
                          return x.sum();
                        },
                        g.data()),
                    std::logic_error);
}

// The branch-free helpers give the values of their plain forms.
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
  Vector<double> a(3);
  a << 2.0, -1.0, 0.5;
  BOOST_TEST(implicit::ad::Dot(a, s) == a.dot(s));
  BOOST_CHECK_THROW(implicit::ad::Dot(a, s.head(2)), std::invalid_argument);
}

// Accumulation (reverse_var.h): `acc += b` adds b to acc's node when acc holds
// the last node alone, so a scalar loop's sum is one node of many operands...
BOOST_AUTO_TEST_CASE(a_loop_sum_is_one_node_of_many_operands) {
  namespace reverse = implicit::reverse;
  const Index n = 50;
  const Vector<double> a = implicit::testing::RandomMatrix<double>(n, 1, 31);
  const Vector<double> z = implicit::testing::RandomMatrix<double>(n, 1, 32);
  Vector<double> g(n);
  Index nodes = 0;
  const double e = reverse::Gradient<double>(
      z.data(), n,
      [&](const Vector<reverse::Var<double>>& x) {
        reverse::Var<double> acc = 0.0;
        for (Index k = 0; k < n; ++k) acc += a(k) * x(k) * x(k);  // x(k)^2 one node each
        reverse::Var<double> dot = 0.0;
        for (Index k = 0; k < n; ++k) dot -= a(k) * x(k);
        nodes = reverse::Tape<double>::ThisThread().size();
        return acc + dot;
      },
      g.data());
  // Independent variables, one node per square, and at most two nodes for
  // each sum (its first two terms) instead of one per term.
  BOOST_TEST(nodes <= 2 * n + 4);
  BOOST_TEST(std::abs(e - (a.array() * z.array().square()).sum() + a.dot(z)) <= 1e-12);
  BOOST_TEST((g - (2.0 * a.array() * z.array() - a.array()).matrix()).norm() <= 1e-12);
}

namespace {
// ... but never when another Var refers to that node: a copy (construction,
// assignment, into a vector), a Var made from it by a number (scaled,
// shifted, negated), the accumulator itself, and a named Var added (not a
// temporary: it stays usable). In each case the shared node is the last one
// recorded when the term is added, and the sharing Var is used after.
struct Aliases {
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    const T w = theta(0);
    T e = T(0.0);
    {  // copy construction
      T acc = x(0) * x(1);
      const T copy = acc;
      acc += x(2);
      acc += w * x(3);
      e += acc * copy;
    }
    {  // copy assignment
      T acc = x(1) * x(2);
      T assigned;
      assigned = acc;
      acc -= x(3);
      e += acc * assigned;
    }
    {  // a vector's element
      Vector<T> kept(1);
      T acc = x(2) * x(4);
      kept(0) = acc;
      acc += x(0);
      e += acc * kept(0);
    }
    {  // scaled, shifted and negated Vars of the node
      T acc = x(2) * x(3);
      const T scaled = acc * T(3.0);
      acc += x(0);
      T acc2 = x(1) * x(4);
      const T shifted = acc2 + T(1.0);
      acc2 -= x(0);
      T acc3 = x(0) * x(2);
      const T negated = -acc3;
      acc3 += x(1);
      e += acc * scaled + acc2 * shifted + acc3 * negated * w;
    }
    {  // an accumulator that starts as a named node (a constant plus it)
      const T t = x(0) * x(4);
      T acc = T(0.0);
      acc += t;
      acc += x(1);
      e += acc * t;
    }
    {  // a named Var added while it holds the last node: not taken
      T acc = x(0) * x(2);
      const T t = x(1) * x(3);
      acc += t;
      e += acc * t;
    }
    {  // the accumulator added to itself, then more terms
      T acc = x(3) * x(4);
      acc += acc;
      acc += x(0);
      acc -= acc * T(0.25);
      e += acc * acc * w;
    }
    {  // std::vector's copies
      std::vector<T> values(1, T(0.0));
      values[0] = x(1) * x(3);
      const std::vector<T> copies = values;
      values[0] += x(2);
      e += values[0] * copies[0];
    }
    return e;
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(accumulation_never_changes_a_var_sharing_the_node, Scalar, Scalars) {
  const Index n = 5, B = 3;
  AutoDiffEnergy<Aliases, Scalar> energy(Aliases{}, n, OneParameter<Scalar>(0.7));
  const Matrix<Scalar> x = implicit::testing::RandomMatrix<Scalar>(n, B, 41);
  const Matrix<Scalar> v = implicit::testing::RandomMatrix<Scalar>(n, B, 42);
  ModePair<Aliases, Scalar> pair(energy);
  CheckAllProducts(pair.forward, pair.reverse, x, v, "aliases");
  if constexpr (std::is_same<Scalar, double>::value) {  // and against central differences
    Matrix<double> g(n, B);
    pair.reverse.Gradient(x, g);
    const double h = 1e-6;
    for (Index b = 0; b < B; ++b) {
      for (Index i = 0; i < n; ++i) {
        Matrix<double> xp = x.col(b), xm = x.col(b);
        xp(i) += h;
        xm(i) -= h;
        Vector<double> ep(1), em(1);
        pair.reverse.Value(xp, ep);
        pair.reverse.Value(xm, em);
        const double fd = (ep(0) - em(0)) / (2 * h);
        BOOST_TEST(std::abs(g(i, b) - fd) <= 1e-7 * (1 + std::abs(fd)),
                   "dE/dx" << i << " of sample " << b << " = " << g(i, b) << ", central difference " << fd);
      }
    }
  }
}

// A named Var given up to an accumulation (acc += std::move(t)) may have been
// taken into it: using it again as a variable is refused, never read as the
// node it held.
BOOST_AUTO_TEST_CASE(a_var_moved_into_an_accumulation_is_refused_afterwards) {
  namespace reverse = implicit::reverse;
  using V = Vector<reverse::Var<double>>;
  const Vector<double> z = implicit::testing::RandomMatrix<double>(3, 1, 51);
  Vector<double> g(3);
  const double e = reverse::Gradient<double>(
      z.data(), 3,
      [](const V& x) {
        reverse::Var<double> acc = x(0) * x(1), t = x(1) * x(2);
        acc += std::move(t);
        return acc;
      },
      g.data());
  BOOST_TEST(std::abs(e - (z(0) * z(1) + z(1) * z(2))) <= 1e-15);
  BOOST_TEST(std::abs(g(1) - (z(0) + z(2))) <= 1e-15);
  BOOST_CHECK_THROW(reverse::Gradient<double>(
                        z.data(), 3,
                        [](const V& x) {
                          reverse::Var<double> acc = x(0) * x(1), t = x(1) * x(2);
                          acc += std::move(t);
                          return acc * t;  // NOLINT(bugprone-use-after-move): the point of the test
                        },
                        g.data()),
                    std::logic_error);
}
