/// \file
/// Attention weights as a regularised argmax over the probability simplex.
///
/// \code{.unparsed}
///   p(s) = argmax_{p in simplex} <p, s> - Omega(p)
/// \endcode
///
/// with Omega a convex regulariser (Martins & Astudillo; Blondel, Martins &
/// Niculae; Peters, Niculae & Martins). The Tsallis family
///
/// \code{.unparsed}
///   Omega_alpha(p) = (sum_i p_i^alpha - 1) / (alpha (alpha - 1))   alpha > 1
///   Omega_1(p)     = sum_i p_i log p_i                               (Shannon)
/// \endcode
///
/// gives alpha-entmax, p_i = [(alpha - 1) s_i - tau]_+^{1 / (alpha - 1)} with
/// tau chosen so that sum p = 1: alpha = 1 is softmax, alpha = 2 sparsemax
/// (Euclidean projection onto the simplex), alpha = 1.5 "entmax15". Every
/// alpha > 1 gives sparse weights.
///
/// This header provides, column by column over an N x B score matrix (column b
/// = the N scores of sample b):
/// \code{.unparsed}
///   Softmax, Sparsemax, Entmax15       closed forms (the last two sort-based)
///   Bisect                             any alpha > 1, by bisection on tau
///   Entmax                             dispatch on alpha (1, 1.5, 2 exact forms)
///   JacobianVectorProduct              dp/ds v = (diag(q) - q q^T / sum q) v,
///                                      q_i = p_i^{2 - alpha} on the support
///   AlphaDerivative                    dp/dalpha at fixed scores (alpha > 1)
///   Conjugate                          Omega*(s) = max_p <p,s> - Omega(p), the
///                                      value of the max (log-sum-exp for alpha=1)
///   EntmaxAndConjugate                 both in one pass (alpha = 1.5, 2)
///   Regularizer, LogSumExp
/// \endcode
///
/// Numerics: every column is shifted by its largest finite score first (all
/// maps are shift-invariant and Omega*(s + c) = Omega*(s) + c), so scores of
/// 1e8 are fine. Entries equal to -infinity are *masked*: they get exactly
/// zero weight and do not enter the conjugate. A column whose entries are all
/// -inf gets p = 0 and Omega* = -inf. NaN and +inf scores are not supported.
/// dp/ds is symmetric, so the vector-Jacobian product is the same function.
///
/// \code
///   implicit::Matrix<double> s = ...;                     // N x B scores
///   implicit::Matrix<double> p(s.rows(), s.cols());
///   implicit::entmax::Entmax<double>(s, 1.5, p);          // sparse weights
///   implicit::Vector<double> omega_star(s.cols());
///   implicit::entmax::Conjugate<double>(s, p, 1.5, omega_star);
///   implicit::Matrix<double> jv(s.rows(), s.cols());
///   implicit::entmax::JacobianVectorProduct<double>(p, 1.5, v, jv);
/// \endcode
///
/// For alpha very close to 1 (alpha - 1 < 1e-3 in double, < 1e-1 in float) the
/// bisection loses accuracy (the exponent 1/(alpha-1) is huge): use alpha = 1.
#pragma once

#include <implicit/core/types.h>
#include <implicit/layers/log_sum_exp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {
namespace entmax {
/// \cond INTERNAL
namespace detail {

template <typename Derived>
void CheckShape(const char* function, const char* what, const Eigen::EigenBase<Derived>& m,
                Index rows, Index cols) {
  if (m.rows() != rows || m.cols() != cols) {
    std::ostringstream msg;
    msg << "entmax::" << function << "(" << what << "): expected " << rows << "x" << cols
        << ", got " << m.rows() << "x" << m.cols();
    throw std::invalid_argument(msg.str());
  }
}

template <typename Derived>
void CheckScores(const char* function, const Eigen::EigenBase<Derived>& s) {
  if (s.rows() == 0 || s.cols() == 0) {
    std::ostringstream msg;
    msg << "entmax::" << function << "(scores): empty score matrix (" << s.rows() << "x"
        << s.cols() << ")";
    throw std::invalid_argument(msg.str());
  }
}

inline void CheckAlpha(const char* function, double alpha, bool allow_one) {
  const bool ok = allow_one ? (alpha >= 1.0) : (alpha > 1.0);
  if (!ok || !std::isfinite(alpha)) {
    std::ostringstream msg;
    msg << "entmax::" << function << ": alpha must be finite and " << (allow_one ? ">= 1" : "> 1")
        << ", got " << alpha;
    throw std::invalid_argument(msg.str());
  }
}

/// Largest entry of a column, skipping -inf; -inf when every entry is -inf.
/// (Eigen's vectorised reduction: a scalar loop of std::max keeps the running
/// maximum in memory, and this scan was most of sparsemax's time.)
template <typename Col>
auto FiniteMax(const Col& col) -> typename Col::Scalar {
  using S = typename Col::Scalar;
  return col.size() == 0 ? -std::numeric_limits<S>::infinity() : col.maxCoeff();
}

/// Lower bound on the shifted entries that can be in a sparsemax or 1.5-entmax
/// support (tau >= -1), with a margin.
template <typename S>
constexpr S kSupportBound = S(-1.001);

/// p^alpha for a weight p > 0: p^2 (sparsemax), p sqrt(p) (1.5-entmax), pow.
template <typename S>
S PowerAlpha(S p, S alpha) {
  if (alpha == S(2)) return p * p;
  if (alpha == S(1.5)) return p * std::sqrt(p);
  return std::pow(p, alpha);
}

/// The sort-based closed forms (sparsemax, 1.5-entmax), column by column,
/// touching only the entries that can be in the support. For a column with a
/// finite score, m = its largest one, and the candidates are the entries with
/// (s - m) scale >= kSupportBound: the threshold is tau >= -1 (the largest
/// entry, at 0, alone has weight <= 1), so no other entry is ever in the
/// support (the bound leaves a margin far above rounding). tau =
/// threshold(the candidates' (s - m) scale, sorted in decreasing order); the
/// candidates' weights weight(s - m, tau) >= 0 are renormalised to sum to one
/// (exact in theory; removes rounding drift), and every other entry of p is 0.
/// Sorting and weighting the few candidates instead of the whole column is
/// most of entmax's cost. A column whose scores are all -inf (every entry
/// masked) gets p = 0. When conjugate != nullptr, conjugate[b] =
/// Omega*_alpha(s_b) = m + <p, s - m> - Omega_alpha(p) from the same pass (as
/// Conjugate computes it; -inf for a masked column). p may alias scores.
template <typename S, typename Threshold, typename Weight>
void SupportColumns(const char* function, ConstMatrixRef<S> scores, MatrixRef<S> p, S scale,
                    const Threshold& threshold, const Weight& weight, S alpha, S* conjugate) {
  CheckScores(function, scores);
  CheckShape(function, "p", p, scores.rows(), scores.cols());
  std::vector<Index> support;
  std::vector<S> shifted, sorted, weights;
  for (Index b = 0; b < scores.cols(); ++b) {
    const auto col = scores.col(b);
    const S m = FiniteMax(col);
    if (m == -std::numeric_limits<S>::infinity()) {
      p.col(b).setZero();
      if (conjugate != nullptr) conjugate[b] = m;
      continue;
    }
    support.clear();
    shifted.clear();
    for (Index i = 0; i < col.size(); ++i) {
      const S z = col(i) - m;  // -inf for masked entries
      if (z * scale >= kSupportBound<S>) {
        support.push_back(i);
        shifted.push_back(z);
      }
    }
    sorted.resize(shifted.size());
    for (size_t j = 0; j < shifted.size(); ++j) sorted[j] = shifted[j] * scale;
    std::sort(sorted.begin(), sorted.end(), std::greater<S>());
    const S tau = threshold(sorted);
    weights.resize(shifted.size());
    S sum(0);
    for (size_t j = 0; j < shifted.size(); ++j) {
      weights[j] = weight(shifted[j], tau);
      sum += weights[j];
    }
    p.col(b).setZero();
    S dot(0), powers(0);
    for (size_t j = 0; j < support.size(); ++j) {
      const S w = weights[j] / sum;
      p(support[j], b) = w;
      if (w > S(0)) {
        dot += w * shifted[j];
        powers += PowerAlpha(w, alpha);
      }
    }
    if (conjugate != nullptr) conjugate[b] = m + dot - (powers - S(1)) / (alpha * (alpha - S(1)));
  }
}

/// q_i = p_i^{2 - alpha} on the support (p_i > 0), 0 elsewhere.
template <typename S>
S SupportWeight(S p, S alpha) {
  if (!(p > S(0))) return S(0);
  if (alpha == S(1)) return p;
  if (alpha == S(2)) return S(1);
  if (alpha == S(1.5)) return std::sqrt(p);
  return std::pow(p, S(2) - alpha);
}

/// The thresholded maps, column by column: for each column with a finite
/// score, m = its largest score, tau = threshold(b, m), and p_i = weight(s_i - m,
/// tau) >= 0 renormalised to sum to one (exact in theory; removes rounding
/// drift); a column whose scores are all -inf (every entry masked) gets p = 0.
template <typename S, typename Threshold, typename Weight>
void ThresholdedColumns(const char* function, ConstMatrixRef<S> scores, MatrixRef<S> p,
                        const Threshold& threshold, const Weight& weight) {
  CheckScores(function, scores);
  CheckShape(function, "p", p, scores.rows(), scores.cols());
  for (Index b = 0; b < scores.cols(); ++b) {
    const S m = FiniteMax(scores.col(b));
    if (m == -std::numeric_limits<S>::infinity()) {
      p.col(b).setZero();
      continue;
    }
    const S tau = threshold(b, m);
    S sum(0);
    for (Index i = 0; i < scores.rows(); ++i) {
      const S v = weight(scores(i, b) - m, tau);  // -inf entries -> 0
      p(i, b) = v;
      sum += v;
    }
    p.col(b) /= sum;
  }
}

/// Sparsemax's threshold from the candidates' z = s - m, sorted in decreasing
/// order: support size k = max{k : 1 + k z_(k) > sum_{j<=k} z_(j)}, tau =
/// (sum_{j<=k} z_(j) - 1) / k.
template <typename S>
S SparsemaxThreshold(const std::vector<S>& z) {
  S cumsum(0), tau(0);
  for (size_t j = 0; j < z.size(); ++j) {
    cumsum += z[j];
    const S k = static_cast<S>(j + 1);
    if (S(1) + k * z[j] > cumsum) tau = (cumsum - S(1)) / k;
  }
  return tau;
}
template <typename S>
S SparsemaxWeight(S z, S tau) {
  return std::max(S(0), z - tau);
}

/// 1.5-entmax's threshold from the candidates' z = (s - m) / 2, sorted in
/// decreasing order: tau_k = mean_k - sqrt((1 - k (msq_k - mean_k^2)) / k) for
/// the k largest, the largest k with tau_k <= z_(k) (k = 1: z_(1) = 0, tau = -1).
template <typename S>
S Entmax15Threshold(const std::vector<S>& z) {
  S sum1(0), sum2(0), tau(-1);
  for (size_t j = 0; j < z.size(); ++j) {
    sum1 += z[j];
    sum2 += z[j] * z[j];
    const S k = static_cast<S>(j + 1);
    const S mean = sum1 / k;
    const S delta = (S(1) - k * (sum2 / k - mean * mean)) / k;
    const S tau_k = mean - std::sqrt(std::max(delta, S(0)));
    if (tau_k <= z[j]) tau = tau_k;
  }
  return tau;
}
template <typename S>
S Entmax15Weight(S z, S tau) {
  const S d = std::max(S(0), S(0.5) * z - tau);
  return d * d;
}

}  // namespace detail
/// \endcond

/// values(b) = log sum_i exp(s_ib), max-shifted; -inf for an all-masked column.
/// The kernel of log_sum_exp.h (ColumnLogSumExp), with entmax's argument checks.
/// \throws std::invalid_argument when scores is empty or values does not have
///   one entry per column.
template <typename S>
void LogSumExp(ConstMatrixRef<S> scores, VectorRef<S> values) {
  detail::CheckScores("LogSumExp", scores);
  detail::CheckShape("LogSumExp", "values", values, scores.cols(), 1);
  ColumnLogSumExp<S>(scores, values);
}

/// p.col(b) = softmax(s.col(b)), max-shifted. p may alias scores. The kernel of
/// log_sum_exp.h (ColumnSoftmax), with entmax's argument checks.
/// \throws std::invalid_argument when scores is empty or p is not its shape.
template <typename S>
void Softmax(ConstMatrixRef<S> scores, MatrixRef<S> p) {
  detail::CheckScores("Softmax", scores);
  detail::CheckShape("Softmax", "p", p, scores.rows(), scores.cols());
  ColumnSoftmax<S>(scores, p);
}

/// p.col(b) = sparsemax(s.col(b)) = Euclidean projection of the scores onto the
/// simplex (alpha = 2), by sorting: support size k = max{k : 1 + k z_(k) >
/// sum_{j<=k} z_(j)}, tau = (sum_{j<=k} z_(j) - 1) / k, p = [s - tau]_+.
/// \throws std::invalid_argument when scores is empty or p is not its shape.
template <typename S>
void Sparsemax(ConstMatrixRef<S> scores, MatrixRef<S> p) {
  detail::SupportColumns<S>("Sparsemax", scores, p, S(1), detail::SparsemaxThreshold<S>,
                            detail::SparsemaxWeight<S>, S(2), nullptr);
}

/// p.col(b) = 1.5-entmax(s.col(b)) = [s/2 - tau]_+^2 in closed form (sort-based):
/// for the k largest z = s/2, tau_k = mean_k - sqrt((1 - k (msq_k - mean_k^2)) / k)
/// solves sum_{j<=k} (z_(j) - tau)^2 = 1; the support is the largest k with
/// tau_k <= z_(k).
/// \throws std::invalid_argument when scores is empty or p is not its shape.
template <typename S>
void Entmax15(ConstMatrixRef<S> scores, MatrixRef<S> p) {
  detail::SupportColumns<S>("Entmax15", scores, p, S(0.5), detail::Entmax15Threshold<S>,
                            detail::Entmax15Weight<S>, S(1.5), nullptr);
}

/// p.col(b) = alpha-entmax(s.col(b)) for any alpha > 1 by bisection on tau in
/// p_i = [(alpha-1) z_i - tau]_+^{1/(alpha-1)}, z = s - max s. The bracket
/// [-1, -(1/n)^{alpha-1}] always holds the root; the bisection runs until the
/// bracket cannot shrink in floating point (at most max_iterations halvings),
/// and p is renormalised to sum to one.
/// \throws std::invalid_argument when alpha is not finite and > 1,
///   max_iterations < 1, scores is empty or p is not its shape.
template <typename S>
void Bisect(ConstMatrixRef<S> scores, S alpha, MatrixRef<S> p, int max_iterations = 200) {
  detail::CheckAlpha("Bisect", static_cast<double>(alpha), false);
  if (max_iterations < 1) {
    throw std::invalid_argument("entmax::Bisect: max_iterations must be >= 1, got " +
                                std::to_string(max_iterations));
  }
  const S am1 = alpha - S(1);
  const S expo = S(1) / am1;
  auto power = [&](S d) -> S {
    if (!(d > S(0))) return S(0);
    if (alpha == S(2)) return d;
    if (alpha == S(1.5)) return d * d;
    return std::pow(d, expo);
  };
  auto threshold = [&](Index b, S m) {
    Index finite = 0;
    for (Index i = 0; i < scores.rows(); ++i) {
      if (scores(i, b) > -std::numeric_limits<S>::infinity()) ++finite;
    }
    auto mass = [&](S tau) {
      S sum(0);
      for (Index i = 0; i < scores.rows(); ++i) sum += power(am1 * (scores(i, b) - m) - tau);
      return sum;
    };
    S lo(-1);                                                     // mass(lo) >= 1
    S hi = -std::pow(S(1) / static_cast<S>(finite), am1);        // mass(hi) <= 1
    for (int it = 0; it < max_iterations; ++it) {
      const S mid = S(0.5) * (lo + hi);
      if (!(mid > lo && mid < hi)) break;
      if (mass(mid) >= S(1)) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    return lo;  // the sum of the weights is >= 1 > 0 at tau = lo
  };
  detail::ThresholdedColumns<S>("Bisect", scores, p, threshold,
                                [&](S z, S tau) { return power(am1 * z - tau); });
}

/// alpha-entmax with the exact closed forms where they exist: alpha = 1
/// softmax, 1.5 Entmax15, 2 Sparsemax, any other alpha > 1 Bisect.
/// \throws std::invalid_argument when alpha is not finite and >= 1, scores is
///   empty or p is not its shape.
template <typename S>
void Entmax(ConstMatrixRef<S> scores, S alpha, MatrixRef<S> p) {
  detail::CheckAlpha("Entmax", static_cast<double>(alpha), true);
  if (alpha == S(1)) {
    Softmax<S>(scores, p);
  } else if (alpha == S(1.5)) {
    Entmax15<S>(scores, p);
  } else if (alpha == S(2)) {
    Sparsemax<S>(scores, p);
  } else {
    Bisect<S>(scores, alpha, p);
  }
}

/// out.col(b) = (dp/ds)(s_b) v_b = q (.) v - q (q.v) / sum q with q_i = p_i^{2-alpha}
/// on the support of p (softmax: diag(p) - p p^T). Takes p = Entmax(s, alpha),
/// not s. Symmetric, so this is also the vector-Jacobian product. out may alias v.
/// \throws std::invalid_argument when alpha is not finite and >= 1 or v or out
///   is not the shape of p.
template <typename S>
void JacobianVectorProduct(ConstMatrixRef<S> p, S alpha, ConstMatrixRef<S> v, MatrixRef<S> out) {
  detail::CheckAlpha("JacobianVectorProduct", static_cast<double>(alpha), true);
  detail::CheckShape("JacobianVectorProduct", "v", v, p.rows(), p.cols());
  detail::CheckShape("JacobianVectorProduct", "out", out, p.rows(), p.cols());
  if (alpha == S(1)) {  // softmax: log_sum_exp.h's kernel, (diag p - p p^T) v
    internal::SoftmaxJacobianProduct<S>(p, v, out);
    return;
  }
  Vector<S> q(p.rows());
  for (Index b = 0; b < p.cols(); ++b) {
    S total(0), qv(0);
    for (Index i = 0; i < p.rows(); ++i) {
      q(i) = detail::SupportWeight(p(i, b), alpha);
      total += q(i);
      if (q(i) != S(0)) qv += q(i) * v(i, b);
    }
    const S c = total > S(0) ? qv / total : S(0);
    for (Index i = 0; i < p.rows(); ++i) out(i, b) = q(i) != S(0) ? q(i) * (v(i, b) - c) : S(0);
  }
}

/// out.col(b) = dp/dalpha at fixed scores, for alpha > 1, from p = Entmax(s, alpha):
///   dp_i/dalpha = (p_i - qh_i) / (alpha-1)^2 - (p_i log p_i - qh_i H) / (alpha-1)
/// with q_i = p_i^{2-alpha} on the support, qh = q / sum q and H = sum p log p.
/// (Differentiate log p_i = log((alpha-1) s_i - tau) / (alpha-1) with tau(alpha)
/// fixed by sum p = 1.) Ill-conditioned as alpha -> 1.
/// \throws std::invalid_argument when alpha is not finite and > 1 or out is not
///   the shape of p.
template <typename S>
void AlphaDerivative(ConstMatrixRef<S> p, S alpha, MatrixRef<S> out) {
  detail::CheckAlpha("AlphaDerivative", static_cast<double>(alpha), false);
  detail::CheckShape("AlphaDerivative", "out", out, p.rows(), p.cols());
  const S am1 = alpha - S(1);
  Vector<S> q(p.rows()), plogp(p.rows());
  for (Index b = 0; b < p.cols(); ++b) {
    S total(0), entropy(0);
    for (Index i = 0; i < p.rows(); ++i) {
      q(i) = detail::SupportWeight(p(i, b), alpha);
      plogp(i) = p(i, b) > S(0) ? p(i, b) * std::log(p(i, b)) : S(0);
      total += q(i);
      entropy += plogp(i);
    }
    for (Index i = 0; i < p.rows(); ++i) {
      const S qh = total > S(0) ? q(i) / total : S(0);
      out(i, b) = (p(i, b) - qh) / (am1 * am1) - (plogp(i) - qh * entropy) / am1;
    }
  }
}

/// values(b) = Omega_alpha(p.col(b)) (Tsallis, or sum p log p for alpha = 1).
/// \throws std::invalid_argument when alpha is not finite and >= 1 or values
///   does not have one entry per column of p.
template <typename S>
void Regularizer(ConstMatrixRef<S> p, S alpha, VectorRef<S> values) {
  detail::CheckAlpha("Regularizer", static_cast<double>(alpha), true);
  detail::CheckShape("Regularizer", "values", values, p.cols(), 1);
  for (Index b = 0; b < p.cols(); ++b) {
    S acc(0);
    for (Index i = 0; i < p.rows(); ++i) {
      const S pi = p(i, b);
      if (!(pi > S(0))) continue;
      if (alpha == S(1)) {
        acc += pi * std::log(pi);
      } else if (alpha == S(2)) {
        acc += pi * pi;
      } else {
        acc += std::pow(pi, alpha);
      }
    }
    values(b) = alpha == S(1) ? acc : (acc - S(1)) / (alpha * (alpha - S(1)));
  }
}

/// values(b) = Omega*_alpha(s_b) = <p_b, s_b> - Omega_alpha(p_b), the value of
/// the regularised max, given p = Entmax(scores, alpha). alpha = 1 returns the
/// log-sum-exp of the scores (p unused except for its shape). Computed on the
/// max-shifted scores; masked (-inf) entries do not contribute; -inf for an
/// all-masked column. Its gradient with respect to s is p (Danskin).
/// \throws std::invalid_argument when scores is empty, alpha is not finite and
///   >= 1, p is not the shape of scores or values does not have one entry per
///   column.
template <typename S>
void Conjugate(ConstMatrixRef<S> scores, ConstMatrixRef<S> p, S alpha, VectorRef<S> values) {
  detail::CheckScores("Conjugate", scores);
  detail::CheckAlpha("Conjugate", static_cast<double>(alpha), true);
  detail::CheckShape("Conjugate", "p", p, scores.rows(), scores.cols());
  detail::CheckShape("Conjugate", "values", values, scores.cols(), 1);
  if (alpha == S(1)) {
    LogSumExp<S>(scores, values);
    return;
  }
  Vector<S> omega(scores.cols());
  Regularizer<S>(p, alpha, omega);
  for (Index b = 0; b < scores.cols(); ++b) {
    const S m = detail::FiniteMax(scores.col(b));
    if (m == -std::numeric_limits<S>::infinity()) {
      values(b) = m;
      continue;
    }
    S dot(0);
    for (Index i = 0; i < scores.rows(); ++i) {
      if (p(i, b) > S(0)) dot += p(i, b) * (scores(i, b) - m);
    }
    values(b) = m + dot - omega(b);
  }
}

/// p = Entmax(scores, alpha) and values = Conjugate(scores, p, alpha), in
/// one pass over each column for alpha = 1.5 and 2 (the conjugate from the
/// support alone), otherwise by the two calls. p must not alias scores.
/// \throws std::invalid_argument as Entmax and Conjugate.
template <typename S>
void EntmaxAndConjugate(ConstMatrixRef<S> scores, S alpha, MatrixRef<S> p, VectorRef<S> values) {
  detail::CheckAlpha("EntmaxAndConjugate", static_cast<double>(alpha), true);
  detail::CheckShape("EntmaxAndConjugate", "values", values, scores.cols(), 1);
  if (alpha == S(2)) {
    detail::SupportColumns<S>("EntmaxAndConjugate", scores, p, S(1), detail::SparsemaxThreshold<S>,
                              detail::SparsemaxWeight<S>, alpha, values.data());
  } else if (alpha == S(1.5)) {
    detail::SupportColumns<S>("EntmaxAndConjugate", scores, p, S(0.5), detail::Entmax15Threshold<S>,
                              detail::Entmax15Weight<S>, alpha, values.data());
  } else {
    Entmax<S>(scores, alpha, p);
    Conjugate<S>(scores, p, alpha, values);
  }
}

}  // namespace entmax
}  // namespace implicit
