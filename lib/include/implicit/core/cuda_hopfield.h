/// \file
/// Hopfield attention energies on the device: their CCCP maps, energies, and
/// the derivatives of the implicit backward pass (float and double).
///
/// With N stored patterns X (n x N), beta > 0 and the attention weights
/// p = a(beta X^T xi), a = softmax (the modern Hopfield energy,
/// layers/modern_hopfield_energy.h) or sparsemax (SparseHopfieldEnergy with
/// alpha = 2, layers/regularized_attention.h):
///
/// \verbatim
///   E(xi) = 0.5 |xi|^2 - (1/beta) Omega*(beta X^T xi),   f(xi) = X p
///   (Omega* = lse for softmax, the Tsallis-2 conjugate for sparsemax)
///   (df/dxi)^T u = beta X J s,              s = X^T u, J = da/ds at p
///   d/dX sum_j u_j . f(xi_j) = U P^T + beta Xi W^T,      W = [J_j s_j]
///   softmax: J s = p .* s - p (p . s);   sparsemax: J s = s - mean_S(s) on the support S, 0 off it
/// \endverbatim
///
/// One evaluation of a block of B states is two GEMMs (X^T Z, X P) and one
/// fused kernel per column (max-shifted softmax and log-sum-exp, or the exact
/// sparsemax projection and its conjugate), all on the context's stream; f
/// and E come from the same scores. The parameters (for
/// ParameterVectorJacobianProduct) are the patterns X, column-major.
///
/// \code
///   implicit::cuda::Context context;
///   implicit::cuda::HopfieldCccpMap<float> map(context, patterns, 2.0f);
///   implicit::cuda::DeviceMatrix<float> z(context, queries);
///   implicit::cuda::DeviceAndersonSolver<float>().Solve(context, map, z);
/// \endcode
///
/// A NaN or Inf in one state stays in that state's column.
#pragma once

#include <implicit/core/cuda_device.h>

namespace implicit {
namespace cuda {

/// The attention weights of the energy.
enum class Attention {
  kSoftmax,    ///< modern Hopfield (entmax alpha = 1)
  kSparsemax,  ///< sparse Hopfield (entmax alpha = 2): exact retrieval of separated patterns
};

/// The CCCP map f(xi) = X a(beta X^T xi) of a Hopfield attention energy on the
/// device (see the file comment), with its energy and Jacobian products.
///
/// The parameters are the patterns X, column-major. Float and double are
/// instantiated.
template <typename Scalar>
class HopfieldCccpMap : public DeviceMap<Scalar> {
 public:
  /// Copies the patterns to the device.
  /// \param context the context whose stream uploads the patterns.
  /// \param patterns n x N stored patterns (columns).
  /// \param beta the inverse temperature, finite and > 0.
  /// \param attention softmax (the default) or sparsemax weights.
  /// \throws std::invalid_argument on bad input (no patterns, a bad beta,
  ///   non-finite patterns).
  HopfieldCccpMap(Context& context, ConstMatrixRef<Scalar> patterns, Scalar beta,
                  Attention attention = Attention::kSoftmax);
  /// The attention weights (softmax or sparsemax).
  Attention attention() const { return attention_; }

  /// The state dimension n (the patterns' rows).
  Index dimension() const override { return patterns_.rows(); }
  /// The number N of stored patterns.
  Index num_patterns() const { return patterns_.cols(); }
  /// The inverse temperature beta.
  Scalar beta() const { return beta_; }
  /// The stored patterns X (n x N) on the device.
  const DeviceMatrix<Scalar>& patterns() const { return patterns_; }
  /// The patterns for writing, to replace them (same shape), e.g.\ after a
  /// training step on the device.
  DeviceMatrix<Scalar>& mutable_patterns() { return patterns_; }

  void Evaluate(Context& context, const Scalar* z, Index count, const int* columns, Scalar* out,
                Scalar* energy) const override;
  bool has_energy() const override { return true; }
  bool HasJacobianProducts() const override { return true; }
  void VectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u, Index count,
                             const int* columns, Scalar* out) const override;
  Index num_parameters() const override { return patterns_.size(); }
  void ParameterVectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u,
                                      Index count, Scalar* out) const override;

 private:
  /// p = a(beta X^T z) (N x count) in scores_, and when `conjugate` is given,
  /// conjugate[j] = Omega*(beta X^T z_j). Returns p's device pointer.
  Scalar* Weights(Context& context, const Scalar* z, Index count, Scalar* conjugate) const;
  /// work_ <- W = J (X^T u) at p (N x count).
  Scalar* WeightsVjp(Context& context, const Scalar* p, const Scalar* u, Index count) const;

  DeviceMatrix<Scalar> patterns_;
  Scalar beta_;
  Attention attention_;
  mutable DeviceMatrix<Scalar> scores_, work_;  ///< N x count buffers, grown on demand
  mutable DeviceMatrix<Scalar> conjugate_;      ///< 1 x count
};

extern template class HopfieldCccpMap<float>;
extern template class HopfieldCccpMap<double>;

}  // namespace cuda
}  // namespace implicit
