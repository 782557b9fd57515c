// Modern Hopfield networks (Ramsauer et al.) as energies and as layers.
//
// ModernHopfieldEnergy: the retrieval energy of a state xi (n) given N stored
// patterns X (n x N) and an inverse temperature beta > 0,
//
//   E(xi) = 0.5 |xi|^2 - (1/beta) lse(beta X^T xi + m),   lse(a) = log sum_i exp(a_i),
//
// with an optional additive score mask m (0 = allowed, -inf = excluded). Its
// CCCP update is softmax attention with keys = values = X:
//
//   xi <- X softmax(beta X^T xi + m)                          (CccpUpdate)
//
// and, with p = softmax(beta X^T xi + m),
//   grad E = xi - X p,   hess E = I - beta X (diag p - p p^T) X^T.
// The patterns are fixed data, or trainable ("learned stored patterns") as the
// parameter block "X"; beta is the parameter block "beta" (1 x 1).
//
//   implicit::ModernHopfieldEnergy<double>::Options o;
//   o.beta = 8.0;
//   implicit::ModernHopfieldEnergy<double> energy(patterns, o);   // patterns: n x N
//   implicit::CccpMap<double> map(energy);
//   implicit::PicardSolver<double>().Solve(map, xi);                // retrieval
//
// HopfieldLayer: the layer form (queries R associated with stored patterns Y
// through learned projections, several heads, beta per layer or per head;
// forward = retrieval to convergence by any solver, or one step), and its two
// variants with learned queries (HopfieldPooling) and learned stored patterns
// (HopfieldLookup). See the comment above HopfieldLayer for the exact energy.
//
// Scores are max-shifted before exponentiating (scores of 1e8 are fine), and
// -inf mask entries get weight exactly 0. A sample whose patterns are all
// masked has E = +inf and grad E = xi.
//
// Speed: CccpUpdateAndValue / GradientAndValue give E together with the update
// from one score GEMM X^T xi, one softmax pass (weights and lse) and one GEMM
// X p; ModernHopfieldEnergy keeps the N x B weights in per-thread scratch, so
// repeated evaluations do not allocate. SupportsSubsets() (a solver may
// evaluate any subset of the batch's columns) holds unless the mask is per
// sample (N x B) or, for the layer's energy, the query anchors it.
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/energy_maps.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#include <implicit/layers/log_sum_exp.h>
#include <implicit/solvers/picard.h>
#include <implicit/solvers/solver.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace implicit {
namespace internal {

// E_lse = -(1/beta) lse, with lse = -inf (everything masked) giving +inf.
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
// E(xi) = 0.5 |xi|^2 - (1/beta) lse(beta X^T xi + m).
template <typename Scalar>
class ModernHopfieldEnergy : public Energy<Scalar> {
 public:
  struct Options {
    // Initial inverse temperature beta (> 0, finite). Stored in block "beta"
    // when learn_beta, else held fixed.
    double beta = 1.0;
    // Trainable patterns: X lives in the parameter block "X" (n x N) and the
    // parameter derivatives include d/dX. False: X is fixed data.
    bool learn_patterns = false;
    // Trainable beta: parameter block "beta" (1 x 1). False: beta is fixed.
    bool learn_beta = true;

    bool IsValid(std::string* error) const {
      if (!(beta > 0.0) || !std::isfinite(beta)) {
        if (error) *error = "beta must be finite and > 0, got " + std::to_string(beta);
        return false;
      }
      return true;
    }
  };

  // patterns: n x N (column i = stored pattern x_i). Throws on bad options or
  // an empty pattern matrix.
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

  const Options& options() const { return options_; }
  Index dimension() const override { return n_; }
  Index num_patterns() const { return N_; }

  // The stored patterns (n x N) and beta, wherever they live.
  ConstMatrixRef<Scalar> patterns() const {
    if (options_.learn_patterns) return params_.Block("X");
    return X_;
  }
  Scalar beta() const {
    return options_.learn_beta ? params_.Block("beta")(0, 0) : beta_;
  }
  void SetPatterns(ConstMatrixRef<Scalar> patterns) {
    internal::CheckShape("ModernHopfieldEnergy::SetPatterns(patterns)", patterns, n_, N_);
    if (options_.learn_patterns) {
      params_.Block("X") = patterns;
    } else {
      X_ = patterns;
    }
  }
  void SetBeta(Scalar beta) {
    internal::CheckBeta("ModernHopfieldEnergy::SetBeta", beta);
    if (options_.learn_beta) {
      params_.Block("beta")(0, 0) = beta;
    } else {
      beta_ = beta;
    }
  }
  // Additive score mask m, N x 1 (same for every sample) or N x B (per sample;
  // then every call must have B samples). 0 = allowed, -inf = excluded; finite
  // values act as log prior weights of the patterns. Empty = no mask.
  void SetMask(Matrix<Scalar> mask) {
    if (mask.size() != 0 && mask.rows() != N_) {
      throw std::invalid_argument("ModernHopfieldEnergy::SetMask(mask): expected " +
                                  std::to_string(N_) + " rows, got " +
                                  std::to_string(mask.rows()));
    }
    mask_ = std::move(mask);
  }
  const Matrix<Scalar>& mask() const { return mask_; }

  // p = softmax(beta X^T xi + m), N x B: the attention weights of each sample.
  void Attention(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> p) const {
    internal::CheckBatch("ModernHopfieldEnergy::Attention(xi)", xi, n_);
    internal::CheckShape("ModernHopfieldEnergy::Attention(p)", p, N_, xi.cols());
    const Scalar b = CheckedBeta("ModernHopfieldEnergy::Attention");
    p.noalias() = patterns().transpose() * xi;
    internal::ScaledColumnSoftmaxInPlace<Scalar>(p, b, mask_, nullptr,
                                                 "ModernHopfieldEnergy::Attention");
  }

  // The evaluations below (Value, Gradient, CccpUpdate, CccpUpdateAndValue,
  // GradientAndValue, HessianVectorProduct) keep the N x B weights in
  // per-thread scratch buffers (log_sum_exp.h): after the first call, calls
  // with the same or a smaller batch do not allocate (large products may still
  // let Eigen's GEMM allocate its packing buffers). out may alias xi.

  void Value(ConstMatrixRef<Scalar> xi, VectorRef<Scalar> values) const override {
    internal::CheckBatch("ModernHopfieldEnergy::Value(xi)", xi, n_);
    internal::CheckShape("ModernHopfieldEnergy::Value(values)", values, xi.cols(), 1);
    const Scalar b = CheckedBeta("ModernHopfieldEnergy::Value");
    auto lse = internal::ThreadScratch<Scalar, 1>(xi.cols(), 1);
    Weights(xi, b, lse.data(), /*want_weights=*/false, "ModernHopfieldEnergy::Value");
    StoreValues(xi, lse, b, values);
  }

  void Gradient(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> grad) const override {
    internal::CheckBatch("ModernHopfieldEnergy::Gradient(xi)", xi, n_);
    internal::CheckShape("ModernHopfieldEnergy::Gradient(grad)", grad, n_, xi.cols());
    const Scalar b = CheckedBeta("ModernHopfieldEnergy::Gradient");
    const auto p = Weights(xi, b, nullptr, true, "ModernHopfieldEnergy::Gradient");
    grad = xi;
    grad.noalias() -= patterns() * p;
  }

  // xi <- X softmax(beta X^T xi + m), computed directly (not as xi - grad E).
  void CccpUpdate(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> out) const override {
    internal::CheckBatch("ModernHopfieldEnergy::CccpUpdate(xi)", xi, n_);
    internal::CheckShape("ModernHopfieldEnergy::CccpUpdate(out)", out, n_, xi.cols());
    const Scalar b = CheckedBeta("ModernHopfieldEnergy::CccpUpdate");
    const auto p = Weights(xi, b, nullptr, true, "ModernHopfieldEnergy::CccpUpdate");
    out.noalias() = patterns() * p;
  }

  // The CCCP update and E from one score GEMM X^T xi, one softmax pass (p and
  // lse) and one GEMM X p.
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override {
    internal::CheckBatch("ModernHopfieldEnergy::CccpUpdateAndValue(xi)", xi, n_);
    internal::CheckShape("ModernHopfieldEnergy::CccpUpdateAndValue(out)", out, n_, xi.cols());
    internal::CheckShape("ModernHopfieldEnergy::CccpUpdateAndValue(values)", values, xi.cols(), 1);
    const Scalar b = CheckedBeta("ModernHopfieldEnergy::CccpUpdateAndValue");
    auto lse = internal::ThreadScratch<Scalar, 1>(xi.cols(), 1);
    const auto p = Weights(xi, b, lse.data(), true, "ModernHopfieldEnergy::CccpUpdateAndValue");
    StoreValues(xi, lse, b, values);  // before out is written: out may alias xi
    out.noalias() = patterns() * p;
  }

  // grad E = xi - X p and E, with the work of one CCCP update.
  void GradientAndValue(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override {
    internal::CheckBatch("ModernHopfieldEnergy::GradientAndValue(xi)", xi, n_);
    internal::CheckShape("ModernHopfieldEnergy::GradientAndValue(grad)", grad, n_, xi.cols());
    internal::CheckShape("ModernHopfieldEnergy::GradientAndValue(values)", values, xi.cols(), 1);
    const Scalar b = CheckedBeta("ModernHopfieldEnergy::GradientAndValue");
    auto lse = internal::ThreadScratch<Scalar, 1>(xi.cols(), 1);
    const auto p = Weights(xi, b, lse.data(), true, "ModernHopfieldEnergy::GradientAndValue");
    StoreValues(xi, lse, b, values);
    grad = xi;
    grad.noalias() -= patterns() * p;
  }

  // The same function for every sample unless the mask is per sample (N x B).
  bool SupportsSubsets() const override { return mask_.size() == 0 || mask_.cols() == 1; }

  void HessianVectorProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override {
    internal::CheckBatch("ModernHopfieldEnergy::HessianVectorProduct(xi)", xi, n_);
    internal::CheckShape("ModernHopfieldEnergy::HessianVectorProduct(v)", v, n_, xi.cols());
    internal::CheckShape("ModernHopfieldEnergy::HessianVectorProduct(out)", out, n_, xi.cols());
    const Scalar b = CheckedBeta("ModernHopfieldEnergy::HessianVectorProduct");
    const auto p = Weights(xi, b, nullptr, true, "ModernHopfieldEnergy::HessianVectorProduct");
    auto w = internal::ThreadScratch<Scalar, 2>(N_, xi.cols());
    w.noalias() = patterns().transpose() * v;
    internal::SoftmaxJacobianProduct<Scalar>(p, w, w);
    out = v;
    out.noalias() -= b * (patterns() * w);
  }

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override {
    return params_.size() > 0 ? &params_ : nullptr;
  }
  const ParameterSet<Scalar>& parameter_set() const { return params_; }

  // d/dtheta sum_b <grad E(xi_b), u_b> with grad E = xi - X p:
  //   d/dX    = -(U P^T + beta Xi W^T),  W = (diag p - p p^T) X^T U
  //   d/dbeta = -sum_b <W_b, X^T xi_b>
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
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
  // p = softmax(beta X^T xi + m) (N x B) in this thread's scratch slot 0, and
  // lse[b] when lse != nullptr. With want_weights = false only lse is valid.
  Eigen::Map<Matrix<Scalar>> Weights(ConstMatrixRef<Scalar> xi, Scalar b, Scalar* lse,
                                     bool want_weights, const char* who) const {
    auto p = internal::ThreadScratch<Scalar, 0>(N_, xi.cols());
    p.noalias() = patterns().transpose() * xi;
    internal::ScaledColumnSoftmaxInPlace<Scalar>(p, b, mask_, lse, who, want_weights);
    return p;
  }
  // values = 0.5 |xi|^2 - lse / beta (lse = -inf, everything masked: +inf).
  template <typename Lse>
  static void StoreValues(ConstMatrixRef<Scalar> xi, const Lse& lse, Scalar b,
                          VectorRef<Scalar> values) {
    values = Scalar(0.5) * xi.colwise().squaredNorm().transpose() - lse.col(0) / b;
  }

  Options options_;
  Index n_ = 0, N_ = 0;
  Matrix<Scalar> X_;  // when !learn_patterns
  Scalar beta_;       // when !learn_beta
  Matrix<Scalar> mask_;
  ParameterSet<Scalar> params_;
};

// ---------------------------------------------------------------------------
// The Hopfield layer.
//
// Inputs: queries R (d_r x S, one query per column = one sample of the batch)
// and stored patterns Y (d_y x N, shared by the S queries of the call; a set
// of tokens or a memory). With H heads of key width d_k and value width d_v:
//
//   q  = W_Q R     (H d_k x S)   head h: rows [h d_k, (h+1) d_k)
//   K_h = W_K^h Y  (d_k x N)     V_h = W_V^h Y  (d_v x N)
//
// The state of sample s is the head-stacked query xi_s (H d_k). Its energy is
//
//   E(xi) = sum_h 0.5 |xi_h|^2 - a <xi_h, q_h> - (1 - a)/beta_h lse(beta_h K_h^T xi_h + m)
//
// with a = Options::query_weight in [0, 1). a = 0 is the modern Hopfield
// energy of each head (Ramsauer et al.); a > 0 anchors the retrieval to the
// query (its CCCP step is xi_h <- a q_h + (1 - a) K_h p_h). The forward pass:
//
//   retrieval (default): xi* = stationary point of E reached from xi = q by the
//                        chosen solver on the CCCP map
//   one step (one_step): xi* = q   (the usual single attention step)
//   output: Z = W_O [V_1 p_1(xi*_1); ...; V_H p_H(xi*_H)],
//           p_h(xi_h) = softmax(beta_h K_h^T xi_h + m)   (d_out x S)
//
// so one_step is exactly multi-head softmax attention, Z = W_O concat_h V_h
// softmax(beta_h K_h^T W_Q^h R). Backward: in retrieval mode by the implicit
// function theorem at xi* (ImplicitBackward on the CCCP map), in one-step mode
// by the chain rule. Gradients reach W_K, W_V, W_O, beta and Y in both modes.
// HONEST NOTE: with a = 0 a converged retrieval does not depend on the query
// except through the basin it starts in, so the exact gradient with respect to
// R and W_Q is zero in retrieval mode; use query_weight > 0 (or one_step) when
// the queries must be trained.
//
// A projection can be switched off (Options::project_*): it is then the
// identity, which requires matching sizes (e.g. H d_k = d_r for W_Q).
//
// Parameters (one ParameterSet, parameters()): "W_Q" (H d_k x d_r), "W_K"
// (H d_k x d_y), "W_V" (H d_v x d_y), "W_O" (d_out x H d_v) when enabled;
// "beta" (H x 1 when beta_per_head, else 1 x 1) when learn_beta; "queries"
// (d_r x learned_queries) for HopfieldPooling; "patterns" (d_y x
// learned_patterns) for HopfieldLookup.
//
//   implicit::HopfieldLayer<double>::Options o;
//   o.query_dim = 8; o.pattern_dim = 8; o.num_heads = 2; o.head_dim = 4;
//   implicit::HopfieldLayer<double> layer(o);
//   implicit::Matrix<double> Z = layer.Forward(R, Y);          // d_out x S
//   auto g = layer.Backward(dLdZ);                             // after Forward
//   if (g.ok()) layer.parameters().values() -= 0.1 * g.parameters;
template <typename Scalar>
class HopfieldLayer;

// The energy of HopfieldLayer's state (see above). Its parameters are the
// layer's ParameterSet (same layout; blocks it does not depend on get zero
// derivatives); its inputs R, Y and mask are copies set by SetInputs.
// input_dimension() is d_r when query_weight > 0 (E depends on R), else 0.
template <typename Scalar>
class HopfieldLayerEnergy : public Energy<Scalar> {
 public:
  Index dimension() const override { return H_ * dk_; }
  Index num_heads() const { return H_; }

  void SetInputs(ConstMatrixRef<Scalar> R, ConstMatrixRef<Scalar> Y, Matrix<Scalar> mask) {
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
  }
  const Matrix<Scalar>& queries() const { return R_; }
  const Matrix<Scalar>& stored_patterns() const { return Y_; }

  // q = W_Q R (H d_k x cols of R).
  Matrix<Scalar> ProjectQueries(ConstMatrixRef<Scalar> R) const {
    return ApplyProjection("W_Q", R);
  }
  // K = W_K Y (H d_k x N) and V = W_V Y (H d_v x N).
  Matrix<Scalar> Keys() const { return ApplyProjection("W_K", Y_); }
  Matrix<Scalar> Values() const { return ApplyProjection("W_V", Y_); }
  // beta of head h.
  Scalar beta(Index h) const {
    if (!params_->Contains("beta")) return fixed_beta_(beta_per_head_ ? h : 0);
    const auto b = params_->Block("beta");
    return b(b.rows() == 1 ? 0 : h, 0);
  }
  // Attention weights of head h at state xi (N x B).
  Matrix<Scalar> Attention(ConstMatrixRef<Scalar> xi, Index h) const {
    const Matrix<Scalar> K = Keys();
    return HeadAt(K, xi, h, "HopfieldLayerEnergy::Attention").p;
  }

  void Value(ConstMatrixRef<Scalar> xi, VectorRef<Scalar> values) const override {
    Check("HopfieldLayerEnergy::Value(xi)", xi);
    internal::CheckShape("HopfieldLayerEnergy::Value(values)", values, xi.cols(), 1);
    const Matrix<Scalar> K = Keys();
    values = Scalar(0.5) * xi.colwise().squaredNorm().transpose();
    if (a_ != Scalar(0)) values -= a_ * (xi.array() * Anchor(xi.cols()).array()).colwise().sum().transpose().matrix();
    for (Index h = 0; h < H_; ++h) {
      const auto head = HeadAt(K, xi, h, "HopfieldLayerEnergy::Value");
      for (Index j = 0; j < xi.cols(); ++j) {
        values(j) += (Scalar(1) - a_) * internal::NegativeScaledLse(head.lse(j), beta(h));
      }
    }
  }

  void Gradient(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> grad) const override {
    Check("HopfieldLayerEnergy::Gradient(xi)", xi);
    internal::CheckShape("HopfieldLayerEnergy::Gradient(grad)", grad, xi.rows(), xi.cols());
    CccpUpdate(xi, grad);
    grad = xi - grad;
  }

  // xi_h <- a q_h + (1 - a) K_h softmax(beta_h K_h^T xi_h + m).
  void CccpUpdate(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> out) const override {
    Check("HopfieldLayerEnergy::CccpUpdate(xi)", xi);
    internal::CheckShape("HopfieldLayerEnergy::CccpUpdate(out)", out, xi.rows(), xi.cols());
    const Matrix<Scalar> K = Keys();
    for (Index h = 0; h < H_; ++h) {
      const auto head = HeadAt(K, xi, h, "HopfieldLayerEnergy::CccpUpdate");
      out.middleRows(h * dk_, dk_).noalias() = (Scalar(1) - a_) * (K.middleRows(h * dk_, dk_) * head.p);
    }
    if (a_ != Scalar(0)) out += a_ * Anchor(xi.cols());
  }

  // The CCCP update and E from one softmax head evaluation per head.
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override {
    Check("HopfieldLayerEnergy::CccpUpdateAndValue(xi)", xi);
    internal::CheckShape("HopfieldLayerEnergy::CccpUpdateAndValue(out)", out, xi.rows(), xi.cols());
    internal::CheckShape("HopfieldLayerEnergy::CccpUpdateAndValue(values)", values, xi.cols(), 1);
    const Matrix<Scalar> K = Keys();
    values = Scalar(0.5) * xi.colwise().squaredNorm().transpose();
    Matrix<Scalar> anchor;
    if (a_ != Scalar(0)) {
      anchor = Anchor(xi.cols());
      values -= a_ * (xi.array() * anchor.array()).colwise().sum().transpose().matrix();
    }
    // Head h reads only rows h of xi and writes only rows h of out (out may alias xi).
    for (Index h = 0; h < H_; ++h) {
      const auto head = HeadAt(K, xi, h, "HopfieldLayerEnergy::CccpUpdateAndValue");
      for (Index j = 0; j < xi.cols(); ++j) {
        values(j) += (Scalar(1) - a_) * internal::NegativeScaledLse(head.lse(j), beta(h));
      }
      out.middleRows(h * dk_, dk_).noalias() = (Scalar(1) - a_) * (K.middleRows(h * dk_, dk_) * head.p);
    }
    if (a_ != Scalar(0)) out += a_ * anchor;
  }
  void GradientAndValue(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override {
    internal::CheckShape("HopfieldLayerEnergy::GradientAndValue(grad)", grad, xi.rows(), xi.cols());
    CccpUpdateAndValue(xi, grad, values);
    grad = xi - grad;
  }
  // Every sample sees the same energy unless the queries anchor it
  // (query_weight > 0: q = W_Q R per sample) or the mask is per sample.
  bool SupportsSubsets() const override {
    return a_ == Scalar(0) && (mask_.size() == 0 || mask_.cols() == 1);
  }

  void HessianVectorProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override {
    Check("HopfieldLayerEnergy::HessianVectorProduct(xi)", xi);
    internal::CheckShape("HopfieldLayerEnergy::HessianVectorProduct(v)", v, xi.rows(), xi.cols());
    internal::CheckShape("HopfieldLayerEnergy::HessianVectorProduct(out)", out, xi.rows(), xi.cols());
    const Matrix<Scalar> K = Keys();
    out = v;
    for (Index h = 0; h < H_; ++h) {
      const auto head = HeadAt(K, xi, h, "HopfieldLayerEnergy::HessianVectorProduct");
      out.middleRows(h * dk_, dk_) -=
          (Scalar(1) - a_) * head.CovarianceProduct(K.middleRows(h * dk_, dk_),
                                                    v.middleRows(h * dk_, dk_), beta(h));
    }
  }

  Index num_parameters() const override { return params_->size(); }
  ParameterSet<Scalar>* parameters() override { return params_; }

  // d/dtheta sum_b <grad E(xi_b), u_b>: blocks W_Q (through the anchor), W_K
  // and beta; zero for the others.
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
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

  Index input_dimension() const override { return a_ != Scalar(0) ? dr_ : 0; }
  // d/dR <grad E, u> = -a W_Q^T u (only when query_weight > 0).
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override {
    Check("HopfieldLayerEnergy::InputVectorJacobianProduct(xi)", xi);
    internal::CheckShape("HopfieldLayerEnergy::InputVectorJacobianProduct(out)", out, dr_, xi.cols());
    if (a_ == Scalar(0)) throw std::logic_error("HopfieldLayerEnergy: no input (query_weight = 0)");
    out = -a_ * ApplyProjectionTransposed("W_Q", u);
  }

  // out = d/dY sum_b <grad E(xi_b), u_b>   (d_y x N; through the keys K = W_K Y).
  void StoredPatternVectorJacobianProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> u,
                                          MatrixRef<Scalar> out) const {
    Check("HopfieldLayerEnergy::StoredPatternVectorJacobianProduct(xi)", xi);
    internal::CheckShape("HopfieldLayerEnergy::StoredPatternVectorJacobianProduct(out)", out, dy_,
                         Y_.cols());
    Matrix<Scalar> dK;
    Vector<Scalar> dbeta;
    RetrievalVjp(xi, u, &dK, &dbeta);
    out = -ApplyProjectionTransposed("W_K", dK);
  }

 private:
  friend class HopfieldLayer<Scalar>;
  HopfieldLayerEnergy(ParameterSet<Scalar>* params, Index dr, Index dy, Index H, Index dk,
                      Index dv, bool beta_per_head, Vector<Scalar> fixed_beta, Scalar a)
      : params_(params), dr_(dr), dy_(dy), H_(H), dk_(dk), dv_(dv),
        beta_per_head_(beta_per_head), fixed_beta_(std::move(fixed_beta)), a_(a) {}

  void Check(const char* who, ConstMatrixRef<Scalar> xi) const {
    internal::CheckBatch(who, xi, H_ * dk_);
    if (Y_.size() == 0) {
      throw std::logic_error(std::string(who) + ": no stored patterns (call SetInputs first)");
    }
  }
  void CheckSamples(Index B) const {
    if (R_.cols() != B) {
      throw std::invalid_argument("HopfieldLayerEnergy: the state has " + std::to_string(B) +
                                  " samples but the queries R have " + std::to_string(R_.cols()));
    }
  }
  Matrix<Scalar> Anchor(Index B) const {
    CheckSamples(B);
    return ProjectQueries(R_);
  }
  Matrix<Scalar> ApplyProjection(const char* name, ConstMatrixRef<Scalar> x) const {
    if (params_->Contains(name)) return params_->Block(name) * x;
    return x;  // identity projection (sizes checked by the layer)
  }
  Matrix<Scalar> ApplyProjectionTransposed(const char* name, ConstMatrixRef<Scalar> x) const {
    if (params_->Contains(name)) return params_->Block(name).transpose() * x;
    return x;
  }
  internal::SoftmaxHead<Scalar> HeadAt(const Matrix<Scalar>& K, ConstMatrixRef<Scalar> xi, Index h,
                                       const char* who) const {
    const Scalar b = beta(h);
    internal::CheckBeta(who, b);
    internal::SoftmaxHead<Scalar> head;
    head.Compute(K.middleRows(h * dk_, dk_), xi.middleRows(h * dk_, dk_), b, mask_, who);
    return head;
  }
  // dK (H d_k x N) and dbeta (H) of sum_b sum_h (1 - a) <K_h p_h, u_h>.
  void RetrievalVjp(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> u, Matrix<Scalar>* dK,
                    Vector<Scalar>* dbeta) const {
    const Matrix<Scalar> K = Keys();
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

  ParameterSet<Scalar>* params_;
  Index dr_, dy_, H_, dk_, dv_;
  bool beta_per_head_;
  Vector<Scalar> fixed_beta_;
  Scalar a_;
  Matrix<Scalar> R_, Y_, mask_;
};

// Gradients from HopfieldLayer::Backward.
template <typename Scalar>
struct HopfieldGradients {
  // dL/dtheta in the layout of layer.parameters().
  Vector<Scalar> parameters;
  // dL/dR (d_r x S); zero in retrieval mode with query_weight = 0 (see the
  // note above HopfieldLayer). Empty for HopfieldPooling (R is a parameter).
  Matrix<Scalar> queries;
  // dL/dY (d_y x N). Empty for HopfieldLookup (Y is a parameter).
  Matrix<Scalar> stored_patterns;
  // The implicit backward pass (retrieval mode only; solver "none" in one-step mode).
  LinearSolveSummary adjoint_summary;
  bool ok() const { return adjoint_summary.IsConverged(); }
};

template <typename Scalar>
class HopfieldLayer {
 public:
  struct Options {
    // Rows d_r of the queries R (> 0).
    Index query_dim = 0;
    // Rows d_y of the stored patterns Y (> 0).
    Index pattern_dim = 0;
    // Number of heads H (>= 1).
    Index num_heads = 1;
    // Key/query width d_k per head; 0 = query_dim / num_heads (must divide).
    Index head_dim = 0;
    // Value width d_v per head; 0 = head_dim.
    Index value_dim = 0;
    // Rows d_out of the output Z; 0 = query_dim.
    Index output_dim = 0;
    // Learned projections; false = identity (then the sizes must match:
    // H d_k = d_r for W_Q, H d_k = d_y for W_K, H d_v = d_y for W_V,
    // d_out = H d_v for W_O).
    bool project_queries = true;
    bool project_keys = true;
    bool project_values = true;
    bool project_output = true;
    // Initial beta; 0 = 1 / sqrt(d_k) (scaled dot-product attention).
    double beta = 0.0;
    // One beta per head (block "beta" H x 1) instead of one per layer (1 x 1).
    bool beta_per_head = false;
    // Trainable beta (block "beta"); false keeps it fixed.
    bool learn_beta = true;
    // Anchor weight a in [0, 1) of the query in the energy (see above).
    double query_weight = 0.0;
    // Forward by one attention step instead of retrieval to convergence.
    bool one_step = false;
    // HopfieldPooling / HopfieldLookup: number of learned queries (block
    // "queries", d_r x learned_queries) / learned stored patterns (block
    // "patterns", d_y x learned_patterns); 0 = given as forward() input.
    Index learned_queries = 0;
    Index learned_patterns = 0;
    // Seed of the random initialisation (weights ~ N(0, 1/fan_in)).
    unsigned seed = 1;
    // Forward solver for retrieval mode; nullptr = PicardSolver with
    // max_iterations 200 and absolute_tolerance 1e-9 (double) / 1e-5 (float).
    std::shared_ptr<const Solver<Scalar>> solver;
    // The implicit backward pass (retrieval mode).
    BackwardOptions backward;

    bool IsValid(std::string* error) const {
      auto fail = [error](const std::string& m) {
        if (error) *error = m;
        return false;
      };
      if (query_dim <= 0) return fail("query_dim must be > 0, got " + std::to_string(query_dim));
      if (pattern_dim <= 0) return fail("pattern_dim must be > 0, got " + std::to_string(pattern_dim));
      if (num_heads < 1) return fail("num_heads must be >= 1, got " + std::to_string(num_heads));
      if (head_dim < 0 || value_dim < 0 || output_dim < 0) {
        return fail("head_dim, value_dim and output_dim must be >= 0");
      }
      if (head_dim == 0 && query_dim % num_heads != 0) {
        return fail("head_dim = 0 needs num_heads (" + std::to_string(num_heads) +
                    ") to divide query_dim (" + std::to_string(query_dim) + ")");
      }
      const Index dk = head_dim > 0 ? head_dim : query_dim / num_heads;
      const Index dv = value_dim > 0 ? value_dim : dk;
      const Index dout = output_dim > 0 ? output_dim : query_dim;
      if (!project_queries && num_heads * dk != query_dim)
        return fail("project_queries = false needs num_heads * head_dim == query_dim");
      if (!project_keys && num_heads * dk != pattern_dim)
        return fail("project_keys = false needs num_heads * head_dim == pattern_dim");
      if (!project_values && num_heads * dv != pattern_dim)
        return fail("project_values = false needs num_heads * value_dim == pattern_dim");
      if (!project_output && dout != num_heads * dv)
        return fail("project_output = false needs output_dim == num_heads * value_dim");
      if (!(beta >= 0.0) || !std::isfinite(beta)) return fail("beta must be finite and >= 0");
      if (!(query_weight >= 0.0 && query_weight < 1.0))
        return fail("query_weight must be in [0, 1), got " + std::to_string(query_weight));
      if (learned_queries < 0 || learned_patterns < 0)
        return fail("learned_queries and learned_patterns must be >= 0");
      if (!backward.IsValid(error)) {
        if (error) *error = "backward." + *error;
        return false;
      }
      return true;
    }
  };

  explicit HopfieldLayer(const Options& options) : options_(options) {
    std::string error;
    if (!options.IsValid(&error)) throw std::invalid_argument("HopfieldLayer: " + error);
    H_ = options.num_heads;
    dk_ = options.head_dim > 0 ? options.head_dim : options.query_dim / H_;
    dv_ = options.value_dim > 0 ? options.value_dim : dk_;
    dout_ = options.output_dim > 0 ? options.output_dim : options.query_dim;
    const Index dr = options.query_dim, dy = options.pattern_dim;
    params_ = std::make_unique<ParameterSet<Scalar>>();
    std::mt19937 gen(options.seed);
    auto add = [&](const char* name, Index rows, Index cols) {
      params_->Add(name, rows, cols);
      std::normal_distribution<double> dist(0.0, 1.0 / std::sqrt(static_cast<double>(cols)));
      auto block = params_->Block(name);
      for (Index j = 0; j < cols; ++j)
        for (Index i = 0; i < rows; ++i) block(i, j) = static_cast<Scalar>(dist(gen));
    };
    if (options.project_queries) add("W_Q", H_ * dk_, dr);
    if (options.project_keys) add("W_K", H_ * dk_, dy);
    if (options.project_values) add("W_V", H_ * dv_, dy);
    if (options.project_output) add("W_O", dout_, H_ * dv_);
    const Scalar beta0 = static_cast<Scalar>(
        options.beta > 0.0 ? options.beta : 1.0 / std::sqrt(static_cast<double>(dk_)));
    const Index nbeta = options.beta_per_head ? H_ : 1;
    if (options.learn_beta) {
      params_->Add("beta", nbeta, 1);
      params_->Block("beta").setConstant(beta0);
    }
    if (options.learned_queries > 0) add("queries", dr, options.learned_queries);
    if (options.learned_patterns > 0) add("patterns", dy, options.learned_patterns);
    energy_.reset(new HopfieldLayerEnergy<Scalar>(
        params_.get(), dr, dy, H_, dk_, dv_, options.beta_per_head,
        Vector<Scalar>::Constant(nbeta, beta0), static_cast<Scalar>(options.query_weight)));
    map_ = std::make_unique<CccpMap<Scalar>>(*energy_);
    solver_ = options.solver;
    if (!solver_) {
      typename PicardSolver<Scalar>::Options po;
      po.max_iterations = 200;
      po.absolute_tolerance = sizeof(Scalar) >= 8 ? 1e-9 : 1e-5;
      solver_ = std::make_shared<PicardSolver<Scalar>>(po);
    }
    implicit_ = std::make_unique<ImplicitLayer<Scalar>>(*map_, *solver_, options.backward);
  }
  HopfieldLayer(const HopfieldLayer&) = delete;
  HopfieldLayer& operator=(const HopfieldLayer&) = delete;

  const Options& options() const { return options_; }
  ParameterSet<Scalar>& parameters() { return *params_; }
  const ParameterSet<Scalar>& parameters() const { return *params_; }
  Index num_heads() const { return H_; }
  Index head_dim() const { return dk_; }
  Index value_dim() const { return dv_; }
  Index output_dim() const { return dout_; }
  // The energy whose stationary point the retrieval finds (inputs as of the
  // last Forward) and the CCCP map the solver iterates.
  const HopfieldLayerEnergy<Scalar>& energy() const { return *energy_; }
  const FixedPointMap<Scalar>& map() const { return *map_; }
  // The retrieval state xi* of the last Forward ((H d_k) x S) and its Summary.
  const Matrix<Scalar>& state() const { return xi_; }
  const Summary& summary() const { return summary_; }

  // Z = layer(R, Y) (d_out x S). R: d_r x S queries (ignored: pass an empty
  // matrix, when learned_queries > 0); Y: d_y x N stored patterns (ignored when
  // learned_patterns > 0). mask: additive score mask, N x 1 or N x S (0 or
  // -inf), empty for none.
  Matrix<Scalar> Forward(ConstMatrixRef<Scalar> R, ConstMatrixRef<Scalar> Y,
                         const Matrix<Scalar>& mask = Matrix<Scalar>()) {
    has_forward_ = false;
    const Matrix<Scalar> Rq = options_.learned_queries > 0 ? Matrix<Scalar>(params_->Block("queries")) : Matrix<Scalar>(R);
    const Matrix<Scalar> Yp = options_.learned_patterns > 0 ? Matrix<Scalar>(params_->Block("patterns")) : Matrix<Scalar>(Y);
    if (Rq.cols() == 0) throw std::invalid_argument("HopfieldLayer::Forward(R): no queries (0 columns)");
    energy_->SetInputs(Rq, Yp, mask);
    xi_ = energy_->ProjectQueries(Rq);
    if (options_.one_step) {
      summary_ = Summary();
      summary_.solver = "one_step";
      summary_.termination_type = TerminationType::kConverged;
      summary_.sample_status.assign(xi_.cols(), TerminationType::kConverged);
    } else {
      summary_ = implicit_->Forward(xi_);
    }
    has_forward_ = true;
    return Readout(xi_, nullptr);
  }

  // Gradients of a loss L(Z) given dL/dZ (d_out x S) for the last Forward.
  // Throws std::logic_error before the first Forward.
  HopfieldGradients<Scalar> Backward(ConstMatrixRef<Scalar> dLdZ) const {
    if (!has_forward_) throw std::logic_error("HopfieldLayer::Backward: call Forward first");
    internal::CheckShape("HopfieldLayer::Backward(dLdZ)", dLdZ, dout_, xi_.cols());
    const ParameterSet<Scalar>& P = *params_;
    const Matrix<Scalar>& R = energy_->queries();
    const Matrix<Scalar>& Y = energy_->stored_patterns();
    HopfieldGradients<Scalar> g;
    g.parameters.setZero(P.size());
    Matrix<Scalar> dY = Matrix<Scalar>::Zero(Y.rows(), Y.cols());
    Matrix<Scalar> dR = Matrix<Scalar>::Zero(R.rows(), R.cols());

    // Readout Z = W_O A, A_h = V_h p_h, p_h = softmax(beta_h K_h^T xi_h + m).
    Matrix<Scalar> A;
    Readout(xi_, &A);
    if (P.Contains("W_O")) P.BlockOf(g.parameters, "W_O").noalias() = dLdZ * A.transpose();
    const Matrix<Scalar> dA = P.Contains("W_O") ? Matrix<Scalar>(P.Block("W_O").transpose() * dLdZ)
                                                : Matrix<Scalar>(dLdZ);
    const Matrix<Scalar> K = energy_->Keys();
    const Matrix<Scalar> V = energy_->Values();
    Matrix<Scalar> dK = Matrix<Scalar>::Zero(K.rows(), K.cols());
    Matrix<Scalar> dV = Matrix<Scalar>::Zero(V.rows(), V.cols());
    Matrix<Scalar> dXi = Matrix<Scalar>::Zero(xi_.rows(), xi_.cols());
    Vector<Scalar> dbeta = Vector<Scalar>::Zero(H_);
    for (Index h = 0; h < H_; ++h) {
      const auto head = energy_->HeadAt(K, xi_, h, "HopfieldLayer::Backward");
      const auto dAh = dA.middleRows(h * dv_, dv_);
      dV.middleRows(h * dv_, dv_).noalias() = dAh * head.p.transpose();
      Matrix<Scalar> D = V.middleRows(h * dv_, dv_).transpose() * dAh;  // dL/dp_h
      internal::SoftmaxJacobianProduct<Scalar>(head.p, D, D);           // dL/da_h
      const Scalar b = energy_->beta(h);
      dK.middleRows(h * dk_, dk_).noalias() = b * (xi_.middleRows(h * dk_, dk_) * D.transpose());
      dXi.middleRows(h * dk_, dk_).noalias() = b * (K.middleRows(h * dk_, dk_) * D);
      dbeta(h) = internal::SoftmaxHead<Scalar>::Dot(D, head.scores);
    }
    if (P.Contains("W_V")) P.BlockOf(g.parameters, "W_V").noalias() = dV * Y.transpose();
    dY += P.Contains("W_V") ? Matrix<Scalar>(P.Block("W_V").transpose() * dV) : dV;

    if (options_.one_step) {
      // xi = W_Q R.
      g.adjoint_summary.solver = "none";
      g.adjoint_summary.termination_type = TerminationType::kConverged;
      g.adjoint_summary.sample_status.assign(xi_.cols(), TerminationType::kConverged);
      if (P.Contains("W_Q")) P.BlockOf(g.parameters, "W_Q").noalias() = dXi * R.transpose();
      dR = P.Contains("W_Q") ? Matrix<Scalar>(P.Block("W_Q").transpose() * dXi) : dXi;
    } else {
      // xi* = stationary point: implicit function theorem on the CCCP map.
      BackwardResult<Scalar> r = implicit_->Backward(dXi);
      g.adjoint_summary = r.summary;
      g.parameters += r.parameter_gradient;  // W_Q (anchor), W_K, beta
      if (r.input_gradient.size() != 0) dR = r.input_gradient;
      Matrix<Scalar> u = r.adjoint;
      bool all_good = true;
      for (Index b = 0; b < u.cols(); ++b) {
        if (r.summary.sample_status[b] != TerminationType::kConverged) {
          u.col(b).setZero();
          all_good = false;
        }
      }
      // f = xi - grad E: dL/dY += (df/dY)^T u = -d/dY <grad E, u>.
      Matrix<Scalar> dYe(Y.rows(), Y.cols());
      energy_->StoredPatternVectorJacobianProduct(xi_, u, dYe);
      dY -= dYe;
      if (!all_good && !options_.backward.drop_failed_samples) {
        dY.setConstant(std::numeric_limits<Scalar>::quiet_NaN());
      }
    }
    if (P.Contains("W_K")) P.BlockOf(g.parameters, "W_K").noalias() += dK * Y.transpose();
    dY += P.Contains("W_K") ? Matrix<Scalar>(P.Block("W_K").transpose() * dK) : dK;
    if (P.Contains("beta")) {
      auto b = P.BlockOf(g.parameters, "beta");
      if (b.rows() == 1) b(0, 0) += dbeta.sum(); else b += dbeta;
    }
    if (options_.learned_queries > 0) {
      P.BlockOf(g.parameters, "queries") += dR;
    } else {
      g.queries = dR;
    }
    if (options_.learned_patterns > 0) {
      P.BlockOf(g.parameters, "patterns") += dY;
    } else {
      g.stored_patterns = dY;
    }
    return g;
  }

 private:
  // Z = W_O A, A = [V_h p_h(xi_h)]_h; *A_out receives A when given.
  Matrix<Scalar> Readout(const Matrix<Scalar>& xi, Matrix<Scalar>* A_out) const {
    const Matrix<Scalar> K = energy_->Keys();
    const Matrix<Scalar> V = energy_->Values();
    Matrix<Scalar> A(H_ * dv_, xi.cols());
    for (Index h = 0; h < H_; ++h) {
      const auto head = energy_->HeadAt(K, xi, h, "HopfieldLayer::Forward");
      A.middleRows(h * dv_, dv_).noalias() = V.middleRows(h * dv_, dv_) * head.p;
    }
    if (A_out != nullptr) *A_out = A;
    if (params_->Contains("W_O")) return params_->Block("W_O") * A;
    return A;
  }

  Options options_;
  Index H_ = 1, dk_ = 1, dv_ = 1, dout_ = 1;
  std::unique_ptr<ParameterSet<Scalar>> params_;
  std::unique_ptr<HopfieldLayerEnergy<Scalar>> energy_;
  std::unique_ptr<CccpMap<Scalar>> map_;
  std::shared_ptr<const Solver<Scalar>> solver_;
  std::unique_ptr<ImplicitLayer<Scalar>> implicit_;
  Matrix<Scalar> xi_;
  Summary summary_;
  bool has_forward_ = false;
};

// Hopfield pooling: learned queries (block "queries", d_r x num_queries)
// retrieve from the input set Y; Z = Forward(Y) is d_out x num_queries, a
// fixed-size summary of a set of any size N. Options as HopfieldLayer's, with
// learned_queries = num_queries (> 0).
template <typename Scalar>
class HopfieldPooling {
 public:
  using Options = typename HopfieldLayer<Scalar>::Options;
  explicit HopfieldPooling(const Options& options) : layer_(Check(options)) {}
  Matrix<Scalar> Forward(ConstMatrixRef<Scalar> Y, const Matrix<Scalar>& mask = Matrix<Scalar>()) {
    return layer_.Forward(Matrix<Scalar>(), Y, mask);
  }
  // Gradient of the queries is inside .parameters (block "queries").
  HopfieldGradients<Scalar> Backward(ConstMatrixRef<Scalar> dLdZ) const { return layer_.Backward(dLdZ); }
  ParameterSet<Scalar>& parameters() { return layer_.parameters(); }
  HopfieldLayer<Scalar>& layer() { return layer_; }

 private:
  static const Options& Check(const Options& o) {
    if (o.learned_queries <= 0 || o.learned_patterns != 0) {
      throw std::invalid_argument("HopfieldPooling: needs learned_queries > 0 and learned_patterns == 0");
    }
    return o;
  }
  HopfieldLayer<Scalar> layer_;
};

// Hopfield lookup: the input queries R retrieve from learned stored patterns
// (block "patterns", d_y x num_patterns); Z = Forward(R) is d_out x S.
// Options as HopfieldLayer's, with learned_patterns = num_patterns (> 0).
template <typename Scalar>
class HopfieldLookup {
 public:
  using Options = typename HopfieldLayer<Scalar>::Options;
  explicit HopfieldLookup(const Options& options) : layer_(Check(options)) {}
  Matrix<Scalar> Forward(ConstMatrixRef<Scalar> R, const Matrix<Scalar>& mask = Matrix<Scalar>()) {
    return layer_.Forward(R, Matrix<Scalar>(), mask);
  }
  // Gradient of the stored patterns is inside .parameters (block "patterns").
  HopfieldGradients<Scalar> Backward(ConstMatrixRef<Scalar> dLdZ) const { return layer_.Backward(dLdZ); }
  ParameterSet<Scalar>& parameters() { return layer_.parameters(); }
  HopfieldLayer<Scalar>& layer() { return layer_; }

 private:
  static const Options& Check(const Options& o) {
    if (o.learned_patterns <= 0 || o.learned_queries != 0) {
      throw std::invalid_argument("HopfieldLookup: needs learned_patterns > 0 and learned_queries == 0");
    }
    return o;
  }
  HopfieldLayer<Scalar> layer_;
};

IMPLICIT_EXTERN_TEMPLATE_CLASS(ModernHopfieldEnergy);
IMPLICIT_EXTERN_TEMPLATE_CLASS(HopfieldLayerEnergy);
IMPLICIT_EXTERN_TEMPLATE_CLASS(HopfieldLayer);
IMPLICIT_EXTERN_TEMPLATE_CLASS(HopfieldPooling);
IMPLICIT_EXTERN_TEMPLATE_CLASS(HopfieldLookup);

}  // namespace implicit
