// The modern Hopfield CCCP map on the device (cuda_hopfield.h) and the
// host-facing HopfieldRetrievalMap built on it (cuda.h).
#include <implicit/core/cuda.h>
#include <implicit/core/cuda_blas.h>
#include <implicit/core/cuda_hopfield.h>
#include <implicit/core/cuda_kernels.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

namespace implicit {
namespace cuda {
namespace {

void Check(cublasStatus_t status, const char* what) { internal::CheckBlas(status, what); }
using internal::Gemm;

int AsInt(Index v) { return static_cast<int>(v); }

}  // namespace

template <typename Scalar>
HopfieldCccpMap<Scalar>::HopfieldCccpMap(Context& context, ConstMatrixRef<Scalar> patterns, Scalar beta,
                                         Attention attention)
    : beta_(beta), attention_(attention) {
  if (patterns.size() == 0) throw std::invalid_argument("cuda::HopfieldCccpMap: no patterns");
  if (!(beta > Scalar(0)) || !std::isfinite(static_cast<double>(beta))) {
    throw std::invalid_argument("cuda::HopfieldCccpMap: beta must be finite and > 0, got " +
                                std::to_string(static_cast<double>(beta)));
  }
  if (!patterns.allFinite()) throw std::invalid_argument("cuda::HopfieldCccpMap: the patterns are not all finite");
  patterns_.CopyFrom(context, patterns);
}

template <typename Scalar>
Scalar* HopfieldCccpMap<Scalar>::Weights(Context& context, const Scalar* z, Index count, Scalar* conjugate) const {
  const Index n = dimension(), N = num_patterns();
  scores_.Resize(N, count);
  Check(Gemm(context.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, AsInt(N), AsInt(count), AsInt(n), Scalar(1),
             patterns_.data(), AsInt(n), z, AsInt(n), Scalar(0), scores_.data(), AsInt(N)),
        "HopfieldCccpMap: X^T z");
  if (attention_ == Attention::kSoftmax) {
    internal::SoftmaxColumns<Scalar>(context.stream(), scores_.data(), AsInt(N), AsInt(count), beta_, conjugate);
  } else {
    internal::SparsemaxColumns<Scalar>(context.stream(), scores_.data(), AsInt(N), AsInt(count), beta_, conjugate);
  }
  return scores_.data();
}

template <typename Scalar>
Scalar* HopfieldCccpMap<Scalar>::WeightsVjp(Context& context, const Scalar* p, const Scalar* u, Index count) const {
  const Index n = dimension(), N = num_patterns();
  work_.Resize(N, count);
  Check(Gemm(context.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, AsInt(N), AsInt(count), AsInt(n), Scalar(1),
             patterns_.data(), AsInt(n), u, AsInt(n), Scalar(0), work_.data(), AsInt(N)),
        "HopfieldCccpMap: X^T u");
  if (attention_ == Attention::kSoftmax) {
    internal::SoftmaxJacobianTranspose<Scalar>(context.stream(), p, work_.data(), AsInt(N), AsInt(count));
  } else {
    internal::SparsemaxJacobianTranspose<Scalar>(context.stream(), p, work_.data(), AsInt(N), AsInt(count));
  }
  return work_.data();
}

template <typename Scalar>
void HopfieldCccpMap<Scalar>::Evaluate(Context& context, const Scalar* z, Index count, const int*, Scalar* out,
                                       Scalar* energy) const {
  if (count == 0) return;
  const Index n = dimension(), N = num_patterns();
  Scalar* conjugate = nullptr;
  if (energy != nullptr) {
    conjugate_.Resize(1, count);
    conjugate = conjugate_.data();
  }
  const Scalar* p = Weights(context, z, count, conjugate);
  Check(Gemm(context.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, AsInt(n), AsInt(count), AsInt(N), Scalar(1),
             patterns_.data(), AsInt(n), p, AsInt(N), Scalar(0), out, AsInt(n)),
        "HopfieldCccpMap: X p");
  if (energy != nullptr) {
    internal::HopfieldEnergy<Scalar>(context.stream(), z, AsInt(n), AsInt(count), conjugate, beta_, energy);
  }
}

template <typename Scalar>
void HopfieldCccpMap<Scalar>::VectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u,
                                                    Index count, const int*, Scalar* out) const {
  if (count == 0) return;
  const Index n = dimension(), N = num_patterns();
  const Scalar* w = WeightsVjp(context, Weights(context, z, count, nullptr), u, count);
  Check(Gemm(context.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, AsInt(n), AsInt(count), AsInt(N), beta_,
             patterns_.data(), AsInt(n), w, AsInt(N), Scalar(0), out, AsInt(n)),
        "HopfieldCccpMap: beta X w");
}

template <typename Scalar>
void HopfieldCccpMap<Scalar>::ParameterVectorJacobianProduct(Context& context, const Scalar* z, const Scalar* u,
                                                             Index count, Scalar* out) const {
  const Index n = dimension(), N = num_patterns();
  if (count == 0) {
    internal::Fill<Scalar>(context.stream(), out, static_cast<long long>(n) * N, Scalar(0));
    return;
  }
  const Scalar* p = Weights(context, z, count, nullptr);
  const Scalar* w = WeightsVjp(context, p, u, count);
  // dX = U P^T + beta Z W^T  (n x N).
  Check(Gemm(context.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, AsInt(n), AsInt(N), AsInt(count), Scalar(1), u, AsInt(n),
             p, AsInt(N), Scalar(0), out, AsInt(n)),
        "HopfieldCccpMap: U P^T");
  Check(Gemm(context.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, AsInt(n), AsInt(N), AsInt(count), beta_, z, AsInt(n), w,
             AsInt(N), Scalar(1), out, AsInt(n)),
        "HopfieldCccpMap: beta Z W^T");
}

template class HopfieldCccpMap<float>;
template class HopfieldCccpMap<double>;

// ---- HopfieldRetrievalMap: the host-facing map -----------------------------------

template <typename Scalar>
struct HopfieldRetrievalMap<Scalar>::Impl {
  std::unique_ptr<Context> context;
  std::unique_ptr<HopfieldCccpMap<Scalar>> map;
  mutable DeviceMatrix<Scalar> z, out;
};

template <typename Scalar>
HopfieldRetrievalMap<Scalar>::HopfieldRetrievalMap(const Matrix<Scalar>& patterns, Scalar beta) : impl_(new Impl) {
  if (patterns.size() == 0) throw std::invalid_argument("cuda::HopfieldRetrievalMap: no patterns");
  if (!(beta > Scalar(0))) throw std::invalid_argument("cuda::HopfieldRetrievalMap: beta must be > 0");
  std::string reason;
  if (!Available(&reason)) throw std::runtime_error("cuda::HopfieldRetrievalMap: " + reason);
  impl_->context = std::make_unique<Context>();
  impl_->map = std::make_unique<HopfieldCccpMap<Scalar>>(*impl_->context, patterns, beta);
}

template <typename Scalar>
HopfieldRetrievalMap<Scalar>::~HopfieldRetrievalMap() = default;

template <typename Scalar>
Index HopfieldRetrievalMap<Scalar>::dimension() const {
  return impl_->map->dimension();
}

template <typename Scalar>
void HopfieldRetrievalMap<Scalar>::Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const {
  implicit::internal::CheckBatch("cuda::HopfieldRetrievalMap::Evaluate(z)", z, dimension());
  implicit::internal::CheckShape("cuda::HopfieldRetrievalMap::Evaluate(out)", out, z.rows(), z.cols());
  Context& context = *impl_->context;
  impl_->z.CopyFrom(context, z);
  impl_->out.Resize(z.rows(), z.cols());
  impl_->map->Evaluate(context, impl_->z.data(), z.cols(), nullptr, impl_->out.data(), nullptr);
  impl_->out.CopyTo(context, out);
}

template class HopfieldRetrievalMap<float>;
template class HopfieldRetrievalMap<double>;

}  // namespace cuda
}  // namespace implicit
