// Device discovery, the solve context, device buffers and matrices (cuda.h,
// cuda_device.h).
#include <implicit/core/cuda_blas.h>
#include <implicit/core/cuda_device.h>
#include <implicit/core/cuda_kernels.h>

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace implicit {
namespace cuda {
namespace {

void Check(cudaError_t status, const char* what) { internal::CheckCall(status, what); }

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

// ---- DeviceBuffer ------------------------------------------------------------

DeviceBuffer::DeviceBuffer(std::size_t bytes) { Reserve(bytes); }
DeviceBuffer::~DeviceBuffer() { cudaFree(data_); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}
void DeviceBuffer::Reserve(std::size_t bytes) {
  if (bytes <= bytes_) return;
  cudaFree(data_);
  data_ = nullptr;
  bytes_ = 0;
  Check(cudaMalloc(&data_, bytes), "cudaMalloc");
  bytes_ = bytes;
}

// ---- Context -------------------------------------------------------------------

Context::Context(int device, bool allow_tf32) : device_(device), allow_tf32_(allow_tf32) {
  std::string reason;
  if (!Available(&reason)) throw std::runtime_error("cuda::Context: " + reason);
  if (device < 0 || device >= DeviceCount()) {
    throw std::invalid_argument("cuda::Context: device " + std::to_string(device) + " does not exist (" +
                                std::to_string(DeviceCount()) + " devices)");
  }
  Check(cudaSetDevice(device), "cudaSetDevice");
  Check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  try {
    cublas_ = internal::CreateHandle(stream_, allow_tf32);
  } catch (...) {
    cudaStreamDestroy(stream_);
    throw;
  }
}

Context::~Context() {
  cudaStreamSynchronize(stream_);
  for (Pinned& p : pinned_workspace_)
    if (p.data != nullptr) cudaFreeHost(p.data);
  workspace_.clear();
  internal::DestroyHandle(cublas_);
  cudaStreamDestroy(stream_);
}

std::string Context::device_name() const {
  cudaDeviceProp properties;
  Check(cudaGetDeviceProperties(&properties, device_), "cudaGetDeviceProperties");
  return properties.name;
}

void Context::Synchronize() const { Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

void* Context::PinnedWorkspace(int slot, std::size_t bytes) {
  if (slot < 0) throw std::invalid_argument("cuda::Context::PinnedWorkspace: negative slot");
  if (slot >= static_cast<int>(pinned_workspace_.size())) pinned_workspace_.resize(slot + 1);
  Pinned& p = pinned_workspace_[slot];
  if (bytes > p.bytes) {
    Synchronize();  // a copy may still read the old buffer
    if (p.data != nullptr) cudaFreeHost(p.data);
    p = Pinned();
    Check(cudaMallocHost(&p.data, bytes), "cudaMallocHost");
    p.bytes = bytes;
  }
  return p.data;
}

void* Context::Workspace(int slot, std::size_t bytes) {
  if (slot < 0) throw std::invalid_argument("cuda::Context::Workspace: negative slot");
  if (slot >= static_cast<int>(workspace_.size())) workspace_.resize(slot + 1);
  DeviceBuffer& buffer = workspace_[slot];
  if (bytes > buffer.bytes()) Synchronize();  // kernels may still use the old buffer
  buffer.Reserve(bytes);
  return buffer.data();
}

// ---- DeviceMatrix ----------------------------------------------------------------

template <typename Scalar>
DeviceMatrix<Scalar>::DeviceMatrix(Index rows, Index cols) {
  Resize(rows, cols);
}

template <typename Scalar>
DeviceMatrix<Scalar>::DeviceMatrix(Context& context, ConstMatrixRef<Scalar> host) {
  CopyFrom(context, host);
}

template <typename Scalar>
void DeviceMatrix<Scalar>::Resize(Index rows, Index cols) {
  if (rows < 0 || cols < 0) throw std::invalid_argument("cuda::DeviceMatrix: negative shape");
  buffer_.Reserve(sizeof(Scalar) * static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
  rows_ = rows;
  cols_ = cols;
}

template <typename Scalar>
void DeviceMatrix<Scalar>::CopyFrom(Context& context, ConstMatrixRef<Scalar> host) {
  Resize(host.rows(), host.cols());
  if (size() == 0) return;
  // Column by column: a Ref may have an outer stride.
  Check(cudaMemcpy2DAsync(data(), sizeof(Scalar) * rows_, host.data(), sizeof(Scalar) * host.outerStride(),
                          sizeof(Scalar) * rows_, cols_, cudaMemcpyHostToDevice, context.stream()),
        "DeviceMatrix upload");
  context.Synchronize();  // the host matrix may go away after the call
}

template <typename Scalar>
void DeviceMatrix<Scalar>::CopyTo(Context& context, MatrixRef<Scalar> host) const {
  implicit::internal::CheckShape("cuda::DeviceMatrix::CopyTo(host)", host, rows_, cols_);
  if (size() == 0) return;
  Check(cudaMemcpy2DAsync(host.data(), sizeof(Scalar) * host.outerStride(), data(), sizeof(Scalar) * rows_,
                          sizeof(Scalar) * rows_, cols_, cudaMemcpyDeviceToHost, context.stream()),
        "DeviceMatrix download");
  context.Synchronize();
}

template <typename Scalar>
Matrix<Scalar> DeviceMatrix<Scalar>::ToHost(Context& context) const {
  Matrix<Scalar> host(rows_, cols_);
  CopyTo(context, host);
  return host;
}

template <typename Scalar>
void DeviceMatrix<Scalar>::CopyFrom(Context& context, const DeviceMatrix& other) {
  Resize(other.rows(), other.cols());
  if (size() == 0) return;
  Check(cudaMemcpyAsync(data(), other.data(), sizeof(Scalar) * size(), cudaMemcpyDeviceToDevice,
                        context.stream()),
        "DeviceMatrix copy");
}

template <typename Scalar>
void DeviceMatrix<Scalar>::SetZero(Context& context) {
  if (size() == 0) return;
  Check(cudaMemsetAsync(data(), 0, sizeof(Scalar) * size(), context.stream()), "DeviceMatrix::SetZero");
}

// ---- DeviceMap defaults ------------------------------------------------------------

template <typename Scalar>
void DeviceMap<Scalar>::VectorJacobianProduct(Context&, const Scalar*, const Scalar*, Index, const int*,
                                              Scalar*) const {
  throw std::logic_error("this device map provides no vector-Jacobian products");
}

template <typename Scalar>
void DeviceMap<Scalar>::ParameterVectorJacobianProduct(Context&, const Scalar*, const Scalar*, Index,
                                                       Scalar*) const {
  throw std::logic_error("this device map has no parameter derivatives");
}

template <typename Scalar>
void DeviceMap<Scalar>::InputVectorJacobianProduct(Context&, const Scalar*, const Scalar*, Index, Scalar*) const {
  throw std::logic_error("this device map has no input");
}

template class DeviceMatrix<float>;
template class DeviceMatrix<double>;
template class DeviceMap<float>;
template class DeviceMap<double>;

}  // namespace cuda
}  // namespace implicit
