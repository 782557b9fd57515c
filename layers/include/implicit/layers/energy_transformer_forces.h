/// \file
/// The attention and Hopfield-memory terms of the Energy Transformer,
/// F(G) = E_ATT + E_HN, as a function of one sample's LayerNorm'd tokens G
/// (D x N): the value, dF/dG, the G-Hessian product H_F dG and the parameter
/// product d/dtheta <dF/dG, z>, with the per-sample caches they share (Sample),
/// for one sample or for a block of samples side by side (D x (count*N)).
/// Internal: the base of EnergyTransformerTokenNorm (energy_transformer_token_norm.h),
/// which adds the LayerNorm Lagrangian and the chain rule through LayerNorm,
/// and so of EnergyTransformer (energy_transformer_energy.h); it owns the
/// options, the parameters (W_K, W_Q, Xi, and gamma, delta) and beta.
///
/// \code
///   // inside EnergyTransformer, per block of `count` samples:
///   NormalizeSamples(x, first, count, &s);       // s.g = LayerNorm(tokens)
///   SamplesForces(&s, &dFdG, values);            // F and dF/dG, caches filled
///   ForcesHvp(s, dG, &hvp);                      // H_F dG from the caches
/// \endcode
#pragma once

#include <implicit/core/gemm.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#include <implicit/layers/energy_transformer_options.h>
#include <implicit/layers/log_sum_exp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {
namespace internal {

template <typename Scalar>
class EnergyTransformerForces {
 protected:
  using Options = EnergyTransformerOptions;

  /// Validates the options and registers the parameters (EnergyTransformer
  /// draws W_K, W_Q and Xi; gamma and delta start at the options' values).
  explicit EnergyTransformerForces(const Options& options) : options_(options) {
    std::string error;
    if (!options.IsValid(&error)) {
      throw std::invalid_argument("EnergyTransformer::Options: " + error);
    }
    const Index D = options.token_dim;
    if (options.num_heads > 0) {
      params_.Add("W_K", options.num_heads * options.head_dim, D);
      params_.Add("W_Q", options.num_heads * options.head_dim, D);
    }
    if (options.num_memories > 0) params_.Add("Xi", D, options.num_memories);
    if (options.learnable_layer_norm) {
      params_.Add("gamma", 1, 1);
      params_.Add("delta", 1, 1);
      params_.Block("gamma")(0, 0) = static_cast<Scalar>(options.gamma);
      params_.Block("delta")(0, 0) = static_cast<Scalar>(options.delta);
    }
    beta_ = options.beta > 0.0 ? static_cast<Scalar>(options.beta)
            : options.num_heads > 0 ? Scalar(1) / std::sqrt(static_cast<Scalar>(options.head_dim))
                                    : Scalar(1);
  }

  /// Redraws W_K, W_Q and Xi with i.i.d. N(0, stddev^2) entries, column by
  /// column (gamma and delta keep their values): the Initialize of the image
  /// and graph Energy Transformers.
  void DrawWeights(unsigned seed, double stddev) {
    std::mt19937 gen(seed);
    std::normal_distribution<double> dist(0.0, stddev);
    for (const char* name : {"W_K", "W_Q", "Xi"}) {
      if (!params_.Contains(name)) continue;
      auto block = params_.Block(name);
      for (Index j = 0; j < block.cols(); ++j)
        for (Index i = 0; i < block.rows(); ++i) block(i, j) = static_cast<Scalar>(dist(gen));
    }
  }

  /// Everything one sample's products need, or several samples' side by side
  /// (SamplesForces: D x (count*N) for xhat and g, count*N token columns for
  /// the rest, P[h] N x (count*N)).
  struct Sample {
    Matrix<Scalar> xhat;  ///< D x N, (x - mean) / s
    Vector<Scalar> s;     ///< N, sqrt(var + eps)
    Matrix<Scalar> g;     ///< D x N, gamma xhat + delta
    /// All heads stacked, rows h*Y .. h*Y+Y-1 for head h ((H*Y) x N each):
    /// K = W_K G, Q = W_Q G, and per head QPt = Q_h P_h^T, KP = K_h P_h.
    Matrix<Scalar> K, Q, QPt, KP;
    std::vector<Matrix<Scalar>> P;        ///< per head N x N per sample (P(:,C): softmax over B)
    Matrix<Scalar> S;                     ///< memory scores Xi^T G (M x N)
    Matrix<Scalar> R;                     ///< ReLU(S), or softmax(beta_m S) per column
  };

  /// Fills the caches of the samples side by side in s->g, and dF/dG when grad !=
  /// nullptr; values[i] = F(G_i) = E_ATT + E_HN of sample i when values !=
  /// nullptr (the log-sum-exps cost as much as the softmaxes and only the
  /// energies need them). s->g holds the samples' LayerNorm'd tokens as one
  /// D x (count*N) matrix (sample i in columns i*N .. i*N+N-1; count =
  /// s->g.cols() / N), and K, Q, QPt, KP, S, R and dF/dG come out the same
  /// way. The projections onto W_K, W_Q and Xi and back are one product each
  /// for the count samples (small per-sample products run far below a GEMM's speed); the
  /// N x N attention products run sample by sample, each head's softmax pass
  /// once for all (P[h]: N x (count*N), sample i's attention in columns
  /// i*N ..). ForcesHvp and ForcesParameterVjp take the same blocks.
  void SamplesForces(Sample* s, Matrix<Scalar>* grad, Scalar* values) const;

  /// out = H_F dG (the G-Hessian of F along dG), from the caches of
  /// SamplesForces (dG: the samples side by side, as s.g).
  void ForcesHvp(const Sample& s, ConstMatrixRef<Scalar> dG, Matrix<Scalar>* out) const {
    const Index M = options_.num_memories;
    out->setZero(dG.rows(), dG.cols());
    if (options_.num_heads > 0) {
      Matrix<Scalar> k_side, q_side;
      AttentionDirection(s, dG, &k_side, &q_side);
      GemmOpInto<Scalar>(*out, params_.Block("W_K"), true, k_side, false, Scalar(-1), Scalar(1));
      GemmOpInto<Scalar>(*out, params_.Block("W_Q"), true, q_side, false, Scalar(-1), Scalar(1));
    }
    if (M > 0) {
      const auto xi = params_.Block("Xi");
      Matrix<Scalar> dS(M, dG.cols()), dR;
      GemmOpInto<Scalar>(dS, xi, true, dG, false);
      MemoryDirection(s, dS, &dR);
      GemmOpInto<Scalar>(*out, xi, false, dR, false, Scalar(-1), Scalar(1));
    }
  }

  /// The derivatives of QPt and KP (see Sample) along dG, all heads stacked:
  ///   k_side = d(Q_h P_h^T) = dQ_h P_h^T + Q_h dP_h^T,  q_side = d(K_h P_h) = dK_h P_h + K_h dP_h
  /// with dK = W_K dG, dQ = W_Q dG, dP_h = beta J_softmax(P_h) (dK_h^T Q_h + K_h^T dQ_h).
  /// dG may hold several samples side by side (the caches of SamplesForces):
  /// dK and dQ are one product each, the rest runs sample by sample.
  void AttentionDirection(const Sample& s, ConstMatrixRef<Scalar> dG, Matrix<Scalar>* k_side,
                          Matrix<Scalar>* q_side) const {
    const Index H = options_.num_heads, Y = options_.head_dim, N = options_.num_tokens, cols = dG.cols();
    Matrix<Scalar> dK(H * Y, cols), dQ(H * Y, cols);
    GemmOpInto<Scalar>(dK, params_.Block("W_K"), false, dG, false);
    GemmOpInto<Scalar>(dQ, params_.Block("W_Q"), false, dG, false);
    k_side->resize(H * Y, cols);
    q_side->resize(H * Y, cols);
    Matrix<Scalar> dA(N, N), dP(N, N);
    for (Index i = 0; i * N < cols; ++i) {
      for (Index h = 0; h < H; ++h) {
        const auto K = s.K.block(h * Y, i * N, Y, N), Q = s.Q.block(h * Y, i * N, Y, N);
        const auto dKh = dK.block(h * Y, i * N, Y, N), dQh = dQ.block(h * Y, i * N, Y, N);
        const auto P = s.P[h].middleCols(i * N, N);
        GemmOpInto<Scalar>(dA, dKh, true, Q, false);
        GemmOpInto<Scalar>(dA, K, true, dQh, false, Scalar(1), Scalar(1));
        internal::SoftmaxJacobianProduct<Scalar>(P, dA, dP);
        auto ks = k_side->block(h * Y, i * N, Y, N);
        auto qs = q_side->block(h * Y, i * N, Y, N);
        GemmOpInto<Scalar>(ks, dQh, false, P, true);
        GemmOpInto<Scalar>(ks, Q, false, dP, true, beta_, Scalar(1));
        GemmOpInto<Scalar>(qs, dKh, false, P, false);
        GemmOpInto<Scalar>(qs, K, false, dP, false, beta_, Scalar(1));
      }
    }
  }

  /// dR = d(ReLU or softmax of the memory scores) along dS.
  void MemoryDirection(const Sample& s, const Matrix<Scalar>& dS, Matrix<Scalar>* dR) const;

  /// flat += d/dtheta <dF/dG(G; theta), z> for W_K, W_Q, Xi (summed over the
  /// samples when s holds several: SamplesForces).
  void ForcesParameterVjp(const Sample& s, const Matrix<Scalar>& z, Vector<Scalar>* flat) const;

  Options options_;
  ParameterSet<Scalar> params_;
  Scalar beta_;
};

template <typename Scalar>
void EnergyTransformerForces<Scalar>::SamplesForces(
    Sample* s,
    Matrix<Scalar>* grad,
    Scalar* values) const {
  const Index N = options_.num_tokens, H = options_.num_heads, M = options_.num_memories,
              Y = options_.head_dim;
  const Matrix<Scalar>& G = s->g;
  const Index cols = G.cols(), count = cols / N;
  if (values) std::fill(values, values + count, Scalar(0));
  const Matrix<Scalar> no_mask;
  if (grad) grad->setZero(G.rows(), cols);
  if (H > 0) {
    // One product per projection for all heads and samples; the N x N
    // attention per sample and head. The products and softmaxes run the
    // CPU-dispatched kernels (core/gemm.h).
    const auto wk = params_.Block("W_K"), wq = params_.Block("W_Q");
    s->K.resize(H * Y, cols);
    s->Q.resize(H * Y, cols);
    GemmOpInto<Scalar>(s->K, wk, false, G, false);
    GemmOpInto<Scalar>(s->Q, wq, false, G, false);
    s->QPt.resize(H * Y, cols);
    s->KP.resize(H * Y, cols);
    s->P.resize(H);
    Vector<Scalar> lse(cols);
    for (Index h = 0; h < H; ++h) {
      // The scores of every sample side by side (sample i's N x N in columns
      // i*N ..), one softmax pass over all of them, then the two products.
      Matrix<Scalar>& P = s->P[h];
      P.resize(N, cols);
      for (Index i = 0; i < count; ++i) {
        const auto K = s->K.block(h * Y, i * N, Y, N), Q = s->Q.block(h * Y, i * N, Y, N);
        GemmOpInto<Scalar>(P.middleCols(i * N, N), K, true, Q, false, beta_);  // scores (B, C)
        if (options_.exclude_self) {
          P.middleCols(i * N, N).diagonal().setConstant(-std::numeric_limits<Scalar>::infinity());
        }
      }
      ScaledColumnSoftmaxInPlace<Scalar>(P, Scalar(1), no_mask, lse.data(), "EnergyTransformer");
      for (Index i = 0; i < count; ++i) {
        const auto K = s->K.block(h * Y, i * N, Y, N), Q = s->Q.block(h * Y, i * N, Y, N);
        const auto Pi = P.middleCols(i * N, N);
        if (values) values[i] -= lse.segment(i * N, N).sum() / beta_;
        GemmOpInto<Scalar>(s->QPt.block(h * Y, i * N, Y, N), Q, false, Pi, true);
        GemmOpInto<Scalar>(s->KP.block(h * Y, i * N, Y, N), K, false, Pi, false);
      }
    }
    // dF/dG = -sum_h (W_K[h]^T Q_h P_h^T + W_Q[h]^T K_h P_h).
    if (grad) {
      GemmOpInto<Scalar>(*grad, wk, true, s->QPt, false, Scalar(-1), Scalar(1));
      GemmOpInto<Scalar>(*grad, wq, true, s->KP, false, Scalar(-1), Scalar(1));
    }
  }
  if (M > 0) {
    const auto xi = params_.Block("Xi");
    s->S.resize(M, cols);
    GemmOpInto<Scalar>(s->S, xi, true, G, false);
    if (options_.memory == EnergyTransformerMemory::kRelu) {
      s->R = s->S.cwiseMax(Scalar(0));
      if (values) {
        for (Index i = 0; i < count; ++i) values[i] -= Scalar(0.5) * s->R.middleCols(i * N, N).squaredNorm();
      }
    } else {
      const Scalar bm = static_cast<Scalar>(options_.memory_beta);
      s->R = s->S;
      Vector<Scalar> memory_lse(cols);
      ScaledColumnSoftmaxInPlace<Scalar>(s->R, bm, no_mask, memory_lse.data(), "EnergyTransformer");
      if (values) {
        for (Index i = 0; i < count; ++i) values[i] -= memory_lse.segment(i * N, N).sum() / bm;
      }
    }
    if (grad) GemmOpInto<Scalar>(*grad, xi, false, s->R, false, Scalar(-1), Scalar(1));
  }
}

template <typename Scalar>
void EnergyTransformerForces<Scalar>::MemoryDirection(
    const Sample& s,
    const Matrix<Scalar>& dS,
    Matrix<Scalar>* dR) const {
  if (options_.memory == EnergyTransformerMemory::kRelu) {
    *dR = (s.S.array() > Scalar(0)).select(dS.array(), Scalar(0)).matrix();
  } else {
    dR->resize(dS.rows(), dS.cols());
    internal::SoftmaxJacobianProduct<Scalar>(s.R, dS, *dR);
    *dR *= static_cast<Scalar>(options_.memory_beta);
  }
}

template <typename Scalar>
void EnergyTransformerForces<Scalar>::ForcesParameterVjp(
    const Sample& s,
    const Matrix<Scalar>& z,
    Vector<Scalar>* flat) const {
  const Index M = options_.num_memories;
  const Matrix<Scalar>& G = s.g;
  if (options_.num_heads > 0) {
    // dF/dW_K[h] = -Q_h P_h^T G^T, dF/dW_Q[h] = -K_h P_h G^T; differentiate along G -> z.
    Matrix<Scalar> k_side, q_side;
    AttentionDirection(s, z, &k_side, &q_side);
    auto gk = params_.BlockOf(*flat, "W_K");
    auto gq = params_.BlockOf(*flat, "W_Q");
    GemmOpInto<Scalar>(gk, k_side, false, G, true, Scalar(-1), Scalar(1));
    GemmOpInto<Scalar>(gk, s.QPt, false, z, true, Scalar(-1), Scalar(1));
    GemmOpInto<Scalar>(gq, q_side, false, G, true, Scalar(-1), Scalar(1));
    GemmOpInto<Scalar>(gq, s.KP, false, z, true, Scalar(-1), Scalar(1));
  }
  if (M > 0) {
    // dF/dXi = -G R^T; differentiate along G -> z.
    const auto xi = params_.Block("Xi");
    Matrix<Scalar> dS(M, z.cols()), dR;
    GemmOpInto<Scalar>(dS, xi, true, z, false);
    MemoryDirection(s, dS, &dR);
    auto gxi = params_.BlockOf(*flat, "Xi");
    GemmOpInto<Scalar>(gxi, z, false, s.R, true, Scalar(-1), Scalar(1));
    GemmOpInto<Scalar>(gxi, G, false, dR, true, Scalar(-1), Scalar(1));
  }
}

}  // namespace internal

/// \cond INTERNAL
IMPLICIT_EXTERN_TEMPLATE_CLASS(internal::EnergyTransformerForces);
/// \endcond

}  // namespace implicit
