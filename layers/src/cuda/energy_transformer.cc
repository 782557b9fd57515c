// The Energy Transformer's dynamics on the device (cuda_energy_transformer.h).
#include <implicit/core/cuda_kernels.h>
#include <implicit/layers/cuda_energy_transformer.h>

#include "energy_transformer_kernels.h"

#include <cublas_v2.h>

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

namespace implicit {
namespace cuda {
namespace {

void Check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    std::ostringstream s;
    s << "cuBLAS error " << static_cast<int>(status) << " in cuda::EnergyTransformerMap: " << what;
    throw std::runtime_error(s.str());
  }
}

// C = alpha op(A) op(B) + beta C (column-major), and its strided-batched form.
cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                    const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  return cublasSgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}
cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, double alpha,
                    const double* a, int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  return cublasDgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}
cublasStatus_t Batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       float alpha, const float* a, int lda, long long sa, const float* b, int ldb, long long sb,
                       float beta, float* c, int ldc, long long sc, int count) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc, count);
}
cublasStatus_t Batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       double alpha, const double* a, int lda, long long sa, const double* b, int ldb, long long sb,
                       double beta, double* c, int ldc, long long sc, int count) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc, count);
}

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
void EnergyTransformerMap<Scalar>::Evaluate(Context& context, const Scalar* z, Index count, const int* columns,
                                            Scalar* out, Scalar* energy) const {
  if (count == 0) return;
  const EnergyTransformerOptions& o = et_.options();
  const int N = static_cast<int>(o.num_tokens), D = static_cast<int>(o.token_dim);
  const int H = static_cast<int>(o.num_heads), Y = static_cast<int>(o.head_dim);
  const int M = static_cast<int>(o.num_memories), c = static_cast<int>(count);
  const int n = N * D, T = N * c, HY = H * Y;
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
    const long long sample = static_cast<long long>(N) * HY, block = static_cast<long long>(N) * N;
    for (int h = 0; h < H; ++h) {
      Scalar* p = p_.data() + static_cast<long long>(h) * c * block;
      // scores(B, C) = beta K_h^T Q_h, every sample.
      Check(Batched(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, N, Y, beta, k_.data() + h * Y, HY, sample,
                    q_.data() + h * Y, HY, sample, Scalar(0), p, N, block, c),
            "beta K_h^T Q_h");
    }
    internal::EtAttentionSoftmax<Scalar>(stream, p_.data(), N, H * c, o.exclude_self, lse_.data());
    for (int h = 0; h < H; ++h) {
      const Scalar* p = p_.data() + static_cast<long long>(h) * c * block;
      Check(Batched(blas, CUBLAS_OP_N, CUBLAS_OP_T, Y, N, N, Scalar(1), q_.data() + h * Y, HY, sample, p, N, block,
                    Scalar(0), qpt_.data() + h * Y, HY, sample, c),
            "Q_h P_h^T");
      Check(Batched(blas, CUBLAS_OP_N, CUBLAS_OP_N, Y, N, N, Scalar(1), k_.data() + h * Y, HY, sample, p, N, block,
                    Scalar(0), kp_.data() + h * Y, HY, sample, c),
            "K_h P_h");
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
  const bool relu = o.memory == EnergyTransformerMemory::kRelu;
  if (M > 0) {
    scores_.Resize(M, T);
    Check(Gemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, M, T, D, Scalar(1), xi_.data(), D, g_.data(), D, Scalar(0),
               scores_.data(), M),
          "Xi^T G");
    if (relu) {
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
  internal::EtUpdate<Scalar>(stream, y, dfdg_.data(), step_, clamped_ ? mask_.data() : nullptr,
                             clamped_ ? values_.data() : nullptr, n, columns, c, out);
  if (energy != nullptr) {
    internal::EtEnergyTerms terms;
    terms.N = N;
    terms.D = D;
    terms.H = H;
    terms.M = M;
    terms.count = c;
    terms.gamma = static_cast<double>(et_.gamma());
    terms.eps = o.eps;
    terms.beta = static_cast<double>(beta);
    terms.memory_beta = o.memory_beta;
    terms.relu_memory = relu;
    internal::EtEnergy<Scalar>(stream, terms, s_.data(), H > 0 ? lse_.data() : nullptr,
                               M > 0 ? scores_.data() : nullptr, relu ? nullptr : lse_mem_.data(), energy);
    if (clamped_) {
      internal::EtClampPenalty<Scalar>(stream, z, mask_.data(), values_.data(), n, columns, c, energy);
    }
  }
}

template class EnergyTransformerMap<float>;
template class EnergyTransformerMap<double>;

}  // namespace cuda
}  // namespace implicit
