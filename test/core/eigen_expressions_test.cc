// User energies written in ordinary Eigen (reverse_eigen.h): every recorded
// operation -- products of data and variables in each orientation, scaled,
// negated, chained, accumulated and aliased, inner and outer products, sums,
// squared norms and dot products, coefficient-wise functions -- gives in
// reverse mode the gradient, Hessian-vector product and parameter and input
// vector-Jacobian products of forward mode (float and double) and of central
// differences; data the functor holds and blocks of earlier products'
// outputs are read in place, not copied into the tape, and a matrix read by
// several products is copied once; parameters kept between
// sweeps are read anew when they change; edge shapes (1 x 1, empty) and
// non-finite values behave.
#define BOOST_TEST_MODULE eigen_expressions
#include <boost/test/unit_test.hpp>

#include <implicit/core/autodiff_energy.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "support/energy_checks.h"
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

// An energy of x = N tokens of width D (the D x N matrix X) with an input c
// (n values) and theta = (W_K, W_Q: Y x D each; s: 1 x 1), written as a user
// writes Eigen: each term exercises one recorded operation. Its data and
// numbers are of the energy's scalar type S (forward mode's duals mix with
// numbers of their own type only).
template <typename S>
struct EigenStyle {
  Index N, D, Y;
  Matrix<S> Xi;  // D x M, the functor's data (read in place)
  Matrix<S> A;   // D x D
  S beta;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& c, const Vector<T>& theta) const {
    using std::log;
    const S half(0.5), tenth(0.1);
    const Eigen::Map<const Matrix<T>> X(x.data(), D, N);
    const Eigen::Map<const Matrix<T>> WK(theta.data(), Y, D), WQ(theta.data() + Y * D, Y, D);
    const T s = theta(2 * Y * D);
    const Matrix<T> K = WK * X, Q = WQ * X;               // variables times variables
    const Matrix<T> Sc = beta * (K.transpose() * Q);      // transposed, scaled by a number
    T e = half * x.squaredNorm();                         // squaredNorm: one node
    for (Index t = 0; t < N; ++t) {                       // log-sum-exp by hand: one node
      const T m = Sc.col(t).maxCoeff();
      e -= (m + log((Sc.col(t).array() - m).exp().sum())) / beta;
    }
    const Matrix<T> H = Xi.transpose() * X;                // data (no cast) times variables
    e -= half * H.cwiseMax(T(0.0)).squaredNorm();
    e -= tenth * K.array().min(T(S(0.2))).square().sum();  // a clamp from above, as arrays
    e += tenth * X.cwiseMax(s).squaredNorm();               // a clamp at a variable
    const Matrix<S> local = half * Xi;                     // data that is not the functor's
    e += tenth * (local.template cast<T>().transpose() * X).sum();  // cast data, copied
    e += (s * (-Xi.transpose()) * X).array().tanh().sum(); // negated data, a variable scale
    e += x.dot(c) + S(0.01) * c.squaredNorm() * x.sum();   // dot with the input
    Vector<T> y = X.col(0);
    y = A * y;                                             // aliased: y = A y
    y += A.transpose() * X.col(1);                         // += a product
    y -= (S(2) * A) * X.col(N - 1);                        // -= a scaled product
    e += half * y.squaredNorm() + y.norm();
    e += (X.col(0).transpose() * X.col(1))(0, 0);          // inner product
    e += tenth * (X.col(1) * X.col(2).transpose()).array().square().sum();  // outer product
    e += S(0.05) * (X.transpose() * X).diagonal().sum();   // Eigen's lazy diagonal of a product
    e += X.colwise().sum().squaredNorm() / S(N) + X.row(0).mean();
    e += S(0.01) * X.col(2).array().exp().sum();            // a sum of exp: one node
    return e;
  }
};

template <typename Scalar>
AutoDiffEnergy<EigenStyle<Scalar>, Scalar> MakeEigenStyle(Index B, Index N = 4, Index D = 5, Index Y = 3) {
  const Index M = 6;
  implicit::ParameterSet<Scalar> params;
  params.Add("w_k", Y, D);
  params.Add("w_q", Y, D);
  params.Add("s", 1, 1);
  params.Block("w_k") = implicit::testing::RandomMatrix<Scalar>(Y, D, 31, 0.5);
  params.Block("w_q") = implicit::testing::RandomMatrix<Scalar>(Y, D, 32, 0.5);
  params.Block("s")(0, 0) = Scalar(0.7);
  EigenStyle<Scalar> f{N, D, Y, implicit::testing::RandomMatrix<Scalar>(D, M, 33),
                       implicit::testing::RandomMatrix<Scalar>(D, D, 34, 0.4), Scalar(1.5)};
  AutoDiffEnergy<EigenStyle<Scalar>, Scalar> energy(f, N * D, N * D, params);
  energy.SetInput(implicit::testing::RandomMatrix<Scalar>(N * D, B, 35, 0.5));
  return energy;
}

using Scalars = std::tuple<float, double>;

BOOST_AUTO_TEST_CASE_TEMPLATE(eigen_expressions_match_forward_mode, Scalar, Scalars) {
  const Index B = 5;
  const ModePair<EigenStyle<Scalar>, Scalar> pair(MakeEigenStyle<Scalar>(B));
  const Matrix<Scalar> x = implicit::testing::RandomMatrix<Scalar>(pair.forward.dimension(), B, 36);
  const Matrix<Scalar> v = implicit::testing::RandomMatrix<Scalar>(pair.forward.dimension(), B, 37);
  // The ReLU memory term is on both sides of its kink.
  const auto& f = pair.forward.functor();
  const Matrix<Scalar> overlaps = f.Xi.transpose() * Eigen::Map<const Matrix<Scalar>>(x.data(), f.D, f.N * B);
  BOOST_REQUIRE((overlaps.array() > 0).count() > 0 && (overlaps.array() < 0).count() > 0);
  CheckAllProducts(pair.forward, pair.reverse, x, v, "Eigen-style energy");
}

// With both sides of K^T Q at least 8 x 8 the dual recording computes the
// product's tangent as one product of twice the depth and its reverse with
// each factor's value and tangent stacked (reverse_tape.h: Stacks); the
// small energy above takes the unstacked path.
BOOST_AUTO_TEST_CASE_TEMPLATE(products_of_two_variables_stacked_match_forward_mode, Scalar, Scalars) {
  const Index B = 3;
  const ModePair<EigenStyle<Scalar>, Scalar> pair(MakeEigenStyle<Scalar>(B, 12, 9, 8));
  const Matrix<Scalar> x = implicit::testing::RandomMatrix<Scalar>(pair.forward.dimension(), B, 38);
  const Matrix<Scalar> v = implicit::testing::RandomMatrix<Scalar>(pair.forward.dimension(), B, 39);
  CheckAllProducts(pair.forward, pair.reverse, x, v, "Eigen-style energy, 12 tokens of width 9");
}

// Every elementwise operation of stored Vars with a scalar Var assigned to a
// matrix or a block (x - s, s - x, x + s, s + x, x s, s x, x / s, s / x), as a
// LayerNorm and other user code write them: in a gradient each is one block
// (Tape::PushElementwise); in the duals of the other products Eigen's loop.
// A constant and a scaled Var among the coefficients, a scaled scalar, a row
// (strided), an aliased y = y s and an empty vector are among them.
template <typename S>
struct ElementwiseStyle {
  Index N, D;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    using std::sqrt;
    const Eigen::Map<const Matrix<T>> X(x.data(), D, N);
    // Scalars that depend on x too (variables in every product): u is a scaled Var.
    const T s = theta(0) + S(0.3) * x.mean(), u = S(2) * (theta(1) + S(0.2) * x(1));
    const S d(static_cast<S>(D)), tenth(0.1);
    Matrix<T> G(D, N);
    T e(0.0);
    for (Index a = 0; a < N; ++a) {  // LayerNorm as a user writes it
      const auto xa = x.segment(a * D, D);
      const Vector<T> centred = xa.array() - xa.mean();  // x - s
      const T sd = sqrt(centred.squaredNorm() / d + S(0.01));
      G.col(a) = centred / sd;  // x / s into a block
      e += G.col(a).dot(xa) - d * sd;
    }
    Vector<T> y = X.col(0);
    y(1) = T(S(0.5));    // a constant among the Vars
    y(2) = S(3) * y(2);  // a scaled Var
    y = y * s;           // x s, aliased
    e += y.squaredNorm();
    const Vector<T> left = u - X.col(1).array();  // s - x
    const Matrix<T> row = s + X.row(0).array();   // s + x of a row
    const Vector<T> right = X.col(2).array() + u; // x + s
    const Vector<T> shifted = X.col(3).array() + S(3);
    const Vector<T> inverse = u / shifted.array();  // s / x
    const Matrix<T> scaled = s * G;                 // s x of a matrix
    const Vector<T> none = X.col(0).head(0).array() * u;
    e += tenth * (left.squaredNorm() + row.squaredNorm() + right.array().exp().sum() + inverse.sum() +
                  scaled.array().square().sum() + none.sum());
    return e;
  }
};

BOOST_AUTO_TEST_CASE_TEMPLATE(elementwise_operations_with_a_scalar_match_forward_mode, Scalar, Scalars) {
  const Index N = 4, D = 6, B = 3;
  implicit::ParameterSet<Scalar> params;
  params.Add("s", 2, 1);
  params.Block("s") << Scalar(0.8), Scalar(-0.6);
  const AutoDiffEnergy<ElementwiseStyle<Scalar>, Scalar> energy(ElementwiseStyle<Scalar>{N, D}, N * D, params);
  const ModePair<ElementwiseStyle<Scalar>, Scalar> pair(energy);
  const Matrix<Scalar> x = implicit::testing::RandomMatrix<Scalar>(N * D, B, 91, 0.8);
  const Matrix<Scalar> v = implicit::testing::RandomMatrix<Scalar>(N * D, B, 92);
  CheckAllProducts(pair.forward, pair.reverse, x, v, "elementwise operations with a scalar");
  AutoDiffEnergy<ElementwiseStyle<Scalar>, Scalar> reverse = pair.reverse;
  if constexpr (std::is_same<Scalar, double>::value) {
    implicit::testing::CheckEnergyFiniteDifferences(reverse, x, 1e-6, "elementwise operations (reverse)");
  }
}

// Assigned, such an operation is one step node and its outputs (no node per
// coefficient with the scalar as an operand); inside a larger expression it
// is not (Eigen's loop: a node per coefficient). Both give the gradient.
BOOST_AUTO_TEST_CASE(assigned_elementwise_operations_are_one_block) {
  namespace reverse = implicit::reverse;
  using Var = reverse::Var<double>;
  const Index n = 7;
  const Vector<double> z = implicit::testing::RandomMatrix<double>(n, 1, 93);
  Index assigned = -1, inline_nodes = -1;
  Vector<double> g(n), h(n);
  reverse::Gradient<double>(z.data(), n, [&](const Vector<Var>& x) {
    const Var m = x.mean();
    const Index before = reverse::Tape<double>::ThisThread().size();
    const Vector<Var> centred = x.array() - m;
    assigned = reverse::Tape<double>::ThisThread().size() - before;
    return centred.squaredNorm();
  }, g.data());
  reverse::Gradient<double>(z.data(), n, [&](const Vector<Var>& x) {
    const Var m = x.mean();
    const Index before = reverse::Tape<double>::ThisThread().size();
    const Var e = (x.array() - m).square().sum();
    inline_nodes = reverse::Tape<double>::ThisThread().size() - before;
    return e;
  }, h.data());
  BOOST_TEST(assigned == n + 1);      // the step node and n outputs
  BOOST_TEST(inline_nodes == n + 1);  // n differences and the sum
  const Vector<double> expected = 2.0 * (z.array() - z.mean()).matrix();  // (the centred sum is 0)
  BOOST_TEST((g - expected).norm() <= 1e-13);
  BOOST_TEST((h - expected).norm() <= 1e-13);
}

BOOST_AUTO_TEST_CASE(eigen_expressions_match_central_differences) {
  const Index B = 3;
  AutoDiffEnergy<EigenStyle<double>, double> energy = MakeEigenStyle<double>(B);
  energy.set_mode(AutoDiffMode::kReverse);
  const Matrix<double> x = implicit::testing::RandomMatrix<double>(energy.dimension(), B, 38);
  implicit::testing::CheckEnergyFiniteDifferences(energy, x, 1e-6, "Eigen-style energy (reverse)");
}

// Retrieval E(x) = 0.5|x|^2 - lse(beta P^T x) / beta with the patterns P held
// by the functor (`own`) or copied into a local matrix at each evaluation.
struct Retrieval {
  Matrix<double> P;
  bool own;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>&) const {
    using std::log;
    Vector<T> s;
    if (own) {
      s = 2.0 * (P.transpose() * x);
    } else {
      const Matrix<double> local = P;
      s = 2.0 * (local.transpose() * x);
    }
    const T m = s.maxCoeff();
    return 0.5 * x.squaredNorm() - (m + log((s.array() - m).exp().sum())) / 2.0;
  }
};

// The functor's own data is read where it is: the tape holds O(n + N)
// numbers of its own, not the n N of the patterns; a local copy is copied
// (and differentiated the same).
BOOST_AUTO_TEST_CASE(data_the_functor_holds_is_not_copied_into_the_tape) {
  const Index n = 300, N = 40;
  const Matrix<double> P = implicit::testing::RandomMatrix<double>(n, N, 51);
  const Matrix<double> x = implicit::testing::RandomMatrix<double>(n, 2, 52, 0.1);
  Matrix<double> g_own(n, 2), g_local(n, 2), h_own(n, 2), h_local(n, 2);
  AutoDiffEnergy<Retrieval, double> own(Retrieval{P, true}, n), local(Retrieval{P, false}, n);
  own.set_mode(AutoDiffMode::kReverse);
  local.set_mode(AutoDiffMode::kReverse);
  const auto& tape = implicit::reverse::Tape<double>::ThisThread();
  own.Gradient(x, g_own);
  const std::size_t own_numbers = tape.owned_numbers();
  local.Gradient(x, g_local);
  const std::size_t local_numbers = tape.owned_numbers();
  BOOST_TEST(own_numbers <= static_cast<std::size_t>(2 * (n + N)));
  BOOST_TEST(local_numbers >= static_cast<std::size_t>(n * N));
  BOOST_TEST((g_own - g_local).norm() <= 1e-13 * g_own.norm());
  const Matrix<double> v = implicit::testing::RandomMatrix<double>(n, 2, 53);
  own.HessianVectorProduct(x, v, h_own);
  local.HessianVectorProduct(x, v, h_local);
  BOOST_TEST((h_own - h_local).norm() <= 1e-12 * h_own.norm());
  implicit::testing::CheckEnergyFiniteDifferences(own, x, 1e-6, "retrieval with the functor's patterns");
}

// On the tape directly: products with an empty inner dimension (zero), of
// 1 x 1 factors, sums of empty and one-entry vectors, and factors of
// mismatched shapes (refused with std::invalid_argument).
BOOST_AUTO_TEST_CASE(edge_shapes) {
  namespace reverse = implicit::reverse;
  using Var = reverse::Var<double>;
  const Vector<double> z = implicit::testing::RandomMatrix<double>(3, 1, 61);
  Vector<double> g(3);
  const double e = reverse::Gradient<double>(
      z.data(), 3,
      [&](const Vector<Var>& x) {
        const Matrix<Var> empty_inner = x.head(0) * x.tail(0).transpose();  // 0 x 0
        const Matrix<Var> zeros = Matrix<Var>(2, 0) * Matrix<Var>(0, 3);     // 2 x 3 of zeros
        const Matrix<Var> one = x.segment(1, 1) * x.segment(2, 1);          // 1 x 1
        const Var none = x.head(0).sum() + x.head(0).squaredNorm();
        return one(0, 0) + x.head(1).sum() + zeros.sum() + none + Var(double(empty_inner.size()));
      },
      g.data());
  BOOST_TEST(e == z(1) * z(2) + z(0));
  BOOST_TEST(g(0) == 1.0);
  BOOST_TEST(g(1) == z(2));
  BOOST_TEST(g(2) == z(1));
  Matrix<Var> out;
  BOOST_CHECK_THROW(reverse::Gradient<double>(
                        z.data(), 3,
                        [&](const Vector<Var>& x) {
                          reverse::internal::RecordProduct<double>(x.head(2), x.tail(3), &out);  // 2x1 by 3x1
                          return out(0, 0);
                        },
                        g.data()),
                    std::invalid_argument);
}

// reverse::Recording with some entries of z constants (AutoDiffEnergy's
// parameters in a gradient in x): the gradient in the variables equals that
// part of the gradient in every entry, and products with blocks of the
// constants (strided blocks of a Map of them, used transposed or not) read
// their numbers in place: with x a known run, nothing is copied into the tape.
BOOST_AUTO_TEST_CASE(constants_of_a_recording_are_read_in_place) {
  namespace reverse = implicit::reverse;
  using Var = reverse::Var<double>;
  const Index n = 3, rows = 5, cols = 4;
  const Vector<double> z = implicit::testing::RandomMatrix<double>(n + rows * cols, 1, 63);
  // E(x; w) = sum tanh(W[1:4, 1:4] x) + |W[0:2, :]^T x[0:2]|^2 with W the 5 x 4 matrix w.
  const auto energy = [&](const Vector<Var>& x, const Vector<Var>& w) {
    using std::tanh;
    const Eigen::Map<const Matrix<Var>> W(w.data(), rows, cols);
    const Vector<Var> a = W.block(1, 1, 3, 3) * x;
    const Vector<Var> b = W.topRows(2).transpose() * x.head(2);
    Var e = b.squaredNorm();
    for (Index i = 0; i < a.size(); ++i) e += tanh(a(i));
    return e;
  };
  Vector<double> all(z.size());
  const double e_all = reverse::Gradient<double>(
      z.data(), z.size(), [&](const Vector<Var>& v) { return energy(v.head(n), v.tail(rows * cols)); }, all.data());
  Vector<double> in_x(n);
  double e_x = 0;
  std::size_t copied = 1;
  {
    reverse::Recording<double> recording;
    Vector<Var> x, w;
    recording.Variables(z.data(), n, true, &x);
    recording.Variables(z.data() + n, rows * cols, false, &w);
    BOOST_TEST(recording.num_independent() == n);
    e_x = recording.Gradient(energy(x, w), in_x.data());
    copied = reverse::Tape<double>::ThisThread().owned_numbers();
  }
  BOOST_TEST(e_x == e_all);
  BOOST_TEST((in_x - all.head(n)).norm() <= 1e-14 * (1.0 + all.head(n).norm()));
  BOOST_TEST(copied == 0u);
  // And central differences in x.
  const double h = 1e-6;
  for (Index i = 0; i < n; ++i) {
    Vector<double> zp = z, zm = z;
    zp(i) += h;
    zm(i) -= h;
    Vector<double> unused(z.size());
    const auto value = [&](const Vector<double>& at) {
      return reverse::Gradient<double>(
          at.data(), at.size(), [&](const Vector<Var>& v) { return energy(v.head(n), v.tail(rows * cols)); },
          unused.data());
    };
    BOOST_TEST(std::abs((value(zp) - value(zm)) / (2 * h) - in_x(i)) <= 1e-7 * (1.0 + std::abs(in_x(i))));
  }
}

// A sum of squares of any expression is one node whose operands are the
// expression's coefficients (no node per square): the ReLU memories'
// |max(H, 0)|^2 records nothing but that node, a variance (x - mean)^2 one
// node per difference and the sum; with a reduction inside the squared
// expression (a column sum per coefficient) the result is still right. Each
// gradient against the closed form.
BOOST_AUTO_TEST_CASE(sums_of_squares_are_one_node_of_the_expressions_coefficients) {
  namespace reverse = implicit::reverse;
  using Var = reverse::Var<double>;
  const Index rows = 4, cols = 5, n = rows * cols;
  const Vector<double> z = implicit::testing::RandomMatrix<double>(n, 1, 81);
  const auto gradient = [&](const auto& f, Index* nodes) {
    Vector<double> g(n);
    reverse::Gradient<double>(z.data(), n, [&](const Vector<Var>& v) {
      const Index before = reverse::Tape<double>::ThisThread().size();
      const Var e = f(Eigen::Map<const Matrix<Var>>(v.data(), rows, cols));
      *nodes = reverse::Tape<double>::ThisThread().size() - before;
      return e;
    }, g.data());
    return g;
  };
  const Eigen::Map<const Matrix<double>> Z(z.data(), rows, cols);
  Index nodes = -1;
  const Vector<double> relu = gradient([](const auto& X) { return X.cwiseMax(Var(0.0)).squaredNorm(); }, &nodes);
  BOOST_TEST(nodes == 1);
  const Matrix<double> relu_expected = 2.0 * Z.cwiseMax(0.0);
  BOOST_TEST((relu - relu_expected.reshaped()).norm() <= 1e-14);

  // A clamp from above at a nonzero number: the clamped coefficients add
  // the constant's square to the value, nothing to the gradient.
  Var clamped_value;
  const Vector<double> clamped = gradient([&](const auto& X) {
    return clamped_value = X.array().min(Var(0.3)).square().sum();
  }, &nodes);
  BOOST_TEST(nodes == 1);
  const Matrix<double> clamped_expected = (Z.array() <= 0.3).select(2.0 * Z, 0.0);
  BOOST_TEST((clamped - clamped_expected.reshaped()).norm() <= 1e-14);
  BOOST_TEST(std::abs(ValueOf(clamped_value) - Z.array().min(0.3).square().sum()) <= 1e-13);

  const Vector<double> variance = gradient([](const auto& X) { return (X.array() - X.mean()).square().sum(); }, &nodes);
  BOOST_TEST(nodes <= n + 2);  // the mean, n differences, the sum
  const Matrix<double> variance_expected = 2.0 * (Z.array() - Z.mean()).matrix();  // (the centred sum is 0)
  BOOST_TEST((variance - variance_expected.reshaped()).norm() <= 1e-13);

  const Vector<double> columns = gradient([](const auto& X) { return X.colwise().sum().cwiseAbs2().sum(); }, &nodes);
  Matrix<double> columns_expected(rows, cols);
  for (Index j = 0; j < cols; ++j) columns_expected.col(j).setConstant(2.0 * Z.col(j).sum());
  BOOST_TEST((columns - columns_expected.reshaped()).norm() <= 1e-13);
}

// A clamp inside a sum of squares keeps the coefficient std::max / std::min
// keeps (Eigen's loop for Vars): a NaN stays (and the value is NaN), an
// infinity beyond the clamp is replaced by the constant and contributes
// nothing to the gradient.
BOOST_AUTO_TEST_CASE(clamps_in_sums_of_squares_keep_eigens_coefficient) {
  namespace reverse = implicit::reverse;
  using Var = reverse::Var<double>;
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  Vector<double> z(4), g(4);
  z << nan, -inf, 2.0, -1.0;
  const double relu = reverse::Gradient<double>(z.data(), 4, [](const Vector<Var>& v) {
    return v.cwiseMax(Var(0.0)).squaredNorm();
  }, g.data());
  BOOST_TEST(std::isnan(relu));
  BOOST_TEST(std::isnan(g(0)));
  BOOST_TEST(g(1) == 0.0);
  BOOST_TEST(g(2) == 4.0);
  BOOST_TEST(g(3) == 0.0);
  Vector<double> w(2), h(2);
  w << inf, 0.25;
  const double capped = reverse::Gradient<double>(w.data(), 2, [](const Vector<Var>& v) {
    return v.array().min(Var(0.5)).square().sum();
  }, h.data());
  BOOST_TEST(capped == 0.3125);
  BOOST_TEST(h(0) == 0.0);
  BOOST_TEST(h(1) == 0.5);
}

// maxCoeff() and minCoeff() of Vars return the coefficient Eigen's own loop
// returns on the values (std::max / std::min in order: the first of equal
// values, of either sign for zeros; a NaN first stays, a later NaN is passed over), so the derivative
// goes to that coefficient alone: on stored vectors (scanned by value), on a
// row of a matrix (strided: Eigen's loop) and on an expression.
BOOST_AUTO_TEST_CASE(max_and_min_coefficients_pick_eigens_coefficient) {
  namespace reverse = implicit::reverse;
  using Var = reverse::Var<double>;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::vector<double>> cases = {
      {1, 3, 3, 2, -5, -5}, {nan, 1, 2}, {1, nan, 0.5, 4}, {2}, {-1, -1, -1},
      // longer than the scan's four running results: the extreme repeated in
      // several of them, NaNs among them, zeros of both signs
      {-0.0, 0.0, 1, 5, 2, 5, 5, -3, 5, 0, 4, -3},
      {3, nan, nan, 1, 7, 7, nan, 2, 7, -1, 0, 7, -1},
      {0.0, -0.0, -0.0, 0.0, -0.0, 0.0, 0.0, -0.0, 0.0}};
  for (const std::vector<double>& values : cases) {
    const Index n = static_cast<Index>(values.size());
    for (const bool max : {true, false}) {
      BOOST_TEST_CONTEXT((max ? "max" : "min") << " of " << n << " values starting " << values[0]) {
        // Eigen's scalar loop on the values (its vectorised loop on doubles
        // treats NaNs otherwise): std::max / std::min in order.
        Index expected = 0;
        for (Index i = 1; i < n; ++i) {
          const double best = values[static_cast<std::size_t>(expected)], c = values[static_cast<std::size_t>(i)];
          if (max ? best < c : c < best) expected = i;
        }
        const double chosen = values[static_cast<std::size_t>(expected)];
        for (int shape = 0; shape < 3; ++shape) {
          std::vector<double> g(static_cast<std::size_t>(2 * n));
          std::vector<double> at(static_cast<std::size_t>(2 * n));  // a 2 x n matrix with the values in both rows
          for (Index i = 0; i < n; ++i) at[static_cast<std::size_t>(2 * i)] = at[static_cast<std::size_t>(2 * i + 1)] = values[static_cast<std::size_t>(i)];
          const double result = reverse::Gradient<double>(at.data(), 2 * n, [&](const Vector<Var>& x) {
            const Eigen::Map<const Matrix<Var>> X(x.data(), 2, n);
            const Vector<Var> first_row = X.row(0).transpose();
            if (shape == 0) return max ? first_row.maxCoeff() : first_row.minCoeff();    // stored
            if (shape == 1) return max ? X.row(0).maxCoeff() : X.row(0).minCoeff();      // strided
            return max ? (X.row(0).array() * 1.0).maxCoeff() : (X.row(0).array() * 1.0).minCoeff();  // an expression
          }, g.data());
          BOOST_TEST((result == chosen || (std::isnan(result) && std::isnan(chosen))), "shape " << shape);
          for (Index i = 0; i < 2 * n; ++i) {
            BOOST_TEST(g[static_cast<std::size_t>(i)] == (i == 2 * expected ? 1.0 : 0.0), "shape " << shape << ", entry " << i);
          }
        }
      }
    }
  }
}

// A NaN in one sample gives that sample a NaN gradient (through the recorded
// products and sums) and leaves the others exact.
// Heads of attention as a user writes them: all heads' keys and queries as
// one product each, every head's scores a product of row blocks of those
// outputs, used transposed and not, whole and in part, and of copies of them
// that were changed after the product (a shifted value, a scaled entry, an
// entry set to another Var), and a matrix of Vars read by several products
// and changed in place between them: each must differentiate like forward
// mode and central differences. theta = (W_K, W_Q), H heads of width Y.
template <typename S>
struct Heads {
  Index N, D, H, Y;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    using std::log;
    const Eigen::Map<const Matrix<T>> X(x.data(), D, N);
    const Eigen::Map<const Matrix<T>> WK(theta.data(), H * Y, D), WQ(theta.data() + H * Y * D, H * Y, D);
    const Matrix<T> K = WK * X, Q = WQ * X;  // (H Y) x N each
    T e = S(0.5) * x.squaredNorm();
    for (Index h = 0; h < H; ++h) {
      const Matrix<T> Sc = K.middleRows(h * Y, Y).transpose() * Q.middleRows(h * Y, Y);
      for (Index t = 0; t < N; ++t) {
        const T m = Sc.col(t).maxCoeff();
        e -= m + log((Sc.col(t).array() - m).exp().sum());
      }
    }
    // A corner block, the whole output transposed, a block of columns.
    e += S(0.1) * (K.block(1, 1, Y, N - 1).transpose() * Q.block(2, 0, Y, N - 1)).sum();
    e += S(0.05) * (Q.transpose() * K).array().tanh().sum();
    e += S(0.2) * (Q.rightCols(2) * X.leftCols(2).transpose()).squaredNorm();
    // Copies changed after the product: each must be read as it is now.
    Matrix<T> shifted = K, scaled = K, replaced = Q;
    shifted(1, 0) += S(0.5);
    scaled(0, 1) *= S(3);
    replaced(2, 1) = x(3) * x(4);
    e += S(0.1) * (shifted.topRows(Y).transpose() * Q.topRows(Y)).sum();
    e += S(0.1) * (scaled.transpose() * Q).sum();
    e += S(0.1) * (K.transpose() * replaced).array().square().sum();
    // A matrix of Vars (no product's output) read by several products, and
    // changed in place between them.
    Matrix<T> G = X.array().tanh().matrix();  // D x N
    e += S(0.1) * (K * G.transpose()).sum();
    e += S(0.1) * (Q * G.transpose()).array().square().sum();
    G(0, 1) += S(0.5);
    e += S(0.1) * (K * G.transpose()).sum();
    G(1, 0) *= S(3);
    e += S(0.1) * (Q * G.transpose()).sum();
    G(2, 2) = x(0) * x(1);
    e += S(0.1) * (K * G.transpose()).array().square().sum();
    return e;
  }
};

template <typename Scalar>
AutoDiffEnergy<Heads<Scalar>, Scalar> MakeHeads() {
  const Index N = 5, D = 4, H = 3, Y = 2;
  implicit::ParameterSet<Scalar> params;
  params.Add("w_k", H * Y, D);
  params.Add("w_q", H * Y, D);
  params.Block("w_k") = implicit::testing::RandomMatrix<Scalar>(H * Y, D, 81, 0.5);
  params.Block("w_q") = implicit::testing::RandomMatrix<Scalar>(H * Y, D, 82, 0.5);
  return AutoDiffEnergy<Heads<Scalar>, Scalar>(Heads<Scalar>{N, D, H, Y}, N * D, params);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(blocks_of_a_products_output_match_forward_mode, Scalar, Scalars) {
  const Index B = 3;
  const ModePair<Heads<Scalar>, Scalar> pair(MakeHeads<Scalar>());
  const Matrix<Scalar> x = implicit::testing::RandomMatrix<Scalar>(pair.forward.dimension(), B, 83);
  const Matrix<Scalar> v = implicit::testing::RandomMatrix<Scalar>(pair.forward.dimension(), B, 84);
  CheckAllProducts(pair.forward, pair.reverse, x, v, "attention heads");
}

BOOST_AUTO_TEST_CASE(blocks_of_a_products_output_match_central_differences) {
  AutoDiffEnergy<Heads<double>, double> energy = MakeHeads<double>();
  energy.set_mode(AutoDiffMode::kReverse);
  const Matrix<double> x = implicit::testing::RandomMatrix<double>(energy.dimension(), 2, 85);
  implicit::testing::CheckEnergyFiniteDifferences(energy, x, 1e-6, "attention heads (reverse)");
}

// A product whose factors are blocks of earlier products' outputs reads them
// where the tape holds them: with the data and x read in place too, nothing
// is copied into the tape's own matrices.
BOOST_AUTO_TEST_CASE(blocks_of_a_products_output_are_not_copied) {
  namespace reverse = implicit::reverse;
  using Var = reverse::Var<double>;
  const Index N = 5, D = 4, H = 3, Y = 2;
  const Matrix<double> W = implicit::testing::RandomMatrix<double>(H * Y, D, 86, 0.5);
  const Vector<double> z = implicit::testing::RandomMatrix<double>(N * D, 1, 87);
  const auto energy = [&](const Vector<Var>& x) {
    const Eigen::Map<const Matrix<Var>> X(x.data(), D, N);
    const Matrix<Var> K = W * X;
    Var e = Var(0.0);
    for (Index h = 0; h < H; ++h) {
      e += (K.middleRows(h * Y, Y).transpose() * K.middleRows(h * Y, Y)).array().tanh().sum();
    }
    return e;
  };
  Vector<double> gradient(z.size());
  std::size_t copied = 1;
  {
    const reverse::PersistentScope persistent(&W, sizeof(W));
    reverse::Recording<double> recording;
    Vector<Var> x;
    recording.Variables(z.data(), z.size(), true, &x);
    recording.Gradient(energy(x), gradient.data());
    copied = reverse::Tape<double>::ThisThread().owned_numbers();
  }
  BOOST_TEST(copied == 0u);
  // The gradient against central differences.
  const auto value = [&](const Vector<double>& at) {
    Vector<double> unused(at.size());
    return reverse::Gradient<double>(at.data(), at.size(), energy, unused.data());
  };
  const double h = 1e-6;
  for (Index i = 0; i < z.size(); ++i) {
    Vector<double> zp = z, zm = z;
    zp(i) += h;
    zm(i) -= h;
    BOOST_TEST(std::abs((value(zp) - value(zm)) / (2 * h) - gradient(i)) <= 1e-7 * (1.0 + std::abs(gradient(i))));
  }
}

// A matrix of Vars read by several products is copied into the tape once:
// read again unchanged, the first copy is used.
BOOST_AUTO_TEST_CASE(a_matrix_read_by_several_products_is_copied_once) {
  namespace reverse = implicit::reverse;
  using Var = reverse::Var<double>;
  const Index N = 5, D = 4;
  const Matrix<double> W = implicit::testing::RandomMatrix<double>(3, D, 90, 0.5);
  const Vector<double> z = implicit::testing::RandomMatrix<double>(N * D, 1, 91);
  const auto copied = [&](int reads) {
    const reverse::PersistentScope persistent(&W, sizeof(W));
    reverse::Recording<double> recording;
    Vector<Var> x;
    recording.Variables(z.data(), z.size(), true, &x);
    const Eigen::Map<const Matrix<Var>> X(x.data(), D, N);
    const Matrix<Var> G = X.array().tanh().matrix();
    Var e = Var(0.0);
    for (int r = 0; r < reads; ++r) e += (W * G).array().tanh().sum();
    Vector<double> gradient(z.size());
    recording.Gradient(e, gradient.data());
    return reverse::Tape<double>::ThisThread().owned_numbers();
  };
  BOOST_TEST(copied(1) == static_cast<std::size_t>(N * D));
  BOOST_TEST(copied(3) == copied(1));
}

// Parameters that are constants of a sweep (a gradient or Hessian-vector
// product in x) are kept between sweeps: changed in place, they must be read
// as they are now. The derivatives after a change equal forward mode's.
BOOST_AUTO_TEST_CASE(parameters_changed_between_sweeps_are_read_anew) {
  const Index B = 2;
  AutoDiffEnergy<Heads<double>, double> energy = MakeHeads<double>();
  energy.set_mode(AutoDiffMode::kReverse);
  const Matrix<double> x = implicit::testing::RandomMatrix<double>(energy.dimension(), B, 88);
  const Matrix<double> v = implicit::testing::RandomMatrix<double>(energy.dimension(), B, 89);
  Matrix<double> g(x.rows(), B), hv(x.rows(), B);
  energy.Gradient(x, g);
  energy.HessianVectorProduct(x, v, hv);
  energy.parameters()->values() *= 1.5;
  AutoDiffEnergy<Heads<double>, double> forward = energy;  // keeps nothing between evaluations
  forward.set_mode(AutoDiffMode::kForward);
  Matrix<double> g_changed(x.rows(), B), hv_changed(x.rows(), B), g_forward(x.rows(), B), hv_forward(x.rows(), B);
  energy.Gradient(x, g_changed);
  energy.HessianVectorProduct(x, v, hv_changed);
  forward.Gradient(x, g_forward);
  forward.HessianVectorProduct(x, v, hv_forward);
  BOOST_TEST((g_changed - g).norm() > 1e-3 * g.norm());  // the change matters
  BOOST_TEST((hv_changed - hv).norm() > 1e-3 * hv.norm());
  BOOST_TEST((g_changed - g_forward).norm() <= 1e-12 * g_forward.norm());
  BOOST_TEST((hv_changed - hv_forward).norm() <= 1e-12 * hv_forward.norm());
}

BOOST_AUTO_TEST_CASE(a_non_finite_sample_is_isolated) {
  const Index n = 20, N = 6;
  AutoDiffEnergy<Retrieval, double> energy(Retrieval{implicit::testing::RandomMatrix<double>(n, N, 71), true}, n);
  energy.set_mode(AutoDiffMode::kReverse);
  Matrix<double> x = implicit::testing::RandomMatrix<double>(n, 3, 72, 0.1);
  Matrix<double> clean(n, 3), g(n, 3);
  energy.Gradient(x, clean);
  x(4, 1) = std::numeric_limits<double>::quiet_NaN();
  energy.Gradient(x, g);
  BOOST_TEST(!g.col(1).allFinite());
  BOOST_TEST(g.col(0) == clean.col(0));
  BOOST_TEST(g.col(2) == clean.col(2));
}

}  // namespace
