/// \file
/// The GPU backend's device-resident batches: a solve context (one CUDA stream,
/// one cuBLAS handle, pinned host staging), a device matrix, and the interface
/// of maps evaluated device -> device.
///
/// A batch lives on the device for the whole solve; solvers (cuda_solvers.h)
/// move only per-sample status scalars between host and device inside an
/// iteration. Everything a Context launches runs in order on its stream.
///
/// \code
///   implicit::cuda::Context context;                        // throws without a GPU
///   implicit::cuda::DeviceMatrix<double> z(context, queries);   // host -> device
///   implicit::cuda::HopfieldCccpMap<double> map(context, patterns, /*beta=*/2.0);
///   implicit::Summary s = implicit::cuda::DeviceAndersonSolver<double>().Solve(context, map, z);
///   implicit::Matrix<double> result = z.ToHost(context);    // device -> host
/// \endcode
///
/// Needs a libimplicit built with CUDA (IMPLICIT_WITH_CUDA, target
/// implicit::cuda); cuda.h's Available() says whether a device can be used.
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

struct CUstream_st;
/// The CUDA runtime's stream handle type, declared as the runtime declares it
/// (the public headers need no CUDA include path).
typedef struct CUstream_st* cudaStream_t;
struct cublasContext;
/// cuBLAS' handle type, declared as cuBLAS declares it (the public headers
/// need no CUDA include path).
typedef struct cublasContext* cublasHandle_t;

namespace implicit {
namespace cuda {

/// Raw device memory of `bytes` bytes (cudaMalloc), freed with the object.
class DeviceBuffer {
 public:
  /// An empty buffer (no memory, data() null).
  DeviceBuffer() = default;
  /// Allocates `bytes` bytes of device memory.
  /// \throws std::runtime_error when cudaMalloc fails.
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  ///@{
  /// Takes over other's memory, leaving `other` empty (this buffer's own memory is freed).
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ///@}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  /// The device pointer (null when nothing is allocated).
  void* data() const { return data_; }
  /// The allocated size in bytes.
  std::size_t bytes() const { return bytes_; }
  /// Grows to at least `bytes` (contents not kept); never shrinks.
  /// \throws std::runtime_error when cudaMalloc fails.
  void Reserve(std::size_t bytes);

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// A solve's execution context: one non-blocking stream, one cuBLAS handle bound
/// to it, and pinned host memory for the per-iteration scalars.
///
/// Not thread-safe; use one context per host thread. Throws std::runtime_error
/// without a device.
class Context {
 public:
  /// Makes the stream and the cuBLAS handle on `device`.
  /// \param device the CUDA device ordinal.
  /// \param allow_tf32 let float GEMMs use TF32 tensor cores (faster, about
  ///   1e-3 relative error per product); off by default.
  /// \throws std::runtime_error when no CUDA device is usable, cuBLAS cannot be
  ///   loaded or a CUDA call fails.
  /// \throws std::invalid_argument when `device` does not exist.
  explicit Context(int device = 0, bool allow_tf32 = false);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// The CUDA device ordinal the context works on.
  int device() const { return device_; }
  /// The device's name as the CUDA runtime reports it (e.g.\ "NVIDIA H100").
  /// \throws std::runtime_error when the CUDA call fails.
  std::string device_name() const;
  /// The context's non-blocking CUDA stream; everything it launches runs on it.
  cudaStream_t stream() const { return stream_; }
  /// The cuBLAS handle bound to stream().
  cublasHandle_t cublas() const { return cublas_; }
  /// Whether float GEMMs may use TF32 tensor cores.
  bool allow_tf32() const { return allow_tf32_; }

  /// Waits until everything launched on the stream is done.
  /// \throws std::runtime_error on an asynchronous CUDA error.
  void Synchronize() const;
  /// Device memory of at least `bytes` bytes for workspace `slot` (0, 1, ...),
  /// kept between calls.
  ///
  /// Solvers take their buffers from here, so repeated
  /// solves on one context allocate nothing after the first. Growing a slot
  /// waits for the stream first (kernels may still use the old buffer). The
  /// slots belong to one solve at a time: a DeviceMap must not run a device
  /// solve on the context it is evaluated with (use a second context).
  /// \throws std::invalid_argument when `slot` is negative.
  /// \throws std::runtime_error when the allocation fails.
  void* Workspace(int slot, std::size_t bytes);
  /// The same as Workspace for pinned host memory (staging of per-sample scalars).
  /// \throws std::invalid_argument when `slot` is negative.
  /// \throws std::runtime_error when the allocation fails.
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

/// A dense column-major rows x cols matrix in device memory (RAII, move-only).
///
/// Column b of a batch is sample b, as on the host. Float and double are
/// instantiated.
template <typename Scalar>
class DeviceMatrix {
 public:
  /// An empty 0 x 0 matrix.
  DeviceMatrix() = default;
  /// A rows x cols matrix, uninitialised.
  /// \throws std::invalid_argument on a negative shape.
  /// \throws std::runtime_error when the allocation fails.
  DeviceMatrix(Index rows, Index cols);
  /// A copy of `host` on the device (returns once the upload is done).
  /// \throws std::runtime_error when a CUDA call fails.
  DeviceMatrix(Context& context, ConstMatrixRef<Scalar> host);
  ///@{
  /// Takes over the other matrix's device memory and shape.
  DeviceMatrix(DeviceMatrix&&) noexcept = default;
  DeviceMatrix& operator=(DeviceMatrix&&) noexcept = default;
  ///@}

  /// Number of rows (the state dimension of a batch).
  Index rows() const { return rows_; }
  /// Number of columns (the samples of a batch).
  Index cols() const { return cols_; }
  /// Number of entries, rows() * cols().
  Index size() const { return rows_ * cols_; }
  /// The device pointer to entry (0, 0) (null when nothing is allocated).
  Scalar* data() const { return static_cast<Scalar*>(buffer_.data()); }
  /// The device pointer to column b.
  Scalar* col(Index b) const { return data() + b * rows_; }

  /// Reshapes (reallocating only to grow); contents undefined afterwards.
  /// \throws std::invalid_argument on a negative shape.
  /// \throws std::runtime_error when the allocation fails.
  void Resize(Index rows, Index cols);
  /// Copies host -> device, resizing to host's shape; returns once the upload is done.
  /// \throws std::runtime_error when a CUDA call fails.
  void CopyFrom(Context& context, ConstMatrixRef<Scalar> host);
  /// Copies device -> host into `host`, which must have this matrix's shape;
  /// returns once the download is done.
  /// \throws std::invalid_argument when `host` has another shape.
  /// \throws std::runtime_error when a CUDA call fails.
  void CopyTo(Context& context, MatrixRef<Scalar> host) const;
  /// A host copy of this matrix (device -> host, synchronous).
  /// \throws std::runtime_error when a CUDA call fails.
  Matrix<Scalar> ToHost(Context& context) const;
  /// this = other (same shape after the call), device -> device, enqueued on
  /// the context's stream.
  /// \throws std::runtime_error when a CUDA call fails.
  void CopyFrom(Context& context, const DeviceMatrix& other);
  /// Sets every entry to zero, enqueued on the context's stream.
  /// \throws std::runtime_error when a CUDA call fails.
  void SetZero(Context& context);

 private:
  Index rows_ = 0, cols_ = 0;
  DeviceBuffer buffer_;
};

/// A batched fixed-point map evaluated on the device: the device counterpart of
/// FixedPointMap.
///
/// Every call gets a contiguous n x count block of states (a
/// compacted subset of the batch) and `columns`, the batch columns they are
/// (device int array of length count, or nullptr when the block is columns
/// 0..count-1 of the batch), so that maps with per-sample data pick theirs.
/// All pointers are device pointers; work is enqueued on the context's stream.
template <typename Scalar>
class DeviceMap {
 public:
  virtual ~DeviceMap() = default;
  /// The state dimension n.
  virtual Index dimension() const = 0;
  /// out = f(z) (n x count; never aliases z) and, when energy != nullptr and
  /// has_energy(), energy[j] = E(z_j) from the same evaluation.
  virtual void Evaluate(Context& context, const Scalar* z, Index count, const int* columns,
                        Scalar* out, Scalar* energy) const = 0;
  /// True when f is the CCCP / gradient-step map of an energy E with
  /// -grad E(z) = f(z) - z: the solvers then use E as their merit function.
  virtual bool has_energy() const { return false; }
  /// Whether any subset of the batch may be evaluated (false: always the whole batch).
  virtual bool SupportsSubsets() const { return true; }

  // ---- derivatives (for the implicit backward pass) ----
  /// Whether the map provides VectorJacobianProduct (and, where it has
  /// parameters or an input, their products); false by default.
  virtual bool HasJacobianProducts() const { return false; }
  /// out = (df/dz)(z)^T u, column by column (n x count).
  /// \throws std::logic_error by default (a map without Jacobian products).
  virtual void VectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u,
                                     Index count, const int* columns, Scalar* out) const;
  /// The number of parameters theta of the map (0 by default: none).
  virtual Index num_parameters() const { return 0; }
  /// out = sum_j (df/dtheta)(z_j)^T u_j (num_parameters() numbers on the device).
  /// \throws std::logic_error by default (a map without parameters).
  virtual void ParameterVectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u,
                                              Index count, Scalar* out) const;
  /// The dimension of the map's input c (e.g.\ clamped values), input_dimension() x B; 0 = none.
  virtual Index input_dimension() const { return 0; }
  /// out = (df/dc)(z_j)^T u_j column by column (input_dimension() x count).
  /// \throws std::logic_error by default (a map without an input).
  virtual void InputVectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u, Index count,
                                          Scalar* out) const;
};

extern template class DeviceMatrix<float>;
extern template class DeviceMatrix<double>;
extern template class DeviceMap<float>;
extern template class DeviceMap<double>;

}  // namespace cuda
}  // namespace implicit
