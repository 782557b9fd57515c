/// \file
/// The token side of the Energy Transformer (energy_transformer_energy.h): the
/// layout of a sample's column as N tokens of dimension D, the LayerNorm of
/// each token, g_A = gamma (x_A - mean) / s_A + delta, and the chain rule
/// through it: M = dg/dx per token (symmetric, PSD: the Hessian of the convex
/// Lagrangian L), its derivative dM along a direction, and the Lagrangian term
/// E_LN = -sum_A D gamma eps / s_A of the energy. Internal: a base of
/// EnergyTransformer, above the attention and memory terms
/// (EnergyTransformerForces, whose options and gamma, delta it reads).
///
/// \code
///   // inside EnergyTransformer, per block of `count` samples:
///   NormalizeSamples(x, first, count, &s);  // s.g = LayerNorm(tokens), s.xhat, s.s
///   ApplyM(s, r, gamma(), &mr);             // mr = M r, token by token
///   Scalar e_ln = LayerNormEnergy(s, i);    // E_LN of the block's sample i
/// \endcode
#pragma once

#include <implicit/core/types.h>
#include <implicit/layers/energy_transformer_forces.h>
#include <implicit/layers/layer_norm.h>

namespace implicit {
namespace internal {

template <typename Scalar>
class EnergyTransformerTokenNorm : public EnergyTransformerForces<Scalar> {
  using Base = EnergyTransformerForces<Scalar>;

 protected:
  using typename Base::Options;
  using typename Base::Sample;
  using Base::options_;
  using Base::params_;

  explicit EnergyTransformerTokenNorm(const Options& options) : Base(options) {}

  /// The LayerNorm gain gamma and bias delta (parameters when learnable).
  Scalar gamma() const {
    return options_.learnable_layer_norm ? params_.Block("gamma")(0, 0)
                                         : static_cast<Scalar>(options_.gamma);
  }
  Scalar delta() const {
    return options_.learnable_layer_norm ? params_.Block("delta")(0, 0)
                                         : static_cast<Scalar>(options_.delta);
  }

  /// The D x N token view of one sample's column (token A = column A).
  Eigen::Map<const Matrix<Scalar>> Tokens(const Scalar* column) const {
    return Eigen::Map<const Matrix<Scalar>>(column, options_.token_dim, options_.num_tokens);
  }
  /// The same view of column b of an output.
  Eigen::Map<Matrix<Scalar>> Out(MatrixRef<Scalar> m, Index b) const {
    return Eigen::Map<Matrix<Scalar>>(m.col(b).data(), options_.token_dim, options_.num_tokens);
  }

  /// The token LayerNorm with the current gamma and delta.
  ColumnLayerNorm<Scalar> TokenNorm() const {
    return ColumnLayerNorm<Scalar>{gamma(), delta(), static_cast<Scalar>(options_.eps)};
  }

  /// s->xhat, s->s and s->g = LayerNorm of the tokens of one sample's column.
  void Normalize(const Scalar* column, Sample* s) const {
    const Eigen::Map<const Matrix<Scalar>> x(column, options_.num_tokens * options_.token_dim, 1);
    NormalizeSamples(x, 0, 1, s);
  }

  /// The same for the `count` samples in columns first .. first + count - 1
  /// of x, side by side in s (D x (count*N): SamplesForces).
  void NormalizeSamples(ConstMatrixRef<Scalar> x, Index first, Index count, Sample* s) const {
    const Index N = options_.num_tokens;
    s->xhat.resize(options_.token_dim, count * N);
    s->s.resize(count * N);
    const ColumnLayerNorm<Scalar> ln = TokenNorm();
    for (Index i = 0; i < count; ++i) {
      ln.Normalize(Tokens(x.col(first + i).data()), s->xhat.middleCols(i * N, N), s->s.segment(i * N, N));
    }
    s->g = (ln.gamma * s->xhat).array() + ln.delta;
  }

  /// The LayerNorm term of the energy of sample i of s (Normalize: i = 0,
  /// NormalizeSamples: i < count).
  /// E_LN = sum_A (g_A . x_A - L(x_A)) = -sum_A D gamma eps / s_A.
  Scalar LayerNormEnergy(const Sample& s, Index i = 0) const {
    const Scalar D = static_cast<Scalar>(options_.token_dim);
    const Index N = options_.num_tokens;
    return -D * gamma() * static_cast<Scalar>(options_.eps) * s.s.segment(i * N, N).cwiseInverse().sum();
  }

  /// out = M r per token, M = (gamma/s)(I - 1 1^T / D - xhat xhat^T / D): the
  /// LayerNorm Jacobian (with gain gamma_value).
  template <typename Derived>
  void ApplyM(const Sample& s, const Eigen::MatrixBase<Derived>& r, Scalar gamma_value,
              Matrix<Scalar>* out) const {
    out->resize(r.rows(), r.cols());
    ColumnLayerNorm<Scalar>::JacobianProductAt(s.xhat, s.s, gamma_value, r, *out);
  }

  /// out = (d/dt M(x + t v))|_{t=0} r per token: the third derivative of L.
  template <typename Derived>
  void DerivativeOfM(const Sample& s, const Eigen::MatrixBase<Derived>& v, const Matrix<Scalar>& r,
                     Matrix<Scalar>* out) const {
    out->resize(r.rows(), r.cols());
    ColumnLayerNorm<Scalar>::JacobianDerivativeProductAt(s.xhat, s.s, gamma(), v, r, *out);
  }
};

}  // namespace internal

/// \cond INTERNAL
IMPLICIT_EXTERN_TEMPLATE_CLASS(internal::EnergyTransformerTokenNorm);
/// \endcond

}  // namespace implicit
