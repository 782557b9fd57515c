/// \file
/// cuBLAS calls with the scalar type overloaded (internal): the GEMMs of the
/// GPU backend's maps and benchmarks, column-major as cuBLAS itself, with
/// errors turned into std::runtime_error naming what was computed.
///
/// cuBLAS is loaded when the first cuda::Context is made (dlopen of
/// `libcublas.so.<major>`, found as the dynamic loader finds libraries, else in
/// the CUDA toolkit's library folder of the build), not when a program
/// starts: its start-up work (about 0.1 s per process) is then paid only by
/// programs that use the GPU, and programs link libcudart alone.
///
/// \code
///   internal::CheckBlas(internal::Gemm(context.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, m, n, k,
///                                      1.0f, a, m, b, k, 0.0f, c, m), "scores");
/// \endcode
#pragma once

#ifndef IMPLICIT_WITH_CUDA
#error "implicit/core/cuda_blas.h needs libimplicit built with CUDA"
#endif

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace implicit {
namespace cuda {
namespace internal {

/// Throws std::runtime_error naming `what` and the status when `status` is not
/// CUBLAS_STATUS_SUCCESS.
inline void CheckBlas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error("cuBLAS error " + std::to_string(static_cast<int>(status)) + " in " + what);
  }
}

/// Loads cuBLAS if it is not loaded yet; std::runtime_error saying what is
/// missing when the library or one of its functions cannot be found.
/// Thread-safe; every function below calls it.
void LoadCublas();

/// A handle working on `stream`, with TF32 tensor-core GEMMs when allow_tf32
/// (else cuBLAS's default math); DestroyHandle releases it.
cublasHandle_t CreateHandle(cudaStream_t stream, bool allow_tf32);
/// Releases a handle made by CreateHandle.
void DestroyHandle(cublasHandle_t handle);

///@{
/// C = alpha op(A) op(B) + beta C.
cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    float alpha, const float* a, int lda, const float* b, int ldb, float beta, float* c,
                    int ldc);
cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    double alpha, const double* a, int lda, const double* b, int ldb, double beta, double* c,
                    int ldc);
///@}

///@{
/// The same for `count` matrices, A, B and C advancing by sa, sb and sc elements.
cublasStatus_t GemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           float alpha, const float* a, int lda, long long sa, const float* b, int ldb,
                           long long sb, float beta, float* c, int ldc, long long sc, int count);
cublasStatus_t GemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           double alpha, const double* a, int lda, long long sa, const double* b, int ldb,
                           long long sb, double beta, double* c, int ldc, long long sc, int count);
///@}

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
