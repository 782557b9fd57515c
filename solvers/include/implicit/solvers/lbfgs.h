// L-BFGS minimisation of the energy behind an energy-based map, per sample.
//
// For maps built from an Energy (GradientStepMap, CccpMap, EnergyRootMap in
// energy_maps.h) the equilibrium is a stationary point of E, so it can be
// found by minimising E directly. Every sample is its own
// ceres::GradientProblem (L-BFGS direction, strong-Wolfe line search); the
// samples run in lockstep so that every value/gradient any sample asks for is
// served by one batched Energy::Value / Energy::Gradient call, and each sample
// keeps its own line search, curvature memory and termination.
// Solve() uses one worker thread per sample (mostly blocked; the map and the
// energy are only ever called from the calling thread, on whole batches).
//
// Convergence is judged, like every solver's, on the residual |f(z_b) - z_b|
// of the GIVEN map (for EnergyRootMap that is |grad E(z_b)|), evaluated once
// per iteration on the batch of accepted points.
//
// Attainable accuracy: L-BFGS accepts steps by comparing energy VALUES. Near
// the minimiser a step lowers E by about |grad E|^2 / (2 curvature), which
// drops below the rounding of E itself (~ eps |E|) once |grad E| is about
// sqrt(eps |E| curvature): roughly 1e-8 to 1e-7 in double and 1e-3 in float
// for energies and curvatures of order 1. Tighter tolerances end with status kStalled (Ceres
// reports no further decrease) at the best iterate. Root solvers (newton,
// anderson, ...) and gradient_flow work on the gradient and have no such floor.
//
// Summary accounting: `function_evaluations` counts every batched call into
// the problem: Energy::Value and Energy::Gradient calls of the line searches
// plus the one map evaluation per iteration; `jacobian_products` is 0.
//
//   implicit::EnergyRootMap<double> map(energy);
//   implicit::LbfgsSolver<double>::Options options;
//   options.memory = 10;
//   implicit::Summary summary = implicit::LbfgsSolver<double>(options).Solve(map, z);
//
// Solve() throws std::invalid_argument("lbfgs needs an energy; this map has
// none") for a map whose energy() is nullptr. Ceres works in double; it is only
// used inside the library (lbfgs.cc, instantiated for float and double).
#pragma once

#include <implicit/solvers/solver.h>

#include <string>

namespace implicit {

template <typename Scalar>
class LbfgsSolver : public Solver<Scalar> {
 public:
  struct Options : SolverOptions {
    // Number of (s, y) correction pairs each sample keeps (Ceres'
    // max_lbfgs_rank). >= 1.
    int memory = 20;
    // Scale the initial inverse-Hessian approximation by an estimate of an
    // eigenvalue of the inverse Hessian (Oren's scaling; Ceres'
    // use_approximate_eigenvalue_bfgs_scaling) instead of using I. Helps
    // energies whose curvature is far from 1; can hurt badly scaled ones.
    bool eigenvalue_scaling = false;

    // Checks every field (the shared ones first); on failure names the field in *error.
    bool IsValid(std::string* error) const {
      if (!SolverOptions::IsValid(error)) return false;
      if (memory < 1) {
        if (error != nullptr) *error = "memory must be >= 1, got " + std::to_string(memory);
        return false;
      }
      return true;
    }
  };

  // Throws std::invalid_argument("lbfgs: invalid options: <field> ...").
  explicit LbfgsSolver(const Options& options = Options()) : options_(options) {
    std::string error;
    internal::ThrowIfInvalid(name(), options_.IsValid(&error), error);
  }
  const Options& options() const { return options_; }
  std::string name() const override { return "lbfgs"; }

  Summary Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const override;

 private:
  Options options_;
};

extern template class LbfgsSolver<float>;
extern template class LbfgsSolver<double>;

}  // namespace implicit
