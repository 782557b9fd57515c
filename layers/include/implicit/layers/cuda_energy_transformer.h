// The Energy Transformer's dynamics on the device: EnergyTransformerMap
// (energy_transformer_map.h) as a cuda::DeviceMap, for the device solvers.
//
//   f(x) = x - a r(x),   r = dE/dg = x + dF/dG(LayerNorm(x))      (a = step)
//
// with E (energy_transformer_energy.h) from the same evaluation, and clamped
// tokens for image completion: with SetClamp(free_mask, values) (n x B, 1 =
// free), f(x) = m .* (y - a r(y)) + (1 - m) .* c and ClampedEnergy's
// E(y) + 0.5 |(1 - m) .* (x - c)|^2, y = m .* x + (1 - m) .* c. The clamp is per sample, and the map picks each evaluated
// column's own mask and values, so the device solvers' active set works with
// it (the CPU map evaluates a clamped batch whole).
//
// One evaluation of B samples (N tokens of width D, H heads of width Y, M
// memories), all on the context's stream: a LayerNorm kernel (one warp per
// token), K = W_K G and Q = W_Q G (one GEMM each for all heads and samples),
// per head the N x N scores of every sample and the products Q P^T, K P
// (strided-batched GEMMs), a softmax kernel with the self-pairs excluded, the
// memory scores Xi^T G with ReLU (or softmax), dF/dG by three more GEMMs, and
// one kernel each for the update and the per-sample energy.
//
// The parameters are copied from a host EnergyTransformer at construction
// (SyncParameters() copies them again, e.g. after a host training step).
// Forward only for now: no Jacobian or parameter products on the device yet
// (the implicit backward pass of the ET runs on the CPU).
//
//   implicit::EnergyTransformer<float> et(options);
//   implicit::cuda::Context context;
//   implicit::cuda::EnergyTransformerMap<float> map(context, et, 0.5f);
//   map.SetClamp(context, free_mask, images);            // image completion
//   implicit::cuda::DeviceMatrix<float> z(context, images);
//   implicit::cuda::DeviceAndersonSolver<float>().Solve(context, map, z);
#pragma once

#include <implicit/core/cuda_device.h>
#include <implicit/layers/energy_transformer_energy.h>

namespace implicit {
namespace cuda {

template <typename Scalar>
class EnergyTransformerMap : public DeviceMap<Scalar> {
 public:
  // step: a > 0. Throws std::invalid_argument on a bad step.
  EnergyTransformerMap(Context& context, const implicit::EnergyTransformer<Scalar>& et, Scalar step);

  // Copies W_K, W_Q, Xi, gamma and delta from the host energy again.
  void SyncParameters(Context& context);
  // Clamps the coordinates where free_mask is 0 at `values` (both n x B,
  // copied to the device); the solves then need batches of B columns.
  void SetClamp(Context& context, ConstMatrixRef<Scalar> free_mask, ConstMatrixRef<Scalar> values);
  void ClearClamp() { clamped_ = false; }
  bool has_clamp() const { return clamped_; }
  Scalar step() const { return step_; }

  Index dimension() const override { return et_.dimension(); }
  void Evaluate(Context& context, const Scalar* z, Index count, const int* columns, Scalar* out,
                Scalar* energy) const override;
  bool has_energy() const override { return true; }

 private:
  const implicit::EnergyTransformer<Scalar>& et_;
  Scalar step_;
  DeviceMatrix<Scalar> wk_, wq_, xi_;
  bool clamped_ = false;
  DeviceMatrix<Scalar> mask_, values_;
  // Work buffers, grown on demand: merged state, LayerNorm (xhat, s, g), K, Q,
  // the attention blocks and their log-sum-exps, Q P^T, K P, memory scores,
  // dF/dG and the memory log-sum-exps.
  mutable DeviceMatrix<Scalar> y_, xhat_, s_, g_, k_, q_, p_, lse_, qpt_, kp_, scores_, dfdg_, lse_mem_;
};

extern template class EnergyTransformerMap<float>;
extern template class EnergyTransformerMap<double>;

}  // namespace cuda
}  // namespace implicit
