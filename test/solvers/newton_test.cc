#define BOOST_TEST_MODULE newton
#include <boost/test/unit_test.hpp>

#include <implicit/core/energy_maps.h>
#include <implicit/solvers/newton.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "support/h2_solver_problems.h"
#include "support/solver_test_maps.h"
#include "support/test_problems.h"

using namespace implicit;
using testing::AffineMap;
using testing::TanhDeqMap;

namespace {

AffineMap<double> MakeAffine(Index n, double norm, unsigned seed) {
  return AffineMap<double>(testing::RandomMatrixWithNorm<double>(n, n, norm, seed),
                           testing::RandomMatrix<double>(n, 1, seed + 7));
}

// f(z) = 0.5 tanh(z) + c elementwise: cheap at any n, Jacobian diag(0.5 (1 - tanh^2)).
class ElementwiseMap : public FixedPointMap<double> {
 public:
  explicit ElementwiseMap(Vector<double> c) : c_(std::move(c)) {}
  Index dimension() const override { return c_.size(); }
  bool SupportsSubsets() const override { return true; }
  void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override {
    out = 0.5 * z.array().tanh().matrix();
    out.colwise() += c_;
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<double> z, ConstMatrixRef<double> v,
                             MatrixRef<double> out) const override {
    out = (0.5 * (1.0 - z.array().tanh().square()) * v.array()).matrix();
  }

 private:
  Vector<double> c_;
};

// g(z) = -atan(z) elementwise (f(z) = z - atan z), root 0, but f is NaN in a
// column with any |z_i| > 3. Full Newton steps from |z| = 2 overshoot past 3.
class AtanWithNanMap : public FixedPointMap<double> {
 public:
  explicit AtanWithNanMap(Index n) : n_(n) {}
  Index dimension() const override { return n_; }
  void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override {
    out = z - z.array().atan().matrix();
    for (Index b = 0; b < z.cols(); ++b) {
      if (z.col(b).cwiseAbs().maxCoeff() > 3.0) out.col(b).setConstant(std::nan(""));
    }
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<double> z, ConstMatrixRef<double> v,
                             MatrixRef<double> out) const override {
    out = v - (v.array() / (1.0 + z.array().square())).matrix();
  }

 private:
  Index n_;
};

// f(z) = tanh(W z + c) whose Jacobian diag(1 - f^2) W follows from f(z): its
// LinearizeWithValue keeps 1 - fz^2 without evaluating; Linearize(z)
// evaluates f (counted, as every Evaluate).
class TanhLayerMap : public FixedPointMap<double> {
 public:
  TanhLayerMap(Matrix<double> W, Matrix<double> c) : W_(std::move(W)), c_(std::move(c)) {}
  Index dimension() const override { return W_.rows(); }
  void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override {
    ++evaluations;
    out = ((W_ * z + c_).array().tanh()).matrix();
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<double> z, ConstMatrixRef<double> v,
                             MatrixRef<double> out) const override {
    Linearize(z)->JacobianVectorProduct(v, out);
  }
  std::unique_ptr<Linearization<double>> Linearize(ConstMatrixRef<double> z) const override {
    Matrix<double> f(z.rows(), z.cols());
    Evaluate(z, f);
    return LinearizeWithValue(z, f);
  }
  std::unique_ptr<Linearization<double>> LinearizeWithValue(ConstMatrixRef<double>,
                                                            ConstMatrixRef<double> fz) const override {
    return std::make_unique<Slopes>(W_, (1.0 - fz.array().square()).matrix());
  }
  mutable int evaluations = 0;

 private:
  struct Slopes final : Linearization<double> {
    Slopes(const Matrix<double>& W, Matrix<double> s) : W(W), slope(std::move(s)) {}
    void JacobianVectorProduct(ConstMatrixRef<double> v, MatrixRef<double> out) const override {
      out = (slope.array() * (W * v).array()).matrix();
    }
    void VectorJacobianProduct(ConstMatrixRef<double> u, MatrixRef<double> out) const override {
      out = W.transpose() * (slope.array() * u.array()).matrix();
    }
    const Matrix<double>& W;
    Matrix<double> slope;
  };
  Matrix<double> W_, c_;
};

// The threads this process runs now (Linux: /proc/self/task), or -1.
int ThreadsRunning() {
  std::error_code error;
  int count = 0;
  for (std::filesystem::directory_iterator it("/proc/self/task", error), end; !error && it != end;
       it.increment(error)) {
    ++count;
  }
  return error || count == 0 ? -1 : count;
}

// The thread count once threads that were joined have also left the process
// list (a joined thread may stay listed for a moment): three equal reads.
int SettledThreadCount() {
  int last = ThreadsRunning(), same = 0;
  for (int tries = 0; tries < 1000 && same < 3; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const int now = ThreadsRunning();
    same = now == last ? same + 1 : 0;
    last = now;
  }
  return last;
}

// Forwards every call to `inner` (its column calls too) and records the
// batch width of each call and the threads running at the time.
class CallRecorder : public FixedPointMap<double> {
 public:
  explicit CallRecorder(const FixedPointMap<double>& inner) : inner_(inner) {}
  Index dimension() const override { return inner_.dimension(); }
  bool SupportsSubsets() const override { return inner_.SupportsSubsets(); }
  bool SupportsColumnSubsets() const override { return inner_.SupportsColumnSubsets(); }
  bool HasJacobianProducts() const override { return true; }
  bool SupportsColumnJacobianProducts() const override { return inner_.SupportsColumnJacobianProducts(); }
  void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override {
    Record(z.cols());
    inner_.Evaluate(z, out);
  }
  void EvaluateColumns(ConstMatrixRef<double> z, const std::vector<Index>& columns,
                       MatrixRef<double> out) const override {
    Record(z.cols());
    inner_.EvaluateColumns(z, columns, out);
  }
  void JacobianVectorProduct(ConstMatrixRef<double> z, ConstMatrixRef<double> v,
                             MatrixRef<double> out) const override {
    Record(z.cols());
    inner_.JacobianVectorProduct(z, v, out);
  }
  void JacobianVectorProductColumns(ConstMatrixRef<double> z, const std::vector<Index>& columns,
                                    ConstMatrixRef<double> v, MatrixRef<double> out) const override {
    Record(z.cols());
    inner_.JacobianVectorProductColumns(z, columns, v, out);
  }

  mutable std::vector<Index> widths;
  mutable int most_threads = 0;

 private:
  void Record(Index width) const {
    widths.push_back(width);
    most_threads = std::max(most_threads, ThreadsRunning());
  }
  const FixedPointMap<double>& inner_;
};

}  // namespace

BOOST_AUTO_TEST_CASE(large_batches_run_in_chunks_of_max_threads) {
  // B = 7 samples with max_threads = 3: chunks of 3, 3 and 1 samples, each in
  // lockstep, give the iterates and per-sample counts of one lockstep of all
  // 7 (the samples are independent), with at most 3 worker threads. A map
  // with per-sample data and no column calls (the DEQ's input) is called on
  // the whole batch; a map without per-sample data, or with column
  // evaluations and column JVPs, on the chunk alone.
  const Index n = 4, d = 3, B = 7;
  TanhDeqMap<double> deq(n, d, 0.8, 91);
  deq.SetInput(testing::RandomMatrix<double>(d, B, 92));
  const ElementwiseMap elementwise(testing::RandomMatrix<double>(n, 1, 93));
  const testing::PerSampleShiftMap shifted(testing::RandomMatrix<double>(n, B, 95));
  const Matrix<double> z0 = 0.5 * testing::RandomMatrix<double>(n, B, 94);
  const std::vector<std::pair<const char*, const FixedPointMap<double>*>> maps = {
      {"per-sample data, whole batch only", &deq},
      {"no per-sample data", &elementwise},
      {"per-sample data with column calls", &shifted}};
  for (const auto& [what, inner] : maps) {
    BOOST_TEST_CONTEXT(what) {
      const bool subsets = inner != &deq;
      NewtonSolver<double>::Options options;
      options.newton_krylov = false;  // the dense path's lockstep
      options.absolute_tolerance = 1e-11;
      CallRecorder one_lockstep(*inner), chunked(*inner);
      Matrix<double> z_whole = z0, z_chunked = z0;
      const int threads_whole = SettledThreadCount();
      const Summary whole = NewtonSolver<double>(options).Solve(one_lockstep, z_whole);
      options.max_threads = 3;
      const int threads_chunked = SettledThreadCount();
      const Summary s = NewtonSolver<double>(options).Solve(chunked, z_chunked);
      BOOST_TEST(whole.IsConverged(), whole.FullReport());
      BOOST_TEST(s.IsConverged(), s.FullReport());
      BOOST_TEST((z_chunked - z_whole).norm() <= 1e-12);
      BOOST_TEST(s.sample_iterations == whole.sample_iterations, boost::test_tools::per_element());
      BOOST_TEST(s.sample_status.size() == static_cast<std::size_t>(B));
      BOOST_TEST(s.message.find("3 chunks of at most 3 samples") != std::string::npos, s.message);
      for (Index width : chunked.widths) {
        if (subsets) {
          BOOST_TEST((width == 3 || width == 1));
        } else {
          BOOST_TEST(width == B);
        }
      }
      if (threads_whole > 0 && threads_chunked > 0) {  // one worker per sample, or per chunk sample
        BOOST_TEST(one_lockstep.most_threads - threads_whole >= B);
        BOOST_TEST(chunked.most_threads - threads_chunked <= 3);
      } else {
        BOOST_TEST_MESSAGE("/proc/self/task unreadable: thread counts not checked");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(non_finite_trial_points_are_rejected_never_accepted) {
  const Index n = 3, B = 2;
  AtanWithNanMap map(n);
  for (bool krylov : {false, true}) {
    Matrix<double> z(n, B);
    z.col(0) << 2.0, -2.0, 1.9;
    z.col(1) << 0.3, -0.2, 0.1;  // here plain Newton converges
    NewtonSolver<double>::Options options;
    options.newton_krylov = krylov;
    options.absolute_tolerance = 1e-12;
    Summary s = NewtonSolver<double>(options).Solve(map, z);
    BOOST_TEST(s.IsConverged(), s.FullReport());
    BOOST_TEST(z.norm() <= 1e-10);
  }
}

BOOST_AUTO_TEST_CASE(levenberg_marquardt_solves_affine_contraction) {
  const Index n = 8, B = 3;
  AffineMap<double> map = MakeAffine(n, 0.9, 1);
  Matrix<double> z = testing::RandomMatrix<double>(n, B, 3);
  NewtonSolver<double>::Options options;
  options.newton_krylov = false;  // Ceres' Levenberg-Marquardt
  options.absolute_tolerance = 1e-12;
  Summary s = NewtonSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged(), s.FullReport());
  for (Index b = 0; b < B; ++b) BOOST_TEST((z.col(b) - map.Solution()).norm() <= 1e-10);
  // g is affine, so each Gauss-Newton-like step shrinks |g| by the LM damping
  // ratio (~1e-4 here): a handful of iterations, far fewer than Picard's ~260.
  BOOST_TEST(s.iterations <= 6);
}

BOOST_AUTO_TEST_CASE(dogleg_solves_tanh_deq_in_float_and_double) {
  const Index n = 6, d = 4, B = 4;
  for (const char* strategy : {"dogleg", "levenberg_marquardt"}) {
    TanhDeqMap<double> map(n, d, 0.8, 11);
    map.SetInput(testing::RandomMatrix<double>(d, B, 12));
    Matrix<double> z = Matrix<double>::Zero(n, B);
    NewtonSolver<double>::Options options;
    options.newton_krylov = false;
    options.trust_region = strategy;
    options.absolute_tolerance = 1e-11;
    Summary s = NewtonSolver<double>(options).Solve(map, z);
    BOOST_TEST(s.IsConverged(), s.FullReport());
    for (double r : testing::IndependentResiduals(map, z)) BOOST_TEST(r <= 1e-11);

    TanhDeqMap<float> mapf(n, d, 0.8, 11);
    mapf.SetInput(testing::RandomMatrix<float>(d, B, 12));
    Matrix<float> zf = Matrix<float>::Zero(n, B);
    NewtonSolver<float>::Options optionsf;
    optionsf.newton_krylov = false;
    optionsf.trust_region = strategy;
    optionsf.absolute_tolerance = 1e-5;
    Summary sf = NewtonSolver<float>(optionsf).Solve(mapf, zf);
    BOOST_TEST(sf.IsConverged(), sf.FullReport());
    for (double r : testing::IndependentResiduals(mapf, zf)) BOOST_TEST(r <= 1e-5);
    BOOST_TEST((zf.cast<double>() - z).norm() <= 1e-4);  // same equilibrium
  }
}

BOOST_AUTO_TEST_CASE(summary_counts_batched_evaluations_and_jacobian_rounds) {
  const Index n = 5, d = 3, B = 3;
  TanhDeqMap<double> map(n, d, 0.7, 21);
  map.SetInput(testing::RandomMatrix<double>(d, B, 22));
  testing::SpyMap<double> spy(map);
  Matrix<double> z = Matrix<double>::Zero(n, B);
  NewtonSolver<double>::Options options;
  options.newton_krylov = false;
  options.record_trace = true;
  Summary s = NewtonSolver<double>(options).Solve(spy, z);
  BOOST_TEST(s.IsConverged());
  BOOST_TEST(s.function_evaluations == spy.evaluations);
  BOOST_TEST(s.jacobian_products == spy.jacobian_products);
  // A dense Jacobian round is n batched JVPs (v = e_i in every column).
  BOOST_TEST(s.jacobian_products % n == 0);
  BOOST_TEST(s.jacobian_products >= static_cast<int>(n));
  BOOST_TEST(s.trace.size() == static_cast<std::size_t>(s.iterations + 1));
  for (std::size_t k = 1; k < s.trace.size(); ++k) {
    BOOST_TEST(s.trace[k].function_evaluations >= s.trace[k - 1].function_evaluations);
  }
  // Trust-region steps only ever decrease |g|, so the trace's max residual does too.
  for (std::size_t k = 1; k < s.trace.size(); ++k) {
    BOOST_TEST(s.trace[k].max_residual <= s.trace[k - 1].max_residual);
  }
  const auto r = testing::IndependentResiduals(map, z);
  for (Index b = 0; b < B; ++b) BOOST_TEST(std::abs(s.sample_residual[b] - r[b]) <= 1e-14);
}

BOOST_AUTO_TEST_CASE(needs_jacobian_products) {
  AffineMap<double> map = MakeAffine(4, 0.5, 2);
  testing::NoJacobianMap<double> plain(map);
  Matrix<double> z = Matrix<double>::Zero(4, 2);
  try {
    NewtonSolver<double>().Solve(plain, z);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("Jacobian-vector products") != std::string::npos);
  }
  NewtonSolver<double>::Options krylov;
  krylov.newton_krylov = true;
  BOOST_CHECK_THROW(NewtonSolver<double>(krylov).Solve(plain, z), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(invalid_options_and_shapes_throw) {
  NewtonSolver<double>::Options options;
  options.trust_region = "cauchy";
  try {
    NewtonSolver<double> solver(options);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("trust_region") != std::string::npos);
  }
  NewtonSolver<double>::Options bad_forcing;
  bad_forcing.forcing_term = 1.5;
  BOOST_CHECK_THROW(NewtonSolver<double>{bad_forcing}, std::invalid_argument);
  NewtonSolver<double>::Options no_threads;
  no_threads.max_threads = 0;
  try {
    NewtonSolver<double> solver(no_threads);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("max_threads") != std::string::npos);
  }
  // The restart is GMRES's; a length GMRES would reject is rejected when the
  // solver is built, not thrown from inside Solve (found by fuzz_solver_options).
  NewtonSolver<double>::Options long_restart;
  long_restart.krylov_restart = kMaxSolverMemory + 1;
  try {
    NewtonSolver<double> solver(long_restart);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("krylov_restart") != std::string::npos);
  }
  long_restart.krylov_restart = kMaxSolverMemory;
  AffineMap<double> map = MakeAffine(4, 0.5, 2);
  {
    Matrix<double> z = Matrix<double>::Zero(4, 2);
    BOOST_TEST(NewtonSolver<double>(long_restart).Solve(map, z).IsConverged());
  }
  Matrix<double> wrong = Matrix<double>::Zero(5, 2), empty(4, 0);
  BOOST_CHECK_THROW(NewtonSolver<double>().Solve(map, wrong), std::invalid_argument);
  BOOST_CHECK_THROW(NewtonSolver<double>().Solve(map, empty), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(map_exception_propagates_without_hanging) {
  // The input has 2 columns but the batch 3: the map throws inside the
  // lockstep server; the solver must stop every worker and rethrow.
  TanhDeqMap<double> map(4, 2, 0.5, 5);
  map.SetInput(testing::RandomMatrix<double>(2, 2, 6));
  Matrix<double> z = Matrix<double>::Zero(4, 3);
  NewtonSolver<double>::Options dense;
  dense.newton_krylov = false;
  BOOST_CHECK_THROW(NewtonSolver<double>(dense).Solve(map, z), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(failing_sample_does_not_affect_the_others) {
  const Index n = 6, B = 3;
  for (bool krylov : {false, true}) {
    AffineMap<double> map = MakeAffine(n, 0.8, 31);
    testing::PoisonedMap<double> poisoned(map, 1);
    Matrix<double> z0 = testing::RandomMatrix<double>(n, B, 32);
    Matrix<double> z = z0;
    NewtonSolver<double>::Options options;
    options.newton_krylov = krylov;
    options.absolute_tolerance = 1e-12;
    Summary s = NewtonSolver<double>(options).Solve(poisoned, z);
    BOOST_TEST(s.sample_status[0] == TerminationType::kConverged);
    BOOST_TEST(s.sample_status[1] == TerminationType::kNonFinite);
    BOOST_TEST(s.sample_status[2] == TerminationType::kConverged);
    BOOST_TEST(s.termination_type == TerminationType::kNonFinite);
    BOOST_TEST(z.col(1).allFinite());
    BOOST_TEST((z.col(1) - z0.col(1)).norm() == 0.0);  // its best finite iterate: the start
    // The healthy samples end where a solve without the poisoned one ends.
    Matrix<double> healthy(n, 2);
    healthy << z0.col(0), z0.col(2);
    Summary clean = NewtonSolver<double>(options).Solve(map, healthy);
    BOOST_TEST(clean.IsConverged());
    BOOST_TEST((z.col(0) - healthy.col(0)).norm() <= 1e-12);
    BOOST_TEST((z.col(2) - healthy.col(1)).norm() <= 1e-12);
  }
}

BOOST_AUTO_TEST_CASE(converged_samples_stop_changing) {
  const Index n = 5, B = 3;
  for (bool krylov : {false, true}) {
    AffineMap<double> map = MakeAffine(n, 0.6, 41);
    testing::SpyMap<double> spy(map);
    Matrix<double> z = testing::RandomMatrix<double>(n, B, 42);
    const Vector<double> solution = map.Solution();
    z.col(1) = solution;  // already a fixed point (to rounding)
    NewtonSolver<double>::Options options;
    options.newton_krylov = krylov;
    options.absolute_tolerance = 1e-12;
    Summary s = NewtonSolver<double>(options).Solve(spy, z);
    BOOST_TEST(s.IsConverged());
    BOOST_TEST(s.sample_iterations[1] == 0);
    BOOST_TEST(s.sample_iterations[0] > 0);
    BOOST_TEST(testing::ColumnNeverChanged(spy.states, 1, solution));
    BOOST_TEST((z.col(1).array() == solution.array()).all());
    BOOST_TEST(testing::DistinctColumnValues(spy.states, 0) > 1);
  }
}

BOOST_AUTO_TEST_CASE(newton_krylov_matches_dense_newton) {
  const Index n = 6, d = 3, B = 3;
  TanhDeqMap<double> map(n, d, 0.9, 51);
  map.SetInput(testing::RandomMatrix<double>(d, B, 52));
  testing::SpyMap<double> spy(map);
  Matrix<double> dense = Matrix<double>::Zero(n, B), krylov = dense;
  NewtonSolver<double>::Options options;
  options.newton_krylov = false;
  options.absolute_tolerance = 1e-11;
  Summary sd = NewtonSolver<double>(options).Solve(map, dense);
  options.newton_krylov = true;
  NewtonSolver<double> nk(options);
  BOOST_TEST(nk.UsesNewtonKrylov(n));
  Summary sk = nk.Solve(spy, krylov);
  BOOST_TEST(sd.IsConverged());
  BOOST_TEST(sk.IsConverged(), sk.FullReport());
  BOOST_TEST((dense - krylov).norm() <= 1e-9);
  BOOST_TEST(sk.function_evaluations == spy.evaluations);
  BOOST_TEST(sk.jacobian_products == spy.jacobian_products);
  BOOST_TEST(sk.iterations <= 10);  // superlinear: a few Newton steps
}

// Newton-Krylov linearises at z with the f(z) it has (LinearizeWithValue):
// a map whose Jacobian follows from f(z) is evaluated exactly as often as the
// summary counts, where linearising from z alone costs one more evaluation per
// Newton step; both solves take the same steps. The default
// LinearizeWithValue ignores fz (a NaN fz changes nothing).
BOOST_AUTO_TEST_CASE(newton_krylov_linearizes_with_the_value_it_has) {
  const Index n = 12, B = 4;
  TanhLayerMap map(testing::RandomMatrixWithNorm<double>(n, n, 0.95, 71), testing::RandomMatrix<double>(n, B, 72));
  Matrix<double> z = Matrix<double>::Zero(n, B);
  NewtonSolver<double>::Options options;
  options.absolute_tolerance = 1e-11;
  const Summary s = NewtonSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged(), s.FullReport());
  BOOST_TEST(s.iterations >= 2);
  BOOST_TEST(map.evaluations == s.function_evaluations);
  for (double r : testing::IndependentResiduals(map, z)) BOOST_TEST(r <= 1e-11);

  // The same solve through the default LinearizeWithValue (Linearize(z)).
  testing::SpyMap<double> spy(map);
  map.evaluations = 0;
  Matrix<double> z_default = Matrix<double>::Zero(n, B);
  const Summary s_default = NewtonSolver<double>(options).Solve(spy, z_default);
  BOOST_TEST(s_default.iterations == s.iterations);
  BOOST_TEST((z_default - z).norm() <= 1e-13);

  const Matrix<double> at = testing::RandomMatrix<double>(n, B, 73), v = testing::RandomMatrix<double>(n, B, 74);
  Matrix<double> f_at(n, B), from_value(n, B), from_point(n, B), ignored(n, B);
  map.Evaluate(at, f_at);
  map.LinearizeWithValue(at, f_at)->JacobianVectorProduct(v, from_value);
  map.Linearize(at)->JacobianVectorProduct(v, from_point);
  BOOST_TEST((from_value - from_point).norm() == 0.0);
  const Matrix<double> nan = Matrix<double>::Constant(n, B, std::nan(""));
  spy.LinearizeWithValue(at, nan)->JacobianVectorProduct(v, ignored);
  BOOST_TEST((ignored - from_point).norm() == 0.0);
}

BOOST_AUTO_TEST_CASE(large_dimension_goes_matrix_free) {
  const Index n = 3000, B = 2;
  ElementwiseMap map(testing::RandomMatrix<double>(n, 1, 61));
  NewtonSolver<double> solver;  // matrix-free by default
  BOOST_TEST(solver.UsesNewtonKrylov(n));
  BOOST_TEST(solver.UsesNewtonKrylov(5));
  NewtonSolver<double>::Options dense;  // the dense path up to dense_jacobian_max_dimension = 500
  dense.newton_krylov = false;
  BOOST_TEST(NewtonSolver<double>(dense).UsesNewtonKrylov(n));
  BOOST_TEST(!NewtonSolver<double>(dense).UsesNewtonKrylov(500));
  Matrix<double> z = Matrix<double>::Zero(n, B);
  Summary s = solver.Solve(map, z);
  BOOST_TEST(s.IsConverged(), s.FullReport());
  for (double r : testing::IndependentResiduals(map, z)) BOOST_TEST(r <= 1e-8);
}

// E(x) = sum_i sqrt(1 + x_i^2), recording the first coordinate of every point
// where E is evaluated. Newton overshoots it wildly for |x| > 1 (the step
// from x is -x (1 + x^2)).
class SoftAbsEnergy : public Energy<double> {
 public:
  explicit SoftAbsEnergy(Index n) : n_(n) {}
  Index dimension() const override { return n_; }
  void Value(ConstMatrixRef<double> x, VectorRef<double> values) const override {
    for (Index b = 0; b < x.cols(); ++b) points.push_back(x(0, b));
    values = (x.array().square() + 1.0).sqrt().colwise().sum().transpose();
  }
  void Gradient(ConstMatrixRef<double> x, MatrixRef<double> grad) const override {
    grad = x.array() / (x.array().square() + 1.0).sqrt();
  }
  void HessianVectorProduct(ConstMatrixRef<double> x, ConstMatrixRef<double> v,
                            MatrixRef<double> out) const override {
    out = v.array() * (x.array().square() + 1.0).pow(-1.5);
  }
  mutable std::vector<double> points;

 private:
  Index n_;
};

// Newton-CG's trials lie on the line of its step, and after a rejected full
// step the next length is the minimiser of the quadratic through E(x), the
// slope -r.q and E(x + q) (not a halving, nor a blend with the safe step).
BOOST_AUTO_TEST_CASE(newton_backtracks_to_the_interpolated_minimiser_on_its_line) {
  SoftAbsEnergy energy(1);
  EnergyRootMap<double> map(energy);  // f(x) = x - grad E(x): r = -grad E
  Matrix<double> z = Matrix<double>::Constant(1, 1, 2.0);
  NewtonSolver<double>::Options options;
  options.absolute_tolerance = 1e-10;
  const Summary s = NewtonSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged(), s.FullReport());
  BOOST_TEST(std::abs(z(0, 0)) <= 1e-9);
  const auto E = [](double x) { return std::sqrt(1 + x * x); };
  const double x = 2, r = -x / E(x), q = -x * (1 + x * x);  // the exact 1-D Newton step: -10
  BOOST_TEST_REQUIRE(energy.points.size() >= 3u);
  BOOST_TEST(energy.points[0] == x);
  BOOST_TEST(std::abs(energy.points[1] - (x + q)) <= 1e-12);  // the full step, rejected: E(-8) > E(2)
  const double tau = r * q / (2 * (E(x + q) - E(x) + r * q));  // 0.3028
  BOOST_TEST(std::abs(energy.points[2] - (x + tau * q)) <= 1e-12);
  BOOST_TEST(E(energy.points[2]) < E(x));  // accepted: the next points start from it
}

// E(x) = sum_i c_i sqrt(1 + x_i^2) (c_i from 1 to 8: CG needs several
// iterations), whose Hessian linearisation keeps diag(c (1 + x^2)^-3/2) and has
// products on subsets of its samples; every call counted.
class KeptCurvatureEnergy : public Energy<double> {
 public:
  explicit KeptCurvatureEnergy(Index n) : c_(Vector<double>::LinSpaced(n, 1.0, 8.0)) {}
  Index dimension() const override { return c_.size(); }
  bool SupportsSubsets() const override { return true; }
  void Value(ConstMatrixRef<double> x, VectorRef<double> values) const override {
    values = ((x.array().square() + 1.0).sqrt().colwise() * c_.array()).colwise().sum().transpose();
  }
  void Gradient(ConstMatrixRef<double> x, MatrixRef<double> grad) const override {
    grad = (x.array() / (x.array().square() + 1.0).sqrt()).colwise() * c_.array();
  }
  void HessianVectorProduct(ConstMatrixRef<double> x, ConstMatrixRef<double> v,
                            MatrixRef<double> out) const override {
    ++hessian_products;
    out = v.array() * Curvature(x).array();
  }
  std::unique_ptr<Linearization<double>> LinearizeHessian(ConstMatrixRef<double> x) const override {
    ++linearizations;
    return std::make_unique<Kept>(Curvature(x), this);
  }
  bool LinearizesWithEvaluation() const override { return with_evaluation; }
  std::unique_ptr<Linearization<double>> EvaluateAndLinearizeHessian(ConstMatrixRef<double> x, EnergyUpdate update,
                                                                     MatrixRef<double> out,
                                                                     VectorRef<double> values) const override {
    ++evaluations_with_hessian;
    if (update == EnergyUpdate::kCccp) {
      CccpUpdateAndValue(x, out, values);
    } else {
      GradientAndValue(x, out, values);
    }
    return std::make_unique<Kept>(Curvature(x), this);
  }
  mutable int hessian_products = 0, linearizations = 0, column_products = 0, evaluations_with_hessian = 0;
  bool kept_products = true;    // HasColumnProducts() of the linearisation
  bool with_evaluation = false;  // LinearizesWithEvaluation()

 private:
  Matrix<double> Curvature(ConstMatrixRef<double> x) const {
    return (x.array().square() + 1.0).pow(-1.5).colwise() * c_.array();
  }
  struct Kept final : Linearization<double> {
    Kept(Matrix<double> d, const KeptCurvatureEnergy* owner) : d(std::move(d)), owner(owner) {}
    void JacobianVectorProduct(ConstMatrixRef<double> v, MatrixRef<double> out) const override {
      out = v.array() * d.array();
    }
    void VectorJacobianProduct(ConstMatrixRef<double> u, MatrixRef<double> out) const override {
      JacobianVectorProduct(u, out);
    }
    bool HasColumnProducts() const override { return owner->kept_products; }
    void JacobianVectorProductColumns(const std::vector<Index>& columns, ConstMatrixRef<double> v,
                                      MatrixRef<double> out) const override {
      ++owner->column_products;
      for (std::size_t j = 0; j < columns.size(); ++j) {
        const Index c = static_cast<Index>(j);
        out.col(c) = v.col(c).array() * d.col(columns[j]).array();
      }
    }
    Matrix<double> d;
    const KeptCurvatureEnergy* owner;
  };
  Vector<double> c_;
};

// Newton-CG linearises once per step at the active samples and makes its CG
// products from that linearisation on the samples still iterating (their
// positions among the active ones), never through the map at z; the iterates
// are those of the map's own products (a linearisation without column
// products), to the last bit.
BOOST_AUTO_TEST_CASE(newton_cg_products_come_from_one_linearisation_per_step) {
  const Index n = 6, B = 5;
  Matrix<double> start = testing::RandomMatrix<double>(n, B, 91) * 0.9;
  start.col(1) *= 1e-3;  // converges steps before the others: the active set shrinks
  NewtonSolver<double>::Options options;
  options.absolute_tolerance = 1e-11;

  KeptCurvatureEnergy energy(n);
  EnergyRootMap<double> map(energy);
  Matrix<double> z = start;
  const Summary s = NewtonSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged(), s.FullReport());
  BOOST_TEST(z.cwiseAbs().maxCoeff() <= 1e-10);
  BOOST_TEST(energy.hessian_products == 0);
  BOOST_TEST(energy.linearizations == s.iterations);
  BOOST_TEST(energy.column_products == s.jacobian_products);
  BOOST_TEST(s.jacobian_products > s.iterations);  // CG iterated on the kept curvature

  KeptCurvatureEnergy reference(n);
  reference.kept_products = false;
  EnergyRootMap<double> reference_map(reference);
  Matrix<double> z_reference = start;
  const Summary r = NewtonSolver<double>(options).Solve(reference_map, z_reference);
  BOOST_TEST(reference.linearizations == 1);  // tried once, then the map's products
  BOOST_TEST(reference.hessian_products == r.jacobian_products);
  BOOST_TEST(r.function_evaluations == s.function_evaluations);
  BOOST_TEST(r.jacobian_products == s.jacobian_products);
  BOOST_TEST((z - z_reference).cwiseAbs().maxCoeff() == 0.0);
}

// An energy that linearises with its evaluation hands each sample's Hessian
// over with its accepted point: Newton-CG never linearises on its own, its CG
// products come from the evaluations that gave the points (one product call
// per such evaluation among the samples still iterating, at the samples'
// columns there: compacted after the active set shrank), and the iterates are
// the map products' to the last bit.
BOOST_AUTO_TEST_CASE(newton_cg_takes_each_jacobian_from_the_evaluation_of_its_point) {
  const Index n = 6, B = 5;
  Matrix<double> start = testing::RandomMatrix<double>(n, B, 91) * 0.9;
  start.col(1) *= 1e-3;  // converges steps before the others: the active set shrinks
  start.col(3) *= 3.0;   // far out: its full steps are rejected (backtracking evaluations)
  NewtonSolver<double>::Options options;
  options.absolute_tolerance = 1e-11;

  KeptCurvatureEnergy energy(n);
  energy.with_evaluation = true;
  EnergyRootMap<double> map(energy);
  Matrix<double> z = start;
  const Summary s = NewtonSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged(), s.FullReport());
  BOOST_TEST(z.cwiseAbs().maxCoeff() <= 1e-10);
  BOOST_TEST(energy.linearizations == 0);
  BOOST_TEST(energy.hessian_products == 0);
  BOOST_TEST(energy.evaluations_with_hessian == s.function_evaluations);
  BOOST_TEST(energy.column_products >= s.jacobian_products);
  BOOST_TEST(s.jacobian_products > s.iterations);

  KeptCurvatureEnergy reference(n);
  reference.kept_products = false;
  EnergyRootMap<double> reference_map(reference);
  Matrix<double> z_reference = start;
  const Summary r = NewtonSolver<double>(options).Solve(reference_map, z_reference);
  BOOST_TEST(r.function_evaluations == s.function_evaluations);
  BOOST_TEST(r.jacobian_products == s.jacobian_products);
  BOOST_TEST((z - z_reference).cwiseAbs().maxCoeff() == 0.0);
}

BOOST_AUTO_TEST_CASE(energy_root_problem) {
  const Index n = 6, B = 2;
  testing::QuadraticEnergy<double> energy(testing::RandomSpd<double>(n, 0.1, 5.0, 71),
                                          testing::RandomMatrix<double>(n, 1, 72));
  EnergyRootMap<double> map(energy);  // I - H is not a contraction here: Picard fails
  Matrix<double> z = Matrix<double>::Zero(n, B);
  NewtonSolver<double>::Options options;
  options.absolute_tolerance = 1e-11;
  Summary s = NewtonSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged());
  for (Index b = 0; b < B; ++b) BOOST_TEST((z.col(b) - energy.Minimiser()).norm() <= 1e-9);
}

BOOST_AUTO_TEST_CASE(iteration_budget_and_user_abort) {
  const Index n = 5, d = 3, B = 2;
  TanhDeqMap<double> map(n, d, 0.9, 81);
  map.SetInput(testing::RandomMatrix<double>(d, B, 82));
  for (bool krylov : {false, true}) {
    NewtonSolver<double>::Options options;
    options.newton_krylov = krylov;
    options.absolute_tolerance = 1e-300;  // unreachable
    options.relative_tolerance = 0.0;
    options.max_stall_iterations = 0;
    options.max_iterations = 2;
    Matrix<double> z = Matrix<double>::Zero(n, B);
    Summary s = NewtonSolver<double>(options).Solve(map, z);
    BOOST_TEST(s.iterations <= 2);
    BOOST_TEST(!s.IsConverged());
    for (TerminationType t : s.sample_status) BOOST_TEST(t != TerminationType::kConverged);

    options.max_iterations = 100;
    int calls = 0;
    options.callback = [&calls](const IterationSummary& it) {
      ++calls;
      return it.iteration >= 1 ? CallbackReturnType::kAbort : CallbackReturnType::kContinue;
    };
    z.setZero();
    s = NewtonSolver<double>(options).Solve(map, z);
    BOOST_TEST(s.termination_type == TerminationType::kUserAbort);
    BOOST_TEST(s.iterations == 1);
    BOOST_TEST(calls == 2);
  }
}
