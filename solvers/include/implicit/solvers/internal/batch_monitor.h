// Per-sample bookkeeping shared by every forward solver (internal).
//
// A solver evaluates f (and, for maps with an energy, E) at its iterates,
// hands (z, f(z), E(z)) to Observe(), and updates only the samples that are
// still active(). The monitor decides convergence, divergence, stalls and
// non-finite values per sample, keeps the iterate each unconverged sample is
// returned at, counts work, records the trace, calls the user callback, and in
// Finish() writes the kept iterates back. All memory is allocated in Begin();
// Observe() does not allocate.
//
// Two ways of judging progress:
//  * residual only (maps without an energy, or SolverOptions::use_energy off):
//    a sample stalls when its residual has not set a new record for
//    max_stall_iterations iterations; an unconverged sample is returned at
//    its smallest-residual iterate;
//  * with the energy (Observe() given E): a sample stalls only when NEITHER its
//    energy NOR its residual has set a new record (beyond rounding) for
//    max_stall_iterations iterations — energy-descent methods may raise the
//    residual for a long while as they leave a saddle region while E keeps
//    falling, and that is progress. An unconverged sample is returned at its
//    lowest-energy iterate (for the energy-monotone solvers, the current one),
//    never at an older iterate that merely had a smaller residual.
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
    kept_z_ = z;
    const double inf = std::numeric_limits<double>::infinity();
    record_residual_.assign(batch, inf);
    record_energy_.assign(batch, inf);
    kept_residual_.assign(batch, inf);
    kept_relative_.assign(batch, inf);
    initial_residual_.assign(batch, 0.0);
    stall_count_.assign(batch, 0);
    active_.assign(batch, 1);
    active_columns_.resize(batch);
    for (Index b = 0; b < batch; ++b) active_columns_[b] = b;
    num_active_ = static_cast<int>(batch);
    summary_.sample_status.assign(batch, TerminationType::kMaxIterations);
    summary_.sample_residual.assign(batch, inf);
    summary_.sample_iterations.assign(batch, 0);
    summary_.sample_evaluations.assign(batch, 0);
    summary_.sample_accelerated_steps.assign(batch, 0);
    summary_.sample_backtracks.assign(batch, 0);
    summary_.sample_fallbacks.assign(batch, 0);
    if (options_.record_trace) summary_.trace.reserve(options_.max_iterations + 1);
    iteration_ = -1;
  }

  bool active(Index b) const { return active_[b] != 0; }
  int num_active() const { return num_active_; }
  // The active samples' column indices, ascending (refreshed by Observe()).
  const std::vector<Index>& active_columns() const { return active_columns_; }
  int iteration() const { return iteration_; }
  // The smallest residual sample b has had so far.
  double best_residual(Index b) const { return record_residual_[b]; }
  const SolverOptions& options() const { return options_; }

  // A batch evaluation of f over all B columns.
  void CountEvaluations(int n = 1) {
    summary_.function_evaluations += n;
    for (int& e : summary_.sample_evaluations) e += n;
  }
  // A batch evaluation of f over the listed columns only.
  void CountEvaluations(const std::vector<Index>& columns) {
    ++summary_.function_evaluations;
    for (Index b : columns) ++summary_.sample_evaluations[b];
  }
  void CountJacobianProducts(int n = 1) { summary_.jacobian_products += n; }
  // Energy-guarded acceleration statistics of sample b.
  void CountAcceleratedStep(Index b) { ++summary_.sample_accelerated_steps[b]; }
  void CountBacktrack(Index b) { ++summary_.sample_backtracks[b]; }
  void CountFallback(Index b) { ++summary_.sample_fallbacks[b]; }

  // Ends sample b with `status` (e.g. kFailure when a solver's inner step broke).
  void StopSample(Index b, TerminationType status) {
    if (!active(b)) return;
    active_[b] = 0;
    --num_active_;
    summary_.sample_status[b] = status;
    summary_.sample_iterations[b] = std::max(iteration_, 0);
  }

  // Observes iteration k's state z and its image fz = f(z) (both n x B) and,
  // when energies != nullptr, E(z) (B x 1). Only active columns are read.
  // Returns true while some sample is still active.
  bool Observe(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> fz,
               const Vector<Scalar>* energies = nullptr) {
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
      const double e = energies != nullptr ? static_cast<double>((*energies)(b)) : 0.0;
      summary_.sample_residual[b] = r;
      if (!std::isfinite(r) || !std::isfinite(f_norm) || !std::isfinite(e) ||
          !z.col(b).allFinite()) {
        StopSample(b, TerminationType::kNonFinite);
        continue;
      }
      max_residual = std::max(max_residual, r);
      sum_residual += r;
      if (iteration_ == 0) initial_residual_[b] = r;
      const bool residual_record = r < record_residual_[b];
      if (residual_record) record_residual_[b] = r;
      bool keep = residual_record;
      bool progress = residual_record;
      if (energies != nullptr) {
        // A new energy record counts as progress only beyond rounding; the
        // kept iterate is the lowest-energy one (ties: the later one).
        const double slack = 16.0 * std::numeric_limits<Scalar>::epsilon() * (1.0 + std::abs(e));
        progress = progress || e < record_energy_[b] - slack;
        keep = e <= record_energy_[b];
        if (keep) record_energy_[b] = e;
      }
      if (keep) {
        kept_residual_[b] = r;
        kept_relative_[b] = f_norm > 0 ? r / f_norm : r;
        kept_z_.col(b) = z.col(b);
      }
      stall_count_[b] = progress ? 0 : stall_count_[b] + 1;
      if (r <= options_.absolute_tolerance ||
          r <= options_.relative_tolerance * f_norm) {
        kept_relative_[b] = f_norm > 0 ? r / f_norm : r;
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
    // Refresh the active list in place (never grows: no allocation).
    active_columns_.clear();
    for (Index b = 0; b < batch; ++b)
      if (active(b)) active_columns_.push_back(b);
    return num_active_ > 0;
  }

  // Writes each unconverged sample's kept iterate back into z and returns the
  // completed Summary.
  Summary Finish(MatrixRef<Scalar> z) {
    const Index batch = z.cols();
    double max_abs = 0.0, max_rel = 0.0;
    for (Index b = 0; b < batch; ++b) {
      if (active(b)) StopSample(b, TerminationType::kMaxIterations);
      if (summary_.sample_status[b] != TerminationType::kConverged &&
          std::isfinite(kept_residual_[b])) {
        z.col(b) = kept_z_.col(b);
        summary_.sample_residual[b] = kept_residual_[b];
      }
      const double r = summary_.sample_residual[b];
      max_abs = std::isfinite(r) ? std::max(max_abs, r)
                                 : std::numeric_limits<double>::infinity();
      const double rel = kept_relative_[b];
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
  Matrix<Scalar> kept_z_;
  std::vector<double> record_residual_, record_energy_;  // best seen (progress tests)
  std::vector<double> kept_residual_, kept_relative_;    // at the kept iterate
  std::vector<double> initial_residual_;
  std::vector<int> stall_count_;
  std::vector<char> active_;
  std::vector<Index> active_columns_;
  int num_active_ = 0;
  int iteration_ = -1;
  TerminationType loop_end_ = TerminationType::kConverged;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace internal
}  // namespace implicit
