// The GPU backend's entry points in a build without CUDA: report why no GPU
// can be used, and refuse to construct GPU maps.
#ifndef IMPLICIT_WITH_CUDA

#include <implicit/core/cuda.h>

#include <stdexcept>

namespace implicit {
namespace cuda {

bool Available(std::string* reason) {
  if (reason != nullptr) *reason = "libimplicit was built without CUDA (IMPLICIT_WITH_CUDA=OFF)";
  return false;
}

int DeviceCount() { return 0; }

template <typename Scalar>
struct HopfieldRetrievalMap<Scalar>::Impl {};

template <typename Scalar>
HopfieldRetrievalMap<Scalar>::HopfieldRetrievalMap(const Matrix<Scalar>&, Scalar) {
  throw std::runtime_error(
      "cuda::HopfieldRetrievalMap: libimplicit was built without CUDA (IMPLICIT_WITH_CUDA=OFF)");
}
template <typename Scalar>
HopfieldRetrievalMap<Scalar>::~HopfieldRetrievalMap() = default;
template <typename Scalar>
Index HopfieldRetrievalMap<Scalar>::dimension() const { return 0; }
template <typename Scalar>
void HopfieldRetrievalMap<Scalar>::Evaluate(ConstMatrixRef<Scalar>, MatrixRef<Scalar>) const {}

template class HopfieldRetrievalMap<float>;
template class HopfieldRetrievalMap<double>;

}  // namespace cuda
}  // namespace implicit

#endif  // IMPLICIT_WITH_CUDA
