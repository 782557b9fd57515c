// Guarded acceleration: the acceptance rule and batched backtracking that
// Anderson, Broyden, L-BFGS and Newton-CG share (internal). See
// docs/acceleration.md.
//
// Per active sample b the solver holds x = z_b, f = f(x), E = E(x) and a
// proposal q (its accelerated step from x), or none. With r = f - x and the
// safe step s = x + beta r (the map's own, damped step), the trial points are
//
//   y(tau) = x + (1 - tau) beta r + tau q,    tau = 1, t, t^2, ... t^k  (t = backtrack_factor)
//
// and, when none is accepted, the safe step. Newton-CG's trials lie on the
// line of its step instead (TrialPath::kLine): y(tau) = x + tau q, tau = 1
// and then, with an energy, the minimiser of the quadratic through E(x), its
// slope -r.q along q and E(x + tau q) at the rejected tau, kept in [tau/10,
// tau/2] (interpolating backtracking); without an energy tau t. Below t^k the
// safe step is taken. A Newton step that overshoots an energy far from
// quadratic (rbm's second step: 2-5 times the CCCP step) is then mostly
// accepted at its second trial, where halving took two to four. Acceptance:
//  * maps with an energy (the merit function), Armijo's test with the
//    first-order model -grad E = r (exact for CccpMap and EnergyRootMap):
//      E(y) <= E - c r . (y - x)            (c = sufficient_decrease)
//    For a CCCP map the safe step satisfies this with c = 1/2 (majorisation:
//    E(T(x)) <= E(x) - |T(x) - x|^2 / 2), so the guard keeps the energy
//    monotone and keeps the safe step's convergence; being first-order, the
//    test does not depend on the energy's curvature (a Newton step on a
//    quadratic passes it for any c < 1/2). When r . (y - x) is
//    below the rounding of E (near convergence), the energy cannot decide and
//    the trial is accepted when its residual is no larger than |r| and its
//    energy no larger than E up to rounding.
//    The safe step is taken when it does not increase E (up to rounding);
//    otherwise — a gradient-step map whose step is too long for the
//    curvature, e.g. EnergyRootMap with |hess E| > 2 — it is shortened,
//    x + sigma beta r with sigma = t, t^2, ..., t^k, until E does not
//    increase (each shortening counts as a backtrack; after k = max_backtracks
//    shortenings it is taken as it is).
//    Before any trial, q must be a descent direction, q . r > 0 (r is -grad E
//    for the gradient and CCCP maps); otherwise the safe step is taken.
//  * maps without an energy: |f(y) - y| <= residual_factor * (the sample's
//    best residual so far); residual_factor = 0 accepts every trial.
// Each round evaluates f (and E) once, at the trial points of the samples
// still searching only (an active set of its own); samples that accepted wait.
// The accepted y, f(y), E(y) replace x, f, E: no second evaluation.
#pragma once

#include <implicit/solvers/internal/batch_evaluator.h>
#include <implicit/solvers/internal/batch_monitor.h>
#include <implicit/solvers/internal/buffer_stash.h>
#include <implicit/solvers/internal/sample_loop.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace implicit {
namespace internal {

// The guard's settings; each accelerated solver's Options derives from this.
struct GuardOptions {
  // c of the energy test E(y) <= E - c r.(y - x) (Armijo with -grad E = r;
  // maps with an energy). In [0, 1]; 0 asks for plain monotonicity.
  double sufficient_decrease = 1e-4;
  // Trial steps shortened after the full accelerated one (tau = t, ..., t^k
  // with t = backtrack_factor) before the safe step is taken. >= 0.
  int max_backtracks = 3;
  // t above. In (0, 1).
  double backtrack_factor = 0.5;
  // Maps without an energy: a trial is rejected when its residual exceeds
  // residual_factor x the sample's best residual. 0 (off) or >= 1.
  double residual_factor = 10.0;

  bool IsValid(std::string* error) const {
    auto fail = [error](const std::string& message) {
      if (error != nullptr) *error = message;
      return false;
    };
    if (!(sufficient_decrease >= 0.0 && sufficient_decrease <= 1.0))
      return fail("sufficient_decrease must be in [0, 1], got " +
                  std::to_string(sufficient_decrease));
    if (max_backtracks < 0)
      return fail("max_backtracks must be >= 0, got " + std::to_string(max_backtracks));
    if (!(backtrack_factor > 0.0 && backtrack_factor < 1.0))
      return fail("backtrack_factor must be in (0, 1), got " + std::to_string(backtrack_factor));
    if (!(residual_factor == 0.0 || residual_factor >= 1.0) || std::isnan(residual_factor))
      return fail("residual_factor must be 0 (off) or >= 1, got " +
                  std::to_string(residual_factor));
    return true;
  }
};

// The Picard fallback's settings (PicardFallback below; Anderson and Broyden).
struct FallbackOptions {
  // A sample whose accelerated steps do not bring its best residual down to
  // progress_factor x its value at the start of a window of progress_window
  // iterations (and, with an energy, do not lower its best energy) restarts
  // from its best iterate with plain steps and a fresh history, for
  // progress_window iterations (doubling after each consecutive failed
  // window, up to 16 windows) and until they set a new best residual, then
  // accelerates again. progress_window >= 0 (0 = no fallback);
  // progress_factor in (0, 1).
  int progress_window = 5;
  double progress_factor = 0.5;
  // Maps without an energy: the first warmup_iterations iterations take the
  // plain step (a map that converges within them needs no acceleration, and
  // the history then starts past the initial transient). >= 0.
  int warmup_iterations = 8;

  bool IsValid(std::string* error) const {
    auto fail = [error](const std::string& message) {
      if (error != nullptr) *error = message;
      return false;
    };
    if (progress_window < 0)
      return fail("progress_window must be >= 0 (0 = no fallback), got " + std::to_string(progress_window));
    if (!(progress_factor > 0.0 && progress_factor < 1.0))
      return fail("progress_factor must be in (0, 1), got " + std::to_string(progress_factor));
    if (warmup_iterations < 0)
      return fail("warmup_iterations must be >= 0, got " + std::to_string(warmup_iterations));
    return true;
  }
};

// The guard's tests on one sample's scalars, shared by GuardedStepper and the
// device solvers (cuda_solvers.h). epsilon: the state's machine epsilon.
struct GuardRules {
  const GuardOptions& options;
  double epsilon;

  // The shortest trial length before the safe step (t^k, with slack).
  double min_tau() const {
    return std::pow(options.backtrack_factor, options.max_backtracks) * 0.999;
  }
  double Rounding(double e) const { return 64.0 * epsilon * (1.0 + std::abs(e)); }
  // The safe step of length sigma: taken unless it increases E (e_x -> e_y)
  // and can still be shortened.
  bool AcceptSafe(bool energy, double sigma, double e_x, double e_y) const {
    if (!energy || sigma < min_tau()) return true;
    return e_y <= e_x + Rounding(e_x) || !std::isfinite(e_x);
  }
  // An accelerated trial y from x: trial_residual = |f(y) - y|, residual =
  // |f(x) - x|, predicted = r . (y - x), best_residual the sample's record.
  bool AcceptTrial(bool energy, double trial_residual, double best_residual, double e_x, double e_y,
                   double predicted, double residual) const {
    if (!std::isfinite(trial_residual)) return false;
    if (!energy) {
      return options.residual_factor == 0.0 ||
             trial_residual <= options.residual_factor * best_residual;
    }
    if (!std::isfinite(e_y)) return false;
    // The decrease a first-order model predicts along the step, with
    // -grad E = r (exact for the CCCP and root maps; r / a for a gradient step a).
    const double rounding = Rounding(e_x);
    if (predicted > rounding) return e_y <= e_x - options.sufficient_decrease * predicted;
    return trial_residual <= residual && e_y <= e_x + rounding;
  }
};

// Where a stepper's trials lie (see the top of this file).
enum class TrialPath {
  kBlend,  // x + (1 - tau) beta r + tau q: towards the safe step (Anderson, Broyden, L-BFGS)
  kLine,   // x + tau q, interpolated lengths (Newton-CG)
};

template <typename Scalar>
class GuardedStepper {
 public:
  // All memory is allocated here; the trial points' from `stash` when there
  // is one (given back when the stepper ends).
  GuardedStepper(const GuardOptions& options, Index n, Index batch, Scalar beta,
                 TrialPath path = TrialPath::kBlend, BufferStash<Scalar>* stash = nullptr)
      : options_(options), beta_(beta), line_(path == TrialPath::kLine), samples_(n),
        stash_(stash), y_(TakeOrAllocate(stash, n, batch)), fy_(TakeOrAllocate(stash, n, batch)), ey_(batch) {
    y_.setZero();
    pending_.reserve(batch);
    next_.reserve(batch);
    tau_.assign(batch, 0.0);
    sigma_.assign(batch, 1.0);
    accelerated_.assign(batch, 0);
    retry_.assign(batch, 0);
  }
  GuardedStepper(const GuardedStepper&) = delete;
  GuardedStepper& operator=(const GuardedStepper&) = delete;
  ~GuardedStepper() {
    GiveBack(stash_, y_);
    GiveBack(stash_, fy_);
  }

  // One guarded step of every active sample. has_proposal[b] says whether
  // q.col(b) holds a proposal (otherwise the safe step is taken). On return
  // z, fz (and *e with an energy) hold the accepted points, and accelerated(b)
  // tells whether b took an accelerated trial (false: the safe step).
  void Step(MatrixRef<Scalar> z, MatrixRef<Scalar> fz, Vector<Scalar>* e,
            ConstMatrixRef<Scalar> q, const std::vector<char>& has_proposal,
            BatchEvaluator<Scalar>* evaluator, BatchMonitor<Scalar>* monitor) {
    const bool energy = evaluator->with_energy();
    // Maps evaluated on the whole batch see the other samples' current states.
    if (!evaluator->supports_subsets()) y_ = z;
    pending_ = monitor->active_columns();
    samples_.Run(pending_, [&](Index b, int) {
      accelerated_[b] = 0;
      double tau = 0.0;
      if (has_proposal[b]) {
        const Scalar descent = q.col(b).dot(fz.col(b) - z.col(b));
        if (!energy || descent > Scalar(0)) {
          tau = 1.0;
        } else {
          monitor->CountFallback(b);  // not a descent direction
        }
      }
      tau_[b] = tau;
      sigma_[b] = 1.0;
      SetTrial(b, z, fz, q);
    });
    while (!pending_.empty()) {
      evaluator->Evaluate(y_, pending_, fy_, &ey_, monitor);
      samples_.Run(pending_, [&](Index b, int) {
        const bool safe = tau_[b] == 0.0;
        retry_[b] = 0;
        if (safe ? AcceptSafe(b, e, energy) : Accept(b, z, fz, e, energy, *monitor)) {
          if (tau_[b] != 0.0) {
            accelerated_[b] = 1;
            monitor->CountAcceleratedStep(b);
          }
          z.col(b) = y_.col(b);
          fz.col(b) = fy_.col(b);
          if (energy) (*e)(b) = ey_(b);
          return;
        }
        monitor->CountBacktrack(b);
        if (safe) {
          sigma_[b] *= options_.backtrack_factor;
        } else {
          tau_[b] = NextTau(b, z, fz, e, energy, q);
          if (tau_[b] < min_tau()) {
            tau_[b] = 0.0;  // the safe step
            monitor->CountFallback(b);
          }
        }
        SetTrial(b, z, fz, q);
        retry_[b] = 1;
      });
      next_.clear();
      for (Index b : pending_) {
        if (retry_[b]) next_.push_back(b);
      }
      pending_.swap(next_);
    }
  }

  bool accelerated(Index b) const { return accelerated_[b] != 0; }

 private:
  double min_tau() const { return rules().min_tau(); }
  GuardRules rules() const {
    return GuardRules{options_, static_cast<double>(std::numeric_limits<Scalar>::epsilon())};
  }

  // The trial length after tau_[b] was rejected. On the line with an energy:
  // phi(s) = E(x + s q) has phi(0) = E, phi'(0) = -r.q (-grad E = r) and
  // phi(tau) = E(y) (in ey_); the quadratic through them is least at
  // tau^2 r.q / (2 (E(y) - E + tau r.q)).
  double NextTau(Index b, ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> fz, const Vector<Scalar>* e,
                 bool energy, ConstMatrixRef<Scalar> q) const {
    const double tau = tau_[b], shorter = tau * options_.backtrack_factor;
    if (!line_ || !energy) return shorter;
    const double descent = static_cast<double>(q.col(b).dot(fz.col(b) - z.col(b)));  // r.q = -phi'(0)
    const double excess = static_cast<double>(ey_(b)) - static_cast<double>((*e)(b)) + tau * descent;
    if (!(descent > 0) || !(excess > 0) || !std::isfinite(excess)) return shorter;  // (E(y) not finite)
    return std::clamp(descent * tau * tau / (2 * excess), 0.1 * tau, 0.5 * tau);
  }

  void SetTrial(Index b, ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> fz,
                ConstMatrixRef<Scalar> q) {
    const Scalar tau = static_cast<Scalar>(tau_[b]);
    if (line_ && tau != Scalar(0)) {
      y_.col(b) = z.col(b) + tau * q.col(b);
      return;
    }
    const Scalar sigma = tau == Scalar(0) ? static_cast<Scalar>(sigma_[b]) : Scalar(1);
    y_.col(b) = z.col(b) + ((Scalar(1) - tau) * sigma * beta_) * (fz.col(b) - z.col(b));
    if (tau != Scalar(0)) y_.col(b) += tau * q.col(b);
  }

  bool AcceptSafe(Index b, const Vector<Scalar>* e, bool energy) const {
    return rules().AcceptSafe(energy, sigma_[b], energy ? static_cast<double>((*e)(b)) : 0.0,
                              energy ? static_cast<double>(ey_(b)) : 0.0);
  }

  bool Accept(Index b, ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> fz,
              const Vector<Scalar>* e, bool energy, const BatchMonitor<Scalar>& monitor) const {
    const double trial_residual = static_cast<double>((fy_.col(b) - y_.col(b)).norm());
    if (!std::isfinite(trial_residual)) return false;
    if (!energy) return rules().AcceptTrial(false, trial_residual, monitor.best_residual(b), 0, 0, 0, 0);
    const double predicted = static_cast<double>((fz.col(b) - z.col(b)).dot(y_.col(b) - z.col(b)));
    const double r = static_cast<double>((fz.col(b) - z.col(b)).norm());
    return rules().AcceptTrial(true, trial_residual, monitor.best_residual(b),
                               static_cast<double>((*e)(b)), static_cast<double>(ey_(b)), predicted, r);
  }

  const GuardOptions options_;
  const Scalar beta_;
  const bool line_;           // TrialPath::kLine
  const SampleLoop samples_;  // the per-sample work, threaded
  BufferStash<Scalar>* const stash_;  // where y_ and fy_ came from (or nullptr)
  Matrix<Scalar> y_, fy_;  // trial points and f there
  Vector<Scalar> ey_;      // E there
  std::vector<Index> pending_, next_;
  std::vector<double> tau_, sigma_;  // trial and safe-step lengths
  std::vector<char> accelerated_;
  std::vector<char> retry_;  // b backtracks: another round
};

// The Picard fallback of Anderson and Broyden (FallbackOptions;
// docs/acceleration.md): an accelerated sample is never left worse off than
// Picard would leave it. Per sample:
//  * warm-up (maps without an energy): the first warmup_iterations
//    iterations take the plain step. A map that converges within them needs no
//    acceleration, and the history then starts past the initial transient.
//  * windows: progress_window accelerated iterations in a row must bring the
//    best residual down to progress_factor x its value when the window
//    opened, or lower the best energy (maps with an energy, whose guard
//    already makes every accepted step a descent); a window that does opens
//    the next one.
//  * fallback: after a failed window the sample is put back at its best
//    iterate (an accelerated method near a repelling fixed point — a saddle
//    of a hidden energy — or wandering on a non-smooth map is best restarted
//    from where it did best) and takes plain (damped) fixed-point steps with a
//    fresh history: for progress_window x 2^(f-1) iterations after its f-th
//    failed window in a row (f <= 5), and then until those plain steps set a
//    new best residual (or energy). Then it accelerates again from the
//    history the plain steps built.
//  * stall verdict: accelerated iterations do not count towards the stall
//    rule (max_stall_iterations without a new record), and the count starts
//    again at each fallback, so a sample is declared stalled only when plain
//    steps from its best iterate have made no progress for that long — what
//    Picard's own stall verdict would be.
class PicardFallback {
 public:
  // with_energy: whether the solve uses the map's energy (no warm-up then).
  PicardFallback(const FallbackOptions& options, Index batch, bool with_energy)
      : window_(options.progress_window),
        factor_(options.progress_factor),
        start_residual_(batch, kInf),
        start_energy_(batch, kInf),
        entry_residual_(batch, kInf),
        entry_energy_(batch, kInf),
        length_(batch, 0),
        plain_left_(batch, with_energy ? 0 : options.warmup_iterations),
        failures_(batch, 0),
        plain_(batch, with_energy || options.warmup_iterations == 0 ? 0 : 1) {}

  // Called once per iteration for active sample b: true when b takes the
  // plain step this iteration. *restart is set on the first plain step of a
  // fallback: the solver then calls monitor->RestoreKept for b and clears
  // b's history.
  template <typename Monitor>
  bool Plain(Index b, Monitor* monitor, bool* restart) {
    *restart = false;
    if (window_ == 0 && !plain_[b]) return false;
    const bool plain = Decide(b, monitor->best_residual(b), monitor->best_energy(b), restart);
    if (*restart) {
      monitor->RestartStallCount(b);
      monitor->CountFallback(b);
    }
    if (!plain) monitor->ExemptFromStall(b);
    return plain;
  }

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  bool Decide(Index b, double best_residual, double best_energy, bool* restart) {
    if (plain_[b]) {
      if (plain_left_[b] > 0) --plain_left_[b];
      const bool record = best_residual < entry_residual_[b] || best_energy < entry_energy_[b];
      if (plain_left_[b] > 0 || !record) return true;
      plain_[b] = 0;
      Open(b, best_residual, best_energy);
      return false;
    }
    if (best_residual <= factor_ * start_residual_[b] || best_energy < start_energy_[b]) {
      failures_[b] = 0;
      Open(b, best_residual, best_energy);
      return false;
    }
    if (++length_[b] < window_) return false;
    failures_[b] = std::min(failures_[b] + 1, 5);
    plain_left_[b] = (window_ << (failures_[b] - 1)) - 1;  // this step is the first
    plain_[b] = 1;
    entry_residual_[b] = best_residual;
    entry_energy_[b] = best_energy;
    *restart = true;
    return true;
  }

  void Open(Index b, double best_residual, double best_energy) {
    start_residual_[b] = best_residual;
    start_energy_[b] = best_energy;
    length_[b] = 0;
  }

  int window_;
  double factor_;
  std::vector<double> start_residual_, start_energy_;  // best ones when the window opened
  std::vector<double> entry_residual_, entry_energy_;  // best ones when the fallback began
  std::vector<int> length_, plain_left_, failures_;
  std::vector<char> plain_;  // taking plain steps (warm-up or fallback)
};

// The fast-contraction rule of Anderson and Broyden (their fast_contraction
// option, in [0, 1); 0 = off): a sample's last step dz was fast when the map
// contracted it by 1/factor or more, |dz + dg| <= factor |dz| (dg: the step's
// change of the residual g = f(z) - z, so dz + dg is the change of f). Per
// sample it remembers whether the step before was fast too: the first fast
// step of a run is followed by the plain step, later ones by the step from
// the newest pair alone.
class FastContraction {
 public:
  FastContraction(double factor, Index batch) : factor_(factor), fast_before_(batch, 0) {}

  static bool IsValid(double factor, std::string* error) {
    if (factor >= 0.0 && factor < 1.0) return true;
    if (error != nullptr) *error = "fast_contraction must be in [0, 1), got " + std::to_string(factor);
    return false;
  }

  // Judges sample b's last step: returns whether it was fast; *first is set
  // when it is the first fast step in a row.
  template <typename StepZ, typename StepG>
  bool Observe(Index b, const StepZ& dz, const StepG& dg, bool* first) {
    using S = typename StepZ::Scalar;
    const bool fast = factor_ > 0 && (dz + dg).norm() <= static_cast<S>(factor_) * dz.norm();
    *first = fast && !fast_before_[b];
    fast_before_[b] = fast;
    return fast;
  }

 private:
  double factor_;
  std::vector<char> fast_before_;
};

}  // namespace internal
}  // namespace implicit
