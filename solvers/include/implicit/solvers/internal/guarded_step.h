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
// and, when none is accepted, the safe step. Acceptance:
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

template <typename Scalar>
class GuardedStepper {
 public:
  // All memory is allocated here.
  GuardedStepper(const GuardOptions& options, Index n, Index batch, Scalar beta)
      : options_(options), beta_(beta), y_(n, batch), fy_(n, batch), ey_(batch) {
    y_.setZero();
    pending_.reserve(batch);
    next_.reserve(batch);
    tau_.assign(batch, 0.0);
    sigma_.assign(batch, 1.0);
    accelerated_.assign(batch, 0);
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
    pending_.clear();
    for (Index b : monitor->active_columns()) {
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
      pending_.push_back(b);
    }
    while (!pending_.empty()) {
      evaluator->Evaluate(y_, pending_, fy_, &ey_, monitor);
      next_.clear();
      for (Index b : pending_) {
        const bool safe = tau_[b] == 0.0;
        if (safe ? AcceptSafe(b, e, energy) : Accept(b, z, fz, e, energy, *monitor)) {
          if (tau_[b] != 0.0) {
            accelerated_[b] = 1;
            monitor->CountAcceleratedStep(b);
          }
          z.col(b) = y_.col(b);
          fz.col(b) = fy_.col(b);
          if (energy) (*e)(b) = ey_(b);
          continue;
        }
        monitor->CountBacktrack(b);
        if (safe) {
          sigma_[b] *= options_.backtrack_factor;
        } else {
          tau_[b] *= options_.backtrack_factor;
          if (tau_[b] < min_tau()) {
            tau_[b] = 0.0;  // the safe step
            monitor->CountFallback(b);
          }
        }
        SetTrial(b, z, fz, q);
        next_.push_back(b);
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

  void SetTrial(Index b, ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> fz,
                ConstMatrixRef<Scalar> q) {
    const Scalar tau = static_cast<Scalar>(tau_[b]);
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
  Matrix<Scalar> y_, fy_;  // trial points and f there
  Vector<Scalar> ey_;      // E there
  std::vector<Index> pending_, next_;
  std::vector<double> tau_, sigma_;  // trial and safe-step lengths
  std::vector<char> accelerated_;
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
