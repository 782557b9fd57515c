/// \file
/// The implicit backward pass on the device (implicit_diff.h's ImplicitBackward
/// for DeviceMap): exact implicit-function-theorem gradients, never unrolling.
///
/// At an equilibrium z* of f and a loss gradient g = dL/dz*, per sample b
///
/// \verbatim
///   u_b = (df/dz)(z*_b)^T u_b + g_b     (the adjoint, as a fixed point)
///   dL/dtheta = sum_b (df/dtheta)(z*_b)^T u_b
/// \endverbatim
///
/// The adjoint is solved on the device with the map's device vector-Jacobian
/// products, by BackwardOptions::linear_solver
///   "fixed_point" / "anderson" ("auto" = anderson): a device solver
///       (cuda_solvers.h) on the linear map u -> J^T u + g; its residual
///       |g - (I - J)^T u| is the true adjoint residual, and a sample has
///       converged when it is <= absolute_tolerance or <= tolerance x |J^T u + g|;
///   "gmres": restarted GMRES(restart) of (I - J)^T u = g, one Krylov basis
///       per sample on the device; converged when the true residual is <=
///       tolerance |g| + absolute_tolerance (as the CPU's GMRES).
/// The other linear solvers are not on the device yet and are refused. Memory is the solver's (a few n x B device matrices),
/// independent of the number of forward iterations. A failed sample (not
/// converged, NaN) makes ok() false, its input-gradient column NaN and the
/// parameter gradient NaN, never a silent zero; BackwardOptions::failed_samples
/// = kSkip makes them zero and the parameter gradient the other samples' sum,
/// as on the CPU (kThrow is refused on the device). Maps with an input (input_dimension() >
/// 0, e.g. the clamped values of cuda::EnergyTransformerMap) also get dL/dc.
///
/// \code
///   implicit::cuda::Context context;
///   implicit::cuda::HopfieldCccpMap<double> map(context, patterns, 2.0);
///   implicit::cuda::DeviceMatrix<double> z(context, queries), grad(...);
///   implicit::cuda::DeviceAndersonSolver<double>().Solve(context, map, z);   // z <- z*
///   auto g = implicit::cuda::ImplicitBackward(context, map, z, grad);
///   if (g.ok()) { implicit::Vector<double> dtheta = g.parameter_gradient.ToHost(context); }
/// \endcode
#pragma once

#include <implicit/core/cuda_device.h>
#include <implicit/diff/backward_options.h>
#include <implicit/solvers/solver.h>

namespace implicit {
namespace cuda {

/// What the device backward pass returns: the adjoint solve's summary, the
/// adjoint and the gradients, all on the device.
template <typename Scalar>
struct DeviceBackwardResult {
  /// The adjoint solve, as the device solver reports it (per-sample statuses,
  /// residuals |g - (I - J)^T u|, iterations, vector-Jacobian products counted
  /// as function_evaluations).
  Summary summary;
  /// u, n x B; a failed sample's column is NaN (kNaN) or zero (kSkip).
  DeviceMatrix<Scalar> adjoint;
  /// dL/dtheta, num_parameters() x 1: the sum over the samples; NaN when !ok(), unless
  /// BackwardOptions::failed_samples is kSkip (then the converged samples' sum).
  DeviceMatrix<Scalar> parameter_gradient;
  /// dL/dc, input_dimension() x B (empty when the map has no input); a failed
  /// sample's column is NaN (kNaN) or zero (kSkip).
  DeviceMatrix<Scalar> input_gradient;
  /// True when every sample's adjoint is valid (summary converged).
  bool ok() const { return summary.IsConverged(); }
};

/// The exact implicit backward pass on the device at an equilibrium z_star
/// (n x B) of `map` for the loss gradient grad_z = dL/dz* (n x B); see
/// cuda_backward.h for the adjoint solvers and the handling of failed samples.
/// \throws std::invalid_argument for options the device cannot honour (method
///         other than kImplicit, failed_samples kThrow, a linear solver other
///         than auto/fixed_point/anderson/gmres), mismatched shapes, or a map
///         without Jacobian products.
template <typename Scalar>
DeviceBackwardResult<Scalar> ImplicitBackward(Context& context, const DeviceMap<Scalar>& map,
                                              const DeviceMatrix<Scalar>& z_star,
                                              const DeviceMatrix<Scalar>& grad_z,
                                              const BackwardOptions& options = BackwardOptions());

/// \cond INTERNAL
extern template DeviceBackwardResult<float> ImplicitBackward<float>(
    Context&, const DeviceMap<float>&, const DeviceMatrix<float>&, const DeviceMatrix<float>&,
    const BackwardOptions&);
extern template DeviceBackwardResult<double> ImplicitBackward<double>(
    Context&, const DeviceMap<double>&, const DeviceMatrix<double>&, const DeviceMatrix<double>&,
    const BackwardOptions&);
/// \endcond

}  // namespace cuda
}  // namespace implicit
