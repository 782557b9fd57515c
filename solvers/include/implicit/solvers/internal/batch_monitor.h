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
// The verdict on each sample — tolerances, divergence, the stall rule with or
// without the energy, which iterate is kept (a forward solve returns each
// unconverged sample at its best iterate, which the monitor keeps; a linear
// solve its final one) — is SampleJudge's (sample_judge.h).
#pragma once

#include <implicit/core/map.h>
#include <implicit/solvers/internal/buffer_stash.h>
#include <implicit/solvers/internal/sample_judge.h>
#include <implicit/solvers/internal/sample_loop.h>
#include <implicit/solvers/linear_solver_options.h>
#include <implicit/solvers/solver.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace implicit {
namespace internal {

template <typename Scalar>
class BatchMonitor {
 public:
  // A forward solve; Begin() starts it.
  BatchMonitor(const SolverOptions& options, std::string solver_name)
      : options_(options), judge_(options_, SampleRules{}) {
    summary_.solver = std::move(solver_name);
  }
  BatchMonitor(const BatchMonitor&) = delete;
  BatchMonitor& operator=(const BatchMonitor&) = delete;
  ~BatchMonitor() {
    GiveBack(stash_, kept_z_);
    GiveBack(stash_, kept_fz_);
  }

  // A linear solve of A u = rhs: validates the options and the shapes (throws
  // std::invalid_argument naming `name`), allocates, starts the clock.
  // `apply` and `rhs` must outlive the monitor.
  BatchMonitor(const char* name, const LinearOperator<Scalar>& apply, ConstMatrixRef<Scalar> rhs,
               MatrixRef<Scalar> u, const LinearSolverOptions& options)
      : options_(AsSolverOptions(options)),
        judge_(options_, SampleRules{/*add_tolerances=*/true, /*keep_best_iterate=*/false}),
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
  // state, starts the clock. keep_images: also keep f (and E) at each
  // sample's kept iterate, for RestoreKept (the Picard fallback); off, the
  // observations copy nothing but the kept iterates. The kept iterates'
  // buffers come from `stash` when there is one (given back when the monitor
  // ends).
  void Begin(const FixedPointMap<Scalar>& map, ConstMatrixRef<Scalar> z, bool keep_images = false,
             BufferStash<Scalar>* stash = nullptr) {
    CheckBatch((summary_.solver + ": initial state z").c_str(), z, map.dimension());
    start_ = std::chrono::steady_clock::now();
    stash_ = stash;
    kept_z_ = TakeOrAllocate(stash, z.rows(), z.cols());
    kept_z_ = z;
    keep_images_ = keep_images;
    if (keep_images_) {
      kept_fz_ = TakeOrAllocate(stash, z.rows(), z.cols());
      kept_e_.resize(z.cols());
    }
    Allocate(z.cols());
    samples_ = SampleLoop(z.rows());
    observed_.resize(z.cols());
    keep_.reserve(z.cols());
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
  double best_residual(Index b) const { return judge_.best_residual(b); }
  // The lowest energy sample b has had so far (infinite without an energy).
  double best_energy(Index b) const { return judge_.best_energy(b); }
  // Sample b's next observation does not count towards its stall (see
  // SampleJudge::ExemptFromStall).
  void ExemptFromStall(Index b) { judge_.ExemptFromStall(b); }
  void RestartStallCount(Index b) { judge_.RestartStallCount(b); }
  // Puts active sample b of a forward solve back at its kept (best) iterate:
  // z, f(z) and, with energies, E(z) as they were observed there. The
  // Picard fallback restarts from it. Needs Begin(..., keep_images = true).
  void RestoreKept(Index b, MatrixRef<Scalar> z, MatrixRef<Scalar> fz, Vector<Scalar>* energies) const {
    if (!keep_images_) throw std::logic_error("BatchMonitor::RestoreKept: Begin did not keep the images");
    if (!std::isfinite(judge_.kept_residual(b))) return;
    z.col(b) = kept_z_.col(b);
    fz.col(b) = kept_fz_.col(b);
    if (energies != nullptr) (*energies)(b) = kept_e_(b);
  }
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
    // The norms and the copies of kept iterates are per sample, shared among
    // threads; the verdicts (and the trace's sums) are made in sample order.
    samples_.Run(active_columns_, [&](Index b, int) {
      const double f_norm = static_cast<double>(fz.col(b).norm());
      const double e = energies != nullptr ? static_cast<double>((*energies)(b)) : 0.0;
      observed_[b] = SampleObservation{static_cast<double>((fz.col(b) - z.col(b)).norm()), f_norm, e,
                                       energies != nullptr,
                                       std::isfinite(f_norm) && std::isfinite(e) && z.col(b).allFinite()};
    });
    keep_.clear();
    const bool more = ObserveActive(
        z.cols(), [&](Index b, Index) { return observed_[b]; }, [&](Index b) { keep_.push_back(b); });
    samples_.Run(keep_, [&](Index b, int) {
      kept_z_.col(b) = z.col(b);
      if (!keep_images_) return;
      kept_fz_.col(b) = fz.col(b);
      if (energies != nullptr) kept_e_(b) = (*energies)(b);
    });
    return more;
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
    keep->clear();
    return ObserveActive(
        batch,
        [&](Index, Index j) {
          const double e = energy != nullptr ? energy[j] : 0.0;
          return SampleObservation{residual[j], f_norm[j], e, energy != nullptr,
                                   finite[j] != 0.0 && std::isfinite(f_norm[j]) && std::isfinite(e)};
        },
        [&](Index b) { keep->push_back(b); });
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
  // Returns true while some sample is active. At u = 0 (a solve from zero,
  // as Newton's steps start) r = rhs without a product.
  bool Residual(ConstMatrixRef<Scalar> u, MatrixRef<Scalar> r) {
    if ((u.array() == Scalar(0)).all()) {
      r = *rhs_;
    } else {
      Apply(u, r);
      r = *rhs_ - r;
    }
    for (Index b = 0; b < r.cols(); ++b)
      JudgeLinear(b, static_cast<double>(r.col(b).norm()), !active(b) || u.col(b).allFinite());
    ++observations_;
    return num_active_ > 0;
  }

  // The residual norm at which sample b of a linear solve has converged.
  double threshold(Index b) const { return judge_.Threshold(rhs_norm_[b]); }

  // ---- linear solves whose vectors live elsewhere (the device GMRES) ----
  // The constructor taking |rhs_b| (validates the options, starts the clock),
  // then ResidualScalars() in place of Residual() with every sample's true
  // residual |rhs_b - A u_b| and whether u_b is finite (finite[b] != 0); it
  // also refreshes active_columns(). FinishScalars() completes the summary.
  BatchMonitor(const char* name, std::vector<double> rhs_norm, const LinearSolverOptions& options)
      : options_(AsSolverOptions(options)),
        judge_(options_, SampleRules{/*add_tolerances=*/true, /*keep_best_iterate=*/false}) {
    std::string error;
    ThrowIfInvalid(name, options.IsValid(&error), error);
    start_ = std::chrono::steady_clock::now();
    summary_.solver = name;
    Allocate(static_cast<Index>(rhs_norm.size()));
    rhs_norm_ = std::move(rhs_norm);
  }
  bool ResidualScalars(const double* residual, const double* finite) {
    const Index batch = static_cast<Index>(active_.size());
    for (Index b = 0; b < batch; ++b) JudgeLinear(b, residual[b], finite[b] != 0.0);
    ++observations_;
    RefreshActiveColumns(batch);
    return num_active_ > 0;
  }

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
    s.sample_relative_residual = judge_.TakeRelative();
    s.sample_iterations = std::move(summary_.sample_iterations);
    s.wall_time_seconds = summary_.wall_time_seconds;
    return s;
  }

 private:
  void Allocate(Index batch) {
    const double inf = std::numeric_limits<double>::infinity();
    judge_.Reset(batch);
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

  // What one observation measured of an active sample.
  struct SampleObservation {
    double residual, f_norm, energy;
    bool has_energy, finite;
  };

  // One observation of a forward solve: measure(b, j) gives active sample
  // b's values (j: its position among the active ones), keep(b) takes b's
  // current iterate as its kept one. Returns true while some sample is active.
  template <typename Measure, typename Keep>
  bool ObserveActive(Index batch, const Measure& measure, const Keep& keep) {
    if (observations_ > 0) ++iterations_;
    double max_residual = 0.0, sum_residual = 0.0;
    Index j = 0;
    for (Index b = 0; b < batch; ++b) {
      if (!active(b)) {
        AddStopped(b, &max_residual, &sum_residual);
        continue;
      }
      const SampleObservation o = measure(b, j++);
      bool kept = false;
      if (!Judge(b, o.residual, o.f_norm, o.finite, o.has_energy ? &o.energy : nullptr, &kept)) continue;
      if (kept && judge_.rules().keep_best_iterate) keep(b);
      max_residual = std::max(max_residual, o.residual);
      sum_residual += o.residual;
    }
    return EndObservation(batch, max_residual, sum_residual);
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
    if (options_.max_evaluations > 0) {
      for (Index b = 0; b < batch; ++b) {
        if (active(b) && summary_.sample_evaluations[b] >= options_.max_evaluations) {
          StopSample(b, TerminationType::kMaxIterations);
          Note("evaluation budget (max_evaluations = " + std::to_string(options_.max_evaluations) + ") spent");
        }
      }
    }
    if (options_.callback) {
      IterationSummary it;
      it.iteration = iterations_;
      it.function_evaluations = summary_.function_evaluations;
      it.max_residual = max_residual;
      it.num_active = num_active_;
      it.num_converged = CountStatus(summary_, TerminationType::kConverged);
      it.seconds = seconds;
      if (options_.callback(it) == CallbackReturnType::kAbort && num_active_ > 0) {
        for (Index b = 0; b < batch; ++b) StopSample(b, TerminationType::kUserAbort);
        loop_end_ = TerminationType::kUserAbort;
      }
    }
    RefreshActiveColumns(batch);
    return num_active_ > 0;
  }

  // Refreshes the active list in place (it never grows: no allocation).
  void RefreshActiveColumns(Index batch) {
    active_columns_.clear();
    for (Index b = 0; b < batch; ++b)
      if (active(b)) active_columns_.push_back(b);
  }

  // Judges active sample b at this observation (SampleJudge::Judge) and stops
  // it with the status the judge returns. Returns false when non-finite.
  bool Judge(Index b, double r, double scale, bool finite, const double* energy, bool* kept) {
    summary_.sample_residual[b] = r;
    const std::optional<TerminationType> stop = judge_.Judge(b, r, scale, finite, energy, observations_ == 0, kept);
    if (stop) StopSample(b, *stop);
    return stop != TerminationType::kNonFinite;
  }

  // Judges sample b of a linear solve at its true residual norm rn: an active
  // sample may stop, a stopped one records rn and its relative residual.
  void JudgeLinear(Index b, double rn, bool finite) {
    if (!active(b)) {
      summary_.sample_residual[b] = rn;
      judge_.set_relative(b, judge_.Relative(rn, rhs_norm_[b]));
      return;
    }
    bool kept = false;
    Judge(b, rn, rhs_norm_[b], finite, nullptr, &kept);
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
      if (judge_.rules().keep_best_iterate && summary_.sample_status[b] != TerminationType::kConverged &&
          std::isfinite(judge_.kept_residual(b))) {
        if (z != nullptr) z->col(b) = kept_z_.col(b);
        if (restore != nullptr) restore->push_back(b);
        summary_.sample_residual[b] = judge_.kept_residual(b);
      }
      const double r = summary_.sample_residual[b];
      max_abs = std::isfinite(r) ? std::max(max_abs, r)
                                 : std::numeric_limits<double>::infinity();
      const double rel = judge_.relative(b);
      max_rel = std::isfinite(rel) ? std::max(max_rel, rel)
                                   : std::numeric_limits<double>::infinity();
    }
    summary_.iterations = iterations_;
    summary_.absolute_residual = max_abs;
    summary_.relative_residual = max_rel;
    summary_.termination_type = BatchTermination(summary_, loop_end_);
    summary_.message = BatchMessage(summary_, judge_.rules().keep_best_iterate) + note_;
    summary_.wall_time_seconds = Seconds();
  }

  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
        .count();
  }
  SolverOptions options_;
  SampleJudge<Scalar> judge_;
  Summary summary_;
  // The linear system (linear solves only).
  const LinearOperator<Scalar>* apply_ = nullptr;
  std::optional<ConstMatrixRef<Scalar>> rhs_;
  std::vector<double> rhs_norm_;
  BufferStash<Scalar>* stash_ = nullptr;  // where kept_z_ and kept_fz_ came from (Begin)
  Matrix<Scalar> kept_z_, kept_fz_;  // forward solves only: kept iterates and f there
  Vector<Scalar> kept_e_;            // and E there (with an energy)
  bool keep_images_ = false;         // kept_fz_ and kept_e_ are kept (Begin)
  SampleLoop samples_{0};            // forward solves: per-sample work, threaded (Begin)
  std::vector<SampleObservation> observed_;  // Observe(): each active sample's norms
  std::vector<Index> keep_;                  // Observe(): the samples whose iterate is kept
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
