#define BOOST_TEST_MODULE failure_cases
#include <boost/test/unit_test.hpp>

#include <implicit/solvers/anderson.h>
#include <implicit/solvers/broyden.h>
#include <implicit/solvers/picard.h>

#include "support/solver_checks.h"
#include "support/solver_test_maps.h"
#include "support/test_problems.h"

#include <cmath>
#include <string>
#include <tuple>
#include <type_traits>

using namespace implicit;
using implicit::testing::Residuals;

// Every failure case runs over the three solvers (and Broyden with its residual guard).
struct WithLineSearch {};  // tag: BroydenSolver<double> with residual_factor = 1

template <typename T>
struct SolverOf {
  using type = T;
  static typename T::Options Options() { return typename T::Options(); }
};
template <>
struct SolverOf<WithLineSearch> {
  using type = BroydenSolver<double>;
  static BroydenSolver<double>::Options Options() {
    BroydenSolver<double>::Options o;
    o.residual_factor = 1.0;
    return o;
  }
};

using Solvers = std::tuple<PicardSolver<double>, AndersonSolver<double>, BroydenSolver<double>,
                           WithLineSearch>;

// The returned state of an unconverged sample is its best iterate: finite,
// with the residual the Summary reports, no larger than the initial one.
template <typename Map>
void CheckBestIterate(const Map& map, const Matrix<double>& z0, const Matrix<double>& z,
                      const Summary& s, Index b) {
  BOOST_TEST_CONTEXT("sample " << b << ": " << s.BriefReport()) {
    BOOST_TEST(z.col(b).allFinite());
    const double r = Residuals(map, z)(b);
    BOOST_TEST(r <= Residuals(map, z0)(b));
    BOOST_TEST(r == s.sample_residual[b], boost::test_tools::tolerance(1e-12));
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(nan_in_one_sample, T, Solvers) {
  using SolverT = typename SolverOf<T>::type;
  const Index n = 8, B = 3, bad = 1;
  const int after = 4;  // evaluations 0..3 are clean, then column 1 turns NaN
  testing::AffineMap<double> inner(testing::RandomSpd<double>(n, -0.5, 0.9, 1),
                                   testing::RandomMatrix<double>(n, 1, 2));
  testing::NanAfterMap<double> map(inner, after, bad);
  const Matrix<double> z0 = testing::RandomMatrix<double>(n, B, 3);
  Matrix<double> z = z0;
  auto options = SolverOf<T>::Options();
  options.max_iterations = 500;
  options.absolute_tolerance = 1e-10;
  const Summary s = SolverT(options).Solve(map, z);
  BOOST_TEST_INFO(s.BriefReport());
  BOOST_TEST(s.termination_type == TerminationType::kNonFinite);
  BOOST_TEST(s.sample_status[bad] == TerminationType::kNonFinite);
  BOOST_TEST(s.sample_status[0] == TerminationType::kConverged);
  BOOST_TEST(s.sample_status[2] == TerminationType::kConverged);
  BOOST_TEST(z.allFinite());
  CheckBestIterate(inner, z0, z, s, bad);
  BOOST_TEST(Residuals(inner, z)(0) <= 1e-10);
  BOOST_TEST(Residuals(inner, z)(2) <= 1e-10);
  // The bad sample did not disturb the others: same result as a clean solve.
  Matrix<double> clean = z0;
  SolverT(options).Solve(inner, clean);
  BOOST_TEST((clean.col(0) - z.col(0)).norm() <= 1e-12);
  BOOST_TEST((clean.col(2) - z.col(2)).norm() <= 1e-12);
}

BOOST_AUTO_TEST_CASE(nan_sample_stops_at_the_nan_iteration) {
  // One evaluation per iteration: evaluation k is iteration k.
  testing::AffineMap<double> inner(testing::RandomSpd<double>(6, 0.0, 0.9, 4),
                                   testing::RandomMatrix<double>(6, 1, 5));
  testing::NanAfterMap<double> map(inner, 3, 0);
  Matrix<double> z = Matrix<double>::Zero(6, 2);
  AndersonSolver<double>::Options options;
  const Summary s = AndersonSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.sample_status[0] == TerminationType::kNonFinite);
  BOOST_TEST(s.sample_iterations[0] == 3);
  BOOST_TEST(std::isfinite(s.sample_residual[0]));
}

BOOST_AUTO_TEST_CASE(picard_diverges_on_expansive_map) {
  testing::ScalarAffineMap<double> map(3, 2.0, 1.0);  // z <- 2z + 1
  const Matrix<double> z0 = Matrix<double>::Zero(3, 2);
  Matrix<double> z = z0;
  const Summary s = PicardSolver<double>().Solve(map, z);
  BOOST_TEST(s.termination_type == TerminationType::kDiverged);
  for (Index b = 0; b < 2; ++b) {
    BOOST_TEST(s.sample_status[b] == TerminationType::kDiverged);
    CheckBestIterate(map, z0, z, s, b);
  }
}

BOOST_AUTO_TEST_CASE(secant_methods_find_the_repelling_fixed_point) {
  // z <- 2z + 1 has the fixed point -1, repelling for Picard; Anderson and
  // Broyden are secant methods and find it (checked independently).
  testing::ScalarAffineMap<double> map(3, 2.0, 1.0);
  Matrix<double> z = Matrix<double>::Zero(3, 2);
  Summary s = AndersonSolver<double>().Solve(map, z);
  BOOST_TEST(s.IsConverged());
  BOOST_TEST((z.array() + 1.0).abs().maxCoeff() <= 1e-8);
  z.setZero();
  s = BroydenSolver<double>().Solve(map, z);
  BOOST_TEST(s.IsConverged());
  BOOST_TEST((z.array() + 1.0).abs().maxCoeff() <= 1e-8);
}

BOOST_AUTO_TEST_CASE(divergence_is_reported_by_quasi_newton_methods) {
  // f(z) = 10 Q z + c, Q orthogonal (n = 50): the expansion rotates, so
  // limited-memory secant models cannot capture it. Without its residual
  // guard Anderson diverges; Broyden diverges.
  const Index n = 50;
  Matrix<double> Q = testing::RandomMatrix<double>(n, n, 1).householderQr().householderQ();
  testing::AffineMap<double> map(10.0 * Q, testing::RandomMatrix<double>(n, 1, 2));
  const Matrix<double> z0 = testing::RandomMatrix<double>(n, 2, 3);
  {
    AndersonSolver<double>::Options options;
    options.residual_factor = 0.0;
    Matrix<double> z = z0;
    const Summary s = AndersonSolver<double>(options).Solve(map, z);
    BOOST_TEST(s.termination_type == TerminationType::kDiverged);
    for (Index b = 0; b < 2; ++b) CheckBestIterate(map, z0, z, s, b);
  }
  {
    Matrix<double> z = z0;
    const Summary s = BroydenSolver<double>().Solve(map, z);
    BOOST_TEST(s.termination_type == TerminationType::kDiverged);
    for (Index b = 0; b < 2; ++b) CheckBestIterate(map, z0, z, s, b);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(expansive_map_never_reported_converged, T, Solvers) {
  // Whatever happens (divergence, or Anderson's safeguard turning it into a
  // stall), no false convergence, and each sample comes back at its best iterate.
  using SolverT = typename SolverOf<T>::type;
  const Index n = 50;
  Matrix<double> Q = testing::RandomMatrix<double>(n, n, 1).householderQr().householderQ();
  testing::AffineMap<double> map(4.0 * Q, testing::RandomMatrix<double>(n, 1, 2));
  const Matrix<double> z0 = testing::RandomMatrix<double>(n, 2, 3);
  Matrix<double> z = z0;
  const Summary s = SolverT(SolverOf<T>::Options()).Solve(map, z);
  BOOST_TEST(!s.IsConverged());
  for (Index b = 0; b < 2; ++b) {
    BOOST_TEST((s.sample_status[b] == TerminationType::kDiverged ||
                s.sample_status[b] == TerminationType::kStalled));
    CheckBestIterate(map, z0, z, s, b);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(no_fixed_point_constant_residual, T, Solvers) {
  // f(z) = z + 1: g = 1 everywhere, so residual differences are all zero
  // (Anderson's Gram matrix is 0, Broyden's denominators are 0). No NaN, no
  // false convergence: a stall, reported at the best iterate.
  using SolverT = typename SolverOf<T>::type;
  testing::ScalarAffineMap<double> map(4, 1.0, 1.0);
  const Matrix<double> z0 = Matrix<double>::Zero(4, 2);
  Matrix<double> z = z0;
  const Summary s = SolverT(SolverOf<T>::Options()).Solve(map, z);
  BOOST_TEST(s.termination_type == TerminationType::kStalled);
  for (Index b = 0; b < 2; ++b) CheckBestIterate(map, z0, z, s, b);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(no_fixed_point_growing_residual, T, Solvers) {
  testing::NoFixedPointMap<double> map(3);
  const Matrix<double> z0 = testing::RandomMatrix<double>(3, 2, 7);
  Matrix<double> z = z0;
  using SolverT = typename SolverOf<T>::type;
  const Summary s = SolverT(SolverOf<T>::Options()).Solve(map, z);
  BOOST_TEST(!s.IsConverged());
  for (Index b = 0; b < 2; ++b) {
    BOOST_TEST(s.sample_status[b] != TerminationType::kConverged);
    CheckBestIterate(map, z0, z, s, b);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(evaluation_budget_stops_each_sample, T, Solvers) {
  // f(z) = z + 1 has no fixed point; the budget in evaluations (12) ends the
  // solve long before max_iterations or the stall rule would. The budget is
  // checked after each iteration: Picard stops at exactly 12 evaluations, a
  // guarded solver at most 1 + max_backtracks trials past it.
  using SolverT = typename SolverOf<T>::type;
  auto options = SolverOf<T>::Options();
  options.max_iterations = 1000;
  options.max_evaluations = 12;
  testing::ScalarAffineMap<double> map(4, 1.0, 1.0);
  Matrix<double> z = Matrix<double>::Zero(4, 3);
  const Summary s = SolverT(options).Solve(map, z);
  BOOST_TEST(s.termination_type == TerminationType::kMaxIterations);
  BOOST_TEST(s.message.find("evaluation budget") != std::string::npos, s.message);
  int slack = 0;
  if constexpr (!std::is_same_v<SolverT, PicardSolver<double>>) slack = 1 + options.max_backtracks;
  for (Index b = 0; b < 3; ++b) {
    BOOST_TEST(s.sample_status[b] == TerminationType::kMaxIterations);
    BOOST_TEST(s.sample_evaluations[b] >= 12);
    BOOST_TEST(s.sample_evaluations[b] <= 12 + slack);
  }
  options.max_evaluations = -1;
  BOOST_CHECK_THROW(SolverT{options}, std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(anderson_rank_deficient_history_without_ridge) {
  // Repeated directions (every iterate a multiple of ones) with ridge 0:
  // the Gram matrix is singular; the condition test must restart, not NaN.
  for (int memory : {2, 4, 10}) {
    testing::CosMap<double> map(5);
    Matrix<double> z = Matrix<double>::Constant(5, 2, 3.0);
    AndersonSolver<double>::Options options;
    options.ridge = 0.0;
    options.memory = memory;
    options.absolute_tolerance = 1e-12;
    const Summary s = AndersonSolver<double>(options).Solve(map, z);
    BOOST_TEST_INFO(s.BriefReport() << "; " << s.message);
    BOOST_TEST(z.allFinite());
    BOOST_TEST(s.IsConverged());
    BOOST_TEST(Residuals(map, z).maxCoeff() <= 1e-12);
  }
  // f constant in every direction but one: f(z) = 0.9 e_0 z_0 + c.
  Matrix<double> A = Matrix<double>::Zero(4, 4);
  A(0, 0) = 0.9;
  testing::AffineMap<double> flat(A, testing::RandomMatrix<double>(4, 1, 11));
  // ... and entirely constant: f(z) = 0.25.
  testing::CosMap<double> constant(4, 0.0, 0.25);
  for (const FixedPointMap<double>* map : {static_cast<const FixedPointMap<double>*>(&flat),
                                           static_cast<const FixedPointMap<double>*>(&constant)}) {
    for (double ridge : {0.0, 1e-10}) {
      Matrix<double> z = testing::RandomMatrix<double>(4, 2, 12);
      AndersonSolver<double>::Options options;
      options.ridge = ridge;
      options.absolute_tolerance = 1e-12;
      const Summary s = AndersonSolver<double>(options).Solve(*map, z);
      BOOST_TEST_INFO(s.BriefReport() << "; " << s.message);
      BOOST_TEST(z.allFinite());
      BOOST_TEST(s.IsConverged());
      BOOST_TEST(Residuals(*map, z).maxCoeff() <= 1e-12);
    }
  }
}

BOOST_AUTO_TEST_CASE(invalid_options_name_the_field) {
  auto check = [](auto options, auto make, const std::string& field) {
    BOOST_TEST_CONTEXT(field) {
      BOOST_CHECK_EXCEPTION(make(options), std::invalid_argument,
                            [&](const std::invalid_argument& e) {
                              return std::string(e.what()).find(field) != std::string::npos;
                            });
    }
  };
  auto picard = [](const PicardSolver<double>::Options& o) { PicardSolver<double> s(o); };
  auto anderson = [](const AndersonSolver<double>::Options& o) { AndersonSolver<double> s(o); };
  auto broyden = [](const BroydenSolver<double>::Options& o) { BroydenSolver<double> s(o); };
  { PicardSolver<double>::Options o; o.damping = 0; check(o, picard, "damping"); }
  { PicardSolver<double>::Options o; o.absolute_tolerance = -1; check(o, picard, "absolute_tolerance"); }
  { AndersonSolver<double>::Options o; o.memory = 0; check(o, anderson, "memory"); }
  { AndersonSolver<double>::Options o; o.mixing = 0; check(o, anderson, "mixing"); }
  { AndersonSolver<double>::Options o; o.mixing = -0.5; check(o, anderson, "mixing"); }
  { AndersonSolver<double>::Options o; o.ridge = std::nan(""); check(o, anderson, "ridge"); }
  { AndersonSolver<double>::Options o; o.absolute_tolerance = -1e-3; check(o, anderson, "absolute_tolerance"); }
  { AndersonSolver<double>::Options o; o.max_stall_iterations = -1; check(o, anderson, "max_stall_iterations"); }
  { BroydenSolver<double>::Options o; o.memory = 0; check(o, broyden, "memory"); }
  { BroydenSolver<double>::Options o; o.max_backtracks = -1; check(o, broyden, "max_backtracks"); }
  { BroydenSolver<double>::Options o; o.absolute_tolerance = -1; check(o, broyden, "absolute_tolerance"); }
  { BroydenSolver<double>::Options o; o.max_iterations = -5; check(o, broyden, "max_iterations"); }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(mismatched_shapes_and_empty_batch, T, Solvers) {
  using SolverT = typename SolverOf<T>::type;
  const SolverT solver(SolverOf<T>::Options());
  testing::ScalarAffineMap<double> map(4, 0.5, 1.0);
  Matrix<double> wrong = Matrix<double>::Zero(3, 2);
  BOOST_CHECK_EXCEPTION(solver.Solve(map, wrong), std::invalid_argument,
                        [](const std::invalid_argument& e) {
                          const std::string m = e.what();
                          return m.find('3') != std::string::npos && m.find('4') != std::string::npos;
                        });
  BOOST_TEST(wrong.isZero());
  Matrix<double> empty(4, 0);
  BOOST_CHECK_EXCEPTION(solver.Solve(map, empty), std::invalid_argument,
                        [](const std::invalid_argument& e) {
                          const std::string m = e.what();
                          return m.find("empty") != std::string::npos &&
                                 m.find('0') != std::string::npos;
                        });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(callback_abort, T, Solvers) {
  using SolverT = typename SolverOf<T>::type;
  testing::AffineMap<double> map(testing::RandomSpd<double>(10, 0.0, 0.99, 8),
                                 testing::RandomMatrix<double>(10, 1, 9));
  auto options = SolverOf<T>::Options();
  options.absolute_tolerance = 1e-14;
  options.record_trace = true;
  int calls = 0;
  options.callback = [&calls](const IterationSummary& it) {
    ++calls;
    return it.iteration == 2 ? CallbackReturnType::kAbort : CallbackReturnType::kContinue;
  };
  const Matrix<double> z0 = testing::RandomMatrix<double>(10, 3, 10);
  Matrix<double> z = z0;
  const Summary s = SolverT(options).Solve(map, z);
  BOOST_TEST(s.termination_type == TerminationType::kUserAbort);
  BOOST_TEST(s.iterations == 2);
  BOOST_TEST(calls == 3);
  BOOST_TEST(s.trace.size() == 3u);
  for (Index b = 0; b < 3; ++b) {
    BOOST_TEST(s.sample_status[b] == TerminationType::kUserAbort);
    CheckBestIterate(map, z0, z, s, b);
  }
}
