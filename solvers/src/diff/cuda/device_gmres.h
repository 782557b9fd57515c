// The adjoint linear system (I - J^T) u = g of the device backward pass solved
// by restarted GMRES on the device (internal to cuda::ImplicitBackward,
// BackwardOptions::linear_solver "gmres"). Per sample b its own Krylov basis
// (restart + 1 vectors of n, on the device, classical Gram-Schmidt applied
// twice), its Hessenberg matrix and Givens rotations on the host; each
// Krylov step is one batch of vector-Jacobian products over the samples
// still running. The verdict on every sample is the CPU solvers' monitor
// (BatchMonitor): converged when the true residual |g_b - (I - J^T) u_b| <=
// tolerance |g_b| + absolute_tolerance, checked at each restart.
#pragma once

#include <implicit/core/cuda_device.h>
#include <implicit/solvers/linear_solver_options.h>
#include <implicit/solvers/solver.h>

namespace implicit {
namespace cuda {
namespace internal {

// u: the initial guess in, the solution out (n x B); g: the right-hand side.
// Returns the summary (vector-Jacobian products counted as evaluations).
template <typename Scalar>
Summary GmresAdjoint(Context& context, const DeviceMap<Scalar>& map, const DeviceMatrix<Scalar>& z_star,
                     const DeviceMatrix<Scalar>& g, const LinearSolverOptions& options, DeviceMatrix<Scalar>* u);

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
