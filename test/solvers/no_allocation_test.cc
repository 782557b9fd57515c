// The iteration loops of the forward solvers never allocate (Eigen) heap memory.
//
// Method: EIGEN_RUNTIME_NO_MALLOC is defined before any include, so every
// Eigen heap allocation first checks Eigen::internal::is_malloc_allowed().
// The solvers are header-only templates, so this translation unit
// instantiates them with the check compiled in. A callback forbids allocation
// at the end of every iteration before the last one (and allows it again at
// its start), so exactly the work between two callbacks - the solver's update
// and the batch evaluation of f - runs with allocation forbidden; Begin() and
// Finish() may allocate. support/no_malloc_guard.h makes a forbidden allocation
// throw, so it fails the test instead of passing silently in Release builds.
#include "support/no_malloc_guard.h"

#define BOOST_TEST_MODULE no_allocation
#include <boost/test/unit_test.hpp>

#include <implicit/core/energy_maps.h>
#include <implicit/solvers/anderson.h>
#include <implicit/solvers/broyden.h>
#include <implicit/solvers/lbfgs.h>
#include <implicit/solvers/picard.h>

#include "support/solver_test_maps.h"
#include "support/test_problems.h"

using namespace implicit;
using implicit_no_malloc_test::EigenAssertion;

namespace {

// Options that run exactly `iterations` iterations with allocation forbidden
// inside the loop; *calls counts callbacks.
template <typename Options>
Options NoMallocInLoop(Options options, int iterations, int* calls) {
  options.max_iterations = iterations;
  options.absolute_tolerance = 0.0;  // never converge: run to the budget
  options.relative_tolerance = 0.0;
  options.max_stall_iterations = 0;
  options.divergence_threshold = 1e300;
  options.record_trace = true;
  options.callback = [iterations, calls](const IterationSummary& it) {
    Eigen::internal::set_is_malloc_allowed(true);
    ++*calls;
    if (it.iteration < iterations && it.num_active > 0) {
      Eigen::internal::set_is_malloc_allowed(false);
    }
    return CallbackReturnType::kContinue;
  };
  return options;
}

template <typename SolverT>
struct ScalarOf;
template <template <typename> class SolverT, typename Scalar>
struct ScalarOf<SolverT<Scalar>> {
  using type = Scalar;
};

// Solves with allocation forbidden inside the loop. Returns true (and logs
// the Eigen message) when the loop allocated.
template <typename SolverT, typename Scalar = typename ScalarOf<SolverT>::type>
bool RunsWithoutAllocation(typename SolverT::Options options,
                           const FixedPointMap<typename ScalarOf<SolverT>::type>& map,
                           Matrix<typename ScalarOf<SolverT>::type> z, int iterations = 30) {
  int calls = 0;
  const SolverT solver(NoMallocInLoop(options, iterations, &calls));
  try {
    const Summary s = solver.Solve(map, z);
    Eigen::internal::set_is_malloc_allowed(true);
    BOOST_TEST_INFO(s.BriefReport());
    // The loop really ran: to the budget, or until every sample hit a residual
    // of exactly 0 (tolerance 0).
    BOOST_TEST((s.iterations == iterations || s.IsConverged()));
    BOOST_TEST(s.iterations >= 5);
    BOOST_TEST(calls == s.iterations + 1);
    return false;
  } catch (const EigenAssertion& e) {
    Eigen::internal::set_is_malloc_allowed(true);
    BOOST_TEST_MESSAGE(solver.name() << ": allocation inside the loop: " << e.what());
    return true;
  }
}

// A map that allocates a temporary on every evaluation (negative control).
template <typename Scalar>
class AllocatingMap : public FixedPointMap<Scalar> {
 public:
  explicit AllocatingMap(const FixedPointMap<Scalar>& inner) : inner_(inner) {}
  Index dimension() const override { return inner_.dimension(); }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    Matrix<Scalar> copy = z;  // heap allocation
    inner_.Evaluate(copy, out);
  }

 private:
  const FixedPointMap<Scalar>& inner_;
};

template <typename Scalar>
testing::AffineMap<Scalar> Affine(Index n, double norm, unsigned seed) {
  return testing::AffineMap<Scalar>(testing::RandomMatrixWithNorm<Scalar>(n, n, norm, seed),
                                    testing::RandomMatrix<Scalar>(n, 1, seed + 1));
}

}  // namespace

BOOST_AUTO_TEST_CASE(guard_catches_eigen_allocations) {
  Eigen::internal::set_is_malloc_allowed(false);
  bool thrown = false;
  try {
    Matrix<double> m(64, 64);
    m.setZero();
  } catch (const EigenAssertion&) {
    thrown = true;
  }
  Eigen::internal::set_is_malloc_allowed(true);
  BOOST_TEST(thrown);
}

BOOST_AUTO_TEST_CASE(guard_catches_an_allocating_map_inside_the_loop) {
  const auto inner = Affine<double>(8, 0.9, 1);
  AllocatingMap<double> map(inner);
  const Matrix<double> z = testing::RandomMatrix<double>(8, 3, 3);
  BOOST_TEST(RunsWithoutAllocation<PicardSolver<double>>(PicardSolver<double>::Options(), map, z));
  BOOST_TEST(
      RunsWithoutAllocation<AndersonSolver<double>>(AndersonSolver<double>::Options(), map, z));
  BOOST_TEST(
      RunsWithoutAllocation<BroydenSolver<double>>(BroydenSolver<double>::Options(), map, z));
}

BOOST_AUTO_TEST_CASE(picard_loop_does_not_allocate) {
  const Matrix<double> z = testing::RandomMatrix<double>(16, 4, 3);
  PicardSolver<double>::Options options;
  options.damping = 0.7;
  BOOST_TEST(!RunsWithoutAllocation<PicardSolver<double>>(options, Affine<double>(16, 0.9, 1), z));
  BOOST_TEST(!RunsWithoutAllocation<PicardSolver<float>>(
      PicardSolver<float>::Options(), Affine<float>(16, 0.9, 1), z.cast<float>().eval()));
}

BOOST_AUTO_TEST_CASE(anderson_loop_does_not_allocate) {
  const Matrix<double> z = testing::RandomMatrix<double>(16, 4, 3);
  for (int memory : {1, 5}) {
    AndersonSolver<double>::Options options;
    options.memory = memory;  // 30 iterations wrap the ring buffer
    options.mixing = 0.8;
    BOOST_TEST(
        !RunsWithoutAllocation<AndersonSolver<double>>(options, Affine<double>(16, 0.95, 1), z));
  }
  BOOST_TEST(!RunsWithoutAllocation<AndersonSolver<float>>(
      AndersonSolver<float>::Options(), Affine<float>(16, 0.95, 1), z.cast<float>().eval()));
}

BOOST_AUTO_TEST_CASE(anderson_restart_paths_do_not_allocate) {
  // Ill-conditioned (rank-one) history with ridge 0: condition restarts.
  AndersonSolver<double>::Options options;
  options.ridge = 0.0;
  BOOST_TEST(!RunsWithoutAllocation<AndersonSolver<double>>(
      options, testing::CosMap<double>(6), Matrix<double>::Constant(6, 2, 2.0)));
  // Zero Gram matrix (g constant).
  BOOST_TEST(!RunsWithoutAllocation<AndersonSolver<double>>(
      AndersonSolver<double>::Options(), testing::ScalarAffineMap<double>(4, 1.0, 1.0),
      Matrix<double>::Zero(4, 2)));
  // Expansive rotation: bad extrapolations trigger the restart-from-best safeguard.
  const Index n = 20;
  Matrix<double> Q = testing::RandomMatrix<double>(n, n, 1).householderQr().householderQ();
  testing::AffineMap<double> expansive(10.0 * Q, testing::RandomMatrix<double>(n, 1, 2));
  BOOST_TEST(!RunsWithoutAllocation<AndersonSolver<double>>(
      AndersonSolver<double>::Options(), expansive, testing::RandomMatrix<double>(n, 2, 3)));
}

BOOST_AUTO_TEST_CASE(broyden_loop_does_not_allocate) {
  const Matrix<double> z = testing::RandomMatrix<double>(16, 4, 3);
  for (int memory : {3, 20}) {  // 3: restarts when the memory is full
    BroydenSolver<double>::Options options;
    options.memory = memory;
    BOOST_TEST(
        !RunsWithoutAllocation<BroydenSolver<double>>(options, Affine<double>(16, 0.95, 1), z));
  }
  BOOST_TEST(!RunsWithoutAllocation<BroydenSolver<float>>(
      BroydenSolver<float>::Options(), Affine<float>(16, 0.95, 1), z.cast<float>().eval()));
}

BOOST_AUTO_TEST_CASE(broyden_residual_guard_does_not_allocate) {
  // Far starts make the batched line search backtrack.
  BroydenSolver<double>::Options options;
  options.residual_factor = 1.0;
  Matrix<double> z(3, 3);
  z << 10.0, -3.0, 0.5, 20.0, 2.0, -0.1, -8.0, 1.0, 0.2;
  BOOST_TEST(!RunsWithoutAllocation<BroydenSolver<double>>(options, testing::AtanMap<double>(3), z));
  // Zero denominators (g constant): the guard restarts.
  BOOST_TEST(!RunsWithoutAllocation<BroydenSolver<double>>(
      options, testing::ScalarAffineMap<double>(4, 1.0, 1.0), Matrix<double>::Zero(4, 2)));
}

namespace {
// E(x) = 0.5 sum_i d_i x_i^2 + 0.25 sum_i x_i^4 (no temporaries, so that the
// test sees the solvers' own allocations only); usable on column subsets.
class QuarticEnergy : public Energy<double> {
 public:
  explicit QuarticEnergy(Index n) : d_(Vector<double>::LinSpaced(n, 0.1, 1.0)) {}
  Index dimension() const override { return d_.size(); }
  void Value(ConstMatrixRef<double> x, VectorRef<double> values) const override {
    for (Index b = 0; b < x.cols(); ++b)
      values(b) = 0.5 * (d_.array() * x.col(b).array().square()).sum() +
                  0.25 * x.col(b).array().square().square().sum();
  }
  void Gradient(ConstMatrixRef<double> x, MatrixRef<double> grad) const override {
    for (Index b = 0; b < x.cols(); ++b)
      grad.col(b) = (d_.array() * x.col(b).array() + x.col(b).array().cube()).matrix();
  }
  void HessianVectorProduct(ConstMatrixRef<double> x, ConstMatrixRef<double> v,
                            MatrixRef<double> out) const override {
    for (Index b = 0; b < x.cols(); ++b)
      out.col(b) = ((d_.array() + 3.0 * x.col(b).array().square()) * v.col(b).array()).matrix();
  }
  bool SupportsSubsets() const override { return true; }

 private:
  Vector<double> d_;
};
}  // namespace

BOOST_AUTO_TEST_CASE(energy_guard_and_active_set_do_not_allocate) {
  // An energy map: every iteration evaluates E with f, backtracks where the
  // guard rejects a trial, and evaluates only the active columns (sample 0
  // starts at the minimiser, converges at once and leaves the active set).
  QuarticEnergy energy(8);
  GradientStepMap<double> map(energy, 0.5);
  Matrix<double> z = testing::RandomMatrix<double>(8, 5, 4, 2.0);
  z.col(0).setZero();
  for (bool use_energy : {true, false}) {
    BOOST_TEST_CONTEXT("use_energy " << use_energy) {
      PicardSolver<double>::Options picard;
      AndersonSolver<double>::Options anderson;
      BroydenSolver<double>::Options broyden;
      LbfgsSolver<double>::Options lbfgs;
      picard.use_energy = anderson.use_energy = broyden.use_energy = lbfgs.use_energy = use_energy;
      BOOST_TEST(!RunsWithoutAllocation<PicardSolver<double>>(picard, map, z, 20));
      BOOST_TEST(!RunsWithoutAllocation<AndersonSolver<double>>(anderson, map, z, 20));
      BOOST_TEST(!RunsWithoutAllocation<BroydenSolver<double>>(broyden, map, z, 20));
      BOOST_TEST(!RunsWithoutAllocation<LbfgsSolver<double>>(lbfgs, map, z, 20));
    }
  }
}

BOOST_AUTO_TEST_CASE(active_set_with_per_sample_data_does_not_allocate) {
  // Samples with different shifts converge after different numbers of steps
  // and leave the active set; the rest are evaluated as a compacted block.
  Matrix<double> c = testing::RandomMatrix<double>(6, 5, 7, 3.0);
  c.col(0).setZero();  // z = 0 is its fixed point: converged at once
  const testing::PerSampleShiftMap map(c);
  Matrix<double> z = Matrix<double>::Zero(6, 5);
  BOOST_TEST(!RunsWithoutAllocation<PicardSolver<double>>(PicardSolver<double>::Options(), map, z, 20));
  BOOST_TEST(!RunsWithoutAllocation<AndersonSolver<double>>(AndersonSolver<double>::Options(), map, z, 20));
  BOOST_TEST(!RunsWithoutAllocation<BroydenSolver<double>>(BroydenSolver<double>::Options(), map, z, 20));
}
