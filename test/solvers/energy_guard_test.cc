// Energy-guarded acceleration, the energy stall rule and the active set
// (issue 10): properties on modern Hopfield energies.
#define BOOST_TEST_MODULE energy_guard
#include <boost/test/unit_test.hpp>

#include <implicit/core/clamped_energy.h>
#include <implicit/core/digits.h>
#include <implicit/core/energy_maps.h>
#include <implicit/layers/mlp_block_map.h>
#include <implicit/layers/energy_transformer_map.h>
#include <implicit/layers/hopfield.h>
#include <implicit/solvers/anderson.h>
#include <implicit/solvers/broyden.h>
#include <implicit/solvers/internal/sample_judge.h>
#include <implicit/solvers/picard.h>
#include <implicit/solvers/registry.h>

#include "support/active_set_checks.h"
#include "support/fused_energy_checks.h"
#include "support/solver_checks.h"
#include "support/solver_test_maps.h"
#include "support/test_problems.h"

#include <Eigen/Eigenvalues>

#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

using namespace implicit;
using implicit::testing::CheckActiveSetMatchesWholeBatch;
using implicit::testing::Residuals;

namespace {

template <typename Scalar>
ModernHopfieldEnergy<Scalar> Hopfield(const Matrix<Scalar>& patterns, double beta) {
  typename ModernHopfieldEnergy<Scalar>::Options o;
  o.beta = beta;
  o.learn_beta = false;
  return ModernHopfieldEnergy<Scalar>(patterns, o);
}

// The energy-aware solvers by name (the registry), with shared options.
template <typename Scalar>
std::unique_ptr<Solver<Scalar>> Make(const std::string& name, const SolverOptions& common) {
  return MakeSolver<Scalar>(name, {}, common);
}
const std::vector<std::string> kSolvers = {"picard", "anderson", "broyden", "lbfgs", "newton"};

template <typename Scalar>
void CheckEnergyNeverIncreases(double tolerance) {
  const Index n = 16, N = 40, B = 24;
  const Matrix<Scalar> X = testing::RandomMatrix<Scalar>(n, N, 11);
  const auto energy = Hopfield<Scalar>(X, 8.0);
  CccpMap<Scalar> map(energy);
  // Queries: stored patterns plus noise, some near several patterns at once.
  const Matrix<Scalar> z0 = X.leftCols(B) + testing::RandomMatrix<Scalar>(n, B, 12, 0.8);
  for (const std::string& name : kSolvers) {
    BOOST_TEST_CONTEXT(name) {
      Matrix<Scalar> z = z0;
      Vector<Scalar> previous(B), current(B);
      energy.Value(z, previous);
      int violations = 0;
      SolverOptions common;
      common.max_iterations = 300;
      common.absolute_tolerance = std::is_same<Scalar, float>::value ? 1e-4 : 1e-10;
      // The solver updates z in place: the callback sees every accepted iterate.
      common.callback = [&](const IterationSummary&) {
        energy.Value(z, current);
        for (Index b = 0; b < B; ++b) {
          const double before = previous(b), after = current(b);
          if (after > before + tolerance * (1.0 + std::abs(before))) ++violations;
        }
        previous = current;
        return CallbackReturnType::kContinue;
      };
      // Anderson's predicted-gain gate and the fast-contraction rule (Anderson,
      // Broyden) off: at beta 8 they would take plain steps throughout, and
      // the accelerated steps are what is tested here.
      const auto solver =
          name == "anderson"
              ? MakeSolver<Scalar>(name, {{"max_predicted_residual", "1"}, {"fast_contraction", "0"}}, common)
          : name == "broyden" ? MakeSolver<Scalar>(name, {{"fast_contraction", "0"}}, common)
                              : Make<Scalar>(name, common);
      const Summary s = solver->Solve(map, z);
      BOOST_TEST_INFO(s.BriefReport());
      BOOST_TEST(s.IsConverged());
      BOOST_TEST(violations == 0);
      if (name != "picard" && name != "newton") {
        long accelerated = 0;
        for (int a : s.sample_accelerated_steps) accelerated += a;
        BOOST_TEST(accelerated > 0);  // the guard did not simply turn it into Picard
      }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(guarded_iterates_never_increase_the_energy_double) {
  CheckEnergyNeverIncreases<double>(1e-13);
}

BOOST_AUTO_TEST_CASE(guarded_iterates_never_increase_the_energy_float) {
  CheckEnergyNeverIncreases<float>(1e-5);
}

// Two symmetric stored patterns (1, a) and (-1, a) with beta = 4: on the
// symmetry line the fixed point (0, a) is a saddle of E (Hessian diag(1 - beta,
// 1)). Started slightly off it, the map's Jacobian there is diag(beta, 0), so
// a root-finder's secant model points straight at the saddle. Every
// energy-aware solver must end at a minimum (PSD Hessian, |xi_1| near 1).
BOOST_AUTO_TEST_CASE(energy_aware_solvers_leave_a_saddle_for_a_minimum) {
  const double a = 0.5, beta = 4.0;
  Matrix<double> X(2, 2);
  X << 1.0, -1.0, a, a;
  const auto energy = Hopfield<double>(X, beta);
  CccpMap<double> map(energy);
  Matrix<double> z0(2, 4);
  z0 << 1e-4, -1e-4, 3e-3, -2e-6,  //
      a, a + 0.1, a - 0.2, a;
  for (const std::string& name : kSolvers) {
    BOOST_TEST_CONTEXT(name) {
      SolverOptions common;
      common.max_iterations = 500;
      common.absolute_tolerance = 1e-10;
      Matrix<double> z = z0;
      const Summary s = Make<double>(name, common)->Solve(map, z);
      BOOST_TEST_INFO(s.BriefReport());
      BOOST_TEST(s.IsConverged());
      for (Index b = 0; b < z.cols(); ++b) {
        BOOST_TEST_CONTEXT("sample " << b) {
          // The Hessian at z_b, column by column: a batch of two copies of z_b.
          const Matrix<double> at = z.col(b).replicate(1, 2);
          Matrix<double> H(2, 2);
          energy.HessianVectorProduct(at, Matrix<double>::Identity(2, 2), H);
          const double smallest = Eigen::SelfAdjointEigenSolver<Matrix<double>>(H).eigenvalues()(0);
          BOOST_TEST(smallest >= -1e-8);
          BOOST_TEST(std::abs(z(0, b)) >= 0.5);
        }
      }
    }
  }
  // Control: the same Anderson without the energy (residual guard only) and
  // without the Picard fallback is drawn to the saddle, which is why the
  // guard must use the energy.
  AndersonSolver<double>::Options o;
  o.use_energy = false;
  o.warmup_iterations = 0;
  o.progress_window = 0;
  o.absolute_tolerance = 1e-10;
  o.max_iterations = 500;
  Matrix<double> z = z0;
  const Summary s = AndersonSolver<double>(o).Solve(map, z);
  int at_saddle = 0;
  for (Index b = 0; b < z.cols(); ++b) {
    if (s.sample_status[b] == TerminationType::kConverged && std::abs(z(0, b)) < 1e-6) ++at_saddle;
  }
  BOOST_TEST_MESSAGE("unguarded anderson converged to the saddle on " << at_saddle << "/4 samples");
  BOOST_TEST(at_saddle > 0);
}

// The active set changes the work, not the iterates.
BOOST_AUTO_TEST_CASE(active_set_gives_the_same_iterates_as_whole_batch_solves) {
  const Index n = 12, N = 30, B = 16;
  const Matrix<double> X = testing::RandomMatrix<double>(n, N, 21);
  const auto energy = Hopfield<double>(X, 4.0);
  CccpMap<double> map(energy);
  BOOST_REQUIRE(map.SupportsSubsets());
  CheckActiveSetMatchesWholeBatch<double>(map, X.leftCols(B) + testing::RandomMatrix<double>(n, B, 22, 0.5),
                                          kSolvers);
}

// Maps with per-sample data join the active set through EvaluateColumns: a DEQ
// block with an input injection (no energy: the residual guard), and the
// Energy Transformer's map with per-sample clamps (the energy guard).
BOOST_AUTO_TEST_CASE(active_set_covers_maps_with_per_sample_data) {
  const Index B = 12;
  MlpBlockMap<double>::Options o;
  o.state_dim = 6;
  o.hidden_dim = 9;
  o.input_dim = 4;
  o.activation = BlockActivation::kTanh;
  o.init_lipschitz = 0.8;
  MlpBlockMap<double> block(o);
  block.SetInput(testing::RandomMatrix<double>(4, B, 41, 2.0));
  BOOST_REQUIRE(!block.SupportsSubsets());
  BOOST_TEST_CONTEXT("mlp block") {
    CheckActiveSetMatchesWholeBatch<double>(block, Matrix<double>::Zero(6, B), {"picard", "anderson", "broyden"});
  }

  EnergyTransformer<double>::Options eo;
  eo.num_tokens = 4;
  eo.token_dim = 5;
  eo.num_heads = 2;
  eo.head_dim = 3;
  eo.num_memories = 6;
  EnergyTransformer<double> et(eo);
  et.Initialize(43, 0.7);
  EnergyTransformerMap<double> et_map(et, 0.5);
  Matrix<double> token_free = Matrix<double>::Zero(4, B);
  for (Index b = 0; b < B; ++b) token_free(b % 4, b) = token_free((b + 1 + b / 4) % 4, b) = 1;
  const Matrix<double> image = testing::RandomMatrix<double>(20, B, 44);
  et_map.SetClamp(TokenMask<double>(token_free, 5), image);
  BOOST_REQUIRE(!et_map.SupportsSubsets());
  BOOST_TEST_CONTEXT("clamped energy transformer") {
    // (Newton: the ET map's Jacobian is not symmetric, so Newton takes its
    // matrix-free residual path, which evaluates whole batches.)
    CheckActiveSetMatchesWholeBatch<double>(et_map, image, {"picard", "anderson", "broyden", "lbfgs"}, 3000);
  }
}

// Energies with per-sample data join the active set through
// Energy::GradientColumns: a Hopfield energy with per-sample clamps (half of
// each query held at its values) under the gradient-step map.
BOOST_AUTO_TEST_CASE(active_set_covers_energies_with_per_sample_data) {
  const Index n = 10, N = 24, B = 12;
  const Matrix<double> X = testing::RandomMatrix<double>(n, N, 51);
  auto base = Hopfield<double>(X, 3.0);
  ClampedEnergy<double> clamped(base);
  Matrix<double> free_mask = Matrix<double>::Zero(n, B);
  for (Index b = 0; b < B; ++b)
    for (Index i = 0; i < n; ++i) free_mask(i, b) = (i + b) % 3 == 0 ? 0.0 : 1.0;
  const Matrix<double> z0 = X.leftCols(B) + testing::RandomMatrix<double>(n, B, 52, 0.5);
  clamped.SetClamp(free_mask, z0);
  GradientStepMap<double> map(clamped, 1.0);
  BOOST_REQUIRE(!map.SupportsSubsets());
  testing::CheckColumnEvaluation<double>(map, z0, 1e-12);
  CheckActiveSetMatchesWholeBatch<double>(map, z0, {"picard", "anderson", "broyden", "lbfgs"});
  CccpMap<double> cccp(clamped);
  testing::CheckColumnEvaluation<double>(cccp, z0, 1e-12);
  CheckActiveSetMatchesWholeBatch<double>(cccp, z0, {"picard", "anderson"});
  // A clamp over an energy with per-sample data (here: another clamp) cannot
  // evaluate blocks: it says so, and a column evaluation throws.
  ClampedEnergy<double> nested(static_cast<Energy<double>&>(clamped));  // not the copy constructor
  nested.SetClamp(Matrix<double>::Ones(n, B), z0);
  BOOST_TEST(!nested.SupportsColumnSubsets());
  Matrix<double> grad(n, 2);
  Vector<double> values(2);
  BOOST_CHECK_THROW(nested.GradientColumns(z0.leftCols(2), {0, 1}, grad, values), std::logic_error);
}

// The two hopfield-digits queries (all 1797 digits stored, beta 2, bottom half
// zeroed) that the old stall rule (no new best residual in 50 iterations)
// ended as "stalled" at a residual of 1e-3 while they were passing a saddle
// region with the energy still falling. With the energy stall rule every
// solver carries them to convergence.
BOOST_AUTO_TEST_CASE(digits_queries_passing_a_saddle_region_converge) {
  const DigitsDataset digits = LoadDigits(std::string(IMPLICIT_DATA_DIR) + "/digits.csv.gz");
  const Matrix<double> X = digits.Scaled();
  Matrix<double> queries(64, 2);
  queries.col(0) = X.col(916);
  queries.col(1) = X.col(1417);
  queries.bottomRows(32).setZero();
  const auto energy = Hopfield<double>(X, 2.0);
  CccpMap<double> map(energy);
  SolverOptions common;
  common.max_iterations = 500;
  common.absolute_tolerance = 1e-8;
  for (const std::string& name : kSolvers) {
    BOOST_TEST_CONTEXT(name) {
      Matrix<double> z = queries;
      const Summary s = Make<double>(name, common)->Solve(map, z);
      BOOST_TEST_INFO(s.BriefReport());
      BOOST_TEST(s.IsConverged());
      BOOST_TEST(Residuals(map, z).maxCoeff() <= 1e-8);
    }
  }
  // Control: judged by the residual alone, Picard declares at least one stalled.
  common.use_energy = false;
  Matrix<double> z = queries;
  const Summary s = Make<double>("picard", common)->Solve(map, z);
  BOOST_TEST(!s.IsConverged());
  BOOST_TEST(s.termination_type == TerminationType::kStalled);
}

// The per-sample verdict itself (internal/sample_judge.h), on made-up
// observations: with the energy a sample whose residual rises while E falls
// goes on (and is kept at its lowest-energy iterate); it stalls only after
// max_stall_iterations observations in which neither E nor the residual set a
// record; judged by the residual alone the same history stalls earlier.
BOOST_AUTO_TEST_CASE(sample_judge_stalls_only_when_neither_energy_nor_residual_progress) {
  SolverOptions options;
  options.absolute_tolerance = 1e-8;
  options.max_stall_iterations = 3;
  options.divergence_threshold = 1e6;
  internal::SampleJudge<double> with_energy(options, internal::SampleRules{});
  internal::SampleJudge<double> residual_only(options, internal::SampleRules{});
  with_energy.Reset(1);
  residual_only.Reset(1);
  // (residual, energy) per observation: the residual rises for 5 steps while E falls.
  const std::vector<std::pair<double, double>> history = {{1.0, 0.0}, {1.5, -1.0}, {2.0, -2.0}, {2.5, -3.0},
                                                          {3.0, -4.0}, {3.5, -5.0}};
  int residual_only_stalled_at = -1;
  for (std::size_t k = 0; k < history.size(); ++k) {
    bool kept = false;
    const auto stop = with_energy.Judge(0, history[k].first, 1.0, true, &history[k].second, k == 0, &kept);
    BOOST_TEST(!stop.has_value());
    BOOST_TEST(kept);  // each iterate has the lowest energy so far
    bool kept_r = false;
    const auto stop_r = residual_only.Judge(0, history[k].first, 1.0, true, nullptr, k == 0, &kept_r);
    if (stop_r && residual_only_stalled_at < 0) residual_only_stalled_at = static_cast<int>(k);
  }
  BOOST_TEST(residual_only_stalled_at == 3);  // no residual record in observations 1, 2, 3
  BOOST_TEST(with_energy.kept_residual(0) == 3.5);
  BOOST_TEST(with_energy.best_residual(0) == 1.0);
  // Now neither improves: a stall on the third such observation, not before.
  const double flat = -5.0;
  for (int k = 1; k <= 3; ++k) {
    bool kept = false;
    const auto stop = with_energy.Judge(0, 3.5, 1.0, true, &flat, false, &kept);
    if (k < 3) BOOST_TEST(!stop.has_value());
    else BOOST_TEST((stop == TerminationType::kStalled));
  }
  // Converged, diverged, non-finite.
  bool kept = false;
  with_energy.Reset(1);
  BOOST_TEST((with_energy.Judge(0, 1e-9, 1.0, true, nullptr, true, &kept) == TerminationType::kConverged));
  with_energy.Reset(1);
  with_energy.Judge(0, 1.0, 1.0, true, nullptr, true, &kept);
  BOOST_TEST((with_energy.Judge(0, 2e6, 1.0, true, nullptr, false, &kept) == TerminationType::kDiverged));
  kept = false;
  BOOST_TEST((with_energy.Judge(0, 0.5, 1.0, false, nullptr, false, &kept) == TerminationType::kNonFinite));
  BOOST_TEST(!kept);
  // The linear rule adds the tolerances: r <= rtol * |rhs| + atol.
  options.relative_tolerance = 1e-3;
  internal::SampleJudge<double> linear(options, internal::SampleRules{true, false});
  linear.Reset(1);
  BOOST_TEST(!linear.Judge(0, 1.5e-3, 1.0, true, nullptr, true, &kept).has_value());
  BOOST_TEST((linear.Judge(0, 0.9e-3, 1.0, true, nullptr, false, &kept) == TerminationType::kConverged));
  BOOST_TEST(linear.relative(0) == 0.9e-3);
}
