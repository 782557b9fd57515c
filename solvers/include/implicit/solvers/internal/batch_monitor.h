// The one per-sample monitor (internal) of the forward solvers (picard,
// anderson, broyden, lbfgs, gradient_flow, newton) and of the linear solvers
// of the backward pass (krylov_linear_solvers.h, direct_linear_solver.h,
// fixed_point_linear_solvers.h).
//
// A solver hands its iterates to the monitor and updates only the samples
// still active(). The monitor judges each sample — non-finite values, the
// tolerance, divergence against its first residual, stalls — stops it with
// its status, counts work, and completes the summary (kConverged only when
// every sample converged, else the most severe status). Two front ends:
//  * a fixed-point map (forward): Begin(map, z), Observe(z, f(z), E(z)) per
//    iteration (also the trace, the callback and max_iterations), Finish(z).
//    Residual |f(z_b) - z_b|, converged when <= absolute_tolerance or <=
//    relative_tolerance x |f(z_b)|. Observe() does not allocate.
//  * a linear system A u = rhs (linear solvers): the constructor taking A,
//    Residual(u, r) (r = rhs - A u, the true residual) to judge the iterate,
//    Apply() for counted products, CountIteration(), FinishLinear().
//    Converged when |rhs_b - A u_b| <= tolerance x |rhs_b| + absolute_tolerance.
// The two differ only by SampleRules: how the tolerances combine, and which
// iterate is returned — a forward solve returns each unconverged sample at
// its best iterate, which the monitor keeps; a linear solve returns the
// solver's final iterate and reports its true residual.
//
// Progress, for the stall rule (forward solves; a linear solve has none): with
// the residual only (no energy, or SolverOptions::use_energy off), a sample
// stalls when its residual has set no new record for max_stall_iterations
// iterations, and is returned at its smallest-residual iterate. With the
// energy (Observe() given E), it stalls only when NEITHER its energy NOR its
// residual has set a new record (beyond rounding) — energy-descent methods may
// raise the residual for a long while as they leave a saddle region while E
// keeps falling — and is returned at its lowest-energy iterate, never at an
// older one that merely had a smaller residual.
#pragma once

#include <implicit/core/map.h>
#include <implicit/solvers/linear_solver_options.h>
#include <implicit/solvers/solver.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace implicit {
namespace internal {

// Where a forward solve and a linear solve judge their samples differently.
struct SampleRules {
  // true (linear): converged when r <= relative_tolerance x scale +
  // absolute_tolerance; false (forward): when r <= absolute_tolerance or
  // r <= relative_tolerance x scale.
  bool add_tolerances = false;
  // true (forward): the monitor keeps each sample's best iterate and Finish()
  // returns an unconverged sample there. false (linear): the solver's final
  // iterate is returned and every sample reports its latest measured residual.
  bool keep_best_iterate = true;
};

template <typename Scalar>
class BatchMonitor {
 public:
  // A forward solve; Begin() starts it.
  BatchMonitor(const SolverOptions& options, std::string solver_name)
      : options_(options) {
    summary_.solver = std::move(solver_name);
  }

  // A linear solve of A u = rhs: validates the options and the shapes (throws
  // std::invalid_argument naming `name`), allocates, starts the clock.
  // `apply` and `rhs` must outlive the monitor.
  BatchMonitor(const char* name, const LinearOperator<Scalar>& apply, ConstMatrixRef<Scalar> rhs,
               MatrixRef<Scalar> u, const LinearSolverOptions& options)
      : options_(AsSolverOptions(options)),
        rules_{/*add_tolerances=*/true, /*keep_best_iterate=*/false},
        apply_(&apply),
        rhs_(rhs) {
    std::string error;
    ThrowIfInvalid(name, options.IsValid(&error), error);
    CheckBatch((std::string(name) + ": rhs").c_str(), rhs, rhs.rows());
    CheckShape((std::string(name) + ": u").c_str(), u, rhs.rows(), rhs.cols());
    start_ = std::chrono::steady_clock::now();
    summary_.solver = name;
    Allocate(rhs.cols());
    rhs_norm_.resize(rhs.cols());
    for (Index b = 0; b < rhs.cols(); ++b) rhs_norm_[b] = static_cast<double>(rhs.col(b).norm());
  }

  // Forward solve: validates the problem's shapes, allocates all per-sample
  // state, starts the clock.
  void Begin(const FixedPointMap<Scalar>& map, ConstMatrixRef<Scalar> z) {
    CheckBatch((summary_.solver + ": initial state z").c_str(), z, map.dimension());
    start_ = std::chrono::steady_clock::now();
    kept_z_ = z;
    Allocate(z.cols());
    if (options_.record_trace) summary_.trace.reserve(options_.max_iterations + 1);
  }

  bool active(Index b) const { return active_[b] != 0; }
  int num_active() const { return num_active_; }
  // The active samples' column indices, ascending (refreshed by Observe()).
  const std::vector<Index>& active_columns() const { return active_columns_; }
  // Iterations so far: Observe() calls after the first, or CountIteration() /
  // CountWork() steps.
  int iterations() const { return iterations_; }
  // The smallest residual sample b has had so far.
  double best_residual(Index b) const { return record_residual_[b]; }
  const SolverOptions& options() const { return options_; }

  // ---- counting work ----
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
  // One step of a linear solver (Krylov step, update).
  void CountIteration() { ++iterations_; }
  // Work done on the operator outside Apply() (a forward solver's iterations).
  void CountWork(int iterations, int products) {
    iterations_ += iterations;
    summary_.jacobian_products += products;
  }
  bool budget_left() const { return iterations_ < options_.max_iterations; }
  // Appended once to the message ("; note").
  void Note(const std::string& note) {
    if (note_.find(note) == std::string::npos) note_ += "; " + note;
  }

  // Ends sample b with `status` (e.g. kFailure when a solver's inner step broke).
  void StopSample(Index b, TerminationType status) {
    if (!active(b)) return;
    active_[b] = 0;
    --num_active_;
    summary_.sample_status[b] = status;
    summary_.sample_iterations[b] = iterations_;
  }

  // ---- forward solves ----
  // Observes iteration k's state z and its image fz = f(z) (both n x B) and,
  // when energies != nullptr, E(z) (B x 1). Only active columns are read.
  // Returns true while some sample is still active.
  bool Observe(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> fz,
               const Vector<Scalar>* energies = nullptr) {
    if (observations_ > 0) ++iterations_;
    double max_residual = 0.0, sum_residual = 0.0;
    const Index batch = z.cols();
    for (Index b = 0; b < batch; ++b) {
      if (!active(b)) {
        AddStopped(b, &max_residual, &sum_residual);
        continue;
      }
      const double r = static_cast<double>((fz.col(b) - z.col(b)).norm());
      const double f_norm = static_cast<double>(fz.col(b).norm());
      const double e = energies != nullptr ? static_cast<double>((*energies)(b)) : 0.0;
      const bool finite = std::isfinite(f_norm) && std::isfinite(e) && z.col(b).allFinite();
      bool keep = false;
      if (!Judge(b, r, f_norm, finite, energies != nullptr ? &e : nullptr, &keep)) continue;
      if (keep && rules_.keep_best_iterate) kept_z_.col(b) = z.col(b);
      max_residual = std::max(max_residual, r);
      sum_residual += r;
    }
    return EndObservation(batch, max_residual, sum_residual);
  }

  // ---- forward solves whose state lives elsewhere (the device solvers) ----
  // BeginScalars(B) instead of Begin(); ObserveScalars() instead of Observe()
  // with the active samples' scalars, computed where the state lives, for the
  // j-th entry of active_columns(): residual[j] = |f(z_b) - z_b|, f_norm[j] =
  // |f(z_b)|, finite[j] != 0 when z_b and f(z_b) are finite, energy[j] = E(z_b)
  // (energy == nullptr: none). Same rules as Observe(); *keep receives the
  // samples whose current iterate becomes their kept one (the caller copies
  // it). FinishScalars(&restore) lists the samples to return at their kept
  // iterate (the caller copies them back), then returns the summary.
  void BeginScalars(Index batch) {
    start_ = std::chrono::steady_clock::now();
    Allocate(batch);
    if (options_.record_trace) summary_.trace.reserve(options_.max_iterations + 1);
  }
  bool ObserveScalars(Index batch, const double* residual, const double* f_norm, const double* finite,
                      const double* energy, std::vector<Index>* keep) {
    if (observations_ > 0) ++iterations_;
    keep->clear();
    double max_residual = 0.0, sum_residual = 0.0;
    std::size_t j = 0;
    for (Index b = 0; b < batch; ++b) {
      if (!active(b)) {
        AddStopped(b, &max_residual, &sum_residual);
        continue;
      }
      const double r = residual[j];
      const double e = energy != nullptr ? energy[j] : 0.0;
      const bool ok = finite[j] != 0.0 && std::isfinite(f_norm[j]) && std::isfinite(e);
      bool kept = false;
      const bool judged = Judge(b, r, f_norm[j], ok, energy != nullptr ? &e : nullptr, &kept);
      ++j;
      if (!judged) continue;
      if (kept && rules_.keep_best_iterate) keep->push_back(b);
      max_residual = std::max(max_residual, r);
      sum_residual += r;
    }
    return EndObservation(batch, max_residual, sum_residual);
  }
  Summary FinishScalars(std::vector<Index>* restore) {
    Complete(nullptr, restore);
    return std::move(summary_);
  }

  // Writes each unconverged sample's kept iterate back into z and returns the
  // completed Summary.
  Summary Finish(MatrixRef<Scalar> z) {
    Complete(&z);
    return std::move(summary_);
  }

  // ---- linear solves ----
  // out = A v, counted as one batch of products.
  void Apply(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) {
    (*apply_)(v, out);
    ++summary_.jacobian_products;
  }

  // r = rhs - A u (the true residual); judges the active samples at u.
  // Returns true while some sample is active.
  bool Residual(ConstMatrixRef<Scalar> u, MatrixRef<Scalar> r) {
    Apply(u, r);
    r = *rhs_ - r;
    for (Index b = 0; b < r.cols(); ++b) {
      const double rn = static_cast<double>(r.col(b).norm());
      if (active(b)) {
        bool kept = false;
        Judge(b, rn, rhs_norm_[b], u.col(b).allFinite(), nullptr, &kept);
      } else {
        summary_.sample_residual[b] = rn;
        relative_[b] = Relative(rn, rhs_norm_[b]);
      }
    }
    ++observations_;
    return num_active_ > 0;
  }

  // The residual norm at which sample b of a linear solve has converged.
  double threshold(Index b) const { return Threshold(rhs_norm_[b]); }

  // Completes the LinearSolveSummary; the last Residual() call must describe
  // the final u.
  LinearSolveSummary FinishLinear() {
    Complete(nullptr);
    LinearSolveSummary s;
    s.solver = std::move(summary_.solver);
    s.termination_type = summary_.termination_type;
    s.message = std::move(summary_.message);
    s.iterations = summary_.iterations;
    s.jacobian_products = summary_.jacobian_products;
    s.relative_residual = summary_.relative_residual;
    s.absolute_residual = summary_.absolute_residual;
    s.sample_status = std::move(summary_.sample_status);
    s.sample_residual = std::move(summary_.sample_residual);
    s.sample_relative_residual = std::move(relative_);
    s.sample_iterations = std::move(summary_.sample_iterations);
    s.wall_time_seconds = summary_.wall_time_seconds;
    return s;
  }

 private:
  void Allocate(Index batch) {
    const double inf = std::numeric_limits<double>::infinity();
    record_residual_.assign(batch, inf);
    record_energy_.assign(batch, inf);
    kept_residual_.assign(batch, inf);
    relative_.assign(batch, inf);
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
  }

  // A stopped sample's residual in the trace's max and mean.
  void AddStopped(Index b, double* max_residual, double* sum_residual) const {
    const double r = summary_.sample_residual[b];
    if (std::isfinite(r)) *max_residual = std::max(*max_residual, r);
    *sum_residual += std::isfinite(r) ? r : 0.0;
  }

  // The end of an observation: trace, iteration budget, callback, active list.
  bool EndObservation(Index batch, double max_residual, double sum_residual) {
    ++observations_;
    const double seconds = Seconds();
    if (options_.record_trace) {
      TraceEntry entry;
      entry.iteration = iterations_;
      entry.function_evaluations = summary_.function_evaluations;
      entry.seconds = seconds;
      entry.max_residual = max_residual;
      entry.mean_residual = sum_residual / static_cast<double>(batch);
      summary_.trace.push_back(entry);
    }
    if (num_active_ > 0 && iterations_ >= options_.max_iterations) {
      for (Index b = 0; b < batch; ++b) StopSample(b, TerminationType::kMaxIterations);
      loop_end_ = TerminationType::kMaxIterations;
    }
    if (options_.callback) {
      IterationSummary it;
      it.iteration = iterations_;
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

  static double Relative(double r, double scale) { return scale > 0 ? r / scale : r; }
  double Threshold(double scale) const {
    return options_.relative_tolerance * scale + options_.absolute_tolerance;
  }
  bool Converged(double r, double scale) const {
    if (rules_.add_tolerances) return r <= Threshold(scale);
    return r <= options_.absolute_tolerance || r <= options_.relative_tolerance * scale;
  }

  // Judges active sample b at this observation: r its residual norm, scale
  // what the relative tolerance multiplies (|f(z_b)| or |rhs_b|), finite
  // whether the rest of its values are, energy its E (or nullptr); *kept is
  // set when b's current iterate becomes its kept one (forward solves). Stops
  // b when it converged, diverged, stalled or is non-finite.
  // Returns false when non-finite.
  bool Judge(Index b, double r, double scale, bool finite, const double* energy, bool* kept) {
    const double relative = Relative(r, scale);
    summary_.sample_residual[b] = r;
    if (!rules_.keep_best_iterate) relative_[b] = relative;
    if (!std::isfinite(r) || !finite) {
      StopSample(b, TerminationType::kNonFinite);
      return false;
    }
    if (observations_ == 0) initial_residual_[b] = r;
    const bool residual_record = r < record_residual_[b];
    if (residual_record) record_residual_[b] = r;
    bool keep = residual_record;
    bool progress = residual_record;
    if (energy != nullptr) {
      // A new energy record counts as progress only beyond rounding; the
      // kept iterate is the lowest-energy one (ties: the later one).
      const double e = *energy;
      const double slack = 16.0 * std::numeric_limits<Scalar>::epsilon() * (1.0 + std::abs(e));
      progress = progress || e < record_energy_[b] - slack;
      keep = e <= record_energy_[b];
      if (keep) record_energy_[b] = e;
    }
    if (keep && rules_.keep_best_iterate) {
      kept_residual_[b] = r;
      relative_[b] = relative;
      *kept = true;
    }
    stall_count_[b] = progress ? 0 : stall_count_[b] + 1;
    if (Converged(r, scale)) {
      relative_[b] = relative;
      StopSample(b, TerminationType::kConverged);
    } else if (observations_ > 0 &&
               r > options_.divergence_threshold *
                       std::max(initial_residual_[b], std::numeric_limits<double>::min())) {
      StopSample(b, TerminationType::kDiverged);
    } else if (options_.max_stall_iterations > 0 &&
               stall_count_[b] >= options_.max_stall_iterations) {
      StopSample(b, TerminationType::kStalled);
    }
    return true;
  }

  // Stops the samples still active (kMaxIterations), returns the kept
  // iterates into *z (forward), and fills the batch fields of the summary.
  // Without z (device solvers), the samples to restore are listed in *restore.
  void Complete(MatrixRef<Scalar>* z, std::vector<Index>* restore = nullptr) {
    if (restore != nullptr) restore->clear();
    const Index batch = static_cast<Index>(active_.size());
    double max_abs = 0.0, max_rel = 0.0;
    for (Index b = 0; b < batch; ++b) {
      if (active(b)) StopSample(b, TerminationType::kMaxIterations);
      if (rules_.keep_best_iterate && summary_.sample_status[b] != TerminationType::kConverged &&
          std::isfinite(kept_residual_[b])) {
        if (z != nullptr) z->col(b) = kept_z_.col(b);
        if (restore != nullptr) restore->push_back(b);
        summary_.sample_residual[b] = kept_residual_[b];
      }
      const double r = summary_.sample_residual[b];
      max_abs = std::isfinite(r) ? std::max(max_abs, r)
                                 : std::numeric_limits<double>::infinity();
      const double rel = relative_[b];
      max_rel = std::isfinite(rel) ? std::max(max_rel, rel)
                                   : std::numeric_limits<double>::infinity();
    }
    summary_.iterations = iterations_;
    summary_.absolute_residual = max_abs;
    summary_.relative_residual = max_rel;
    summary_.termination_type = BatchTermination();
    summary_.message = Message();
    summary_.wall_time_seconds = Seconds();
  }

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
    if (rules_.keep_best_iterate && converged != summary_.num_samples()) {
      m += "; unconverged samples returned at their best finite iterate";
    }
    return m + note_;
  }

  SolverOptions options_;
  SampleRules rules_;
  Summary summary_;
  // The linear system (linear solves only).
  const LinearOperator<Scalar>* apply_ = nullptr;
  std::optional<ConstMatrixRef<Scalar>> rhs_;
  std::vector<double> rhs_norm_;
  Matrix<Scalar> kept_z_;  // forward solves only
  std::vector<double> record_residual_, record_energy_;  // best seen (progress tests)
  std::vector<double> kept_residual_;                    // at the kept iterate
  std::vector<double> relative_;                         // reported r / scale
  std::vector<double> initial_residual_;
  std::vector<int> stall_count_;
  std::vector<char> active_;
  std::vector<Index> active_columns_;
  int num_active_ = 0;
  int iterations_ = 0;
  int observations_ = 0;
  TerminationType loop_end_ = TerminationType::kConverged;
  std::string note_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace internal
}  // namespace implicit
