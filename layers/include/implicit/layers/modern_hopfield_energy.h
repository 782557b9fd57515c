/// \file
/// ModernHopfieldEnergy (Ramsauer et al.): the retrieval energy of a state xi (n) given N stored
/// patterns X (n x N) and an inverse temperature beta > 0,
///
/// \code{.unparsed}
///   E(xi) = 0.5 |xi|^2 - (1/beta) lse(beta X^T xi + m),   lse(a) = log sum_i exp(a_i),
/// \endcode
///
/// with an optional additive score mask m (0 = allowed, -inf = excluded). Its
/// CCCP update is softmax attention with keys = values = X:
///
/// \code{.unparsed}
///   xi <- X softmax(beta X^T xi + m)                          (CccpUpdate)
/// \endcode
///
/// and, with p = softmax(beta X^T xi + m),
/// \code{.unparsed}
///   grad E = xi - X p,   hess E = I - beta X (diag p - p p^T) X^T.
/// \endcode
/// The patterns are fixed data, or trainable ("learned stored patterns") as the
/// parameter block "X"; beta is the parameter block "beta" (1 x 1).
///
/// \code
///   implicit::ModernHopfieldEnergy<double>::Options o;
///   o.beta = 8.0;
///   implicit::ModernHopfieldEnergy<double> energy(patterns, o);   // patterns: n x N
///   implicit::CccpMap<double> map(energy);
///   implicit::PicardSolver<double>().Solve(map, xi);                // retrieval
/// \endcode
///
/// Scores are max-shifted before exponentiating (scores of 1e8 are fine), and
/// -inf mask entries get weight exactly 0. A sample whose patterns are all
/// masked has E = +inf and grad E = xi.
///
/// Speed: CccpUpdateAndValue / GradientAndValue give E together with the update
/// from one score GEMM X^T xi, one softmax pass (weights and lse) and one GEMM
/// X p; ModernHopfieldEnergy keeps the N x B weights in per-thread scratch, so
/// repeated evaluations do not allocate. SupportsSubsets() (a solver may
/// evaluate any subset of the batch's columns) holds unless the mask is per
/// sample (N x B) or, for the layer's energy, the query anchors it.
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/gemm.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#include <implicit/layers/log_sum_exp.h>

#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace implicit {
namespace internal {

/// E_lse = -(1/beta) lse, with lse = -inf (everything masked) giving +inf.
template <typename Scalar>
Scalar NegativeScaledLse(Scalar lse, Scalar beta) {
  return -lse / beta;
}

template <typename Scalar>
void CheckBeta(const char* who, Scalar beta) {
  if (!(beta > Scalar(0)) || !std::isfinite(static_cast<double>(beta))) {
    std::ostringstream s;
    s << who << ": beta must be finite and > 0, got " << static_cast<double>(beta);
    throw std::invalid_argument(s.str());
  }
}

}  // namespace internal

// ---------------------------------------------------------------------------
/// The modern Hopfield retrieval energy of the states xi (n x B) given the
/// stored patterns X (n x N): E(xi) = 0.5 |xi|^2 - (1/beta) lse(beta X^T xi + m).
/// Its CCCP update is softmax attention (the file comment has the formulas).
template <typename Scalar>
class ModernHopfieldEnergy : public Energy<Scalar> {
 public:
  /// The inverse temperature and which blocks are trained.
  struct Options {
    /// Initial inverse temperature beta (> 0, finite; default 1). Stored in block "beta"
    /// when learn_beta, else held fixed.
    double beta = 1.0;
    /// Trainable patterns: X lives in the parameter block "X" (n x N) and the
    /// parameter derivatives include d/dX. False (the default): X is fixed
    /// data.
    bool learn_patterns = false;
    /// Trainable beta: parameter block "beta" (1 x 1; the default). False: beta
    /// is fixed.
    bool learn_beta = true;

    /// True when beta is finite and > 0; otherwise false, with the reason
    /// written to *error when error is not nullptr.
    bool IsValid(std::string* error) const {
      if (!(beta > 0.0) || !std::isfinite(beta)) {
        if (error) *error = "beta must be finite and > 0, got " + std::to_string(beta);
        return false;
      }
      return true;
    }
  };

  /// Builds the energy of the stored patterns (n x N, column i = stored pattern
  /// x_i; copied into block "X" when learn_patterns), with no mask.
  /// \throws std::invalid_argument when the options are invalid or the
  ///   patterns are empty.
  explicit ModernHopfieldEnergy(Matrix<Scalar> patterns, const Options& options = Options())
      : options_(options) {
    std::string error;
    if (!options.IsValid(&error)) {
      throw std::invalid_argument("ModernHopfieldEnergy: " + error);
    }
    if (patterns.rows() == 0 || patterns.cols() == 0) {
      throw std::invalid_argument("ModernHopfieldEnergy: patterns must be non-empty, got " +
                                  std::to_string(patterns.rows()) + "x" +
                                  std::to_string(patterns.cols()));
    }
    n_ = patterns.rows();
    N_ = patterns.cols();
    beta_ = static_cast<Scalar>(options.beta);
    if (options.learn_patterns) {
      params_.Add("X", n_, N_);
      params_.Block("X") = patterns;
    } else {
      X_ = std::move(patterns);
    }
    if (options.learn_beta) {
      params_.Add("beta", 1, 1);
      params_.Block("beta")(0, 0) = beta_;
    }
  }

  /// The options the energy was built with (beta: the initial value; beta()
  /// gives the current one).
  const Options& options() const { return options_; }
  Index dimension() const override { return n_; }
  /// The number of stored patterns N.
  Index num_patterns() const { return N_; }

  ///@{
  /// The stored patterns (n x N) and beta, wherever they live.
  ConstMatrixRef<Scalar> patterns() const {
    if (options_.learn_patterns) return params_.Block("X");
    return X_;
  }
  Scalar beta() const {
    return options_.learn_beta ? params_.Block("beta")(0, 0) : beta_;
  }
  ///@}
  /// Replaces the stored patterns (same n x N shape), in block "X" when
  /// learn_patterns.
  /// \throws std::invalid_argument when patterns is not n x N.
  void SetPatterns(ConstMatrixRef<Scalar> patterns);
  /// Sets beta, in block "beta" when learn_beta.
  /// \throws std::invalid_argument when beta is not finite and > 0.
  void SetBeta(Scalar beta);
  /// Additive score mask m, N x 1 (same for every sample) or N x B (per sample;
  /// then every call must have B samples). 0 = allowed, -inf = excluded; finite
  /// values act as log prior weights of the patterns. Empty = no mask.
  /// \throws std::invalid_argument when mask is not empty and does not have N
  ///   rows.
  void SetMask(Matrix<Scalar> mask);
  /// The additive score mask m of the last SetMask (empty when none).
  const Matrix<Scalar>& mask() const { return mask_; }

  /// p = softmax(beta X^T xi + m), N x B: the attention weights of each sample.
  /// \throws std::invalid_argument when xi is not n x B (B >= 1), p is not
  ///   N x B, or the mask does not fit.
  void Attention(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> p) const;

  // The evaluations below (Value, Gradient, CccpUpdate, CccpUpdateAndValue,
  // GradientAndValue, HessianVectorProduct) work in blocks of about 64 samples
  // (internal::SoftmaxAttentionBlocks, log_sum_exp.h: each block's N x 64
  // weights stay in cache from the score product to the product X p), the
  // blocks on Eigen's threads, their weights in per-thread scratch buffers:
  // after the first call, calls with the same or a smaller batch do not
  // allocate (Eigen's GEMM may still allocate its packing buffers). out may
  // alias xi.

  void Value(ConstMatrixRef<Scalar> xi, VectorRef<Scalar> values) const override;

  void Gradient(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> grad) const override;

  /// xi <- X softmax(beta X^T xi + m), computed directly (not as xi - grad E).
  void CccpUpdate(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> out) const override {
    internal::CheckBatch("ModernHopfieldEnergy::CccpUpdate(xi)", xi, n_);
    internal::CheckShape("ModernHopfieldEnergy::CccpUpdate(out)", out, n_, xi.cols());
    const Scalar b = CheckedBeta("ModernHopfieldEnergy::CccpUpdate");
    Blocks(xi, b, nullptr, true, "ModernHopfieldEnergy::CccpUpdate", [&](Index c0, Index c, const auto& p) {
      GemmInto<Scalar>(out.middleCols(c0, c), patterns(), false, p);
    });
  }

  /// The CCCP update and E from one score GEMM X^T xi, one softmax pass (p and
  /// lse) and one GEMM X p.
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override;

  /// grad E = xi - X p and E, with the work of one CCCP update.
  void GradientAndValue(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override;

  /// The same function for every sample unless the mask is per sample (N x B).
  bool SupportsSubsets() const override { return mask_.size() == 0 || mask_.cols() == 1; }

  void HessianVectorProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override;
  /// The Hessian at xi keeps the N x B attention weights: a product there is
  /// two GEMMs and the softmax Jacobian (no scores or softmax again).
  /// \throws std::invalid_argument when xi is not n x B (B >= 1) or beta is invalid.
  std::unique_ptr<Linearization<Scalar>> LinearizeHessian(ConstMatrixRef<Scalar> xi) const override;

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override {
    return params_.size() > 0 ? &params_ : nullptr;
  }
  /// The trainable parameters (blocks "X" and "beta" as enabled; empty when
  /// nothing is learned).
  const ParameterSet<Scalar>& parameter_set() const { return params_; }

  /// d/dtheta sum_b <grad E(xi_b), u_b> with grad E = xi - X p:
  /// \code{.unparsed}
  ///   d/dX    = -(U P^T + beta Xi W^T),  W = (diag p - p p^T) X^T U
  ///   d/dbeta = -sum_b <W_b, X^T xi_b>
  /// \endcode
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override;

 private:
  internal::SoftmaxHead<Scalar> Head(ConstMatrixRef<Scalar> xi, const char* who) const {
    const Scalar b = beta();
    internal::CheckBeta(who, b);
    internal::SoftmaxHead<Scalar> head;
    head.Compute(patterns(), xi, b, mask_, who);
    return head;
  }
  Scalar CheckedBeta(const char* who) const {
    const Scalar b = beta();
    internal::CheckBeta(who, b);
    return b;
  }
  /// internal::SoftmaxAttentionBlocks on these patterns and mask: the weights
  /// of each block of xi's columns, and what finish(c0, c, p) does with them.
  template <typename Finish>
  void Blocks(ConstMatrixRef<Scalar> xi, Scalar b, Scalar* lse, bool want_weights, const char* who,
              Finish&& finish) const {
    internal::SoftmaxAttentionBlocks<Scalar>(patterns(), xi, b, mask_, lse, want_weights, who,
                                             std::forward<Finish>(finish));
  }
  /// p = softmax(beta X^T xi + m) (N x B) in this thread's scratch slot 0, and
  /// lse[b] when lse != nullptr. With want_weights = false only lse is valid.
  Eigen::Map<Matrix<Scalar>> Weights(ConstMatrixRef<Scalar> xi, Scalar b, Scalar* lse,
                                     bool want_weights, const char* who) const {
    auto p = internal::ThreadScratch<Scalar, 0>(N_, xi.cols());
    GemmInto<Scalar>(p, patterns(), /*transpose_a=*/true, xi);
    internal::ScaledColumnSoftmaxInPlace<Scalar>(p, b, mask_, lse, who, want_weights);
    return p;
  }
  /// values = 0.5 |xi|^2 - lse / beta (lse = -inf, everything masked: +inf).
  static void StoreValues(ConstMatrixRef<Scalar> xi, const Scalar* lse, Scalar b, VectorRef<Scalar> values) {
    values = Scalar(0.5) * xi.colwise().squaredNorm().transpose() -
             Eigen::Map<const Vector<Scalar>>(lse, xi.cols()) / b;
  }

  /// H v = v - beta X J_softmax(p) X^T v with the weights p kept (w: N x B scratch).
  static void HessianProduct(ConstMatrixRef<Scalar> X, Scalar beta, ConstMatrixRef<Scalar> p,
                             ConstMatrixRef<Scalar> v, MatrixRef<Scalar> w, MatrixRef<Scalar> out) {
    GemmInto<Scalar>(w, X, /*transpose_a=*/true, v);
    internal::SoftmaxJacobianProduct<Scalar>(p, w, w);
    out = v;
    GemmInto<Scalar>(out, X, false, w, -beta, Scalar(1));
  }
  class Hessian;

  Options options_;
  Index n_ = 0, N_ = 0;
  Matrix<Scalar> X_;  ///< when !learn_patterns
  Scalar beta_;       ///< when !learn_beta
  Matrix<Scalar> mask_;
  ParameterSet<Scalar> params_;
};

template <typename Scalar>
void ModernHopfieldEnergy<Scalar>::SetPatterns(ConstMatrixRef<Scalar> patterns) {
  internal::CheckShape("ModernHopfieldEnergy::SetPatterns(patterns)", patterns, n_, N_);
  if (options_.learn_patterns) {
    params_.Block("X") = patterns;
  } else {
    X_ = patterns;
  }
}

template <typename Scalar>
void ModernHopfieldEnergy<Scalar>::SetBeta(Scalar beta) {
  internal::CheckBeta("ModernHopfieldEnergy::SetBeta", beta);
  if (options_.learn_beta) {
    params_.Block("beta")(0, 0) = beta;
  } else {
    beta_ = beta;
  }
}

template <typename Scalar>
void ModernHopfieldEnergy<Scalar>::SetMask(Matrix<Scalar> mask) {
  if (mask.size() != 0 && mask.rows() != N_) {
    throw std::invalid_argument("ModernHopfieldEnergy::SetMask(mask): expected " +
                                std::to_string(N_) + " rows, got " +
                                std::to_string(mask.rows()));
  }
  mask_ = std::move(mask);
}

template <typename Scalar>
void ModernHopfieldEnergy<Scalar>::Attention(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> p) const {
  internal::CheckBatch("ModernHopfieldEnergy::Attention(xi)", xi, n_);
  internal::CheckShape("ModernHopfieldEnergy::Attention(p)", p, N_, xi.cols());
  const Scalar b = CheckedBeta("ModernHopfieldEnergy::Attention");
  GemmInto<Scalar>(p, patterns(), /*transpose_a=*/true, xi);
  internal::ScaledColumnSoftmaxInPlace<Scalar>(p, b, mask_, nullptr,
                                               "ModernHopfieldEnergy::Attention");
}

template <typename Scalar>
void ModernHopfieldEnergy<Scalar>::Value(
    ConstMatrixRef<Scalar> xi,
    VectorRef<Scalar> values) const {
  internal::CheckBatch("ModernHopfieldEnergy::Value(xi)", xi, n_);
  internal::CheckShape("ModernHopfieldEnergy::Value(values)", values, xi.cols(), 1);
  const Scalar b = CheckedBeta("ModernHopfieldEnergy::Value");
  auto lse = internal::ThreadScratch<Scalar, 1>(xi.cols(), 1);
  Blocks(xi, b, lse.data(), /*want_weights=*/false, "ModernHopfieldEnergy::Value",
         [](Index, Index, const auto&) {});
  StoreValues(xi, lse.data(), b, values);
}

template <typename Scalar>
void ModernHopfieldEnergy<Scalar>::Gradient(
    ConstMatrixRef<Scalar> xi,
    MatrixRef<Scalar> grad) const {
  internal::CheckBatch("ModernHopfieldEnergy::Gradient(xi)", xi, n_);
  internal::CheckShape("ModernHopfieldEnergy::Gradient(grad)", grad, n_, xi.cols());
  const Scalar b = CheckedBeta("ModernHopfieldEnergy::Gradient");
  Blocks(xi, b, nullptr, true, "ModernHopfieldEnergy::Gradient", [&](Index c0, Index c, const auto& p) {
    grad.middleCols(c0, c) = xi.middleCols(c0, c);  // grad may alias xi: only this block's columns
    GemmInto<Scalar>(grad.middleCols(c0, c), patterns(), false, p, Scalar(-1), Scalar(1));
  });
}

template <typename Scalar>
void ModernHopfieldEnergy<Scalar>::CccpUpdateAndValue(
    ConstMatrixRef<Scalar> xi,
    MatrixRef<Scalar> out,
    VectorRef<Scalar> values) const {
  internal::CheckBatch("ModernHopfieldEnergy::CccpUpdateAndValue(xi)", xi, n_);
  internal::CheckShape("ModernHopfieldEnergy::CccpUpdateAndValue(out)", out, n_, xi.cols());
  internal::CheckShape("ModernHopfieldEnergy::CccpUpdateAndValue(values)", values, xi.cols(), 1);
  const Scalar b = CheckedBeta("ModernHopfieldEnergy::CccpUpdateAndValue");
  Scalar* lse = internal::ThreadScratch<Scalar, 1>(xi.cols(), 1).data();
  Blocks(xi, b, lse, true, "ModernHopfieldEnergy::CccpUpdateAndValue", [&](Index c0, Index c, const auto& p) {
    StoreValues(xi.middleCols(c0, c), lse + c0, b, values.segment(c0, c));  // before out: out may alias xi
    GemmInto<Scalar>(out.middleCols(c0, c), patterns(), false, p);
  });
}

template <typename Scalar>
void ModernHopfieldEnergy<Scalar>::GradientAndValue(
    ConstMatrixRef<Scalar> xi,
    MatrixRef<Scalar> grad,
    VectorRef<Scalar> values) const {
  internal::CheckBatch("ModernHopfieldEnergy::GradientAndValue(xi)", xi, n_);
  internal::CheckShape("ModernHopfieldEnergy::GradientAndValue(grad)", grad, n_, xi.cols());
  internal::CheckShape("ModernHopfieldEnergy::GradientAndValue(values)", values, xi.cols(), 1);
  const Scalar b = CheckedBeta("ModernHopfieldEnergy::GradientAndValue");
  Scalar* lse = internal::ThreadScratch<Scalar, 1>(xi.cols(), 1).data();
  Blocks(xi, b, lse, true, "ModernHopfieldEnergy::GradientAndValue", [&](Index c0, Index c, const auto& p) {
    StoreValues(xi.middleCols(c0, c), lse + c0, b, values.segment(c0, c));
    grad.middleCols(c0, c) = xi.middleCols(c0, c);
    GemmInto<Scalar>(grad.middleCols(c0, c), patterns(), false, p, Scalar(-1), Scalar(1));
  });
}

template <typename Scalar>
void ModernHopfieldEnergy<Scalar>::HessianVectorProduct(
    ConstMatrixRef<Scalar> xi,
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> out) const {
  internal::CheckBatch("ModernHopfieldEnergy::HessianVectorProduct(xi)", xi, n_);
  internal::CheckShape("ModernHopfieldEnergy::HessianVectorProduct(v)", v, n_, xi.cols());
  internal::CheckShape("ModernHopfieldEnergy::HessianVectorProduct(out)", out, n_, xi.cols());
  const Scalar b = CheckedBeta("ModernHopfieldEnergy::HessianVectorProduct");
  Blocks(xi, b, nullptr, true, "ModernHopfieldEnergy::HessianVectorProduct",
         [&](Index c0, Index c, const auto& p) {
           HessianProduct(patterns(), b, p, v.middleCols(c0, c), internal::ThreadScratch<Scalar, 2>(N_, c),
                          out.middleCols(c0, c));
         });
}

/// \cond INTERNAL
template <typename Scalar>
class ModernHopfieldEnergy<Scalar>::Hessian final : public Linearization<Scalar> {
 public:
  Hessian(const ModernHopfieldEnergy& energy, Scalar beta, ConstMatrixRef<Scalar> p)
      : energy_(energy), beta_(beta), p_(p) {}
  void JacobianVectorProduct(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const override {
    internal::CheckShape("ModernHopfieldEnergy Hessian: v", v, energy_.dimension(), p_.cols());
    internal::CheckShape("ModernHopfieldEnergy Hessian: out", out, energy_.dimension(), p_.cols());
    HessianProduct(energy_.patterns(), beta_, p_, v, internal::ThreadScratch<Scalar, 2>(p_.rows(), p_.cols()),
                   out);
  }
  void VectorJacobianProduct(ConstMatrixRef<Scalar> u, MatrixRef<Scalar> out) const override {
    JacobianVectorProduct(u, out);  // symmetric
  }
  bool HasColumnProducts() const override { return true; }
  /// The products for some samples: their weights gathered (N x k scratch).
  void JacobianVectorProductColumns(const std::vector<Index>& columns, ConstMatrixRef<Scalar> v,
                                    MatrixRef<Scalar> out) const override {
    internal::CheckColumns("ModernHopfieldEnergy Hessian: columns", columns, v.cols(), p_.cols());
    internal::CheckShape("ModernHopfieldEnergy Hessian: v", v, energy_.dimension(), v.cols());
    internal::CheckShape("ModernHopfieldEnergy Hessian: out", out, energy_.dimension(), v.cols());
    auto p = internal::ThreadScratch<Scalar, 3>(p_.rows(), v.cols());
    for (Index j = 0; j < v.cols(); ++j) p.col(j) = p_.col(columns[static_cast<std::size_t>(j)]);
    HessianProduct(energy_.patterns(), beta_, p, v, internal::ThreadScratch<Scalar, 2>(p_.rows(), v.cols()), out);
  }

 private:
  const ModernHopfieldEnergy& energy_;
  Scalar beta_;
  Matrix<Scalar> p_;  // the weights at the point
};
/// \endcond

template <typename Scalar>
std::unique_ptr<Linearization<Scalar>> ModernHopfieldEnergy<Scalar>::LinearizeHessian(
    ConstMatrixRef<Scalar> xi) const {
  internal::CheckBatch("ModernHopfieldEnergy::LinearizeHessian(xi)", xi, n_);
  const Scalar b = CheckedBeta("ModernHopfieldEnergy::LinearizeHessian");
  const auto p = Weights(xi, b, nullptr, true, "ModernHopfieldEnergy::LinearizeHessian");
  return std::make_unique<Hessian>(*this, b, p);
}

template <typename Scalar>
void ModernHopfieldEnergy<Scalar>::ParameterVectorJacobianProduct(
    ConstMatrixRef<Scalar> xi,
    ConstMatrixRef<Scalar> u,
    VectorRef<Scalar> out) const {
  internal::CheckBatch("ModernHopfieldEnergy::ParameterVectorJacobianProduct(xi)", xi, n_);
  internal::CheckShape("ModernHopfieldEnergy::ParameterVectorJacobianProduct(u)", u, n_,
                       xi.cols());
  internal::CheckShape("ModernHopfieldEnergy::ParameterVectorJacobianProduct(out)", out,
                       num_parameters(), 1);
  const auto head = Head(xi, "ModernHopfieldEnergy::ParameterVectorJacobianProduct");
  Matrix<Scalar> dX = Matrix<Scalar>::Zero(n_, N_);
  Scalar dbeta(0);
  head.RetrievalVjp(patterns(), xi, u, beta(), Scalar(-1),
                    options_.learn_patterns ? &dX : nullptr,
                    options_.learn_beta ? &dbeta : nullptr);
  out.setZero();
  if (options_.learn_patterns) params_.BlockOf(out, "X") = dX;
  if (options_.learn_beta) params_.BlockOf(out, "beta")(0, 0) = dbeta;
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(ModernHopfieldEnergy);

}  // namespace implicit
