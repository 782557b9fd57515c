// Per-sample bookkeeping shared by every forward solver (internal).
//
// A solver evaluates f on the whole batch, hands (z, f(z)) to Observe(), and
// updates only the columns that are still active(). The monitor decides
// convergence, divergence, stalls and non-finite values per sample, keeps each
// sample's best iterate, records the trace, calls the user callback, and in
// Finish() writes the best iterate back for every sample that did not converge.
// All memory is allocated in Begin(); Observe() does not allocate.
#pragma once

#include <implicit/core/map.h>
#include <implicit/solvers/solver.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace implicit {
namespace internal {

template <typename Scalar>
class BatchMonitor {
 public:
  BatchMonitor(const SolverOptions& options, std::string solver_name)
      : options_(options) {
    summary_.solver = std::move(solver_name);
  }

  // Validates the problem's shapes, allocates all per-sample state, starts the clock.
  void Begin(const FixedPointMap<Scalar>& map, ConstMatrixRef<Scalar> z) {
    CheckBatch((summary_.solver + ": initial state z").c_str(), z, map.dimension());
    start_ = std::chrono::steady_clock::now();
    const Index batch = z.cols();
    best_z_ = z;
    best_residual_.assign(batch, std::numeric_limits<double>::infinity());
    best_relative_.assign(batch, std::numeric_limits<double>::infinity());
    initial_residual_.assign(batch, 0.0);
    stall_count_.assign(batch, 0);
    active_.assign(batch, 1);
    num_active_ = static_cast<int>(batch);
    summary_.sample_status.assign(batch, TerminationType::kMaxIterations);
    summary_.sample_residual.assign(batch, std::numeric_limits<double>::infinity());
    summary_.sample_iterations.assign(batch, 0);
    if (options_.record_trace) summary_.trace.reserve(options_.max_iterations + 1);
    iteration_ = -1;
  }

  bool active(Index b) const { return active_[b] != 0; }
  int num_active() const { return num_active_; }
  int iteration() const { return iteration_; }
  double best_residual(Index b) const { return best_residual_[b]; }
  // Column b's best iterate so far (for solvers that restart from it).
  auto best_iterate(Index b) const { return best_z_.col(b); }
  const SolverOptions& options() const { return options_; }

  void CountEvaluations(int n = 1) { summary_.function_evaluations += n; }
  void CountJacobianProducts(int n = 1) { summary_.jacobian_products += n; }

  // Ends sample b with `status` (e.g. kFailure when a solver's inner step broke).
  void StopSample(Index b, TerminationType status) {
    if (!active(b)) return;
    active_[b] = 0;
    --num_active_;
    summary_.sample_status[b] = status;
    summary_.sample_iterations[b] = std::max(iteration_, 0);
  }

  // Observes iteration k's state z and its image fz = f(z) (both n x B).
  // Returns true while some sample is still active.
  bool Observe(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> fz) {
    ++iteration_;
    double max_residual = 0.0, sum_residual = 0.0;
    const Index batch = z.cols();
    for (Index b = 0; b < batch; ++b) {
      if (!active(b)) {
        const double r = summary_.sample_residual[b];
        if (std::isfinite(r)) max_residual = std::max(max_residual, r);
        sum_residual += std::isfinite(r) ? r : 0.0;
        continue;
      }
      const double r = static_cast<double>((fz.col(b) - z.col(b)).norm());
      const double f_norm = static_cast<double>(fz.col(b).norm());
      summary_.sample_residual[b] = r;
      if (!std::isfinite(r) || !std::isfinite(f_norm) || !z.col(b).allFinite()) {
        StopSample(b, TerminationType::kNonFinite);
        continue;
      }
      max_residual = std::max(max_residual, r);
      sum_residual += r;
      if (iteration_ == 0) initial_residual_[b] = r;
      if (r < best_residual_[b]) {
        best_residual_[b] = r;
        best_relative_[b] = f_norm > 0 ? r / f_norm : r;
        best_z_.col(b) = z.col(b);
        stall_count_[b] = 0;
      } else {
        ++stall_count_[b];
      }
      if (r <= options_.absolute_tolerance ||
          r <= options_.relative_tolerance * f_norm) {
        StopSample(b, TerminationType::kConverged);
      } else if (iteration_ > 0 &&
                 r > options_.divergence_threshold *
                         std::max(initial_residual_[b],
                                  std::numeric_limits<double>::min())) {
        StopSample(b, TerminationType::kDiverged);
      } else if (options_.max_stall_iterations > 0 &&
                 stall_count_[b] >= options_.max_stall_iterations) {
        StopSample(b, TerminationType::kStalled);
      }
    }
    const double seconds = Seconds();
    if (options_.record_trace) {
      TraceEntry entry;
      entry.iteration = iteration_;
      entry.function_evaluations = summary_.function_evaluations;
      entry.seconds = seconds;
      entry.max_residual = max_residual;
      entry.mean_residual = sum_residual / static_cast<double>(batch);
      summary_.trace.push_back(entry);
    }
    if (num_active_ > 0 && iteration_ >= options_.max_iterations) {
      for (Index b = 0; b < batch; ++b) StopSample(b, TerminationType::kMaxIterations);
      loop_end_ = TerminationType::kMaxIterations;
    }
    if (options_.callback) {
      IterationSummary it;
      it.iteration = iteration_;
      it.function_evaluations = summary_.function_evaluations;
      it.max_residual = max_residual;
      it.num_active = num_active_;
      it.num_converged = CountStatus(TerminationType::kConverged);
      it.seconds = seconds;
      if (options_.callback(it) == CallbackReturnType::kAbort && num_active_ > 0) {
        for (Index b = 0; b < batch; ++b) StopSample(b, TerminationType::kUserAbort);
        loop_end_ = TerminationType::kUserAbort;
      }
    }
    return num_active_ > 0;
  }

  // Writes each unconverged sample's best finite iterate back into z and
  // returns the completed Summary.
  Summary Finish(MatrixRef<Scalar> z) {
    const Index batch = z.cols();
    double max_abs = 0.0, max_rel = 0.0;
    for (Index b = 0; b < batch; ++b) {
      if (active(b)) StopSample(b, TerminationType::kMaxIterations);
      if (summary_.sample_status[b] != TerminationType::kConverged &&
          std::isfinite(best_residual_[b])) {
        z.col(b) = best_z_.col(b);
        summary_.sample_residual[b] = best_residual_[b];
      }
      const double r = summary_.sample_residual[b];
      max_abs = std::isfinite(r) ? std::max(max_abs, r)
                                 : std::numeric_limits<double>::infinity();
      const double rel = best_relative_[b];
      max_rel = std::isfinite(rel) ? std::max(max_rel, rel)
                                   : std::numeric_limits<double>::infinity();
    }
    summary_.iterations = std::max(iteration_, 0);
    summary_.absolute_residual = max_abs;
    summary_.relative_residual = max_rel;
    summary_.termination_type = BatchTermination();
    summary_.wall_time_seconds = Seconds();
    summary_.message = Message();
    return std::move(summary_);
  }

 private:
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
        .count();
  }
  int CountStatus(TerminationType t) const {
    return static_cast<int>(
        std::count(summary_.sample_status.begin(), summary_.sample_status.end(), t));
  }
  bool AnyStatus(TerminationType t) const { return CountStatus(t) > 0; }

  TerminationType BatchTermination() const {
    if (CountStatus(TerminationType::kConverged) == summary_.num_samples()) {
      return TerminationType::kConverged;
    }
    if (loop_end_ != TerminationType::kConverged) return loop_end_;  // abort, budget
    for (TerminationType t : {TerminationType::kNonFinite, TerminationType::kDiverged,
                              TerminationType::kFailure, TerminationType::kStalled,
                              TerminationType::kMaxIterations}) {
      if (AnyStatus(t)) return t;
    }
    return TerminationType::kMaxIterations;
  }

  std::string Message() const {
    const int converged = CountStatus(TerminationType::kConverged);
    std::string m = std::to_string(converged) + "/" +
                    std::to_string(summary_.num_samples()) + " samples converged";
    if (converged != summary_.num_samples()) {
      m += "; unconverged samples returned at their best finite iterate";
    }
    return m;
  }

  SolverOptions options_;
  Summary summary_;
  Matrix<Scalar> best_z_;
  std::vector<double> best_residual_, best_relative_, initial_residual_;
  std::vector<int> stall_count_;
  std::vector<char> active_;
  int num_active_ = 0;
  int iteration_ = -1;
  TerminationType loop_end_ = TerminationType::kConverged;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace internal
}  // namespace implicit
