/// \file
/// Training losses on batches (n x B, column b = sample b), each returning the
/// scalar loss and, on request, its gradient with respect to the prediction —
/// the dL/dz* that an implicit backward pass takes.
///
/// \verbatim
///   MeanSquaredError        L = mean over elements of (p - t)^2
///   MaskedMeanSquaredError  L = sum m (p - t)^2 / sum m   (e.g. masked pixels only)
///   SoftmaxCrossEntropy     L = mean_b -log softmax(logits_b)[label_b]
/// \endverbatim
///
/// \code
///   implicit::Matrix<double> grad;
///   double loss = implicit::MaskedMeanSquaredError<double>(pixels, target, mask, &grad);
///   // grad = dL/dpixels, same shape as pixels
///
///   std::vector<int> labels = {3, 1, 4};
///   double ce = implicit::SoftmaxCrossEntropy<double>(logits, labels, &grad);
/// \endcode
///
/// The losses are means, so the gradients carry the 1/count factor. Shape
/// mismatches, labels out of range and negative or non-finite mask weights throw
/// std::invalid_argument naming the argument and sizes.
#pragma once

#include <implicit/core/types.h>

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {

/// Mean squared error L = (1 / (n B)) sum_ij (p_ij - t_ij)^2; gradient 2 (p - t) / (n B).
/// \param prediction the prediction p (n x B).
/// \param target the target t (n x B).
/// \param gradient when not null, set to dL/dp (n x B).
/// \throws std::invalid_argument when target's shape differs from prediction's
///   or the prediction is empty.
template <typename Scalar>
Scalar MeanSquaredError(ConstMatrixRef<Scalar> prediction, ConstMatrixRef<Scalar> target,
                        Matrix<Scalar>* gradient = nullptr) {
  internal::CheckShape("MeanSquaredError: target", target, prediction.rows(), prediction.cols());
  const Index count = prediction.size();
  if (count == 0) throw std::invalid_argument("MeanSquaredError: empty prediction (0 elements)");
  const Scalar inv = Scalar(1) / static_cast<Scalar>(count);
  if (gradient != nullptr) *gradient = (Scalar(2) * inv) * (prediction - target);
  return (prediction - target).squaredNorm() * inv;
}

/// Masked mean squared error L = sum_ij m_ij (p_ij - t_ij)^2 / sum_ij m_ij with
/// weights m_ij >= 0.
///
/// A 0/1 mask selects elements, e.g.\ the masked pixels of an image-completion task.
/// An all-zero mask gives L = 0 and a zero gradient.
/// \param prediction the prediction p (n x B).
/// \param target the target t (n x B).
/// \param mask the weights m (n x B), finite and >= 0.
/// \param gradient when not null, set to dL/dp (n x B).
/// \throws std::invalid_argument when target's or mask's shape differs from
///   prediction's, or a mask weight is negative or not finite.
template <typename Scalar>
Scalar MaskedMeanSquaredError(ConstMatrixRef<Scalar> prediction, ConstMatrixRef<Scalar> target,
                              ConstMatrixRef<Scalar> mask, Matrix<Scalar>* gradient = nullptr) {
  internal::CheckShape("MaskedMeanSquaredError: target", target, prediction.rows(),
                       prediction.cols());
  internal::CheckShape("MaskedMeanSquaredError: mask", mask, prediction.rows(), prediction.cols());
  if (!mask.allFinite() || (mask.array() < Scalar(0)).any())
    throw std::invalid_argument("MaskedMeanSquaredError: mask weights must be finite and >= 0");
  const Scalar total = mask.sum();
  if (!(total > Scalar(0))) {
    if (gradient != nullptr) *gradient = Matrix<Scalar>::Zero(prediction.rows(), prediction.cols());
    return Scalar(0);
  }
  const Scalar inv = Scalar(1) / total;
  const auto diff = (prediction - target).array();
  if (gradient != nullptr) *gradient = ((Scalar(2) * inv) * mask.array() * diff).matrix();
  return (mask.array() * diff.square()).sum() * inv;
}

namespace internal {
/// Column-wise softmax of logits (K x B), computed stably.
template <typename Scalar>
Matrix<Scalar> LossSoftmax(ConstMatrixRef<Scalar> logits) {
  Matrix<Scalar> p(logits.rows(), logits.cols());
  for (Index b = 0; b < logits.cols(); ++b) {
    const Scalar m = logits.col(b).maxCoeff();
    p.col(b) = (logits.col(b).array() - m).exp().matrix();
    p.col(b) /= p.col(b).sum();
  }
  return p;
}
}  // namespace internal

/// Softmax cross-entropy with integer labels: L = (1/B) sum_b [logsumexp(z_b) - z_b[y_b]]
/// for logits z (K x B) and labels y_b in [0, K); gradient (softmax(z) - onehot(y)) / B.
/// \param logits the logits z (K x B).
/// \param labels B class labels in [0, K).
/// \param gradient when not null, set to dL/dz (K x B).
/// \throws std::invalid_argument when the logits are empty, the number of labels
///   is not B, or a label is outside [0, K).
template <typename Scalar>
Scalar SoftmaxCrossEntropy(ConstMatrixRef<Scalar> logits, const std::vector<int>& labels,
                           Matrix<Scalar>* gradient = nullptr) {
  const Index K = logits.rows(), B = logits.cols();
  if (K == 0 || B == 0) {
    std::ostringstream s;
    s << "SoftmaxCrossEntropy: empty logits (" << K << "x" << B << ")";
    throw std::invalid_argument(s.str());
  }
  if (static_cast<Index>(labels.size()) != B) {
    std::ostringstream s;
    s << "SoftmaxCrossEntropy: " << labels.size() << " labels for a batch of " << B;
    throw std::invalid_argument(s.str());
  }
  for (Index b = 0; b < B; ++b) {
    if (labels[b] < 0 || labels[b] >= K) {
      std::ostringstream s;
      s << "SoftmaxCrossEntropy: label " << labels[b] << " of sample " << b
        << " outside [0, " << K << ")";
      throw std::invalid_argument(s.str());
    }
  }
  Scalar loss(0);
  for (Index b = 0; b < B; ++b) {
    const Scalar m = logits.col(b).maxCoeff();
    const Scalar lse = m + std::log((logits.col(b).array() - m).exp().sum());
    loss += lse - logits(labels[b], b);
  }
  const Scalar inv = Scalar(1) / static_cast<Scalar>(B);
  if (gradient != nullptr) {
    *gradient = internal::LossSoftmax<Scalar>(logits);
    for (Index b = 0; b < B; ++b) (*gradient)(labels[b], b) -= Scalar(1);
    *gradient *= inv;
  }
  return loss * inv;
}

/// Soft-target version: L = (1/B) sum_b -sum_k t_kb log softmax(z_b)_k with
/// each column of `targets` a probability vector (entries >= 0, sum 1);
/// gradient (softmax(z) * sum_k t_kb - t) / B.
/// \param logits the logits z (K x B).
/// \param targets the target distributions t (K x B).
/// \param gradient when not null, set to dL/dz (K x B).
/// \throws std::invalid_argument when targets' shape differs from the logits',
///   the logits are empty, or a target entry is negative or not finite.
template <typename Scalar>
Scalar SoftmaxCrossEntropy(ConstMatrixRef<Scalar> logits, ConstMatrixRef<Scalar> targets,
                           Matrix<Scalar>* gradient = nullptr) {
  internal::CheckShape("SoftmaxCrossEntropy: targets", targets, logits.rows(), logits.cols());
  const Index B = logits.cols();
  if (logits.size() == 0) throw std::invalid_argument("SoftmaxCrossEntropy: empty logits");
  if (!targets.allFinite() || (targets.array() < Scalar(0)).any())
    throw std::invalid_argument("SoftmaxCrossEntropy: targets must be finite and >= 0");
  Scalar loss(0);
  for (Index b = 0; b < B; ++b) {
    const Scalar m = logits.col(b).maxCoeff();
    const Scalar lse = m + std::log((logits.col(b).array() - m).exp().sum());
    loss += (targets.col(b).array() * (lse - logits.col(b).array())).sum();
  }
  const Scalar inv = Scalar(1) / static_cast<Scalar>(B);
  if (gradient != nullptr) {
    *gradient = internal::LossSoftmax<Scalar>(logits);
    for (Index b = 0; b < B; ++b) {
      gradient->col(b) = gradient->col(b) * targets.col(b).sum() - targets.col(b);
    }
    *gradient *= inv;
  }
  return loss * inv;
}

}  // namespace implicit
