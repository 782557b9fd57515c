/// \file
/// HopfieldLayer: modern Hopfield retrieval as a neural-network layer
/// (Ramsauer et al., "Hopfield Networks is All You Need"): queries R
/// associated with stored patterns Y through learned projections, several
/// heads, beta per layer or per head; forward = retrieval to convergence by any
/// solver, or one step; backward by the implicit function theorem.
///
/// Inputs: queries R (d_r x S, one query per column = one sample of the batch)
/// and stored patterns Y (d_y x N, shared by the S queries of the call; a set
/// of tokens or a memory). With H heads of key width d_k and value width d_v:
///
/// \code{.unparsed}
///   q  = W_Q R     (H d_k x S)   head h: rows [h d_k, (h+1) d_k)
///   K_h = W_K^h Y  (d_k x N)     V_h = W_V^h Y  (d_v x N)
/// \endcode
///
/// The state of sample s is the head-stacked query xi_s (H d_k). Its energy is
///
/// \code{.unparsed}
///   E(xi) = sum_h 0.5 |xi_h|^2 - a <xi_h, q_h> - (1 - a)/beta_h lse(beta_h K_h^T xi_h + m)
/// \endcode
///
/// with a = Options::query_weight in [0, 1). a = 0 is the modern Hopfield
/// energy of each head (Ramsauer et al.); a > 0 anchors the retrieval to the
/// query (its CCCP step is xi_h <- a q_h + (1 - a) K_h p_h). The forward pass:
///
/// \code{.unparsed}
///   retrieval (default): xi* = stationary point of E reached from xi = q by the
///                        chosen solver on the CCCP map
///   one step (one_step): xi* = q   (the usual single attention step)
///   output: Z = W_O [V_1 p_1(xi*_1); ...; V_H p_H(xi*_H)],
///           p_h(xi_h) = softmax(beta_h K_h^T xi_h + m)   (d_out x S)
/// \endcode
///
/// so one_step is exactly multi-head softmax attention, Z = W_O concat_h V_h
/// softmax(beta_h K_h^T W_Q^h R). Backward: in retrieval mode by the implicit
/// function theorem at xi* (ImplicitBackward on the CCCP map), in one-step mode
/// by the chain rule. Gradients reach W_K, W_V, W_O, beta and Y in both modes.
/// HONEST NOTE: with a = 0 a converged retrieval does not depend on the query
/// except through the basin it starts in, so the exact gradient with respect to
/// R and W_Q is zero in retrieval mode; use query_weight > 0 (or one_step) when
/// the queries must be trained.
///
/// A projection can be switched off (Options::project_*): it is then the
/// identity, which requires matching sizes (e.g. H d_k = d_r for W_Q).
///
/// Parameters (one ParameterSet, parameters()): "W_Q" (H d_k x d_r), "W_K"
/// (H d_k x d_y), "W_V" (H d_v x d_y), "W_O" (d_out x H d_v) when enabled;
/// "beta" (H x 1 when beta_per_head, else 1 x 1) when learn_beta; "queries"
/// (d_r x learned_queries) for HopfieldPooling; "patterns" (d_y x
/// learned_patterns) for HopfieldLookup.
///
/// \code
///   implicit::HopfieldLayer<double>::Options o;
///   o.query_dim = 8; o.pattern_dim = 8; o.num_heads = 2; o.head_dim = 4;
///   implicit::HopfieldLayer<double> layer(o);
///   implicit::Matrix<double> Z = layer.Forward(R, Y);          // d_out x S
///   auto g = layer.Backward(dLdZ);                             // after Forward
///   if (g.ok()) layer.parameters().values() -= 0.1 * g.parameters;
/// \endcode
#pragma once

#include <implicit/core/energy_maps.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/hopfield_layer_energy.h>
#include <implicit/layers/hopfield_layer_options.h>
#include <implicit/layers/log_sum_exp.h>
#include <implicit/solvers/picard.h>
#include <implicit/solvers/solver.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>

namespace implicit {

/// Gradients from HopfieldLayer::Backward.
template <typename Scalar>
struct HopfieldGradients {
  /// dL/dtheta in the layout of layer.parameters().
  Vector<Scalar> parameters;
  /// dL/dR (d_r x S); zero in retrieval mode with query_weight = 0 (see the
  /// note above HopfieldLayer). Empty for HopfieldPooling (R is a parameter).
  Matrix<Scalar> queries;
  /// dL/dY (d_y x N). Empty for HopfieldLookup (Y is a parameter).
  Matrix<Scalar> stored_patterns;
  /// The implicit backward pass (retrieval mode only; solver "none" in one-step mode).
  LinearSolveSummary adjoint_summary;
  /// True when the backward pass converged (adjoint_summary.IsConverged();
  /// always true in one-step mode).
  bool ok() const { return adjoint_summary.IsConverged(); }
};

/// Modern Hopfield retrieval as a multi-head layer: Z = Forward(R, Y) by
/// retrieval to convergence (or one attention step), Backward by the implicit
/// function theorem (or the chain rule). The file comment has the energy, the
/// modes and the parameter blocks.
template <typename Scalar>
class HopfieldLayer {
 public:
  /// The layer's options (HopfieldLayerOptions, hopfield_layer_options.h).
  using Options = HopfieldLayerOptions<Scalar>;

  /// Builds the layer: the parameter blocks, drawn ~ N(0, 1/fan_in) from
  /// options.seed (beta set to its initial value), the energy, its CCCP map and
  /// the forward solver.
  /// \throws std::invalid_argument when the options are invalid (IsValid).
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

  /// The options the layer was built with.
  const Options& options() const { return options_; }
  ///@{
  /// The trainable parameters (the blocks listed in the file comment), in the
  /// layout of HopfieldGradients::parameters.
  ParameterSet<Scalar>& parameters() { return *params_; }
  const ParameterSet<Scalar>& parameters() const { return *params_; }
  ///@}
  /// The number of heads H.
  Index num_heads() const { return H_; }
  /// The key / query width d_k per head (resolved: query_dim / H when 0).
  Index head_dim() const { return dk_; }
  /// The value width d_v per head (resolved: head_dim when 0).
  Index value_dim() const { return dv_; }
  /// The rows d_out of the output Z (resolved: query_dim when 0).
  Index output_dim() const { return dout_; }
  ///@{
  /// The energy whose stationary point the retrieval finds (inputs as of the
  /// last Forward) and the CCCP map the solver iterates.
  const HopfieldLayerEnergy<Scalar>& energy() const { return *energy_; }
  const FixedPointMap<Scalar>& map() const { return *map_; }
  ///@}
  ///@{
  /// The retrieval state xi* of the last Forward ((H d_k) x S) and its Summary.
  const Matrix<Scalar>& state() const { return xi_; }
  const Summary& summary() const { return summary_; }
  ///@}

  /// Z = layer(R, Y) (d_out x S). R: d_r x S queries (ignored: pass an empty
  /// matrix, when learned_queries > 0); Y: d_y x N stored patterns (ignored when
  /// learned_patterns > 0). mask: additive score mask, N x 1 or N x S (0 or
  /// -inf), empty for none.
  /// \throws std::invalid_argument when there are no queries (0 columns) or
  ///   R, Y or the mask have the wrong shape.
  Matrix<Scalar> Forward(ConstMatrixRef<Scalar> R, ConstMatrixRef<Scalar> Y,
                         const Matrix<Scalar>& mask = Matrix<Scalar>());

  /// Gradients of a loss L(Z) given dL/dZ (d_out x S) for the last Forward.
  /// \throws std::logic_error before the first Forward.
  /// \throws std::invalid_argument when dLdZ is not d_out x S.
  HopfieldGradients<Scalar> Backward(ConstMatrixRef<Scalar> dLdZ) const;

 private:
  /// Z = W_O A, A = [V_h p_h(xi_h)]_h; *A_out receives A when given.
  Matrix<Scalar> Readout(const Matrix<Scalar>& xi, Matrix<Scalar>* A_out) const;

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

template <typename Scalar>
Matrix<Scalar> HopfieldLayer<Scalar>::Forward(
    ConstMatrixRef<Scalar> R,
    ConstMatrixRef<Scalar> Y,
    const Matrix<Scalar>& mask) {
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

template <typename Scalar>
HopfieldGradients<Scalar> HopfieldLayer<Scalar>::Backward(ConstMatrixRef<Scalar> dLdZ) const {
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
    if (!all_good && options_.backward.failed_sample_policy() != FailedSamplePolicy::kSkip) {
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

template <typename Scalar>
Matrix<Scalar> HopfieldLayer<Scalar>::Readout(
    const Matrix<Scalar>& xi,
    Matrix<Scalar>* A_out) const {
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

/// The shared part of HopfieldPooling and HopfieldLookup: a HopfieldLayer one
/// of whose two inputs (the queries or the stored patterns) is a learned
/// parameter block.
template <typename Scalar>
class LearnedInputHopfieldLayer {
 public:
  /// The options (HopfieldLayerOptions, as HopfieldLayer's).
  using Options = typename HopfieldLayer<Scalar>::Options;
  /// Gradients of a loss L(Z) given dL/dZ for the last Forward, as
  /// HopfieldLayer::Backward. The gradient of the learned input is inside
  /// .parameters (its block).
  HopfieldGradients<Scalar> Backward(ConstMatrixRef<Scalar> dLdZ) const { return layer_.Backward(dLdZ); }
  /// The trainable parameters of the wrapped layer, the learned input's block
  /// included.
  ParameterSet<Scalar>& parameters() { return layer_.parameters(); }
  /// The wrapped HopfieldLayer (its sizes, energy, state and summary).
  HopfieldLayer<Scalar>& layer() { return layer_; }

 protected:
  /// Throws std::invalid_argument (naming `who`) unless exactly the queries
  /// (learned_queries = true) or exactly the stored patterns are learned.
  LearnedInputHopfieldLayer(const Options& options, const char* who, bool learned_queries)
      : layer_(Check(options, who, learned_queries)) {}
  /// The wrapped layer, built from the checked options.
  HopfieldLayer<Scalar> layer_;

 private:
  static const Options& Check(const Options& o, const char* who, bool queries);
};

template <typename Scalar>
auto LearnedInputHopfieldLayer<Scalar>::Check(
    const Options& o,
    const char* who,
    bool queries) -> const Options& {
  const bool ok = queries ? (o.learned_queries > 0 && o.learned_patterns == 0)
                          : (o.learned_patterns > 0 && o.learned_queries == 0);
  if (!ok) {
    throw std::invalid_argument(std::string(who) +
                                (queries ? ": needs learned_queries > 0 and learned_patterns == 0"
                                         : ": needs learned_patterns > 0 and learned_queries == 0"));
  }
  return o;
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(HopfieldLayer);
IMPLICIT_EXTERN_TEMPLATE_CLASS(LearnedInputHopfieldLayer);

}  // namespace implicit
