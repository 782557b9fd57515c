/// \file
/// PETSc's SNES as a solver backend (component implicit::petsc): PETSc's
/// nonlinear solvers on libimplicit's maps, one sample at a time on
/// PETSC_COMM_SELF, judged by libimplicit's per-sample rule.
///
/// \code
///   #include <implicit/solvers/petsc.h>
///   implicit::petsc::RegisterSolvers();  // petsc-anderson, petsc-ngmres, petsc-qn, petsc-newtonls, petsc-ncg
///   auto solver = implicit::MakeSolver<double>("petsc-qn", {{"memory", "10"}});
///   implicit::Summary summary = solver->Solve(map, z);
/// \endcode
///
/// Link implicit::petsc (find_package(implicit COMPONENTS petsc)). The target
/// exists in every build; without PETSc (Debian: petsc-dev, which
/// libsundials-dev brings) Available() says why, RegisterSolvers() registers
/// nothing and Solve() throws std::runtime_error. PETSc is initialised on the
/// first solve (PetscInitializeNoArguments with -no_signal_handler, so the
/// program's signal handling stays its own), unless the program initialised
/// it, and then finalised at exit (std::atexit). PETSc's headers need MPI's
/// (Debian's PETSc is built with OpenMPI): implicit_petsc links MPI too.
///
/// Every method solves F(u) = u - f(u) = 0 for sample b with the SNES type named:
///  * petsc-anderson (SNESANDERSON: memory, damping), petsc-ngmres
///    (SNESNGMRES: memory), petsc-qn (SNESQN: memory, qn_type
///    lbfgs|broyden|badbroyden), petsc-ncg (SNESNCG: ncg_type fr|prp|hs|dy|cd;
///    a method for gradient systems, meant for maps built from an energy);
///  * petsc-newtonls (SNESNEWTONLS with linesearch bt|basic|l2|cp, GMRES with
///    krylov_restart): the Jacobian is a MatShell of the map's Jacobian-vector
///    products (J_F v = v - J_f v), or PETSc's finite-difference operator
///    (MATMFFD, as MatCreateSNESMF makes it) for maps without them (or
///    jacobian_products = false).
/// The settings PETSc takes only from an options database (-snes_anderson_m,
/// -snes_anderson_beta, -snes_ngmres_m, -snes_qn_m) go through a private
/// PetscOptions object per solve: PETSc's global database (PETSC_OPTIONS,
/// -snes_*, -ksp_*, -snes_linesearch_*, -mat_mffd_*) neither receives them nor
/// changes these solvers. The line searches are PETSc's defaults for each type
/// (qn: lbfgs cp, broyden basic, badbroyden l2; ncg: cp).
/// Stopping: SNES' absolute tolerance on |F(u)|_2 is absolute_tolerance (the
/// same norm as libimplicit's rule), relative and step tolerances off, at most
/// max_iterations iterations and (when set) max_evaluations function
/// evaluations; SNES' divergence tolerance off (the driver's
/// divergence_threshold rule applies). Every sample SNES reports converged is
/// checked by libimplicit's rule at the returned point (a failed check is
/// kFailure: with a float map PETSc's double iterate, rounded, can miss a
/// tolerance near float resolution).
/// PETSc is not thread-safe: solves run one at a time (a process-wide lock).
/// During a solve PETSc's error messages are recorded, not printed: a failed
/// set-up call throws std::runtime_error with PETSc's message, an error inside
/// SNESSolve is that sample's kFailure, and an exception thrown by the map
/// reaches the caller unchanged.
/// The driver's contract (evaluation counting, divergence and non-finite
/// values, the best iterate, the callback once per sample; record_trace
/// refused) is internal/per_sample_backend.h's.
#pragma once

#include <implicit/solvers/solver.h>

#include <string>

namespace implicit {
namespace petsc {

/// Whether this build has PETSc; when not, *why (if given) says why.
bool Available(std::string* why = nullptr);
/// PETSc's version ("3.18.5"); "" without PETSc.
std::string Version();
/// Adds the five petsc-* solvers to the solver registry (registry.h) with
/// library "PETSc \<version\>". Idempotent and thread-safe; does nothing without PETSc.
void RegisterSolvers();

/// Which SNES type PetscSolver runs (see petsc.h): kAnderson
/// ("petsc-anderson", SNESANDERSON), kNgmres ("petsc-ngmres", SNESNGMRES),
/// kQuasiNewton ("petsc-qn", SNESQN), kNewtonLineSearch ("petsc-newtonls",
/// SNESNEWTONLS with GMRES) or kNonlinearCg ("petsc-ncg", SNESNCG).
enum class Method { kAnderson, kNgmres, kQuasiNewton, kNewtonLineSearch, kNonlinearCg };
/// The registered solver name of a method: "petsc-anderson", "petsc-ngmres",
/// "petsc-qn", "petsc-newtonls", "petsc-ncg" ("petsc-?" for a value outside the enum).
inline const char* MethodName(Method method) {
  switch (method) {
    case Method::kAnderson: return "petsc-anderson";
    case Method::kNgmres: return "petsc-ngmres";
    case Method::kQuasiNewton: return "petsc-qn";
    case Method::kNewtonLineSearch: return "petsc-newtonls";
    case Method::kNonlinearCg: return "petsc-ncg";
  }
  return "petsc-?";
}

/// PETSc's SNES nonlinear solvers on F(u) = u - f(u), one sample at a time on
/// PETSC_COMM_SELF, judged by libimplicit's per-sample rule (see petsc.h).
template <typename Scalar>
class PetscSolver : public Solver<Scalar> {
 public:
  /// The options of PetscSolver: the shared SolverOptions (record_trace is
  /// refused) and the SNES settings; each field names the methods it applies to.
  struct Options : SolverOptions {
    /// Which SNES type runs (default kAnderson); it also sets name().
    Method method = Method::kAnderson;
    /// anderson, ngmres, qn: history length, in [1, kMaxSolverMemory].
    int memory = 5;
    /// anderson: mixing parameter beta, in (0, 1].
    double damping = 1.0;
    /// qn: "lbfgs", "broyden" or "badbroyden".
    std::string qn_type = "lbfgs";
    /// ncg: "fr", "prp", "hs", "dy" or "cd".
    std::string ncg_type = "prp";
    /// newtonls: "bt", "basic", "l2" or "cp".
    std::string linesearch = "bt";
    /// newtonls: GMRES restart length, in [1, 1000].
    int krylov_restart = 30;
    /// newtonls: use the map's Jacobian-vector products when it has them
    /// (default); false: PETSc's finite-difference operator (MATMFFD).
    bool jacobian_products = true;

    /// Checks every field (the shared ones first; record_trace must be off);
    /// on failure names the field in *error.
    /// \return true when every field is in range.
    bool IsValid(std::string* error) const {
      if (!SolverOptions::IsValid(error)) return false;
      const auto fail = [error](const std::string& message) {
        if (error) *error = message;
        return false;
      };
      if (record_trace) return fail("record_trace is not available: PETSc runs each sample to its end, there are no batch iterations to trace");
      if (memory < 1 || memory > kMaxSolverMemory)
        return fail("memory must be in [1, " + std::to_string(kMaxSolverMemory) + "], got " + std::to_string(memory));
      if (!(damping > 0.0 && damping <= 1.0)) return fail("damping must be in (0, 1], got " + std::to_string(damping));
      if (qn_type != "lbfgs" && qn_type != "broyden" && qn_type != "badbroyden")
        return fail("qn_type must be lbfgs, broyden or badbroyden, got \"" + qn_type + "\"");
      if (ncg_type != "fr" && ncg_type != "prp" && ncg_type != "hs" && ncg_type != "dy" && ncg_type != "cd")
        return fail("ncg_type must be fr, prp, hs, dy or cd, got \"" + ncg_type + "\"");
      if (linesearch != "bt" && linesearch != "basic" && linesearch != "l2" && linesearch != "cp")
        return fail("linesearch must be bt, basic, l2 or cp, got \"" + linesearch + "\"");
      if (krylov_restart < 1 || krylov_restart > 1000)
        return fail("krylov_restart must be in [1, 1000], got " + std::to_string(krylov_restart));
      return true;
    }
  };

  /// A solver with the given options.
  /// \throws std::invalid_argument when options.IsValid() fails (the message
  ///         is the solver's name, "invalid options" and the field's error).
  explicit PetscSolver(const Options& options = Options()) : options_(options) {
    std::string error;
    internal::ThrowIfInvalid(name(), options_.IsValid(&error), error);
  }
  /// The options the solver was built with.
  const Options& options() const { return options_; }
  std::string name() const override { return MethodName(options_.method); }

  /// Solves z_b = f(z_b) for every column of z in place, one sample after
  /// the other with SNES, from z's values.
  /// \param map the fixed-point map f.
  /// \param z n x B: the initial guesses on entry; on return each converged
  ///        sample's fixed point, each other sample's best iterate.
  /// \return the per-sample outcome and the work done.
  /// \throws std::runtime_error when the build has no PETSc, PETSc cannot be
  ///         initialised or a set-up call fails (with PETSc's message);
  ///         std::invalid_argument for an empty batch or z of the wrong
  ///         dimension. An exception thrown by the map reaches the caller
  ///         unchanged.
  Summary Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const override;

 private:
  Options options_;
};

/// \cond INTERNAL
extern template class PetscSolver<float>;
extern template class PetscSolver<double>;
/// \endcond

}  // namespace petsc
}  // namespace implicit
