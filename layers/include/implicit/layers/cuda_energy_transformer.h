/// \file
/// The Energy Transformer's dynamics on the device: EnergyTransformerMap
/// (energy_transformer_map.h) as a cuda::DeviceMap, for the device solvers.
///
/// \code{.unparsed}
///   f(x) = x - a r(x),   r = dE/dg = x + dF/dG(LayerNorm(x))      (a = step)
/// \endcode
///
/// with E (energy_transformer_energy.h) from the same evaluation, and clamped
/// tokens for image completion: with SetClamp(free_mask, values) (n x B, 1 =
/// free), f(x) = m .* (y - a r(y)) + (1 - m) .* c and ClampedEnergy's
/// E(y) + 0.5 |(1 - m) .* (x - c)|^2, y = m .* x + (1 - m) .* c. The clamp is per sample, and the map picks each evaluated
/// column's own mask and values, so the device solvers' active set works with
/// it (the CPU map evaluates a clamped batch whole).
///
/// One evaluation of B samples (N tokens of width D, H heads of width Y, M
/// memories), all on the context's stream: a LayerNorm kernel (one warp per
/// token), K = W_K G and Q = W_Q G (one GEMM each for all heads and samples),
/// the N x N scores of every head and sample, their softmax (self-pairs
/// excluded) and the products Q P^T, K P in one fused kernel (a thread block
/// per head and sample, in shared memory; strided-batched GEMMs per head when
/// a pair's blocks do not fit), the memory scores Xi^T G with ReLU (or
/// softmax), dF/dG by three more GEMMs, and one kernel each for the update and
/// the per-sample energy.
///
/// The implicit backward pass (cuda::ImplicitBackward) gets the exact
/// products of the CPU map (energy_transformer_map.h): J^T u = m .* (w - a (M
/// H_F w + w)), w = m .* u, with H_F the G-Hessian of the attention and memory
/// terms (batched GEMMs along the direction, softmax and ReLU Jacobians) and M
/// the LayerNorm Jacobian per token; the product with the clamped values (the
/// map's input, so gradients reach what the clamp was made from); and the
/// parameter product for W_K, W_Q and Xi in the ET's ParameterSet layout
/// (learnable_layer_norm is refused).
/// The parameters are copied from a host EnergyTransformer at construction
/// (SyncParameters() copies them again, e.g. after a host training step).
///
/// \code
///   implicit::EnergyTransformer<float> et(options);
///   implicit::cuda::Context context;
///   implicit::cuda::EnergyTransformerMap<float> map(context, et, 0.5f);
///   map.SetClamp(context, free_mask, images);            // image completion
///   implicit::cuda::DeviceMatrix<float> z(context, images);
///   implicit::cuda::DeviceAndersonSolver<float>().Solve(context, map, z);
/// \endcode
#pragma once

#include <implicit/core/cuda_device.h>
#include <implicit/layers/energy_transformer_energy.h>

namespace implicit {
namespace cuda {

/// EnergyTransformerMap's dynamics f(x) = x - a r(x) on the device, with the
/// energy, clamped tokens and the exact products of the implicit backward pass
/// (the file comment has the kernels). Holds a reference to the host
/// EnergyTransformer, whose parameters it copies.
template <typename Scalar>
class EnergyTransformerMap : public DeviceMap<Scalar> {
 public:
  /// Builds the map of the host energy et (held by reference: it must outlive
  /// the map) with step a > 0, copying its parameters to the device on
  /// context's stream.
  /// \throws std::invalid_argument when step is not finite and > 0.
  EnergyTransformerMap(Context& context, const implicit::EnergyTransformer<Scalar>& et, Scalar step);

  /// Copies W_K, W_Q, Xi, gamma and delta from the host energy again.
  void SyncParameters(Context& context);
  /// Clamps the coordinates where free_mask is 0 at `values` (both n x B,
  /// copied to the device); the solves then need batches of B columns.
  /// \throws std::invalid_argument unless free_mask and values are both n x B
  ///   with B >= 1.
  void SetClamp(Context& context, ConstMatrixRef<Scalar> free_mask, ConstMatrixRef<Scalar> values);
  /// Removes the clamp: every coordinate is free again (input_dimension() 0).
  void ClearClamp() { clamped_ = false; }
  /// True while a clamp set by SetClamp is in force.
  bool has_clamp() const { return clamped_; }
  /// The step a of the dynamics x <- x - a dE/dg.
  Scalar step() const { return step_; }

  Index dimension() const override { return et_.dimension(); }
  void Evaluate(Context& context, const Scalar* z, Index count, const int* columns, Scalar* out,
                Scalar* energy) const override;
  bool has_energy() const override { return true; }
  bool HasJacobianProducts() const override { return true; }
  void VectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u, Index count,
                             const int* columns, Scalar* out) const override;
  Index num_parameters() const override { return et_.num_parameters(); }
  /// With a clamp, count must be the clamp's batch (the whole batch, in order).
  /// \throws std::invalid_argument when the energy has learnable_layer_norm
  ///   (not on the device yet), or with a clamp when count is not its batch.
  void ParameterVectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u,
                                      Index count, Scalar* out) const override;
  ///@{
  /// With a clamp the map's input is the clamped values c (n x B): the product
  /// (1 - m) .* (u + (I - a dr/dy)^T (m .* u)); count must be the clamp's batch.
  /// Without a clamp there is no input (InputVectorJacobianProduct throws
  /// std::logic_error).
  Index input_dimension() const override { return clamped_ ? et_.dimension() : 0; }
  void InputVectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u, Index count,
                                  Scalar* out) const override;
  ///@}

 private:
  struct Shape {
    int N, D, H, Y, M, c, n, T, HY;
    long long sample() const { return static_cast<long long>(N) * HY; }  ///< a sample's stride in K, Q
    long long block() const { return static_cast<long long>(N) * N; }    ///< one N x N attention block
  };
  Shape ShapeOf(Index count) const;
  /// Head h's first attention block (samples follow, block() apart).
  static Scalar* Head(const DeviceMatrix<Scalar>& blocks, int h, const Shape& sh) {
    return blocks.data() + static_cast<long long>(h) * sh.c * sh.block();
  }
  bool relu_memory() const { return et_.options().memory == EnergyTransformerMemory::kRelu; }
  /// The factor of the memory's dR (memory_beta for the softmax memory).
  Scalar MemoryScale() const {
    return relu_memory() ? Scalar(1) : static_cast<Scalar>(et_.options().memory_beta);
  }
  /// Whether a (head, sample) pair's attention fits one thread block's shared
  /// memory: then one fused kernel per evaluation (and per HVP) does all
  /// heads and samples, else ForwardHeads / HvpHeads, batched GEMMs per head.
  bool FusedAttention() const;
  /// p, lse, qpt, kp from K and Q; ks, qs from K, Q, dK, dQ and p.
  void ForwardHeads(Context& context, const Shape& sh, Scalar beta) const;
  void HvpHeads(Context& context, const Shape& sh, Scalar beta) const;
  /// Fills the caches at y (the merged state) and dF/dG; returns y.
  const Scalar* Forward(Context& context, const Scalar* z, Index count, const int* columns) const;
  /// out = H_F v (D x T) from Forward's caches; leaves dK, dQ, dP, ks, qs, dR.
  void ForcesHvp(Context& context, const Scalar* v, Index count, Scalar* out) const;
  /// out = J^T u (input false) or J_c^T u (input true) at z.
  void TransposeProduct(Context& context, const Scalar* z, const Scalar* u, Index count, const int* columns,
                        bool input, Scalar* out) const;
  /// m .* u with a clamp, else u.
  const Scalar* MaskedDirection(Context& context, const Scalar* u, Index count, const int* columns) const;

  const implicit::EnergyTransformer<Scalar>& et_;
  Scalar step_;
  DeviceMatrix<Scalar> wk_, wq_, xi_;
  bool clamped_ = false;
  DeviceMatrix<Scalar> mask_, values_;
  /// Work buffers, grown on demand: merged state, LayerNorm (xhat, s, g), K, Q,
  /// the attention blocks and their log-sum-exps, Q P^T, K P, memory scores,
  /// dF/dG and the memory log-sum-exps.
  mutable DeviceMatrix<Scalar> y_, xhat_, s_, g_, k_, q_, p_, lse_, qpt_, kp_, scores_, dfdg_, lse_mem_;
  /// ... and of the products: the direction's dK, dQ, dP, ks, qs, dR, H_F w, M H_F w, w.
  mutable DeviceMatrix<Scalar> dk_, dq_, da_, ks_, qs_, ds_, hf_, mh_, w_;
};

extern template class EnergyTransformerMap<float>;
extern template class EnergyTransformerMap<double>;

}  // namespace cuda
}  // namespace implicit
