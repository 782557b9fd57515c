// The verdict on each sample of a batched solve (internal): has it converged,
// diverged, stalled or become non-finite, and which of its iterates is kept;
// and the batch's status and message made of the samples' statuses.
// BatchMonitor (batch_monitor.h) asks it once per observation of an active
// sample and stops the sample with the status it returns; forward and linear
// solves differ only by SampleRules.
//
// Progress, for the stall rule (forward solves; a linear solve has none): with
// the residual only (no energy, or SolverOptions::use_energy off), a sample
// stalls when its residual has set no new record for max_stall_iterations
// iterations, and is returned at its smallest-residual iterate. With the
// energy, it stalls only when NEITHER its energy NOR its residual has set a
// new record (beyond rounding) — energy-descent methods may raise the
// residual for a long while as they leave a saddle region while E keeps
// falling — and is returned at its lowest-energy iterate, never at an older
// one that merely had a smaller residual. Observations a solver exempts
// (ExemptFromStall: Anderson's and Broyden's accelerated steps, which their
// Picard fallback supervises) do not count towards a stall.
//
//   SampleJudge<double> judge(options, SampleRules{});
//   judge.Reset(batch);
//   bool kept = false;
//   std::optional<TerminationType> stop = judge.Judge(b, r, scale, finite, energy, first, &kept);
#pragma once

#include <implicit/core/types.h>
#include <implicit/solvers/solver.h>

#include <algorithm>
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
class SampleJudge {
 public:
  SampleJudge(const SolverOptions& options, SampleRules rules)
      : relative_tolerance_(options.relative_tolerance),
        absolute_tolerance_(options.absolute_tolerance),
        divergence_threshold_(options.divergence_threshold),
        max_stall_iterations_(options.max_stall_iterations),
        rules_(rules) {}

  const SampleRules& rules() const { return rules_; }

  // Forgets every sample; `batch` fresh ones.
  void Reset(Index batch) {
    const double inf = std::numeric_limits<double>::infinity();
    record_residual_.assign(batch, inf);
    record_energy_.assign(batch, inf);
    kept_residual_.assign(batch, inf);
    relative_.assign(batch, inf);
    initial_residual_.assign(batch, 0.0);
    stall_count_.assign(batch, 0);
    stall_exempt_.assign(batch, 0);
  }

  // Sample b's next observation does not count towards its stall (an
  // accelerated step the Picard fallback supervises: a sample stalls only when
  // its plain steps make no progress either).
  void ExemptFromStall(Index b) { stall_exempt_[b] = 1; }
  // Sample b's stall count starts again from zero (its plain steps get the
  // whole max_stall_iterations from here).
  void RestartStallCount(Index b) { stall_count_[b] = 0; }

  // Judges sample b at an observation: r its residual norm, scale what the
  // relative tolerance multiplies (|f(z_b)| or |rhs_b|), finite whether the
  // rest of its values are, energy its E (or nullptr), first whether this is
  // the solve's first observation. *kept is set when b's current iterate
  // becomes its kept one (forward solves; never for a non-finite one).
  // Returns the status b ends with (kConverged, kDiverged, kStalled,
  // kNonFinite), or nothing while it goes on.
  std::optional<TerminationType> Judge(Index b, double r, double scale, bool finite, const double* energy,
                                       bool first, bool* kept) {
    const double relative = Relative(r, scale);
    if (!rules_.keep_best_iterate) relative_[b] = relative;
    if (!std::isfinite(r) || !finite) return TerminationType::kNonFinite;
    if (first) initial_residual_[b] = r;
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
    if (progress) {
      stall_count_[b] = 0;
    } else if (!stall_exempt_[b]) {
      ++stall_count_[b];
    }
    stall_exempt_[b] = 0;
    if (Converged(r, scale)) {
      relative_[b] = relative;
      return TerminationType::kConverged;
    }
    if (!first && r > divergence_threshold_ * std::max(initial_residual_[b], std::numeric_limits<double>::min()))
      return TerminationType::kDiverged;
    if (max_stall_iterations_ > 0 && stall_count_[b] >= max_stall_iterations_)
      return TerminationType::kStalled;
    return std::nullopt;
  }

  // The residual norm at which a sample with this scale has converged (linear rule).
  double Threshold(double scale) const { return relative_tolerance_ * scale + absolute_tolerance_; }
  static double Relative(double r, double scale) { return scale > 0 ? r / scale : r; }

  // The smallest residual sample b has had so far.
  double best_residual(Index b) const { return record_residual_[b]; }
  // The lowest energy sample b has had so far (infinite without an energy).
  double best_energy(Index b) const { return record_energy_[b]; }
  // The residual at b's kept iterate (infinite when none was kept).
  double kept_residual(Index b) const { return kept_residual_[b]; }
  // The relative residual reported for b; set_relative for a stopped sample
  // of a linear solve, whose residual is still measured.
  double relative(Index b) const { return relative_[b]; }
  void set_relative(Index b, double relative) { relative_[b] = relative; }
  std::vector<double> TakeRelative() { return std::move(relative_); }

  // The tolerance rule alone: has a sample with residual r and scale
  // (|f(z_b)| forward, |rhs_b| linear) converged?
  bool Converged(double r, double scale) const {
    if (rules_.add_tolerances) return r <= Threshold(scale);
    return r <= absolute_tolerance_ || r <= relative_tolerance_ * scale;
  }

 private:

  double relative_tolerance_, absolute_tolerance_, divergence_threshold_;
  int max_stall_iterations_;
  SampleRules rules_;
  std::vector<double> record_residual_, record_energy_;  // best seen (progress tests)
  std::vector<double> kept_residual_;                    // at the kept iterate
  std::vector<double> relative_;                         // reported r / scale
  std::vector<double> initial_residual_;
  std::vector<int> stall_count_;
  std::vector<char> stall_exempt_;
};

inline int CountStatus(const Summary& summary, TerminationType t) {
  return static_cast<int>(std::count(summary.sample_status.begin(), summary.sample_status.end(), t));
}

// The batch's status: kConverged when every sample converged; else how the
// loop ended (loop_end: kUserAbort, kMaxIterations; kConverged when it ran
// out of active samples), else the most severe sample status.
inline TerminationType BatchTermination(const Summary& summary, TerminationType loop_end) {
  if (CountStatus(summary, TerminationType::kConverged) == summary.num_samples()) return TerminationType::kConverged;
  if (loop_end != TerminationType::kConverged) return loop_end;
  for (TerminationType t : {TerminationType::kNonFinite, TerminationType::kDiverged, TerminationType::kFailure,
                            TerminationType::kStalled, TerminationType::kMaxIterations}) {
    if (CountStatus(summary, t) > 0) return t;
  }
  return TerminationType::kMaxIterations;
}

// "k/B samples converged", and where unconverged samples were returned.
inline std::string BatchMessage(const Summary& summary, bool keep_best_iterate) {
  const int converged = CountStatus(summary, TerminationType::kConverged);
  std::string m = std::to_string(converged) + "/" + std::to_string(summary.num_samples()) + " samples converged";
  if (keep_best_iterate && converged != summary.num_samples())
    m += "; unconverged samples returned at their best finite iterate";
  return m;
}

}  // namespace internal
}  // namespace implicit
