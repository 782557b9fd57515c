/// \file
/// internal::SeparableEnergy: the separable interaction energy shared by the
/// dense associative memories and the RBM-effective energies (rbm.h),
/// \code{.unparsed}
///   E(x) = (q/2)|x|^2 - <bias, x> - sum_mu G_mu(w_mu . x),
/// \endcode
/// value, gradient, Hessian-vector and parameter products from an entry-wise
/// evaluator of G, G' and G'' (internal: the energies wrap it).
///
/// \code
///   internal::SeparableEnergy<double> kernel;            // q = 1
///   auto eval = [&](const Matrix<double>& s, Matrix<double>* g, Matrix<double>* dg,
///                   Matrix<double>* d2g) { f.Evaluate<double>(s, g, dg, d2g); };
///   kernel.Value(W, nullptr, eval, x, values);           // W: n x N couplings
/// \endcode
#pragma once

#include <implicit/core/gemm.h>
#include <implicit/core/linearization.h>
#include <implicit/core/types.h>
#include <implicit/core/workspace_pool.h>
#include <implicit/layers/log_sum_exp.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {

namespace internal {

/// The separable interaction energy shared by dense associative memories and
/// RBM-effective energies.
/// \code{.unparsed}
///   E(x) = (q/2)|x|^2 - <bias, x> - sum_mu G_mu(w_mu . x)
/// \endcode
/// with eval(s, G*, G'*, G''*) evaluating G entry-wise (row mu = unit mu).
/// A batch is done in column blocks of about 64 columns on Eigen's threads
/// (internal::ColumnBlocks, log_sum_exp.h: each block's scores, G and
/// product with W on one thread, the N x 64 scratch kept per thread between
/// calls and in cache during the block) — or, where G'' is kept for a
/// linearisation (HessianAt, RetrievalValueAndHessian) and for WeightVjp, in
/// chunks of kChunkColumns columns one after the other (WorkspacePool: one
/// per concurrent caller; the last chunk has a pool of its own). Either way
/// the scratch keeps its size whatever the batch. (Whole-batch scratch was
/// reallocated whenever the batch changed size, as an active set does: at N
/// = B = 1797 three matrices of 26 MB and their page faults per call.)
template <typename Scalar>
struct SeparableEnergy {
  Scalar q = Scalar(1);

  /// The unit inputs W^T x (N x B), the energy's large product, into *s.
  template <typename WT>
  static void Scores(const WT& W, ConstMatrixRef<Scalar> x, Matrix<Scalar>* s) {
    s->resize(W.cols(), x.cols());
    GemmInto<Scalar>(*s, W, /*transpose_a=*/true, x);
  }

  template <typename WT, typename Eval>
  void Value(const WT& W, const Vector<Scalar>* bias, const Eval& eval,
             ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const {
    ForEachBlock(x.cols(), [&](Work& w, Index c, Index k) {
      Scores(W, x.middleCols(c, k), &w.s);
      eval(w.s, &w.g, nullptr, nullptr);
      values.segment(c, k) = w.g.colwise().sum().transpose();
    });
    Finish(bias, x, values);
  }
  /// *r = bias + W G'(W^T x) and values = E(x), from one product W^T x.
  template <typename WT, typename Eval>
  void RetrievalAndValue(const WT& W, const Vector<Scalar>* bias, const Eval& eval,
                         ConstMatrixRef<Scalar> x, Matrix<Scalar>* r,
                         VectorRef<Scalar> values) const {
    RetrievalAndValue(W, bias, eval, x, r, values, nullptr);
  }
  /// RetrievalAndValue and the Hessian at x (as HessianAt) from the same
  /// scores W^T x: G'' comes from the entry-wise pass that gives G and G'.
  template <typename WeightsOf, typename Eval>
  std::unique_ptr<Linearization<Scalar>> RetrievalValueAndHessian(WeightsOf weights_of, const Vector<Scalar>* bias,
                                                                  const Eval& eval, ConstMatrixRef<Scalar> x,
                                                                  Matrix<Scalar>* r, VectorRef<Scalar> values) const {
    auto hessian = NewHessian(weights_of, x.cols());
    RetrievalAndValue(weights_of(), bias, eval, x, r, values, &hessian->chunks());
    return hessian;
  }
  /// grad = q x - bias - W G'(W^T x);   *retrieval (optional) = bias + W G'(W^T x).
  template <typename WT, typename Eval>
  void Gradient(const WT& W, const Vector<Scalar>* bias, const Eval& eval,
                ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const {
    Matrix<Scalar> r;
    Retrieval(W, bias, eval, x, &r);
    grad = q * x - r;
  }
  template <typename WT, typename Eval>
  void Retrieval(const WT& W, const Vector<Scalar>* bias, const Eval& eval,
                 ConstMatrixRef<Scalar> x, Matrix<Scalar>* r) const {
    r->resize(W.rows(), x.cols());
    ForEachBlock(x.cols(), [&](Work& w, Index c, Index k) {
      Scores(W, x.middleCols(c, k), &w.s);
      eval(w.s, nullptr, &w.dg, nullptr);
      GemmInto<Scalar>(r->middleCols(c, k), W, false, w.dg);
    });
    if (bias != nullptr) r->colwise() += *bias;
  }
  /// The Hessian at x keeping G''(W^T x): a product there is two GEMMs.
  /// weights_of() gives W at each product (so a view of parameters stays valid).
  template <typename WeightsOf, typename Eval>
  std::unique_ptr<Linearization<Scalar>> HessianAt(WeightsOf weights_of, const Eval& eval,
                                                   ConstMatrixRef<Scalar> x) const {
    auto hessian = NewHessian(weights_of, x.cols());
    ForEachChunk(x.cols(), [&](Work& w, Index c, Index k) {
      Scores(weights_of(), x.middleCols(c, k), &w.s);
      eval(w.s, nullptr, nullptr, &hessian->chunks()[static_cast<std::size_t>(c / kChunkColumns)]);
    });
    return hessian;
  }
  /// H v = q v - W (G''(s) .* W^T v).
  template <typename WT, typename Eval>
  void HessianVectorProduct(const WT& W, const Eval& eval, ConstMatrixRef<Scalar> x,
                            ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const {
    ForEachBlock(x.cols(), [&](Work& w, Index c, Index k) {
      Scores(W, x.middleCols(c, k), &w.s);
      eval(w.s, nullptr, nullptr, &w.d2g);
      w.g.resize(W.cols(), k);
      HessianProduct(W, q, [&w](Index j) { return w.d2g.col(j); }, v.middleCols(c, k), w.g, out.middleCols(c, k));
    });
  }
  /// d/dW sum_b <grad E(x_b), u_b> = -(U G'(S)^T + X (G''(S) .* W^T U)^T).
  template <typename WT, typename Eval>
  Matrix<Scalar> WeightVjp(const WT& W, const Eval& eval, ConstMatrixRef<Scalar> x,
                           ConstMatrixRef<Scalar> u) const {
    Matrix<Scalar> out = Matrix<Scalar>::Zero(W.rows(), W.cols());
    ForEachChunk(x.cols(), [&](Work& w, Index c, Index k) {
      Scores(W, x.middleCols(c, k), &w.s);
      eval(w.s, nullptr, &w.dg, &w.d2g);
      w.g.resize(W.cols(), k);  // G''(s) .* W^T u
      GemmInto<Scalar>(w.g, W, /*transpose_a=*/true, u.middleCols(c, k));
      w.g.array() *= w.d2g.array();
      internal::GemmOpInto<Scalar>(out, u.middleCols(c, k), false, w.dg, true, Scalar(-1), Scalar(1));
      internal::GemmOpInto<Scalar>(out, x.middleCols(c, k), false, w.g, true, Scalar(-1), Scalar(1));
    });
    return out;
  }

  /// The columns of a batch done at a time (see the class comment).
  static constexpr Index kChunkColumns = 256;

 private:
  // The scores S = W^T x and G, G', G'' at them (N x chunk each).
  struct Work {
    Matrix<Scalar> s, g, dg, d2g;
  };
  // f(work, first column, columns) for each internal::ColumnBlocks block of a
  // batch of `cols` columns (about 64 columns; the blocks on Eigen's threads,
  // each with this thread's Work: one for the blocks of full width and one
  // for a shorter last block, so that neither is resized from block to
  // block). For the passes that keep nothing per chunk.
  template <typename F>
  static void ForEachBlock(Index cols, F&& f) {
    const Index width = ColumnBlockWidth(cols);
    ColumnBlocks(cols, [&](Index c, Index k) { f(ThreadWork(k == width ? 0 : 1), c, k); });
  }
  static Work& ThreadWork(int i) {
    static thread_local Work work[2];
    return work[i];
  }
  // f(work, first column, columns) for each chunk of a batch of `cols` columns.
  template <typename F>
  void ForEachChunk(Index cols, F&& f) const {
    const Index full_end = cols - cols % kChunkColumns;
    if (full_end > 0) {
      auto w = full_chunks_.Acquire();
      for (Index c = 0; c < full_end; c += kChunkColumns) f(*w, c, kChunkColumns);
    }
    if (full_end < cols) f(*last_chunk_.Acquire(), full_end, cols - full_end);
  }
  // *r = bias + W G'(W^T x) and values = E(x); with d2g, also G''(W^T x), a
  // matrix per chunk of columns.
  template <typename WT, typename Eval>
  void RetrievalAndValue(const WT& W, const Vector<Scalar>* bias, const Eval& eval, ConstMatrixRef<Scalar> x,
                         Matrix<Scalar>* r, VectorRef<Scalar> values, std::vector<Matrix<Scalar>>* d2g) const {
    r->resize(W.rows(), x.cols());
    const auto chunk = [&](Work& w, Index c, Index k) {
      Scores(W, x.middleCols(c, k), &w.s);
      eval(w.s, &w.g, &w.dg, d2g == nullptr ? nullptr : &(*d2g)[static_cast<std::size_t>(c / kChunkColumns)]);
      values.segment(c, k) = w.g.colwise().sum().transpose();
      GemmInto<Scalar>(r->middleCols(c, k), W, false, w.dg);
    };
    if (d2g == nullptr) {
      ForEachBlock(x.cols(), chunk);
    } else {
      ForEachChunk(x.cols(), chunk);  // G'' kept per chunk of kChunkColumns (Hessian::Curvature)
    }
    Finish(bias, x, values);
    if (bias != nullptr) r->colwise() += *bias;
  }
  // values = (q/2)|x|^2 - <bias, x> - values (values: the sums of G).
  void Finish(const Vector<Scalar>* bias, ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const {
    values = (Scalar(0.5) * q) * x.colwise().squaredNorm().transpose() - values;
    if (bias != nullptr) values.noalias() -= x.transpose() * (*bias);
  }

  /// out.col(j) = q v.col(j) - W (curvature(j) .* W^T v.col(j)), given G''
  /// at the sample of column j, curvature(j) (t: N x v.cols() scratch). The
  /// scaling is shared among Eigen's threads (a column each: same results).
  template <typename CurvatureOf>
  static void HessianProduct(ConstMatrixRef<Scalar> W, Scalar q, CurvatureOf curvature, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> t, MatrixRef<Scalar> out) {
    GemmInto<Scalar>(t, W, /*transpose_a=*/true, v);
    ParallelFor(v.cols(), ColumnThreads(t.rows(), t.cols()),
                [&](Index j, int) { t.col(j).array() *= curvature(j).array(); });
    out = q * v;
    GemmInto<Scalar>(out, W, false, t, Scalar(-1), Scalar(1));
  }
  // G'' at a linearisation's point, N x B as one matrix per chunk of
  // kChunkColumns columns (the entry-wise pass writes each chunk in place):
  // storage that a linearisation borrows from the energy's pool and gives
  // back when destroyed, so that Newton-CG's linearisations (at every point it
  // evaluates, of a shrinking active set) allocate next to nothing after the
  // first ones (at N = B = 1797: 26 MB and its page faults each).
  using CurvaturePool = WorkspacePool<std::vector<Matrix<Scalar>>>;

  template <typename WeightsOf>
  class Hessian final : public Linearization<Scalar> {
   public:
    Hessian(WeightsOf weights_of, Scalar q, typename CurvaturePool::Handle storage, Index samples)
        : weights_of_(weights_of), q_(q), storage_(std::move(storage)), samples_(samples) {
      storage_->resize(static_cast<std::size_t>((samples + kChunkColumns - 1) / kChunkColumns));
    }
    /// G''(W^T x) at the point, chunk c / kChunkColumns holding columns c.. (to be filled in).
    std::vector<Matrix<Scalar>>& chunks() { return *storage_; }
    /// G''(W^T x_b), sample b's column.
    auto Curvature(Index b) const {
      return (*storage_)[static_cast<std::size_t>(b / kChunkColumns)].col(b % kChunkColumns);
    }

    void JacobianVectorProduct(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const override {
      internal::CheckShape("SeparableEnergy Hessian: v", v, weights_of_().rows(), samples_);
      Products(v, out, [](Index j) { return j; });
    }
    void VectorJacobianProduct(ConstMatrixRef<Scalar> u, MatrixRef<Scalar> out) const override {
      JacobianVectorProduct(u, out);  // symmetric
    }
    bool HasColumnProducts() const override { return true; }
    void JacobianVectorProductColumns(const std::vector<Index>& columns, ConstMatrixRef<Scalar> v,
                                      MatrixRef<Scalar> out) const override {
      internal::CheckColumns("SeparableEnergy Hessian: columns", columns, v.cols(), samples_);
      internal::CheckShape("SeparableEnergy Hessian: v", v, weights_of_().rows(), v.cols());
      Products(v, out, [&columns](Index j) { return columns[static_cast<std::size_t>(j)]; });
    }
   private:
    // HessianProduct with the kept G'', a chunk of columns at a time (t = W^T
    // v: pooled scratch that only grows, so that Newton-CG's shrinking column
    // sets allocate nothing).
    template <typename ColumnOf>
    void Products(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out, ColumnOf column_of) const {
      const auto W = weights_of_();
      internal::CheckShape("SeparableEnergy Hessian: out", out, W.rows(), v.cols());
      auto scratch = scratch_.Acquire();
      const Index width = std::max(scratch->cols(), std::min(kChunkColumns, v.cols()));
      if (scratch->rows() != W.cols() || scratch->cols() != width) scratch->resize(W.cols(), width);
      for (Index c = 0; c < v.cols(); c += kChunkColumns) {
        const Index k = std::min(kChunkColumns, v.cols() - c);
        HessianProduct(W, q_, [&](Index j) { return Curvature(column_of(c + j)); }, v.middleCols(c, k),
                       scratch->leftCols(k), out.middleCols(c, k));
      }
    }

    WeightsOf weights_of_;
    Scalar q_;
    typename CurvaturePool::Handle storage_;
    Index samples_;
    mutable WorkspacePool<Matrix<Scalar>> scratch_;
  };

  // A Hessian of `samples` columns in storage from the pool (G'' to be filled in).
  template <typename WeightsOf>
  std::unique_ptr<Hessian<WeightsOf>> NewHessian(WeightsOf weights_of, Index samples) const {
    return std::make_unique<Hessian<WeightsOf>>(weights_of, q, curvatures_.Acquire(), samples);
  }

  mutable WorkspacePool<Work> full_chunks_, last_chunk_;
  mutable CurvaturePool curvatures_;
};

template <typename Scalar>
void CheckNonEmpty(const char* who, const Matrix<Scalar>& m) {
  if (m.rows() == 0 || m.cols() == 0) {
    throw std::invalid_argument(std::string(who) + ": must be non-empty, got " +
                                std::to_string(m.rows()) + "x" + std::to_string(m.cols()));
  }
}

}  // namespace internal

}  // namespace implicit
