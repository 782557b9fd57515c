/// \file
/// Limited-memory "good" Broyden method for the root g(z) = f(z) - z = 0, guarded.
///
/// Each sample keeps an approximation of the inverse Jacobian of g in
/// Sherman-Morrison (low-rank) form
///
/// \verbatim
///   H = -I + sum_{i<k} u_i v_i^T,        proposed step  p = -H g
/// \endverbatim
///
/// and after each step s = z_new - z, y = g(z_new) - g(z) applies the good
/// Broyden update H <- H + (s - H y) s^T H / (s^T H y), i.e. stores the pair
/// u = (s - H y) / (s^T H y), v = H^T s. H starts at -I, so the first step is
/// the plain Picard step z <- f(z). Storage is bounded by `memory` pairs per
/// sample (2 n memory B scalars in all), never by the iteration count: when a
/// sample's memory is full, its approximation restarts from -I. A tiny update
/// denominator |s^T H y| <= sqrt(eps) |s| |H y| (or a non-finite one) also
/// restarts that sample instead of dividing. All memory is allocated before the
/// loop; the loop never touches the heap.
///
/// The step is guarded exactly like Anderson's (internal/guarded_step.h): on
/// maps with an energy, p must be a descent direction and the trial points
/// z + (1 - tau) g + tau p must decrease E sufficiently, else the safe step
/// f(z) is taken and H restarts from -I; each backtracking round is ONE
/// evaluation of the samples still searching. Without an energy, trials are
/// checked against residual_factor x the best residual (default: off).
///
/// Fast contraction (as Anderson's, anderson.h): when the map contracted the
/// last step by fast_contraction (0.1) or more, |f(z_new) - f(z_old)| <=
/// 0.1 |s|, H restarts from -I and keeps only that step's update (the older
/// pairs describe the transient); the first such step is followed by the plain
/// step, a second in a row by the Broyden step of that one pair.
///
/// The Picard fallback (as Anderson's, anderson.h; internal::PicardFallback):
/// plain warm-up steps without an energy, windows of progress_window
/// accelerated iterations that must halve the best residual, else plain steps
/// from the best iterate with H restarted from -I.
///
/// \code
///   implicit::BroydenSolver<double>::Options options;
///   options.memory = 20;
///   implicit::Summary s = implicit::BroydenSolver<double>(options).Solve(map, z);
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

/// The limited-memory "good" Broyden method for g(z) = f(z) - z = 0, per
/// sample, with the guard, fast-contraction rule and Picard fallback
/// described in broyden.h.
template <typename Scalar>
class BroydenSolver : public Solver<Scalar> {
 public:
  /// The options of BroydenSolver: the shared SolverOptions, the guard's and
  /// the Picard fallback's fields (sufficient_decrease, max_backtracks,
  /// backtrack_factor, residual_factor; warmup_iterations, progress_window,
  /// progress_factor: internal/guarded_step.h), and Broyden's own below.
  struct Options : SolverOptions, internal::GuardOptions, internal::FallbackOptions {
    /// Maximum number of rank-one pairs (u_i, v_i) each sample stores. When a
    /// sample's memory is full its inverse-Jacobian approximation restarts
    /// from -I, so storage never grows with the iteration count. >= 1.
    int memory = 20;
    /// Fast contraction (see broyden.h): restart from the newest pair where the map
    /// contracted the last step by this factor or more. In [0, 1); 0 = off.
    double fast_contraction = 0.1;
    /// The defaults; unlike the other guarded solvers, residual_factor is 0:
    /// without an energy every full Broyden step is taken (the guard,
    /// sufficient_decrease, max_backtracks, backtrack_factor, residual_factor,
    /// is described in broyden.h).
    Options() { residual_factor = 0.0; }

    /// Checks every field (the shared ones first); on failure names the field in *error.
    /// \return true when every field is in range.
    bool IsValid(std::string* error) const {
      if (!SolverOptions::IsValid(error) || !GuardOptions::IsValid(error) || !FallbackOptions::IsValid(error))
        return false;
      if (memory < 1 || memory > kMaxSolverMemory) {
        if (error != nullptr)
          *error = "memory must be in 1.." + std::to_string(kMaxSolverMemory) + ", got " + std::to_string(memory);
        return false;
      }
      return internal::FastContraction::IsValid(fast_contraction, error);
    }
  };

  /// A solver with the given options.
  /// \throws std::invalid_argument("broyden: invalid options: ...") when
  ///         options.IsValid() fails.
  explicit BroydenSolver(const Options& options = Options()) : options_(options) {
    std::string error;
    internal::ThrowIfInvalid(name(), options_.IsValid(&error), error);
  }
  /// The options the solver was built with.
  const Options& options() const { return options_; }
  std::string name() const override { return "broyden"; }

  Summary Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const override;

 private:
  Options options_;
  mutable internal::BufferPool<Scalar> buffers_;  // batch-sized buffers and histories kept between solves
};

template <typename Scalar>
Summary BroydenSolver<Scalar>::Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const {
  internal::SolveBuffers<Scalar> buffers(buffers_);  // first: ends last
  internal::BatchMonitor<Scalar> monitor(options_, name());
  monitor.Begin(map, z, /*keep_images=*/options_.progress_window > 0,  // the Picard fallback restarts
                buffers.stash());
  const Index n = z.rows(), batch = z.cols(), m = options_.memory;
  const Scalar tiny = std::sqrt(std::numeric_limits<Scalar>::epsilon());
  internal::BatchEvaluator<Scalar> evaluator(map, batch, internal::UsesEnergy(options_, map), buffers.stash());
  internal::GuardedStepper<Scalar> stepper(options_, n, batch, Scalar(1), internal::TrialPath::kBlend,
                                           buffers.stash());

  // ---- all memory, allocated once (the batch-sized part kept between solves)
  Matrix<Scalar>& fz = buffers.Take(n, batch);            // f(z)
  Matrix<Scalar>& p = buffers.Take(n, batch);             // proposed steps
  Matrix<Scalar>& z_prev = buffers.Take(n, batch);        // iterate and g before the step
  Matrix<Scalar>& g_prev = buffers.Take(n, batch);
  Vector<Scalar> e(batch);                                // E(z) (maps with an energy)
  Vector<Scalar>* energies = evaluator.with_energy() ? &e : nullptr;
  Matrix<Scalar>& u = buffers.Take(n, m * batch);         // sample b: columns [b m, b m + m)
  Matrix<Scalar>& v = buffers.Take(n, m * batch);
  const internal::SampleLoop samples(n);                  // the per-sample work, threaded
  Matrix<Scalar> hy(n, samples.threads()), hts(n, samples.threads());  // H y and H^T s, per thread
  Matrix<Scalar> coef(m, samples.threads());                            // v_i . y etc., per thread
  std::vector<int> count(batch, 0);
  std::vector<char> proposal(batch, 0);
  internal::FastContraction fast_contraction(options_.fast_contraction, batch);
  std::vector<char> plain_next(batch, 0);  // the last step was the first fast one
  internal::PicardFallback fallback(options_, batch, evaluator.with_energy());

  evaluator.Evaluate(z, monitor.active_columns(), fz, energies, &monitor);
  while (monitor.Observe(z, fz, energies)) {
    // Proposal p = -H g = g - sum u_i (v_i . g); with H = -I it is the safe step.
    samples.Run(monitor.active_columns(), [&](Index b, int thread) {
      const Index base = b * m;
      // The Picard fallback: plain steps, entered from the best iterate with
      // H restarted from -I.
      bool restart = false;
      const bool plain = fallback.Plain(b, &monitor, &restart);
      if (restart) {
        monitor.RestoreKept(b, z, fz, energies);
        count[b] = 0;
      }
      internal::CopyVector<Scalar>(z.col(b), z_prev.col(b));
      internal::Combine<Scalar>(g_prev.col(b), {{1, fz.col(b)}, {-1, z.col(b)}});
      internal::CopyVector<Scalar>(g_prev.col(b), p.col(b));
      proposal[b] = 0;
      if (plain || plain_next[b]) return;  // plain_next: after the first fast step
      Scalar* c = coef.col(thread).data();
      internal::HistoryDots(v, base, count[b], g_prev.col(b), c);
      for (Index i = 0; i < count[b]; ++i) c[i] = -c[i];
      internal::AddHistoryCombination(u, base, count[b], c, p.col(b));
      proposal[b] = count[b] > 0 ? 1 : 0;
    });
    stepper.Step(z, fz, energies, p, proposal, &evaluator, &monitor);

    // Update each sample's approximation with the step taken.
    samples.Run(monitor.active_columns(), [&](Index b, int thread) {
      const Index base = b * m;
      if ((proposal[b] && !stepper.accelerated(b)) || count[b] == m) count[b] = 0;  // restart
      // s = z_new - z_old (in p), y = g_new - g_old (in g_prev).
      auto s = p.col(b);
      auto y = g_prev.col(b);
      internal::Combine<Scalar>(s, {{1, z.col(b)}, {-1, z_prev.col(b)}});
      internal::Combine<Scalar>(y, {{1, fz.col(b)}, {-1, z.col(b)}, {-1, y}});
      // Fast contraction along the step: keep only this step's update.
      bool first_fast = false;
      if (fast_contraction.Observe(b, s, y, &first_fast)) count[b] = 0;
      plain_next[b] = first_fast;
      auto hy_b = hy.col(thread);
      auto hts_b = hts.col(thread);
      internal::Combine<Scalar>(hy_b, {{-1, y}});
      internal::Combine<Scalar>(hts_b, {{-1, s}});
      Scalar* c = coef.col(thread).data();
      internal::HistoryDots(v, base, count[b], y, c);  // hy += sum u_i (v_i . y)
      internal::AddHistoryCombination(u, base, count[b], c, hy_b);
      internal::HistoryDots(u, base, count[b], s, c);  // hts += sum v_i (u_i . s)
      internal::AddHistoryCombination(v, base, count[b], c, hts_b);
      const Scalar denom = internal::VectorDot<Scalar>(s, hy_b);
      const Scalar scale =
          std::sqrt(internal::VectorDot<Scalar>(s, s)) * std::sqrt(internal::VectorDot<Scalar>(hy_b, hy_b));
      const Scalar inverse = Scalar(1) / denom;
      if (std::isfinite(static_cast<double>(inverse)) && std::abs(denom) > tiny * scale && scale > Scalar(0)) {
        const Index slot = base + count[b];
        internal::Combine<Scalar>(u.col(slot), {{inverse, s}, {-inverse, hy_b}});
        internal::CopyVector<Scalar>(hts_b, v.col(slot));
        ++count[b];
      } else {
        count[b] = 0;
      }
    });
  }
  return monitor.Finish(z);
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(BroydenSolver);

}  // namespace implicit
