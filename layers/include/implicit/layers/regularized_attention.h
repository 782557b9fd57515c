/// \file
/// Sparse (regularised) Hopfield attention: the Hopfield-Fenchel-Young energy
///
/// \code{.unparsed}
///   E(xi) = 0.5 |xi|^2 - (1/beta) Omega*_alpha(beta X^T xi)
/// \endcode
///
/// of a state (query) xi in R^d and N stored patterns X = [x_1 .. x_N] (d x N),
/// where Omega*_alpha is the conjugate of the Tsallis regulariser (entmax.h):
/// alpha = 1 gives the modern Hopfield energy 0.5|xi|^2 - lse(beta X^T xi)/beta,
/// alpha = 1.5 entmax15 and alpha = 2 sparsemax retrieval, any alpha > 1 works.
///
/// \code{.unparsed}
///   grad E   = xi - X p,               p = entmax_alpha(beta X^T xi)
///   hess E v = v - beta X J (X^T v),   J = dp/ds (entmax.h)
///   CCCP     xi <- X p                 (the sparse Hopfield update; overrides
///                                        Energy::CccpUpdate)
/// \endcode
///
/// Because Omega* is convex the CCCP step never increases E; with alpha > 1 the
/// weights p are sparse, so well-separated patterns are retrieved *exactly*
/// (they are fixed points), not only approximately as with softmax.
///
/// Parameters (ParameterSet): "X" (d x N, the stored patterns, learnable) and,
/// when Options::learn_alpha, "alpha" (1 x 1, must stay > 1). The parameter
/// vector-Jacobian product d/dtheta sum_b <grad E(xi_b), u_b> is
/// \code{.unparsed}
///   d/dX     = -(U P^T + beta Xi W^T),  W = J (X^T U)  (per sample)
///   d/dalpha = -sum_b u_b^T X dp_b/dalpha.
/// \endcode
///
/// \code
///   implicit::SparseHopfieldEnergy<double>::Options options;
///   options.alpha = 1.5;
///   options.beta = 4.0;
///   implicit::SparseHopfieldEnergy<double> energy(patterns, options);  // d x N
///   implicit::CccpMap<double> map(energy);        // xi <- X entmax(beta X^T xi)
///   implicit::PicardSolver<double>().Solve(map, queries);   // d x B, in place
/// \endcode
///
/// Patterns can be masked (SetPatternMask): a masked pattern's score is -inf,
/// so it gets exactly zero weight. The mask is shared by every sample, so
/// SupportsSubsets() is true; CccpUpdateAndValue / GradientAndValue give E with
/// the update from one score GEMM and one entmax pass.
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/parameters.h>
#include <implicit/core/gemm.h>
#include <implicit/core/types.h>
#include <implicit/layers/entmax.h>
#include <implicit/layers/log_sum_exp.h>

#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace implicit {

/// The options of SparseHopfieldEnergy: the entmax order alpha, the inverse
/// temperature beta, and whether alpha is trained.
struct SparseHopfieldOptions {
  /// Tsallis entmax order (default 1.5): 1 = softmax (modern Hopfield), 1.5 = entmax15,
  /// 2 = sparsemax, any finite value >= 1.
  double alpha = 1.5;
  /// Inverse temperature beta > 0 multiplying the scores X^T xi (default 1).
  double beta = 1.0;
  /// Register "alpha" as a trainable parameter (needs alpha > 1: the alpha
  /// derivative of entmax is singular at alpha = 1). Default false: alpha is
  /// fixed.
  bool learn_alpha = false;

  /// True when the options are usable (alpha finite and >= 1, > 1 when
  /// learn_alpha; beta finite and > 0); otherwise false, with the reason
  /// written to *error when error is not nullptr.
  bool IsValid(std::string* error) const {
    if (!(alpha >= 1.0) || !std::isfinite(alpha)) {
      if (error) *error = "alpha must be finite and >= 1, got " + std::to_string(alpha);
      return false;
    }
    if (!(beta > 0.0) || !std::isfinite(beta)) {
      if (error) *error = "beta must be finite and > 0, got " + std::to_string(beta);
      return false;
    }
    if (learn_alpha && !(alpha > 1.0)) {
      if (error) *error = "alpha must be > 1 when learn_alpha is set, got " + std::to_string(alpha);
      return false;
    }
    return true;
  }
};

/// The Hopfield-Fenchel-Young energy of the states xi (d x B) given the stored
/// patterns X (d x N): entmax attention as a Hopfield retrieval, exact for
/// well-separated patterns. E(xi) = 0.5 |xi|^2 - (1/beta) Omega*_alpha(beta X^T
/// xi) (the file comment has the derivatives).
template <typename Scalar>
class SparseHopfieldEnergy : public Energy<Scalar> {
 public:
  /// The options (SparseHopfieldOptions).
  using Options = SparseHopfieldOptions;

  /// Builds the energy of the stored patterns (d x N, one per column; copied
  /// into the trainable block "X"), with no pattern mask.
  /// \throws std::invalid_argument when the options are invalid or the
  ///   patterns are empty.
  explicit SparseHopfieldEnergy(const Matrix<Scalar>& patterns, const Options& options = Options())
      : options_(options) {
    std::string error;
    if (!options.IsValid(&error)) {
      throw std::invalid_argument("SparseHopfieldEnergy::Options: " + error);
    }
    if (patterns.rows() == 0 || patterns.cols() == 0) {
      std::ostringstream s;
      s << "SparseHopfieldEnergy(patterns): expected a non-empty d x N matrix, got "
        << patterns.rows() << "x" << patterns.cols();
      throw std::invalid_argument(s.str());
    }
    params_.Add("X", patterns.rows(), patterns.cols());
    if (options.learn_alpha) params_.Add("alpha", 1, 1);
    params_.Block("X") = patterns;
    if (options.learn_alpha) params_.Block("alpha")(0, 0) = static_cast<Scalar>(options.alpha);
  }

  /// The options the energy was built with (alpha: the initial value; alpha()
  /// gives the current one).
  const Options& options() const { return options_; }
  Index dimension() const override { return params_.GetEntry("X").rows; }
  /// The number of stored patterns N.
  Index num_patterns() const { return params_.GetEntry("X").cols; }
  /// The stored patterns X (d x N), the parameter block "X".
  typename ParameterSet<Scalar>::ConstBlockMap patterns() const { return params_.Block("X"); }
  /// The inverse temperature beta (fixed, from the options).
  Scalar beta() const { return static_cast<Scalar>(options_.beta); }
  /// The current alpha (the trained value when learn_alpha).
  /// \throws std::invalid_argument when the trained alpha is not finite and
  ///   > 1.
  Scalar alpha() const;

  /// active[i] = false masks pattern i (score -inf, zero weight). Empty: none.
  /// \throws std::invalid_argument when active is not empty and does not have
  ///   N entries.
  void SetPatternMask(std::vector<bool> active);

  /// scores = beta X^T xi (N x B), masked patterns -inf.
  /// \throws std::invalid_argument when xi is not d x B (B >= 1) or scores is
  ///   not N x B.
  void Scores(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> scores) const;
  /// weights = entmax_alpha(beta X^T xi) (N x B): the attention weights.
  /// \throws std::invalid_argument when xi is not d x B (B >= 1) or weights is
  ///   not N x B.
  void Weights(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> weights) const {
    Matrix<Scalar> s(num_patterns(), xi.cols());
    Scores(xi, s);
    entmax::Entmax<Scalar>(s, alpha(), weights);
  }

  // The evaluations below (Value, Gradient, CccpUpdate, CccpUpdateAndValue,
  // GradientAndValue, HessianVectorProduct) work in blocks of about 64 samples
  // on Eigen's threads (internal::ScoreBlocks, log_sum_exp.h), the weights in
  // per-thread scratch buffers. out may alias xi.

  void Value(ConstMatrixRef<Scalar> xi, VectorRef<Scalar> values) const override {
    Blocks(xi, values, "SparseHopfieldEnergy::Value", [](Index, Index, const auto&) {});
  }

  void Gradient(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> grad) const override {
    internal::CheckShape("SparseHopfieldEnergy::Gradient(grad)", grad, xi.rows(), xi.cols());
    Blocks(xi, std::nullopt, "SparseHopfieldEnergy::Gradient", [&](Index c0, Index c, const auto& p) {
      grad.middleCols(c0, c) = xi.middleCols(c0, c);
      GemmInto<Scalar>(grad.middleCols(c0, c), patterns(), false, p, Scalar(-1), Scalar(1));
    });
  }

  /// xi <- X entmax(beta X^T xi), exactly (no cancellation in xi - grad E).
  void CccpUpdate(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> out) const override {
    internal::CheckShape("SparseHopfieldEnergy::CccpUpdate(out)", out, xi.rows(), xi.cols());
    Blocks(xi, std::nullopt, "SparseHopfieldEnergy::CccpUpdate", [&](Index c0, Index c, const auto& p) {
      GemmInto<Scalar>(out.middleCols(c0, c), patterns(), false, p);
    });
  }

  /// The CCCP update X p and E from one score GEMM and one entmax pass.
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override;
  /// grad E = xi - X p and E, with the work of one CCCP update.
  void GradientAndValue(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override;
  /// The pattern mask is shared by all samples: no per-sample data.
  bool SupportsSubsets() const override { return true; }

  void HessianVectorProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override;

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return &params_; }
  /// The trainable parameters: block "X" and, when learn_alpha, "alpha".
  const ParameterSet<Scalar>& parameter_set() const { return params_; }

  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override;

 private:
  /// internal::ScoreBlocks for the weights: for each block of xi's columns
  /// [c0, c0 + c), p = entmax(beta X^T xi_blk) (this thread's scratch slot
  /// 3) and, with `values`, E there (values.segment(c0, c)); then
  /// finish(c0, c, p). `who` names the calling function in errors.
  /// \throws std::invalid_argument when xi is not d x B (B >= 1) or values
  ///   does not have B entries.
  template <typename Finish>
  void Blocks(ConstMatrixRef<Scalar> xi, std::optional<VectorRef<Scalar>> values, const char* who,
              Finish&& finish) const;

  Options options_;
  ParameterSet<Scalar> params_;
  std::vector<bool> mask_;
};

template <typename Scalar>
Scalar SparseHopfieldEnergy<Scalar>::alpha() const {
  if (!options_.learn_alpha) return static_cast<Scalar>(options_.alpha);
  const Scalar a = params_.Block("alpha")(0, 0);
  if (!(a > Scalar(1)) || !std::isfinite(static_cast<double>(a))) {
    throw std::invalid_argument("SparseHopfieldEnergy: parameter alpha must be > 1, got " +
                                std::to_string(static_cast<double>(a)));
  }
  return a;
}

template <typename Scalar>
void SparseHopfieldEnergy<Scalar>::SetPatternMask(std::vector<bool> active) {
  if (!active.empty() && static_cast<Index>(active.size()) != num_patterns()) {
    std::ostringstream s;
    s << "SparseHopfieldEnergy::SetPatternMask(active): expected " << num_patterns()
      << " entries, got " << active.size();
    throw std::invalid_argument(s.str());
  }
  mask_ = std::move(active);
}

template <typename Scalar>
void SparseHopfieldEnergy<Scalar>::Scores(
    ConstMatrixRef<Scalar> xi,
    MatrixRef<Scalar> scores) const {
  internal::CheckBatch("SparseHopfieldEnergy::Scores(xi)", xi, dimension());
  internal::CheckShape("SparseHopfieldEnergy::Scores(scores)", scores, num_patterns(), xi.cols());
  GemmInto<Scalar>(scores, patterns(), /*transpose_a=*/true, xi, beta());
  for (size_t i = 0; i < mask_.size(); ++i) {
    if (!mask_[i]) scores.row(static_cast<Index>(i)).setConstant(-std::numeric_limits<Scalar>::infinity());
  }
}

template <typename Scalar>
void SparseHopfieldEnergy<Scalar>::CccpUpdateAndValue(
    ConstMatrixRef<Scalar> xi,
    MatrixRef<Scalar> out,
    VectorRef<Scalar> values) const {
  internal::CheckShape("SparseHopfieldEnergy::CccpUpdateAndValue(out)", out, xi.rows(), xi.cols());
  Blocks(xi, values, "SparseHopfieldEnergy::CccpUpdateAndValue", [&](Index c0, Index c, const auto& p) {
    GemmInto<Scalar>(out.middleCols(c0, c), patterns(), false, p);
  });
}

template <typename Scalar>
void SparseHopfieldEnergy<Scalar>::GradientAndValue(
    ConstMatrixRef<Scalar> xi,
    MatrixRef<Scalar> grad,
    VectorRef<Scalar> values) const {
  internal::CheckShape("SparseHopfieldEnergy::GradientAndValue(grad)", grad, xi.rows(), xi.cols());
  Blocks(xi, values, "SparseHopfieldEnergy::GradientAndValue", [&](Index c0, Index c, const auto& p) {
    grad.middleCols(c0, c) = xi.middleCols(c0, c);
    GemmInto<Scalar>(grad.middleCols(c0, c), patterns(), false, p, Scalar(-1), Scalar(1));
  });
}

template <typename Scalar>
void SparseHopfieldEnergy<Scalar>::HessianVectorProduct(
    ConstMatrixRef<Scalar> xi,
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> out) const {
  internal::CheckShape("SparseHopfieldEnergy::HessianVectorProduct(v)", v, xi.rows(), xi.cols());
  internal::CheckShape("SparseHopfieldEnergy::HessianVectorProduct(out)", out, xi.rows(), xi.cols());
  const Scalar a = alpha(), b = beta();
  Blocks(xi, std::nullopt, "SparseHopfieldEnergy::HessianVectorProduct", [&](Index c0, Index c, const auto& p) {
    auto w = internal::ThreadScratch<Scalar, 2>(num_patterns(), c);
    GemmInto<Scalar>(w, patterns(), /*transpose_a=*/true, v.middleCols(c0, c));
    entmax::JacobianVectorProduct<Scalar>(p, a, w, w);
    out.middleCols(c0, c) = v.middleCols(c0, c);  // out may alias v: only this block's columns
    GemmInto<Scalar>(out.middleCols(c0, c), patterns(), false, w, -b, Scalar(1));
  });
}

template <typename Scalar>
void SparseHopfieldEnergy<Scalar>::ParameterVectorJacobianProduct(
    ConstMatrixRef<Scalar> xi,
    ConstMatrixRef<Scalar> u,
    VectorRef<Scalar> out) const {
  internal::CheckBatch("SparseHopfieldEnergy::ParameterVectorJacobianProduct(xi)", xi, dimension());
  internal::CheckShape("SparseHopfieldEnergy::ParameterVectorJacobianProduct(u)", u, xi.rows(),
                       xi.cols());
  internal::CheckShape("SparseHopfieldEnergy::ParameterVectorJacobianProduct(out)", out,
                       num_parameters(), 1);
  const Scalar a = alpha();
  Matrix<Scalar> p(num_patterns(), xi.cols());
  Weights(xi, p);
  Matrix<Scalar> w = patterns().transpose() * u;  // X^T u
  Vector<Scalar> flat = Vector<Scalar>::Zero(num_parameters());
  if (options_.learn_alpha) {
    Matrix<Scalar> dp(p.rows(), p.cols());
    entmax::AlphaDerivative<Scalar>(p, a, dp);
    params_.BlockOf(flat, "alpha")(0, 0) = -(w.array() * dp.array()).sum();
  }
  entmax::JacobianVectorProduct<Scalar>(p, a, w, w);  // W = J X^T u
  auto dX = params_.BlockOf(flat, "X");
  dX.noalias() = -(u * p.transpose());
  dX.noalias() -= beta() * (xi * w.transpose());
  out = flat;
}

template <typename Scalar>
template <typename Finish>
void SparseHopfieldEnergy<Scalar>::Blocks(ConstMatrixRef<Scalar> xi, std::optional<VectorRef<Scalar>> values,
                                          const char* who, Finish&& finish) const {
  internal::CheckBatch((std::string(who) + "(xi)").c_str(), xi, dimension());
  if (values) internal::CheckShape((std::string(who) + "(values)").c_str(), *values, xi.cols(), 1);
  const Scalar a = alpha(), b = beta();
  internal::ScoreBlocks<Scalar>(patterns(), xi, b, [&](Index c0, Index c, Eigen::Map<Matrix<Scalar>> s) {
    for (size_t i = 0; i < mask_.size(); ++i) {
      if (!mask_[i]) s.row(static_cast<Index>(i)).setConstant(-std::numeric_limits<Scalar>::infinity());
    }
    auto p = internal::ThreadScratch<Scalar, 3>(num_patterns(), c);
    if (values) {
      auto conj = values->segment(c0, c);
      entmax::EntmaxAndConjugate<Scalar>(s, a, p, conj);
      conj = Scalar(0.5) * xi.middleCols(c0, c).colwise().squaredNorm().transpose() - conj / b;
    } else {
      entmax::Entmax<Scalar>(s, a, p);
    }
    finish(c0, c, Eigen::Map<const Matrix<Scalar>>(p.data(), p.rows(), c));
  });
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(SparseHopfieldEnergy);

}  // namespace implicit
