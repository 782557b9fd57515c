// SolveMixedPrecision (mixed_precision.h): the float stage's result is
// finished in double to the double tolerance, judged on residuals computed in
// double (checked here independently), in fewer double iterations than a
// solve from the start; a float convergence is never reported as a double
// one; a sample float cannot hold starts the double stage where it started;
// mismatched maps are refused.
#define BOOST_TEST_MODULE mixed_precision
#include <boost/test/unit_test.hpp>

#include <implicit/solvers/anderson.h>
#include <implicit/solvers/mixed_precision.h>
#include <implicit/solvers/picard.h>

#include <cmath>
#include <stdexcept>

#include "support/h2_solver_problems.h"
#include "support/test_problems.h"

using namespace implicit;

namespace {

constexpr Index kN = 24, kInput = 10, kBatch = 40;

// z = tanh(W z + U x + b), |W|_2 = 0.9, in float and double from the same
// numbers (the float map's are the double ones rounded).
template <typename Scalar>
testing::TanhDeqMap<Scalar> Map() {
  testing::TanhDeqMap<Scalar> map(kN, kInput, 0.9, 61);
  map.SetInput(testing::RandomMatrix<Scalar>(kInput, kBatch, 62));
  return map;
}

template <typename SolverT>
SolverT WithTolerance(double tolerance, int max_iterations = 1000) {
  typename SolverT::Options o;
  o.absolute_tolerance = tolerance;
  o.max_iterations = max_iterations;
  return SolverT(o);
}

template <template <typename> class SolverT>
void CheckFinishesInDouble() {
  const auto map_f = Map<float>();
  const auto map_d = Map<double>();
  const Matrix<double> z0 = testing::RandomMatrix<double>(kN, kBatch, 63, 1.0);
  const double tol = 1e-10;

  Matrix<double> reference = z0;
  const Summary pure = WithTolerance<SolverT<double>>(tol).Solve(map_d, reference);
  BOOST_REQUIRE(pure.IsConverged());

  Matrix<double> z = z0;
  const MixedPrecisionSummary s = SolveMixedPrecision(WithTolerance<SolverT<float>>(1e-4), map_f,
                                                      WithTolerance<SolverT<double>>(tol), map_d, z);
  BOOST_TEST(s.single.IsConverged(), s.single.FullReport());
  BOOST_TEST(s.IsConverged(), s.full.FullReport());
  BOOST_TEST(s.single.iterations > 0);
  BOOST_TEST(s.full.iterations < pure.iterations, "double iterations " << s.full.iterations << " against "
                                                                        << pure.iterations);
  const std::vector<double> r = testing::IndependentResiduals<double>(map_d, z);
  for (Index b = 0; b < kBatch; ++b) {
    BOOST_TEST(r[b] <= tol * 1.01, "sample " << b);
    // A contraction of rate 0.9 has one fixed point: |z - z*| <= |r| / (1 - 0.9).
    BOOST_TEST((z.col(b) - reference.col(b)).norm() <= 20 * tol, "sample " << b);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(finishes_in_double_what_float_started) {
  CheckFinishesInDouble<PicardSolver>();
  CheckFinishesInDouble<AndersonSolver>();
}

// The float stage converges (1e-4 in float) but the double stage may not
// iterate: every sample whose double residual is above 1e-10 is reported
// unconverged, with its double residual.
BOOST_AUTO_TEST_CASE(a_float_convergence_is_not_a_double_one) {
  const auto map_f = Map<float>();
  const auto map_d = Map<double>();
  Matrix<double> z = testing::RandomMatrix<double>(kN, kBatch, 64, 1.0);
  const MixedPrecisionSummary s =
      SolveMixedPrecision(WithTolerance<PicardSolver<float>>(1e-4), map_f,
                          WithTolerance<PicardSolver<double>>(1e-10, /*max_iterations=*/0), map_d, z);
  BOOST_TEST(s.single.IsConverged());
  BOOST_TEST(!s.IsConverged());
  const std::vector<double> r = testing::IndependentResiduals<double>(map_d, z);
  for (Index b = 0; b < kBatch; ++b) {
    BOOST_TEST(r[b] > 1e-10, "sample " << b);
    BOOST_TEST((s.full.sample_status[b] != TerminationType::kConverged), "sample " << b);
    BOOST_TEST(std::abs(s.full.sample_residual[b] - r[b]) <= 1e-12, "sample " << b);
  }
}

// Sample 3 starts at 1e60, beyond float: its float stage is not finite, so
// its double stage starts at 1e60 (tanh saturates: f is finite there) and
// converges with the others.
BOOST_AUTO_TEST_CASE(a_sample_float_cannot_hold_starts_from_its_own_state) {
  const auto map_f = Map<float>();
  const auto map_d = Map<double>();
  Matrix<double> z = testing::RandomMatrix<double>(kN, kBatch, 65, 1.0);
  z.col(3).setConstant(1e60);
  const MixedPrecisionSummary s = SolveMixedPrecision(WithTolerance<AndersonSolver<float>>(1e-4), map_f,
                                                      WithTolerance<AndersonSolver<double>>(1e-10), map_d, z);
  BOOST_TEST((s.single.sample_status[3] != TerminationType::kConverged));
  BOOST_TEST(s.single.sample_status[0] == TerminationType::kConverged);
  BOOST_TEST(s.IsConverged(), s.full.FullReport());
  BOOST_TEST(s.full.sample_iterations[3] > s.full.sample_iterations[0]);
  const std::vector<double> r = testing::IndependentResiduals<double>(map_d, z);
  for (Index b = 0; b < kBatch; ++b) BOOST_TEST(r[b] <= 1e-10 * 1.01, "sample " << b);
}

BOOST_AUTO_TEST_CASE(maps_of_other_dimensions_are_refused) {
  const auto map_f = Map<float>();
  const auto map_d = Map<double>();
  testing::TanhDeqMap<double> other(kN + 1, kInput, 0.9, 61);
  PicardSolver<float> coarse;
  PicardSolver<double> fine;
  Matrix<double> z = Matrix<double>::Zero(kN, kBatch);
  BOOST_CHECK_THROW(SolveMixedPrecision(coarse, map_f, fine, other, z), std::invalid_argument);
  Matrix<double> wrong_rows = Matrix<double>::Zero(kN + 1, kBatch);
  BOOST_CHECK_THROW(SolveMixedPrecision(coarse, map_f, fine, map_d, wrong_rows), std::invalid_argument);
  BOOST_TEST((z.array() == 0.0).all());  // nothing was solved
}
