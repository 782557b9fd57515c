// DEQ wrappers (deq_layer.h): the built-in MLP block and the automatic wrapper
// of a user block have exact Jacobian, parameter and input products, their
// fixed points satisfy f(z) = z, and they train through the implicit-
// differentiation path.
#define BOOST_TEST_MODULE deq_layer
#include <boost/test/unit_test.hpp>

#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/deq_layer.h>
#include <implicit/solvers/anderson.h>
#include <implicit/solvers/picard.h>

#include "support/dual_products.h"
#include "support/energy_checks.h"
#include "support/fused_energy_checks.h"
#include "support/test_problems.h"

#include <cmath>

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;
using implicit::testing::MatMul;
using implicit::testing::MatVec;
using implicit::testing::RandomMatrix;
using Mlp = implicit::MlpBlockMap<double>;

namespace {

Mlp::Options MlpOptions(implicit::BlockActivation activation, Index input_dim = 3) {
  Mlp::Options o;
  o.state_dim = 5;
  o.hidden_dim = 7;
  o.input_dim = input_dim;
  o.activation = activation;
  o.init_lipschitz = 0.6;
  o.seed = 3;
  return o;
}

// The same MLP block as a templated functor, parameters in MlpBlockMap's layout.
struct MlpFunctor {
  Index n, h, p;
  bool relu;
  template <typename T>
  void operator()(const Vector<T>& z, const Vector<T>& x, const Vector<T>& theta,
                  Vector<T>* out) const {
    using std::tanh;
    Index off = 0;
    Eigen::Map<const Matrix<T>> W1(theta.data(), h, n);
    off += h * n;
    Eigen::Map<const Matrix<T>> U(theta.data() + off, h, p);
    off += h * p;
    Eigen::Map<const Vector<T>> b1(theta.data() + off, h);
    off += h;
    Eigen::Map<const Matrix<T>> W2(theta.data() + off, n, h);
    off += n * h;
    Eigen::Map<const Vector<T>> b2(theta.data() + off, n);
    Vector<T> a = MatVec(W1, z) + b1;
    if (p > 0) a += MatVec(U, x);
    for (Index i = 0; i < h; ++i) a(i) = relu ? (a(i) > T(0) ? a(i) : T(0)) : tanh(a(i));
    *out = MatVec(W2, a) + b2;
  }
};

// A small transformer-style block on N tokens of dimension D (token-major):
// h = z + x; a_C = sum_B softmax_B((Wq h_C).(Wk h_B)/sqrt(D)) Wv h_B;
// f_C = W2 tanh(W1 (a_C + x_C)). Parameters Wq, Wk, Wv, W1, W2 (D x D each).
struct AttentionBlock {
  Index N, D;
  template <typename T>
  void operator()(const Vector<T>& z, const Vector<T>& x, const Vector<T>& theta,
                  Vector<T>* out) const {
    using std::exp;
    using std::tanh;
    auto W = [&](int k) { return Eigen::Map<const Matrix<T>>(theta.data() + k * D * D, D, D); };
    Matrix<T> H(D, N), X(D, N);
    for (Index A = 0; A < N; ++A) {
      X.col(A) = x.segment(A * D, D);
      H.col(A) = z.segment(A * D, D) + X.col(A);
    }
    const Matrix<T> Q = MatMul(W(0), H), K = MatMul(W(1), H), V = MatMul(W(2), H);
    for (Index C = 0; C < N; ++C) {
      Vector<T> s = MatVec(K.transpose(), Q.col(C)) / T(std::sqrt(double(D)));
      T m = s(0);
      for (Index B = 1; B < N; ++B) if (s(B) > m) m = s(B);
      T total(0);
      for (Index B = 0; B < N; ++B) {
        s(B) = exp(s(B) - m);
        total += s(B);
      }
      Vector<T> a = MatVec(V, s) / total + X.col(C);
      a = MatVec(W(3), a);
      for (Index i = 0; i < D; ++i) a(i) = tanh(a(i));
      out->segment(C * D, D) = MatVec(W(4), a);
    }
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(mlp_block_products_match_finite_differences) {
  for (auto activation : {implicit::BlockActivation::kRelu, implicit::BlockActivation::kTanh}) {
    for (Index input_dim : {Index(3), Index(0)}) {
      Mlp block(MlpOptions(activation, input_dim));
      block.parameters()->Block("b1") = RandomMatrix<double>(7, 1, 4, 0.3);
      const Matrix<double> x = RandomMatrix<double>(input_dim, 4, 5);
      block.SetInput(x);
      const Matrix<double> z = RandomMatrix<double>(5, 4, 6);
      implicit::testing::CheckMapFiniteDifferences(
          block, z, 1e-7, "mlp block", block.parameters(),
          [&](const Matrix<double>& xi) { block.SetInput(xi); }, x, 1e-6);
    }
  }
}

BOOST_AUTO_TEST_CASE(explicit_block_map_equals_the_closed_form_mlp) {
  for (auto activation : {implicit::BlockActivation::kRelu, implicit::BlockActivation::kTanh}) {
    Mlp block(MlpOptions(activation));
    implicit::ExplicitBlockMap<MlpFunctor, double> generic(
        MlpFunctor{5, 7, 3, activation == implicit::BlockActivation::kRelu}, 5, 3,
        *block.parameters());
    const Matrix<double> x = RandomMatrix<double>(3, 4, 7);
    block.SetInput(x);
    generic.SetInput(x);
    const Matrix<double> z = RandomMatrix<double>(5, 4, 8), v = RandomMatrix<double>(5, 4, 9);
    Matrix<double> a(5, 4), b(5, 4);
    block.Evaluate(z, a);
    generic.Evaluate(z, b);
    BOOST_TEST((a - b).norm() <= 1e-13);
    block.JacobianVectorProduct(z, v, a);
    generic.JacobianVectorProduct(z, v, b);
    BOOST_TEST((a - b).norm() <= 1e-13);
    block.VectorJacobianProduct(z, v, a);
    generic.VectorJacobianProduct(z, v, b);
    BOOST_TEST((a - b).norm() <= 1e-13);
    Vector<double> pa(block.num_parameters()), pb(block.num_parameters());
    block.ParameterVectorJacobianProduct(z, v, pa);
    generic.ParameterVectorJacobianProduct(z, v, pb);
    BOOST_TEST((pa - pb).norm() <= 1e-12);
    Matrix<double> ia(3, 4), ib(3, 4);
    block.InputVectorJacobianProduct(z, v, ia);
    generic.InputVectorJacobianProduct(z, v, ib);
    BOOST_TEST((ia - ib).norm() <= 1e-13);
  }
}

// Linearize(z): the ExplicitBlockMap's dense per-sample Jacobians and the
// default linearisation (MlpBlockMap) give the map's own products at z, and
// the dense Jacobian's products match central differences of f; they keep z
// (a later change of the caller's z does not move them); wrong shapes throw.
BOOST_AUTO_TEST_CASE(linearizations_give_the_products_at_their_point) {
  Mlp block(MlpOptions(implicit::BlockActivation::kTanh));
  implicit::ExplicitBlockMap<MlpFunctor, double> generic(MlpFunctor{5, 7, 3, false}, 5, 3, *block.parameters());
  const Matrix<double> x = RandomMatrix<double>(3, 4, 21);
  block.SetInput(x);
  generic.SetInput(x);
  Matrix<double> z = RandomMatrix<double>(5, 4, 22);
  const Matrix<double> z0 = z, v = RandomMatrix<double>(5, 4, 23), u = RandomMatrix<double>(5, 4, 24);
  const implicit::FixedPointMap<double>* maps[] = {&block, &generic};
  for (const implicit::FixedPointMap<double>* map : maps) {
    const auto jacobian = map->Linearize(z);
    z.setZero();
    Matrix<double> expected(5, 4), got(5, 4);
    map->JacobianVectorProduct(z0, v, expected);
    jacobian->JacobianVectorProduct(v, got);
    BOOST_TEST((got - expected).norm() <= 1e-13 * (1 + expected.norm()));
    map->VectorJacobianProduct(z0, u, expected);
    jacobian->VectorJacobianProduct(u, got);
    BOOST_TEST((got - expected).norm() <= 1e-13 * (1 + expected.norm()));
    // Central differences of f along v.
    const double h = 1e-6;
    Matrix<double> fp(5, 4), fm(5, 4);
    map->Evaluate(z0 + h * v, fp);
    map->Evaluate(z0 - h * v, fm);
    jacobian->JacobianVectorProduct(v, got);
    BOOST_TEST(((fp - fm) / (2 * h) - got).norm() <= 1e-7);
    z = z0;
  }
  const auto dense = generic.Linearize(z0);
  Matrix<double> wrong(5, 3), out(5, 3);
  BOOST_CHECK_THROW(dense->JacobianVectorProduct(wrong, out), std::invalid_argument);
}

// The input is per sample, so a block of samples is evaluated with their
// inputs (the solvers' active set); without an input any subset is a batch.
BOOST_AUTO_TEST_CASE(mlp_block_evaluates_blocks_of_samples_with_their_inputs) {
  for (Index input_dim : {Index(3), Index(0)}) {
    BOOST_TEST_CONTEXT("input_dim " << input_dim) {
      Mlp block(MlpOptions(implicit::BlockActivation::kTanh, input_dim));
      block.SetInput(RandomMatrix<double>(input_dim, 6, 31));
      implicit::testing::CheckColumnEvaluation<double>(block, RandomMatrix<double>(5, 6, 32), 1e-14);
      BOOST_TEST(block.SupportsSubsets() == (input_dim == 0));
    }
  }
}

BOOST_AUTO_TEST_CASE(mlp_block_is_a_contraction_and_its_fixed_point_is_found) {
  Mlp block(MlpOptions(implicit::BlockActivation::kRelu));
  BOOST_TEST(block.LipschitzBound() == 0.6, boost::test_tools::tolerance(1e-10));
  block.SetInput(RandomMatrix<double>(3, 6, 10));
  Matrix<double> z = Matrix<double>::Zero(5, 6), fz(5, 6);
  implicit::PicardSolver<double>::Options options;
  options.absolute_tolerance = 1e-12;
  const implicit::Summary summary = implicit::PicardSolver<double>(options).Solve(block, z);
  BOOST_TEST(summary.IsConverged());
  block.Evaluate(z, fz);
  BOOST_TEST((fz - z).norm() <= 1e-11);
  BOOST_CHECK_THROW(block.SetInput(Matrix<double>(2, 6)), std::invalid_argument);
  Mlp::Options bad = MlpOptions(implicit::BlockActivation::kRelu);
  bad.hidden_dim = 0;
  try {
    Mlp m(bad);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("hidden_dim") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(transformer_style_block_is_an_implicit_layer) {
  const Index N = 3, D = 4, B = 2;
  implicit::ParameterSet<double> params;
  for (const char* name : {"Wq", "Wk", "Wv", "W1", "W2"}) params.Add(name, D, D);
  params.values() = RandomMatrix<double>(params.size(), 1, 11, 0.3);
  implicit::ExplicitBlockMap<AttentionBlock, double> block(AttentionBlock{N, D}, N * D, N * D,
                                                           params);
  const Matrix<double> x = RandomMatrix<double>(N * D, B, 12);
  block.SetInput(x);
  implicit::testing::CheckMapFiniteDifferences(
      block, RandomMatrix<double>(N * D, B, 13), 1e-7, "explicit block", block.parameters(),
      [&](const Matrix<double>& xi) { block.SetInput(xi); }, x, 1e-6);
  Matrix<double> z = Matrix<double>::Zero(N * D, B), fz(N * D, B);
  implicit::AndersonSolver<double>::Options options;
  options.absolute_tolerance = 1e-12;
  const implicit::Summary summary = implicit::AndersonSolver<double>(options).Solve(block, z);
  BOOST_TEST(summary.IsConverged());
  block.Evaluate(z, fz);
  BOOST_TEST((fz - z).norm() <= 1e-10);
}

BOOST_AUTO_TEST_CASE(float_block_agrees_with_double) {
  Mlp block(MlpOptions(implicit::BlockActivation::kTanh));
  Mlp::Options of = MlpOptions(implicit::BlockActivation::kTanh);
  implicit::MlpBlockMap<float> fblock(of);
  fblock.parameters()->values() = block.parameters()->values().cast<float>();
  const Matrix<double> x = RandomMatrix<double>(3, 4, 14), z = RandomMatrix<double>(5, 4, 15);
  block.SetInput(x);
  fblock.SetInput(x.cast<float>());
  Matrix<double> a(5, 4);
  Matrix<float> b(5, 4);
  block.VectorJacobianProduct(z, z, a);
  fblock.VectorJacobianProduct(z.cast<float>(), z.cast<float>(), b);
  BOOST_TEST((a - b.cast<double>()).norm() <= 1e-5 * (1 + a.norm()));
}

// Regression of targets from inputs through the equilibrium, trained with the
// exact implicit gradient (checked against finite differences of the loss).
template <typename MapT>
void TrainAndCheck(MapT& map, const Matrix<double>& x, const Matrix<double>& target,
                   double learning_rate, int steps) {
  implicit::PicardSolver<double>::Options options;
  options.absolute_tolerance = 1e-12;
  options.max_iterations = 500;
  implicit::PicardSolver<double> solver(options);
  implicit::ImplicitLayer<double> layer(map, solver);
  map.SetInput(x);
  auto loss_at = [&](Matrix<double>* grad) {
    Matrix<double> z = Matrix<double>::Zero(target.rows(), target.cols());
    BOOST_REQUIRE(layer.Forward(z).IsConverged());
    if (grad) *grad = (z - target) / double(target.cols());
    return 0.5 * (z - target).squaredNorm() / double(target.cols());
  };
  // The implicit gradient equals the finite-difference gradient of the loss.
  Matrix<double> dldz;
  loss_at(&dldz);
  implicit::BackwardResult<double> g = layer.Backward(dldz);
  BOOST_REQUIRE(g.ok());
  Vector<double>& theta = map.parameters()->values();
  for (Index k = 0; k < theta.size(); k += 7) {
    const double saved = theta(k), h = 1e-6;
    theta(k) = saved + h;
    const double lp = loss_at(nullptr);
    theta(k) = saved - h;
    const double lm = loss_at(nullptr);
    theta(k) = saved;
    BOOST_TEST(std::abs(g.parameter_gradient(k) - (lp - lm) / (2 * h)) <= 1e-7);
  }
  // Plain gradient descent decreases the loss.
  const double initial = loss_at(nullptr);
  double loss = initial;
  for (int step = 0; step < steps; ++step) {
    loss = loss_at(&dldz);
    g = layer.Backward(dldz);
    BOOST_REQUIRE(g.ok());
    theta -= learning_rate * g.parameter_gradient;
  }
  loss = loss_at(nullptr);
  BOOST_TEST_MESSAGE("loss " << initial << " -> " << loss);
  BOOST_TEST(loss < 0.5 * initial);
}

BOOST_AUTO_TEST_CASE(mlp_block_trains_through_implicit_differentiation) {
  Mlp block(MlpOptions(implicit::BlockActivation::kTanh));
  const Matrix<double> x = RandomMatrix<double>(3, 8, 16);
  const Matrix<double> target = RandomMatrix<double>(5, 3, 17, 0.5) * x;  // a linear target
  TrainAndCheck(block, x, target, 0.2, 150);
}

BOOST_AUTO_TEST_CASE(user_block_trains_through_implicit_differentiation) {
  const Index N = 3, D = 2, B = 4;
  implicit::ParameterSet<double> params;
  for (const char* name : {"Wq", "Wk", "Wv", "W1", "W2"}) params.Add(name, D, D);
  params.values() = RandomMatrix<double>(params.size(), 1, 18, 0.3);
  implicit::ExplicitBlockMap<AttentionBlock, double> block(AttentionBlock{N, D}, N * D, N * D,
                                                           params);
  const Matrix<double> x = RandomMatrix<double>(N * D, B, 19);
  const Matrix<double> target = 0.3 * x;
  TrainAndCheck(block, x, target, 0.3, 100);
}
