/// \file
/// Fixed-step gradient flow on an energy: x <- x - step_size * D(x), where D is
/// Energy::DescentDirection (the gradient by default; dE/dg, g = LayerNorm(x),
/// for the Energy Transformer). These are the energy's own dynamics, the way
/// the Energy Transformer computes its forward pass, so this solver is the
/// reference for "run the dynamics until they settle".
///
/// Convergence is judged, like every solver's, on the residual |f(z_b) - z_b|
/// of the GIVEN map (for EnergyRootMap that is |grad E(z_b)|).
///
/// Monotonicity (check_monotone): the dynamics of a descent direction never
/// increase E for a small enough step. With check_monotone the solver
/// evaluates E after every step; a sample whose energy rose by more than
/// monotone_tolerance * (1 + |E_previous|) has left the regime where the flow is
/// a descent, and stops with status kFailure (returned at its best iterate, and
/// counted in Summary::message as "energy increased for N samples"); a
/// non-finite energy stops the sample with kNonFinite. Other samples go on.
///
/// Summary accounting: `function_evaluations` counts every batched call into
/// the problem: one DescentDirection and one map evaluation per iteration (plus
/// the initial map evaluation), and one Energy::Value per iteration (plus the
/// initial one) when check_monotone; `jacobian_products` is 0.
///
/// \code
///   implicit::EnergyRootMap<double> map(energy);
///   implicit::GradientFlowSolver<double>::Options options;
///   options.step_size = 0.5;
///   options.check_monotone = true;
///   implicit::Summary s = implicit::GradientFlowSolver<double>(options).Solve(map, z);
/// \endcode
///
/// Solve() throws std::invalid_argument("gradient_flow needs an energy; this map
/// has none") for a map whose energy() is nullptr.
#pragma once

#include <implicit/solvers/internal/batch_monitor.h>
#include <implicit/solvers/internal/buffer_stash.h>
#include <implicit/solvers/solver.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace implicit {

/// Fixed-step gradient flow x <- x - step_size D(x) on the energy behind the
/// map (Energy::DescentDirection), optionally checked for monotone energy.
template <typename Scalar>
class GradientFlowSolver : public Solver<Scalar> {
 public:
  /// The options of GradientFlowSolver: the shared SolverOptions and the flow's own.
  struct Options : SolverOptions {
    /// alpha in x <- x - alpha D(x) (default 0.1). Finite and > 0.
    double step_size = 0.1;
    /// Evaluate E after every step and stop samples whose energy increased
    /// (status kFailure, see gradient_flow.h). Costs one Energy::Value per
    /// iteration. Off by default.
    bool check_monotone = false;
    /// Relative slack of the monotonicity test: an increase counts only when
    /// E_new > E_old + monotone_tolerance * (1 + |E_old|), so that rounding at
    /// convergence is not reported. Default 1000 x machine epsilon of Scalar.
    /// Finite and >= 0.
    double monotone_tolerance =
        1e3 * static_cast<double>(std::numeric_limits<Scalar>::epsilon());

    /// Checks every field (the shared ones first); on failure names the field in *error.
    /// \return true when every field is in range.
    bool IsValid(std::string* error) const {
      if (!SolverOptions::IsValid(error)) return false;
      auto fail = [error](const std::string& message) {
        if (error != nullptr) *error = message;
        return false;
      };
      if (!(step_size > 0.0) || !std::isfinite(step_size))
        return fail("step_size must be finite and > 0, got " + std::to_string(step_size));
      if (!(monotone_tolerance >= 0.0) || !std::isfinite(monotone_tolerance))
        return fail("monotone_tolerance must be finite and >= 0, got " +
                    std::to_string(monotone_tolerance));
      return true;
    }
  };

  /// A solver with the given options.
  /// \throws std::invalid_argument("gradient_flow: invalid options: \<field\> ...")
  ///         when options.IsValid() fails.
  explicit GradientFlowSolver(const Options& options = Options()) : options_(options) {
    std::string error;
    internal::ThrowIfInvalid(name(), options_.IsValid(&error), error);
  }
  /// The options the solver was built with.
  const Options& options() const { return options_; }
  std::string name() const override { return "gradient_flow"; }

  /// Runs the flow on every column of z in place until each sample converges
  /// (on the map's residual) or stops.
  /// \param map a map with an energy (e.g. EnergyRootMap).
  /// \param z n x B: the initial points on entry, the results on return.
  /// \return the per-sample outcome and the work done.
  /// \throws std::invalid_argument when map.energy() is nullptr, when the
  ///         energy's dimension differs from the map's, for an empty batch
  ///         or z of the wrong dimension.
  Summary Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const override;

 private:
  Options options_;
  mutable internal::BufferPool<Scalar> buffers_;  // batch-sized buffers kept between solves
};

template <typename Scalar>
Summary GradientFlowSolver<Scalar>::Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const {
  const Energy<Scalar>* energy = map.energy();
  if (energy == nullptr) {
    throw std::invalid_argument("gradient_flow needs an energy; this map has none");
  }
  if (energy->dimension() != map.dimension()) {
    throw std::invalid_argument("gradient_flow: the map's energy has dimension " +
                                std::to_string(energy->dimension()) + " but the map has " +
                                std::to_string(map.dimension()));
  }
  internal::SolveBuffers<Scalar> buffers(buffers_);  // first: ends last
  internal::BatchMonitor<Scalar> monitor(options_, name());
  monitor.Begin(map, z, /*keep_images=*/false, buffers.stash());
  const Index n = z.rows(), batch = z.cols();
  const Scalar step = static_cast<Scalar>(options_.step_size);

  Matrix<Scalar>& fz = buffers.Take(n, batch);  // kept between solves
  Matrix<Scalar>& direction = buffers.Take(n, batch);
  Vector<Scalar> e_old(batch), e_new(batch);
  int increases = 0;

  map.Evaluate(z, fz);
  monitor.CountEvaluations();
  if (options_.check_monotone) {
    energy->Value(z, e_old);
    monitor.CountEvaluations();
  }
  while (monitor.Observe(z, fz)) {
    energy->DescentDirection(z, direction);
    monitor.CountEvaluations();
    for (Index b = 0; b < batch; ++b) {
      if (monitor.active(b)) z.col(b) -= step * direction.col(b);
    }
    map.Evaluate(z, fz);
    monitor.CountEvaluations();
    if (!options_.check_monotone) continue;
    energy->Value(z, e_new);
    monitor.CountEvaluations();
    for (Index b = 0; b < batch; ++b) {
      if (!monitor.active(b)) continue;
      const double before = static_cast<double>(e_old(b));
      const double after = static_cast<double>(e_new(b));
      if (!std::isfinite(after)) {
        monitor.StopSample(b, TerminationType::kNonFinite);
      } else if (after > before + options_.monotone_tolerance * (1.0 + std::abs(before))) {
        monitor.StopSample(b, TerminationType::kFailure);
        ++increases;
      } else {
        e_old(b) = e_new(b);
      }
    }
  }
  Summary summary = monitor.Finish(z);
  if (increases > 0) {
    summary.message += "; energy increased for " + std::to_string(increases) +
                       " samples (stopped with status failure)";
  }
  return summary;
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(GradientFlowSolver);

}  // namespace implicit
