// implicit-et --device cuda: the equilibrium of the clamped Energy Transformer
// dynamics and its implicit backward pass on the GPU, for one model.
//
// The host EnergyTransformer stays the owner of the energy's parameters (Adam
// updates them there); SyncParameters() copies them to the device map before
// each use. Per training step the device receives the clamp (mask and values,
// n x B) and dL/dz*, and returns z* (for the decoder), the parameter gradient
// and dL/dc (for the embeddings): the solve and the adjoint never leave the
// device. Without a CUDA build every constructor throws UsageError naming why.
//
//   DeviceEquilibrium device(et, 0.5);                // cuda::Context on device 0
//   device.SetClamp(free_mask, start);
//   Summary s = device.Solve("anderson", options, &z);
//   DeviceEquilibrium::Gradients g = device.Backward(dz, backward_options);
#pragma once

#include "common/cli.h"

#include <implicit/diff/backward_options.h>
#include <implicit/layers/energy_transformer_energy.h>
#include <implicit/solvers/solver.h>

#ifdef IMPLICIT_WITH_CUDA
#include <implicit/diff/cuda_backward.h>
#include <implicit/layers/cuda_energy_transformer.h>
#include <implicit/solvers/cuda_solvers.h>
#endif

#include <memory>
#include <string>

namespace implicit_apps {

class DeviceEquilibrium {
 public:
  struct Gradients {
    implicit::Summary summary;           // the adjoint solve
    implicit::Vector<double> parameters;  // dL/dtheta of the energy (NaN entries: see ImplicitBackward)
    implicit::Matrix<double> inputs;      // dL/dc, n x B (a failed sample's column NaN)
  };

#ifdef IMPLICIT_WITH_CUDA
  DeviceEquilibrium(const implicit::EnergyTransformer<double>& et, double step) : impl_(new Impl(et, step)) {}

  std::string device_name() const { return impl_->context.device_name(); }
  void SyncParameters() { impl_->map.SyncParameters(impl_->context); }
  void SetClamp(const implicit::Matrix<double>& free_mask, const implicit::Matrix<double>& values) {
    impl_->map.SetClamp(impl_->context, free_mask, values);
  }
  // z: the starting state in, the solver's result out; the result stays on
  // the device for Backward().
  implicit::Summary Solve(const std::string& solver, const implicit::SolverOptions& options,
                          implicit::Matrix<double>* z) {
    Impl& d = *impl_;
    d.z.CopyFrom(d.context, *z);
    const implicit::Summary summary = implicit::cuda::MakeDeviceSolver<double>(solver, {}, options)->Solve(
        d.context, d.map, d.z);
    d.z.CopyTo(d.context, *z);
    return summary;
  }
  // The IFT backward pass at the last Solve()'s result for dL/dz* = dz.
  Gradients Backward(const implicit::Matrix<double>& dz, const implicit::BackwardOptions& options) {
    Impl& d = *impl_;
    d.grad.CopyFrom(d.context, dz);
    const auto result = implicit::cuda::ImplicitBackward(d.context, d.map, d.z, d.grad, options);
    return {result.summary, result.parameter_gradient.ToHost(d.context).col(0),
            result.input_gradient.ToHost(d.context)};
  }

 private:
  struct Impl {
    Impl(const implicit::EnergyTransformer<double>& et, double step) : map(context, et, step) {}
    implicit::cuda::Context context;
    implicit::cuda::EnergyTransformerMap<double> map;
    implicit::cuda::DeviceMatrix<double> z, grad;
  };
  std::unique_ptr<Impl> impl_;
#else
  DeviceEquilibrium(const implicit::EnergyTransformer<double>&, double) {
    throw UsageError("--device cuda: this build has no CUDA backend (configure with IMPLICIT_WITH_CUDA=ON)");
  }
  std::string device_name() const { return ""; }
  void SyncParameters() {}
  void SetClamp(const implicit::Matrix<double>&, const implicit::Matrix<double>&) {}
  implicit::Summary Solve(const std::string&, const implicit::SolverOptions&, implicit::Matrix<double>*) {
    return {};
  }
  Gradients Backward(const implicit::Matrix<double>&, const implicit::BackwardOptions&) { return {}; }
#endif
};

}  // namespace implicit_apps
