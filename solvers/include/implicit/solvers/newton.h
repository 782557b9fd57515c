/// \file
/// Newton's method on the root problem g(z) = f(z) - z = 0, per sample.
///
/// Energy path (maps with an energy and a symmetric Jacobian — CccpMap,
/// GradientStepMap, EnergyRootMap — when use_energy): truncated Newton-CG on
/// E, batched and guarded. Each iteration runs conjugate gradients on
/// (I - J_f) q = r (r = f(z) - z; I - J_f = a hess E for a gradient-step map)
/// with one batched JVP per CG step for the samples still iterating, to the
/// relative accuracy min(0.5, sqrt|r|) or max_krylov_iterations. The JVPs
/// come from the map's linearisation at the step's active samples, made once
/// per step (FixedPointMap::Linearize on the compacted columns, for maps whose
/// samples are independent), when it has products on subsets of its columns
/// (Linearization::HasColumnProducts: an RBM's keeps G'' of its scores, a
/// Hopfield energy's the softmax weights); otherwise from the map at z. A map
/// that LinearizesWithEvaluation() (CccpMap or GradientStepMap of an RbmEnergy)
/// is instead evaluated through EvaluateWithEnergyAndLinearize and each
/// sample's JVPs come from the evaluation that gave its accepted point, with no
/// Linearize call (O(N B) more memory: the kept Hessians). CG stops at
/// the first direction of non-positive curvature d^T (I - J_f) d <= 0 and
/// returns what it has (the safe step r if it is the first), so the proposal is
/// always a descent direction and negative curvature is never solved through:
/// Newton leaves saddles of E instead of converging to them. The proposal is
/// then taken through the same energy guard as Anderson's
/// (internal/guarded_step.h: Armijo's test on E, safe-step fallback), its
/// trials on the line z + tau q, each tau after the first the minimiser of the
/// quadratic through E(z), -r.q and the rejected trial's E.
/// No threads, no dense Jacobian, O(n B) memory besides the linearisations.
/// Dense path (newton_krylov = false and n <= dense_jacobian_max_dimension;
/// trust_region, initial_trust_region_radius and max_threads configure it; a
/// Krylov solve with any of them changed says in its message that they were
/// not used): every sample is its own
/// Ceres nonlinear least-squares problem min 0.5 |g(z_b)|^2 (one residual block
/// of size n), solved with Ceres' trust-region machinery, Levenberg-Marquardt or
/// dogleg. The Jacobian J_g = J_f - I is assembled from the map's Jacobian-vector
/// products: n batched JVP calls with v = e_i in every column give column i of
/// every sample's Jacobian at once (this works for maps conditioned on a
/// per-sample input, which cannot evaluate columns on their own). The samples
/// run in lockstep: each sample's Ceres solver runs on its own worker thread and
/// every evaluation any of them asks for is served by one batched call of f (or
/// one batched round of n JVPs) on the calling thread. Each sample keeps its own
/// trust region and its own termination, so one failing sample never affects
/// the others; a NaN/Inf trial point is a rejected step, never an iterate.
/// Solve() runs at most max_threads worker threads (mostly blocked; the map is
/// only ever called from the calling thread): a larger batch is solved in
/// consecutive chunks of max_threads samples, each chunk in lockstep as above.
/// A chunk is evaluated on its own columns when the map can evaluate column
/// subsets (SupportsColumnSubsets(); JVPs: SupportsColumnJacobianProducts()),
/// otherwise as part of the whole batch (so a map with per-sample data and no
/// column evaluation pays one whole-batch call per chunk call). Such a Summary merges
/// the chunks' (MergeShardSummaries: iterations the largest chunk's, evaluations
/// summed, no trace; the iteration callback sees each chunk's iterations).
///
/// Matrix-free path (the default for maps without an energy: newton_krylov =
/// true, or n > dense_jacobian_max_dimension): inexact Newton-Krylov, no
/// threads. Each iteration solves J_g d = -g per sample with restarted GMRES on
/// Jacobian-vector products (all samples' Krylov iterations share one batched
/// JVP per inner step; GmresSolve of linear_solvers.h), to the relative
/// accuracy forcing_term (Eisenstat-Walker by default), then backtracks
/// t = 1, 1/2, 1/4, ... until
/// |g(z + t d)| <= (1 - sufficient_decrease t) |g(z)|. Memory is
/// O(n krylov_restart B): nothing of size n^2 is allocated.
///
/// The map must provide Jacobian-vector products (HasJacobianProducts());
/// otherwise Solve() throws std::invalid_argument.
///
/// Summary accounting (dense and Krylov paths): `iterations` are Newton (trust-region) iterations of the
/// batch, a rejected trust-region step counting as an iteration, as in Ceres;
/// `function_evaluations` counts batched calls of f (each B columns) and
/// `jacobian_products` batched calls of the JVP (each B columns): one dense
/// Jacobian round costs n of them (none is spent at a point where every
/// requesting sample has already met the tolerance).
///
/// \code
///   implicit::NewtonSolver<double>::Options options;
///   options.newton_krylov = false;       // the dense Ceres path
///   options.trust_region = "dogleg";
///   options.absolute_tolerance = 1e-12;
///   implicit::NewtonSolver<double> solver(options);
///   implicit::Summary summary = solver.Solve(map, z);   // z: n x B, in place
/// \endcode
///
/// Ceres is only used inside the library (newton.cc; instantiated for float and
/// double); Ceres works in double, the map in Scalar.
#pragma once

#include <implicit/solvers/internal/guarded_step.h>
#include <implicit/solvers/solver.h>

#include <cmath>
#include <string>

namespace implicit {

/// Newton's method on g(z) = f(z) - z = 0, per sample: truncated Newton-CG on
/// an energy, dense trust-region Newton (Ceres) or matrix-free Newton-Krylov
/// (see newton.h for which path runs when).
template <typename Scalar>
class NewtonSolver : public Solver<Scalar> {
 public:
  /// The options of NewtonSolver: the shared SolverOptions, the guard's fields
  /// (sufficient_decrease, max_backtracks, backtrack_factor, residual_factor:
  /// internal/guarded_step.h) and the paths' own below.
  struct Options : SolverOptions, internal::GuardOptions {
    /// Trust-region strategy of the dense path: "levenberg_marquardt" or "dogleg".
    std::string trust_region = "levenberg_marquardt";
    /// Initial trust-region radius of every sample (Ceres'
    /// initial_trust_region_radius; for Levenberg-Marquardt 1/radius is the
    /// initial damping). Finite and > 0.
    double initial_trust_region_radius = 1e4;
    /// Largest state dimension n for which the dense n x n Jacobian is built;
    /// above it the matrix-free Newton-Krylov path is used. >= 0.
    int dense_jacobian_max_dimension = 500;
    /// The matrix-free Newton-Krylov path whatever n is (the default: GMRES
    /// needs far fewer JVPs than the n of a dense Jacobian, and no threads);
    /// false: the dense Ceres path up to dense_jacobian_max_dimension.
    bool newton_krylov = true;
    /// Dense path: the most Ceres worker threads run at once, i.e. the largest
    /// chunk of samples solved in lockstep (see newton.h). >= 1.
    int max_threads = 128;

    // ---- Newton-Krylov and energy paths ----
    /// GMRES restart length (Krylov vectors kept per sample). 1..kMaxSolverMemory.
    int krylov_restart = 20;
    /// Maximum GMRES (Krylov path) or CG (energy path) iterations, i.e. JVPs,
    /// per Newton step. >= 1.
    int max_krylov_iterations = 100;
    /// Inexact-Newton forcing term eta of the Krylov path: GMRES stops when
    /// |J_g d + g| <= eta |g|. 0: Eisenstat-Walker's choice 2 (eta 0.5 at the
    /// first step, then 0.9 (|g_k| / |g_k-1|)^2 of the batch's slowest sample,
    /// safeguarded; newton.cc); else a constant in (0, 1).
    double forcing_term = 0.0;
    /// The defaults, with max_backtracks = 20. The guard's fields
    /// (internal/guarded_step.h): on the Krylov path, max_backtracks bounds the
    /// backtracking rounds per Newton step (each one batched evaluation of f; a
    /// sample whose |g| does not decrease within them stops with kFailure) and
    /// sufficient_decrease (1e-4) is the Armijo constant c of
    /// |g(z + t d)| <= (1 - c t) |g(z)|; on the energy path they act as in
    /// Anderson's guard.
    Options() { max_backtracks = 20; }

    /// Checks every field (the shared ones first); on failure names the field in *error.
    /// \return true when every field is in range.
    bool IsValid(std::string* error) const {
      if (!SolverOptions::IsValid(error) || !GuardOptions::IsValid(error)) return false;
      auto fail = [error](const std::string& message) {
        if (error != nullptr) *error = message;
        return false;
      };
      if (trust_region != "levenberg_marquardt" && trust_region != "dogleg")
        return fail("trust_region must be \"levenberg_marquardt\" or \"dogleg\", got \"" +
                    trust_region + "\"");
      if (!(initial_trust_region_radius > 0.0) || !std::isfinite(initial_trust_region_radius))
        return fail("initial_trust_region_radius must be finite and > 0, got " +
                    std::to_string(initial_trust_region_radius));
      if (dense_jacobian_max_dimension < 0)
        return fail("dense_jacobian_max_dimension must be >= 0, got " +
                    std::to_string(dense_jacobian_max_dimension));
      if (max_threads < 1)
        return fail("max_threads must be >= 1, got " + std::to_string(max_threads));
      if (krylov_restart < 1 || krylov_restart > kMaxSolverMemory)
        return fail("krylov_restart must be in 1.." + std::to_string(kMaxSolverMemory) + ", got " +
                    std::to_string(krylov_restart));
      if (max_krylov_iterations < 1)
        return fail("max_krylov_iterations must be >= 1, got " +
                    std::to_string(max_krylov_iterations));
      if (!(forcing_term >= 0.0 && forcing_term < 1.0))
        return fail("forcing_term must be 0 (Eisenstat-Walker) or in (0, 1), got " + std::to_string(forcing_term));
      return true;
    }
  };

  /// A solver with the given options.
  /// \throws std::invalid_argument("newton: invalid options: \<field\> ...")
  ///         when options.IsValid() fails.
  explicit NewtonSolver(const Options& options = Options()) : options_(options) {
    std::string error;
    internal::ThrowIfInvalid(name(), options_.IsValid(&error), error);
  }
  /// The options the solver was built with.
  const Options& options() const { return options_; }
  std::string name() const override { return "newton"; }

  /// True when a problem of dimension n is solved matrix-free (Newton-Krylov):
  /// newton_krylov is set or n > dense_jacobian_max_dimension.
  bool UsesNewtonKrylov(Index n) const {
    return options_.newton_krylov || n > options_.dense_jacobian_max_dimension;
  }

  /// Solves z_b = f(z_b) for every column of z in place, from z's values, by
  /// the path the map and options select (newton.h).
  /// \param map the fixed-point map f; it must have Jacobian-vector products.
  /// \param z n x B: the initial guesses on entry; on return each converged
  ///        sample's root, each other sample's best iterate.
  /// \return the per-sample outcome and the work done.
  /// \throws std::invalid_argument when the map has no Jacobian-vector products,
  ///         for an empty batch or a state of the wrong dimension.
  Summary Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const override;

 private:
  Summary SolveDense(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const;
  Summary SolveDenseInLockstep(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const;
  Summary SolveKrylov(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const;
  Summary SolveOnEnergy(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const;

  Options options_;
};

/// \cond INTERNAL
extern template class NewtonSolver<float>;
extern template class NewtonSolver<double>;
/// \endcond

}  // namespace implicit
