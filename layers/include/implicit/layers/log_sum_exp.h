// Numerically safe column-wise log-sum-exp and softmax, the building block of
// every softmax-type attention energy (modern Hopfield, the discrete
// log-normaliser, the Hopfield layers).
//
// Each column of a score matrix a (N x B) is one sample's scores over N
// patterns/keys. Both functions shift by the column maximum before
// exponentiating, so scores of 1e8 (or 1e30 in double) give exact results
// instead of Inf/NaN. Entries equal to -inf are "masked": they get weight
// exactly 0. Special columns, by design:
//   all entries -inf       lse = -inf, p = 0 (no pattern is allowed)
//   some entry +inf        lse = +inf, p uniform over the +inf entries
//   some entry NaN         lse = NaN,  p = NaN (propagated, never hidden)
//
//   implicit::Matrix<double> scores = beta * (X.transpose() * xi);  // N x B
//   implicit::Matrix<double> p(scores.rows(), scores.cols());
//   implicit::Vector<double> lse(scores.cols());
//   implicit::ColumnSoftmax<double>(scores, p, &lse);  // p = softmax, lse = log sum exp
//
// p may alias a (in-place softmax).
#pragma once

#include <implicit/core/types.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace implicit {

// p.col(b) = softmax(a.col(b)); when lse != nullptr also (*lse)(b) = log sum_i exp(a(i, b))
// (lse is resized to B).
template <typename Scalar>
void ColumnSoftmax(ConstMatrixRef<Scalar> a, MatrixRef<Scalar> p,
                   Vector<Scalar>* lse = nullptr) {
  internal::CheckShape("ColumnSoftmax(p)", p, a.rows(), a.cols());
  if (lse != nullptr) lse->resize(a.cols());
  const Scalar inf = std::numeric_limits<Scalar>::infinity();
  const Scalar nan = std::numeric_limits<Scalar>::quiet_NaN();
  const Index n = a.rows();
  for (Index b = 0; b < a.cols(); ++b) {
    Scalar m = -inf;
    bool has_nan = false;
    for (Index i = 0; i < n; ++i) {
      const Scalar v = a(i, b);
      if (std::isnan(v)) has_nan = true;
      if (v > m) m = v;
    }
    if (has_nan) {
      p.col(b).setConstant(nan);
      if (lse != nullptr) (*lse)(b) = nan;
      continue;
    }
    if (m == -inf) {  // every entry masked
      p.col(b).setZero();
      if (lse != nullptr) (*lse)(b) = -inf;
      continue;
    }
    if (m == inf) {  // weight shared by the +inf entries
      Scalar count(0);
      for (Index i = 0; i < n; ++i) count += (a(i, b) == inf) ? Scalar(1) : Scalar(0);
      for (Index i = 0; i < n; ++i) p(i, b) = (a(i, b) == inf) ? Scalar(1) / count : Scalar(0);
      if (lse != nullptr) (*lse)(b) = inf;
      continue;
    }
    Scalar sum(0);
    for (Index i = 0; i < n; ++i) {
      const Scalar e = std::exp(a(i, b) - m);  // exp(-inf) = 0 for masked entries
      p(i, b) = e;
      sum += e;
    }
    p.col(b) /= sum;  // sum >= 1: the maximum contributes exp(0)
    if (lse != nullptr) (*lse)(b) = m + std::log(sum);
  }
}

// out(b) = log sum_i exp(a(i, b)), with the special columns described above.
template <typename Scalar>
void ColumnLogSumExp(ConstMatrixRef<Scalar> a, VectorRef<Scalar> out) {
  internal::CheckShape("ColumnLogSumExp(out)", out, a.cols(), 1);
  Matrix<Scalar> p(a.rows(), a.cols());
  Vector<Scalar> lse;
  ColumnSoftmax<Scalar>(a, p, &lse);
  out = lse;
}

namespace internal {
// The softmax Jacobian applied column-wise: out.col(b) = (diag p_b - p_b p_b^T) g_b
// = p_b .* (g_b - <p_b, g_b>). Entries with p = 0 (masked) give 0 even when g is
// +-inf there. out may alias g.
template <typename Scalar>
void SoftmaxJacobianProduct(ConstMatrixRef<Scalar> p, ConstMatrixRef<Scalar> g,
                            MatrixRef<Scalar> out) {
  for (Index b = 0; b < p.cols(); ++b) {
    Scalar mean(0);
    for (Index i = 0; i < p.rows(); ++i) {
      if (p(i, b) != Scalar(0)) mean += p(i, b) * g(i, b);
    }
    for (Index i = 0; i < p.rows(); ++i) {
      out(i, b) = (p(i, b) != Scalar(0)) ? p(i, b) * (g(i, b) - mean) : Scalar(0);
    }
  }
}
// Adds an additive score mask (N x 1: broadcast, or N x B) to a (N x B).
template <typename Scalar>
void AddScoreMask(const Matrix<Scalar>& mask, MatrixRef<Scalar> a, const char* who) {
  if (mask.size() == 0) return;
  if (mask.rows() != a.rows() || (mask.cols() != 1 && mask.cols() != a.cols())) {
    std::ostringstream s;
    s << who << ": mask is " << mask.rows() << "x" << mask.cols() << ", expected "
      << a.rows() << "x1 or " << a.rows() << "x" << a.cols();
    throw std::invalid_argument(s.str());
  }
  if (mask.cols() == 1) {
    a.colwise() += mask.col(0);
  } else {
    a += mask;
  }
}

// One softmax retrieval head: patterns K (d x N), state xi (d x B).
//   scores = K^T xi, p = softmax(beta scores + mask), lse = log sum exp(...).
template <typename Scalar>
struct SoftmaxHead {
  Matrix<Scalar> scores;
  Matrix<Scalar> p;
  Vector<Scalar> lse;

  template <typename KT, typename XT>
  void Compute(const KT& K, const XT& xi, Scalar beta, const Matrix<Scalar>& mask,
               const char* who) {
    scores.noalias() = K.transpose() * xi;
    Matrix<Scalar> a = beta * scores;
    AddScoreMask<Scalar>(mask, a, who);
    p.resize(a.rows(), a.cols());
    ColumnSoftmax<Scalar>(a, p, &lse);
  }

  // Derivatives of sum_b <K p_b, u_b> (the retrieval K p paired with u):
  //   d/dK    = U P^T + beta Xi W^T,   W = (diag p - p p^T) K^T U (column-wise)
  //   d/dbeta = sum_b <W_b, scores_b>
  // scaled by `weight` and added to *dK / *dbeta (either may be nullptr).
  template <typename KT, typename XT, typename UT>
  void RetrievalVjp(const KT& K, const XT& xi, const UT& u, Scalar beta, Scalar weight,
                    Matrix<Scalar>* dK, Scalar* dbeta) const {
    Matrix<Scalar> w = K.transpose() * u;
    SoftmaxJacobianProduct<Scalar>(p, w, w);
    if (dK != nullptr) {
      dK->noalias() += weight * (u * p.transpose());
      dK->noalias() += (weight * beta) * (xi * w.transpose());
    }
    if (dbeta != nullptr) *dbeta += weight * Dot(w, scores);
  }

  // out = K (diag p - p p^T) K^T v   (column-wise), scaled by beta * weight.
  template <typename KT, typename VT>
  Matrix<Scalar> CovarianceProduct(const KT& K, const VT& v, Scalar beta) const {
    Matrix<Scalar> w = K.transpose() * v;
    SoftmaxJacobianProduct<Scalar>(p, w, w);
    Matrix<Scalar> out = beta * (K * w);
    return out;
  }

  // sum over entries of w .* s, skipping w == 0 (masked scores may be +-inf).
  static Scalar Dot(const Matrix<Scalar>& w, const Matrix<Scalar>& s) {
    Scalar sum(0);
    for (Index j = 0; j < w.cols(); ++j)
      for (Index i = 0; i < w.rows(); ++i)
        if (w(i, j) != Scalar(0)) sum += w(i, j) * s(i, j);
    return sum;
  }
};

}  // namespace internal

}  // namespace implicit
