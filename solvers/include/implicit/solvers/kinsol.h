/// \file
/// SUNDIALS KINSOL as a solver backend (component implicit::kinsol): KINSOL's
/// fixed-point, Anderson and Newton-GMRES iterations on libimplicit's maps,
/// one sample at a time, judged by libimplicit's per-sample rule.
///
/// \code
///   #include <implicit/solvers/kinsol.h>
///   implicit::kinsol::RegisterSolvers();  // "kinsol-picard", "kinsol-anderson", "kinsol-newton-gmres"
///   auto solver = implicit::MakeSolver<double>("kinsol-anderson", {{"memory", "5"}});
///   implicit::Summary summary = solver->Solve(map, z);
/// \endcode
///
/// or directly:
///
/// \code
///   implicit::kinsol::KinsolSolver<double>::Options options;
///   options.method = implicit::kinsol::Method::kNewtonGmres;
///   implicit::Summary s = implicit::kinsol::KinsolSolver<double>(options).Solve(map, z);
/// \endcode
///
/// Link implicit::kinsol (find_package(implicit COMPONENTS kinsol)). The target
/// exists in every build; without SUNDIALS (Debian: libsundials-dev) Available()
/// says why, RegisterSolvers() registers nothing and Solve() throws
/// std::runtime_error.
///
/// The methods, each KINSOL's own iteration on sample b's n unknowns:
///  * kinsol-picard: KINSOL's fixed-point strategy (KIN_FP) without
///    acceleration, u <- (1 - damping) u + damping f(u). (KINSOL's KIN_PICARD
///    strategy is a different method: it needs a linear operator L.)
///  * kinsol-anderson: KIN_FP with Anderson acceleration of depth `memory`
///    (KINSetMAA), damping (KINSetDampingAA), `delay` plain iterations first.
///  * kinsol-newton-gmres: inexact Newton on F(u) = u - f(u) (KIN_LINESEARCH or
///    KIN_NONE), GMRES (SUNLinSol_SPGMR) on J_F d = -F with the map's
///    Jacobian-vector products (J_F v = v - J_f v), or KINSOL's difference
///    quotients for maps without them (or jacobian_products = false).
/// Stopping: KINSOL stops when |F(u)|_inf <= absolute_tolerance / sqrt(n), which
/// implies |f(u) - u|_2 <= absolute_tolerance; every sample it reports solved
/// is then checked by libimplicit's rule at the returned point (a KINSOL
/// "converged" that fails the check is reported kFailure). KIN_STEP_LT_STPTOL
/// (a step below KINSOL's step tolerance) is not convergence: kStalled. The
/// driver's contract (evaluation counting, divergence and non-finite values,
/// the best iterate, the callback once per sample; record_trace refused) is
/// internal/per_sample_backend.h's.
#pragma once

#include <implicit/solvers/solver.h>

#include <string>

namespace implicit {
namespace kinsol {

/// Whether this build has KINSOL; when not, *why (if given) says why.
bool Available(std::string* why = nullptr);
/// SUNDIALS' version ("6.4.1"); "" without KINSOL.
std::string Version();
/// Adds kinsol-picard, kinsol-anderson and kinsol-newton-gmres to the solver
/// registry (registry.h) with library "SUNDIALS KINSOL \<version\>". Idempotent
/// and thread-safe; does nothing without KINSOL.
void RegisterSolvers();

/// Which KINSOL iteration KinsolSolver runs (see kinsol.h): kPicard
/// ("kinsol-picard", KIN_FP without acceleration), kAnderson
/// ("kinsol-anderson", KIN_FP with Anderson acceleration) or kNewtonGmres
/// ("kinsol-newton-gmres", inexact Newton with GMRES).
enum class Method { kPicard, kAnderson, kNewtonGmres };
/// The registered solver name of a method: "kinsol-picard", "kinsol-anderson",
/// "kinsol-newton-gmres" ("kinsol-?" for a value outside the enum).
inline const char* MethodName(Method method) {
  switch (method) {
    case Method::kPicard: return "kinsol-picard";
    case Method::kAnderson: return "kinsol-anderson";
    case Method::kNewtonGmres: return "kinsol-newton-gmres";
  }
  return "kinsol-?";
}

/// SUNDIALS KINSOL's fixed-point, Anderson or Newton-GMRES iteration, one
/// sample at a time, judged by libimplicit's per-sample rule (see kinsol.h).
template <typename Scalar>
class KinsolSolver : public Solver<Scalar> {
 public:
  /// The options of KinsolSolver: the shared SolverOptions (record_trace is
  /// refused) and KINSOL's settings; each field names the methods it applies to.
  struct Options : SolverOptions {
    /// Which KINSOL iteration runs (default kAnderson); it also sets name().
    Method method = Method::kAnderson;
    /// picard, anderson: weight of f(u) in the update (KINSetDamping,
    /// KINSetDampingAA; default 1, undamped). In (0, 1].
    double damping = 1.0;
    /// anderson: the acceleration's depth m (KINSetMAA), in [1, kMaxSolverMemory].
    int memory = 5;
    /// anderson: plain fixed-point iterations before the acceleration starts
    /// (KINSetDelayAA; default 0, none). >= 0.
    int delay = 0;
    /// anderson: the QR update, "mgs", "cgs2" or "dcgs2" (KINSetOrthAA).
    /// KINSOL's fourth, "icwy", is refused: Debian's SUNDIALS 6 writes
    /// through a null pointer in it on serial vectors (found by the fuzzer).
    std::string orthogonalization = "mgs";
    /// newton-gmres: "linesearch" (KIN_LINESEARCH) or "none" (KIN_NONE: full steps).
    std::string globalization = "linesearch";
    /// newton-gmres: GMRES' Krylov dimension, in [0, 1000] (0: KINSOL's default, 5).
    int krylov_dimension = 0;
    /// newton-gmres: GMRES' restarts (default 0: none). >= 0.
    int max_restarts = 0;
    /// newton-gmres: Eisenstat-Walker forcing term "choice1", "choice2" or
    /// "constant" (KINSetEtaForm).
    std::string forcing_term = "choice1";
    /// newton-gmres: the forcing term eta when forcing_term is "constant". In (0, 1).
    double forcing_constant = 0.1;
    /// newton-gmres: use the map's Jacobian-vector products when it has them
    /// (default); false: KINSOL's difference quotients.
    bool jacobian_products = true;
    /// newton-gmres: the longest Newton step, |d|_2 (KINSetMaxNewtonStep); 0:
    /// 1000 max(|u0|_2, sqrt(n)). (KINSOL's own default, 1000 |u0|_2 but at
    /// least 1, caps every step at length 1 from a zero start and ends the
    /// solve after five such steps: KIN_MXNEWT_5X_EXCEEDED.) >= 0.
    double max_newton_step = 0.0;

    /// Checks every field (the shared ones first; record_trace must be off);
    /// on failure names the field in *error.
    /// \return true when every field is in range.
    bool IsValid(std::string* error) const {
      if (!SolverOptions::IsValid(error)) return false;
      const auto fail = [error](const std::string& message) {
        if (error) *error = message;
        return false;
      };
      if (record_trace) return fail("record_trace is not available: KINSOL runs each sample to its end, there are no batch iterations to trace");
      if (!(damping > 0.0 && damping <= 1.0)) return fail("damping must be in (0, 1], got " + std::to_string(damping));
      if (memory < 1 || memory > kMaxSolverMemory)
        return fail("memory must be in [1, " + std::to_string(kMaxSolverMemory) + "], got " + std::to_string(memory));
      if (delay < 0) return fail("delay must be >= 0, got " + std::to_string(delay));
      if (orthogonalization == "icwy")
        return fail("orthogonalization icwy is not offered: SUNDIALS 6's ICWY crashes on serial vectors; use mgs, "
                    "cgs2 or dcgs2");
      if (orthogonalization != "mgs" && orthogonalization != "cgs2" && orthogonalization != "dcgs2")
        return fail("orthogonalization must be mgs, cgs2 or dcgs2, got \"" + orthogonalization + "\"");
      if (globalization != "linesearch" && globalization != "none")
        return fail("globalization must be linesearch or none, got \"" + globalization + "\"");
      if (krylov_dimension < 0 || krylov_dimension > 1000)
        return fail("krylov_dimension must be in [0, 1000], got " + std::to_string(krylov_dimension));
      if (max_restarts < 0) return fail("max_restarts must be >= 0, got " + std::to_string(max_restarts));
      if (forcing_term != "choice1" && forcing_term != "choice2" && forcing_term != "constant")
        return fail("forcing_term must be choice1, choice2 or constant, got \"" + forcing_term + "\"");
      if (!(max_newton_step >= 0.0)) return fail("max_newton_step must be >= 0, got " + std::to_string(max_newton_step));
      if (!(forcing_constant > 0.0 && forcing_constant < 1.0))
        return fail("forcing_constant must be in (0, 1), got " + std::to_string(forcing_constant));
      return true;
    }
  };

  /// A solver with the given options.
  /// \throws std::invalid_argument when options.IsValid() fails (the message
  ///         is the solver's name, "invalid options" and the field's error).
  explicit KinsolSolver(const Options& options = Options()) : options_(options) {
    std::string error;
    internal::ThrowIfInvalid(name(), options_.IsValid(&error), error);
  }
  /// The options the solver was built with.
  const Options& options() const { return options_; }
  std::string name() const override { return MethodName(options_.method); }

  /// Solves z_b = f(z_b) for every column of z in place, one sample after
  /// the other with KINSOL, from z's values.
  /// \param map the fixed-point map f.
  /// \param z n x B: the initial guesses on entry; on return each converged
  ///        sample's fixed point, each other sample's best iterate.
  /// \return the per-sample outcome and the work done.
  /// \throws std::runtime_error when the build has no KINSOL or a KINSOL
  ///         set-up call fails; std::invalid_argument for an empty batch or z
  ///         of the wrong dimension. An exception thrown by the map reaches
  ///         the caller unchanged.
  Summary Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const override;

 private:
  Options options_;
};

/// \cond INTERNAL
extern template class KinsolSolver<float>;
extern template class KinsolSolver<double>;
/// \endcond

}  // namespace kinsol
}  // namespace implicit
