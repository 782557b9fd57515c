/// \file
/// The Energy Transformer on a graph (Hoover et al., 2023, graph anomaly
/// detection): nodes are tokens and each node attends to its neighbours only.
/// One sample is one graph of N nodes; its column (length N*D) holds node i's
/// state x_i in R^D at rows [i*D, i*D+D), the image ET's token layout. The
/// adjacency is compressed sparse row (CSR): node i's neighbours are
/// neighbors[row_offsets[i] .. row_offsets[i+1]), sorted, each in [0, N). Every
/// product costs O(edges * H * Y + N * D * (H * Y + M)); no N x N matrix is
/// ever formed. With g_i = LayerNorm(x_i) (the ET's token LayerNorm,
/// energy_transformer_token_norm.h), per sample:
///
/// \code{.unparsed}
///   E     = E_LN + E_ATT + E_HN - sum_i c_i . g_i          (c: optional input)
///   E_LN  = sum_i (g_i . x_i - L(x_i)) = -sum_i D gamma eps / s_i   (as the ET)
///   E_ATT = -(1/beta) sum_h sum_i log sum_{j in N(i)} exp(beta k_hj . q_hi),
///           k_h = W_K[h] g, q_h = W_Q[h] g; a node with no neighbours adds 0
///           (it is attended to by others but attends to nothing); a self-loop
///           i in N(i) lets node i attend to itself
///   E_HN  = -0.5 sum_i sum_mu ReLU(xi_mu . g_i)^2   (or the softmax memory)
/// \endcode
///
/// Dynamics: DescentDirection dE/dg = x - c + dF/dG (F = E_ATT + E_HN), the ET
/// rule x <- x - a dE/dg, along which E never increases (small enough a);
/// Gradient = M dE/dg with M = dg/dx; HessianVectorProduct is the exact closed
/// form dM[v] dE/dg + M (v + H_F M v); ParameterVectorJacobianProduct covers
/// "W_K", "W_Q" ((H*Y) x D, head h = rows h*Y..h*Y+Y-1), "Xi" (D x M) and, with
/// learnable_layer_norm, "gamma", "delta" (the image ET's ParameterSet layout).
/// The optional input c (n x B, SetInput; the external field of a Hopfield
/// network) anchors the equilibrium x* = c - dF/dG at the node features, so a
/// trained input projection reaches the equilibrium; InputVectorJacobianProduct
/// gives its derivative. NodeEnergies splits E into per-node terms (LayerNorm,
/// input, one per head, the memories): a readout of the equilibrium that sees
/// a node's degree, the spread of its state and how well it matches its
/// neighbours.
///
/// GraphEnergyTransformerMap is the dynamics as a fixed-point map f = x - a dE/dg
/// (isolated fixed points, unlike grad E = 0: LayerNorm ignores a node's mean),
/// for Picard, Anderson, gradient_flow (energy()) and ImplicitBackward.
/// Workspaces are kept between calls (WorkspacePool: one per concurrent caller,
/// so const calls stay thread-safe): after the first call, calls on graphs and
/// batches of the same size allocate nothing.
/// The member functions are defined in layers/src/graph_energy_transformer.cc
/// and compiled there for float and double only.
///
/// \code
///   implicit::GraphEnergyTransformerOptions o;
///   o.node_dim = 16; o.num_heads = 2; o.head_dim = 8; o.num_memories = 32;
///   implicit::GraphEnergyTransformer<double> et(o, row_offsets, neighbors);
///   et.SetInput(c);                                  // (N*16) x 1: projected features
///   implicit::GraphEnergyTransformerMap<double> map(et, 0.5);
///   implicit::ImplicitLayer<double> layer(map, anderson);
///   implicit::Matrix<double> x = c;
///   layer.Forward(x);                                // x <- equilibrium
///   auto grads = layer.Backward(dL_dx);              // W_K, W_Q, Xi and dL/dc
/// \endcode
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/map.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#include <implicit/core/workspace_pool.h>
#include <implicit/layers/energy_transformer_options.h>
#include <implicit/layers/energy_transformer_token_norm.h>
#include <implicit/layers/log_sum_exp.h>

#include <string>
#include <vector>

namespace implicit {

/// The options of GraphEnergyTransformer: the image ET's options
/// (EnergyTransformerOptions) without the number of tokens, which the graph
/// gives, and without exclude_self, which the adjacency decides.
struct GraphEnergyTransformerOptions {
  Index node_dim = 0;      ///< D, >= 2 (must be set)
  Index num_heads = 1;     ///< H (0 disables E_ATT; default 1)
  Index head_dim = 0;      ///< Y, >= 1 when num_heads > 0
  Index num_memories = 0;  ///< M (0, the default, disables E_HN)
  /// Which Hopfield-memory energy E_HN uses (default kRelu).
  EnergyTransformerMemory memory = EnergyTransformerMemory::kRelu;
  double beta = 0.0;         ///< attention inverse temperature; 0: 1/sqrt(Y)
  double memory_beta = 1.0;  ///< inverse temperature of the softmax memory (> 0, default 1; softmax memory only)
  ///@{
  /// LayerNorm gain gamma > 0 (default 1), bias delta (default 0) and
  /// variance floor eps > 0 (default 1e-5).
  double gamma = 1.0, delta = 0.0, eps = 1e-5;
  ///@}
  bool learnable_layer_norm = false;            ///< "gamma", "delta" trainable parameters (default false: constants)

  /// The image ET's options for N nodes (exclude_self off: the graph decides).
  /// \throws std::invalid_argument naming the bad field.
  EnergyTransformerOptions ForNodes(Index num_nodes) const;
};

/// The Energy Transformer on a graph as an Energy of the node states (N*D x B,
/// node-major): each node attends to its neighbours only (CSR adjacency), with
/// an optional input c and per-node energy terms (the file comment has the
/// energy and the parameter blocks).
template <typename Scalar>
class GraphEnergyTransformer : public Energy<Scalar>,
                               private internal::EnergyTransformerTokenNorm<Scalar> {
  using Base = internal::EnergyTransformerTokenNorm<Scalar>;

 public:
  /// The options (GraphEnergyTransformerOptions).
  using Options = GraphEnergyTransformerOptions;

  /// Validates the options and the CSR adjacency (std::invalid_argument naming
  /// the problem); parameters start as N(0, 1/D) entries (seed 0).
  /// \param options Sizes, memory term, inverse temperatures and LayerNorm.
  /// \param row_offsets N + 1 offsets: node i's neighbours are
  ///   neighbors[row_offsets[i] .. row_offsets[i+1]); row_offsets[0] = 0,
  ///   non-decreasing, row_offsets[N] = neighbors.size().
  /// \param neighbors The neighbours of every node, sorted per node, each in
  ///   [0, N).
  /// \throws std::invalid_argument when the options or the adjacency are
  ///   invalid.
  GraphEnergyTransformer(const Options& options, std::vector<Index> row_offsets,
                         std::vector<Index> neighbors);

  /// Redraws W_K, W_Q and Xi with i.i.d. N(0, stddev^2) entries.
  void Initialize(unsigned seed, double stddev);

  /// The options the energy was built with.
  const Options& options() const { return graph_options_; }
  /// The number of nodes N.
  Index num_nodes() const { return options_.num_tokens; }
  /// The dimension D of one node's state.
  Index node_dim() const { return options_.token_dim; }
  /// The number of (directed) edges, neighbors().size().
  Index num_edges() const { return static_cast<Index>(neighbors_.size()); }
  ///@{
  /// The CSR adjacency: node i's neighbours are
  /// neighbors()[row_offsets()[i] .. row_offsets()[i+1]).
  const std::vector<Index>& row_offsets() const { return row_offsets_; }
  const std::vector<Index>& neighbors() const { return neighbors_; }
  ///@}
  Index dimension() const override { return num_nodes() * node_dim(); }
  /// The attention inverse temperature beta in use (Options::beta, or
  /// 1/sqrt(head_dim) when that is 0).
  Scalar beta() const { return beta_; }
  ///@{
  /// The LayerNorm gain and bias, and the D x N view of one column (node i =
  /// column i): energy_transformer_token_norm.h.
  using Base::delta;
  using Base::gamma;
  using Base::Tokens;
  ///@}

  /// g = LayerNorm(x) node by node (x's layout).
  /// \throws std::invalid_argument when x is not (N*D) x B (B >= 1) or g is
  ///   not its shape.
  void LayerNorm(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> g) const;

  /// The input c (n x B): every later evaluation takes B samples. ClearInput()
  /// removes it (c = 0).
  /// \throws std::invalid_argument when c is not (N*D) x B with B >= 1.
  void SetInput(Matrix<Scalar> c);
  /// Removes the input (c = 0; input_dimension() 0).
  void ClearInput() { input_.resize(0, 0); }
  /// True while an input set by SetInput is in force.
  bool has_input() const { return input_.size() > 0; }
  /// The input c of the last SetInput ((N*D) x B; empty when none).
  const Matrix<Scalar>& input() const { return input_; }

  void Value(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const override;
  void DescentDirection(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out) const override {
    Descent(x, out, nullptr);
  }
  /// dE/dg and E in one pass.
  void DescentDirectionAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                                VectorRef<Scalar> values) const override {
    Descent(x, out, &values);
  }
  void Gradient(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const override {
    Run("Gradient", x, nullptr, grad, nullptr);
  }
  void GradientAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override {
    Run("GradientAndValue", x, nullptr, grad, &values);
  }
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override {
    GradientAndValue(x, out, values);
    out = x - out;
  }
  /// Without an input any subset of a batch's columns may be evaluated.
  bool SupportsSubsets() const override { return !has_input(); }
  void HessianVectorProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override {
    Run("HessianVectorProduct", x, &v, out, nullptr);
  }

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return &params_; }
  /// The trainable parameters ("W_K", "W_Q", "Xi", and "gamma", "delta" when
  /// learnable_layer_norm), in the image ET's layout.
  const ParameterSet<Scalar>& parameter_set() const { return params_; }
  /// out = d/dtheta sum_b <dE/dx(x_b), u_b>.
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    ParameterProduct(x, u, out, /*descent=*/false);
  }
  Index input_dimension() const override { return has_input() ? dimension() : 0; }
  /// out = d/dc <dE/dx, u> = -M u.
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override;

  // ---- The residual r(x) = dE/dg, whose zeros the map finds --------------
  /// out = (dr/dx) v = v + H_F M v, or (transpose) (dr/dx)^T u = u + M H_F u.
  void DescentJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                              MatrixRef<Scalar> out, bool transpose = false) const;
  /// out = d/dtheta sum_b <r(x_b), u_b>.
  void DescentParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                             VectorRef<Scalar> out) const {
    ParameterProduct(x, u, out, /*descent=*/true);
  }

  // ---- Node i's share of the energy (a readout of the state) -------------
  ///@{
  /// The rows of a node's terms in NodeEnergies: its E_LN, its input term, and
  /// the first head's attention term (head h at kFirstHeadTerm + h).
  static constexpr Index kLayerNormTerm = 0, kInputTerm = 1, kFirstHeadTerm = 2;
  ///@}
  /// The number T of node terms per node: 2 + H, plus M for the ReLU memory or
  /// 1 for the softmax memory (0 without memories).
  Index num_node_terms() const;
  /// Node i's share of the energy (a readout of the state).
  /// E = sum_i sum_r t_ri with T = num_node_terms() rows per node: row
  /// kLayerNormTerm node i's E_LN (-D gamma eps / s_i: it grows with the
  /// spread of x_i, which g_i does not see), row kInputTerm -c_i . g_i (0
  /// without input), rows kFirstHeadTerm + h the attention terms
  /// -(1/beta) lse_{j in N(i)} beta k_hj . q_hi (0 for a node without
  /// neighbours; -(1/beta) log deg_i when the scores are equal), then the memory
  /// terms: M rows -0.5 ReLU(xi_mu . g_i)^2 (ReLU memory) or one row
  /// -(1/beta_m) lse_mu(beta_m xi_mu . g_i) (softmax memory). terms is (T*N) x B,
  /// node i at rows [i*T, i*T+T) (the states' layout with T in place of D).
  /// \throws std::invalid_argument when x is not (N*D) x B (B >= 1), does not
  ///   match the input's batch, or terms is not (T*N) x B.
  void NodeEnergies(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> terms) const;
  /// The derivatives of sum_b <weights_b, terms_b>: dx (n x B) in x, dtheta
  /// (num_parameters(), overwritten) in the parameters and, when dc is given
  /// (an input must be set; resized to n x B), in the input c.
  /// \throws std::logic_error when dc is given without an input.
  /// \throws std::invalid_argument when x, weights, dx or dtheta have the
  ///   wrong shape.
  void NodeEnergiesVectorJacobianProduct(ConstMatrixRef<Scalar> x,
                                         ConstMatrixRef<Scalar> weights, MatrixRef<Scalar> dx,
                                         VectorRef<Scalar> dtheta,
                                         Matrix<Scalar>* dc = nullptr) const;

 private:
  /// dE/dg and (when values != nullptr) E in one pass.
  void Descent(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out, VectorRef<Scalar>* values) const;
  using typename Base::Sample;
  using Base::ApplyM;
  using Base::beta_;
  using Base::DerivativeOfM;
  using Base::LayerNormEnergy;
  using Base::MemoryDirection;
  using Base::Normalize;
  using Base::options_;
  using Base::Out;
  using Base::params_;

  /// One sample's caches (Sample: xhat, s, g, K, Q, QPt, KP, S, R) and scratch.
  struct Work : Sample {
    Matrix<Scalar> p;                     ///< E x H: softmax weight of edge e in head h
    Vector<Scalar> dA;                    ///< E: score derivatives of one head
    Matrix<Scalar> r, a, b, b2, dK, dQ, ks, qs, dS, dR;
    Matrix<Scalar> terms;                 ///< T x N node terms (NodeEnergies)
  };

  /// Shapes of x (and of the direction v), and the input's batch size.
  void Check(const char* function, ConstMatrixRef<Scalar> x,
             const ConstMatrixRef<Scalar>* v) const;
  /// Normalises column b of x, fills w's caches and (with_r) w->r = dE/dg, and
  /// (terms != nullptr) the T x N node terms; returns E.
  Scalar Residual(ConstMatrixRef<Scalar> x, Index b, Work* w, bool with_r = true,
                  Matrix<Scalar>* terms = nullptr) const;
  /// out = H_F dG (w: Residual's caches; uses w->dK .. w->dR).
  void ForcesHvp(Work* w, ConstMatrixRef<Scalar> dG, Matrix<Scalar>* out) const;
  /// w->ks, w->qs = the derivatives of QPt, KP along dG (w->dK, w->dQ set too).
  void AttentionDirection(Work* w, ConstMatrixRef<Scalar> dG) const;
  /// grad (HVP when v) and values of every column.
  void Run(const char* function, ConstMatrixRef<Scalar> x, const ConstMatrixRef<Scalar>* v,
           MatrixRef<Scalar> out, VectorRef<Scalar>* values) const;
  void ParameterProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                        VectorRef<Scalar> out, bool descent) const;

  GraphEnergyTransformerOptions graph_options_;
  std::vector<Index> row_offsets_, neighbors_;
  Matrix<Scalar> input_;
  mutable WorkspacePool<Work> pool_;
};

/// The graph ET dynamics as a fixed-point map, f(x) = x - a r(x), r = dE/dg
/// (a = step > 0). Fixed points: r = 0, the equilibria of the dynamics.
/// J = I - a (I + H_F M) is not symmetric (GMRES in the backward pass). With an
/// input c on the energy, input_dimension() = n and df/dc = a I. Holds a
/// reference: the energy must outlive the map.
template <typename Scalar>
class GraphEnergyTransformerMap : public FixedPointMap<Scalar> {
 public:
  /// The map x <- x - step dE/dg of the energy et (held by reference).
  /// \throws std::invalid_argument when step is not finite and > 0.
  explicit GraphEnergyTransformerMap(GraphEnergyTransformer<Scalar>& et, Scalar step = Scalar(1));

  /// The step a of the dynamics x <- x - a dE/dg.
  Scalar step() const { return step_; }
  Index dimension() const override { return et_.dimension(); }
  void Evaluate(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out) const override {
    et_.DescentDirection(x, out);
    out = x - step_ * out;
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    et_.DescentJacobianProduct(x, v, out, false);
    out = v - step_ * out;
  }
  void VectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                             MatrixRef<Scalar> out) const override {
    et_.DescentJacobianProduct(x, u, out, true);
    out = u - step_ * out;
  }
  Index num_parameters() const override { return et_.num_parameters(); }
  ParameterSet<Scalar>* parameters() override { return et_.parameters(); }
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    et_.DescentParameterVectorJacobianProduct(x, u, out);
    out *= -step_;
  }
  Index input_dimension() const override { return et_.input_dimension(); }
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override;
  const Energy<Scalar>* energy() const override { return &et_; }
  /// f and E from one pass (the energy-guarded solvers ask for both).
  void EvaluateWithEnergy(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                          VectorRef<Scalar> energies) const override {
    et_.DescentDirectionAndValue(x, out, energies);
    out = x - step_ * out;
  }
  bool SupportsSubsets() const override { return et_.SupportsSubsets(); }

 private:
  GraphEnergyTransformer<Scalar>& et_;
  Scalar step_;
};

IMPLICIT_EXTERN_TEMPLATE_CLASS(GraphEnergyTransformer);
IMPLICIT_EXTERN_TEMPLATE_CLASS(GraphEnergyTransformerMap);

}  // namespace implicit
