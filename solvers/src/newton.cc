// NewtonSolver: the Ceres trust-region path (per-sample problems run in
// lockstep, see lockstep.h) and the matrix-free Newton-Krylov path.
#include <implicit/solvers/internal/batch_evaluator.h>
#include <implicit/solvers/internal/batch_monitor.h>
#include <implicit/solvers/linear_solvers.h>
#include <implicit/solvers/newton.h>
#include <implicit/solvers/sharded_solve.h>

#include <ceres/ceres.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <memory>
#include <vector>

#include "lockstep.h"

namespace implicit {
namespace {

using internal::BarrierCallback;
using internal::FromCeres;
using internal::Lockstep;

// One sample's residual block g(z_b) (n residuals, one parameter block of
// size n). Every evaluation is posted to the lockstep coordinator.
class SampleResidual final : public ceres::CostFunction {
 public:
  SampleResidual(Lockstep* lockstep, int sample, int n) : lockstep_(lockstep), sample_(sample) {
    set_num_residuals(n);
    mutable_parameter_block_sizes()->push_back(n);
  }
  bool Evaluate(double const* const* parameters, double* residuals,
                double** jacobians) const override {
    Lockstep::Request request;
    request.sample = sample_;
    request.point = parameters[0];
    request.out_vector = residuals;
    request.out_matrix = (jacobians != nullptr) ? jacobians[0] : nullptr;
    return lockstep_->Evaluate(&request);
  }

 private:
  Lockstep* lockstep_;
  int sample_;
};

// A point Ceres evaluated and f there (Scalar, at the point rounded to Scalar).
template <typename Scalar>
struct CachedPoint {
  std::vector<double> point;
  Vector<Scalar> f;
  bool valid = false;
  bool Matches(const double* p) const {
    return valid && std::memcmp(point.data(), p, point.size() * sizeof(double)) == 0;
  }
};

template <typename Scalar>
void CopyPoint(const double* p, Index n, Eigen::Ref<Vector<Scalar>> out) {
  for (Index i = 0; i < n; ++i) out(i) = static_cast<Scalar>(p[i]);
}

// Columns [begin, begin + count) of the batch `whole` as a batch of their own
// (the dense path's chunks). A map that evaluates column subsets (and column
// JVPs) is called on the chunk alone; any other map on the whole batch with
// the chunk placed in it (its samples are independent, so the other columns
// only fill the call).
template <typename Scalar>
class ChunkMap final : public FixedPointMap<Scalar> {
 public:
  ChunkMap(const FixedPointMap<Scalar>& map, ConstMatrixRef<Scalar> whole, Index begin, Index count)
      : map_(map), whole_(whole), begin_(begin), count_(count), columns_(count) {
    for (Index j = 0; j < count; ++j) columns_[j] = begin + j;
  }
  Index dimension() const override { return map_.dimension(); }
  bool SupportsSubsets() const override { return map_.SupportsSubsets(); }
  bool HasJacobianProducts() const override { return map_.HasJacobianProducts(); }

  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    if (map_.SupportsColumnSubsets()) return map_.EvaluateColumns(z, columns_, out);
    Place(z, &z_);
    map_.Evaluate(z_, out_);
    out = out_.middleCols(begin_, count_);
  }
  void JacobianVectorProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    if (map_.SupportsColumnJacobianProducts()) return map_.JacobianVectorProductColumns(z, columns_, v, out);
    Place(z, &z_);
    v_.setZero(whole_.rows(), whole_.cols());
    v_.middleCols(begin_, count_) = v;
    map_.JacobianVectorProduct(z_, v_, out_);
    out = out_.middleCols(begin_, count_);
  }

 private:
  void Place(ConstMatrixRef<Scalar> z, Matrix<Scalar>* into) const {
    *into = whole_;
    into->middleCols(begin_, count_) = z;
    out_.resize(whole_.rows(), whole_.cols());
  }

  const FixedPointMap<Scalar>& map_;
  ConstMatrixRef<Scalar> whole_;
  const Index begin_, count_;
  std::vector<Index> columns_;
  mutable Matrix<Scalar> z_, v_, out_;  // whole-batch workspaces (the calling thread only)
};

}  // namespace

template <typename Scalar>
Summary NewtonSolver<Scalar>::Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const {
  if (!map.HasJacobianProducts()) {
    throw std::invalid_argument(
        "newton: the map provides no Jacobian-vector products (HasJacobianProducts() is "
        "false); Newton needs them to build J_g = J_f - I. Use picard, anderson or broyden "
        "for this map");
  }
  internal::CheckBatch("newton: initial state z", z, map.dimension());
  if (internal::UsesEnergy(options_, map) && map.HasSymmetricJacobian()) {
    return SolveOnEnergy(map, z);
  }
  if (!UsesNewtonKrylov(map.dimension())) return SolveDense(map, z);
  Summary summary = SolveKrylov(map, z);
  const Options defaults;
  if (options_.trust_region != defaults.trust_region ||
      options_.initial_trust_region_radius != defaults.initial_trust_region_radius ||
      options_.max_threads != defaults.max_threads) {
    summary.message += "; trust_region, initial_trust_region_radius and max_threads configure the dense path "
                       "(newton_krylov=false) and were not used";
  }
  return summary;
}

// ---- dense path: Ceres trust region, one problem per sample ---------------
template <typename Scalar>
Summary NewtonSolver<Scalar>::SolveDense(const FixedPointMap<Scalar>& map,
                                         MatrixRef<Scalar> z) const {
  const Index batch = z.cols(), chunk = options_.max_threads;
  if (batch <= chunk) return SolveDenseInLockstep(map, z);
  const auto start = std::chrono::steady_clock::now();
  std::vector<Summary> chunks;
  std::string notes;
  for (Index begin = 0; begin < batch; begin += chunk) {
    const Index count = std::min(chunk, batch - begin);
    ChunkMap<Scalar> chunk_map(map, z, begin, count);
    chunks.push_back(SolveDenseInLockstep(chunk_map, z.middleCols(begin, count)));
    const std::string& message = chunks.back().message;
    const std::size_t note = message.find("; ");  // what follows "k/n samples converged"
    if (note != std::string::npos) {
      notes += "; samples " + std::to_string(begin) + ".." + std::to_string(begin + count - 1) + ": " +
               message.substr(note + 2);
    }
  }
  Summary summary = MergeShardSummaries(chunks, "");
  const auto converged = std::count(summary.sample_status.begin(), summary.sample_status.end(),
                                    TerminationType::kConverged);
  summary.message = std::to_string(converged) + "/" + std::to_string(batch) +
                    " samples converged, solved in " + std::to_string(chunks.size()) +
                    " chunks of at most " + std::to_string(chunk) + " samples (max_threads)" + notes;
  summary.wall_time_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

template <typename Scalar>
Summary NewtonSolver<Scalar>::SolveDenseInLockstep(const FixedPointMap<Scalar>& map,
                                                   MatrixRef<Scalar> z) const {
  internal::BatchMonitor<Scalar> monitor(options_, name());
  monitor.Begin(map, z);
  const Index n = z.rows();
  const int batch = static_cast<int>(z.cols());

  Matrix<Scalar> fz(n, batch), zt(n, batch), ft(n, batch), v(n, batch), jv(n, batch);
  if (n == 0) {  // nothing to solve: every residual is 0
    monitor.Observe(z, fz);
    return monitor.Finish(z);
  }
  std::vector<std::vector<double>> params(batch, std::vector<double>(n));
  std::vector<CachedPoint<Scalar>> candidate(batch), current(batch);
  for (int b = 0; b < batch; ++b) {
    for (Index i = 0; i < n; ++i) params[b][i] = static_cast<double>(z(i, b));
    candidate[b].point.resize(n);
    current[b].point.resize(n);
    candidate[b].f.resize(n);
    current[b].f.resize(n);
  }
  std::vector<ceres::TerminationType> ceres_end(batch, ceres::FAILURE);
  std::vector<std::string> ceres_message(batch);

  // Iteration 0 is observed here, before any Ceres run starts: a sample that
  // is already converged or non-finite at its start never gets a Ceres problem.
  map.Evaluate(z, fz);
  monitor.CountEvaluations();
  for (int b = 0; b < batch; ++b) {
    std::copy(params[b].begin(), params[b].end(), current[b].point.begin());
    current[b].f = fz.col(b);
    current[b].valid = true;
  }
  if (!monitor.Observe(z, fz)) return monitor.Finish(z);
  std::vector<char> launch(batch);
  for (int b = 0; b < batch; ++b) launch[b] = monitor.active(b) ? 1 : 0;
  bool initial_barrier = true;  // Ceres' iteration 0 is the one observed above

  ceres::Solver::Options ceres_options;
  ceres_options.minimizer_type = ceres::TRUST_REGION;
  ceres_options.trust_region_strategy_type = options_.trust_region == "dogleg"
                                                 ? ceres::DOGLEG
                                                 : ceres::LEVENBERG_MARQUARDT;
  ceres_options.linear_solver_type = ceres::DENSE_QR;
  ceres_options.max_num_iterations = options_.max_iterations + 1;  // the monitor stops first
  ceres_options.function_tolerance = 0.0;  // convergence is decided by the monitor
  ceres_options.gradient_tolerance = 0.0;
  ceres_options.parameter_tolerance = 0.0;
  ceres_options.initial_trust_region_radius = options_.initial_trust_region_radius;
  ceres_options.max_trust_region_radius =
      std::max(ceres_options.max_trust_region_radius, options_.initial_trust_region_radius);
  ceres_options.max_num_consecutive_invalid_steps = 10;
  ceres_options.logging_type = ceres::SILENT;
  ceres_options.minimizer_progress_to_stdout = false;
  ceres_options.update_state_every_iteration = true;
  ceres_options.num_threads = 1;

  Lockstep lockstep(batch);

  auto body = [&](int b) {
    if (!launch[b]) return;
    ceres::Problem problem;  // owns the cost function
    problem.AddResidualBlock(new SampleResidual(&lockstep, b, static_cast<int>(n)), nullptr,
                             params[b].data());
    BarrierCallback barrier(&lockstep, b);
    ceres::Solver::Options options = ceres_options;
    options.callbacks.push_back(&barrier);
    ceres::Solver::Summary summary;
    ceres::Solve(options, &problem, &summary);
    ceres_end[b] = summary.termination_type;
    ceres_message[b] = summary.message;
  };

  // Serves residual and Jacobian requests: at most one batched f evaluation
  // and one round of n batched JVPs.
  std::vector<const CachedPoint<Scalar>*> source;
  std::vector<char> needs_jacobian;
  Vector<Scalar> w(n);
  auto serve = [&](std::vector<Lockstep::Request*>& requests) {
    source.assign(requests.size(), nullptr);
    bool evaluate = false, jacobian = false;
    zt = z;
    for (std::size_t k = 0; k < requests.size(); ++k) {
      const Lockstep::Request& r = *requests[k];
      if (candidate[r.sample].Matches(r.point)) {
        source[k] = &candidate[r.sample];
      } else if (current[r.sample].Matches(r.point)) {
        source[k] = &current[r.sample];
      } else {
        evaluate = true;
        CopyPoint<Scalar>(r.point, n, zt.col(r.sample));
      }
    }
    if (evaluate) {
      map.Evaluate(zt, ft);
      monitor.CountEvaluations();
      for (std::size_t k = 0; k < requests.size(); ++k) {
        if (source[k] != nullptr) continue;
        const Lockstep::Request& r = *requests[k];
        CachedPoint<Scalar>& c = candidate[r.sample];
        std::copy(r.point, r.point + n, c.point.begin());
        c.f = ft.col(r.sample);
        c.valid = true;
        source[k] = &c;
      }
    }
    needs_jacobian.assign(requests.size(), 0);
    // (the monitor's own tolerance rule, sample_rule.h)
    const internal::SampleLimits forward_limits = internal::MakeSampleLimits<Scalar>(options_, false);
    for (std::size_t k = 0; k < requests.size(); ++k) {
      Lockstep::Request& r = *requests[k];
      bool ok = true;
      for (Index i = 0; i < n; ++i) {
        const Scalar p = static_cast<Scalar>(r.point[i]);
        w(i) = p;
        const double g = static_cast<double>(source[k]->f(i)) - static_cast<double>(p);
        r.out_vector[i] = g;
        ok = ok && std::isfinite(g);
      }
      r.ok = ok;
      if (r.out_matrix == nullptr || !ok) continue;
      // Ceres asks for the Jacobian at every accepted point, before the
      // iteration's callback. Where the monitor is about to declare the sample
      // converged (the same test on the same numbers) the Jacobian is never
      // used: J_g = -I is returned instead of spending n JVPs on it. (Were the
      // prediction ever wrong, the cost would be one Picard-like step.)
      const double residual = static_cast<double>((source[k]->f - w).norm());
      const double f_norm = static_cast<double>(source[k]->f.norm());
      if (internal::SampleConverged(forward_limits, residual, f_norm)) {
        for (Index row = 0; row < n; ++row) {
          for (Index col = 0; col < n; ++col) r.out_matrix[row * n + col] = row == col ? -1.0 : 0.0;
        }
      } else {
        needs_jacobian[k] = 1;
        jacobian = true;
      }
    }
    if (!jacobian) return;
    // Column i of every sample's J_f at once: JVP with v = e_i in every column.
    zt = z;
    for (std::size_t k = 0; k < requests.size(); ++k) {
      if (needs_jacobian[k]) CopyPoint<Scalar>(requests[k]->point, n, zt.col(requests[k]->sample));
    }
    v.setZero();
    for (Index i = 0; i < n; ++i) {
      if (i > 0) v.row(i - 1).setZero();
      v.row(i).setOnes();
      map.JacobianVectorProduct(zt, v, jv);
      monitor.CountJacobianProducts();
      for (std::size_t k = 0; k < requests.size(); ++k) {
        if (!needs_jacobian[k]) continue;
        Lockstep::Request* r = requests[k];
        double* jac = r->out_matrix;  // row-major n x n: d g_row / d z_i
        for (Index row = 0; row < n; ++row) {
          const double value = static_cast<double>(jv(row, r->sample)) - (row == i ? 1.0 : 0.0);
          jac[row * n + i] = value;
          if (!std::isfinite(value)) r->ok = false;
        }
      }
    }
  };

  // At the end of an iteration (or when a sample's Ceres run ended): move each
  // sample's accepted point into z, observe the batch, decide who continues.
  std::vector<int> stopped_by_ceres;
  auto observe = [&](const std::vector<int>& at_barrier, const std::vector<int>& finished,
                     std::vector<char>* decision) {
    if (initial_barrier) {  // every Ceres run is at its iteration 0 (or ended there)
      initial_barrier = false;
      for (int b : finished) {
        if (monitor.active(b)) {
          monitor.StopSample(b, FromCeres(ceres_end[b]));
          stopped_by_ceres.push_back(b);
        }
      }
      for (int b : at_barrier) (*decision)[b] = monitor.active(b) ? 1 : 0;
      return;
    }
    bool any_active = false, evaluate = false;
    zt = z;
    auto take = [&](int b) {
      const double* x = params[b].data();
      if (candidate[b].Matches(x)) {
        current[b] = candidate[b];
      } else if (!current[b].Matches(x)) {
        evaluate = true;
      }
      CopyPoint<Scalar>(x, n, zt.col(b));
      any_active = any_active || monitor.active(b);
    };
    for (int b : at_barrier) take(b);
    for (int b : finished) take(b);
    if (!any_active) return;
    if (evaluate) {  // only if Ceres ended on a point it never evaluated
      map.Evaluate(zt, ft);
      monitor.CountEvaluations();
      auto refresh = [&](int b) {
        if (current[b].Matches(params[b].data())) return;
        std::copy(params[b].begin(), params[b].end(), current[b].point.begin());
        current[b].f = ft.col(b);
        current[b].valid = true;
      };
      for (int b : at_barrier) refresh(b);
      for (int b : finished) refresh(b);
    }
    auto place = [&](int b) {
      if (!monitor.active(b)) return;
      z.col(b) = zt.col(b);
      fz.col(b) = current[b].f;
    };
    for (int b : at_barrier) place(b);
    for (int b : finished) place(b);
    monitor.Observe(z, fz);
    for (int b : finished) {
      if (monitor.active(b)) {
        monitor.StopSample(b, FromCeres(ceres_end[b]));
        stopped_by_ceres.push_back(b);
      }
    }
    for (int b : at_barrier) (*decision)[b] = monitor.active(b) ? 1 : 0;
  };

  lockstep.Run(body, serve, observe);
  Summary summary = monitor.Finish(z);
  internal::NoteCeresStops(stopped_by_ceres, ceres_message, &summary);
  return summary;
}

// ---- matrix-free path: inexact Newton-Krylov with backtracking -------------

// Eisenstat and Walker's choice 2 (gamma 0.9, alpha 2) for the batch: the
// slowest sample's reduction |g_k| / |g_k-1| sets eta_k = 0.9 ratio^2, kept at
// least 0.9 eta_k-1^2 while that exceeds 0.1 (no sudden tightening), at most
// kMaxForcingTerm, and at least half of tolerance / the largest |g_k| (no
// solving the last step more accurately than the tolerance needs).
namespace {
constexpr double kInitialForcingTerm = 0.5;
constexpr double kMaxForcingTerm = 0.9;
double EisenstatWalker(double previous_eta, double ratio, double tolerance_over_norm) {
  double eta = 0.9 * ratio * ratio;
  const double safeguard = 0.9 * previous_eta * previous_eta;
  if (safeguard > 0.1) eta = std::max(eta, safeguard);
  eta = std::max(eta, 0.5 * tolerance_over_norm);
  return std::min(eta, kMaxForcingTerm);
}
}  // namespace
template <typename Scalar>
Summary NewtonSolver<Scalar>::SolveKrylov(const FixedPointMap<Scalar>& map,
                                          MatrixRef<Scalar> z) const {
  internal::BatchMonitor<Scalar> monitor(options_, name());
  monitor.Begin(map, z);
  const Index n = z.rows(), batch = z.cols();
  Matrix<Scalar> fz(n, batch), g(n, batch), d(n, batch), zt(n, batch), ft(n, batch);
  Matrix<Scalar> rhs(n, batch);
  std::vector<double> g_norm(batch), step(batch);
  std::vector<char> searching(batch);
  int line_search_failures = 0;
  auto any = [](const std::vector<char>& flags) {
    return std::any_of(flags.begin(), flags.end(), [](char c) { return c != 0; });
  };
  // J_g v = J_f v - v at the current z, one batched JVP (of the map's
  // linearisation there, made once per Newton step from z and f(z):
  // FixedPointMap::LinearizeWithValue).
  std::unique_ptr<Linearization<Scalar>> jacobian_f;
  const LinearOperator<Scalar> jacobian_g = [&](ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) {
    jacobian_f->JacobianVectorProduct(v, out);
    out -= v;
    monitor.CountJacobianProducts();
  };
  LinearSolverOptions krylov;
  krylov.restart = options_.krylov_restart;
  krylov.max_iterations = options_.max_krylov_iterations;
  // The forcing term: constant, or Eisenstat-Walker's choice 2 (forcing_term 0).
  const bool eisenstat_walker = options_.forcing_term == 0.0;
  double eta = eisenstat_walker ? kInitialForcingTerm : options_.forcing_term;
  std::vector<double> previous_norm(batch, 0.0);
  bool first = true;

  map.Evaluate(z, fz);
  monitor.CountEvaluations();
  while (monitor.Observe(z, fz)) {
    // ---- GMRES (linear_solvers.h) on J_g d = -g, all samples in lockstep;
    // finished samples get rhs 0 and so d = 0 ----
    g = fz - z;
    double ratio = 0.0, largest = 0.0;
    for (Index b = 0; b < batch; ++b) {
      g_norm[b] = static_cast<double>(g.col(b).norm());
      if (monitor.active(b)) {
        rhs.col(b) = -g.col(b);
        if (previous_norm[b] > 0.0) ratio = std::max(ratio, g_norm[b] / previous_norm[b]);
        largest = std::max(largest, g_norm[b]);
      } else {
        rhs.col(b).setZero();
      }
    }
    if (eisenstat_walker && !first) eta = EisenstatWalker(eta, ratio, options_.absolute_tolerance / largest);
    first = false;
    previous_norm = g_norm;
    krylov.tolerance = eta;
    d.setZero();
    jacobian_f = map.LinearizeWithValue(z, fz);
    const LinearSolveSummary inner = GmresSolve<Scalar>(jacobian_g, rhs, d, krylov);
    for (Index b = 0; b < batch; ++b) {
      if (monitor.active(b) && inner.sample_status[b] == TerminationType::kNonFinite) {
        monitor.StopSample(b, TerminationType::kNonFinite);
      }
    }

    // ---- backtracking on |g| ----
    for (Index b = 0; b < batch; ++b) {
      searching[b] = monitor.active(b) ? 1 : 0;
      step[b] = 1.0;
    }
    for (int round = 0; round <= options_.max_backtracks && any(searching); ++round) {
      zt = z;
      for (Index b = 0; b < batch; ++b) {
        if (searching[b]) zt.col(b) += static_cast<Scalar>(step[b]) * d.col(b);
      }
      map.Evaluate(zt, ft);
      monitor.CountEvaluations();
      for (Index b = 0; b < batch; ++b) {
        if (!searching[b]) continue;
        const double trial = static_cast<double>((ft.col(b) - zt.col(b)).norm());
        if (trial <= (1.0 - options_.sufficient_decrease * step[b]) * g_norm[b]) {
          z.col(b) = zt.col(b);
          fz.col(b) = ft.col(b);
          searching[b] = 0;
        } else {
          step[b] *= 0.5;
        }
      }
    }
    for (Index b = 0; b < batch; ++b) {
      if (searching[b]) {
        monitor.StopSample(b, TerminationType::kFailure);
        ++line_search_failures;
      }
    }
  }
  Summary summary = monitor.Finish(z);
  if (line_search_failures > 0) {
    summary.message += "; Newton-Krylov line search failed for " +
                       std::to_string(line_search_failures) + " samples";
  }
  return summary;
}

// ---- energy path: truncated Newton-CG, guarded ------------------------------
template <typename Scalar>
Summary NewtonSolver<Scalar>::SolveOnEnergy(const FixedPointMap<Scalar>& map,
                                            MatrixRef<Scalar> z) const {
  internal::BatchMonitor<Scalar> monitor(options_, name());
  monitor.Begin(map, z);
  const Index n = z.rows(), batch = z.cols();
  const bool subsets = map.SupportsColumnJacobianProducts();
  internal::BatchEvaluator<Scalar> evaluator(map, batch, /*with_energy=*/true);
  internal::GuardedStepper<Scalar> stepper(options_, n, batch, Scalar(1), internal::TrialPath::kLine);

  // ---- all memory, allocated once -------------------------------------
  Matrix<Scalar> fz(n, batch), q(n, batch), res(n, batch), d(n, batch), ad(n, batch);
  Matrix<Scalar> zc(n, batch), dc(n, batch), jc(n, batch);  // compacted JVP operands
  Vector<Scalar> e(batch);
  std::vector<char> proposal(batch, 1);
  std::vector<double> rr(batch, 0.0), target(batch, 0.0);
  std::vector<Index> cg, next;
  cg.reserve(batch);
  next.reserve(batch);
  const double tiny = static_cast<double>(std::numeric_limits<Scalar>::epsilon());

  // The Jacobian at each step's active samples, made once for the step's CG
  // products (Linearization: an RBM's keeps G'' of its scores, a Hopfield
  // energy's the softmax weights), when it has products on subsets of its
  // columns; otherwise each product goes to the map at z. Tried at the first
  // step: a map whose linearisation lacks them pays one (a copy of z for the
  // default) and keeps the map's products.
  bool linearize = subsets && map.SupportsSubsets();  // compacted points: no per-sample data
  // A map that linearises with its evaluation (an RBM's K'' from the pass
  // that gives K and K') hands every sample's Jacobian over with its
  // accepted point (BatchEvaluator::KeepLinearizations): no Linearize at all.
  bool kept = linearize && map.LinearizesWithEvaluation();
  if (kept) evaluator.KeepLinearizations(true);
  std::vector<const Linearization<Scalar>*> owners;  // the kept Jacobians of a product's columns
  std::vector<Index> group;
  std::unique_ptr<Linearization<Scalar>> jacobian;
  std::vector<Index> position(batch, 0), at;  // sample -> its column in the linearisation
  at.reserve(batch);
  group.reserve(batch);
  auto linearize_active = [&]() {
    const std::vector<Index>& active = monitor.active_columns();
    const Index k = static_cast<Index>(active.size());
    for (Index j = 0; j < k; ++j) {
      zc.col(j) = z.col(active[j]);
      position[active[j]] = j;
    }
    jacobian = map.Linearize(zc.leftCols(k));
    if (!jacobian->HasColumnProducts()) {
      jacobian.reset();
      linearize = false;
    }
  };

  // ad.col(b) = d - J_f d for the samples b in `group`, whose Jacobians are
  // the columns `at` of `jacobian_at`.
  auto product_from = [&](const Linearization<Scalar>& jacobian_at) {
    const Index m = static_cast<Index>(group.size());
    for (Index j = 0; j < m; ++j) dc.col(j) = d.col(group[j]);
    jacobian_at.JacobianVectorProductColumns(at, dc.leftCols(m), jc.leftCols(m));
    for (Index j = 0; j < m; ++j) ad.col(group[j]) = d.col(group[j]) - jc.col(j);
  };
  // ad.col(b) = d - J_f d for b in `columns`: one batched JVP.
  auto apply = [&](const std::vector<Index>& columns) {
    const Index k = static_cast<Index>(columns.size());
    if (kept) {  // one product per evaluation that gave the columns' points
      owners.clear();
      for (Index b : columns) {
        const Linearization<Scalar>* owner = evaluator.linearization(b);
        if (std::find(owners.begin(), owners.end(), owner) == owners.end()) owners.push_back(owner);
      }
      for (const Linearization<Scalar>* owner : owners) {
        at.clear();
        group.clear();
        for (Index b : columns) {
          if (evaluator.linearization(b) != owner) continue;
          at.push_back(evaluator.linearization_column(b));
          group.push_back(b);
        }
        product_from(*owner);
      }
    } else if (jacobian) {
      at.clear();
      for (Index b : columns) at.push_back(position[b]);
      group = columns;
      product_from(*jacobian);
    } else if (subsets) {
      for (Index j = 0; j < k; ++j) {
        zc.col(j) = z.col(columns[j]);
        dc.col(j) = d.col(columns[j]);
      }
      map.JacobianVectorProductColumns(zc.leftCols(k), columns, dc.leftCols(k), jc.leftCols(k));
      for (Index j = 0; j < k; ++j) ad.col(columns[j]) = d.col(columns[j]) - jc.col(j);
    } else {
      dc.setZero();
      for (Index b : columns) dc.col(b) = d.col(b);
      map.JacobianVectorProduct(z, dc, jc);
      for (Index b : columns) ad.col(b) = d.col(b) - jc.col(b);
    }
    monitor.CountJacobianProducts();
  };

  evaluator.Evaluate(z, monitor.active_columns(), fz, &e, &monitor);
  if (kept && !monitor.active_columns().empty() &&
      !evaluator.linearization(monitor.active_columns().front())->HasColumnProducts()) {
    kept = false;  // the map's products instead (a linearisation without column products)
    linearize = false;
    evaluator.KeepLinearizations(false);
  }
  while (monitor.Observe(z, fz, &e)) {
    cg.clear();
    for (Index b : monitor.active_columns()) {
      res.col(b) = fz.col(b) - z.col(b);  // r, the right-hand side
      d.col(b) = res.col(b);
      q.col(b).setZero();
      rr[b] = static_cast<double>(res.col(b).squaredNorm());
      const double eta = std::min(0.5, std::sqrt(std::sqrt(rr[b])));
      target[b] = eta * eta * rr[b];
      cg.push_back(b);
    }
    if (linearize && !kept) linearize_active();
    for (int it = 0; it < options_.max_krylov_iterations && !cg.empty(); ++it) {
      apply(cg);
      next.clear();
      for (Index b : cg) {
        const double curvature = static_cast<double>(d.col(b).dot(ad.col(b)));
        const double dd = static_cast<double>(d.col(b).squaredNorm());
        if (!(curvature > tiny * dd) || !std::isfinite(curvature)) {
          if (it == 0) q.col(b) = d.col(b);  // no positive curvature at all: the safe step r
          continue;                          // otherwise stop at the last CG iterate
        }
        const Scalar alpha = static_cast<Scalar>(rr[b] / curvature);
        q.col(b) += alpha * d.col(b);
        res.col(b) -= alpha * ad.col(b);
        const double rr_new = static_cast<double>(res.col(b).squaredNorm());
        if (rr_new <= target[b]) continue;
        d.col(b) = res.col(b) + static_cast<Scalar>(rr_new / rr[b]) * d.col(b);
        rr[b] = rr_new;
        next.push_back(b);
      }
      cg.swap(next);
    }
    jacobian.reset();
    stepper.Step(z, fz, &e, q, proposal, &evaluator, &monitor);
  }
  return monitor.Finish(z);
}

template class NewtonSolver<float>;
template class NewtonSolver<double>;

}  // namespace implicit
