/// \file
/// The Energy Transformer block (Hoover et al., 2023) as an Energy: one
/// recurrent block whose forward pass descends a single scalar energy of the
/// tokens.
///
/// State layout. One sample is N tokens of dimension D, x_A in R^D. The sample's
/// column (length N*D) stores the tokens one after another: entries
/// [A*D, (A+1)*D) are token A. Equivalently the column is the D x N matrix
/// [x_1 ... x_N] (one token per column) stored column-major, or the N x D token
/// matrix stored row-major. EnergyTransformer::Tokens(col) gives that D x N view.
///
/// Energy (per sample), with g_A = LayerNorm(x_A) = gamma (x_A - mean) / s_A +
/// delta, s_A = sqrt(var(x_A) + eps) (scalar gamma > 0, delta):
///
/// \code{.unparsed}
///   E    = E_LN + E_ATT + E_HN
///   E_LN = sum_A (g_A . x_A - L(x_A)),  L(x_A) = D gamma s_A + delta sum_i x_Ai
///        = -sum_A D gamma eps / s_A     (the same number, computed this way)
///   E_ATT = -(1/beta) sum_h sum_C log sum_{B != C} exp(beta K_hB . Q_hC),
///           K_h = W_K[h] G, Q_h = W_Q[h] G  (W_K[h], W_Q[h]: Y x D),
///           beta = Options::beta, by default 1/sqrt(Y)
///           (Options::exclude_self = false keeps B = C in the sum)
///   E_HN = -0.5 sum_{B,mu} ReLU(xi_mu . g_B)^2      (EnergyTransformerMemory::kRelu)
///        or -(1/beta_m) sum_B log sum_mu exp(beta_m xi_mu . g_B)  (kSoftmax)
/// \endcode
///
/// With F = E_ATT + E_HN a function of G, g = grad L (L is convex for gamma > 0)
/// and M_A = dg_A/dx_A = hess L (symmetric, PSD):
/// \code{.unparsed}
///   DescentDirection  dE/dg = x + dF/dG            (the ET dynamics direction)
///   Gradient          dE/dx = M (x + dF/dG)        per token
///   dE/dt along x' = -dE/dg is -(dE/dg)^T M (dE/dg) <= 0: the energy never
///   increases along x <- x - a dE/dg for small enough a. (dE/dg vanishes where
///   dE/dx does, up to the null direction 1 of M per token: LayerNorm ignores
///   shifts of a token.)
///   HessianVectorProduct  exact closed form: dM[v] (x + dF/dG) + M (v + H_F (M v)),
///   H_F the Hessian of F in G; no finite differences, no dual numbers.
/// \endcode
///
/// Parameters (ParameterSet, in this order): "W_K" and "W_Q" ((H*Y) x D: rows
/// h*Y .. h*Y+Y-1 are head h; absent when num_heads = 0), "Xi" (D x M, one
/// memory per column; absent when num_memories = 0), and "gamma", "delta"
/// (1 x 1 each) when Options::learnable_layer_norm. ParameterVectorJacobianProduct
/// gives d/dtheta sum_b <dE/dx(x_b), u_b> in closed form.
///
/// GradientAndValue gives E with dE/dx in one pass per sample. The first-order
/// evaluations (Value, Gradient, DescentDirection and their one-pass forms)
/// run blocks of consecutive samples side by side, the shared projections one
/// product per block (docs/performance.md, "Blocks of samples"); the results do
/// not depend on the thread count. The plain energy
/// has no per-sample data (SupportsSubsets() is true: a solver may evaluate any
/// subset of the batch's columns); ClampedEnergy's clamps are per sample (false).
///
/// The fixed-point map of the ET dynamics, with clamped tokens for image
/// completion, is EnergyTransformerMap (energy_transformer_map.h).
///
/// \code
///   implicit::EnergyTransformer<double>::Options o;
///   o.num_tokens = 16; o.token_dim = 32; o.num_heads = 4; o.head_dim = 8;
///   o.num_memories = 64;                       // ReLU^2 Hopfield memory
///   implicit::EnergyTransformer<double> et(o); // random init, see Initialize()
///   implicit::Matrix<double> x = ...;          // (16*32) x B, token-major
///   implicit::Matrix<double> d(x.rows(), x.cols());
///   for (int t = 0; t < 20; ++t) { et.DescentDirection(x, d); x -= 0.1 * d; }
/// \endcode
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/parallel_for.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#include <implicit/layers/energy_transformer_options.h>
#include <implicit/layers/energy_transformer_token_norm.h>

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace implicit {

/// The Energy Transformer block as an Energy of the tokens: E = E_LN + E_ATT +
/// E_HN over the token-major state (N*D x B), with the closed-form Hessian and
/// parameter products, and the residual r = dE/dg of its dynamics (the file
/// comment has the formulas and the parameter blocks).
template <typename Scalar>
class EnergyTransformer : public Energy<Scalar>, private internal::EnergyTransformerTokenNorm<Scalar> {
  using Base = internal::EnergyTransformerTokenNorm<Scalar>;

 public:
  /// The options (EnergyTransformerOptions).
  using Options = EnergyTransformerOptions;

  /// Parameters start as N(0, 1/D) entries (seed 0); see Initialize().
  /// \throws std::invalid_argument when the options are invalid.
  explicit EnergyTransformer(const Options& options) : Base(options) {
    Initialize(0, 1.0 / std::sqrt(static_cast<double>(options.token_dim)));
  }

  /// Redraws W_K, W_Q and Xi with i.i.d. N(0, stddev^2) entries (gamma and
  /// delta are left alone).
  void Initialize(unsigned seed, double stddev);

  /// The options the energy was built with.
  const Options& options() const { return options_; }
  /// The number of tokens N per sample.
  Index num_tokens() const { return options_.num_tokens; }
  /// The dimension D of one token.
  Index token_dim() const { return options_.token_dim; }
  Index dimension() const override { return options_.num_tokens * options_.token_dim; }
  /// The attention inverse temperature beta in use (Options::beta, or
  /// 1/sqrt(head_dim) when that is 0).
  Scalar beta() const { return beta_; }
  ///@{
  /// The LayerNorm gain and bias, and the D x N token view of one sample's
  /// column (token A = column A): energy_transformer_token_norm.h.
  using Base::delta;
  using Base::gamma;
  using Base::Tokens;
  ///@}

  /// g = LayerNorm(x) token by token (same layout as x).
  /// \throws std::invalid_argument when x is not (N*D) x B (B >= 1) or g is
  ///   not its shape.
  void LayerNorm(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> g) const;

  void Value(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const override;

  /// dE/dg = x + dF/dG: the direction of the Energy Transformer dynamics.
  void DescentDirection(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out) const override;

  void Gradient(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const override;

  /// dE/dx and E from one pass over each sample (the softmaxes' log-sum-exps
  /// come with them).
  void GradientAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override;
  /// dE/dg and E from one pass over each sample (the dynamics' map with the
  /// energy its guard needs: the softmaxes are computed once).
  void DescentDirectionAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                                VectorRef<Scalar> values) const override;
  /// x - dE/dx (Energy's default CCCP update) and E in one pass.
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override {
    GradientAndValue(x, out, values);
    out = x - out;
  }
  /// Each sample's energy depends on its own tokens only (no per-sample
  /// inputs): any subset of a batch's columns may be evaluated. (ClampedEnergy,
  /// which clamps per sample, may not.)
  bool SupportsSubsets() const override { return true; }

  void HessianVectorProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override;

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return &params_; }
  /// The trainable parameters ("W_K", "W_Q", "Xi", and "gamma", "delta" when
  /// learnable_layer_norm; the file comment has their shapes).
  const ParameterSet<Scalar>& parameter_set() const { return params_; }

  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override;

  // ---- The dynamics' residual r(x) = dE/dg = x + dF/dG(LayerNorm(x)) ------
  // Its zeros are the fixed points of the ET dynamics x <- x - a r(x), and,
  // unlike grad E = 0 (which leaves each token's mean free: E is invariant to
  // shifting a token), they are isolated, so implicit differentiation uses r
  // (EnergyTransformerMap below). dr/dx = I + H_F M is not symmetric.

  /// out = (dr/dx) v = v + H_F (M v).
  /// \throws std::invalid_argument when x is not (N*D) x B (B >= 1) or v or
  ///   out is not its shape.
  void DescentJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                              MatrixRef<Scalar> out) const;
  /// out = (dr/dx)^T u = u + M (H_F u).
  /// \throws std::invalid_argument when x is not (N*D) x B (B >= 1) or u or
  ///   out is not its shape.
  void DescentJacobianTransposeProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                       MatrixRef<Scalar> out) const;
  /// The caches of dr/dx at a batch point x (each sample's LayerNorm and
  /// attention), made once for many products there (EnergyTransformerMap::
  /// Linearize: the backward pass's adjoint solve). Opaque.
  class DescentPoint;
  /// The caches at x, valid while the parameters do not change.
  /// \throws std::invalid_argument when x is not (N*D) x B (B >= 1).
  std::shared_ptr<const DescentPoint> LinearizeDescent(ConstMatrixRef<Scalar> x) const;
  /// DescentJacobianProduct at the point of `at` (v, out: its shape); the
  /// products only, what the x overload computes after the caches.
  /// \throws std::invalid_argument when v or out is not the point's shape.
  void DescentJacobianProduct(const DescentPoint& at, ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const;
  /// DescentJacobianTransposeProduct at the point of `at`.
  /// \throws std::invalid_argument when u or out is not the point's shape.
  void DescentJacobianTransposeProduct(const DescentPoint& at, ConstMatrixRef<Scalar> u,
                                       MatrixRef<Scalar> out) const;
  /// out = d/dtheta sum_b <r(x_b; theta), u_b>   (num_parameters() x 1).
  /// \throws std::invalid_argument when x is not (N*D) x B (B >= 1), u is not
  ///   its shape or out does not have num_parameters() entries.
  void DescentParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                             VectorRef<Scalar> out) const;

 private:
  using typename Base::Sample;
  using Base::beta_;
  using Base::options_;
  using Base::params_;
  /// The attention and memory terms F (energy_transformer_forces.h).
  using Base::ForcesHvp;
  using Base::ForcesParameterVjp;
  using Base::SamplesForces;
  /// The token LayerNorm and its chain rule (energy_transformer_token_norm.h).
  using Base::ApplyM;
  using Base::DerivativeOfM;
  using Base::LayerNormEnergy;
  using Base::NormalizeSamples;
  using Base::Out;

  void CheckProduct(const char* function, ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                    MatrixRef<Scalar> out) const {
    const std::string name = std::string("EnergyTransformer::") + function;
    internal::CheckBatch((name + "(x)").c_str(), x, dimension());
    internal::CheckShape((name + "(v)").c_str(), v, x.rows(), x.cols());
    internal::CheckShape((name + "(out)").c_str(), out, x.rows(), x.cols());
  }

  /// (dr/dx) v (transpose: (dr/dx)^T v) block by block, from the caches of
  /// `at` or, when at == nullptr, from each block of x's caches made here.
  void DescentColumns(const DescentPoint* at, ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                      MatrixRef<Scalar> out, bool transpose) const;
  void CheckPointProduct(const char* function, const DescentPoint& at, ConstMatrixRef<Scalar> v,
                         MatrixRef<Scalar> out) const;

  /// A thread's scratch in the block loops: the caches of a block of samples
  /// side by side (Sample of D x (count*N)), r = dE/dg, a direction v, the
  /// products a .. d, and the energies.
  struct BlockWork {
    Sample s;
    Matrix<Scalar> r, v, a, b, c, d;
    Vector<Scalar> values;
  };
  /// The most token columns (samples times tokens) in one block of
  /// ForEachBlock: a block's caches stay in a core's cache, and its
  /// projections are products of up to 512 columns, not of one sample's N.
  static constexpr Index kBlockTokens = 512;
  /// The blocks a batch is cut into where it has that many samples, so that
  /// up to 16 threads share even a small batch.
  static constexpr Index kMinBlocks = 16;
  /// The samples in each block of a batch of `cols` (the last may hold
  /// fewer): cols / kMinBlocks rounded up, at most kBlockTokens / N; from cols
  /// and N only, so that results do not depend on the thread count.
  Index BlockWidth(Index cols) const {
    const Index most = std::max<Index>(1, kBlockTokens / options_.num_tokens);
    return std::clamp<Index>((cols + kMinBlocks - 1) / kMinBlocks, 1, most);
  }
  /// The number of blocks of BlockWidth(cols) samples that cover cols samples.
  Index BlockCount(Index cols) const {
    const Index width = BlockWidth(cols);
    return (cols + width - 1) / width;
  }
  /// body(k, first, count, &work) for the blocks k of consecutive samples
  /// [first, first + count) that cover cols samples (BlockWidth), on at most
  /// max_threads of Eigen's threads (one inside a caller's own parallel
  /// region) with a BlockWork each; with max_threads = 1, in order on the
  /// calling thread. The first exception a block throws is rethrown after
  /// the loop.
  template <typename Body>
  void ForEachBlock(Index cols, const Body& body, int max_threads = Eigen::nbThreads()) const {
    const Index width = BlockWidth(cols), blocks = BlockCount(cols);
    const int threads = static_cast<int>(std::clamp<Index>(blocks, 1, std::max(1, max_threads)));
    std::vector<BlockWork> work(static_cast<std::size_t>(threads));
    internal::ParallelFor(blocks, threads, [&](Index k, int thread) {
      body(k, k * width, std::min(width, cols - k * width), &work[static_cast<std::size_t>(thread)]);
    });
  }

  /// *out = columns first .. first + count - 1 of m (each a sample's D x N
  /// tokens) side by side, D x (count*N).
  void GatherSamples(ConstMatrixRef<Scalar> m, Index first, Index count, Matrix<Scalar>* out) const {
    const Index N = options_.num_tokens;
    out->resize(options_.token_dim, count * N);
    for (Index i = 0; i < count; ++i) out->middleCols(i * N, N) = Tokens(m.col(first + i).data());
  }
  /// Writes sample i of a block's D x (count*N) matrix m to column `column` of out.
  void OutSample(MatrixRef<Scalar> out, Index column, const Matrix<Scalar>& m, Index i) const {
    Out(out, column) = m.middleCols(i * options_.num_tokens, options_.num_tokens);
  }

  /// w->r = x + dF/dG for the samples first .. first + count - 1 of x (side
  /// by side, D x (count*N)) with their caches in w->s, and their energies in
  /// w->values when with_value.
  void BlockResidual(ConstMatrixRef<Scalar> x, Index first, Index count, BlockWork* w, bool with_value) const {
    const Index N = options_.num_tokens;
    NormalizeSamples(x, first, count, &w->s);
    w->values.resize(count);
    SamplesForces(&w->s, &w->r, with_value ? w->values.data() : nullptr);
    for (Index i = 0; i < count; ++i) {
      w->r.middleCols(i * N, N) += Tokens(x.col(first + i).data());
      if (with_value) w->values(i) += LayerNormEnergy(w->s, i);
    }
  }

  /// w->b = (dr/dx) w->v, or (dr/dx)^T w->v when transpose, for the block of
  /// samples whose caches s holds (w->v the same shape as s.g).
  void DescentBlock(const Sample& s, BlockWork* w, bool transpose) const {
    if (transpose) {
      ForcesHvp(s, w->v, &w->a);
      ApplyM(s, w->a, gamma(), &w->b);
    } else {
      ApplyM(s, w->v, gamma(), &w->a);
      ForcesHvp(s, w->a, &w->b);
    }
    w->b += w->v;
  }
};

template <typename Scalar>
void EnergyTransformer<Scalar>::Initialize(unsigned seed, double stddev) {
  this->DrawWeights(seed, stddev);
}

template <typename Scalar>
void EnergyTransformer<Scalar>::LayerNorm(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> g) const {
  internal::CheckBatch("EnergyTransformer::LayerNorm(x)", x, dimension());
  internal::CheckShape("EnergyTransformer::LayerNorm(g)", g, x.rows(), x.cols());
  ForEachBlock(x.cols(), [&](Index, Index first, Index count, BlockWork* w) {
    NormalizeSamples(x, first, count, &w->s);
    for (Index i = 0; i < count; ++i) OutSample(g, first + i, w->s.g, i);
  });
}

template <typename Scalar>
void EnergyTransformer<Scalar>::Value(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const {
  internal::CheckBatch("EnergyTransformer::Value(x)", x, dimension());
  internal::CheckShape("EnergyTransformer::Value(values)", values, x.cols(), 1);
  ForEachBlock(x.cols(), [&](Index, Index first, Index count, BlockWork* w) {
    NormalizeSamples(x, first, count, &w->s);
    w->values.resize(count);
    SamplesForces(&w->s, nullptr, w->values.data());
    for (Index i = 0; i < count; ++i) values(first + i) = LayerNormEnergy(w->s, i) + w->values(i);
  });
}

template <typename Scalar>
void EnergyTransformer<Scalar>::DescentDirection(
    ConstMatrixRef<Scalar> x,
    MatrixRef<Scalar> out) const {
  internal::CheckBatch("EnergyTransformer::DescentDirection(x)", x, dimension());
  internal::CheckShape("EnergyTransformer::DescentDirection(out)", out, x.rows(), x.cols());
  ForEachBlock(x.cols(), [&](Index, Index first, Index count, BlockWork* w) {
    BlockResidual(x, first, count, w, /*with_value=*/false);
    for (Index i = 0; i < count; ++i) OutSample(out, first + i, w->r, i);
  });
}

template <typename Scalar>
void EnergyTransformer<Scalar>::Gradient(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const {
  internal::CheckBatch("EnergyTransformer::Gradient(x)", x, dimension());
  internal::CheckShape("EnergyTransformer::Gradient(grad)", grad, x.rows(), x.cols());
  ForEachBlock(x.cols(), [&](Index, Index first, Index count, BlockWork* w) {
    BlockResidual(x, first, count, w, /*with_value=*/false);
    ApplyM(w->s, w->r, gamma(), &w->a);
    for (Index i = 0; i < count; ++i) OutSample(grad, first + i, w->a, i);
  });
}

template <typename Scalar>
void EnergyTransformer<Scalar>::GradientAndValue(
    ConstMatrixRef<Scalar> x,
    MatrixRef<Scalar> grad,
    VectorRef<Scalar> values) const {
  internal::CheckBatch("EnergyTransformer::GradientAndValue(x)", x, dimension());
  internal::CheckShape("EnergyTransformer::GradientAndValue(grad)", grad, x.rows(), x.cols());
  internal::CheckShape("EnergyTransformer::GradientAndValue(values)", values, x.cols(), 1);
  ForEachBlock(x.cols(), [&](Index, Index first, Index count, BlockWork* w) {
    BlockResidual(x, first, count, w, /*with_value=*/true);
    ApplyM(w->s, w->r, gamma(), &w->a);
    for (Index i = 0; i < count; ++i) {
      OutSample(grad, first + i, w->a, i);
      values(first + i) = w->values(i);
    }
  });
}

template <typename Scalar>
void EnergyTransformer<Scalar>::DescentDirectionAndValue(
    ConstMatrixRef<Scalar> x,
    MatrixRef<Scalar> out,
    VectorRef<Scalar> values) const {
  internal::CheckBatch("EnergyTransformer::DescentDirectionAndValue(x)", x, dimension());
  internal::CheckShape("EnergyTransformer::DescentDirectionAndValue(out)", out, x.rows(), x.cols());
  internal::CheckShape("EnergyTransformer::DescentDirectionAndValue(values)", values, x.cols(), 1);
  ForEachBlock(x.cols(), [&](Index, Index first, Index count, BlockWork* w) {
    BlockResidual(x, first, count, w, /*with_value=*/true);
    for (Index i = 0; i < count; ++i) {
      OutSample(out, first + i, w->r, i);
      values(first + i) = w->values(i);
    }
  });
}

template <typename Scalar>
void EnergyTransformer<Scalar>::HessianVectorProduct(
    ConstMatrixRef<Scalar> x,
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> out) const {
  CheckProduct("HessianVectorProduct", x, v, out);
  ForEachBlock(x.cols(), [&](Index, Index first, Index count, BlockWork* w) {
    BlockResidual(x, first, count, w, /*with_value=*/false);
    GatherSamples(v, first, count, &w->v);
    DescentBlock(w->s, w, /*transpose=*/false);  // dr = v + H_F M v
    ApplyM(w->s, w->b, gamma(), &w->c);          // M dr
    DerivativeOfM(w->s, w->v, w->r, &w->d);      // dM[v] r
    w->c += w->d;
    for (Index i = 0; i < count; ++i) OutSample(out, first + i, w->c, i);
  });
}

template <typename Scalar>
void EnergyTransformer<Scalar>::ParameterVectorJacobianProduct(
    ConstMatrixRef<Scalar> x,
    ConstMatrixRef<Scalar> u,
    VectorRef<Scalar> out) const {
  internal::CheckBatch("EnergyTransformer::ParameterVectorJacobianProduct(x)", x, dimension());
  internal::CheckShape("EnergyTransformer::ParameterVectorJacobianProduct(u)", u, x.rows(),
                       x.cols());
  internal::CheckShape("EnergyTransformer::ParameterVectorJacobianProduct(out)", out,
                       num_parameters(), 1);
  // Block by block, in order on one thread (the sums over samples in a fixed
  // order); a block's parameter products sum over its samples' columns.
  Vector<Scalar> flat = Vector<Scalar>::Zero(num_parameters());
  ForEachBlock(
      x.cols(),
      [&](Index, Index first, Index count, BlockWork* w) {
        BlockResidual(x, first, count, w, /*with_value=*/false);
        GatherSamples(u, first, count, &w->v);
        ApplyM(w->s, w->v, gamma(), &w->a);  // <M r, u> = <r, M u>: r's parameters see z = M u
        const Matrix<Scalar>& z = w->a;
        ForcesParameterVjp(w->s, z, &flat);
        if (options_.learnable_layer_norm) {
          // d/dgamma <M r, u> = <M|_{gamma=1} r, u> + <H_F dG/dgamma, M u>, dG/dgamma = xhat.
          ApplyM(w->s, w->v, Scalar(1), &w->b);
          ForcesHvp(w->s, w->s.xhat, &w->c);
          params_.BlockOf(flat, "gamma")(0, 0) += (w->r.array() * w->b.array()).sum() +
                                                   (w->c.array() * z.array()).sum();
          // d/ddelta: dG/ddelta = 1 (every entry).
          ForcesHvp(w->s, Matrix<Scalar>::Ones(w->s.g.rows(), w->s.g.cols()), &w->c);
          params_.BlockOf(flat, "delta")(0, 0) += (w->c.array() * z.array()).sum();
        }
      },
      /*max_threads=*/1);
  out = flat;
}

/// \cond INTERNAL
template <typename Scalar>
class EnergyTransformer<Scalar>::DescentPoint {
 public:
  std::vector<Sample> blocks;  ///< the caches of each block of samples (ForEachBlock)
  Index rows = 0, batch = 0;
};
/// \endcond

template <typename Scalar>
void EnergyTransformer<Scalar>::DescentColumns(const DescentPoint* at, ConstMatrixRef<Scalar> x,
                                               ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out,
                                               bool transpose) const {
  ForEachBlock(v.cols(), [&](Index k, Index first, Index count, BlockWork* w) {
    if (at == nullptr) {
      NormalizeSamples(x, first, count, &w->s);
      SamplesForces(&w->s, nullptr, nullptr);
    }
    GatherSamples(v, first, count, &w->v);
    DescentBlock(at != nullptr ? at->blocks[static_cast<std::size_t>(k)] : w->s, w, transpose);
    for (Index i = 0; i < count; ++i) OutSample(out, first + i, w->b, i);
  });
}

template <typename Scalar>
void EnergyTransformer<Scalar>::CheckPointProduct(const char* function, const DescentPoint& at,
                                                  ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const {
  const std::string name = std::string("EnergyTransformer::") + function;
  internal::CheckShape((name + "(direction)").c_str(), v, at.rows, at.batch);
  internal::CheckShape((name + "(out)").c_str(), out, at.rows, at.batch);
}

template <typename Scalar>
void EnergyTransformer<Scalar>::DescentJacobianProduct(
    ConstMatrixRef<Scalar> x,
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> out) const {
  CheckProduct("DescentJacobianProduct", x, v, out);
  DescentColumns(nullptr, x, v, out, /*transpose=*/false);
}

template <typename Scalar>
void EnergyTransformer<Scalar>::DescentJacobianTransposeProduct(
    ConstMatrixRef<Scalar> x,
    ConstMatrixRef<Scalar> u,
    MatrixRef<Scalar> out) const {
  CheckProduct("DescentJacobianTransposeProduct", x, u, out);
  DescentColumns(nullptr, x, u, out, /*transpose=*/true);
}

template <typename Scalar>
std::shared_ptr<const typename EnergyTransformer<Scalar>::DescentPoint>
EnergyTransformer<Scalar>::LinearizeDescent(ConstMatrixRef<Scalar> x) const {
  internal::CheckBatch("EnergyTransformer::LinearizeDescent(x)", x, dimension());
  auto point = std::make_shared<DescentPoint>();
  point->rows = x.rows();
  point->batch = x.cols();
  point->blocks.resize(static_cast<std::size_t>(BlockCount(x.cols())));
  ForEachBlock(x.cols(), [&](Index k, Index first, Index count, BlockWork*) {
    Sample& s = point->blocks[static_cast<std::size_t>(k)];
    NormalizeSamples(x, first, count, &s);
    SamplesForces(&s, nullptr, nullptr);
  });
  return point;
}

template <typename Scalar>
void EnergyTransformer<Scalar>::DescentJacobianProduct(const DescentPoint& at, ConstMatrixRef<Scalar> v,
                                                       MatrixRef<Scalar> out) const {
  CheckPointProduct("DescentJacobianProduct", at, v, out);
  DescentColumns(&at, v, v, out, /*transpose=*/false);
}

template <typename Scalar>
void EnergyTransformer<Scalar>::DescentJacobianTransposeProduct(const DescentPoint& at, ConstMatrixRef<Scalar> u,
                                                                MatrixRef<Scalar> out) const {
  CheckPointProduct("DescentJacobianTransposeProduct", at, u, out);
  DescentColumns(&at, u, u, out, /*transpose=*/true);
}

template <typename Scalar>
void EnergyTransformer<Scalar>::DescentParameterVectorJacobianProduct(
    ConstMatrixRef<Scalar> x,
    ConstMatrixRef<Scalar> u,
    VectorRef<Scalar> out) const {
  internal::CheckBatch("EnergyTransformer::DescentParameterVectorJacobianProduct(x)", x,
                       dimension());
  internal::CheckShape("EnergyTransformer::DescentParameterVectorJacobianProduct(u)", u,
                       x.rows(), x.cols());
  internal::CheckShape("EnergyTransformer::DescentParameterVectorJacobianProduct(out)", out,
                       num_parameters(), 1);
  Vector<Scalar> flat = Vector<Scalar>::Zero(num_parameters());
  ForEachBlock(
      x.cols(),
      [&](Index, Index first, Index count, BlockWork* w) {  // in order, as ParameterVectorJacobianProduct
        NormalizeSamples(x, first, count, &w->s);
        SamplesForces(&w->s, nullptr, nullptr);
        GatherSamples(u, first, count, &w->v);
        ForcesParameterVjp(w->s, w->v, &flat);
        if (options_.learnable_layer_norm) {
          // dG/dgamma = xhat, dG/ddelta = 1; H_F symmetric.
          ForcesHvp(w->s, w->v, &w->c);
          params_.BlockOf(flat, "gamma")(0, 0) += (w->c.array() * w->s.xhat.array()).sum();
          params_.BlockOf(flat, "delta")(0, 0) += w->c.sum();
        }
      },
      /*max_threads=*/1);
  out = flat;
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(EnergyTransformer);

}  // namespace implicit
