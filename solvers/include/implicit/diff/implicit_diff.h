/// \file
/// Implicit differentiation: exact gradients through an equilibrium.
///
/// A layer's output is the fixed point z* = f(z*; x, theta) of a map. For a loss
/// L(z*), the implicit function theorem gives, per sample b,
///
/// \verbatim
///   (I - J)^T u_b = dL/dz*_b          J = df/dz at z*_b       (adjoint solve)
///   dL/dtheta     = sum_b (df/dtheta)^T u_b                   (map.ParameterVectorJacobianProduct)
///   dL/dx_b       = (df/dx)^T u_b                             (map.InputVectorJacobianProduct)
/// \endverbatim
/// without unrolling the forward solver: the backward pass needs only z*, the
/// map (its parameters and input) and the bounded workspace of one linear solve,
/// whatever the number of forward iterations. The adjoint system is solved
/// matrix-free with vector-Jacobian products, by a pluggable linear solver
/// (linear_solvers.h). For maps built from an energy (energy_maps.h:
/// GradientStepMap with step a, CccpMap, EnergyRootMap) I - J = a hess E is
/// symmetric and MINRES / CG apply; this is the energy-root form
/// hess E u = dL/dz*, dL/dtheta = -u^T d(grad E)/dtheta (up to the factor a).
///
/// \code
///   implicit::PicardSolver<double> solver;
///   implicit::BackwardOptions options;        // IFT, linear solver "auto"
///   implicit::ImplicitLayer<double> layer(map, solver, options);
///   implicit::Matrix<double> z = implicit::Matrix<double>::Zero(n, batch);
///   implicit::Summary forward = layer.Forward(z);          // z <- z*
///   implicit::Matrix<double> dLdz = z - target;            // d(0.5|z* - t|^2)/dz*
///   implicit::BackwardResult<double> g = layer.Backward(dLdz);
///   if (!g.ok()) std::cerr << g.summary.BriefReport() << "\n";   // never zeros
///   else params.values() -= lr * g.parameter_gradient;     // layout: map.parameters()
/// \endcode
///
/// or, without the layer object, ImplicitBackward(map, z_star, dLdz, options).
///
/// Methods (BackwardOptions::method; the options are in backward_options.h):
/// \verbatim
///   kImplicit      the exact IFT gradient (default).
///   kJacobianFree  Jacobian-free backprop (Fung et al.): u = dL/dz*, i.e. I - J
///                  replaced by I. No linear solve; a descent direction when J is
///                  small, not the gradient.
///   kPhantom       phantom gradient (Geng et al.): differentiate k damped steps
///                  z_{j+1} = (1 - l) z_j + l f(z_j) started at z_0 = z* (held
///                  constant) by reverse accumulation. Every step is taken at z*,
///                  so with M = (1 - l) I + l J^T the adjoint is the truncated
///                  Neumann series  u = l sum_{i=0}^{k-1} M^i dL/dz*  (k - 1
///                  vector-Jacobian products). As k -> inf it tends to the IFT
///                  adjoint l (I - M)^{-1} g = (I - J^T)^{-1} g when the spectral
///                  radius of M is < 1.
/// \endverbatim
///
/// Failure is reported, never hidden: when the adjoint solve of a sample does not
/// reach the tolerance (not converged, NaN, singular I - J, breakdown), the
/// summary says so (IsConverged() false, per-sample status) and ok() is false.
/// BackwardOptions::failed_samples (FailedSamplePolicy) says what the gradients
/// are then: kNaN (default) the sample's adjoint and input-gradient columns and
/// the parameter gradient (a sum over the batch) are NaN; kSkip the sample
/// contributes zero (the gradient of the batch without it); kThrow the pass
/// throws ConvergenceError. Gradients are never silently zero.
#pragma once

#include <implicit/core/map.h>
#include <implicit/core/types.h>
#include <implicit/diff/backward_options.h>
#include <implicit/solvers/linear_solvers.h>
#include <implicit/solvers/solver.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace implicit {

/// Thrown by a backward pass under FailedSamplePolicy::kThrow when some sample
/// failed. what() says how many samples failed and their statuses.
class ConvergenceError : public std::runtime_error {
 public:
  /// An error with the message `what` carrying the backward pass's summary.
  ConvergenceError(const std::string& what, LinearSolveSummary summary)
      : std::runtime_error(what), summary(std::move(summary)) {}
  /// The backward summary: per-sample statuses (kFailure for a sample rejected
  /// because its forward solve did not converge), residuals, message.
  LinearSolveSummary summary;
};

/// What a backward pass returns: the adjoint solve's summary, the adjoint and
/// the gradients with respect to the parameters and the input.
template <typename Scalar>
struct BackwardResult {
  /// The adjoint solve (for kJacobianFree / kPhantom: solver "jacobian_free" /
  /// "phantom", kConverged when finite, and `relative_residual` the relative IFT residual
  /// |g - (I - J)^T u| / |g| of the approximate adjoint, i.e. how far from exact).
  LinearSolveSummary summary;
  /// u, n x B: the adjoint the gradients are computed from. A failed sample's
  /// column is NaN (FailedSamplePolicy::kNaN) or zero (kSkip).
  Matrix<Scalar> adjoint;
  /// dL/dtheta in the layout of map.parameters(); empty when num_parameters() == 0.
  Vector<Scalar> parameter_gradient;
  /// dL/dx, input_dimension() x B; empty when input_dimension() == 0.
  Matrix<Scalar> input_gradient;

  /// True when every sample's adjoint is valid (summary converged).
  bool ok() const { return summary.IsConverged(); }
};

/// The backward pass at an equilibrium z_star (n x B) of `map` for the loss
/// gradient grad_z = dL/dz* (n x B). Requires map.HasJacobianProducts() (except
/// for kJacobianFree), and ParameterVectorJacobianProduct /
/// InputVectorJacobianProduct when num_parameters() / input_dimension() > 0.
/// Cost of kImplicit: summary.jacobian_products vector-Jacobian products plus
/// one parameter VJP and one input VJP; memory: the linear solver's workspace
/// (a few n x B matrices; GMRES restart + 1 of them; "direct" n x n x B).
/// \throws std::invalid_argument on bad options or shapes, or when the method
///         needs vector-Jacobian products and the map has none.
/// \throws ConvergenceError when a sample failed under FailedSamplePolicy::kThrow.
template <typename Scalar>
BackwardResult<Scalar> ImplicitBackward(
    const FixedPointMap<Scalar>& map,
    ConstMatrixRef<typename internal::NonDeduced<Scalar>::type> z_star,
    ConstMatrixRef<typename internal::NonDeduced<Scalar>::type> grad_z,
                                        const BackwardOptions& options = BackwardOptions());

/// The same at the end point z_star of a forward solve summarised by `forward`:
/// with options.require_converged_forward, samples whose forward status is not
/// kConverged are failed samples too (status kFailure, handled by
/// options.failed_samples), not differentiated at a point that is not an
/// equilibrium. What ImplicitLayer::Backward does.
/// \throws std::invalid_argument on bad options or shapes, or when the method
///         needs vector-Jacobian products and the map has none.
/// \throws ConvergenceError when a sample failed under FailedSamplePolicy::kThrow.
template <typename Scalar>
BackwardResult<Scalar> ImplicitBackward(
    const FixedPointMap<Scalar>& map,
    ConstMatrixRef<typename internal::NonDeduced<Scalar>::type> z_star,
    ConstMatrixRef<typename internal::NonDeduced<Scalar>::type> grad_z, const Summary& forward,
    const BackwardOptions& options = BackwardOptions());

/// A fixed-point layer: forward by any forward solver, backward by the implicit
/// function theorem. Keeps only z* (and the forward Summary) between the two:
/// no tape. The map and the solver are held by reference and must outlive it.
template <typename Scalar>
class ImplicitLayer {
 public:
  /// A layer solving `map` with `solver` and differentiating with `options`.
  /// \throws std::invalid_argument on invalid options.
  ImplicitLayer(const FixedPointMap<Scalar>& map, const Solver<Scalar>& solver,
                BackwardOptions options = BackwardOptions());

  /// Solves z = f(z) in place from z's values (the initial guess) and remembers z*.
  /// \param z n x B: the initial guesses on entry, z* on return.
  /// \return the forward solver's Summary (also kept as forward_summary()).
  /// \throws std::invalid_argument when the solver does (bad shapes, an empty batch).
  Summary Forward(MatrixRef<Scalar> z);
  /// Gradients for dL/dz* = grad_z (n x B, the batch of the last Forward):
  /// ImplicitBackward(map, z*, grad_z, forward_summary(), options()).
  /// \throws std::logic_error before the first Forward.
  /// \throws ConvergenceError when a sample failed under FailedSamplePolicy::kThrow.
  /// \throws std::invalid_argument when grad_z's shape differs from z*'s.
  BackwardResult<Scalar> Backward(ConstMatrixRef<Scalar> grad_z) const;

  /// True once a Forward has completed (Backward may then be called).
  bool has_equilibrium() const { return has_equilibrium_; }
  /// z* (n x B) of the last Forward; empty before the first.
  const Matrix<Scalar>& equilibrium() const { return z_star_; }
  /// The forward solver's Summary of the last Forward.
  const Summary& forward_summary() const { return forward_summary_; }
  /// The options of the backward pass.
  const BackwardOptions& options() const { return options_; }
  /// Replaces the options of the backward pass.
  /// \throws std::invalid_argument on invalid options (the old ones are kept).
  void set_options(const BackwardOptions& options);
  /// The map the layer solves and differentiates.
  const FixedPointMap<Scalar>& map() const { return map_; }

 private:
  const FixedPointMap<Scalar>& map_;
  const Solver<Scalar>& solver_;
  BackwardOptions options_;
  Matrix<Scalar> z_star_;
  Summary forward_summary_;
  bool has_equilibrium_ = false;
};

// ===================== implementation ======================================

namespace internal {

/// "k of B samples failed (sample 3: max_iterations, ...)", the first few named.
inline std::string FailedSamplesReport(const std::vector<TerminationType>& status) {
  constexpr int kNamed = 8;
  std::string named;
  int failed = 0;
  for (std::size_t b = 0; b < status.size(); ++b) {
    if (status[b] == TerminationType::kConverged) continue;
    if (++failed <= kNamed) {
      named += (failed > 1 ? ", sample " : "sample ") + std::to_string(b) + ": " +
               TerminationTypeToString(status[b]);
    }
  }
  if (failed > kNamed) named += ", ...";
  return std::to_string(failed) + " of " + std::to_string(status.size()) +
         " samples failed (" + named + ")";
}

/// The backward pass; with a `forward` summary (and require_converged_forward)
/// samples whose forward solve did not converge are failed samples too.
template <typename Scalar>
BackwardResult<Scalar> ImplicitBackwardImpl(const FixedPointMap<Scalar>& map,
                                            ConstMatrixRef<Scalar> z_star,
                                            ConstMatrixRef<Scalar> loss_gradient,
                                            const BackwardOptions& options,
                                            const Summary* forward) {
  std::string error;
  if (!options.IsValid(&error)) throw std::invalid_argument("ImplicitBackward: " + error);
  const Index n = map.dimension();
  CheckBatch("ImplicitBackward: z_star", z_star, n);
  CheckShape("ImplicitBackward: grad_z", loss_gradient, n, z_star.cols());
  const Index batch = z_star.cols();

  // Samples whose forward solve did not converge: z is not an equilibrium
  // there, so they fail whatever their adjoint. Their right-hand side is zeroed
  // (u = 0 solves it at once): they cost the adjoint solve no iterations.
  std::vector<char> rejected(batch, 0);
  int num_rejected = 0;
  if (forward != nullptr && options.require_converged_forward) {
    for (Index b = 0; b < batch; ++b) {
      rejected[b] = !(b < static_cast<Index>(forward->sample_status.size()) &&
                      forward->sample_status[b] == TerminationType::kConverged);
      num_rejected += rejected[b];
    }
  }
  Matrix<Scalar> kept_gradient;
  if (num_rejected > 0) {
    kept_gradient = loss_gradient;
    for (Index b = 0; b < batch; ++b) {
      if (rejected[b]) kept_gradient.col(b).setZero();
    }
  }
  ConstMatrixRef<Scalar> grad_z = num_rejected > 0 ? ConstMatrixRef<Scalar>(kept_gradient)
                                                   : loss_gradient;
  const bool needs_vjp = options.method != GradientMethod::kJacobianFree;
  if (needs_vjp && !map.HasJacobianProducts()) {
    throw std::invalid_argument(
        std::string("ImplicitBackward: method ") + GradientMethodToString(options.method) +
        " needs vector-Jacobian products, but the map has none (HasJacobianProducts() is "
        "false)");
  }

  BackwardResult<Scalar> result;
  result.adjoint.setZero(n, batch);
  // (I - J)^T v = v - J^T v, applied to all B columns at once, with the map's
  // linearisation at z* (FixedPointMap::Linearize: made once for every product).
  std::unique_ptr<Linearization<Scalar>> jacobian;
  if (map.HasJacobianProducts()) jacobian = map.Linearize(z_star);
  const LinearOperator<Scalar> apply = [&jacobian](ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) {
    jacobian->VectorJacobianProduct(v, out);
    out = v - out;
  };

  if (options.method == GradientMethod::kImplicit) {
    LinearSolverType type = LinearSolverType::kGmres;
    if (options.linear_solver == "auto") {
      type = map.HasSymmetricJacobian() ? LinearSolverType::kMinres : LinearSolverType::kGmres;
    } else {
      StringToLinearSolverType(options.linear_solver, &type);
    }
    result.summary = SolveLinearSystem<Scalar>(type, apply, grad_z, result.adjoint, options);
    if (LinearSolverRequiresSymmetry(type) && !map.HasSymmetricJacobian()) {
      result.summary.message += std::string("; note: ") + LinearSolverTypeToString(type) +
                                " assumes a symmetric I - J, and this map does not declare one";
    }
  } else {
    const auto start = std::chrono::steady_clock::now();
    int products = 0;
    if (options.method == GradientMethod::kJacobianFree) {
      result.adjoint = grad_z;
    } else {
      // u = l sum_{i<k} M^i g with M = (1 - l) I + l J^T (reverse accumulation
      // through k damped steps taken at z*).
      const Scalar l = static_cast<Scalar>(options.phantom_damping);
      Matrix<Scalar> a = grad_z, ja(n, batch);
      for (int i = 0; i < options.phantom_steps; ++i) {
        result.adjoint += l * a;
        if (i + 1 == options.phantom_steps) break;
        jacobian->VectorJacobianProduct(a, ja);
        ++products;
        a = (Scalar(1) - l) * a + l * ja;
      }
    }
    LinearSolveSummary& s = result.summary;
    s.solver = GradientMethodToString(options.method);
    s.iterations = options.method == GradientMethod::kPhantom ? options.phantom_steps : 0;
    s.sample_status.assign(batch, TerminationType::kConverged);
    s.sample_iterations.assign(batch, s.iterations);
    s.sample_residual.assign(batch, std::numeric_limits<double>::quiet_NaN());
    s.sample_relative_residual = s.sample_residual;
    s.relative_residual = s.absolute_residual = std::numeric_limits<double>::quiet_NaN();
    if (map.HasJacobianProducts()) {
      Matrix<Scalar> r(n, batch);
      apply(result.adjoint, r);
      ++products;
      r = grad_z - r;
      s.relative_residual = s.absolute_residual = 0.0;
      for (Index b = 0; b < batch; ++b) {
        const double rn = static_cast<double>(r.col(b).norm());
        const double gn = static_cast<double>(grad_z.col(b).norm());
        s.sample_residual[b] = rn;
        s.sample_relative_residual[b] = gn > 0 ? rn / gn : rn;
        s.relative_residual = std::max(s.relative_residual, s.sample_relative_residual[b]);
        s.absolute_residual = std::max(s.absolute_residual, rn);
      }
    }
    for (Index b = 0; b < batch; ++b) {
      if (!result.adjoint.col(b).allFinite()) {
        s.sample_status[b] = TerminationType::kNonFinite;
      }
    }
    s.jacobian_products = products;
    s.wall_time_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    s.termination_type = s.num_converged() == static_cast<int>(batch)
                             ? TerminationType::kConverged
                             : TerminationType::kNonFinite;
    s.message = std::string(s.solver) + " approximation (not the exact gradient)";
  }

  LinearSolveSummary& s = result.summary;
  if (num_rejected > 0) {
    for (Index b = 0; b < batch; ++b) {
      if (rejected[b]) s.sample_status[b] = TerminationType::kFailure;
    }
    if (s.termination_type == TerminationType::kConverged) {
      s.termination_type = TerminationType::kFailure;
    }
    s.message = std::to_string(num_rejected) +
                " sample(s) rejected: the forward solve did not converge, z is not an "
                "equilibrium; " + s.message;
  }

  std::vector<char> good(batch, 1);
  int num_good = 0;
  for (Index b = 0; b < batch; ++b) {
    good[b] = s.sample_status[b] == TerminationType::kConverged;
    num_good += good[b];
  }
  const bool all_good = num_good == static_cast<int>(batch);
  const FailedSamplePolicy policy = options.failed_sample_policy();
  if (!all_good && policy == FailedSamplePolicy::kThrow) {
    throw ConvergenceError("ImplicitBackward: " + FailedSamplesReport(s.sample_status) + "; " +
                           s.message,
                           s);
  }

  // Gradients are the VJPs of the adjoint with the failed columns zeroed, so
  // that those add nothing to sums (z* of a failed sample is finite: solvers
  // return the best finite iterate, so 0 * J stays 0). kNaN then marks what
  // they touched as NaN; kSkip leaves the zeros: the gradient without them.
  for (Index b = 0; b < batch; ++b) {
    if (!good[b]) result.adjoint.col(b).setZero();
  }
  const Scalar nan = std::numeric_limits<Scalar>::quiet_NaN();
  const bool skip = policy == FailedSamplePolicy::kSkip;
  if (map.num_parameters() > 0) {
    result.parameter_gradient.setZero(map.num_parameters());
    if (all_good || (skip && num_good > 0)) {
      map.ParameterVectorJacobianProduct(z_star, result.adjoint, result.parameter_gradient);
    } else if (!skip) {
      result.parameter_gradient.setConstant(nan);
    }
  }
  if (map.input_dimension() > 0) {
    result.input_gradient.setZero(map.input_dimension(), batch);
    if (num_good > 0) {
      map.InputVectorJacobianProduct(z_star, result.adjoint, result.input_gradient);
    }
    for (Index b = 0; b < batch; ++b) {
      if (!good[b]) result.input_gradient.col(b).setConstant(skip ? Scalar(0) : nan);
    }
  }
  if (!skip) {
    for (Index b = 0; b < batch; ++b) {
      if (!good[b]) result.adjoint.col(b).setConstant(nan);
    }
  }
  return result;
}

}  // namespace internal

template <typename Scalar>
BackwardResult<Scalar> ImplicitBackward(
    const FixedPointMap<Scalar>& map,
    ConstMatrixRef<typename internal::NonDeduced<Scalar>::type> z_star,
    ConstMatrixRef<typename internal::NonDeduced<Scalar>::type> grad_z,
                                        const BackwardOptions& options) {
  return internal::ImplicitBackwardImpl<Scalar>(map, z_star, grad_z, options, nullptr);
}

template <typename Scalar>
BackwardResult<Scalar> ImplicitBackward(
    const FixedPointMap<Scalar>& map,
    ConstMatrixRef<typename internal::NonDeduced<Scalar>::type> z_star,
    ConstMatrixRef<typename internal::NonDeduced<Scalar>::type> grad_z, const Summary& forward,
    const BackwardOptions& options) {
  return internal::ImplicitBackwardImpl<Scalar>(map, z_star, grad_z, options, &forward);
}

template <typename Scalar>
ImplicitLayer<Scalar>::ImplicitLayer(const FixedPointMap<Scalar>& map,
                                     const Solver<Scalar>& solver, BackwardOptions options)
    : map_(map), solver_(solver) {
  set_options(options);
}

template <typename Scalar>
void ImplicitLayer<Scalar>::set_options(const BackwardOptions& options) {
  std::string error;
  if (!options.IsValid(&error)) throw std::invalid_argument("ImplicitLayer: " + error);
  options_ = options;
}

template <typename Scalar>
Summary ImplicitLayer<Scalar>::Forward(MatrixRef<Scalar> z) {
  has_equilibrium_ = false;
  forward_summary_ = solver_.Solve(map_, z);
  z_star_ = z;
  has_equilibrium_ = true;
  return forward_summary_;
}

template <typename Scalar>
BackwardResult<Scalar> ImplicitLayer<Scalar>::Backward(ConstMatrixRef<Scalar> grad_z) const {
  if (!has_equilibrium_) {
    throw std::logic_error("ImplicitLayer::Backward: call Forward first (no equilibrium stored)");
  }
  return internal::ImplicitBackwardImpl<Scalar>(map_, z_star_, grad_z, options_,
                                                &forward_summary_);
}

/// \cond INTERNAL
/// Compiled once for float and double (solvers/src/diff/implicit_diff.cc; see
/// "Compile once" in types.h). `prefix` is `extern` or empty.
#define IMPLICIT_BACKWARD_INSTANCES(prefix, Scalar)                                        \
  prefix template BackwardResult<Scalar> internal::ImplicitBackwardImpl<Scalar>(           \
      const FixedPointMap<Scalar>&, ConstMatrixRef<Scalar>, ConstMatrixRef<Scalar>,         \
      const BackwardOptions&, const Summary*);                                             \
  prefix template BackwardResult<Scalar> ImplicitBackward<Scalar>(                          \
      const FixedPointMap<Scalar>&, ConstMatrixRef<Scalar>, ConstMatrixRef<Scalar>,         \
      const BackwardOptions&);                                                              \
  prefix template BackwardResult<Scalar> ImplicitBackward<Scalar>(                          \
      const FixedPointMap<Scalar>&, ConstMatrixRef<Scalar>, ConstMatrixRef<Scalar>,         \
      const Summary&, const BackwardOptions&);                                             \
  prefix template class ImplicitLayer<Scalar>
#ifndef IMPLICIT_NO_EXTERN_TEMPLATES
IMPLICIT_BACKWARD_INSTANCES(extern, float);
IMPLICIT_BACKWARD_INSTANCES(extern, double);
#endif
/// \endcond

}  // namespace implicit
