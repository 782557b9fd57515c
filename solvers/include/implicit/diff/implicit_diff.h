// Implicit differentiation: exact gradients through an equilibrium.
//
// A layer's output is the fixed point z* = f(z*; x, theta) of a map. For a loss
// L(z*), the implicit function theorem gives, per sample b,
//
//   (I - J)^T u_b = dL/dz*_b          J = df/dz at z*_b       (adjoint solve)
//   dL/dtheta     = sum_b (df/dtheta)^T u_b                   (map.ParameterVectorJacobianProduct)
//   dL/dx_b       = (df/dx)^T u_b                             (map.InputVectorJacobianProduct)
//
// without unrolling the forward solver: the backward pass needs only z*, the
// map (its parameters and input) and the bounded workspace of one linear solve,
// whatever the number of forward iterations. The adjoint system is solved
// matrix-free with vector-Jacobian products, by a pluggable linear solver
// (linear_solvers.h). For maps built from an energy (energy_maps.h:
// GradientStepMap with step a, CccpMap, EnergyRootMap) I - J = a hess E is
// symmetric and MINRES / CG apply; this is the energy-root form
// hess E u = dL/dz*, dL/dtheta = -u^T d(grad E)/dtheta (up to the factor a).
//
//   implicit::PicardSolver<double> solver;
//   implicit::BackwardOptions options;        // IFT, linear solver "auto"
//   implicit::ImplicitLayer<double> layer(map, solver, options);
//   implicit::Matrix<double> z = implicit::Matrix<double>::Zero(n, batch);
//   implicit::Summary forward = layer.Forward(z);          // z <- z*
//   implicit::Matrix<double> dLdz = z - target;            // d(0.5|z* - t|^2)/dz*
//   implicit::BackwardResult<double> g = layer.Backward(dLdz);
//   if (!g.ok()) std::cerr << g.summary.BriefReport() << "\n";   // never zeros
//   else params.values() -= lr * g.parameter_gradient;     // layout: map.parameters()
//
// or, without the layer object, ImplicitBackward(map, z_star, dLdz, options).
//
// Methods (BackwardOptions::method; the options are in backward_options.h):
//   kImplicit      the exact IFT gradient (default).
//   kJacobianFree  Jacobian-free backprop (Fung et al.): u = dL/dz*, i.e. I - J
//                  replaced by I. No linear solve; a descent direction when J is
//                  small, not the gradient.
//   kPhantom       phantom gradient (Geng et al.): differentiate k damped steps
//                  z_{j+1} = (1 - l) z_j + l f(z_j) started at z_0 = z* (held
//                  constant) by reverse accumulation. Every step is taken at z*,
//                  so with M = (1 - l) I + l J^T the adjoint is the truncated
//                  Neumann series  u = l sum_{i=0}^{k-1} M^i dL/dz*  (k - 1
//                  vector-Jacobian products). As k -> inf it tends to the IFT
//                  adjoint l (I - M)^{-1} g = (I - J^T)^{-1} g when the spectral
//                  radius of M is < 1.
//
// Failure is reported, never hidden: when the adjoint solve of a sample does not
// reach the tolerance (not converged, NaN, singular I - J, breakdown), the
// summary says so (IsConverged() false, per-sample status), ok() is false, the
// sample's column of input_gradient is NaN, and parameter_gradient (a sum over
// the batch) is NaN unless BackwardOptions::drop_failed_samples, in which case it
// sums the converged samples only. Gradients are never silently zero.
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

template <typename Scalar>
struct BackwardResult {
  // The adjoint solve (for kJacobianFree / kPhantom: solver "jacobian_free" /
  // "phantom", kConverged when finite, and `relative_residual` the relative IFT residual
  // |g - (I - J)^T u| / |g| of the approximate adjoint, i.e. how far from exact).
  LinearSolveSummary summary;
  // u, n x B. For a failed sample: the solver's last iterate, a diagnostic only.
  Matrix<Scalar> adjoint;
  // dL/dtheta in the layout of map.parameters(); empty when num_parameters() == 0.
  Vector<Scalar> parameter_gradient;
  // dL/dx, input_dimension() x B; empty when input_dimension() == 0.
  Matrix<Scalar> input_gradient;

  // True when every sample's adjoint is valid (summary converged).
  bool ok() const { return summary.IsConverged(); }
};

// The backward pass at an equilibrium z_star (n x B) of `map` for the loss
// gradient grad_z = dL/dz* (n x B). Requires map.HasJacobianProducts() (except
// for kJacobianFree), and ParameterVectorJacobianProduct /
// InputVectorJacobianProduct when num_parameters() / input_dimension() > 0.
// Throws std::invalid_argument on bad options or shapes. Cost of kImplicit:
// summary.jacobian_products vector-Jacobian products plus one parameter VJP and one
// input VJP; memory: the linear solver's workspace (a few n x B matrices; GMRES
// restart + 1 of them; "direct" n x n x B).
template <typename Scalar>
BackwardResult<Scalar> ImplicitBackward(
    const FixedPointMap<Scalar>& map,
    ConstMatrixRef<typename internal::NonDeduced<Scalar>::type> z_star,
    ConstMatrixRef<typename internal::NonDeduced<Scalar>::type> grad_z,
                                        const BackwardOptions& options = BackwardOptions());

// A fixed-point layer: forward by any forward solver, backward by the implicit
// function theorem. Keeps only z* (and the forward Summary) between the two:
// no tape. The map and the solver are held by reference and must outlive it.
template <typename Scalar>
class ImplicitLayer {
 public:
  // Throws std::invalid_argument on invalid options.
  ImplicitLayer(const FixedPointMap<Scalar>& map, const Solver<Scalar>& solver,
                BackwardOptions options = BackwardOptions());

  // Solves z = f(z) in place from z's values (the initial guess) and remembers z*.
  Summary Forward(MatrixRef<Scalar> z);
  // Gradients for dL/dz* = grad_z (n x B, the batch of the last Forward). Throws
  // std::logic_error before the first Forward.
  BackwardResult<Scalar> Backward(ConstMatrixRef<Scalar> grad_z) const;

  bool has_equilibrium() const { return has_equilibrium_; }
  const Matrix<Scalar>& equilibrium() const { return z_star_; }
  const Summary& forward_summary() const { return forward_summary_; }
  const BackwardOptions& options() const { return options_; }
  void set_options(const BackwardOptions& options);  // validated
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

// The backward pass; samples with sample_ok[b] == 0 (when given) are reported
// as kFailure with `reject_message` and get NaN gradients.
template <typename Scalar>
BackwardResult<Scalar> ImplicitBackwardImpl(const FixedPointMap<Scalar>& map,
                                            ConstMatrixRef<Scalar> z_star,
                                            ConstMatrixRef<Scalar> grad_z,
                                            const BackwardOptions& options,
                                            const std::vector<char>* sample_ok,
                                            const std::string& reject_message) {
  std::string error;
  if (!options.IsValid(&error)) throw std::invalid_argument("ImplicitBackward: " + error);
  const Index n = map.dimension();
  CheckBatch("ImplicitBackward: z_star", z_star, n);
  CheckShape("ImplicitBackward: grad_z", grad_z, n, z_star.cols());
  const Index batch = z_star.cols();
  const bool needs_vjp = options.method != GradientMethod::kJacobianFree;
  if (needs_vjp && !map.HasJacobianProducts()) {
    throw std::invalid_argument(
        std::string("ImplicitBackward: method ") + GradientMethodToString(options.method) +
        " needs vector-Jacobian products, but the map has none (HasJacobianProducts() is "
        "false)");
  }

  BackwardResult<Scalar> result;
  result.adjoint.setZero(n, batch);
  // (I - J)^T v = v - J^T v, applied to all B columns at once.
  const LinearOperator<Scalar> apply = [&map, z_star](ConstMatrixRef<Scalar> v,
                                                       MatrixRef<Scalar> out) {
    map.VectorJacobianProduct(z_star, v, out);
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
        map.VectorJacobianProduct(z_star, a, ja);
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

  // Samples rejected by the caller (e.g. unconverged forward).
  LinearSolveSummary& s = result.summary;
  if (sample_ok != nullptr) {
    int rejected = 0;
    for (Index b = 0; b < batch; ++b) {
      if (!(*sample_ok)[b]) {
        s.sample_status[b] = TerminationType::kFailure;
        ++rejected;
      }
    }
    if (rejected > 0) {
      if (s.termination_type == TerminationType::kConverged) {
        s.termination_type = TerminationType::kFailure;
      }
      s.message = std::to_string(rejected) + " sample(s) " + reject_message + "; " + s.message;
    }
  }

  // Gradients from the adjoint; failed samples give NaN, never zero.
  const Scalar nan = std::numeric_limits<Scalar>::quiet_NaN();
  std::vector<char> good(batch, 1);
  int num_good = 0;
  for (Index b = 0; b < batch; ++b) {
    good[b] = s.sample_status[b] == TerminationType::kConverged;
    num_good += good[b];
  }
  Matrix<Scalar> u_used;
  const bool all_good = num_good == static_cast<int>(batch);
  if (!all_good) {  // zero the failed columns so that they add nothing to sums
    u_used = result.adjoint;
    for (Index b = 0; b < batch; ++b) {
      if (!good[b]) u_used.col(b).setZero();
    }
  }
  ConstMatrixRef<Scalar> u = all_good ? ConstMatrixRef<Scalar>(result.adjoint)
                                      : ConstMatrixRef<Scalar>(u_used);
  if (map.num_parameters() > 0) {
    result.parameter_gradient.resize(map.num_parameters());
    if (all_good || (options.drop_failed_samples && num_good > 0)) {
      map.ParameterVectorJacobianProduct(z_star, u, result.parameter_gradient);
    } else {
      result.parameter_gradient.setConstant(nan);
    }
  }
  if (map.input_dimension() > 0) {
    result.input_gradient.resize(map.input_dimension(), batch);
    if (num_good > 0) {
      map.InputVectorJacobianProduct(z_star, u, result.input_gradient);
    }
    for (Index b = 0; b < batch; ++b) {
      if (!good[b]) result.input_gradient.col(b).setConstant(nan);
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
  return internal::ImplicitBackwardImpl<Scalar>(map, z_star, grad_z, options, nullptr, "");
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
  if (!options_.require_converged_forward) {
    return internal::ImplicitBackwardImpl<Scalar>(map_, z_star_, grad_z, options_, nullptr, "");
  }
  std::vector<char> ok(z_star_.cols(), 1);
  for (Index b = 0; b < z_star_.cols(); ++b) {
    ok[b] = b < static_cast<Index>(forward_summary_.sample_status.size()) &&
            forward_summary_.sample_status[b] == TerminationType::kConverged;
  }
  return internal::ImplicitBackwardImpl<Scalar>(
      map_, z_star_, grad_z, options_, &ok,
      "rejected: the forward solve did not converge, z is not an equilibrium");
}

// Compiled once for float and double (solvers/src/diff/implicit_diff.cc; see
// "Compile once" in types.h). `prefix` is `extern` or empty.
#define IMPLICIT_BACKWARD_INSTANCES(prefix, Scalar)                                        \
  prefix template BackwardResult<Scalar> internal::ImplicitBackwardImpl<Scalar>(           \
      const FixedPointMap<Scalar>&, ConstMatrixRef<Scalar>, ConstMatrixRef<Scalar>,         \
      const BackwardOptions&, const std::vector<char>*, const std::string&);               \
  prefix template BackwardResult<Scalar> ImplicitBackward<Scalar>(                          \
      const FixedPointMap<Scalar>&, ConstMatrixRef<Scalar>, ConstMatrixRef<Scalar>,         \
      const BackwardOptions&);                                                              \
  prefix template class ImplicitLayer<Scalar>
#ifndef IMPLICIT_NO_EXTERN_TEMPLATES
IMPLICIT_BACKWARD_INSTANCES(extern, float);
IMPLICIT_BACKWARD_INSTANCES(extern, double);
#endif

}  // namespace implicit
