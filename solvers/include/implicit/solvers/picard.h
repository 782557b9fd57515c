/// \file
/// Picard (Krasnosel'skii-Mann) fixed-point iteration with damping:
///
/// \verbatim
///   z <- (1 - damping) z + damping f(z)
/// \endverbatim
///
/// The simplest solver and the baseline of every comparison: one evaluation of
/// f per iteration, no memory beyond the batch, converges linearly for a
/// contraction (any 0 < damping <= 1), and for non-expansive maps when
/// damping < 1. Only the samples still iterating are evaluated when the map
/// SupportsColumnSubsets(). On a CCCP map (damping 1) every step decreases the
/// energy by at least half its squared residual, and Picard is repelled from
/// saddles of E: it is the safe step the accelerated solvers fall back to.
///
/// \code
///   implicit::PicardSolver<double>::Options options;
///   options.damping = 0.5;
///   implicit::Summary s = implicit::PicardSolver<double>(options).Solve(map, z);
/// \endcode
#pragma once

#include <implicit/solvers/internal/batch_evaluator.h>
#include <implicit/solvers/internal/batch_monitor.h>
#include <implicit/solvers/internal/buffer_stash.h>
#include <implicit/solvers/internal/sample_loop.h>
#include <implicit/solvers/solver.h>

#include <string>

namespace implicit {

/// Damped Picard (Krasnosel'skii-Mann) iteration z <- (1 - damping) z + damping f(z).
template <typename Scalar>
class PicardSolver : public Solver<Scalar> {
 public:
  /// The options of PicardSolver: the shared SolverOptions and the damping.
  struct Options : SolverOptions {
    /// Weight of f(z) in the update; 1 (the default) is plain fixed-point iteration. In (0, 1].
    double damping = 1.0;
    /// Checks every field (the shared ones first); on failure names the field in *error.
    /// \return true when every field is in range.
    bool IsValid(std::string* error) const {
      if (!SolverOptions::IsValid(error)) return false;
      if (!(damping > 0.0 && damping <= 1.0)) {
        if (error) *error = "damping must be in (0, 1], got " + std::to_string(damping);
        return false;
      }
      return true;
    }
  };

  /// A solver with the given options.
  /// \throws std::invalid_argument("picard: invalid options: ...") when
  ///         options.IsValid() fails.
  explicit PicardSolver(const Options& options = Options()) : options_(options) {
    std::string error;
    internal::ThrowIfInvalid(name(), options_.IsValid(&error), error);
  }
  /// The options the solver was built with.
  const Options& options() const { return options_; }
  std::string name() const override { return "picard"; }

  Summary Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const override;

 private:
  Options options_;
  mutable internal::BufferPool<Scalar> buffers_;  // batch-sized buffers kept between solves
};

template <typename Scalar>
Summary PicardSolver<Scalar>::Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const {
  internal::SolveBuffers<Scalar> buffers(buffers_);  // first: ends last
  internal::BatchMonitor<Scalar> monitor(options_, name());
  monitor.Begin(map, z, /*keep_images=*/false, buffers.stash());
  internal::BatchEvaluator<Scalar> evaluator(map, z.cols(), internal::UsesEnergy(options_, map), buffers.stash());
  Matrix<Scalar>& fz = buffers.Take(z.rows(), z.cols());
  Vector<Scalar> e(z.cols());
  Vector<Scalar>* energies = evaluator.with_energy() ? &e : nullptr;
  const Scalar damping = static_cast<Scalar>(options_.damping);
  const internal::SampleLoop samples(z.rows());
  evaluator.Evaluate(z, monitor.active_columns(), fz, energies, &monitor);
  while (monitor.Observe(z, fz, energies)) {
    samples.Run(monitor.active_columns(), [&](Index b, int) { z.col(b) += damping * (fz.col(b) - z.col(b)); });
    evaluator.Evaluate(z, monitor.active_columns(), fz, energies, &monitor);
  }
  return monitor.Finish(z);
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(PicardSolver);

}  // namespace implicit
