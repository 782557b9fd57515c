// Energy Transformer (energy_transformer.h): the closed-form gradient, Hessian-
// vector product and parameter derivatives agree with automatic derivatives of
// the energy written as a plain templated function and with finite
// differences; the descent direction is dE/dg; the energy never increases
// along its dynamics; masked-token (clamped) completion; the one-pass
// evaluations and subset evaluation.
#define BOOST_TEST_MODULE energy_transformer
#include <boost/test/unit_test.hpp>

#include <implicit/core/autodiff_energy.h>
#include <implicit/core/energy_maps.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/energy_transformer.h>
#include <implicit/solvers/anderson.h>
#include <implicit/solvers/gradient_flow.h>
#include <implicit/solvers/picard.h>

#include "support/dual_products.h"
#include "support/energy_checks.h"
#include "support/fused_energy_checks.h"
#include "support/test_problems.h"

#include <cmath>
#include <tuple>
#include <utility>

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;
using implicit::testing::MatMul;
using implicit::testing::MatVec;
using implicit::testing::RandomMatrix;
using Et = implicit::EnergyTransformer<double>;
using Memory = implicit::EnergyTransformerMemory;

namespace {

// The ET energy of one sample, literally as defined (token A = x[A*D, A*D+D)).
// forces_only: the state is G itself and the result is F(G) = E_ATT + E_HN.
struct EtFunctor {
  Index N, D, H, Y, M;
  bool relu;
  double beta, memory_beta, eps, gamma0, delta0;
  bool exclude_self, learn_ln, forces_only = false;

  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    using std::exp;
    using std::log;
    using std::sqrt;
    Index off = 0;
    Matrix<T> WK, WQ, Xi;
    if (H > 0) {
      WK = Eigen::Map<const Matrix<T>>(theta.data(), H * Y, D);
      WQ = Eigen::Map<const Matrix<T>>(theta.data() + H * Y * D, H * Y, D);
      off += 2 * H * Y * D;
    }
    if (M > 0) {
      Xi = Eigen::Map<const Matrix<T>>(theta.data() + off, D, M);
      off += D * M;
    }
    const T gamma = learn_ln ? theta(off) : T(gamma0);
    const T delta = learn_ln ? theta(off + 1) : T(delta0);
    Matrix<T> G(D, N);
    T E(0);
    for (Index A = 0; A < N; ++A) {
      const Vector<T> xa = x.segment(A * D, D);
      if (forces_only) {
        G.col(A) = xa;
        continue;
      }
      T mean(0);
      for (Index i = 0; i < D; ++i) mean += xa(i);
      mean /= T(D);
      T var(0);
      for (Index i = 0; i < D; ++i) var += (xa(i) - mean) * (xa(i) - mean);
      var /= T(D);
      const T s = sqrt(var + T(eps));
      T sum(0), gx(0);
      for (Index i = 0; i < D; ++i) {
        G(i, A) = gamma * (xa(i) - mean) / s + delta;
        gx += G(i, A) * xa(i);
        sum += xa(i);
      }
      E += gx - (T(D) * gamma * s + delta * sum);
    }
    for (Index h = 0; h < H; ++h) {
      const Matrix<T> K = MatMul(WK.middleRows(h * Y, Y), G);
      const Matrix<T> Q = MatMul(WQ.middleRows(h * Y, Y), G);
      for (Index C = 0; C < N; ++C) {
        std::vector<T> a;
        for (Index B = 0; B < N; ++B) {
          if (exclude_self && B == C) continue;
          a.push_back(T(beta) * K.col(B).dot(Q.col(C)));
        }
        T m = a[0];
        for (const T& ai : a) if (ai > m) m = ai;
        T acc(0);
        for (const T& ai : a) acc += exp(ai - m);
        E -= (m + log(acc)) / T(beta);
      }
    }
    for (Index B = 0; B < N && M > 0; ++B) {
      Vector<T> t = MatVec(Xi.transpose(), G.col(B));
      if (relu) {
        for (Index mu = 0; mu < M; ++mu) if (t(mu) > T(0)) E -= T(0.5) * t(mu) * t(mu);
      } else {
        t *= T(memory_beta);
        T m = t(0);
        for (Index mu = 1; mu < M; ++mu) if (t(mu) > m) m = t(mu);
        T acc(0);
        for (Index mu = 0; mu < M; ++mu) acc += exp(t(mu) - m);
        E -= (m + log(acc)) / T(memory_beta);
      }
    }
    return E;
  }
};

Et::Options MakeOptions(Index N, Index D, Index H, Index Y, Index M, Memory memory,
                        bool exclude_self, bool learn_ln) {
  Et::Options o;
  o.num_tokens = N;
  o.token_dim = D;
  o.num_heads = H;
  o.head_dim = Y;
  o.num_memories = M;
  o.memory = memory;
  o.memory_beta = 1.3;
  o.gamma = 1.2;
  o.delta = 0.3;
  o.eps = 1e-3;
  o.exclude_self = exclude_self;
  o.learnable_layer_norm = learn_ln;
  return o;
}

EtFunctor FunctorFor(const Et& et) {
  const Et::Options& o = et.options();
  return EtFunctor{o.num_tokens, o.token_dim, o.num_heads, o.head_dim, o.num_memories,
                   o.memory == Memory::kRelu, et.beta(), o.memory_beta, o.eps, o.gamma, o.delta,
                   o.exclude_self, o.learnable_layer_norm};
}

struct Config {
  Index H, M;
  Memory memory;
  bool exclude_self, learn_ln;
};

}  // namespace

BOOST_AUTO_TEST_CASE(closed_form_derivatives_match_autodiff_and_finite_differences) {
  const Index N = 4, D = 5, Y = 3, B = 2;
  const Config configs[] = {
      {2, 6, Memory::kRelu, true, true},     {2, 6, Memory::kSoftmax, false, true},
      {1, 0, Memory::kRelu, true, false},    {0, 5, Memory::kSoftmax, true, false},
      {3, 4, Memory::kRelu, false, false},
  };
  for (const Config& c : configs) {
    BOOST_TEST_CONTEXT("heads " << c.H << " memories " << c.M << " softmax memory "
                                << (c.memory == Memory::kSoftmax) << " exclude_self "
                                << c.exclude_self << " learnable LN " << c.learn_ln) {
      Et et(MakeOptions(N, D, c.H, Y, c.M, c.memory, c.exclude_self, c.learn_ln));
      et.Initialize(3, 0.7);
      const Matrix<double> x = RandomMatrix<double>(N * D, B, 4, 1.5);
      implicit::AutoDiffEnergy<EtFunctor, double> reference(FunctorFor(et), N * D,
                                                             *et.parameters());
      implicit::testing::CheckEnergyAgainstReference(et, reference, x, 1e-10);
      implicit::testing::CheckEnergyFiniteDifferences(et, x, 2e-6);
    }
  }
}

BOOST_AUTO_TEST_CASE(descent_direction_is_x_plus_the_force_gradient_in_g) {
  const Index N = 5, D = 4, Y = 2, B = 3;
  for (Memory memory : {Memory::kRelu, Memory::kSoftmax}) {
    Et et(MakeOptions(N, D, 2, Y, 7, memory, true, false));
    const Matrix<double> x = RandomMatrix<double>(N * D, B, 5);
    Matrix<double> g(N * D, B), d(N * D, B), grad(N * D, B), dF(N * D, B);
    et.LayerNorm(x, g);
    et.DescentDirection(x, d);
    EtFunctor f = FunctorFor(et);
    f.forces_only = true;
    implicit::AutoDiffEnergy<EtFunctor, double> forces(f, N * D, *et.parameters());
    forces.Gradient(g, dF);  // dF/dG by automatic differentiation
    BOOST_TEST((d - (x + dF)).norm() <= 1e-12 * (1 + d.norm()));
    // dE/dx = (dg/dx)^T dE/dg, with dg/dx from finite differences of LayerNorm.
    et.Gradient(x, grad);
    const double h = 1e-6;
    Matrix<double> jt(N * D, B);
    for (Index i = 0; i < N * D; ++i) {
      Matrix<double> xp = x, xm = x, gp(N * D, B), gm(N * D, B);
      xp.row(i).array() += h;
      xm.row(i).array() -= h;
      et.LayerNorm(xp, gp);
      et.LayerNorm(xm, gm);
      jt.row(i) = (((gp - gm) / (2 * h)).array() * d.array()).colwise().sum();
    }
    BOOST_TEST((grad - jt).norm() <= 1e-7 * (1 + grad.norm()));
    // <dE/dx, dE/dg> >= 0: dE/dg is a descent direction.
    BOOST_TEST(((grad.array() * d.array()).colwise().sum() >= 0).all());
  }
}

BOOST_AUTO_TEST_CASE(energy_never_increases_along_the_dynamics) {
  const Index N = 6, D = 8, B = 4;
  for (Memory memory : {Memory::kRelu, Memory::kSoftmax}) {
    for (bool exclude_self : {true, false}) {
      Et et(MakeOptions(N, D, 3, 4, 10, memory, exclude_self, false));
      et.Initialize(7, 1.0);
      Matrix<double> x = RandomMatrix<double>(N * D, B, 8, 2.0), d(N * D, B);
      Vector<double> e(B), e_next(B), e0(B);
      et.Value(x, e);
      e0 = e;
      bool monotone = true;
      for (int t = 0; t < 200; ++t) {
        et.DescentDirection(x, d);
        x -= 0.02 * d;
        et.Value(x, e_next);
        monotone = monotone && (e_next.array() <= e.array() + 1e-12).all();
        e = e_next;
      }
      BOOST_TEST(monotone);
      BOOST_TEST((e.array() < e0.array()).all());
      BOOST_TEST(x.allFinite());
    }
  }
}

BOOST_AUTO_TEST_CASE(gradient_step_solver_reaches_a_stationary_point) {
  const Index N = 4, D = 6, B = 2;
  // With a small eps the LayerNorm scale direction is nearly flat (E depends
  // on a token's scale only through eps), so the flow creeps; eps = 1 makes
  // the stationary point well conditioned.
  Et::Options o = MakeOptions(N, D, 2, 3, 8, Memory::kSoftmax, true, false);
  o.eps = 1.0;
  Et et(o);
  et.Initialize(9, 0.5);
  implicit::GradientStepMap<double> map(et, 0.5);
  implicit::PicardSolver<double>::Options options;
  options.max_iterations = 10000;
  options.absolute_tolerance = 1e-9;
  options.max_stall_iterations = 0;
  Matrix<double> x = RandomMatrix<double>(N * D, B, 10);
  const implicit::Summary summary = implicit::PicardSolver<double>(options).Solve(map, x);
  BOOST_TEST(summary.IsConverged());
  Matrix<double> grad(N * D, B);
  et.Gradient(x, grad);
  BOOST_TEST(grad.norm() <= 1e-7);
}

BOOST_AUTO_TEST_CASE(clamped_tokens_stay_fixed_and_derivatives_are_exact) {
  const Index N = 5, D = 4, B = 2;
  Et et(MakeOptions(N, D, 2, 3, 6, Memory::kRelu, true, true));
  et.Initialize(11, 0.8);
  Matrix<double> token_free = Matrix<double>::Zero(N, B);
  token_free(1, 0) = token_free(3, 0) = 1;  // sample 0: tokens 1, 3 masked (free)
  token_free(0, 1) = 1;                     // sample 1: token 0
  const Matrix<double> mask = implicit::TokenMask<double>(token_free, D);
  const Matrix<double> image = RandomMatrix<double>(N * D, B, 12);
  implicit::ClampedEnergy<double> completion(et);
  completion.SetClamp(mask, image);
  BOOST_TEST(completion.input_dimension() == N * D);

  // Derivatives, at a state whose clamped part is off its values too.
  const Matrix<double> x = image + RandomMatrix<double>(N * D, B, 13, 0.5);
  implicit::testing::CheckEnergyFiniteDifferences(completion, x, 2e-6);
  const Matrix<double> u = RandomMatrix<double>(N * D, B, 14);
  Matrix<double> ivjp(N * D, B), fd(N * D, B), gp(N * D, B), gm(N * D, B);
  completion.InputVectorJacobianProduct(x, u, ivjp);
  const double h = 1e-6;
  for (Index i = 0; i < N * D; ++i) {
    Matrix<double> cp = image, cm = image;
    cp.row(i).array() += h;
    cm.row(i).array() -= h;
    completion.SetInput(cp);
    completion.Gradient(x, gp);
    completion.SetInput(cm);
    completion.Gradient(x, gm);
    fd.row(i) = ((gp - gm).array() * u.array()).colwise().sum() / (2 * h);
  }
  completion.SetInput(image);
  BOOST_TEST((ivjp - fd).norm() <= 1e-6 * (1 + fd.norm()));

  // Dynamics from the image: clamped tokens never move, energy never rises,
  // free tokens do move.
  Matrix<double> z = image, d(N * D, B);
  Vector<double> e(B), e_next(B);
  completion.Value(z, e);
  for (int t = 0; t < 100; ++t) {
    completion.DescentDirection(z, d);
    z -= 0.05 * d;
    completion.Value(z, e_next);
    BOOST_TEST((e_next.array() <= e.array() + 1e-12).all());
    e = e_next;
  }
  BOOST_TEST(((1 - mask.array()) * (z - image).array()).abs().maxCoeff() == 0.0);
  BOOST_TEST((mask.array() * (z - image).array()).abs().maxCoeff() > 1e-3);
  // The clamped energy at such a state equals the base energy.
  Vector<double> base(B);
  et.Value(z, base);
  completion.Value(z, e);
  BOOST_TEST((base - e).norm() <= 1e-12);
  BOOST_CHECK_THROW(completion.SetClamp(0.5 * mask, image), std::invalid_argument);
  Matrix<double> wrong(N * D, B + 1);
  BOOST_CHECK_THROW(completion.Gradient(wrong, wrong), std::invalid_argument);
}

// The dynamics map's linearisation (the caches of each sample at one point)
// gives the products at that point, clamped or not: they match central
// differences of the map along v and <u, J v> = <J^T u, v>, and a later
// change of the caller's x does not move them; a batch of another size is
// refused.
BOOST_AUTO_TEST_CASE(dynamics_map_linearization_gives_the_products_at_its_point) {
  const Index N = 4, D = 3, B = 3;
  Et et(MakeOptions(N, D, 2, 2, 5, Memory::kSoftmax, true, true));
  et.Initialize(40, 0.6);
  implicit::EnergyTransformerMap<double> map(et, 0.7);
  const Matrix<double> x0 = RandomMatrix<double>(N * D, B, 41), v = RandomMatrix<double>(N * D, B, 42),
                       u = RandomMatrix<double>(N * D, B, 43);
  Matrix<double> token_free = Matrix<double>::Zero(N, B);
  token_free(1, 0) = token_free(0, 1) = token_free(3, 1) = token_free(2, 2) = 1;
  for (bool clamp : {false, true}) {
    BOOST_TEST_CONTEXT("clamp " << clamp) {
      if (clamp) map.SetClamp(implicit::TokenMask<double>(token_free, D), RandomMatrix<double>(N * D, B, 44));
      Matrix<double> x = x0;
      const auto jacobian = map.Linearize(x);
      x.setZero();
      Matrix<double> jv(N * D, B), jtu(N * D, B), fp(N * D, B), fm(N * D, B);
      jacobian->JacobianVectorProduct(v, jv);
      jacobian->VectorJacobianProduct(u, jtu);
      const double h = 1e-6;
      map.Evaluate(x0 + h * v, fp);
      map.Evaluate(x0 - h * v, fm);
      BOOST_TEST(((fp - fm) / (2 * h) - jv).cwiseAbs().maxCoeff() <= 1e-7);
      BOOST_TEST(std::abs((u.array() * jv.array()).sum() - (jtu.array() * v.array()).sum()) <= 1e-10);
      Matrix<double> expected(N * D, B);
      map.JacobianVectorProduct(x0, v, expected);
      BOOST_TEST((expected - jv).cwiseAbs().maxCoeff() <= 1e-14);
      Matrix<double> wrong(N * D, B + 1), out(N * D, B + 1);
      BOOST_CHECK_THROW(jacobian->JacobianVectorProduct(wrong, out), std::invalid_argument);
    }
  }
}

// The columns are shared among Eigen's threads (ForEachColumn): every value,
// gradient, product and linearisation is bitwise the same on 1 and 3 threads.
BOOST_AUTO_TEST_CASE(results_do_not_depend_on_the_thread_count) {
  const Index N = 5, D = 4, B = 7;
  Et et(MakeOptions(N, D, 2, 2, 6, Memory::kSoftmax, true, true));
  et.Initialize(50, 0.6);
  implicit::EnergyTransformerMap<double> map(et, 0.7);
  const Matrix<double> x = RandomMatrix<double>(N * D, B, 51), v = RandomMatrix<double>(N * D, B, 52);
  const int saved = Eigen::nbThreads();
  std::vector<std::vector<Matrix<double>>> runs;
  for (int threads : {1, 3}) {
    Eigen::setNbThreads(threads);
    std::vector<Matrix<double>> r;
    Matrix<double> out(N * D, B), values(B, 1), grad(N * D, B);
    et.Value(x, values.col(0));
    r.push_back(values);
    et.GradientAndValue(x, grad, values.col(0));
    r.push_back(grad);
    r.push_back(values);
    et.Gradient(x, out);
    r.push_back(out);
    et.HessianVectorProduct(x, v, out);
    r.push_back(out);
    map.Evaluate(x, out);
    r.push_back(out);
    et.DescentJacobianProduct(x, v, out);
    r.push_back(out);
    const auto jacobian = map.Linearize(x);
    jacobian->VectorJacobianProduct(v, out);
    r.push_back(out);
    runs.push_back(r);
  }
  Eigen::setNbThreads(saved);
  for (std::size_t k = 0; k < runs[0].size(); ++k) {
    BOOST_TEST((runs[0][k].array() == runs[1][k].array()).all(), "result " << k);
  }
}

BOOST_AUTO_TEST_CASE(dynamics_map_products_are_exact_and_its_fixed_points_are_stationary) {
  const Index N = 4, D = 3, B = 2;
  Et::Options o = MakeOptions(N, D, 2, 2, 5, Memory::kRelu, true, true);
  Et et(o);
  et.Initialize(30, 0.6);
  implicit::EnergyTransformerMap<double> map(et, 0.7);
  const Matrix<double> x = RandomMatrix<double>(N * D, B, 31);
  implicit::testing::CheckMapFiniteDifferences(map, x, 1e-7, "no clamp", map.parameters(), nullptr,
                                               Matrix<double>(), 1e-6);
  // With a clamp: products, parameter and input VJPs.
  Matrix<double> token_free = Matrix<double>::Zero(N, B);
  token_free(2, 0) = token_free(0, 1) = token_free(3, 1) = 1;
  const Matrix<double> mask = implicit::TokenMask<double>(token_free, D);
  const Matrix<double> image = RandomMatrix<double>(N * D, B, 32);
  map.SetClamp(mask, image);
  BOOST_TEST(map.input_dimension() == N * D);
  implicit::testing::CheckMapFiniteDifferences(
      map, x, 1e-7, "clamped", map.parameters(), [&](const Matrix<double>& c) { map.SetInput(c); },
      image, 1e-6);
  // A batch that is not the clamp's (more samples than its mask has columns)
  // is refused by every product, before the mask is applied to it (found by
  // test/fuzz/python_arrays.py under valgrind: the mask was read past its end).
  const Matrix<double> other = RandomMatrix<double>(N * D, B + 3, 33);
  Matrix<double> out(N * D, B + 3);
  Vector<double> parameter_out(map.num_parameters());
  BOOST_CHECK_THROW(map.JacobianVectorProduct(other, other, out), std::invalid_argument);
  BOOST_CHECK_THROW(map.VectorJacobianProduct(other, other, out), std::invalid_argument);
  BOOST_CHECK_THROW(map.ParameterVectorJacobianProduct(other, other, parameter_out), std::invalid_argument);
  BOOST_CHECK_THROW(map.InputVectorJacobianProduct(other, other, out), std::invalid_argument);
  BOOST_CHECK_THROW(map.ParameterVectorJacobianProduct(x, other, parameter_out), std::invalid_argument);
  // Solve: the clamped tokens equal the image, dE/dg vanishes on the free
  // ones, and they are stationary points of the clamped energy.
  o.eps = 1.0;
  Et well(o);
  well.Initialize(30, 0.6);
  implicit::EnergyTransformerMap<double> wmap(well, 0.5);
  wmap.SetClamp(mask, image);
  Matrix<double> z = image, d(N * D, B), g(N * D, B);
  implicit::PicardSolver<double>::Options options;  // ReLU memory: a non-smooth map
  options.absolute_tolerance = 1e-12;
  options.max_iterations = 2000;
  BOOST_TEST(implicit::PicardSolver<double>(options).Solve(wmap, z).IsConverged());
  BOOST_TEST(((1 - mask.array()) * (z - image).array()).abs().maxCoeff() == 0.0);
  well.DescentDirection(z, d);
  BOOST_TEST((mask.array() * d.array()).matrix().norm() <= 1e-10);
  wmap.energy()->Gradient(z, g);
  BOOST_TEST(g.norm() <= 1e-10);
  // The gradient-flow solver follows the same dynamics through energy(), with
  // the energy checked to never increase, and reaches the same point.
  implicit::GradientFlowSolver<double>::Options flow_options;
  flow_options.step_size = 0.5;
  flow_options.check_monotone = true;
  flow_options.absolute_tolerance = 1e-12;
  flow_options.max_iterations = 2000;
  Matrix<double> zf = image;
  BOOST_TEST(implicit::GradientFlowSolver<double>(flow_options).Solve(wmap, zf).IsConverged());
  BOOST_TEST((zf - z).norm() <= 1e-9);
}

BOOST_AUTO_TEST_CASE(robust_to_scale_temperature_and_float) {
  const Index N = 4, D = 6, B = 3;
  Et::Options o = MakeOptions(N, D, 2, 3, 5, Memory::kSoftmax, true, true);
  const Matrix<double> x = RandomMatrix<double>(N * D, B, 15);
  for (double beta : {1e-3, 1e3}) {
    for (double memory_beta : {1e-3, 1e3}) {
      o.beta = beta;
      o.memory_beta = memory_beta;
      Et et(o);
      Matrix<double> g(N * D, B), hv(N * D, B);
      Vector<double> e(B), pv(et.num_parameters());
      et.Value(1e4 * x, e);
      et.Gradient(1e4 * x, g);
      BOOST_TEST(e.allFinite());
      BOOST_TEST(g.allFinite());
      et.Value(x, e);
      et.Gradient(x, g);
      et.HessianVectorProduct(x, x, hv);
      et.ParameterVectorJacobianProduct(x, x, pv);
      BOOST_TEST(e.allFinite());
      BOOST_TEST(g.allFinite());
      BOOST_TEST(hv.allFinite());
      BOOST_TEST(pv.allFinite());
      if (beta == 1e-3 && memory_beta == 1e-3) {
        implicit::testing::CheckEnergyFiniteDifferences(et, x, 1e-5);
      }
    }
  }
  // float32 against double.
  o.beta = 0;
  o.memory_beta = 1.0;
  Et ed(o);
  o.learnable_layer_norm = true;
  implicit::EnergyTransformer<float> ef(o);
  ef.parameters()->values() = ed.parameters()->values().cast<float>();
  Matrix<double> gd(N * D, B), hd(N * D, B);
  Matrix<float> gf(N * D, B), hf(N * D, B);
  ed.Gradient(x, gd);
  ef.Gradient(x.cast<float>(), gf);
  ed.HessianVectorProduct(x, x, hd);
  ef.HessianVectorProduct(x.cast<float>(), x.cast<float>(), hf);
  BOOST_TEST((gf.cast<double>() - gd).norm() <= 1e-5 * (1 + gd.norm()));
  BOOST_TEST((hf.cast<double>() - hd).norm() <= 1e-4 * (1 + hd.norm()));
}

BOOST_AUTO_TEST_CASE(invalid_options_name_the_field) {
  Et::Options o = MakeOptions(1, 4, 1, 2, 0, Memory::kRelu, true, false);
  try {
    Et et(o);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("num_tokens") != std::string::npos);
  }
  o = MakeOptions(3, 4, 1, 2, 0, Memory::kRelu, true, false);
  o.gamma = -1;
  BOOST_CHECK_THROW(Et{o}, std::invalid_argument);
  o.gamma = 1;
  o.head_dim = 0;
  BOOST_CHECK_THROW(Et{o}, std::invalid_argument);
  o.head_dim = 2;
  Et et(o);
  Matrix<double> wrong(11, 2), g(11, 2);
  try {
    et.Gradient(wrong, g);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("11x2") != std::string::npos);
  }
}

// Masked-token completion trained through the equilibrium: each sample's
// tokens are copies of one random vector (plus noise); one token is masked and
// must be completed. Forward: the stationary point of the clamped ET energy
// (EnergyTransformerMap: zeros of dE/dg, Anderson-accelerated); backward:
// implicit differentiation (GMRES); plain gradient descent on every
// parameter (W_K, W_Q, Xi, gamma, delta).
BOOST_AUTO_TEST_CASE(masked_completion_trains_through_implicit_differentiation) {
  const Index N = 4, D = 3, B = 4;
  Et::Options o = MakeOptions(N, D, 1, 2, 4, Memory::kSoftmax, true, true);
  o.eps = 1.0;
  o.delta = 0.0;
  Et et(o);
  et.Initialize(23, 0.5);
  Matrix<double> truth(N * D, B), token_free = Matrix<double>::Zero(N, B);
  const Matrix<double> base = RandomMatrix<double>(D, B, 24);
  const Matrix<double> noise = RandomMatrix<double>(N * D, B, 25, 0.1);
  for (Index b = 0; b < B; ++b) {
    for (Index A = 0; A < N; ++A) truth.col(b).segment(A * D, D) = base.col(b);
    token_free(b % N, b) = 1;
  }
  truth += noise;
  const Matrix<double> mask = implicit::TokenMask<double>(token_free, D);
  const Matrix<double> visible = ((1 - mask.array()) * truth.array()).matrix();
  implicit::EnergyTransformerMap<double> map(et, 0.5);
  map.SetClamp(mask, visible);
  implicit::AndersonSolver<double>::Options options;
  options.absolute_tolerance = 1e-12;
  options.max_iterations = 2000;
  implicit::AndersonSolver<double> solver(options);
  implicit::ImplicitLayer<double> layer(map, solver);
  const double count = mask.sum();
  auto loss_at = [&](Matrix<double>* grad) {
    Matrix<double> z = visible;
    BOOST_REQUIRE(layer.Forward(z).IsConverged());
    const Matrix<double> err = (mask.array() * (z - truth).array()).matrix();
    if (grad) *grad = err / count;
    return 0.5 * err.squaredNorm() / count;
  };
  Matrix<double> dldz;
  loss_at(&dldz);
  implicit::BackwardResult<double> g = layer.Backward(dldz);
  BOOST_REQUIRE(g.ok());
  Vector<double>& theta = et.parameters()->values();
  for (Index k = 0; k < theta.size(); k += 3) {
    const double saved = theta(k), h = 1e-6;
    theta(k) = saved + h;
    const double lp = loss_at(nullptr);
    theta(k) = saved - h;
    const double lm = loss_at(nullptr);
    theta(k) = saved;
    BOOST_TEST(std::abs(g.parameter_gradient(k) - (lp - lm) / (2 * h)) <= 1e-6);
  }
  const double initial = loss_at(nullptr);
  for (int step = 0; step < 40; ++step) {
    loss_at(&dldz);
    g = layer.Backward(dldz);
    BOOST_REQUIRE(g.ok());
    theta -= 0.1 * g.parameter_gradient;
  }
  const double final_loss = loss_at(nullptr);
  BOOST_TEST_MESSAGE("loss " << initial << " -> " << final_loss);
  BOOST_TEST(final_loss < 0.5 * initial);
}

using OnePassScalars = std::tuple<float, double>;

// GradientAndValue / CccpUpdateAndValue / DescentDirectionAndValue (one pass
// per sample; the maps' EvaluateWithEnergy through them) agree with the
// separate calls, in float and double, for both memories and the clamped
// energy; the plain energy evaluates any subset of a batch like those
// columns, the clamped one (per-sample clamps) does not allow subsets, and the
// clamped map evaluates blocks of samples by their column indices.
BOOST_AUTO_TEST_CASE_TEMPLATE(one_pass_evaluations_and_subsets, S, OnePassScalars) {
  const double tol = sizeof(S) == 4 ? 2e-5 : 1e-12;
  const Index N = 4, D = 5, B = 3;
  for (const Config c : {Config{2, 6, Memory::kRelu, true, false},
                         Config{1, 4, Memory::kSoftmax, false, true},
                         Config{0, 3, Memory::kSoftmax, true, false}}) {
    BOOST_TEST_CONTEXT("H " << c.H << ", M " << c.M) {
      implicit::EnergyTransformer<S> et(MakeOptions(N, D, c.H, 3, c.M, c.memory, c.exclude_self,
                                                    c.learn_ln));
      et.Initialize(13, 0.7);
      const Matrix<S> x = RandomMatrix<S>(N * D, B, 14);
      implicit::testing::CheckOnePassEvaluations<S>(et, x, tol);
      BOOST_TEST(et.SupportsSubsets());
      implicit::testing::CheckSubsetEvaluation<S>(et, x, tol);
      Matrix<S> token_free = Matrix<S>::Zero(N, B);
      token_free(1, 0) = token_free(2, 1) = token_free(3, 2) = 1;
      implicit::ClampedEnergy<S> clamped(et);
      clamped.SetClamp(implicit::TokenMask<S>(token_free, D), RandomMatrix<S>(N * D, B, 15));
      implicit::testing::CheckOnePassEvaluations<S>(clamped, x, tol);
      BOOST_TEST(!clamped.SupportsSubsets());
      // The map with that clamp evaluates blocks of samples with their clamps.
      implicit::EnergyTransformerMap<S> map(et, S(0.5));
      BOOST_TEST(map.SupportsSubsets());
      map.SetClamp(implicit::TokenMask<S>(token_free, D), RandomMatrix<S>(N * D, B, 15));
      BOOST_TEST(!map.SupportsSubsets());
      implicit::testing::CheckColumnEvaluation<S>(map, x, tol);
      // The clamped energy's own column evaluations (used by maps over it).
      const std::vector<Index> cols = {0, 2};
      Matrix<S> xs(N * D, 2), d(N * D, B), ds(N * D, 2);
      Vector<S> e(B), es(2);
      xs << x.col(0), x.col(2);
      clamped.DescentDirection(x, d);
      clamped.DescentDirectionColumns(xs, cols, ds);
      clamped.Value(x, e);
      clamped.ValueColumns(xs, cols, es);
      BOOST_TEST(implicit::testing::AgreeEntrywise(ds.col(0), d.col(0), tol));
      BOOST_TEST(implicit::testing::AgreeEntrywise(ds.col(1), d.col(2), tol));
      BOOST_TEST(std::abs(es(0) - e(0)) <= tol * (1 + std::abs(e(0))));
      BOOST_TEST(std::abs(es(1) - e(2)) <= tol * (1 + std::abs(e(2))));
      Matrix<S> ds1(N * D, 2);
      Vector<S> es1(2);
      clamped.DescentDirectionColumnsAndValue(xs, cols, ds1, es1);  // both from one pass
      BOOST_TEST(implicit::testing::AgreeEntrywise(ds1, ds, tol));
      BOOST_TEST(implicit::testing::AgreeEntrywise(es1, es, tol));
    }
  }
}

// Every evaluation runs blocks of samples side by side (their projections one
// product per block; B / 16 samples a block, rounded up, and at most 512 token
// columns): B = 71 samples of N = 16 tokens make 14 blocks of 5 and one of 1,
// of N = 128 tokens 17 blocks of 4 (the cap) and one of 3. Every sample's direction,
// gradient, energy, Hessian and Jacobian products agree with the sample
// evaluated alone (a block of one), and the parameter products with the sum
// of the samples', in float and double, for both memories, with and without
// attention; a block that read another sample's tokens, energy, caches or
// clamp would not.
BOOST_AUTO_TEST_CASE_TEMPLATE(blocks_of_samples_agree_with_samples_one_at_a_time, S, OnePassScalars) {
  const double tol = sizeof(S) == 4 ? 2e-5 : 1e-12;
  const Index D = 4, B = 71;
  for (const auto& [N, c] : {std::pair{Index(16), Config{2, 6, Memory::kRelu, true, false}},
                             std::pair{Index(16), Config{1, 4, Memory::kSoftmax, false, true}},
                             std::pair{Index(16), Config{0, 3, Memory::kSoftmax, true, false}},
                             std::pair{Index(16), Config{2, 0, Memory::kRelu, true, true}},
                             std::pair{Index(128), Config{1, 4, Memory::kSoftmax, true, true}}}) {
    BOOST_TEST_CONTEXT("N " << N << ", H " << c.H << ", M " << c.M) {
      implicit::EnergyTransformer<S> et(MakeOptions(N, D, c.H, 3, c.M, c.memory, c.exclude_self, c.learn_ln));
      et.Initialize(21, 0.7);
      const Matrix<S> x = RandomMatrix<S>(N * D, B, 22, 1.5);
      Matrix<S> direction(N * D, B), grad(N * D, B), grad2(N * D, B);
      Vector<S> values(B), values2(B), values3(B);
      et.DescentDirectionAndValue(x, direction, values);
      et.GradientAndValue(x, grad, values2);
      et.Gradient(x, grad2);
      et.Value(x, values3);
      BOOST_TEST((grad2.array() == grad.array()).all());
      for (Index b = 0; b < B; ++b) {
        BOOST_TEST_CONTEXT("sample " << b) {
          const Matrix<S> xb = x.col(b);
          Matrix<S> d1(N * D, 1), g1(N * D, 1);
          Vector<S> e1(1), e2(1);
          et.DescentDirectionAndValue(xb, d1, e1);
          et.GradientAndValue(xb, g1, e2);
          BOOST_TEST(implicit::testing::AgreeEntrywise(direction.col(b), d1.col(0), tol));
          BOOST_TEST(implicit::testing::AgreeEntrywise(grad.col(b), g1.col(0), tol));
          for (const Vector<S>* v : {&values, &values2, &values3}) {
            BOOST_TEST(std::abs((*v)(b) - e1(0)) <= tol * (1 + std::abs(e1(0))));
          }
          BOOST_TEST(e2(0) == e1(0));
        }
      }
      // Second order: the products at x, at a kept linearisation, and the
      // parameter products, against samples one at a time.
      const Matrix<S> v = RandomMatrix<S>(N * D, B, 24);
      Matrix<S> hv(N * D, B), jv(N * D, B), jtv(N * D, B), jv_at(N * D, B), jtv_at(N * D, B);
      et.HessianVectorProduct(x, v, hv);
      et.DescentJacobianProduct(x, v, jv);
      et.DescentJacobianTransposeProduct(x, v, jtv);
      const auto point = et.LinearizeDescent(x);
      et.DescentJacobianProduct(*point, v, jv_at);
      et.DescentJacobianTransposeProduct(*point, v, jtv_at);
      BOOST_TEST((jv_at.array() == jv.array()).all());
      BOOST_TEST((jtv_at.array() == jtv.array()).all());
      const Index P = et.num_parameters();
      Vector<S> pv(P), dpv(P), pv_sum = Vector<S>::Zero(P), dpv_sum = Vector<S>::Zero(P), one(P);
      et.ParameterVectorJacobianProduct(x, v, pv);
      et.DescentParameterVectorJacobianProduct(x, v, dpv);
      for (Index b = 0; b < B; ++b) {
        BOOST_TEST_CONTEXT("second order, sample " << b) {
          const Matrix<S> xb = x.col(b), vb = v.col(b);
          Matrix<S> o(N * D, 1);
          et.HessianVectorProduct(xb, vb, o);
          BOOST_TEST(implicit::testing::AgreeEntrywise(hv.col(b), o.col(0), tol));
          et.DescentJacobianProduct(xb, vb, o);
          BOOST_TEST(implicit::testing::AgreeEntrywise(jv.col(b), o.col(0), tol));
          et.DescentJacobianTransposeProduct(xb, vb, o);
          BOOST_TEST(implicit::testing::AgreeEntrywise(jtv.col(b), o.col(0), tol));
          et.ParameterVectorJacobianProduct(xb, vb, one);
          pv_sum += one;
          et.DescentParameterVectorJacobianProduct(xb, vb, one);
          dpv_sum += one;
        }
      }
      BOOST_TEST(implicit::testing::AgreeEntrywise(pv, pv_sum, 10 * tol));
      BOOST_TEST(implicit::testing::AgreeEntrywise(dpv, dpv_sum, 10 * tol));
      // The dynamics map with a clamp on a few tokens per sample, the whole
      // batch against one sample at a time.
      Matrix<S> token_free = Matrix<S>::Zero(N, B);
      for (Index b = 0; b < B; ++b) token_free(b % N, b) = token_free((3 * b + 1) % N, b) = 1;
      const Matrix<S> input = RandomMatrix<S>(N * D, B, 23);
      implicit::EnergyTransformerMap<S> map(et, S(0.5));
      map.SetClamp(implicit::TokenMask<S>(token_free, D), input);
      Matrix<S> fx(N * D, B);
      map.Evaluate(x, fx);
      for (Index b = 0; b < B; b += 23) {
        implicit::EnergyTransformerMap<S> one(et, S(0.5));
        one.SetClamp(implicit::TokenMask<S>(Matrix<S>(token_free.col(b)), D), Matrix<S>(input.col(b)));
        Matrix<S> f1(N * D, 1);
        one.Evaluate(Matrix<S>(x.col(b)), f1);
        BOOST_TEST(implicit::testing::AgreeEntrywise(fx.col(b), f1.col(0), tol), "sample " << b);
      }
    }
  }
}
