// One conformance suite for every registered solver (built by name through the
// registry) x {float, double}, on problems with known properties:
//   affine     f(z) = A z + c, |A| < 1, exact solution (I - A)^{-1} c
//   tanh_deq   f(z) = tanh(W z + U x + b), |W| < 1, per-sample input x
//   hopfield   modern Hopfield retrieval X softmax(beta X^T xi), well-separated patterns
//   quadratic  EnergyRootMap of 0.5 z^T H z - c^T z, H SPD: minimiser H^{-1} c
//   log_cosh   EnergyRootMap of a strictly convex non-quadratic energy
// Solvers that need an energy run only on the last two and must throw
// std::invalid_argument on the others. Every run checks, independently of the
// solver: |f(z*) - z*| within tolerance, that a sample started at its fixed
// point is never moved (nor evaluated anywhere else) while the others iterate,
// and that the Summary (statuses, residuals, iterations, evaluation counts,
// trace) agrees with what the map and energy saw.
#define BOOST_TEST_MODULE conformance
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <implicit/core/energy_maps.h>
#include <implicit/solvers/picard.h>
#include <implicit/solvers/registry.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "support/h2_solver_problems.h"
#include "support/test_problems.h"

using namespace implicit;
namespace data = boost::unit_test::data;

namespace {

struct Config {
  std::string label;
  std::string solver;
  std::map<std::string, std::string> options;
};

// Every registered solver with its defaults (gradient_flow with a step that
// suits the test energies, whose Hessians have eigenvalues in [0.5, 1.5]),
// plus the non-default paths worth covering.
const std::vector<Config>& Configs() {
  static const std::vector<Config> configs = [] {
    std::vector<Config> c;
    for (const std::string& name : SolverNames()) {
      Config config{name, name, {}};
      if (name == "gradient_flow") config.options["step_size"] = "1";
      c.push_back(config);
    }
    c.push_back({"newton_dogleg", "newton", {{"newton_krylov", "false"}, {"trust_region", "dogleg"}}});
    c.push_back({"newton_dense", "newton", {{"newton_krylov", "false"}}});
    c.push_back({"broyden_residual_guard", "broyden", {{"residual_factor", "1"}}});
    c.push_back({"gradient_flow_monotone", "gradient_flow",
                 {{"step_size", "1"}, {"check_monotone", "true"}}});
    return c;
  }();
  return configs;
}

std::vector<std::string> Labels() {
  std::vector<std::string> labels;
  for (const Config& c : Configs()) labels.push_back(c.label);
  return labels;
}

const Config& Find(const std::string& label) {
  for (const Config& c : Configs()) {
    if (c.label == label) return c;
  }
  throw std::logic_error("no config " + label);
}

// The residual tolerance of every run (the same for every solver: L-BFGS's
// guard falls back to the residual below the rounding of E, so it has no floor).
template <typename Scalar>
double Tolerance(const Config&) {
  const bool is_float = std::is_same<Scalar, float>::value;
  return is_float ? 1e-4 : 1e-10;
}

// Runs config on (map, z0) and checks everything that holds for any solver.
// `energy` is the spy inside the map for energy problems (else nullptr).
// Sample 1 of z0 is replaced by a point within tolerance of the fixed point.
// Returns the solution (n x B).
template <typename Scalar>
Matrix<Scalar> CheckConformance(const Config& config, const FixedPointMap<Scalar>& map,
                                testing::SpyEnergy<Scalar>* energy, Matrix<Scalar> z0) {
  const double tol = Tolerance<Scalar>(config);
  const Index B = z0.cols();
  BOOST_REQUIRE(B >= 3);
  auto solver = MakeSolver<Scalar>(config.solver, config.options, [tol] {
    SolverOptions base;
    base.absolute_tolerance = tol;
    base.max_iterations = 500;
    base.record_trace = true;
    return base;
  }());

  if (SolverNeedsEnergy(config.solver) && map.energy() == nullptr) {
    Matrix<Scalar> z = z0;
    BOOST_CHECK_THROW(solver->Solve(map, z), std::invalid_argument);
    return z;
  }

  // Sample 1 starts (within tolerance) at its fixed point: a tight reference
  // solve, checked independently before use.
  {
    Matrix<Scalar> reference = z0;
    typename PicardSolver<Scalar>::Options picard;
    picard.absolute_tolerance = tol / 20;
    picard.max_iterations = 5000;
    picard.max_stall_iterations = 0;
    PicardSolver<Scalar>(picard).Solve(map, reference);
    z0.col(1) = reference.col(1);
    BOOST_REQUIRE(testing::IndependentResiduals(map, z0)[1] <= tol / 2);
  }

  if (energy != nullptr) {
    energy->values_calls = energy->gradient_calls = energy->hessian_calls = 0;
    energy->descent_calls = 0;
    energy->states.clear();
  }
  testing::SpyMap<Scalar> spy(map);
  Matrix<Scalar> z = z0;
  const Summary s = solver->Solve(spy, z);
  // What the solver called, before this test evaluates anything itself.
  const int map_evaluations = spy.evaluations, map_jacobian_products = spy.jacobian_products;
  int energy_evaluations = 0;
  if (energy != nullptr) {
    energy_evaluations = energy->values_calls + energy->descent_calls +
                         (energy->gradient_calls - spy.evaluations);  // gradients not from f
    // Picard, Anderson and Broyden take E together with every f (one
    // EvaluateWithEnergy call, counted once as an evaluation of f).
    const bool paired = config.solver == "picard" || config.solver == "anderson" ||
                        config.solver == "broyden" || config.solver == "lbfgs";
    if (paired) {
      BOOST_TEST(energy->values_calls == spy.evaluations);
      energy_evaluations -= energy->values_calls;
    }
  }

  BOOST_TEST(s.solver == config.solver);
  BOOST_TEST(s.IsConverged(), s.FullReport());
  BOOST_REQUIRE(s.num_samples() == B);
  BOOST_REQUIRE(s.sample_residual.size() == static_cast<std::size_t>(B));
  BOOST_REQUIRE(s.sample_iterations.size() == static_cast<std::size_t>(B));
  BOOST_TEST(s.num_converged() == B);

  // Residuals, computed here from a fresh evaluation.
  const std::vector<double> r = testing::IndependentResiduals(map, z);
  const double rounding = 50.0 * std::numeric_limits<Scalar>::epsilon() * (1.0 + z.norm());
  double max_residual = 0.0;
  for (Index b = 0; b < B; ++b) {
    BOOST_TEST(r[b] <= tol + rounding, "sample " << b);
    BOOST_TEST(std::abs(s.sample_residual[b] - r[b]) <= rounding, "sample " << b);
    max_residual = std::max(max_residual, s.sample_residual[b]);
  }
  BOOST_TEST(s.absolute_residual == max_residual);
  BOOST_TEST(std::isfinite(s.relative_residual));

  // Iterations: the converged start stops at 0, the others iterate, and the
  // batch ran as long as its slowest sample.
  BOOST_TEST(s.sample_iterations[1] == 0);
  BOOST_TEST(s.sample_iterations[0] > 0);
  BOOST_TEST(s.sample_iterations[2] > 0);
  BOOST_TEST(*std::max_element(s.sample_iterations.begin(), s.sample_iterations.end()) ==
             s.iterations);

  // A converged sample stops changing while the others continue: every state
  // the map (and energy) was called on has sample 1 exactly at its start.
  BOOST_TEST(testing::ColumnNeverChanged(spy.states, 1, Vector<Scalar>(z0.col(1))));
  if (energy != nullptr) {
    BOOST_TEST(testing::ColumnNeverChanged(energy->states, 1, Vector<Scalar>(z0.col(1))));
  }
  BOOST_TEST((z.col(1).array() == z0.col(1).array()).all());
  BOOST_TEST(testing::DistinctColumnValues(spy.states, 0) > 1);

  // Evaluation counts: every batched call into the problem, as documented by
  // each solver (map evaluations; for energy minimisers also their energy
  // values, gradients and descent directions).
  BOOST_TEST(s.function_evaluations == map_evaluations + energy_evaluations);
  BOOST_TEST(s.jacobian_products == map_jacobian_products);
  if (!SolverNeedsJacobianProducts(config.solver)) BOOST_TEST(s.jacobian_products == 0);

  // Trace: one entry per iteration (0 = the start), counts never decrease,
  // the last entry is the final state.
  BOOST_REQUIRE(s.trace.size() == static_cast<std::size_t>(s.iterations + 1));
  for (std::size_t k = 0; k < s.trace.size(); ++k) {
    BOOST_TEST(s.trace[k].iteration == static_cast<int>(k));
    if (k > 0) {
      BOOST_TEST(s.trace[k].function_evaluations >= s.trace[k - 1].function_evaluations);
      BOOST_TEST(s.trace[k].seconds >= s.trace[k - 1].seconds);
    }
  }
  BOOST_TEST(s.trace.back().function_evaluations <= s.function_evaluations);
  BOOST_TEST(s.trace.back().max_residual <= tol);
  BOOST_TEST(s.trace.front().max_residual > tol);
  BOOST_TEST(s.wall_time_seconds >= 0.0);
  return z;
}

// ---- the problems ------------------------------------------------------------

template <typename Scalar>
void Affine(const Config& config) {
  const Index n = 6, B = 3;
  testing::AffineMap<Scalar> map(testing::RandomMatrixWithNorm<Scalar>(n, n, 0.5, 101),
                                 testing::RandomMatrix<Scalar>(n, 1, 102));
  const Matrix<Scalar> z = CheckConformance<Scalar>(config, map, nullptr,
                                                    testing::RandomMatrix<Scalar>(n, B, 103));
  if (SolverNeedsEnergy(config.solver)) return;
  // Exact solution: |z - z*| <= |g| / (1 - |A|).
  const Vector<double> exact = map.Solution().template cast<double>();
  const double bound = 2.0 * Tolerance<Scalar>(config) + 1e3 * std::numeric_limits<Scalar>::epsilon();
  for (Index b = 0; b < B; ++b) {
    BOOST_TEST((z.col(b).template cast<double>() - exact).norm() <= bound);
  }
}

template <typename Scalar>
void TanhDeq(const Config& config) {
  const Index n = 6, d = 3, B = 3;
  testing::TanhDeqMap<Scalar> map(n, d, 0.6, 201);
  map.SetInput(testing::RandomMatrix<Scalar>(d, B, 202));
  CheckConformance<Scalar>(config, map, nullptr, testing::RandomMatrix<Scalar>(n, B, 203, 0.5));
}

template <typename Scalar>
void Hopfield(const Config& config) {
  // 4 orthogonal patterns of norm 3 in R^8: separation 9, beta = 1, so each
  // stored pattern has a fixed point within ~1e-2 of it.
  const Index n = 8, N = 4, B = 3;
  const Matrix<double> q =
      testing::RandomMatrix<double>(n, n, 301).householderQr().householderQ();
  const Matrix<Scalar> X = (3.0 * q.leftCols(N)).cast<Scalar>();
  testing::HopfieldMap<Scalar> map(X, Scalar(1));
  const int start_pattern[B] = {0, 2, 3};
  Matrix<Scalar> z0(n, B);
  const Matrix<Scalar> noise = testing::RandomMatrix<Scalar>(n, B, 302, 0.2);
  for (Index b = 0; b < B; ++b) z0.col(b) = X.col(start_pattern[b]) + noise.col(b);
  const Matrix<Scalar> z = CheckConformance<Scalar>(config, map, nullptr, z0);
  if (SolverNeedsEnergy(config.solver)) return;
  for (Index b = 0; b < B; ++b) {  // retrieval: the nearest pattern is the one it started near
    Index nearest = 0;
    (X.colwise() - z.col(b)).colwise().norm().minCoeff(&nearest);
    BOOST_TEST(nearest == start_pattern[b]);
    BOOST_TEST((z.col(b) - X.col(start_pattern[b])).norm() <= 0.05);
  }
}

template <typename Scalar>
void Quadratic(const Config& config) {
  const Index n = 6, B = 3;
  testing::QuadraticEnergy<Scalar> inner(testing::RandomSpd<Scalar>(n, 0.5, 1.5, 401),
                                         testing::RandomMatrix<Scalar>(n, 1, 402));
  testing::SpyEnergy<Scalar> energy(inner);
  EnergyRootMap<Scalar> map(energy);
  const Matrix<Scalar> z =
      CheckConformance<Scalar>(config, map, &energy, testing::RandomMatrix<Scalar>(n, B, 403));
  // |z - z*| <= |grad E| / lambda_min.
  const Vector<double> minimiser =
      inner.Minimiser().template cast<double>();
  for (Index b = 0; b < B; ++b) {
    BOOST_TEST((z.col(b).template cast<double>() - minimiser).norm() <=
               2.5 * Tolerance<Scalar>(config));
  }
}

template <typename Scalar>
void LogCosh(const Config& config) {
  const Index n = 6, B = 3;
  testing::LogCoshEnergy<Scalar> inner(testing::RandomMatrixWithNorm<Scalar>(n, n, 1.0, 501),
                                       testing::RandomMatrix<Scalar>(n, 1, 502), Scalar(0.5));
  testing::SpyEnergy<Scalar> energy(inner);
  EnergyRootMap<Scalar> map(energy);
  const Matrix<Scalar> z = CheckConformance<Scalar>(config, map, &energy,
                                                    testing::RandomMatrix<Scalar>(n, B, 503, 2.0));
  // Strictly convex: every sample reaches the one minimiser.
  for (Index b = 1; b < B; ++b) {
    BOOST_TEST((z.col(b) - z.col(0)).norm() <= 5.0 * Tolerance<Scalar>(config));
  }
}

// A batch whose samples are computed one column at a time (one matrix-vector
// product each, on one thread whatever Eigen::nbThreads() says), so that only
// the solvers' own work can depend on the thread count: f(z) = tanh(W z + c_b)
// with |W|_2 = 0.95, and the quadratic energy 0.5 z^T H z - c_b^T z (H with
// eigenvalues in [0.5, 1.5]) for the solvers that need an energy.
class ColumnTanhMap : public FixedPointMap<double> {
 public:
  ColumnTanhMap(Index n, Index batch)
      : W_(testing::RandomMatrixWithNorm<double>(n, n, 0.95, 811)), c_(testing::RandomMatrix<double>(n, batch, 812)) {}
  Index dimension() const override { return W_.rows(); }
  void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override {
    for (Index b = 0; b < z.cols(); ++b) out.col(b) = (W_ * z.col(b) + c_.col(b)).array().tanh().matrix();
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<double> z, ConstMatrixRef<double> v,
                             MatrixRef<double> out) const override {  // (1 - f^2) W v
    Matrix<double> f(z.rows(), z.cols());
    Evaluate(z, f);
    for (Index b = 0; b < z.cols(); ++b) out.col(b) = (1.0 - f.col(b).array().square()) * (W_ * v.col(b)).array();
  }
  void VectorJacobianProduct(ConstMatrixRef<double> z, ConstMatrixRef<double> u,
                             MatrixRef<double> out) const override {  // W^T ((1 - f^2) u)
    Matrix<double> f(z.rows(), z.cols());
    Evaluate(z, f);
    for (Index b = 0; b < z.cols(); ++b)
      out.col(b) = W_.transpose() * ((1.0 - f.col(b).array().square()) * u.col(b).array()).matrix();
  }

 private:
  Matrix<double> W_, c_;
};

class ColumnQuadraticEnergy : public Energy<double> {
 public:
  ColumnQuadraticEnergy(Index n, Index batch)
      : H_(testing::RandomSpd<double>(n, 0.5, 1.5, 813)), c_(testing::RandomMatrix<double>(n, batch, 814)) {}
  Index dimension() const override { return H_.rows(); }
  void Value(ConstMatrixRef<double> x, VectorRef<double> values) const override {
    for (Index b = 0; b < x.cols(); ++b) values(b) = 0.5 * x.col(b).dot(H_ * x.col(b)) - c_.col(b).dot(x.col(b));
  }
  void Gradient(ConstMatrixRef<double> x, MatrixRef<double> grad) const override {
    for (Index b = 0; b < x.cols(); ++b) grad.col(b) = H_ * x.col(b) - c_.col(b);
  }
  void HessianVectorProduct(ConstMatrixRef<double>, ConstMatrixRef<double> v, MatrixRef<double> out) const override {
    for (Index b = 0; b < v.cols(); ++b) out.col(b) = H_ * v.col(b);
  }

 private:
  Matrix<double> H_, c_;
};

// Restores Eigen's thread count when a test ends.
struct EigenThreadsGuard {
  int saved = Eigen::nbThreads();
  ~EigenThreadsGuard() { Eigen::setNbThreads(saved); }
};

}  // namespace

// The solvers share their per-sample work among Eigen's threads (n x B large
// enough, internal/sample_loop.h): each sample's computation must be the same
// as on one thread, so the solution and every per-sample count are identical.
BOOST_DATA_TEST_CASE(results_do_not_depend_on_the_thread_count, data::make(Labels()), label) {
  const Config& config = Find(label);
  const Index n = 24, B = 900;  // n B above the threshold of the parallel loops
  ColumnTanhMap tanh_map(n, B);
  ColumnQuadraticEnergy energy(n, B);
  EnergyRootMap<double> root_map(energy);
  const FixedPointMap<double>& map =
      SolverNeedsEnergy(config.solver) ? static_cast<const FixedPointMap<double>&>(root_map) : tanh_map;
  SolverOptions base;
  base.absolute_tolerance = 1e-10;
  base.max_iterations = 300;
  auto solver = MakeSolver<double>(config.solver, config.options, base);
  const Matrix<double> z0 = testing::RandomMatrix<double>(n, B, 815, 2.0);

  EigenThreadsGuard guard;
  std::vector<Matrix<double>> solutions;
  std::vector<Summary> summaries;
  for (int threads : {1, 3}) {
    Eigen::setNbThreads(threads);
    Matrix<double> z = z0;
    summaries.push_back(solver->Solve(map, z));
    solutions.push_back(z);
  }
  const Summary &one = summaries[0], &three = summaries[1];
  BOOST_TEST(one.num_converged() == B, one.FullReport());
  BOOST_TEST((solutions[0].array() == solutions[1].array()).all());
  BOOST_TEST(one.iterations == three.iterations);
  BOOST_TEST(one.function_evaluations == three.function_evaluations);
  BOOST_TEST(one.sample_iterations == three.sample_iterations, boost::test_tools::per_element());
  BOOST_TEST(one.sample_evaluations == three.sample_evaluations, boost::test_tools::per_element());
  BOOST_TEST(one.sample_accelerated_steps == three.sample_accelerated_steps, boost::test_tools::per_element());
  BOOST_TEST(one.sample_backtracks == three.sample_backtracks, boost::test_tools::per_element());
  BOOST_TEST(one.sample_fallbacks == three.sample_fallbacks, boost::test_tools::per_element());
  BOOST_TEST(one.sample_residual == three.sample_residual, boost::test_tools::per_element());
}

// A solver object may keep batch-sized buffers between its solves (the
// guarded solvers do: solvers/internal/buffer_stash.h), so what it solved
// before must not change a result: solves of batches of several sizes, the
// same size again in between, on one object give bitwise the iterates and
// counts that a new solver gives.
BOOST_DATA_TEST_CASE(repeated_solves_match_a_new_solver, data::make(Labels()), label) {
  const Config& config = Find(label);
  const Index n = 10;
  SolverOptions base;
  base.absolute_tolerance = 1e-10;
  base.max_iterations = 300;
  const auto kept = MakeSolver<double>(config.solver, config.options, base);
  for (Index batch : {6, 6, 3, 9, 6}) {
    BOOST_TEST_CONTEXT("batch " << batch) {
      ColumnTanhMap tanh_map(n, batch);
      ColumnQuadraticEnergy energy(n, batch);
      EnergyRootMap<double> root_map(energy);
      const FixedPointMap<double>& map =
          SolverNeedsEnergy(config.solver) ? static_cast<const FixedPointMap<double>&>(root_map) : tanh_map;
      const Matrix<double> z0 = testing::RandomMatrix<double>(n, batch, static_cast<unsigned>(900 + batch), 2.0);
      Matrix<double> again = z0, fresh = z0;
      const Summary s = kept->Solve(map, again);
      const Summary e = MakeSolver<double>(config.solver, config.options, base)->Solve(map, fresh);
      BOOST_TEST(s.num_converged() == batch, s.FullReport());
      BOOST_TEST((again.array() == fresh.array()).all());
      BOOST_TEST(s.iterations == e.iterations);
      BOOST_TEST(s.sample_evaluations == e.sample_evaluations, boost::test_tools::per_element());
      BOOST_TEST(s.sample_residual == e.sample_residual, boost::test_tools::per_element());
    }
  }
}

BOOST_DATA_TEST_CASE(affine_contraction, data::make(Labels()), label) {
  Affine<double>(Find(label));
  Affine<float>(Find(label));
}

BOOST_DATA_TEST_CASE(tanh_deq, data::make(Labels()), label) {
  TanhDeq<double>(Find(label));
  TanhDeq<float>(Find(label));
}

BOOST_DATA_TEST_CASE(hopfield_retrieval, data::make(Labels()), label) {
  Hopfield<double>(Find(label));
  Hopfield<float>(Find(label));
}

BOOST_DATA_TEST_CASE(quadratic_energy_root, data::make(Labels()), label) {
  Quadratic<double>(Find(label));
  Quadratic<float>(Find(label));
}

BOOST_DATA_TEST_CASE(convex_energy_root, data::make(Labels()), label) {
  LogCosh<double>(Find(label));
  LogCosh<float>(Find(label));
}

BOOST_AUTO_TEST_CASE(every_registered_solver_is_covered) {
  for (const std::string& name : SolverNames()) {
    const auto& c = Configs();
    BOOST_TEST(std::any_of(c.begin(), c.end(), [&](const Config& x) { return x.solver == name; }),
               name);
  }
}
