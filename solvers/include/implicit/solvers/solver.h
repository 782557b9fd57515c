/// \file
/// The interface every forward solver shares: Options in, Summary out.
///
/// A solver finds, for every column (sample) of a batch z, a fixed point
/// z_b = f(z_b) of a FixedPointMap, starting from the values in z and writing
/// the result back into z. Convergence is decided and reported per sample; a
/// converged sample stops changing while the others go on.
///
/// \code
///   implicit::AndersonSolver<double>::Options options;
///   options.absolute_tolerance = 1e-10;
///   options.memory = 5;
///   implicit::AndersonSolver<double> solver(options);   // throws on bad options
///   implicit::Summary summary = solver.Solve(map, z);
///   std::cout << summary.BriefReport() << "\n";
///   if (!summary.IsConverged()) { ... summary.sample_status[b] ... }
/// \endcode
///
/// Never a false "converged": a NaN or Inf makes a sample kNonFinite and its
/// column is reset to the best finite iterate. Every sample that did not
/// converge is returned at its best iterate: the lowest-energy one when the
/// solver uses the map's energy (SolverOptions::use_energy), else the
/// smallest-residual one. Solvers evaluate only the samples still iterating
/// when the map SupportsColumnSubsets() (an active set). Bad options, mismatched
/// shapes and empty batches throw std::invalid_argument.
#pragma once

#include <implicit/core/map.h>
#include <implicit/core/types.h>

#include <functional>
#include <string>
#include <vector>

namespace implicit {

/// Why a solve (or one sample of it) ended.
enum class TerminationType {
  kConverged,      ///< residual within tolerance
  kMaxIterations,  ///< iteration (or evaluation) budget spent first
  kDiverged,       ///< residual grew past divergence_threshold x initial residual
  kNonFinite,      ///< NaN or Inf in the state or the map's value
  kStalled,        ///< no progress (residual or energy) in max_stall_iterations iterations
  kUserAbort,      ///< the iteration callback asked to stop
  kInvalidInput,   ///< the problem could not be posed (reported, e.g., by apps)
  kFailure,        ///< the method itself broke down (e.g. a singular inner solve)
};

/// The name of a termination type: "converged", "max_iterations", "diverged",
/// "non_finite", "stalled", "user_abort", "invalid_input", "failure" ("unknown"
/// for a value outside the enum).
const char* TerminationTypeToString(TerminationType type);

/// What the iteration callback sees after every iteration.
struct IterationSummary {
  int iteration = 0;             ///< 0 is the initial point
  int function_evaluations = 0;  ///< batch evaluations of f so far
  double max_residual = 0.0;     ///< max over samples of |f(z_b) - z_b|_2
  int num_converged = 0;         ///< samples converged so far
  int num_active = 0;            ///< samples still iterating
  double seconds = 0.0;          ///< since Solve() started
};

/// What the iteration callback tells the solver: kContinue to go on
/// iterating, kAbort to stop now (the solve ends with kUserAbort).
enum class CallbackReturnType { kContinue, kAbort };
/// Called after every iteration (SolverOptions::callback); return kAbort to stop the solve.
using IterationCallback = std::function<CallbackReturnType(const IterationSummary&)>;

/// The largest `memory` (history length) Anderson, Broyden and L-BFGS accept.
/// Each keeps about 2 n memory numbers per sample and solves a memory x memory
/// problem per step, so a longer history never pays; the bound turns a typo
/// such as memory=1000000000 into an error instead of a 48 GB allocation.
inline constexpr int kMaxSolverMemory = 1000;

/// Options shared by every solver. Each solver's Options derives from this.
struct SolverOptions {
  /// Maximum number of iterations (batch updates) after the initial point.
  int max_iterations = 100;
  /// Budget in evaluations of f per sample (0 = none): a sample stops with
  /// kMaxIterations once the columns of f evaluated for it
  /// (Summary::sample_evaluations) reach max_evaluations. The accelerated
  /// solvers' guarded trials may evaluate a sample more than once per
  /// iteration; the budget is checked after each iteration, which spends at
  /// most 2 + max_backtracks evaluations of a sample (1 for Picard).
  int max_evaluations = 0;
  /// Sample b converged when |f(z_b) - z_b|_2 <= absolute_tolerance (default
  /// 1e-8), or when the relative_tolerance test holds.
  double absolute_tolerance = 1e-8;
  /// Sample b also converged when |f(z_b) - z_b|_2 <= relative_tolerance *
  /// |f(z_b)|_2 (0, the default, = off).
  double relative_tolerance = 0.0;
  /// Sample b stalled when it made no progress for this many consecutive
  /// iterations (0 = never declare a stall). Progress is a new smallest
  /// residual or, when the solver uses the map's energy (use_energy), a new
  /// lowest energy: energy-descent methods may raise the residual for a long
  /// while as they pass a saddle region, and that is not a stall.
  int max_stall_iterations = 50;
  /// For maps with an energy (map.energy() != nullptr): evaluate E with f at
  /// every iterate (free for CccpMap over the attention energies: the same
  /// score GEMM), judge stalls by it, return an unconverged sample at its
  /// lowest-energy iterate, and guard accelerated steps with it (anderson,
  /// broyden). false: residual only, as for maps without an energy.
  bool use_energy = true;
  /// Sample b diverged when its residual exceeds divergence_threshold times its
  /// initial residual (and is above the tolerance). > 1.
  double divergence_threshold = 1e8;
  /// Record Summary::trace (one entry per iteration); off by default.
  bool record_trace = false;
  /// Called after every iteration; return kAbort to stop (status kUserAbort).
  /// Empty (the default): no callback.
  IterationCallback callback;

  /// Checks the shared fields; on failure names the field in *error.
  /// \param error receives the message on failure (may be nullptr).
  /// \return true when every shared field is in range.
  bool IsValid(std::string* error) const;
};

/// One row of the residual trace (Summary::trace).
struct TraceEntry {
  int iteration = 0;             ///< the iteration (0 is the initial point)
  int function_evaluations = 0;  ///< batch evaluations of f so far
  double seconds = 0.0;          ///< since Solve() started
  double max_residual = 0.0;     ///< over all samples, at this iteration
  double mean_residual = 0.0;    ///< mean over samples
};

/// What a forward solve reports: the overall outcome, the work done, and every
/// sample's status, residual and counters.
struct Summary {
  std::string solver;  ///< the solver's registered name
  /// kConverged only when every sample converged. Otherwise the reason the
  /// loop ended: kUserAbort, kMaxIterations, or (when every sample stopped on
  /// its own) the most severe failing sample status, in the order kNonFinite,
  /// kDiverged, kFailure, kStalled.
  TerminationType termination_type = TerminationType::kInvalidInput;
  /// Human-readable details of the outcome (notes of the solver, failure reasons).
  std::string message;

  int iterations = 0;            ///< batch iterations performed
  int function_evaluations = 0;  ///< batch evaluations of f (each B columns)
  int jacobian_products = 0;     ///< batch Jacobian/Hessian-vector products
  /// Max over samples of the final |f(z_b) - z_b|_2.
  double absolute_residual = 0.0;
  /// Max over samples of the final |f(z_b) - z_b|_2 / |f(z_b)|_2.
  double relative_residual = 0.0;

  /// Per sample: why it stopped.
  std::vector<TerminationType> sample_status;
  std::vector<double> sample_residual;   ///< per sample: final absolute residual
  std::vector<int> sample_iterations;    ///< per sample: iterations until the sample stopped
  /// Columns of f evaluated for sample b (trial points included). Solvers
  /// evaluate only the samples still iterating when the map SupportsColumnSubsets(),
  /// so total_sample_evaluations() can be far below function_evaluations x B.
  std::vector<int> sample_evaluations;
  /// Energy-guarded acceleration (anderson, broyden), per sample: accelerated
  /// steps accepted.
  std::vector<int> sample_accelerated_steps;
  /// Per sample: trial points rejected by the guard (each followed by a shorter trial).
  std::vector<int> sample_backtracks;
  /// Per sample: safe steps f(z) taken instead of an accelerated one (after a
  /// failed descent gate or when no trial point passed; the history is then
  /// cleared), and the Picard fallback's restarts from the best iterate.
  std::vector<int> sample_fallbacks;

  std::vector<TraceEntry> trace;  ///< one entry per iteration, when Options::record_trace
  double wall_time_seconds = 0.0;  ///< wall-clock time of the solve

  /// True when every sample converged (termination_type is kConverged).
  bool IsConverged() const { return termination_type == TerminationType::kConverged; }
  /// The batch size B (the length of the per-sample vectors).
  int num_samples() const { return static_cast<int>(sample_status.size()); }
  /// The number of samples whose status is kConverged.
  int num_converged() const;
  /// The sum of sample_evaluations: columns of f evaluated in all.
  long long total_sample_evaluations() const;
  /// One line: solver, status, iterations, evaluations, residual, time.
  std::string BriefReport() const;
  /// Several lines, including per-status sample counts.
  std::string FullReport() const;
};

/// Base class of the forward solvers (run-time polymorphism for apps and the
/// registry; use the concrete classes directly in C++).
template <typename Scalar>
class Solver {
 public:
  virtual ~Solver() = default;
  /// The registered name ("picard", "anderson", ...).
  virtual std::string name() const = 0;
  /// Solves z_b = f(z_b) for every column of z in place, from z's values.
  /// \param map the fixed-point map f.
  /// \param z n x B (n = map.dimension()): the initial guesses on entry; on
  ///        return each converged sample's fixed point, each other sample's
  ///        best iterate.
  /// \return the per-sample outcome and the work done.
  /// \throws std::invalid_argument for an empty batch or z of the wrong
  ///         dimension (and where a solver's documentation says so).
  virtual Summary Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const = 0;
};

namespace internal {
/// Throws std::invalid_argument("<solver>: <error>") when !valid.
void ThrowIfInvalid(const std::string& solver, bool valid, const std::string& error);
}  // namespace internal

}  // namespace implicit
