// SGD and Adam: they minimise a convex quadratic, clipping bounds the step,
// weight decay shrinks the parameters by the documented factor, non-finite
// gradients are not applied, and the exposed state resumes a run exactly.
#define BOOST_TEST_MODULE optimizers
#include <boost/test/unit_test.hpp>

#include <implicit/core/optimizers.h>

#include "support/test_problems.h"

#include <cmath>
#include <limits>

using implicit::AdamOptimizer;
using implicit::Matrix;
using implicit::ParameterSet;
using implicit::SgdOptimizer;
using implicit::Vector;

namespace {

// f(theta) = 0.5 theta^T H theta - c^T theta on a parameter set with two
// blocks (so that the flat layout matters); H SPD with eigenvalues in [1, 10].
struct Quadratic {
  Matrix<double> H;
  Vector<double> c;
  Quadratic() {
    H = implicit::testing::RandomSpd<double>(12, 1.0, 10.0, 7);
    c = implicit::testing::RandomMatrix<double>(12, 1, 8);
  }
  double Value(const Vector<double>& t) const { return 0.5 * t.dot(H * t) - c.dot(t); }
  Vector<double> Gradient(const Vector<double>& t) const { return H * t - c; }
  double Minimum() const {
    Vector<double> t = H.ldlt().solve(c);
    return Value(t);
  }
};

ParameterSet<double> MakeParams() {
  ParameterSet<double> p;
  p.Add("W", 3, 3);
  p.Add("b", 3, 1);
  p.values().setConstant(2.0);
  return p;
}

template <typename Optimizer>
double GapAfter(Optimizer& opt, int steps, double* initial_gap) {
  Quadratic q;
  ParameterSet<double> p = MakeParams();
  const double fmin = q.Minimum();
  *initial_gap = q.Value(p.values()) - fmin;
  for (int i = 0; i < steps; ++i) opt.Step(p, q.Gradient(p.values()));
  return q.Value(p.values()) - fmin;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sgd_with_momentum_minimises_a_quadratic) {
  SgdOptimizer<double>::Options o;
  o.learning_rate = 0.05;
  o.momentum = 0.9;
  SgdOptimizer<double> sgd(o);
  double initial = 0;
  const double gap = GapAfter(sgd, 400, &initial);
  BOOST_TEST_MESSAGE("SGD+momentum gap: " << initial << " -> " << gap);
  BOOST_TEST(gap < 1e-8 * initial);  // stated factor: 1e8
  BOOST_TEST(sgd.step_count() == 400);
}

BOOST_AUTO_TEST_CASE(adam_minimises_a_quadratic) {
  AdamOptimizer<double>::Options o;
  o.learning_rate = 0.05;
  AdamOptimizer<double> adam(o);
  double initial = 0;
  const double gap = GapAfter(adam, 1000, &initial);
  BOOST_TEST_MESSAGE("Adam gap: " << initial << " -> " << gap);
  BOOST_TEST(gap < 1e-4 * initial);  // stated factor: 1e4
}

BOOST_AUTO_TEST_CASE(adam_first_step_moves_every_coordinate_by_the_learning_rate) {
  // With bias correction, m_hat / sqrt(v_hat) = sign(g) on the first step.
  AdamOptimizer<double>::Options o;
  o.learning_rate = 0.01;
  o.epsilon = 1e-12;
  AdamOptimizer<double> adam(o);
  ParameterSet<double> p = MakeParams();
  const Vector<double> before = p.values();
  Vector<double> g = implicit::testing::RandomMatrix<double>(p.size(), 1, 3, 5.0);
  adam.Step(p, g);
  for (implicit::Index i = 0; i < p.size(); ++i) {
    BOOST_TEST(std::abs(before(i) - p.values()(i) - 0.01 * (g(i) > 0 ? 1 : -1)) < 1e-9);
  }
}

BOOST_AUTO_TEST_CASE(clipping_bounds_the_sgd_step) {
  SgdOptimizer<double>::Options o;
  o.learning_rate = 0.1;
  o.clip_norm = 1.0;
  SgdOptimizer<double> sgd(o);
  ParameterSet<double> p = MakeParams();
  const Vector<double> before = p.values();
  Vector<double> g = implicit::testing::RandomMatrix<double>(p.size(), 1, 11, 100.0);
  const auto info = sgd.Step(p, g);
  BOOST_TEST(info.gradient_norm == g.norm());
  BOOST_TEST(info.clip_scale < 1.0);
  BOOST_TEST((p.values() - before).norm() <= 0.1 * 1.0 * (1 + 1e-12));
  // The step is along -g with the clipped length lr * clip_norm.
  const Vector<double> expected = before - 0.1 * g / g.norm();
  BOOST_TEST((p.values() - expected).norm() < 1e-12);
  // A gradient already within the bound is not changed.
  const Vector<double> before2 = p.values();
  Vector<double> small = g / g.norm() * 0.5;
  const auto info2 = sgd.Step(p, small);
  BOOST_TEST(info2.clip_scale == 1.0);
  BOOST_TEST((before2 - 0.1 * small - p.values()).norm() < 1e-12);
}

BOOST_AUTO_TEST_CASE(adam_clipping_is_the_same_as_feeding_the_clipped_gradient) {
  AdamOptimizer<double>::Options clipped_options;
  clipped_options.clip_norm = 0.5;
  AdamOptimizer<double> clipped(clipped_options), plain{AdamOptimizer<double>::Options()};
  ParameterSet<double> p1 = MakeParams(), p2 = MakeParams();
  for (int k = 0; k < 5; ++k) {
    Vector<double> g = implicit::testing::RandomMatrix<double>(p1.size(), 1, 20 + k, 10.0);
    clipped.Step(p1, g);
    plain.Step(p2, g * (0.5 / g.norm()));
  }
  BOOST_TEST((p1.values() - p2.values()).norm() < 1e-12);
  BOOST_TEST((clipped.second_moment() - plain.second_moment()).norm() < 1e-14);
}

BOOST_AUTO_TEST_CASE(weight_decay_shrinks_parameters) {
  const Vector<double> zero = Vector<double>::Zero(12);
  {  // SGD: coupled decay, theta <- theta (1 - lr wd) with a zero loss gradient
    SgdOptimizer<double>::Options o;
    o.learning_rate = 0.1;
    o.weight_decay = 0.5;
    SgdOptimizer<double> sgd(o);
    ParameterSet<double> p = MakeParams();
    const Vector<double> before = p.values();
    for (int k = 0; k < 3; ++k) sgd.Step(p, zero);
    BOOST_TEST((p.values() - before * std::pow(1 - 0.05, 3)).norm() < 1e-12);
  }
  {  // Adam: decoupled, theta <- theta (1 - lr wd), independent of the moments
    AdamOptimizer<double>::Options o;
    o.learning_rate = 0.1;
    o.weight_decay = 0.5;
    AdamOptimizer<double> adam(o);
    ParameterSet<double> p = MakeParams();
    const Vector<double> before = p.values();
    for (int k = 0; k < 3; ++k) adam.Step(p, zero);
    BOOST_TEST((p.values() - before * std::pow(1 - 0.05, 3)).norm() < 1e-12);
    BOOST_TEST(p.values().norm() < before.norm());
  }
  {  // With a gradient, decay pulls the minimiser towards 0.
    Quadratic q;
    AdamOptimizer<double>::Options o;
    o.learning_rate = 0.02;
    AdamOptimizer<double> plain(o);
    o.weight_decay = 1.0;
    AdamOptimizer<double> decayed(o);
    ParameterSet<double> p1 = MakeParams(), p2 = MakeParams();
    for (int k = 0; k < 2000; ++k) {
      plain.Step(p1, q.Gradient(p1.values()));
      decayed.Step(p2, q.Gradient(p2.values()));
    }
    BOOST_TEST(p2.values().norm() < p1.values().norm());
  }
}

BOOST_AUTO_TEST_CASE(non_finite_gradients_are_not_applied) {
  AdamOptimizer<double> adam;
  SgdOptimizer<double> sgd;
  ParameterSet<double> p = MakeParams();
  Vector<double> g = Vector<double>::Ones(p.size());
  adam.Step(p, g);
  sgd.Step(p, g);
  const Vector<double> before = p.values();
  const auto m = adam.first_moment();
  g(3) = std::numeric_limits<double>::quiet_NaN();
  BOOST_TEST(adam.Step(p, g).skipped);
  g(3) = std::numeric_limits<double>::infinity();
  BOOST_TEST(sgd.Step(p, g).skipped);
  BOOST_TEST(p.values() == before);
  BOOST_TEST(adam.first_moment() == m);
  BOOST_TEST(adam.step_count() == 1);
  BOOST_TEST(sgd.step_count() == 1);
}

BOOST_AUTO_TEST_CASE(state_round_trip_resumes_exactly) {
  Quadratic q;
  AdamOptimizer<double>::Options o;
  o.learning_rate = 0.03;
  o.weight_decay = 0.01;
  AdamOptimizer<double> a(o);
  SgdOptimizer<double>::Options so;
  so.momentum = 0.8;
  SgdOptimizer<double> s(so);
  ParameterSet<double> pa = MakeParams(), ps = MakeParams();
  for (int k = 0; k < 7; ++k) {
    a.Step(pa, q.Gradient(pa.values()));
    s.Step(ps, q.Gradient(ps.values()));
  }
  AdamOptimizer<double> a2(o);
  a2.SetState(a.state(), pa.size());
  SgdOptimizer<double> s2(so);
  s2.SetState(s.state(), ps.size());
  ParameterSet<double> pa2 = pa, ps2 = ps;
  for (int k = 0; k < 7; ++k) {
    a.Step(pa, q.Gradient(pa.values()));
    a2.Step(pa2, q.Gradient(pa2.values()));
    s.Step(ps, q.Gradient(ps.values()));
    s2.Step(ps2, q.Gradient(ps2.values()));
  }
  BOOST_TEST(pa.values() == pa2.values());  // bit-identical
  BOOST_TEST(ps.values() == ps2.values());
  BOOST_TEST(a2.step_count() == 14);
  // Wrong sizes or types are rejected.
  BOOST_CHECK_THROW(a2.SetState(a.state(), pa.size() + 1), std::invalid_argument);
  BOOST_CHECK_THROW(a2.SetState(s.state(), pa.size()), std::invalid_argument);
  // A fresh optimiser's state restores into a fresh optimiser.
  AdamOptimizer<double> fresh;
  BOOST_CHECK_NO_THROW(a2.SetState(fresh.state(), pa.size()));
}

BOOST_AUTO_TEST_CASE(invalid_options_and_shapes_are_rejected) {
  auto message = [](auto make) {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  AdamOptimizer<double>::Options a;
  a.beta2 = 1.0;
  BOOST_TEST(message([&] { AdamOptimizer<double> x(a); }).find("beta2") != std::string::npos);
  a = {};
  a.learning_rate = -1;
  BOOST_TEST(message([&] { AdamOptimizer<double> x(a); }).find("learning_rate") != std::string::npos);
  SgdOptimizer<double>::Options s;
  s.momentum = 1.0;
  BOOST_TEST(message([&] { SgdOptimizer<double> x(s); }).find("momentum") != std::string::npos);
  s = {};
  s.clip_norm = -1;
  BOOST_TEST(message([&] { SgdOptimizer<double> x(s); }).find("clip_norm") != std::string::npos);
  ParameterSet<double> p = MakeParams();
  AdamOptimizer<double> adam;
  const std::string m = message([&] { adam.Step(p, Vector<double>::Zero(5)); });
  BOOST_TEST(m.find("5") != std::string::npos);
  BOOST_TEST(m.find("12") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(float_optimisers_work) {
  ParameterSet<float> p;
  p.Add("x", 4, 1);
  p.values().setConstant(3.0f);
  AdamOptimizer<float>::Options o;
  o.learning_rate = 0.1;
  AdamOptimizer<float> adam(o);
  for (int k = 0; k < 300; ++k) {
    Vector<float> g = p.values();  // f = 0.5 |x|^2
    adam.Step(p, g);
  }
  BOOST_TEST(p.values().norm() < 0.1f * 6.0f);
}
