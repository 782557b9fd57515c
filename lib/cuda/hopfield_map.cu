// GPU backend: device discovery and the cuBLAS-based modern Hopfield map.
#include <implicit/core/cuda.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <sstream>
#include <stdexcept>
#include <string>

namespace implicit {
namespace cuda {
namespace {

void Check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " +
                             cudaGetErrorString(status));
  }
}
void Check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    std::ostringstream s;
    s << "cuBLAS error " << static_cast<int>(status) << " in " << what;
    throw std::runtime_error(s.str());
  }
}

// Column-wise softmax of an N x B column-major matrix, in place, scaled by
// beta first: one block per column, max-shifted.
template <typename Scalar>
__global__ void ColumnSoftmax(Scalar* s, int rows, Scalar beta) {
  extern __shared__ unsigned char shared_raw[];
  Scalar* shared = reinterpret_cast<Scalar*>(shared_raw);
  Scalar* col = s + static_cast<size_t>(blockIdx.x) * rows;
  Scalar local_max = -FLT_MAX;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    col[i] *= beta;
    local_max = col[i] > local_max ? col[i] : local_max;
  }
  shared[threadIdx.x] = local_max;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride && shared[threadIdx.x + stride] > shared[threadIdx.x]) {
      shared[threadIdx.x] = shared[threadIdx.x + stride];
    }
    __syncthreads();
  }
  const Scalar m = shared[0];
  __syncthreads();
  Scalar local_sum = 0;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    col[i] = exp(col[i] - m);
    local_sum += col[i];
  }
  shared[threadIdx.x] = local_sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const Scalar total = shared[0];
  for (int i = threadIdx.x; i < rows; i += blockDim.x) col[i] /= total;
}

cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const float* alpha, const float* a, int lda, const float* b, int ldb,
                    const float* beta, float* c, int ldc) {
  return cublasSgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const double* alpha, const double* a, int lda, const double* b, int ldb,
                    const double* beta, double* c, int ldc) {
  return cublasDgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

bool Available(std::string* reason) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (reason != nullptr) *reason = std::string("no usable CUDA device: ") + cudaGetErrorString(status);
    cudaGetLastError();
    return false;
  }
  if (count == 0) {
    if (reason != nullptr) *reason = "no CUDA device found";
    return false;
  }
  if (reason != nullptr) reason->clear();
  return true;
}

template <typename Scalar>
struct HopfieldRetrievalMap<Scalar>::Impl {
  int n = 0, patterns = 0;
  Scalar beta = 1;
  cublasHandle_t handle = nullptr;
  Scalar* X = nullptr;              // n x N
  mutable Scalar* z = nullptr;      // n x capacity
  mutable Scalar* scores = nullptr; // N x capacity
  mutable int capacity = 0;

  void Reserve(int batch) const {
    if (batch <= capacity) return;
    cudaFree(z);
    cudaFree(scores);
    z = scores = nullptr;
    Check(cudaMalloc(&z, sizeof(Scalar) * n * static_cast<size_t>(batch)), "cudaMalloc(z)");
    Check(cudaMalloc(&scores, sizeof(Scalar) * patterns * static_cast<size_t>(batch)),
          "cudaMalloc(scores)");
    capacity = batch;
  }
  ~Impl() {
    cudaFree(X);
    cudaFree(z);
    cudaFree(scores);
    if (handle != nullptr) cublasDestroy(handle);
  }
};

template <typename Scalar>
HopfieldRetrievalMap<Scalar>::HopfieldRetrievalMap(const Matrix<Scalar>& patterns, Scalar beta)
    : impl_(new Impl) {
  if (patterns.size() == 0) throw std::invalid_argument("cuda::HopfieldRetrievalMap: no patterns");
  if (!(beta > Scalar(0))) throw std::invalid_argument("cuda::HopfieldRetrievalMap: beta must be > 0");
  std::string reason;
  if (!Available(&reason)) throw std::runtime_error("cuda::HopfieldRetrievalMap: " + reason);
  impl_->n = static_cast<int>(patterns.rows());
  impl_->patterns = static_cast<int>(patterns.cols());
  impl_->beta = beta;
  Check(cublasCreate(&impl_->handle), "cublasCreate");
  Check(cudaMalloc(&impl_->X, sizeof(Scalar) * patterns.size()), "cudaMalloc(X)");
  Check(cudaMemcpy(impl_->X, patterns.data(), sizeof(Scalar) * patterns.size(),
                   cudaMemcpyHostToDevice), "cudaMemcpy(X)");
}

template <typename Scalar>
HopfieldRetrievalMap<Scalar>::~HopfieldRetrievalMap() = default;

template <typename Scalar>
Index HopfieldRetrievalMap<Scalar>::dimension() const { return impl_->n; }

template <typename Scalar>
void HopfieldRetrievalMap<Scalar>::Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const {
  internal::CheckBatch("cuda::HopfieldRetrievalMap::Evaluate(z)", z, impl_->n);
  internal::CheckShape("cuda::HopfieldRetrievalMap::Evaluate(out)", out, z.rows(), z.cols());
  const int batch = static_cast<int>(z.cols());
  const int n = impl_->n, N = impl_->patterns;
  impl_->Reserve(batch);
  // Copy column by column: Ref blocks may have an outer stride.
  Check(cudaMemcpy2D(impl_->z, sizeof(Scalar) * n, z.data(), sizeof(Scalar) * z.outerStride(),
                     sizeof(Scalar) * n, batch, cudaMemcpyHostToDevice), "cudaMemcpy2D(z)");
  const Scalar one = 1, zero = 0;
  Check(Gemm(impl_->handle, CUBLAS_OP_T, CUBLAS_OP_N, N, batch, n, &one, impl_->X, n, impl_->z, n,
             &zero, impl_->scores, N), "gemm X^T z");
  const int threads = 256;
  ColumnSoftmax<Scalar><<<batch, threads, threads * sizeof(Scalar)>>>(impl_->scores, N, impl_->beta);
  Check(cudaGetLastError(), "ColumnSoftmax launch");
  Check(Gemm(impl_->handle, CUBLAS_OP_N, CUBLAS_OP_N, n, batch, N, &one, impl_->X, n,
             impl_->scores, N, &zero, impl_->z, n), "gemm X p");
  Check(cudaMemcpy2D(out.data(), sizeof(Scalar) * out.outerStride(), impl_->z, sizeof(Scalar) * n,
                     sizeof(Scalar) * n, batch, cudaMemcpyDeviceToHost), "cudaMemcpy2D(out)");
}

template class HopfieldRetrievalMap<float>;
template class HopfieldRetrievalMap<double>;

}  // namespace cuda
}  // namespace implicit
