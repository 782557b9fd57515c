/// \file
/// Anderson acceleration (type II, "Anderson mixing") for z = f(z), guarded.
///
/// Each sample keeps its own short history of the last `memory` differences of
/// iterates dZ = [z_i+1 - z_i] and of residuals dG = [g_i+1 - g_i], with
/// g(z) = f(z) - z, and solves its own small regularised least-squares problem
///
/// \verbatim
///   gamma = argmin_gamma |g_k - dG gamma|^2 + lambda |gamma|^2
///   q     = beta g_k - (dZ + beta dG) gamma          (beta = mixing)
/// \endverbatim
///
/// q is the Anderson step from z_k (with an empty history, the damped Picard
/// step beta g). Memory: 2 n m B scalars plus an m x m Gram matrix per
/// sample, all allocated before the loop (the loop never touches the heap).
/// For a linear map Anderson with full memory reproduces GMRES.
///
/// The step is guarded (internal/guarded_step.h, docs/acceleration.md):
///  * maps with an energy (CccpMap, GradientStepMap, the Energy Transformer's
///    map): E is the merit function. q must be a descent direction; the trial
///    points y = z + (1 - tau) beta g + tau q (tau = 1, 1/2, ...) must pass
///    Armijo's test E(y) <= E(z) - sufficient_decrease * g . (y - z) (-grad E
///    = g); otherwise the safe step z + beta g is taken and the history
///    cleared. The accepted iterates never increase E,
///    and a root-finder's pull towards saddles of E is refused: Anderson ends
///    at minima, like the safe step it accelerates. A trial's E comes with its
///    f from one evaluation; an accepted trial costs nothing more.
///  * maps without an energy: a trial whose residual exceeds residual_factor x
///    the sample's best residual is rejected the same way.
///  * relative ridge: lambda = ridge * trace(dG^T dG) / k scales with the
///    history (an absolute ridge would dominate near convergence and stall);
///  * ill-conditioned history: the history is cleared when a Cholesky pivot of
///    the k x k system falls to condition_limit x its largest diagonal entry
///    (never a NaN from a singular system);
///  * predicted gain: the step is proposed only when the least squares
///    predicts |g_k - dG gamma| <= max_predicted_residual |g_k| (default 0.5);
///    otherwise the plain step is taken at no extra evaluation and the history
///    kept (a map that already contracts fast gains nothing from extrapolation);
///  * fast contraction: when the map contracted the last step by at least
///    fast_contraction (0.1), |f(z_k) - f(z_k-1)| <= 0.1 |z_k - z_k-1|, the
///    history is cut to the newest pair; the first such step is plain, a
///    second one in a row extrapolates from that pair alone.
/// Summary::sample_accelerated_steps / sample_backtracks / sample_fallbacks
/// count what the guard did per sample; only active samples are evaluated.
///
/// Never worse off than Picard (internal::PicardFallback, docs/acceleration.md):
/// without an energy the first warmup_iterations (8) steps are plain; a sample
/// whose accelerated steps do not halve its best residual (or lower its best
/// energy) within progress_window (5) iterations is put back at its best
/// iterate and takes plain steps with a fresh history — for at least a window,
/// doubling after each consecutive failure, and until they set a new best —
/// then accelerates again. It is declared stalled only when those plain steps
/// made no progress for max_stall_iterations.
///
/// \code
///   implicit::AndersonSolver<double>::Options options;
///   options.memory = 5;
///   options.absolute_tolerance = 1e-10;
///   implicit::AndersonSolver<double> solver(options);   // throws on bad options
///   implicit::Summary summary = solver.Solve(map, z);   // z: n x B, updated in place
/// \endcode
#pragma once

#include <implicit/solvers/internal/batch_evaluator.h>
#include <implicit/solvers/internal/batch_monitor.h>
#include <implicit/solvers/internal/buffer_stash.h>
#include <implicit/solvers/internal/guarded_step.h>
#include <implicit/solvers/internal/low_rank.h>
#include <implicit/solvers/internal/sample_loop.h>
#include <implicit/solvers/solver.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace implicit {

/// Anderson acceleration (type II) of z = f(z), per sample, with the energy
/// or residual guard and the Picard fallback described in anderson.h.
template <typename Scalar>
class AndersonSolver : public Solver<Scalar> {
 public:
  /// The options of AndersonSolver: the shared SolverOptions, the guard's and
  /// the Picard fallback's fields (sufficient_decrease, max_backtracks,
  /// backtrack_factor, residual_factor; warmup_iterations, progress_window,
  /// progress_factor: internal/guarded_step.h), and Anderson's own below.
  struct Options : SolverOptions, internal::GuardOptions, internal::FallbackOptions {
    /// m: the number of (dZ, dG) difference pairs each sample keeps (the oldest
    /// is overwritten when full). >= 1.
    int memory = 5;
    /// beta: weight of the residual g = f(z) - z in the update (1 = undamped
    /// Anderson; beta < 1 damps, as in Picard's `damping`). Finite and > 0.
    double mixing = 1.0;
    /// Relative Tikhonov ridge: the least-squares system solved is
    /// (dG^T dG + lambda I) gamma = dG^T g with lambda = ridge * trace(dG^T dG) / k
    /// (k = stored pairs), i.e. relative to the mean squared norm of the history.
    /// Being relative it scales with the residuals; an absolute ridge would
    /// swamp dG^T dG at small residuals and stall the method. Finite and >= 0.
    double ridge = 1e-10;
    /// Ill-conditioning test: during the Cholesky factorisation of the ridged
    /// k x k system M, the history is cleared (and the safe step taken)
    /// when a pivot d_j = M_jj - sum_{l<j} L_jl^2 satisfies
    /// d_j <= condition_limit * max_i M_ii (or is not finite). The ratio
    /// approximates 1/cond(M) = 1/cond(dG)^2. In [0, 1); the default,
    /// 100 x machine epsilon of Scalar, only catches numerically singular
    /// systems (in double the relative ridge acts first).
    double condition_limit = 100.0 * static_cast<double>(std::numeric_limits<Scalar>::epsilon());
    /// Predicted gain: the accelerated step is proposed only when the
    /// linearised residual it predicts, |g_k - dG gamma|, is at most
    /// max_predicted_residual x |g_k|; otherwise the plain step beta g_k is
    /// taken and the history kept. Where the map already contracts fast (a
    /// saturated softmax) the least squares predicts little gain, and the
    /// extrapolation would only cost evaluations. In (0, 1]; 1 = off (gamma = 0
    /// always predicts |g_k|).
    double max_predicted_residual = 0.5;
    /// Fast contraction: when the map contracted the last step by this factor
    /// or more, |f(z_k) - f(z_k-1)| <= fast_contraction |z_k - z_k-1|, the
    /// older pairs describe the transient, not the map near its fixed point:
    /// the history is cut to the newest pair. On the first such step the
    /// plain step is taken: where the map is locally (nearly) constant — a
    /// saturated softmax, an entmax whose support has settled — Picard's step
    /// is (nearly) exact and any extrapolation would spoil it. When the map
    /// contracted fast on the step before too (a steady linear rate), the
    /// step extrapolates from the newest pair alone (the secant step, which
    /// removes the slowest direction of that rate). In [0, 1); 0 = off.
    double fast_contraction = 0.1;
    // The guard (sufficient_decrease, max_backtracks, backtrack_factor,
    // residual_factor) is described at the top of this file.

    /// Checks every field (the shared ones first); on failure names the field in *error.
    /// \return true when every field is in range.
    bool IsValid(std::string* error) const {
      if (!SolverOptions::IsValid(error) || !GuardOptions::IsValid(error) || !FallbackOptions::IsValid(error))
        return false;
      auto fail = [error](const std::string& message) {
        if (error != nullptr) *error = message;
        return false;
      };
      if (memory < 1 || memory > kMaxSolverMemory)
        return fail("memory must be in 1.." + std::to_string(kMaxSolverMemory) + ", got " + std::to_string(memory));
      if (!(mixing > 0.0) || !std::isfinite(mixing))
        return fail("mixing must be finite and > 0, got " + std::to_string(mixing));
      if (!(ridge >= 0.0) || !std::isfinite(ridge))
        return fail("ridge must be finite and >= 0, got " + std::to_string(ridge));
      if (!(condition_limit >= 0.0 && condition_limit < 1.0))
        return fail("condition_limit must be in [0, 1), got " + std::to_string(condition_limit));
      if (!(max_predicted_residual > 0.0 && max_predicted_residual <= 1.0))
        return fail("max_predicted_residual must be in (0, 1], got " + std::to_string(max_predicted_residual));
      return internal::FastContraction::IsValid(fast_contraction, error);
    }
  };

  /// A solver with the given options.
  /// \throws std::invalid_argument("anderson: invalid options: ...") when
  ///         options.IsValid() fails.
  explicit AndersonSolver(const Options& options = Options()) : options_(options) {
    std::string error;
    internal::ThrowIfInvalid(name(), options_.IsValid(&error), error);
  }
  /// The options the solver was built with.
  const Options& options() const { return options_; }
  std::string name() const override { return "anderson"; }

  Summary Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const override;

 private:
  /// Solves (G + lambda I) gamma = rhs for the k x k Gram block G with the
  /// relative ridge, by a Cholesky factorisation in L (m x m scratch, the
  /// thread's own). Returns false (history must be cleared) when a pivot fails
  /// the condition test.
  bool SolveGram(const Eigen::Ref<const Matrix<double>>& G, Index k, Eigen::Ref<Matrix<double>> L,
                 Eigen::Ref<const Vector<double>> rhs, Eigen::Ref<Vector<double>> gamma) const {
    double trace = 0.0;
    for (Index i = 0; i < k; ++i) trace += G(i, i);
    const double lambda = options_.ridge * trace / static_cast<double>(k);
    double max_diag = 0.0;
    for (Index i = 0; i < k; ++i) max_diag = std::max(max_diag, G(i, i) + lambda);
    if (!(max_diag > 0.0) || !std::isfinite(max_diag)) return false;
    const double threshold = options_.condition_limit * max_diag;
    for (Index j = 0; j < k; ++j) {
      double d = G(j, j) + lambda;
      for (Index l = 0; l < j; ++l) d -= L(j, l) * L(j, l);
      if (!(d > threshold) || !std::isfinite(d)) return false;
      const double ljj = std::sqrt(d);
      L(j, j) = ljj;
      for (Index i = j + 1; i < k; ++i) {
        double s = G(i, j);
        for (Index l = 0; l < j; ++l) s -= L(i, l) * L(j, l);
        L(i, j) = s / ljj;
      }
    }
    // L y = rhs, then L^T gamma = y.
    for (Index i = 0; i < k; ++i) {
      double s = rhs(i);
      for (Index l = 0; l < i; ++l) s -= L(i, l) * gamma(l);
      gamma(i) = s / L(i, i);
    }
    for (Index i = k - 1; i >= 0; --i) {
      double s = gamma(i);
      for (Index l = i + 1; l < k; ++l) s -= L(l, i) * gamma(l);
      gamma(i) = s / L(i, i);
    }
    for (Index i = 0; i < k; ++i) {
      if (!std::isfinite(gamma(i))) return false;
    }
    return true;
  }

  Options options_;
  mutable internal::BufferPool<Scalar> buffers_;  // batch-sized buffers and histories kept between solves
};

template <typename Scalar>
Summary AndersonSolver<Scalar>::Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const {
  internal::SolveBuffers<Scalar> buffers(buffers_);  // first: ends last
  internal::BatchMonitor<Scalar> monitor(options_, name());
  monitor.Begin(map, z, /*keep_images=*/options_.progress_window > 0,  // the Picard fallback restarts
                buffers.stash());
  const Index n = z.rows(), batch = z.cols(), m = options_.memory;
  const Scalar beta = static_cast<Scalar>(options_.mixing);
  internal::BatchEvaluator<Scalar> evaluator(map, batch, internal::UsesEnergy(options_, map), buffers.stash());
  internal::GuardedStepper<Scalar> stepper(options_, n, batch, beta, internal::TrialPath::kBlend, buffers.stash());

  // ---- all memory, allocated once (the batch-sized part kept between solves)
  Matrix<Scalar>& fz = buffers.Take(n, batch);        // f(z)
  Matrix<Scalar>& q = buffers.Take(n, batch);         // proposed steps
  Vector<Scalar> e(batch);                            // E(z) (maps with an energy)
  Vector<Scalar>* energies = evaluator.with_energy() ? &e : nullptr;
  Matrix<Scalar>& z_prev = buffers.Take(n, batch);    // last iterate
  Matrix<Scalar>& g_prev = buffers.Take(n, batch);    // and its residual
  Matrix<Scalar>& dz = buffers.Take(n, m * batch);    // sample b: columns [b m, b m + m)
  Matrix<Scalar>& dg = buffers.Take(n, m * batch);
  Matrix<double> gram(m, m * batch);                  // dG^T dG of sample b: block b
  const internal::SampleLoop samples(n);              // the per-sample work, threaded
  const int threads = samples.threads();              // scratch: one block per thread
  Matrix<double> chol(m, m * threads);                // ridged system, then its factor
  Matrix<double> rhs(m, threads), gamma(m, threads);
  Matrix<Scalar> predicted(n, threads);               // g - dG gamma
  Matrix<Scalar> coef(m, threads);                    // dot products, -gamma
  std::vector<int> count(batch, 0), next(batch, 0);   // stored pairs, next slot to write
  std::vector<char> has_prev(batch, 0), proposal(batch, 0);
  internal::FastContraction fast_contraction(options_.fast_contraction, batch);
  internal::PicardFallback fallback(options_, batch, evaluator.with_energy());

  evaluator.Evaluate(z, monitor.active_columns(), fz, energies, &monitor);
  while (monitor.Observe(z, fz, energies)) {
    samples.Run(monitor.active_columns(), [&](Index b, int thread) {
      auto zb = z.col(b);
      const Index base = b * m;
      // Push the newest difference pair into the ring and update the Gram block.
      if (has_prev[b]) {
        const Index slot = next[b];
        internal::Combine<Scalar>(dz.col(base + slot), {{1, zb}, {-1, z_prev.col(b)}});
        internal::Combine<Scalar>(dg.col(base + slot), {{1, fz.col(b)}, {-1, zb}, {-1, g_prev.col(b)}});
        count[b] = std::min<int>(count[b] + 1, static_cast<int>(m));
        next[b] = static_cast<int>((slot + 1) % m);
        Scalar* c = coef.col(thread).data();
        internal::HistoryDots(dg, base, count[b], dg.col(base + slot), c);
        for (Index j = 0; j < count[b]; ++j) {
          gram(slot, base + j) = static_cast<double>(c[j]);
          gram(j, base + slot) = static_cast<double>(c[j]);
        }
      }
      // Fast contraction along the last step: keep the newest pair only (moved
      // to slot 0); the first fast step is plain, a second in a row
      // extrapolates from that pair.
      bool first_fast = false;
      if (has_prev[b]) {
        const Index newest = (next[b] + m - 1) % m;
        const bool fast = fast_contraction.Observe(b, dz.col(base + newest), dg.col(base + newest), &first_fast);
        if (fast && count[b] > 1) {
          dz.col(base) = dz.col(base + newest);
          dg.col(base) = dg.col(base + newest);
          gram(0, base) = gram(newest, base + newest);
          count[b] = 1;
          next[b] = static_cast<int>(1 % m);
        }
      }
      // The Picard fallback: plain steps, entered from the best iterate with
      // a fresh history.
      bool restart = false;
      const bool plain = fallback.Plain(b, &monitor, &restart);
      if (restart) {
        monitor.RestoreKept(b, z, fz, energies);
        count[b] = next[b] = 0;
      }
      internal::CopyVector<Scalar>(zb, z_prev.col(b));
      internal::Combine<Scalar>(g_prev.col(b), {{1, fz.col(b)}, {-1, zb}});
      has_prev[b] = 1;
      auto gb = g_prev.col(b);

      // The proposal q = beta (g - dG gamma) - dZ gamma (the Anderson step from
      // z), unless this is the first fast step or the least squares predicts
      // little gain (max_predicted_residual).
      proposal[b] = 0;
      if (plain) return;
      const Index k = count[b];
      if (k == 0 || first_fast) return;
      auto rhs_b = rhs.col(thread);
      auto gamma_b = gamma.col(thread);
      Scalar* c = coef.col(thread).data();
      internal::HistoryDots(dg, base, k, gb, c);
      for (Index i = 0; i < k; ++i) rhs_b(i) = static_cast<double>(c[i]);
      if (!SolveGram(gram.block(0, base, k, k), k, chol.middleCols(thread * m, m), rhs_b, gamma_b)) {
        count[b] = next[b] = 0;  // ill-conditioned history: safe step, fresh history
        return;
      }
      auto predicted_b = predicted.col(thread);
      internal::CopyVector<Scalar>(gb, predicted_b);
      for (Index i = 0; i < k; ++i) c[i] = -static_cast<Scalar>(gamma_b(i));
      internal::AddHistoryCombination(dg, base, k, c, predicted_b);
      if (std::sqrt(internal::VectorDot<Scalar>(predicted_b, predicted_b)) >
          static_cast<Scalar>(options_.max_predicted_residual) * std::sqrt(internal::VectorDot<Scalar>(gb, gb))) {
        return;
      }
      internal::Combine<Scalar>(q.col(b), {{beta, predicted_b}});
      internal::AddHistoryCombination(dz, base, k, c, q.col(b));
      proposal[b] = 1;
    });
    stepper.Step(z, fz, energies, q, proposal, &evaluator, &monitor);
    for (Index b : monitor.active_columns()) {
      if (proposal[b] && !stepper.accelerated(b)) count[b] = next[b] = 0;  // fell back
    }
  }
  return monitor.Finish(z);
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(AndersonSolver);

}  // namespace implicit
