// cuBLAS calls with the scalar type overloaded (internal): the GEMMs of the
// GPU backend's maps and benchmarks, column-major as cuBLAS itself, with
// errors turned into std::runtime_error naming what was computed.
#pragma once

#ifndef IMPLICIT_WITH_CUDA
#error "implicit/core/cuda_blas.h needs libimplicit built with CUDA"
#endif

#include <cublas_v2.h>

#include <stdexcept>
#include <string>

namespace implicit {
namespace cuda {
namespace internal {

inline void CheckBlas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error("cuBLAS error " + std::to_string(static_cast<int>(status)) + " in " + what);
  }
}

// C = alpha op(A) op(B) + beta C.
inline cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           float alpha, const float* a, int lda, const float* b, int ldb, float beta, float* c,
                           int ldc) {
  return cublasSgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}
inline cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           double alpha, const double* a, int lda, const double* b, int ldb, double beta, double* c,
                           int ldc) {
  return cublasDgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}

// The same for `count` matrices, A, B and C advancing by sa, sb and sc elements.
inline cublasStatus_t GemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  float alpha, const float* a, int lda, long long sa, const float* b, int ldb,
                                  long long sb, float beta, float* c, int ldc, long long sc, int count) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc, count);
}
inline cublasStatus_t GemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  double alpha, const double* a, int lda, long long sa, const double* b, int ldb,
                                  long long sb, double beta, double* c, int ldc, long long sc, int count) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc, count);
}

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
