/// \file
/// HopfieldLayerEnergy: the energy whose stationary point HopfieldLayer's
/// retrieval finds, the modern Hopfield energy (modern_hopfield_energy.h) of
/// each head's query state with learned key projections, per-head inverse
/// temperatures and an optional anchor to the query (the exact energy is in
/// hopfield_layer.h). A layer builds and owns its energy; read it through
/// HopfieldLayer::energy(), e.g. to evaluate E at the retrieved states:
///
/// \code
///   implicit::HopfieldLayer<double> layer(o);
///   layer.Forward(R, Y);
///   implicit::Vector<double> E(R.cols());
///   layer.energy().Value(layer.state(), E);        // E(xi*) per sample
/// \endcode
///
/// The member functions are defined in layers/src/hopfield_layer_energy.cc and
/// compiled there for float and double only.
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#include <implicit/layers/log_sum_exp.h>
#include <implicit/layers/modern_hopfield_energy.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

namespace implicit {

template <typename Scalar>
class HopfieldLayer;

/// The energy of HopfieldLayer's state (see hopfield_layer.h). Its parameters are the
/// layer's ParameterSet (same layout; blocks it does not depend on get zero
/// derivatives); its inputs R, Y and mask are copies set by SetInputs.
/// input_dimension() is d_r when query_weight > 0 (E depends on R), else 0.
template <typename Scalar>
class HopfieldLayerEnergy : public Energy<Scalar> {
 public:
  Index dimension() const override { return H_ * dk_; }
  /// The number of heads H.
  Index num_heads() const { return H_; }

  /// Sets the inputs (copied): the queries R (d_r x S), the stored patterns Y
  /// (d_y x N, N > 0) and the additive score mask (N x 1 or N x S, 0 or -inf;
  /// empty for none). Invalidates the cached keys.
  /// \throws std::invalid_argument when R, Y or the mask have the wrong shape.
  void SetInputs(ConstMatrixRef<Scalar> R, ConstMatrixRef<Scalar> Y, Matrix<Scalar> mask);
  /// The queries R (d_r x S) of the last SetInputs.
  const Matrix<Scalar>& queries() const { return R_; }
  /// The stored patterns Y (d_y x N) of the last SetInputs.
  const Matrix<Scalar>& stored_patterns() const { return Y_; }

  /// q = W_Q R (H d_k x cols of R).
  Matrix<Scalar> ProjectQueries(ConstMatrixRef<Scalar> R) const {
    return ApplyProjection("W_Q", R);
  }
  ///@{
  /// K = W_K Y (H d_k x N) and V = W_V Y (H d_v x N). K is computed once per
  /// (W_K, Y) and reused by every evaluation (see CachedKeys).
  Matrix<Scalar> Keys() const { return *CachedKeys(); }
  Matrix<Scalar> Values() const { return ApplyProjection("W_V", Y_); }
  ///@}
  /// beta of head h.
  Scalar beta(Index h) const {
    if (!params_->Contains("beta")) return fixed_beta_(beta_per_head_ ? h : 0);
    const auto b = params_->Block("beta");
    return b(b.rows() == 1 ? 0 : h, 0);
  }
  /// Attention weights of head h at state xi (N x B).
  Matrix<Scalar> Attention(ConstMatrixRef<Scalar> xi, Index h) const {
    const std::shared_ptr<const Matrix<Scalar>> keys = CachedKeys();
    const Matrix<Scalar>& K = *keys;
    return HeadAt(K, xi, h, "HopfieldLayerEnergy::Attention").p;
  }

  void Value(ConstMatrixRef<Scalar> xi, VectorRef<Scalar> values) const override;

  void Gradient(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> grad) const override {
    Check("HopfieldLayerEnergy::Gradient(xi)", xi);
    internal::CheckShape("HopfieldLayerEnergy::Gradient(grad)", grad, xi.rows(), xi.cols());
    CccpUpdate(xi, grad);
    grad = xi - grad;
  }

  /// xi_h <- a q_h + (1 - a) K_h softmax(beta_h K_h^T xi_h + m).
  void CccpUpdate(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> out) const override;

  /// The CCCP update and E from one softmax head evaluation per head.
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override;
  void GradientAndValue(ConstMatrixRef<Scalar> xi, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override {
    internal::CheckShape("HopfieldLayerEnergy::GradientAndValue(grad)", grad, xi.rows(), xi.cols());
    CccpUpdateAndValue(xi, grad, values);
    grad = xi - grad;
  }
  /// Every sample sees the same energy unless the queries anchor it
  /// (query_weight > 0: q = W_Q R per sample) or the mask is per sample; then
  /// blocks of samples are evaluated with their anchors and masks.
  bool SupportsSubsets() const override {
    return a_ == Scalar(0) && (mask_.size() == 0 || mask_.cols() == 1);
  }
  bool SupportsColumnSubsets() const override { return true; }
  void CccpUpdateColumns(ConstMatrixRef<Scalar> xi, const std::vector<Index>& columns, MatrixRef<Scalar> out,
                         VectorRef<Scalar> values) const override;
  void GradientColumns(ConstMatrixRef<Scalar> xi, const std::vector<Index>& columns, MatrixRef<Scalar> grad,
                       VectorRef<Scalar> values) const override {
    CccpUpdateColumns(xi, columns, grad, values);
    grad = xi - grad;
  }

  void HessianVectorProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override;

  Index num_parameters() const override { return params_->size(); }
  ParameterSet<Scalar>* parameters() override { return params_; }

  /// d/dtheta sum_b <grad E(xi_b), u_b>: blocks W_Q (through the anchor), W_K
  /// and beta; zero for the others.
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override;

  Index input_dimension() const override { return a_ != Scalar(0) ? dr_ : 0; }
  /// d/dR <grad E, u> = -a W_Q^T u (only when query_weight > 0).
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override {
    Check("HopfieldLayerEnergy::InputVectorJacobianProduct(xi)", xi);
    internal::CheckShape("HopfieldLayerEnergy::InputVectorJacobianProduct(out)", out, dr_, xi.cols());
    if (a_ == Scalar(0)) throw std::logic_error("HopfieldLayerEnergy: no input (query_weight = 0)");
    out = -a_ * ApplyProjectionTransposed("W_Q", u);
  }

  /// out = d/dY sum_b <grad E(xi_b), u_b>   (d_y x N; through the keys K = W_K Y).
  void StoredPatternVectorJacobianProduct(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> u,
                                          MatrixRef<Scalar> out) const;

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
    return HeadAt(K, xi, h, mask_, who);
  }
  internal::SoftmaxHead<Scalar> HeadAt(const Matrix<Scalar>& K, ConstMatrixRef<Scalar> xi, Index h,
                                       const Matrix<Scalar>& mask, const char* who) const;
  /// The CCCP update (and E unless values is empty) of xi's samples with their
  /// anchor a W_Q R (empty when a = 0) and mask; xi checked by the caller.
  void CccpWith(ConstMatrixRef<Scalar> xi, const Matrix<Scalar>& anchor, const Matrix<Scalar>& mask,
                MatrixRef<Scalar> out, VectorRef<Scalar> values, const char* who) const;
  /// K = W_K Y, computed again only after SetInputs or when the W_K values
  /// differ from those it was computed from (compared at each call: H d_k d_y
  /// reads instead of a GEMM with N columns, which dominates the late, small
  /// active sets of a solve). Shared, so that an evaluation on another thread
  /// keeps the keys it started with.
  std::shared_ptr<const Matrix<Scalar>> CachedKeys() const {
    std::lock_guard<std::mutex> lock(keys_mutex_);
    const bool projected = params_->Contains("W_K");
    if (keys_ != nullptr && (!projected || params_->Block("W_K") == keys_weights_)) return keys_;
    if (projected) keys_weights_ = params_->Block("W_K");
    keys_ = std::make_shared<const Matrix<Scalar>>(ApplyProjection("W_K", Y_));
    return keys_;
  }
  /// dK (H d_k x N) and dbeta (H) of sum_b sum_h (1 - a) <K_h p_h, u_h>.
  void RetrievalVjp(ConstMatrixRef<Scalar> xi, ConstMatrixRef<Scalar> u, Matrix<Scalar>* dK,
                    Vector<Scalar>* dbeta) const;

  ParameterSet<Scalar>* params_;
  Index dr_, dy_, H_, dk_, dv_;
  bool beta_per_head_;
  Vector<Scalar> fixed_beta_;
  Scalar a_;
  Matrix<Scalar> R_, Y_, mask_;
  mutable std::mutex keys_mutex_;
  mutable std::shared_ptr<const Matrix<Scalar>> keys_;  ///< K = W_K Y, or null
  mutable Matrix<Scalar> keys_weights_;                 ///< the W_K it was computed from
};

IMPLICIT_EXTERN_TEMPLATE_CLASS(HopfieldLayerEnergy);

}  // namespace implicit
