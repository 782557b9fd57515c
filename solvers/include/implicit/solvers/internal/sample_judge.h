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
//
// The rule itself (progress, kept iterate, tolerances, divergence, stall) is
// JudgeFiniteSample (sample_rule.h), which the fused device kernels share.
#pragma once

#include <implicit/core/types.h>
#include <implicit/solvers/internal/sample_rule.h>
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

// The limits of a solve with these options and rules, for the scalar type Scalar.
template <typename Scalar>
SampleLimits MakeSampleLimits(const SolverOptions& options, bool add_tolerances) {
  SampleLimits limits;
  limits.absolute_tolerance = options.absolute_tolerance;
  limits.relative_tolerance = options.relative_tolerance;
  limits.divergence_threshold = options.divergence_threshold;
  limits.max_stall_iterations = options.max_stall_iterations;
  limits.add_tolerances = add_tolerances;
  limits.epsilon = std::numeric_limits<Scalar>::epsilon();
  return limits;
}

template <typename Scalar>
class SampleJudge {
 public:
  SampleJudge(const SolverOptions& options, SampleRules rules)
      : limits_(MakeSampleLimits<Scalar>(options, rules.add_tolerances)), rules_(rules) {}

  const SampleRules& rules() const { return rules_; }

  // Forgets every sample; `batch` fresh ones.
  void Reset(Index batch) {
    const double inf = std::numeric_limits<double>::infinity();
    records_.assign(batch, SampleRecord{});
    kept_residual_.assign(batch, inf);
    relative_.assign(batch, inf);
    stall_exempt_.assign(batch, 0);
  }

  // Sample b's next observation does not count towards its stall (an
  // accelerated step the Picard fallback supervises: a sample stalls only when
  // its plain steps make no progress either).
  void ExemptFromStall(Index b) { stall_exempt_[b] = 1; }
  // Sample b's stall count starts again from zero (its plain steps get the
  // whole max_stall_iterations from here).
  void RestartStallCount(Index b) { records_[b].stall = 0; }

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
    bool keep = false;
    const int verdict = JudgeFiniteSample(limits_, &records_[b], r, scale, energy != nullptr,
                                          energy != nullptr ? *energy : 0.0, first, stall_exempt_[b] != 0, &keep);
    stall_exempt_[b] = 0;
    if (keep && rules_.keep_best_iterate) {
      kept_residual_[b] = r;
      relative_[b] = relative;
      *kept = true;
    }
    switch (verdict) {
      case kSampleConverged:
        relative_[b] = relative;
        return TerminationType::kConverged;
      case kSampleDiverged: return TerminationType::kDiverged;
      case kSampleStalled: return TerminationType::kStalled;
      default: return std::nullopt;
    }
  }

  // The residual norm at which a sample with this scale has converged (linear rule).
  double Threshold(double scale) const { return limits_.relative_tolerance * scale + limits_.absolute_tolerance; }
  static double Relative(double r, double scale) { return scale > 0 ? r / scale : r; }

  // The smallest residual sample b has had so far.
  double best_residual(Index b) const { return records_[b].best_residual; }
  // The lowest energy sample b has had so far (infinite without an energy).
  double best_energy(Index b) const { return records_[b].best_energy; }
  // The residual at b's kept iterate (infinite when none was kept).
  double kept_residual(Index b) const { return kept_residual_[b]; }
  // The relative residual reported for b; set_relative for a stopped sample
  // of a linear solve, whose residual is still measured.
  double relative(Index b) const { return relative_[b]; }
  void set_relative(Index b, double relative) { relative_[b] = relative; }
  std::vector<double> TakeRelative() { return std::move(relative_); }

  // The tolerance rule alone: has a sample with residual r and scale
  // (|f(z_b)| forward, |rhs_b| linear) converged?
  bool Converged(double r, double scale) const { return SampleConverged(limits_, r, scale); }

 private:
  SampleLimits limits_;
  SampleRules rules_;
  std::vector<SampleRecord> records_;     // best residual and energy, first residual, stall count
  std::vector<double> kept_residual_;     // at the kept iterate
  std::vector<double> relative_;          // reported r / scale
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
