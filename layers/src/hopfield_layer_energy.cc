// HopfieldLayerEnergy's member functions (hopfield_layer_energy.h), compiled
// here once for float and double (see "Compile once" in types.h).
#include <implicit/layers/hopfield_layer_energy.h>

#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace implicit {

template <typename Scalar>
void HopfieldLayerEnergy<Scalar>::SetInputs(
    ConstMatrixRef<Scalar> R,
    ConstMatrixRef<Scalar> Y,
    Matrix<Scalar> mask) {
  if (R.rows() != dr_) {
    throw std::invalid_argument("HopfieldLayerEnergy::SetInputs(R): expected " +
                                std::to_string(dr_) + " rows, got " + std::to_string(R.rows()));
  }
  if (Y.rows() != dy_ || Y.cols() == 0) {
    throw std::invalid_argument("HopfieldLayerEnergy::SetInputs(Y): expected " +
                                std::to_string(dy_) + "xN with N > 0, got " +
                                std::to_string(Y.rows()) + "x" + std::to_string(Y.cols()));
  }
  if (mask.size() != 0 && (mask.rows() != Y.cols() || (mask.cols() != 1 && mask.cols() != R.cols()))) {
    throw std::invalid_argument("HopfieldLayerEnergy::SetInputs(mask): expected " +
                                std::to_string(Y.cols()) + "x1 or " + std::to_string(Y.cols()) +
                                "x" + std::to_string(R.cols()) + ", got " +
                                std::to_string(mask.rows()) + "x" + std::to_string(mask.cols()));
  }
  R_ = R;
  Y_ = Y;
  mask_ = std::move(mask);
  std::lock_guard<std::mutex> lock(keys_mutex_);
  keys_.reset();
}

template <typename Scalar>
void HopfieldLayerEnergy<Scalar>::Value(ConstMatrixRef<Scalar> xi, VectorRef<Scalar> values) const {
  Check("HopfieldLayerEnergy::Value(xi)", xi);
  internal::CheckShape("HopfieldLayerEnergy::Value(values)", values, xi.cols(), 1);
  const std::shared_ptr<const Matrix<Scalar>> keys = CachedKeys();
  const Matrix<Scalar>& K = *keys;
  values = Scalar(0.5) * xi.colwise().squaredNorm().transpose();
  if (a_ != Scalar(0)) values -= a_ * (xi.array() * Anchor(xi.cols()).array()).colwise().sum().transpose().matrix();
  for (Index h = 0; h < H_; ++h) {
    const auto head = HeadAt(K, xi, h, "HopfieldLayerEnergy::Value");
    for (Index j = 0; j < xi.cols(); ++j) {
      values(j) += (Scalar(1) - a_) * internal::NegativeScaledLse(head.lse(j), beta(h));
    }
  }
}

template <typename Scalar>
void HopfieldLayerEnergy<Scalar>::CccpUpdate(
    ConstMatrixRef<Scalar> xi,
    MatrixRef<Scalar> out) const {
  Check("HopfieldLayerEnergy::CccpUpdate(xi)", xi);
  internal::CheckShape("HopfieldLayerEnergy::CccpUpdate(out)", out, xi.rows(), xi.cols());
  Vector<Scalar> no_values;
  CccpWith(xi, a_ != Scalar(0) ? Anchor(xi.cols()) : Matrix<Scalar>(), mask_, out, no_values,
           "HopfieldLayerEnergy::CccpUpdate");
}

template <typename Scalar>
void HopfieldLayerEnergy<Scalar>::CccpUpdateAndValue(
    ConstMatrixRef<Scalar> xi,
    MatrixRef<Scalar> out,
    VectorRef<Scalar> values) const {
  Check("HopfieldLayerEnergy::CccpUpdateAndValue(xi)", xi);
  internal::CheckShape("HopfieldLayerEnergy::CccpUpdateAndValue(out)", out, xi.rows(), xi.cols());
  internal::CheckShape("HopfieldLayerEnergy::CccpUpdateAndValue(values)", values, xi.cols(), 1);
  CccpWith(xi, a_ != Scalar(0) ? Anchor(xi.cols()) : Matrix<Scalar>(), mask_, out, values,
           "HopfieldLayerEnergy::CccpUpdateAndValue");
}

template <typename Scalar>
void HopfieldLayerEnergy<Scalar>::CccpUpdateColumns(
    ConstMatrixRef<Scalar> xi,
    const std::vector<Index>& columns,
    MatrixRef<Scalar> out,
    VectorRef<Scalar> values) const {
  if (SupportsSubsets()) {
    Energy<Scalar>::CccpUpdateColumns(xi, columns, out, values);
    return;
  }
  const char* who = "HopfieldLayerEnergy::CccpUpdateColumns";
  Check(who, xi);
  internal::CheckShape("HopfieldLayerEnergy::CccpUpdateColumns(out)", out, xi.rows(), xi.cols());
  internal::CheckOptionalValues("HopfieldLayerEnergy::CccpUpdateColumns(values)", values, xi.cols());
  // The per-sample data: the queries R (anchor) and/or a mask with a column per sample.
  internal::CheckColumns(who, columns, xi.cols(), a_ != Scalar(0) ? R_.cols() : mask_.cols());
  Matrix<Scalar> anchor, mask;
  if (a_ != Scalar(0)) {
    Matrix<Scalar> R;
    internal::GatherColumns(R_, columns, &R);
    anchor = ProjectQueries(R);
  }
  if (mask_.cols() > 1) {
    internal::GatherColumns(mask_, columns, &mask);
  } else {
    mask = mask_;
  }
  CccpWith(xi, anchor, mask, out, values, who);
}

template <typename Scalar>
void HopfieldLayerEnergy<Scalar>::CccpWith(
    ConstMatrixRef<Scalar> xi,
    const Matrix<Scalar>& anchor,
    const Matrix<Scalar>& mask,
    MatrixRef<Scalar> out,
    VectorRef<Scalar> values,
    const char* who) const {
  const bool with_values = values.size() != 0;
  const std::shared_ptr<const Matrix<Scalar>> keys = CachedKeys();
  const Matrix<Scalar>& K = *keys;
  if (with_values) {
    values = Scalar(0.5) * xi.colwise().squaredNorm().transpose();
    if (a_ != Scalar(0)) values -= a_ * (xi.array() * anchor.array()).colwise().sum().transpose().matrix();
  }
  // Head h reads only rows h of xi and writes only rows h of out (out may alias xi).
  for (Index h = 0; h < H_; ++h) {
    const auto head = HeadAt(K, xi, h, mask, who);
    if (with_values) {
      for (Index j = 0; j < xi.cols(); ++j) {
        values(j) += (Scalar(1) - a_) * internal::NegativeScaledLse(head.lse(j), beta(h));
      }
    }
    out.middleRows(h * dk_, dk_).noalias() = (Scalar(1) - a_) * (K.middleRows(h * dk_, dk_) * head.p);
  }
  if (a_ != Scalar(0)) out += a_ * anchor;
}

template <typename Scalar>
void HopfieldLayerEnergy<Scalar>::HessianVectorProduct(
    ConstMatrixRef<Scalar> xi,
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> out) const {
  Check("HopfieldLayerEnergy::HessianVectorProduct(xi)", xi);
  internal::CheckShape("HopfieldLayerEnergy::HessianVectorProduct(v)", v, xi.rows(), xi.cols());
  internal::CheckShape("HopfieldLayerEnergy::HessianVectorProduct(out)", out, xi.rows(), xi.cols());
  const std::shared_ptr<const Matrix<Scalar>> keys = CachedKeys();
  const Matrix<Scalar>& K = *keys;
  out = v;
  for (Index h = 0; h < H_; ++h) {
    const auto head = HeadAt(K, xi, h, "HopfieldLayerEnergy::HessianVectorProduct");
    out.middleRows(h * dk_, dk_) -=
        (Scalar(1) - a_) * head.CovarianceProduct(K.middleRows(h * dk_, dk_),
                                                  v.middleRows(h * dk_, dk_), beta(h));
  }
}

template <typename Scalar>
void HopfieldLayerEnergy<Scalar>::ParameterVectorJacobianProduct(
    ConstMatrixRef<Scalar> xi,
    ConstMatrixRef<Scalar> u,
    VectorRef<Scalar> out) const {
  Check("HopfieldLayerEnergy::ParameterVectorJacobianProduct(xi)", xi);
  internal::CheckShape("HopfieldLayerEnergy::ParameterVectorJacobianProduct(u)", u, xi.rows(), xi.cols());
  internal::CheckShape("HopfieldLayerEnergy::ParameterVectorJacobianProduct(out)", out,
                       num_parameters(), 1);
  out.setZero();
  Matrix<Scalar> dK;
  Vector<Scalar> dbeta;
  RetrievalVjp(xi, u, &dK, &dbeta);
  if (params_->Contains("W_K")) params_->BlockOf(out, "W_K").noalias() = -dK * Y_.transpose();
  if (params_->Contains("beta")) {
    auto b = params_->BlockOf(out, "beta");
    if (b.rows() == 1) b(0, 0) = -dbeta.sum(); else b = -dbeta;
  }
  if (a_ != Scalar(0) && params_->Contains("W_Q")) {
    CheckSamples(xi.cols());
    params_->BlockOf(out, "W_Q").noalias() = -a_ * (u * R_.transpose());
  }
}

template <typename Scalar>
void HopfieldLayerEnergy<Scalar>::StoredPatternVectorJacobianProduct(
    ConstMatrixRef<Scalar> xi,
    ConstMatrixRef<Scalar> u,
    MatrixRef<Scalar> out) const {
  Check("HopfieldLayerEnergy::StoredPatternVectorJacobianProduct(xi)", xi);
  internal::CheckShape("HopfieldLayerEnergy::StoredPatternVectorJacobianProduct(out)", out, dy_,
                       Y_.cols());
  Matrix<Scalar> dK;
  Vector<Scalar> dbeta;
  RetrievalVjp(xi, u, &dK, &dbeta);
  out = -ApplyProjectionTransposed("W_K", dK);
}

template <typename Scalar>
internal::SoftmaxHead<Scalar> HopfieldLayerEnergy<Scalar>::HeadAt(
    const Matrix<Scalar>& K,
    ConstMatrixRef<Scalar> xi,
    Index h,
    const Matrix<Scalar>& mask,
    const char* who) const {
  const Scalar b = beta(h);
  internal::CheckBeta(who, b);
  internal::SoftmaxHead<Scalar> head;
  head.Compute(K.middleRows(h * dk_, dk_), xi.middleRows(h * dk_, dk_), b, mask, who);
  return head;
}

template <typename Scalar>
void HopfieldLayerEnergy<Scalar>::RetrievalVjp(
    ConstMatrixRef<Scalar> xi,
    ConstMatrixRef<Scalar> u,
    Matrix<Scalar>* dK,
    Vector<Scalar>* dbeta) const {
  const std::shared_ptr<const Matrix<Scalar>> keys = CachedKeys();
  const Matrix<Scalar>& K = *keys;
  dK->setZero(K.rows(), K.cols());
  dbeta->setZero(H_);
  for (Index h = 0; h < H_; ++h) {
    const auto head = HeadAt(K, xi, h, "HopfieldLayerEnergy");
    Matrix<Scalar> dKh = Matrix<Scalar>::Zero(dk_, K.cols());
    head.RetrievalVjp(K.middleRows(h * dk_, dk_), xi.middleRows(h * dk_, dk_),
                      u.middleRows(h * dk_, dk_), beta(h), Scalar(1) - a_, &dKh, &(*dbeta)(h));
    dK->middleRows(h * dk_, dk_) = dKh;
  }
}

IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(HopfieldLayerEnergy);

}  // namespace implicit
