// The GPU backend's device-resident batches: a solve context (one CUDA stream,
// one cuBLAS handle, pinned host staging), a device matrix, and the interface
// of maps evaluated device -> device.
//
// A batch lives on the device for the whole solve; solvers (cuda_solvers.h)
// move only per-sample status scalars between host and device inside an
// iteration. Everything a Context launches runs in order on its stream.
//
//   implicit::cuda::Context context;                        // throws without a GPU
//   implicit::cuda::DeviceMatrix<double> z(context, queries);   // host -> device
//   implicit::cuda::HopfieldCccpMap<double> map(context, patterns, /*beta=*/2.0);
//   implicit::Summary s = implicit::cuda::DeviceAndersonSolver<double>().Solve(context, map, z);
//   implicit::Matrix<double> result = z.ToHost(context);    // device -> host
//
// Needs a libimplicit built with CUDA (IMPLICIT_WITH_CUDA, target
// implicit::cuda); cuda.h's Available() says whether a device can be used.
#pragma once

#ifndef IMPLICIT_WITH_CUDA
#error "implicit/core/cuda_device.h needs libimplicit built with CUDA: link implicit::cuda from a build with IMPLICIT_WITH_CUDA=ON"
#endif

#include <implicit/core/cuda.h>
#include <implicit/core/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

// The CUDA runtime's and cuBLAS' handle types, declared as they declare them
// (the public headers need no CUDA include path).
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;
struct cublasContext;
typedef struct cublasContext* cublasHandle_t;

namespace implicit {
namespace cuda {

// Raw device memory of `bytes` bytes (cudaMalloc), freed with the object.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  // Grows to at least `bytes` (contents not kept); never shrinks.
  void Reserve(std::size_t bytes);

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// A solve's execution context: one non-blocking stream, one cuBLAS handle bound
// to it, and pinned host memory for the per-iteration scalars. Not thread-safe;
// use one context per host thread. Throws std::runtime_error without a device.
class Context {
 public:
  // device: the CUDA device ordinal. allow_tf32: let float GEMMs use TF32
  // tensor cores (faster, about 1e-3 relative error per product); off by default.
  explicit Context(int device = 0, bool allow_tf32 = false);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  std::string device_name() const;
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  bool allow_tf32() const { return allow_tf32_; }

  // Waits until everything launched on the stream is done; throws on an
  // asynchronous CUDA error.
  void Synchronize() const;
  // Device memory of at least `bytes` bytes for workspace `slot` (0, 1, ...),
  // kept between calls: solvers take their buffers from here, so repeated
  // solves on one context allocate nothing after the first. Growing a slot
  // waits for the stream first (kernels may still use the old buffer). The
  // slots belong to one solve at a time: a DeviceMap must not run a device
  // solve on the context it is evaluated with (use a second context).
  void* Workspace(int slot, std::size_t bytes);
  // The same for pinned host memory (staging of per-sample scalars).
  void* PinnedWorkspace(int slot, std::size_t bytes);

 private:
  int device_ = 0;
  bool allow_tf32_ = false;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  struct Pinned {
    void* data = nullptr;
    std::size_t bytes = 0;
  };
  std::vector<DeviceBuffer> workspace_;
  std::vector<Pinned> pinned_workspace_;
};

// A dense column-major rows x cols matrix in device memory (RAII, move-only).
// Column b of a batch is sample b, as on the host.
template <typename Scalar>
class DeviceMatrix {
 public:
  DeviceMatrix() = default;
  DeviceMatrix(Index rows, Index cols);                         // uninitialised
  DeviceMatrix(Context& context, ConstMatrixRef<Scalar> host);  // a copy of `host`
  DeviceMatrix(DeviceMatrix&&) noexcept = default;
  DeviceMatrix& operator=(DeviceMatrix&&) noexcept = default;

  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  Index size() const { return rows_ * cols_; }
  Scalar* data() const { return static_cast<Scalar*>(buffer_.data()); }
  Scalar* col(Index b) const { return data() + b * rows_; }

  // Reshapes (reallocating only to grow); contents undefined afterwards.
  void Resize(Index rows, Index cols);
  // Copies host -> device (resizing to host's shape) and device -> host.
  void CopyFrom(Context& context, ConstMatrixRef<Scalar> host);
  void CopyTo(Context& context, MatrixRef<Scalar> host) const;
  Matrix<Scalar> ToHost(Context& context) const;
  // this = other (same shape after the call), device -> device.
  void CopyFrom(Context& context, const DeviceMatrix& other);
  void SetZero(Context& context);

 private:
  Index rows_ = 0, cols_ = 0;
  DeviceBuffer buffer_;
};

// A batched fixed-point map evaluated on the device: the device counterpart of
// FixedPointMap. Every call gets a contiguous n x count block of states (a
// compacted subset of the batch) and `columns`, the batch columns they are
// (device int array of length count, or nullptr when the block is columns
// 0..count-1 of the batch), so that maps with per-sample data pick theirs.
template <typename Scalar>
class DeviceMap {
 public:
  virtual ~DeviceMap() = default;
  virtual Index dimension() const = 0;
  // out = f(z) (n x count; never aliases z) and, when energy != nullptr and
  // has_energy(), energy[j] = E(z_j) from the same evaluation.
  virtual void Evaluate(Context& context, const Scalar* z, Index count, const int* columns,
                        Scalar* out, Scalar* energy) const = 0;
  // True when f is the CCCP / gradient-step map of an energy E with
  // -grad E(z) = f(z) - z: the solvers then use E as their merit function.
  virtual bool has_energy() const { return false; }
  // Whether any subset of the batch may be evaluated (false: always the whole batch).
  virtual bool SupportsSubsets() const { return true; }

  // ---- derivatives (for the implicit backward pass) ----
  virtual bool HasJacobianProducts() const { return false; }
  // out = (df/dz)(z)^T u, column by column (n x count).
  virtual void VectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u,
                                     Index count, const int* columns, Scalar* out) const;
  virtual Index num_parameters() const { return 0; }
  // out = sum_j (df/dtheta)(z_j)^T u_j (num_parameters() numbers on the device).
  virtual void ParameterVectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u,
                                              Index count, Scalar* out) const;
  // The map's input c (e.g. clamped values), input_dimension() x B; 0 = none.
  virtual Index input_dimension() const { return 0; }
  // out = (df/dc)(z_j)^T u_j column by column (input_dimension() x count).
  virtual void InputVectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u, Index count,
                                          Scalar* out) const;
};

extern template class DeviceMatrix<float>;
extern template class DeviceMatrix<double>;
extern template class DeviceMap<float>;
extern template class DeviceMap<double>;

}  // namespace cuda
}  // namespace implicit
