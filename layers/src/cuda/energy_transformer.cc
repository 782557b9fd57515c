// The Energy Transformer's dynamics on the device (cuda_energy_transformer.h).
#include <implicit/core/cuda_blas.h>
#include <implicit/core/cuda_kernels.h>
#include <implicit/layers/cuda_energy_transformer.h>

#include "energy_transformer_kernels.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace implicit {
namespace cuda {
namespace {

void Check(cublasStatus_t status, const char* what) {
  internal::CheckBlas(status, (std::string("cuda::EnergyTransformerMap: ") + what).c_str());
}
using internal::Gemm;
using internal::GemmBatched;

}  // namespace

template <typename Scalar>
EnergyTransformerMap<Scalar>::EnergyTransformerMap(Context& context, const implicit::EnergyTransformer<Scalar>& et,
                                                   Scalar step)
    : et_(et), step_(step) {
  if (!(step > Scalar(0)) || !std::isfinite(static_cast<double>(step))) {
    throw std::invalid_argument("cuda::EnergyTransformerMap: step must be finite and > 0, got " +
                                std::to_string(static_cast<double>(step)));
  }
  SyncParameters(context);
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::SyncParameters(Context& context) {
  const ParameterSet<Scalar>& p = et_.parameter_set();
  if (p.Contains("W_K")) {
    wk_.CopyFrom(context, p.Block("W_K"));
    wq_.CopyFrom(context, p.Block("W_Q"));
  }
  if (p.Contains("Xi")) xi_.CopyFrom(context, p.Block("Xi"));
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::SetClamp(Context& context, ConstMatrixRef<Scalar> free_mask,
                                            ConstMatrixRef<Scalar> values) {
  const Index n = dimension();
  if (free_mask.rows() != n || values.rows() != n || free_mask.cols() != values.cols() || free_mask.cols() < 1) {
    throw std::invalid_argument("cuda::EnergyTransformerMap::SetClamp: free_mask and values must both be " +
                                std::to_string(n) + " x B");
  }
  mask_.CopyFrom(context, free_mask);
  values_.CopyFrom(context, values);
  clamped_ = true;
}

template <typename Scalar>
typename EnergyTransformerMap<Scalar>::Shape EnergyTransformerMap<Scalar>::ShapeOf(Index count) const {
  const EnergyTransformerOptions& o = et_.options();
  Shape sh;
  sh.N = static_cast<int>(o.num_tokens);
  sh.D = static_cast<int>(o.token_dim);
  sh.H = static_cast<int>(o.num_heads);
  sh.Y = static_cast<int>(o.head_dim);
  sh.M = static_cast<int>(o.num_memories);
  sh.c = static_cast<int>(count);
  sh.n = sh.N * sh.D;
  sh.T = sh.N * sh.c;
  sh.HY = sh.H * sh.Y;
  return sh;
}

template <typename Scalar>
bool EnergyTransformerMap<Scalar>::FusedAttention() const {
  const EnergyTransformerOptions& o = et_.options();
  return internal::EtFusedAttentionFits(static_cast<int>(o.num_tokens), static_cast<int>(o.head_dim),
                                        static_cast<int>(sizeof(Scalar)));
}

// Heads too large for the fused kernels: per head, strided-batched GEMMs over
// the samples, and one softmax (Jacobian) kernel for all heads.
template <typename Scalar>
void EnergyTransformerMap<Scalar>::ForwardHeads(Context& context, const Shape& sh, Scalar beta) const {
  const int N = sh.N, H = sh.H, Y = sh.Y, c = sh.c, HY = sh.HY;
  const cudaStream_t stream = context.stream();
  const cublasHandle_t blas = context.cublas();
  for (int h = 0; h < H; ++h) {
    // scores(B, C) = beta K_h^T Q_h, every sample.
    Check(GemmBatched(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, N, Y, beta, k_.data() + h * Y, HY, sh.sample(),
                  q_.data() + h * Y, HY, sh.sample(), Scalar(0), Head(p_, h, sh), N, sh.block(), c),
          "beta K_h^T Q_h");
  }
  internal::EtAttentionSoftmax<Scalar>(stream, p_.data(), N, H * c, et_.options().exclude_self, lse_.data());
  for (int h = 0; h < H; ++h) {
    Check(GemmBatched(blas, CUBLAS_OP_N, CUBLAS_OP_T, Y, N, N, Scalar(1), q_.data() + h * Y, HY, sh.sample(),
                  Head(p_, h, sh), N, sh.block(), Scalar(0), qpt_.data() + h * Y, HY, sh.sample(), c),
          "Q_h P_h^T");
    Check(GemmBatched(blas, CUBLAS_OP_N, CUBLAS_OP_N, Y, N, N, Scalar(1), k_.data() + h * Y, HY, sh.sample(),
                  Head(p_, h, sh), N, sh.block(), Scalar(0), kp_.data() + h * Y, HY, sh.sample(), c),
          "K_h P_h");
  }
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::HvpHeads(Context& context, const Shape& sh, Scalar beta) const {
  const int N = sh.N, H = sh.H, Y = sh.Y, c = sh.c, HY = sh.HY;
  const cudaStream_t stream = context.stream();
  const cublasHandle_t blas = context.cublas();
  da_.Resize(static_cast<Index>(N) * N, static_cast<Index>(H) * c);
  for (int h = 0; h < H; ++h) {
    Check(GemmBatched(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, N, Y, Scalar(1), dk_.data() + h * Y, HY, sh.sample(),
                  q_.data() + h * Y, HY, sh.sample(), Scalar(0), Head(da_, h, sh), N, sh.block(), c),
          "dK_h^T Q_h");
    Check(GemmBatched(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, N, Y, Scalar(1), k_.data() + h * Y, HY, sh.sample(),
                  dq_.data() + h * Y, HY, sh.sample(), Scalar(1), Head(da_, h, sh), N, sh.block(), c),
          "K_h^T dQ_h");
  }
  internal::SoftmaxJacobianTranspose<Scalar>(stream, p_.data(), da_.data(), N, N * H * c);
  for (int h = 0; h < H; ++h) {
    Check(GemmBatched(blas, CUBLAS_OP_N, CUBLAS_OP_T, Y, N, N, Scalar(1), dq_.data() + h * Y, HY, sh.sample(),
                  Head(p_, h, sh), N, sh.block(), Scalar(0), ks_.data() + h * Y, HY, sh.sample(), c),
          "dQ_h P_h^T");
    Check(GemmBatched(blas, CUBLAS_OP_N, CUBLAS_OP_T, Y, N, N, beta, q_.data() + h * Y, HY, sh.sample(),
                  Head(da_, h, sh), N, sh.block(), Scalar(1), ks_.data() + h * Y, HY, sh.sample(), c),
          "beta Q_h dP_h^T");
    Check(GemmBatched(blas, CUBLAS_OP_N, CUBLAS_OP_N, Y, N, N, Scalar(1), dk_.data() + h * Y, HY, sh.sample(),
                  Head(p_, h, sh), N, sh.block(), Scalar(0), qs_.data() + h * Y, HY, sh.sample(), c),
          "dK_h P_h");
    Check(GemmBatched(blas, CUBLAS_OP_N, CUBLAS_OP_N, Y, N, N, beta, k_.data() + h * Y, HY, sh.sample(),
                  Head(da_, h, sh), N, sh.block(), Scalar(1), qs_.data() + h * Y, HY, sh.sample(), c),
          "beta K_h dP_h");
  }
}

template <typename Scalar>
const Scalar* EnergyTransformerMap<Scalar>::Forward(Context& context, const Scalar* z, Index count,
                                                    const int* columns) const {
  const EnergyTransformerOptions& o = et_.options();
  const Shape sh = ShapeOf(count);
  const int N = sh.N, D = sh.D, H = sh.H, Y = sh.Y, M = sh.M, c = sh.c, n = sh.n, T = sh.T, HY = sh.HY;
  if (clamped_ && columns == nullptr && count != mask_.cols()) {
    throw std::invalid_argument("cuda::EnergyTransformerMap: a clamped map evaluates batches of its clamp's " +
                                std::to_string(mask_.cols()) + " columns, got " + std::to_string(count));
  }
  const cudaStream_t stream = context.stream();
  const cublasHandle_t blas = context.cublas();

  // y: the state with the clamped coordinates set.
  const Scalar* y = z;
  if (clamped_) {
    y_.Resize(n, count);
    internal::EtMerge<Scalar>(stream, z, mask_.data(), values_.data(), n, columns, c, y_.data());
    y = y_.data();
  }
  xhat_.Resize(D, T);
  s_.Resize(1, T);
  g_.Resize(D, T);
  internal::EtLayerNorm<Scalar>(stream, y, D, T, et_.gamma(), et_.delta(), static_cast<Scalar>(o.eps), xhat_.data(),
                                s_.data(), g_.data());
  dfdg_.Resize(D, T);
  const Scalar beta = et_.beta();
  if (H > 0) {
    k_.Resize(HY, T);
    q_.Resize(HY, T);
    p_.Resize(static_cast<Index>(N) * N, static_cast<Index>(H) * c);
    lse_.Resize(N, static_cast<Index>(H) * c);
    qpt_.Resize(HY, T);
    kp_.Resize(HY, T);
    Check(Gemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, HY, T, D, Scalar(1), wk_.data(), HY, g_.data(), D, Scalar(0),
               k_.data(), HY),
          "K = W_K G");
    Check(Gemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, HY, T, D, Scalar(1), wq_.data(), HY, g_.data(), D, Scalar(0),
               q_.data(), HY),
          "Q = W_Q G");
    if (FusedAttention()) {
      internal::EtAttentionForward<Scalar>(stream, k_.data(), q_.data(), N, Y, H, c, beta, o.exclude_self, p_.data(),
                                           lse_.data(), qpt_.data(), kp_.data());
    } else {
      ForwardHeads(context, sh, beta);
    }
    // dF/dG = -(W_K^T Q P^T + W_Q^T K P) (all heads in one product each).
    Check(Gemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, D, T, HY, Scalar(-1), wk_.data(), HY, qpt_.data(), HY, Scalar(0),
               dfdg_.data(), D),
          "-W_K^T Q P^T");
    Check(Gemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, D, T, HY, Scalar(-1), wq_.data(), HY, kp_.data(), HY, Scalar(1),
               dfdg_.data(), D),
          "-W_Q^T K P");
  } else {
    dfdg_.SetZero(context);
  }
  if (M > 0) {
    scores_.Resize(M, T);
    Check(Gemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, M, T, D, Scalar(1), xi_.data(), D, g_.data(), D, Scalar(0),
               scores_.data(), M),
          "Xi^T G");
    if (relu_memory()) {
      internal::EtRelu<Scalar>(stream, scores_.data(), static_cast<long long>(M) * T, scores_.data());
    } else {
      lse_mem_.Resize(1, T);
      internal::SoftmaxColumns<Scalar>(stream, scores_.data(), M, T, static_cast<Scalar>(o.memory_beta),
                                       lse_mem_.data());
    }
    Check(Gemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, D, T, M, Scalar(-1), xi_.data(), D, scores_.data(), M, Scalar(1),
               dfdg_.data(), D),
          "-Xi R");
  }
  return y;
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::ForcesHvp(Context& context, const Scalar* v, Index count, Scalar* out) const {
  const Shape sh = ShapeOf(count);
  const int N = sh.N, D = sh.D, H = sh.H, Y = sh.Y, M = sh.M, c = sh.c, T = sh.T, HY = sh.HY;
  const cudaStream_t stream = context.stream();
  const cublasHandle_t blas = context.cublas();
  const Scalar beta = et_.beta();
  if (H > 0) {
    // dK = W_K v, dQ = W_Q v; per head and sample dA = dK^T Q + K^T dQ, dP = J_softmax(P) dA
    // (beta folded into the products below), ks = dQ P^T + beta Q dP^T, qs = dK P + beta K dP.
    dk_.Resize(HY, T);
    dq_.Resize(HY, T);
    ks_.Resize(HY, T);
    qs_.Resize(HY, T);
    Check(Gemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, HY, T, D, Scalar(1), wk_.data(), HY, v, D, Scalar(0), dk_.data(), HY),
          "dK = W_K v");
    Check(Gemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, HY, T, D, Scalar(1), wq_.data(), HY, v, D, Scalar(0), dq_.data(), HY),
          "dQ = W_Q v");
    if (FusedAttention()) {
      internal::EtAttentionHvp<Scalar>(stream, k_.data(), q_.data(), dk_.data(), dq_.data(), p_.data(), N, Y, H, c,
                                       beta, ks_.data(), qs_.data());
    } else {
      HvpHeads(context, sh, beta);
    }
    Check(Gemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, D, T, HY, Scalar(-1), wk_.data(), HY, ks_.data(), HY, Scalar(0), out,
               D),
          "-W_K^T ks");
    Check(Gemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, D, T, HY, Scalar(-1), wq_.data(), HY, qs_.data(), HY, Scalar(1), out,
               D),
          "-W_Q^T qs");
  } else {
    internal::Fill<Scalar>(stream, out, static_cast<long long>(D) * T, Scalar(0));
  }
  if (M > 0) {
    // dR = ReLU'(S) .* (Xi^T v), or J_softmax(R) (Xi^T v) with memory_beta folded below.
    ds_.Resize(M, T);
    Check(Gemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, M, T, D, Scalar(1), xi_.data(), D, v, D, Scalar(0), ds_.data(), M),
          "Xi^T v");
    if (relu_memory()) {
      internal::EtReluDerivative<Scalar>(stream, scores_.data(), static_cast<long long>(M) * T, ds_.data());
    } else {
      internal::SoftmaxJacobianTranspose<Scalar>(stream, scores_.data(), ds_.data(), M, T);
    }
    Check(Gemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, D, T, M, -MemoryScale(), xi_.data(), D, ds_.data(), M, Scalar(1), out,
               D),
          "-Xi dR");
  }
}

template <typename Scalar>
const Scalar* EnergyTransformerMap<Scalar>::MaskedDirection(Context& context, const Scalar* u, Index count,
                                                            const int* columns) const {
  if (!clamped_) return u;
  const int n = ShapeOf(count).n;
  w_.Resize(n, count);
  internal::EtMaskColumns<Scalar>(context.stream(), u, mask_.data(), n, columns, static_cast<int>(count), w_.data());
  return w_.data();
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::Evaluate(Context& context, const Scalar* z, Index count, const int* columns,
                                            Scalar* out, Scalar* energy) const {
  if (count == 0) return;
  const Scalar* y = Forward(context, z, count, columns);
  const Shape sh = ShapeOf(count);
  const cudaStream_t stream = context.stream();
  internal::EtUpdate<Scalar>(stream, y, dfdg_.data(), step_, clamped_ ? mask_.data() : nullptr,
                             clamped_ ? values_.data() : nullptr, sh.n, columns, sh.c, out);
  if (energy == nullptr) return;
  const EnergyTransformerOptions& o = et_.options();
  internal::EtEnergyTerms terms;
  terms.N = sh.N;
  terms.D = sh.D;
  terms.H = sh.H;
  terms.M = sh.M;
  terms.count = sh.c;
  terms.gamma = static_cast<double>(et_.gamma());
  terms.eps = o.eps;
  terms.beta = static_cast<double>(et_.beta());
  terms.memory_beta = o.memory_beta;
  terms.relu_memory = relu_memory();
  internal::EtEnergy<Scalar>(stream, terms, s_.data(), sh.H > 0 ? lse_.data() : nullptr,
                             sh.M > 0 ? scores_.data() : nullptr, relu_memory() ? nullptr : lse_mem_.data(), energy);
  if (clamped_) internal::EtClampPenalty<Scalar>(stream, z, mask_.data(), values_.data(), sh.n, columns, sh.c, energy);
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::VectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u,
                                                         Index count, const int* columns, Scalar* out) const {
  TransposeProduct(context, z, u, count, columns, false, out);
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::InputVectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u,
                                                              Index count, Scalar* out) const {
  if (!clamped_) throw std::logic_error("cuda::EnergyTransformerMap: no input without a clamp (SetClamp)");
  if (count != mask_.cols()) {
    throw std::invalid_argument("cuda::EnergyTransformerMap::InputVectorJacobianProduct: count must be the clamp's "
                                "batch " + std::to_string(mask_.cols()) + ", got " + std::to_string(count));
  }
  TransposeProduct(context, z, u, count, nullptr, true, out);
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::TransposeProduct(Context& context, const Scalar* z, const Scalar* u, Index count,
                                                    const int* columns, bool input, Scalar* out) const {
  if (count == 0) return;
  // J^T u = m .* v and J_c^T u = (1 - m) .* (v + u), v = w - a (M H_F w + w),
  // w = m .* u (no clamp: m = 1), at y.
  Forward(context, z, count, columns);
  const Shape sh = ShapeOf(count);
  const Scalar* w = MaskedDirection(context, u, count, columns);
  hf_.Resize(sh.D, sh.T);
  mh_.Resize(sh.D, sh.T);
  ForcesHvp(context, w, count, hf_.data());
  internal::EtLayerNormJacobian<Scalar>(context.stream(), xhat_.data(), s_.data(), et_.gamma(), hf_.data(), sh.D,
                                        sh.T, mh_.data());
  internal::EtVjpCombine<Scalar>(context.stream(), w, mh_.data(), step_, clamped_ ? mask_.data() : nullptr, sh.n,
                                 columns, sh.c, input ? u : nullptr, out);
}

template <typename Scalar>
void EnergyTransformerMap<Scalar>::ParameterVectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u,
                                                                  Index count, Scalar* out) const {
  if (et_.options().learnable_layer_norm) {
    throw std::invalid_argument(
        "cuda::EnergyTransformerMap: parameter products with learnable_layer_norm are not on the device yet");
  }
  const Shape sh = ShapeOf(count);
  const int D = sh.D, M = sh.M, T = sh.T, HY = sh.HY;
  const cudaStream_t stream = context.stream();
  internal::Fill<Scalar>(stream, out, num_parameters(), Scalar(0));
  if (count == 0) return;
  // a d/dtheta <-dF/dG(y), w>... = -a ForcesParameterVjp(y, w), w = m .* u:
  //   W_K: a (ks G^T + Q P^T w^T), W_Q: a (qs G^T + K P w^T), Xi: a (w R^T + G dR^T).
  Forward(context, z, count, nullptr);
  const Scalar* w = MaskedDirection(context, u, count, nullptr);
  hf_.Resize(D, T);
  ForcesHvp(context, w, count, hf_.data());  // fills ks, qs and dR along w
  const cublasHandle_t blas = context.cublas();
  const Scalar a = step_;
  Scalar* gk = out;
  Scalar* gq = out + static_cast<long long>(HY) * D;
  Scalar* gxi = out + (sh.H > 0 ? 2LL * HY * D : 0LL);
  if (sh.H > 0) {
    Check(Gemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, HY, D, T, a, ks_.data(), HY, g_.data(), D, Scalar(0), gk, HY),
          "ks G^T");
    Check(Gemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, HY, D, T, a, qpt_.data(), HY, w, D, Scalar(1), gk, HY), "Q P^T w^T");
    Check(Gemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, HY, D, T, a, qs_.data(), HY, g_.data(), D, Scalar(0), gq, HY),
          "qs G^T");
    Check(Gemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, HY, D, T, a, kp_.data(), HY, w, D, Scalar(1), gq, HY), "K P w^T");
  }
  if (M > 0) {
    Check(Gemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, D, M, T, a, w, D, scores_.data(), M, Scalar(0), gxi, D), "w R^T");
    Check(Gemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, D, M, T, a * MemoryScale(), g_.data(), D, ds_.data(), M, Scalar(1),
               gxi, D),
          "G dR^T");
  }
}

template class EnergyTransformerMap<float>;
template class EnergyTransformerMap<double>;

}  // namespace cuda
}  // namespace implicit
