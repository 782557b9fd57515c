// The implicit backward pass on the device (cuda_backward.h): the adjoint
// fixed point u = J^T u + g solved by a device solver, then one parameter VJP.
#include <implicit/core/cuda_kernels.h>
#include <implicit/diff/cuda_backward.h>
#include <implicit/solvers/cuda_solvers.h>

#include "device_gmres.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {
namespace cuda {
namespace {

// u -> (df/dz)(z*)^T u + g, column b at z*_b and g_b.
template <typename S>
class AdjointMap : public DeviceMap<S> {
 public:
  AdjointMap(const DeviceMap<S>& map, const DeviceMatrix<S>& z_star, const DeviceMatrix<S>& g)
      : map_(map), z_star_(z_star), g_(g) {}
  Index dimension() const override { return map_.dimension(); }
  void Evaluate(Context& context, const S* u, Index count, const int* columns, S* out, S*) const override {
    const int n = static_cast<int>(dimension()), c = static_cast<int>(count);
    const S* z = z_star_.data();
    if (columns != nullptr) {
      S* compact = static_cast<S*>(context.Workspace(internal::kSlotAdjointZ, sizeof(S) * n * count));
      internal::GatherColumns<S>(context.stream(), z_star_.data(), n, columns, c, compact);
      z = compact;
    }
    map_.VectorJacobianProduct(context, z, u, count, columns, out);
    internal::AddColumns<S>(context.stream(), out, g_.data(), n, columns, c);
  }

 private:
  const DeviceMap<S>& map_;
  const DeviceMatrix<S>& z_star_;
  const DeviceMatrix<S>& g_;
};

void Refuse(const std::string& why) { throw std::invalid_argument("cuda::ImplicitBackward: " + why); }

}  // namespace

template <typename Scalar>
DeviceBackwardResult<Scalar> ImplicitBackward(Context& context, const DeviceMap<Scalar>& map,
                                              const DeviceMatrix<Scalar>& z_star,
                                              const DeviceMatrix<Scalar>& grad_z, const BackwardOptions& options) {
  std::string error;
  if (!options.IsValid(&error)) Refuse(error);
  if (options.failed_sample_policy() == FailedSamplePolicy::kThrow) {
    Refuse("failed_samples 'throw' is not on the device yet (nan, skip; check ok())");
  }
  if (options.method != GradientMethod::kImplicit) {
    Refuse(std::string("method ") + GradientMethodToString(options.method) +
           " is not on the device yet (only implicit)");
  }
  const std::string& linear = options.linear_solver;
  if (linear != "auto" && linear != "fixed_point" && linear != "anderson" && linear != "gmres") {
    Refuse("linear_solver '" + linear + "' is not on the device yet (auto, fixed_point, anderson, gmres)");
  }
  if (!map.HasJacobianProducts()) Refuse("the map has no vector-Jacobian products");
  const Index n = map.dimension(), batch = z_star.cols();
  if (z_star.rows() != n || batch < 1) Refuse("z_star must be dimension() x B with B >= 1");
  if (grad_z.rows() != n || grad_z.cols() != batch) Refuse("grad_z must have z_star's shape");

  const SolverOptions base = implicit::internal::AsSolverOptions(options);

  DeviceBackwardResult<Scalar> result;
  result.adjoint.CopyFrom(context, grad_z);  // u0 = g
  AdjointMap<Scalar> adjoint(map, z_star, grad_z);
  if (linear == "gmres") {
    result.summary = internal::GmresAdjoint(context, map, z_star, grad_z, options, &result.adjoint);
  } else if (linear == "fixed_point") {
    typename DevicePicardSolver<Scalar>::Options o;
    static_cast<SolverOptions&>(o) = base;
    result.summary = DevicePicardSolver<Scalar>(o).Solve(context, adjoint, result.adjoint);
  } else {
    typename DeviceAndersonSolver<Scalar>::Options o;
    static_cast<SolverOptions&>(o) = base;
    o.memory = std::min(options.memory, kMaxDeviceAndersonMemory);
    result.summary = DeviceAndersonSolver<Scalar>(o).Solve(context, adjoint, result.adjoint);
  }
  result.summary.solver = "device " + result.summary.solver + " (adjoint)";

  // Gradients from the adjoint, as on the CPU: a failed sample's column adds
  // nothing to the parameter sum (which is NaN unless failed_samples = kSkip).
  // Its input-gradient column is NaN, never zero (the CPU's kSkip zeroes it;
  // left as it was until a GPU session can test the change, docs/gpu.md).
  const Scalar nan = std::numeric_limits<Scalar>::quiet_NaN();
  std::vector<Index> failed;
  for (Index b = 0; b < batch; ++b)
    if (result.summary.sample_status[b] != TerminationType::kConverged) failed.push_back(b);
  const bool all_good = failed.empty(), some_good = static_cast<Index>(failed.size()) < batch;
  DeviceMatrix<Scalar> dropped;
  const Scalar* u = result.adjoint.data();
  if (!all_good) {  // the adjoint with the failed columns zeroed
    dropped.CopyFrom(context, result.adjoint);
    for (Index b : failed) {
      internal::CheckCall(cudaMemsetAsync(dropped.col(b), 0, sizeof(Scalar) * n, context.stream()),
                          "cuda::ImplicitBackward: zeroing a failed sample's adjoint");
    }
    u = dropped.data();
  }
  const Index parameters = map.num_parameters();
  if (parameters > 0) {
    result.parameter_gradient.Resize(parameters, 1);
    if (all_good || (options.failed_sample_policy() == FailedSamplePolicy::kSkip && some_good)) {
      map.ParameterVectorJacobianProduct(context, z_star.data(), u, batch, result.parameter_gradient.data());
    } else {
      internal::Fill<Scalar>(context.stream(), result.parameter_gradient.data(), parameters, nan);
    }
  }
  const Index inputs = map.input_dimension();
  if (inputs > 0) {
    result.input_gradient.Resize(inputs, batch);
    if (some_good) map.InputVectorJacobianProduct(context, z_star.data(), u, batch, result.input_gradient.data());
    for (Index b : failed) internal::Fill<Scalar>(context.stream(), result.input_gradient.col(b), inputs, nan);
  }
  context.Synchronize();
  return result;
}

template DeviceBackwardResult<float> ImplicitBackward<float>(Context&, const DeviceMap<float>&,
                                                             const DeviceMatrix<float>&, const DeviceMatrix<float>&,
                                                             const BackwardOptions&);
template DeviceBackwardResult<double> ImplicitBackward<double>(Context&, const DeviceMap<double>&,
                                                               const DeviceMatrix<double>&,
                                                               const DeviceMatrix<double>&, const BackwardOptions&);

}  // namespace cuda
}  // namespace implicit
