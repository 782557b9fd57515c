#define BOOST_TEST_MODULE implicit_diff
#include <boost/test/unit_test.hpp>

#include <implicit/core/energy_maps.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/solvers/anderson.h>
#include <implicit/solvers/broyden.h>
#include <implicit/solvers/newton.h>
#include <implicit/solvers/picard.h>

#include <memory>
#include <string>
#include <vector>

#include "support/ift_problems.h"
#include "support/test_problems.h"

using namespace implicit;
using namespace implicit::testing;

namespace {

const std::vector<std::string> kAllLinearSolvers = {"fixed_point", "anderson", "broyden", "cg",
                                                    "minres",      "gmres",    "direct"};

// Every forward solver of the library, converging to `tol`.
std::vector<std::unique_ptr<Solver<double>>> ForwardSolvers(double tol) {
  std::vector<std::unique_ptr<Solver<double>>> s;
  PicardSolver<double>::Options p;
  p.absolute_tolerance = tol;
  p.max_iterations = 2000;
  p.max_stall_iterations = 0;
  s.push_back(std::make_unique<PicardSolver<double>>(p));
  AndersonSolver<double>::Options a;
  a.absolute_tolerance = tol;
  a.max_iterations = 500;
  s.push_back(std::make_unique<AndersonSolver<double>>(a));
  BroydenSolver<double>::Options b;
  b.absolute_tolerance = tol;
  b.max_iterations = 500;
  s.push_back(std::make_unique<BroydenSolver<double>>(b));
  NewtonSolver<double>::Options nt;
  nt.absolute_tolerance = tol;
  nt.max_iterations = 100;
  s.push_back(std::make_unique<NewtonSolver<double>>(nt));
  return s;
}

// Concatenated [dL/dtheta; vec(dL/dx)].
Vector<double> Stack(const Vector<double>& theta, const Matrix<double>& x) {
  Vector<double> v(theta.size() + x.size());
  v << theta, Eigen::Map<const Vector<double>>(x.data(), x.size());
  return v;
}

bool AllNaN(const Matrix<double>& m) { return m.size() > 0 && m.array().isNaN().all(); }

// The tanh DEQ f(z) = tanh(W z + U x + b), a loss, and its reference gradients.
struct TanhProblem {
  static constexpr Index n = 6, p = 3, B = 3;
  TanhDeqMap<double> map{n, p, 0.6, 7};
  QuadraticLoss loss;
  Vector<double> fd;        // central differences of L(z*(theta, x))
  Vector<double> unrolled;  // reverse mode through 300 Picard steps
  TanhProblem() {
    map.SetInput(RandomMatrix<double>(p, B, 11));
    loss.w = RandomMatrix<double>(n, B, 12);
    Vector<double>& theta = map.parameters()->values();
    const Index np = theta.size();
    fd = FiniteDifference(
        np + p * B,
        [&](Index i, double d) {
          if (i < np) {
            theta(i) += d;
          } else {
            Matrix<double> x = map.input();
            x(i - np) += d;
            map.SetInput(x);
          }
        },
        [&] { return loss.Value(SolveTight(map, B)); });
    UnrolledGradient u = UnrollPicard(map, Matrix<double>::Zero(n, B), 300, loss);
    unrolled = Stack(u.parameters, u.input);
  }
};

// The Hopfield energy E = 0.5|z|^2 - lse(beta X^T z) - x^T z with learnable X.
struct HopfieldProblem {
  static constexpr Index n = 5, N = 4, B = 3;
  HopfieldEnergy<double> energy{RandomMatrixWithNorm<double>(n, N, 1.0, 21), 1.0};
  QuadraticLoss loss;
  HopfieldProblem() {
    energy.SetInput(RandomMatrix<double>(n, B, 22, 0.5));
    loss.w = RandomMatrix<double>(n, B, 23);
  }
  Vector<double> FiniteDifferenceGradient(const FixedPointMap<double>& map) {
    Vector<double>& theta = energy.parameters()->values();
    const Index np = theta.size();
    return FiniteDifference(
        np + n * B,
        [&](Index i, double d) {
          if (i < np) {
            theta(i) += d;
          } else {
            Matrix<double> x = energy.input();
            x(i - np) += d;
            energy.SetInput(x);
          }
        },
        [&] { return loss.Value(SolveTight(map, B)); });
  }
};

// Runs every forward x backward combination and checks the gradients.
void CheckAllCombinations(const FixedPointMap<double>& map, const QuadraticLoss& loss,
                          const Vector<double>& fd, const Vector<double>& unrolled,
                          const std::string& problem) {
  for (const auto& forward : ForwardSolvers(1e-12)) {
    Matrix<double> z = Matrix<double>::Zero(map.dimension(), loss.w.cols());
    const Summary fs = forward->Solve(map, z);
    BOOST_TEST_REQUIRE(fs.IsConverged(), problem << ": " << fs.BriefReport());
    for (const std::string& linear : kAllLinearSolvers) {
      BackwardOptions options;
      options.linear_solver = linear;
      const BackwardResult<double> r = ImplicitBackward(map, z, loss.Gradient(z), options);
      const std::string what = problem + ", forward " + forward->name() + ", backward " + linear;
      const bool symmetric_only = linear == "cg" || linear == "minres";
      if (symmetric_only && !map.HasSymmetricJacobian()) {
        // Not applicable to a non-symmetric I - J: whatever it returns must be
        // either verified-correct or a reported failure with NaN gradients.
        if (r.ok()) {
          BOOST_TEST(RelativeError(Stack(r.parameter_gradient, r.input_gradient), fd) < 1e-6, what);
        } else {
          BOOST_TEST(AllNaN(r.parameter_gradient), what);
          BOOST_TEST_MESSAGE(what << " (not applicable) reports: " << r.summary.BriefReport());
        }
        continue;
      }
      BOOST_TEST_REQUIRE(r.ok(), what << ": " << r.summary.BriefReport());
      const Vector<double> g = Stack(r.parameter_gradient, r.input_gradient);
      const double e_fd = RelativeError(g, fd), e_unrolled = RelativeError(g, unrolled);
      BOOST_TEST(e_fd < 1e-6, what << ": error vs finite differences " << e_fd);
      BOOST_TEST(e_unrolled < 1e-8, what << ": error vs unrolled " << e_unrolled);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(hopfield_energy_support_derivatives_match_finite_differences) {
  HopfieldProblem h;
  const Index n = h.n, B = h.B;
  const Matrix<double> z = RandomMatrix<double>(n, B, 31), v = RandomMatrix<double>(n, B, 32);
  Matrix<double> g(n, B), gp(n, B), gm(n, B), hv(n, B);
  Vector<double> ep(B), em(B);
  h.energy.Gradient(z, g);
  h.energy.HessianVectorProduct(z, v, hv);
  const double eps = 1e-6;
  h.energy.Value(z + eps * v, ep);
  h.energy.Value(z - eps * v, em);
  for (Index b = 0; b < B; ++b) {
    BOOST_TEST(std::abs((ep(b) - em(b)) / (2 * eps) - g.col(b).dot(v.col(b))) < 1e-8);
  }
  h.energy.Gradient(z + eps * v, gp);
  h.energy.Gradient(z - eps * v, gm);
  BOOST_TEST(RelativeError((gp - gm) / (2 * eps), hv) < 1e-8);
  // Parameter VJP: d/dtheta sum_b <grad E, u_b>.
  Vector<double> pvjp(h.energy.num_parameters());
  h.energy.ParameterVectorJacobianProduct(z, v, pvjp);
  Vector<double>& theta = h.energy.parameters()->values();
  const Vector<double> fd = FiniteDifference(
      theta.size(), [&](Index i, double d) { theta(i) += d; },
      [&] {
        Matrix<double> gg(n, B);
        h.energy.Gradient(z, gg);
        return (gg.array() * v.array()).sum();
      });
  BOOST_TEST(RelativeError(pvjp, fd) < 1e-8);
}

BOOST_AUTO_TEST_CASE(tanh_deq_every_forward_and_backward_solver) {
  TanhProblem t;
  BOOST_TEST_MESSAGE("tanh DEQ: finite differences vs unrolled "
                     << RelativeError(t.unrolled, t.fd));
  CheckAllCombinations(t.map, t.loss, t.fd, t.unrolled, "tanh DEQ");
}

BOOST_AUTO_TEST_CASE(hopfield_energy_every_forward_and_backward_solver) {
  HopfieldProblem h;
  CccpMap<double> cccp(h.energy);
  GradientStepMap<double> step(h.energy, 0.7);
  for (const FixedPointMap<double>* map :
       {static_cast<const FixedPointMap<double>*>(&cccp),
        static_cast<const FixedPointMap<double>*>(&step)}) {
    const Vector<double> fd = h.FiniteDifferenceGradient(*map);
    // The map's parameters live in the energy: unroll through the map, which
    // forwards the energy's parameter and input products.
    UnrolledGradient u = UnrollPicard(*map, Matrix<double>::Zero(h.n, h.B), 300, h.loss);
    CheckAllCombinations(*map, h.loss, fd, Stack(u.parameters, u.input),
                         map == &cccp ? "Hopfield CCCP" : "Hopfield gradient step");
  }
}

BOOST_AUTO_TEST_CASE(linear_deq_matches_closed_form) {
  // z* = (I - A)^{-1} (B x + c); dL/dc = sum_b (I - A)^{-T} g_b, dL/dx = B^T (I - A)^{-T} g.
  const Index n = 5, p = 2, batch = 3;
  const Matrix<double> A = RandomMatrixWithNorm<double>(n, n, 0.7, 41);
  const Matrix<double> Bm = RandomMatrix<double>(n, p, 42);
  LinearDeqMap<double> map(A, Bm, RandomMatrix<double>(n, 1, 43));
  map.SetInput(RandomMatrix<double>(p, batch, 44));
  const Matrix<double> z = SolveTight(map, batch);
  const Matrix<double> g = RandomMatrix<double>(n, batch, 45);
  const Matrix<double> u =
      (Matrix<double>::Identity(n, n) - A.transpose()).fullPivLu().solve(g);
  for (const char* linear : {"fixed_point", "anderson", "broyden", "gmres", "direct"}) {
    BackwardOptions options;
    options.linear_solver = linear;
    const BackwardResult<double> r = ImplicitBackward(map, z, g, options);
    BOOST_TEST_REQUIRE(r.ok(), linear << ": " << r.summary.BriefReport());
    BOOST_TEST(RelativeError(r.adjoint, u) < 1e-9, linear);
    BOOST_TEST(RelativeError(r.parameter_gradient.tail(n), u.rowwise().sum()) < 1e-9, linear);
    BOOST_TEST(RelativeError(r.input_gradient, Bm.transpose() * u) < 1e-9, linear);
  }
}

BOOST_AUTO_TEST_CASE(jacobian_free_and_phantom_are_measurably_less_exact) {
  TanhProblem t;
  Matrix<double> z = SolveTight(t.map, t.B);
  const Matrix<double> g = t.loss.Gradient(z);
  auto error = [&](const BackwardOptions& o) {
    const BackwardResult<double> r = ImplicitBackward(t.map, z, g, o);
    BOOST_TEST_REQUIRE(r.ok(), r.summary.BriefReport());
    return RelativeError(Stack(r.parameter_gradient, r.input_gradient), t.fd);
  };
  BackwardOptions ift, jfb, phantom;
  jfb.method = GradientMethod::kJacobianFree;
  phantom.method = GradientMethod::kPhantom;  // 5 steps, damping 0.5
  const double e_ift = error(ift), e_jfb = error(jfb), e_phantom = error(phantom);
  BOOST_TEST_MESSAGE("tanh DEQ (n=6, |W|_2=0.6) relative gradient error vs finite differences: IFT "
                     << e_ift << ", JFB " << e_jfb << ", phantom(5 steps, damping 0.5) "
                     << e_phantom);
  BOOST_TEST(e_ift < 1e-6);
  BOOST_TEST(e_jfb > 1e-3);
  BOOST_TEST(e_phantom > 1e-3);
  // Phantom gradients are a truncated Neumann series of the IFT adjoint: with
  // many steps they converge to it; with one step u = damping * dL/dz*.
  phantom.phantom_steps = 200;
  BOOST_TEST(error(phantom) < 1e-6);
  phantom.phantom_steps = 1;
  const BackwardResult<double> one = ImplicitBackward(t.map, z, g, phantom);
  BOOST_TEST(RelativeError(one.adjoint, phantom.phantom_damping * g) < 1e-15);
  // The approximations report their own distance from the IFT adjoint.
  const BackwardResult<double> j = ImplicitBackward(t.map, z, g, jfb);
  BOOST_TEST(j.summary.solver == "jacobian_free");
  BOOST_TEST(j.summary.relative_residual > 1e-3);
}

BOOST_AUTO_TEST_CASE(symmetric_and_general_paths_agree_on_an_energy) {
  HopfieldProblem h;
  GradientStepMap<double> map(h.energy, 0.7);
  const Matrix<double> z = SolveTight(map, h.B);
  const Matrix<double> g = h.loss.Gradient(z);
  BackwardOptions options;  // auto: minres for a symmetric map
  const BackwardResult<double> ref = ImplicitBackward(map, z, g, options);
  BOOST_TEST_REQUIRE(ref.ok());
  BOOST_TEST(ref.summary.solver == "minres");
  for (const char* linear : {"cg", "minres", "gmres", "direct", "fixed_point"}) {
    options.linear_solver = linear;
    const BackwardResult<double> r = ImplicitBackward(map, z, g, options);
    BOOST_TEST_REQUIRE(r.ok(), linear);
    BOOST_TEST(RelativeError(r.parameter_gradient, ref.parameter_gradient) < 1e-9, linear);
    BOOST_TEST(RelativeError(r.input_gradient, ref.input_gradient) < 1e-9, linear);
  }
  // For a gradient-step map (I - J) = a hess E: the adjoint solves a H u = g.
  Matrix<double> hu(h.n, h.B);
  h.energy.HessianVectorProduct(z, ref.adjoint, hu);
  BOOST_TEST(RelativeError(0.7 * hu, g) < 1e-9);
  // The tanh DEQ is not symmetric: auto picks GMRES.
  TanhDeqMap<double> tanh_map(4, 2, 0.5, 3);
  tanh_map.SetInput(RandomMatrix<double>(2, 2, 4));
  const Matrix<double> zt = SolveTight(tanh_map, 2);
  BOOST_TEST(ImplicitBackward(tanh_map, zt, zt, BackwardOptions()).summary.solver == "gmres");
}

BOOST_AUTO_TEST_CASE(singular_backward_problem_reports_failure) {
  // A symmetric with eigenvalue exactly 1: I - A^T is singular and dL/dz* has a
  // component in its null space, so the adjoint equation has no solution.
  const Index n = 5, batch = 2;
  const Matrix<double> Q = RandomMatrix<double>(n, n, 51).householderQr().householderQ();
  Vector<double> ev(n);
  ev << 1.0, 0.5, 0.2, -0.3, 0.1;
  const Matrix<double> A = Q * ev.asDiagonal() * Q.transpose();
  LinearDeqMap<double> map(A, RandomMatrix<double>(n, 2, 52), RandomMatrix<double>(n, 1, 53));
  map.SetInput(RandomMatrix<double>(2, batch, 54));
  const Matrix<double> z = RandomMatrix<double>(n, batch, 55);  // any point: J is constant
  const Matrix<double> g = RandomMatrix<double>(n, batch, 56);
  for (const std::string& linear : kAllLinearSolvers) {
    BackwardOptions options;
    options.linear_solver = linear;
    options.max_iterations = 100;
    const BackwardResult<double> r = ImplicitBackward(map, z, g, options);
    BOOST_TEST(!r.ok(), linear);
    BOOST_TEST(!r.summary.IsConverged(), linear);
    BOOST_TEST(r.summary.num_converged() == 0, linear);
    BOOST_TEST(AllNaN(r.parameter_gradient), linear);  // never zeros
    BOOST_TEST(AllNaN(r.input_gradient), linear);
    BOOST_TEST_MESSAGE("singular, " << linear << ": " << r.summary.BriefReport() << " ("
                                    << r.summary.message << ")");
  }
}

BOOST_AUTO_TEST_CASE(non_convergent_backward_problem_reports_failure) {
  // Spectral radius of J is 1.5: I - J is invertible (GMRES and direct solve
  // it) but the adjoint fixed-point iteration diverges.
  const Index n = 4, batch = 2;
  const Matrix<double> Q = RandomMatrix<double>(n, n, 61).householderQr().householderQ();
  Vector<double> ev(n);
  ev << 1.5, 0.3, -0.2, 0.1;
  const Matrix<double> A = Q * ev.asDiagonal() * Q.transpose();
  LinearDeqMap<double> map(A, RandomMatrix<double>(n, 1, 62), RandomMatrix<double>(n, 1, 63));
  map.SetInput(RandomMatrix<double>(1, batch, 64));
  const Matrix<double> z = RandomMatrix<double>(n, batch, 65);
  const Matrix<double> g = RandomMatrix<double>(n, batch, 66);
  BackwardOptions options;
  options.linear_solver = "fixed_point";
  const BackwardResult<double> bad = ImplicitBackward(map, z, g, options);
  BOOST_TEST(!bad.ok());
  BOOST_TEST((bad.summary.termination_type == TerminationType::kDiverged));
  BOOST_TEST(AllNaN(bad.parameter_gradient));
  for (const char* linear : {"gmres", "direct", "anderson"}) {
    options.linear_solver = linear;
    const BackwardResult<double> good = ImplicitBackward(map, z, g, options);
    BOOST_TEST(good.ok(), linear << ": " << good.summary.BriefReport());
  }
  // A budget too small for the tolerance is a reported failure as well.
  TanhProblem t;
  const Matrix<double> zt = SolveTight(t.map, t.B);
  options.linear_solver = "fixed_point";
  options.max_iterations = 2;
  const BackwardResult<double> short_budget = ImplicitBackward(t.map, zt, t.loss.Gradient(zt), options);
  BOOST_TEST((short_budget.summary.termination_type == TerminationType::kMaxIterations));
  BOOST_TEST(AllNaN(short_budget.parameter_gradient));
  BOOST_TEST(AllNaN(short_budget.input_gradient));
}

BOOST_AUTO_TEST_CASE(one_failed_sample_is_isolated) {
  TanhProblem t;
  const Matrix<double> z = SolveTight(t.map, t.B);
  Matrix<double> g = t.loss.Gradient(z), g_without = g;
  g(2, 1) = std::numeric_limits<double>::quiet_NaN();
  g_without.col(1).setZero();  // sample 1 contributes nothing
  const BackwardResult<double> ref = ImplicitBackward(t.map, z, g_without);
  for (const char* linear : {"fixed_point", "anderson", "broyden", "gmres", "direct"}) {
    BOOST_TEST_CONTEXT(linear) {
      BackwardOptions options;
      options.linear_solver = linear;
      const BackwardResult<double> r = ImplicitBackward(t.map, z, g, options);
      BOOST_TEST(!r.ok());
      BOOST_TEST((r.summary.sample_status[0] == TerminationType::kConverged));
      BOOST_TEST((r.summary.sample_status[1] == TerminationType::kNonFinite));
      BOOST_TEST((r.summary.sample_status[2] == TerminationType::kConverged));
      BOOST_TEST(AllNaN(r.parameter_gradient));
      BOOST_TEST(AllNaN(r.input_gradient.col(1)));
      BOOST_TEST(AllNaN(r.adjoint.col(1)));
      BOOST_TEST(RelativeError(r.input_gradient.col(0), ref.input_gradient.col(0)) < 1e-9);
      BOOST_TEST(RelativeError(r.input_gradient.col(2), ref.input_gradient.col(2)) < 1e-9);
      options.failed_samples = FailedSamplePolicy::kSkip;
      const BackwardResult<double> d = ImplicitBackward(t.map, z, g, options);
      BOOST_TEST(!d.ok());
      BOOST_TEST(RelativeError(d.parameter_gradient, ref.parameter_gradient) < 1e-9);
      BOOST_TEST(d.input_gradient.col(1).isZero(0));
      BOOST_TEST(d.adjoint.col(1).isZero(0));
      // The deprecated spelling of kSkip.
      options = BackwardOptions();
      options.linear_solver = linear;
      options.drop_failed_samples = true;
      BOOST_TEST(RelativeError(ImplicitBackward(t.map, z, g, options).parameter_gradient,
                               ref.parameter_gradient) < 1e-9);
      options.failed_samples = FailedSamplePolicy::kThrow;  // contradicts drop_failed_samples
      BOOST_CHECK_THROW(ImplicitBackward(t.map, z, g, options), std::invalid_argument);
      options.drop_failed_samples = false;
      BOOST_CHECK_EXCEPTION(ImplicitBackward(t.map, z, g, options), ConvergenceError,
                            [](const ConvergenceError& e) {
                              return e.summary.sample_status[1] == TerminationType::kNonFinite &&
                                     std::string(e.what()).find("1 of 3 samples failed") !=
                                         std::string::npos;
                            });
    }
  }
}

// TanhDeqMap, except that sample `bad` follows z -> 2 z + 1, which has no
// attracting fixed point: its forward solve cannot converge, the others can.
class OneDivergentSampleMap : public FixedPointMap<double> {
 public:
  OneDivergentSampleMap(TanhDeqMap<double>& inner, Index bad) : inner_(inner), bad_(bad) {}
  Index dimension() const override { return inner_.dimension(); }
  void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override {
    inner_.Evaluate(z, out);
    out.col(bad_) = 2.0 * z.col(bad_).array() + 1.0;
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<double> z, ConstMatrixRef<double> v,
                             MatrixRef<double> out) const override {
    inner_.JacobianVectorProduct(z, v, out);
    out.col(bad_) = 2.0 * v.col(bad_);
  }
  void VectorJacobianProduct(ConstMatrixRef<double> z, ConstMatrixRef<double> u,
                             MatrixRef<double> out) const override {
    inner_.VectorJacobianProduct(z, u, out);
    out.col(bad_) = 2.0 * u.col(bad_);
  }
  // Only the other samples depend on the parameters and inputs: sample bad's
  // terms are those of the inner map, which the backward pass must drop.
  Index num_parameters() const override { return inner_.num_parameters(); }
  ParameterSet<double>* parameters() override { return inner_.parameters(); }
  void ParameterVectorJacobianProduct(ConstMatrixRef<double> z, ConstMatrixRef<double> u,
                                      VectorRef<double> out) const override {
    inner_.ParameterVectorJacobianProduct(z, u, out);
  }
  Index input_dimension() const override { return inner_.input_dimension(); }
  void InputVectorJacobianProduct(ConstMatrixRef<double> z, ConstMatrixRef<double> u,
                                  MatrixRef<double> out) const override {
    inner_.InputVectorJacobianProduct(z, u, out);
  }

 private:
  TanhDeqMap<double>& inner_;
  Index bad_;
};

// A layer whose forward solve fails for one sample of the batch, under each
// FailedSamplePolicy: kSkip gives the gradients of the batch without that
// sample, kNaN NaN, kThrow a ConvergenceError naming it.
BOOST_AUTO_TEST_CASE(failed_sample_policies_of_a_layer) {
  constexpr Index n = 6, p = 3, B = 4, bad = 2;
  const Matrix<double> x = RandomMatrix<double>(p, B, 11);
  QuadraticLoss loss;
  loss.w = RandomMatrix<double>(n, B, 12);

  // Reference: the same map (same seed) and loss on the batch without sample `bad`.
  auto without_bad = [&](const Matrix<double>& m) {
    Matrix<double> out(m.rows(), B - 1);
    out << m.leftCols(bad), m.rightCols(B - 1 - bad);
    return out;
  };
  TanhDeqMap<double> others(n, p, 0.6, 7);
  others.SetInput(without_bad(x));
  const Matrix<double> z_ref = SolveTight(others, B - 1);
  QuadraticLoss ref_loss;
  ref_loss.w = without_bad(loss.w);
  auto reference = [&](const char* linear) {
    BackwardOptions options;
    options.linear_solver = linear;
    return ImplicitBackward(others, z_ref, ref_loss.Gradient(z_ref), options);
  };
  const BackwardResult<double> ref = reference("gmres");
  BOOST_TEST_REQUIRE(ref.ok());

  TanhDeqMap<double> inner(n, p, 0.6, 7);
  inner.SetInput(x);
  OneDivergentSampleMap map(inner, bad);
  PicardSolver<double>::Options po;
  po.absolute_tolerance = 1e-13;
  po.max_iterations = 2000;
  po.max_stall_iterations = 0;
  PicardSolver<double> solver(po);
  ImplicitLayer<double> layer(map, solver);
  Matrix<double> z = Matrix<double>::Zero(n, B);
  const Summary forward = layer.Forward(z);
  for (Index b = 0; b < B; ++b) {
    BOOST_TEST_REQUIRE((forward.sample_status[b] == TerminationType::kConverged) == (b != bad));
  }
  BOOST_TEST_REQUIRE(z.allFinite());
  const Matrix<double> g = loss.Gradient(z);

  for (const char* linear : {"fixed_point", "gmres", "direct"}) {
    BOOST_TEST_CONTEXT(linear) {
      BackwardOptions options;
      options.linear_solver = linear;
      options.failed_samples = FailedSamplePolicy::kSkip;
      layer.set_options(options);
      const BackwardResult<double> skip = layer.Backward(g);
      BOOST_TEST(!skip.ok());
      BOOST_TEST((skip.summary.sample_status[bad] == TerminationType::kFailure));
      BOOST_TEST(skip.parameter_gradient.allFinite());
      BOOST_TEST(RelativeError(skip.parameter_gradient, ref.parameter_gradient) < 1e-9);
      BOOST_TEST(skip.input_gradient.col(bad).isZero(0));
      BOOST_TEST(RelativeError(without_bad(skip.input_gradient), ref.input_gradient) < 1e-9);
      // The rejected sample costs the adjoint solve nothing: as many iterations
      // as the batch without it.
      BOOST_TEST(skip.summary.iterations <= reference(linear).summary.iterations);

      options.failed_samples = FailedSamplePolicy::kNaN;
      layer.set_options(options);
      const BackwardResult<double> nan = layer.Backward(g);
      BOOST_TEST(AllNaN(nan.parameter_gradient));
      BOOST_TEST(AllNaN(nan.input_gradient.col(bad)));
      BOOST_TEST(RelativeError(without_bad(nan.input_gradient), ref.input_gradient) < 1e-9);

      options.failed_samples = FailedSamplePolicy::kThrow;
      layer.set_options(options);
      BOOST_CHECK_EXCEPTION(layer.Backward(g), ConvergenceError, [](const ConvergenceError& e) {
        const std::string what = e.what();
        return e.summary.sample_status[bad] == TerminationType::kFailure &&
               what.find("1 of 4 samples failed (sample 2: failure)") != std::string::npos &&
               what.find("forward solve did not converge") != std::string::npos;
      });
    }
  }
}

BOOST_AUTO_TEST_CASE(failed_sample_policy_names) {
  for (FailedSamplePolicy policy :
       {FailedSamplePolicy::kNaN, FailedSamplePolicy::kSkip, FailedSamplePolicy::kThrow}) {
    FailedSamplePolicy parsed = FailedSamplePolicy::kNaN;
    BOOST_TEST(StringToFailedSamplePolicy(FailedSamplePolicyToString(policy), &parsed));
    BOOST_TEST((parsed == policy));
  }
  BOOST_TEST(!StringToFailedSamplePolicy("drop", nullptr));
  BOOST_TEST((BackwardOptions().failed_sample_policy() == FailedSamplePolicy::kNaN));
}

BOOST_AUTO_TEST_CASE(implicit_layer_forward_backward) {
  TanhProblem t;
  PicardSolver<double>::Options po;
  po.absolute_tolerance = 1e-12;
  po.max_iterations = 1000;
  PicardSolver<double> solver(po);
  ImplicitLayer<double> layer(t.map, solver);
  BOOST_CHECK_THROW(layer.Backward(Matrix<double>::Zero(t.n, t.B)), std::logic_error);
  Matrix<double> z = Matrix<double>::Zero(t.n, t.B);
  BOOST_TEST_REQUIRE(layer.Forward(z).IsConverged());
  BOOST_TEST(layer.has_equilibrium());
  const BackwardResult<double> r = layer.Backward(t.loss.Gradient(z));
  BOOST_TEST_REQUIRE(r.ok());
  BOOST_TEST(RelativeError(Stack(r.parameter_gradient, r.input_gradient), t.fd) < 1e-6);
  // A forward solve that did not converge is not differentiated by default.
  po.max_iterations = 3;
  PicardSolver<double> short_solver(po);
  ImplicitLayer<double> short_layer(t.map, short_solver);
  z.setZero();
  BOOST_TEST(!short_layer.Forward(z).IsConverged());
  const BackwardResult<double> rejected = short_layer.Backward(t.loss.Gradient(z));
  BOOST_TEST(!rejected.ok());
  BOOST_TEST((rejected.summary.termination_type == TerminationType::kFailure));
  BOOST_TEST(AllNaN(rejected.parameter_gradient));
  BOOST_TEST(rejected.summary.message.find("forward") != std::string::npos);
  BackwardOptions lenient;
  lenient.require_converged_forward = false;
  short_layer.set_options(lenient);
  BOOST_TEST(short_layer.Backward(t.loss.Gradient(z)).ok());
}

BOOST_AUTO_TEST_CASE(float_gradients_match_double) {
  TanhDeqMap<float> mf(6, 3, 0.6f, 7);
  TanhDeqMap<double> md(6, 3, 0.6, 7);
  const Matrix<double> x = RandomMatrix<double>(3, 2, 11);
  mf.SetInput(x.cast<float>());
  md.SetInput(x);
  PicardSolver<float>::Options po;
  po.absolute_tolerance = 1e-6;
  Matrix<float> zf = Matrix<float>::Zero(6, 2);
  BOOST_TEST_REQUIRE(PicardSolver<float>(po).Solve(mf, zf).IsConverged());
  const Matrix<double> zd = SolveTight(md, 2);
  BackwardOptions of;
  of.tolerance = 1e-5;
  for (const char* linear : {"fixed_point", "anderson", "broyden", "gmres", "direct"}) {
    of.linear_solver = linear;
    const BackwardResult<float> rf = ImplicitBackward(mf, zf, zf, of);
    const BackwardResult<double> rd = ImplicitBackward(md, zd, zd);
    BOOST_TEST_REQUIRE(rf.ok(), linear << ": " << rf.summary.BriefReport());
    BOOST_TEST(RelativeError(rf.parameter_gradient.cast<double>(), rd.parameter_gradient) < 1e-4,
               linear);
  }
}

BOOST_AUTO_TEST_CASE(invalid_options_and_shapes_throw) {
  TanhDeqMap<double> map(4, 2, 0.5, 3);
  map.SetInput(RandomMatrix<double>(2, 2, 4));
  const Matrix<double> z = Matrix<double>::Zero(4, 2);
  auto message = [&](const BackwardOptions& o, const Matrix<double>& g) -> std::string {
    try {
      ImplicitBackward(map, z, g, o);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  BackwardOptions o;
  o.linear_solver = "qr";
  BOOST_TEST(message(o, z).find("linear_solver") != std::string::npos);
  o = BackwardOptions();
  o.phantom_steps = 0;
  BOOST_TEST(message(o, z).find("phantom_steps") != std::string::npos);
  o = BackwardOptions();
  o.phantom_damping = 1.5;
  BOOST_TEST(message(o, z).find("phantom_damping") != std::string::npos);
  o = BackwardOptions();
  o.tolerance = -1;
  BOOST_TEST(message(o, z).find("tolerance") != std::string::npos);
  o = BackwardOptions();
  o.restart = 0;
  BOOST_TEST(message(o, z).find("restart") != std::string::npos);
  BOOST_TEST(message(BackwardOptions(), Matrix<double>::Zero(4, 3)).find("4x2") != std::string::npos);
  PicardSolver<double> solver;
  o = BackwardOptions();
  o.memory = 0;
  BOOST_CHECK_THROW(ImplicitLayer<double>(map, solver, o), std::invalid_argument);
  // A map without Jacobian products cannot be differentiated implicitly.
  struct NoJacobian : FixedPointMap<double> {
    Index dimension() const override { return 2; }
    void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override { out = 0.5 * z; }
  } plain;
  BOOST_CHECK_THROW(ImplicitBackward(plain, Matrix<double>::Zero(2, 1), Matrix<double>::Ones(2, 1)),
                    std::invalid_argument);
  GradientMethod m;
  BOOST_TEST(StringToGradientMethod("phantom", &m));
  BOOST_TEST((m == GradientMethod::kPhantom));
  BOOST_TEST(!StringToGradientMethod("exact", &m));
}
