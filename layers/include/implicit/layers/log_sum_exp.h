/// \file
/// Numerically safe column-wise log-sum-exp and softmax, the building block of
/// every softmax-type attention energy (modern Hopfield, the discrete
/// log-normaliser, the Hopfield layers).
///
/// Each column of a score matrix a (N x B) is one sample's scores over N
/// patterns/keys. Both functions shift by the column maximum before
/// exponentiating, so scores of 1e8 (or 1e30 in double) give exact results
/// instead of Inf/NaN. Entries equal to -inf are "masked": they get weight
/// exactly 0. Special columns, by design:
/// \code{.unparsed}
///   all entries -inf       lse = -inf, p = 0 (no pattern is allowed)
///   some entry +inf        lse = +inf, p uniform over the +inf entries
///   some entry NaN         lse = NaN,  p = NaN (propagated, never hidden)
/// \endcode
///
/// \code
///   implicit::Matrix<double> scores = beta * (X.transpose() * xi);  // N x B
///   implicit::Matrix<double> p(scores.rows(), scores.cols());
///   implicit::Vector<double> lse(scores.cols());
///   implicit::ColumnSoftmax<double>(scores, p, &lse);  // p = softmax, lse = log sum exp
/// \endcode
///
/// p may alias a (in-place softmax).
///
/// Speed: each column is processed while it sits in cache (max, one vectorised
/// exp pass that also zeroes the masked entries, the sum, the scaling), so the
/// N x B matrix is streamed through memory once. Also here, for the attention
/// energies' hot paths (internal): the in-place scaled softmax
/// softmax(beta a + mask) (ScaledColumnSoftmaxInPlace), the log-sum-exp alone
/// without storing the weights, and per-thread scratch buffers (ThreadScratch)
/// that make repeated evaluations allocation-free and keep const energies safe
/// to call from several threads at once, and the column blocks the attention
/// energies evaluate a batch in (ColumnBlocks, ScoreBlocks,
/// SoftmaxAttentionBlocks: each block's scores kept in cache, the blocks on
/// Eigen's threads). Built with OpenMP, large matrices are
/// processed on Eigen::nbThreads() threads, a column each (same results).
/// In float and double, ColumnSoftmax and the in-place pass run the
/// CPU-dispatched kernel (core/cpu_dispatch.h): AVX2 or AVX-512 where the CPU
/// has them, whatever the build's flags.
#pragma once

#include <implicit/core/cpu_dispatch.h>
#include <implicit/core/gemm.h>
#include <implicit/core/parallel_for.h>
#include <implicit/core/types.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <type_traits>

namespace implicit {
namespace internal {

/// x -> exp(x - shift), exactly 0 where x = -inf (Eigen's vectorised exp returns
/// a denormal there, not 0) and NaN where x is NaN. Vectorised.
template <typename Scalar>
struct ShiftedMaskedExp {
  Scalar shift;
  Scalar operator()(const Scalar& x) const {
    return x == -std::numeric_limits<Scalar>::infinity() ? Scalar(0) : std::exp(x - shift);
  }
  template <typename Packet>
  Packet packetOp(const Packet& x) const {
    namespace ei = Eigen::internal;
    const Packet e = ei::pexp(ei::psub(x, ei::pset1<Packet>(shift)));
    return ei::pandnot(e, ei::pcmp_eq(x, ei::pset1<Packet>(-std::numeric_limits<Scalar>::infinity())));
  }
};

}  // namespace internal
}  // namespace implicit

namespace Eigen {
namespace internal {
template <typename Scalar>
struct functor_traits<implicit::internal::ShiftedMaskedExp<Scalar>> {
  enum {
    Cost = functor_traits<scalar_exp_op<Scalar>>::Cost + 3 * NumTraits<Scalar>::AddCost,
    PacketAccess = packet_traits<Scalar>::HasExp && packet_traits<Scalar>::HasCmp
  };
};
}  // namespace internal
}  // namespace Eigen

namespace implicit {
namespace internal {

/// The special columns (see the top of this file) once the maximum m of the
/// column is known not to be finite, or a NaN was seen: fills p (when given)
/// and returns lse. a and p may alias.
template <typename Scalar>
Scalar SpecialSoftmaxColumn(Eigen::Ref<const Vector<Scalar>> a, Scalar m, bool seen_nan,
                            Eigen::Ref<Vector<Scalar>>* p) {
  const Scalar inf = std::numeric_limits<Scalar>::infinity();
  const Scalar nan = std::numeric_limits<Scalar>::quiet_NaN();
  if (seen_nan || std::isnan(m) || a.hasNaN()) {
    if (p != nullptr) p->setConstant(nan);
    return nan;
  }
  if (m == -inf) {  // every entry masked
    if (p != nullptr) p->setZero();
    return -inf;
  }
  // m == +inf: the weight is shared by the +inf entries.
  if (p != nullptr) {
    const Scalar w = Scalar(1) / static_cast<Scalar>((a.array() == inf).count());
    for (Index i = 0; i < a.size(); ++i) (*p)(i) = (a(i) == inf) ? w : Scalar(0);
  }
  return inf;
}

/// p = softmax(a) of one column; returns log sum exp(a). a and p may alias.
template <typename Scalar>
Scalar SoftmaxColumn(Eigen::Ref<const Vector<Scalar>> a, Eigen::Ref<Vector<Scalar>> p) {
  const Scalar m = a.maxCoeff();
  if (!std::isfinite(m)) return SpecialSoftmaxColumn<Scalar>(a, m, false, &p);
  p = a.unaryExpr(ShiftedMaskedExp<Scalar>{m});  // masked entries: exactly 0
  const Scalar sum = p.sum();                    // >= 1: the maximum contributes exp(0)
  if (std::isnan(sum)) return SpecialSoftmaxColumn<Scalar>(a, m, true, &p);
  p *= Scalar(1) / sum;
  return m + std::log(sum);
}

/// log sum exp(a) of one column, without storing the weights.
template <typename Scalar>
Scalar LogSumExpColumn(Eigen::Ref<const Vector<Scalar>> a) {
  const Scalar m = a.maxCoeff();
  if (!std::isfinite(m)) return SpecialSoftmaxColumn<Scalar>(a, m, false, nullptr);
  const Scalar sum = a.unaryExpr(ShiftedMaskedExp<Scalar>{m}).sum();
  if (std::isnan(sum)) return SpecialSoftmaxColumn<Scalar>(a, m, true, nullptr);
  return m + std::log(sum);
}

/// Threads for a column-by-column pass over an N x B matrix: as many as Eigen
/// may use (Eigen::setNbThreads; 1 while an app runs its own threads, and
/// without OpenMP), for matrices large enough to be worth it. Each column is
/// computed the same way whatever the thread count, so results do not depend on it.
inline int ColumnThreads(Index rows, Index cols) {
  if (rows * cols < (Index(1) << 16) || cols < 2) return 1;
  return static_cast<int>(std::max<Index>(1, std::min<Index>(Eigen::nbThreads(), cols)));
}

/// A per-thread scratch matrix (rows x cols) for the hot paths: the buffer only
/// grows, so repeated calls with the same or fewer entries do not allocate, and
/// each thread has its own, so const energies stay safe to call concurrently.
/// Slot tells apart the buffers one evaluation uses at the same time. The view
/// is valid until the next call with the same Scalar and Slot on this thread.
template <typename Scalar, int Slot>
Eigen::Map<Matrix<Scalar>> ThreadScratch(Index rows, Index cols) {
  static thread_local Vector<Scalar> buffer;
  if (buffer.size() < rows * cols) buffer.resize(rows * cols);
  return Eigen::Map<Matrix<Scalar>>(buffer.data(), rows, cols);
}

/// Throws unless mask is empty, N x 1 or N x B for scores of shape N x B.
template <typename Scalar>
void CheckScoreMask(const Matrix<Scalar>& mask, Index N, Index B, const char* who) {
  if (mask.size() == 0) return;
  if (mask.rows() != N || (mask.cols() != 1 && mask.cols() != B)) {
    std::ostringstream s;
    s << who << ": mask is " << mask.rows() << "x" << mask.cols() << ", expected " << N
      << "x1 or " << N << "x" << B;
    throw std::invalid_argument(s.str());
  }
}

/// ScaledColumnSoftmaxInPlace's pass on the columns first .. first + a.cols()
/// of a batch whose mask (empty, N x 1, or N x B for the whole batch) the
/// caller has checked (CheckScoreMask): a's column b takes the mask's column
/// first + b.
template <typename Scalar>
void ScaledColumnSoftmaxColumns(MatrixRef<Scalar> a, Scalar beta, const Matrix<Scalar>& mask, Index first,
                                Scalar* lse, bool want_weights) {
  const Index mask_first = mask.cols() == 1 ? 0 : first;
  const int threads = ColumnThreads(a.rows(), a.cols());
  if constexpr (std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>) {
    Scalar* l = lse != nullptr ? lse : ThreadScratch<Scalar, 9>(a.cols(), 1).data();
    ScaledSoftmaxColumnsKernel<Scalar>(a.data(), a.rows(), a.cols(), a.outerStride(), beta,
                                       mask.size() == 0 ? nullptr : mask.data() + mask_first * mask.rows(),
                                       mask.cols() == 1 ? 0 : mask.rows(), l, want_weights, threads);
    for (Index b = 0; b < a.cols(); ++b) {
      if (std::isfinite(l[b])) continue;
      auto col = a.col(b);  // holds beta a + mask, or a NaN sum's exponentials
      Eigen::Ref<Vector<Scalar>> weights(col);
      l[b] = SpecialSoftmaxColumn<Scalar>(col, l[b], std::isnan(l[b]), want_weights ? &weights : nullptr);
    }
  } else {
    ParallelFor(a.cols(), threads, [&](Index b, int) {
      auto col = a.col(b);
      if (mask.size() == 0) {
        if (beta != Scalar(1)) col *= beta;
      } else {
        const auto m = mask.col(mask.cols() == 1 ? 0 : mask_first + b);
        if (beta != Scalar(1)) {
          col = beta * col + m;
        } else {
          col += m;
        }
      }
      const Scalar l = want_weights ? SoftmaxColumn<Scalar>(col, col) : LogSumExpColumn<Scalar>(col);
      if (lse != nullptr) lse[b] = l;
    });
  }
}

/// In place, column by column: a <- softmax(beta a + mask) (the mask is empty,
/// N x 1 or N x B; additive), and lse[b] = log sum exp(beta a_b + mask_b) when
/// lse != nullptr (B entries). With want_weights = false only lse is computed
/// and a holds beta a + mask on return. Does not allocate.
/// For float and double the pass is the CPU-dispatched kernel
/// (core/cpu_dispatch.h), and the special columns it leaves are finished here.
template <typename Scalar>
void ScaledColumnSoftmaxInPlace(MatrixRef<Scalar> a, Scalar beta, const Matrix<Scalar>& mask,
                                Scalar* lse, const char* who, bool want_weights = true) {
  CheckScoreMask<Scalar>(mask, a.rows(), a.cols(), who);
  ScaledColumnSoftmaxColumns<Scalar>(a, beta, mask, 0, lse, want_weights);
}

/// The column blocks ColumnBlocks cuts a batch of B samples into: an even
/// number of blocks of about 64 columns (two for B < 128, one for B = 1), from
/// B alone, so that each column is computed the same way whatever the thread
/// count.
inline Index ColumnBlockWidth(Index B) {
  const Index blocks = B <= 1 ? 1 : 2 * ((B + 127) / 128);
  return std::max<Index>(1, (B + blocks - 1) / blocks);
}

/// block(c0, c) for the column blocks [c0, c0 + c) of a batch of B samples
/// (ColumnBlockWidth), on the threads Eigen may use (one OpenMP parallel
/// region, each block on one thread; on the calling thread inside a parallel
/// region or without OpenMP). block must write only its columns of its outputs.
/// \throws what block throws (after every block has run).
template <typename Block>
void ColumnBlocks(Index B, Block&& block) {
  if (B == 0) return;
  const Index width = ColumnBlockWidth(B), blocks = (B + width - 1) / width;
  ParallelFor(blocks, Eigen::nbThreads(), [&](Index k, int) { block(k * width, std::min(width, B - k * width)); });
}

/// The scores of the samples xi (n x B) against X (n x N) in ColumnBlocks,
/// for the hot paths of the attention energies: for each block of columns
/// [c0, c0 + c), s = alpha X^T xi_blk (N x c, this thread's scratch slot 0),
/// then block(c0, c, s), which may overwrite s and must write only the
/// block's columns of its outputs.
///
/// Why blocks: an N x 64 block of scores stays in cache from the score
/// product through the column pass (softmax, entmax) to the product with X
/// that usually follows, where an N x B matrix would go to memory and back
/// three times; and the blocks run on the threads Eigen may use, each
/// block's products and pass on one thread, in one parallel region per call
/// (docs/performance.md, "Softmax attention in column blocks").
/// \throws what block throws (after every block has run).
template <typename Scalar, typename Block>
void ScoreBlocks(ConstMatrixRef<Scalar> X, ConstMatrixRef<Scalar> xi, Scalar alpha, Block&& block) {
  ColumnBlocks(xi.cols(), [&](Index c0, Index c) {
    auto s = ThreadScratch<Scalar, 0>(X.cols(), c);
    GemmInto<Scalar>(s, X, /*transpose_a=*/true, xi.middleCols(c0, c), alpha);
    block(c0, c, s);
  });
}

/// Softmax attention in ScoreBlocks: for each block of columns [c0, c0 + c),
/// p = softmax(beta X^T xi_blk + mask) (N x c; the mask empty, N x 1 or N x
/// B) and, when lse != nullptr, lse[c0 .. c0 + c), then finish(c0, c, p).
/// With want_weights = false p holds beta X^T xi_blk + mask instead and only
/// lse is computed.
/// \throws std::invalid_argument when the mask does not fit; what finish throws.
template <typename Scalar, typename Finish>
void SoftmaxAttentionBlocks(ConstMatrixRef<Scalar> X, ConstMatrixRef<Scalar> xi, Scalar beta,
                            const Matrix<Scalar>& mask, Scalar* lse, bool want_weights, const char* who,
                            Finish&& finish) {
  CheckScoreMask<Scalar>(mask, X.cols(), xi.cols(), who);
  ScoreBlocks<Scalar>(X, xi, Scalar(1), [&](Index c0, Index c, Eigen::Map<Matrix<Scalar>> p) {
    ScaledColumnSoftmaxColumns<Scalar>(p, beta, mask, c0, lse != nullptr ? lse + c0 : nullptr, want_weights);
    finish(c0, c, Eigen::Map<const Matrix<Scalar>>(p.data(), p.rows(), c));
  });
}

}  // namespace internal

/// p.col(b) = softmax(a.col(b)); when lse != nullptr also (*lse)(b) = log sum_i exp(a(i, b))
/// (lse is resized to B). a: N x B scores; p: N x B, may alias a; the special
/// columns are described in the file comment.
/// \throws std::invalid_argument when p is not the shape of a.
template <typename Scalar>
void ColumnSoftmax(ConstMatrixRef<Scalar> a, MatrixRef<Scalar> p,
                   Vector<Scalar>* lse = nullptr) {
  internal::CheckShape("ColumnSoftmax(p)", p, a.rows(), a.cols());
  if (lse != nullptr) lse->resize(a.cols());
  if constexpr (std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>) {
    if (p.data() != a.data() || p.outerStride() != a.outerStride()) p = a;
    internal::ScaledColumnSoftmaxInPlace<Scalar>(p, Scalar(1), Matrix<Scalar>(),
                                                 lse != nullptr ? lse->data() : nullptr, "ColumnSoftmax");
    return;
  }
  internal::ParallelFor(a.cols(), internal::ColumnThreads(a.rows(), a.cols()), [&](Index b, int) {
    const Scalar l = internal::SoftmaxColumn<Scalar>(a.col(b), p.col(b));
    if (lse != nullptr) (*lse)(b) = l;
  });
}

/// out(b) = log sum_i exp(a(i, b)), with the special columns described in the
/// file comment. a: N x B scores; out has length B.
/// \throws std::invalid_argument when out does not have length B.
template <typename Scalar>
void ColumnLogSumExp(ConstMatrixRef<Scalar> a, VectorRef<Scalar> out) {
  internal::CheckShape("ColumnLogSumExp(out)", out, a.cols(), 1);
  for (Index b = 0; b < a.cols(); ++b) out(b) = internal::LogSumExpColumn<Scalar>(a.col(b));
}

namespace internal {
/// The softmax Jacobian applied column-wise: out.col(b) = (diag p_b - p_b p_b^T) g_b
/// = p_b .* (g_b - <p_b, g_b>). Entries with p = 0 (masked) give 0 even when g is
/// +-inf there. out may alias g.
template <typename Scalar>
void SoftmaxJacobianProduct(ConstMatrixRef<Scalar> p, ConstMatrixRef<Scalar> g,
                            MatrixRef<Scalar> out) {
  for (Index b = 0; b < p.cols(); ++b) {
    const auto pb = p.col(b).array();
    const auto gb = g.col(b).array();
    // Vectorised when <p, g> is finite (then g is finite wherever p != 0 and
    // nowhere +-inf where p == 0, since 0 * inf = NaN would show up).
    Scalar mean = p.col(b).dot(g.col(b));
    if (std::isfinite(mean)) {
      out.col(b) = (pb * (gb - mean)).matrix();
      continue;
    }
    mean = Scalar(0);
    for (Index i = 0; i < p.rows(); ++i) {
      if (p(i, b) != Scalar(0)) mean += p(i, b) * g(i, b);
    }
    for (Index i = 0; i < p.rows(); ++i) {
      out(i, b) = (p(i, b) != Scalar(0)) ? p(i, b) * (g(i, b) - mean) : Scalar(0);
    }
  }
}

/// One softmax retrieval head: patterns K (d x N), state xi (d x B).
///   scores = K^T xi, p = softmax(beta scores + mask), lse = log sum exp(...).
template <typename Scalar>
struct SoftmaxHead {
  Matrix<Scalar> scores;
  Matrix<Scalar> p;
  Vector<Scalar> lse;

  template <typename KT, typename XT>
  void Compute(const KT& K, const XT& xi, Scalar beta, const Matrix<Scalar>& mask,
               const char* who) {
    scores.resize(K.cols(), xi.cols());
    GemmInto<Scalar>(scores, K, /*transpose_a=*/true, xi);
    p = scores;
    lse.resize(xi.cols());
    ScaledColumnSoftmaxInPlace<Scalar>(p, beta, mask, lse.data(), who);
  }

  /// Derivatives of sum_b <K p_b, u_b> (the retrieval K p paired with u):
  ///   d/dK    = U P^T + beta Xi W^T,   W = (diag p - p p^T) K^T U (column-wise)
  ///   d/dbeta = sum_b <W_b, scores_b>
  /// scaled by `weight` and added to *dK / *dbeta (either may be nullptr).
  template <typename KT, typename XT, typename UT>
  void RetrievalVjp(const KT& K, const XT& xi, const UT& u, Scalar beta, Scalar weight,
                    Matrix<Scalar>* dK, Scalar* dbeta) const {
    Matrix<Scalar> w(K.cols(), u.cols());
    GemmInto<Scalar>(w, K, /*transpose_a=*/true, u);
    SoftmaxJacobianProduct<Scalar>(p, w, w);
    if (dK != nullptr) {
      GemmOpInto<Scalar>(*dK, u, false, p, true, weight, Scalar(1));
      GemmOpInto<Scalar>(*dK, xi, false, w, true, weight * beta, Scalar(1));
    }
    if (dbeta != nullptr) *dbeta += weight * Dot(w, scores);
  }

  /// out = K (diag p - p p^T) K^T v   (column-wise), scaled by beta * weight.
  template <typename KT, typename VT>
  Matrix<Scalar> CovarianceProduct(const KT& K, const VT& v, Scalar beta) const {
    Matrix<Scalar> w(K.cols(), v.cols());
    GemmInto<Scalar>(w, K, /*transpose_a=*/true, v);
    SoftmaxJacobianProduct<Scalar>(p, w, w);
    Matrix<Scalar> out(K.rows(), v.cols());
    GemmInto<Scalar>(out, K, false, w, beta);
    return out;
  }

  /// sum over entries of w .* s, skipping w == 0 (masked scores may be +-inf).
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
