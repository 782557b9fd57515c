/// \file
/// The GPU backend (host side): device discovery and GPU-evaluated maps.
///
/// Built when CMake finds nvcc (option IMPLICIT_WITH_CUDA); a build without it
/// still has this header: Available() then returns false with the reason, and
/// constructing a GPU map throws std::runtime_error. No GPU is needed to build.
///
/// \code
///   std::string why;
///   if (implicit::cuda::Available(&why)) {
///     implicit::cuda::HopfieldRetrievalMap<float> map(patterns, /*beta=*/2.0f);
///     implicit::AndersonSolver<float>().Solve(map, queries);  // f evaluated on the GPU
///   } else {
///     std::cerr << "no GPU: " << why << "\n";
///   }
/// \endcode
///
/// HopfieldRetrievalMap keeps the stored patterns on the device and evaluates
/// f(Z) = X softmax(beta X^T Z) for a whole batch with two cuBLAS GEMMs and one
/// column-softmax kernel. The solver's state stays on the host, so every
/// Evaluate copies Z in and f(Z) out: worth it when N (patterns) is large.
/// For solves whose state stays on the device (Picard, guarded Anderson, the
/// implicit backward pass, the Energy Transformer), see cuda_device.h,
/// cuda_hopfield.h, solvers/cuda_solvers.h and docs/gpu.md.
#pragma once

#include <implicit/core/map.h>

#include <memory>
#include <string>

namespace implicit {
namespace cuda {

/// True when the library was built with CUDA and a device is usable; otherwise
/// false with the reason in *reason (when not null).
bool Available(std::string* reason = nullptr);
/// Number of CUDA devices (0 without CUDA or without a driver).
int DeviceCount();

/// The modern Hopfield retrieval map f(Z) = X softmax(beta X^T Z), evaluated on
/// the GPU for a host-side solver (the patterns X stay on the device; every
/// Evaluate copies Z in and f(Z) out).
///
/// It owns its own cuda::Context on device 0. Float and double are instantiated.
template <typename Scalar>
class HopfieldRetrievalMap : public FixedPointMap<Scalar> {
 public:
  /// Copies the patterns to the device.
  /// \param patterns n x N stored patterns (columns).
  /// \param beta the inverse temperature, > 0.
  /// \throws std::invalid_argument when there are no patterns or beta <= 0.
  /// \throws std::runtime_error when no CUDA device is usable (or the library
  ///   was built without CUDA).
  HopfieldRetrievalMap(const Matrix<Scalar>& patterns, Scalar beta);
  ~HopfieldRetrievalMap() override;
  HopfieldRetrievalMap(const HopfieldRetrievalMap&) = delete;
  HopfieldRetrievalMap& operator=(const HopfieldRetrievalMap&) = delete;

  /// The state dimension n (the patterns' rows).
  Index dimension() const override;
  /// out = X softmax(beta X^T z) for the n x B batch z: uploads z, evaluates
  /// on the device and downloads the result into out (n x B).
  /// \throws std::invalid_argument when z or out has the wrong shape.
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

extern template class HopfieldRetrievalMap<float>;
extern template class HopfieldRetrievalMap<double>;

}  // namespace cuda
}  // namespace implicit
