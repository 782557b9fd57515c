/// \file
/// The options of the backward pass (implicit_diff.h): which gradient to
/// compute (GradientMethod: the exact implicit-function-theorem gradient, or
/// the Jacobian-free / phantom approximations), the adjoint linear solver and
/// its tolerances, and what to do with samples whose solves fail
/// (FailedSamplePolicy). IsValid() names a bad field.
///
/// \code
///   implicit::BackwardOptions options;           // IFT, linear solver "auto"
///   options.linear_solver = "gmres";
///   options.tolerance = 1e-6;
///   options.failed_samples = implicit::FailedSamplePolicy::kSkip;  // train on the others
///   std::string error;
///   if (!options.IsValid(&error)) std::cerr << error << "\n";
/// \endcode
#pragma once

#include <implicit/solvers/linear_solver_options.h>

#include <string>

namespace implicit {

/// Which gradient the backward pass computes (implicit_diff.h describes each).
enum class GradientMethod {
  kImplicit,      ///< exact implicit-function-theorem gradient (adjoint linear solve)
  kJacobianFree,  ///< JFB: u = dL/dz* (no solve; approximate)
  kPhantom,       ///< k damped unrolled steps at z* (approximate; exact as k -> inf)
};

/// The name of a gradient method: "implicit", "jacobian_free", "phantom"
/// ("unknown" for a value outside the enum).
inline const char* GradientMethodToString(GradientMethod method) {
  switch (method) {
    case GradientMethod::kImplicit: return "implicit";
    case GradientMethod::kJacobianFree: return "jacobian_free";
    case GradientMethod::kPhantom: return "phantom";
  }
  return "unknown";
}
/// Parses a name as printed by GradientMethodToString into *method (when not
/// nullptr); false when unknown.
inline bool StringToGradientMethod(const std::string& name, GradientMethod* method) {
  for (GradientMethod m : {GradientMethod::kImplicit, GradientMethod::kJacobianFree,
                           GradientMethod::kPhantom}) {
    if (name == GradientMethodToString(m)) {
      if (method != nullptr) *method = m;
      return true;
    }
  }
  return false;
}

/// What a backward pass does with a failed sample: one whose adjoint solve did
/// not converge (or is not finite), or, when the pass knows the forward solve
/// (ImplicitLayer::Backward, ImplicitBackward with a forward Summary) and
/// require_converged_forward, one whose forward solve did not converge. In every
/// case the summary reports the failure and ok() is false.
enum class FailedSamplePolicy {
  kNaN,    ///< (default) its adjoint and input-gradient columns are NaN, and so is
           ///< the parameter gradient (a sum over the batch): never silently wrong
  kSkip,   ///< it contributes nothing: its adjoint and input-gradient columns are
           ///< zero and the parameter gradient sums the other samples (zero when
           ///< none is left), i.e. the gradient of the batch without it
  kThrow,  ///< the backward pass throws ConvergenceError (implicit_diff.h) carrying
           ///< the summary, and computes no gradient
};

/// The name of a failed-sample policy: "nan", "skip", "throw" ("unknown" for
/// a value outside the enum).
inline const char* FailedSamplePolicyToString(FailedSamplePolicy policy) {
  switch (policy) {
    case FailedSamplePolicy::kNaN: return "nan";
    case FailedSamplePolicy::kSkip: return "skip";
    case FailedSamplePolicy::kThrow: return "throw";
  }
  return "unknown";
}
/// Parses a name as printed by FailedSamplePolicyToString into *policy (when
/// not nullptr); false when unknown.
inline bool StringToFailedSamplePolicy(const std::string& name, FailedSamplePolicy* policy) {
  for (FailedSamplePolicy p :
       {FailedSamplePolicy::kNaN, FailedSamplePolicy::kSkip, FailedSamplePolicy::kThrow}) {
    if (name == FailedSamplePolicyToString(p)) {
      if (policy != nullptr) *policy = p;
      return true;
    }
  }
  return false;
}

/// Options of the backward pass. The LinearSolverOptions fields (tolerance,
/// absolute_tolerance, max_iterations, restart, memory, regularization,
/// divergence_threshold; see linear_solvers.h) configure the adjoint solve of
/// kImplicit: sample b converged when |g_b - (I - J)^T u_b| <= tolerance |g_b| +
/// absolute_tolerance. Defaults: tolerance 1e-10 (use ~1e-5 with float).
struct BackwardOptions : LinearSolverOptions {
  /// Which gradient to compute (see implicit_diff.h); default kImplicit, the exact one.
  GradientMethod method = GradientMethod::kImplicit;
  /// Adjoint linear solver for kImplicit, by name: "fixed_point", "anderson",
  /// "broyden", "cg", "minres", "gmres", "direct", or "auto" (the default) =
  /// "minres" when map.HasSymmetricJacobian() (MINRES, unlike CG, also handles
  /// an indefinite Hessian at a saddle) and "gmres" otherwise.
  std::string linear_solver = "auto";
  /// kPhantom: number k >= 1 of unrolled steps.
  int phantom_steps = 5;
  /// kPhantom: the damping l in (0, 1] of the unrolled steps.
  double phantom_damping = 0.5;
  /// What to do with failed samples (see FailedSamplePolicy; default kNaN);
  /// use failed_sample_policy() to read it.
  FailedSamplePolicy failed_samples = FailedSamplePolicy::kNaN;
  /// Deprecated, kept for existing callers: true is failed_samples = kSkip
  /// (default false: failed_samples decides).
  bool drop_failed_samples = false;
  /// When the forward solve is known (ImplicitLayer::Backward, ImplicitBackward
  /// with a forward Summary): samples whose forward solve did not converge are
  /// failed samples (status kFailure) instead of being differentiated at a point
  /// that is not an equilibrium (the default). false: differentiate at the last iterate.
  bool require_converged_forward = true;

  /// failed_samples, with the deprecated drop_failed_samples folded in.
  FailedSamplePolicy failed_sample_policy() const {
    return drop_failed_samples ? FailedSamplePolicy::kSkip : failed_samples;
  }

  /// Checks every field; on failure names it in *error.
  /// \return true when every field is in range.
  bool IsValid(std::string* error) const {
    auto fail = [error](const std::string& m) {
      if (error != nullptr) *error = m;
      return false;
    };
    if (!LinearSolverOptions::IsValid(error)) return false;
    if (method != GradientMethod::kImplicit && method != GradientMethod::kJacobianFree &&
        method != GradientMethod::kPhantom) {
      return fail("method is not a GradientMethod");
    }
    if (linear_solver != "auto" && !StringToLinearSolverType(linear_solver, nullptr)) {
      return fail("linear_solver '" + linear_solver +
                  "' is unknown (auto, fixed_point, anderson, broyden, cg, minres, gmres, "
                  "direct)");
    }
    if (failed_samples != FailedSamplePolicy::kNaN && failed_samples != FailedSamplePolicy::kSkip &&
        failed_samples != FailedSamplePolicy::kThrow) {
      return fail("failed_samples is not a FailedSamplePolicy");
    }
    if (drop_failed_samples && failed_samples == FailedSamplePolicy::kThrow) {
      return fail("drop_failed_samples (deprecated: failed_samples = kSkip) contradicts "
                  "failed_samples = kThrow; set failed_samples only");
    }
    if (phantom_steps < 1) {
      return fail("phantom_steps must be >= 1, got " + std::to_string(phantom_steps));
    }
    if (!(phantom_damping > 0.0 && phantom_damping <= 1.0)) {
      return fail("phantom_damping must be in (0, 1], got " + std::to_string(phantom_damping));
    }
    return true;
  }
};

}  // namespace implicit
