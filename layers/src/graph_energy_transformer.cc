// The graph Energy Transformer (graph_energy_transformer.h): its member
// functions, compiled here once for float and double (the header declares
// those instantiations extern and keeps only the declarations, so that it
// stays readable). Notation as in the header: per sample G = [g_1 .. g_N]
// (D x N), per head h K_h = W_K[h] G, Q_h = W_Q[h] G (Y x N, rows h*Y.. of the
// stacked K, Q), and for node i and edge e = (i, j), j = neighbors[e],
//   p_e = softmax over e in row i of beta k_hj . q_hi,
//   KP col i  = sum_{e in row i} p_e k_hj        (= -dE_ATT/dq_hi)
//   QPt col j = sum_{e = (i, j)} p_e q_hi        (= -dE_ATT/dk_hj)
//   dF/dG = -(W_K^T QPt + W_Q^T KP) - Xi R.
#include <implicit/layers/graph_energy_transformer.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace implicit {

EnergyTransformerOptions GraphEnergyTransformerOptions::ForNodes(Index num_nodes) const {
  if (node_dim < 2) {
    throw std::invalid_argument("GraphEnergyTransformer::Options: node_dim must be >= 2, got " +
                                std::to_string(node_dim));
  }
  EnergyTransformerOptions o;
  o.num_tokens = num_nodes;
  o.token_dim = node_dim;
  o.num_heads = num_heads;
  o.head_dim = head_dim;
  o.num_memories = num_memories;
  o.memory = memory;
  o.beta = beta;
  o.memory_beta = memory_beta;
  o.gamma = gamma;
  o.delta = delta;
  o.eps = eps;
  o.exclude_self = false;
  o.learnable_layer_norm = learnable_layer_norm;
  std::string error;
  if (!o.IsValid(&error)) {
    throw std::invalid_argument("GraphEnergyTransformer::Options: " + error);
  }
  return o;
}

namespace {

// Throws std::invalid_argument naming the first problem of the CSR adjacency.
void CheckGraphAdjacency(const std::vector<Index>& row_offsets,
                         const std::vector<Index>& neighbors) {
  const std::string who = "GraphEnergyTransformer: ";
  if (row_offsets.size() < 2) {
    throw std::invalid_argument(who + "row_offsets needs N + 1 >= 2 entries (N >= 1 nodes), got " +
                                std::to_string(row_offsets.size()));
  }
  const Index N = static_cast<Index>(row_offsets.size()) - 1;
  const Index E = static_cast<Index>(neighbors.size());
  if (row_offsets[0] != 0) {
    throw std::invalid_argument(who + "row_offsets[0] must be 0, got " +
                                std::to_string(row_offsets[0]));
  }
  if (row_offsets[N] != E) {
    throw std::invalid_argument(who + "row_offsets[N] = row_offsets[" + std::to_string(N) +
                                "] must equal neighbors.size() = " + std::to_string(E) +
                                ", got " + std::to_string(row_offsets[N]));
  }
  for (Index i = 0; i < N; ++i) {
    if (row_offsets[i + 1] < row_offsets[i]) {
      throw std::invalid_argument(who + "row_offsets must be non-decreasing: row_offsets[" +
                                  std::to_string(i + 1) + "] = " +
                                  std::to_string(row_offsets[i + 1]) + " < row_offsets[" +
                                  std::to_string(i) + "] = " + std::to_string(row_offsets[i]));
    }
    for (Index e = row_offsets[i]; e < row_offsets[i + 1]; ++e) {
      const Index j = neighbors[e];
      if (j < 0 || j >= N) {
        throw std::invalid_argument(who + "neighbor " + std::to_string(j) + " of node " +
                                    std::to_string(i) + " (neighbors[" + std::to_string(e) +
                                    "]) is out of range [0, " + std::to_string(N) + ")");
      }
      if (e > row_offsets[i] && j <= neighbors[e - 1]) {
        throw std::invalid_argument(who + "the neighbors of node " + std::to_string(i) +
                                    " must be sorted and without duplicates: neighbors[" +
                                    std::to_string(e) + "] = " + std::to_string(j) +
                                    " after " + std::to_string(neighbors[e - 1]));
      }
    }
  }
}

// Validates the adjacency, then the options; the image ET options for the base.
EnergyTransformerOptions CheckedGraphOptions(const GraphEnergyTransformerOptions& options,
                                        const std::vector<Index>& row_offsets,
                                        const std::vector<Index>& neighbors) {
  CheckGraphAdjacency(row_offsets, neighbors);
  return options.ForNodes(static_cast<Index>(row_offsets.size()) - 1);
}

}  // namespace

template <typename Scalar>
GraphEnergyTransformer<Scalar>::GraphEnergyTransformer(const Options& options,
                                                       std::vector<Index> row_offsets,
                                                       std::vector<Index> neighbors)
    : Base(CheckedGraphOptions(options, row_offsets, neighbors)),
      graph_options_(options),
      row_offsets_(std::move(row_offsets)),
      neighbors_(std::move(neighbors)) {
  Initialize(0, 1.0 / std::sqrt(static_cast<double>(options.node_dim)));
}

template <typename Scalar>
void GraphEnergyTransformer<Scalar>::Initialize(unsigned seed, double stddev) {
  this->DrawWeights(seed, stddev);
}

template <typename Scalar>
void GraphEnergyTransformer<Scalar>::SetInput(Matrix<Scalar> c) {
  internal::CheckBatch("GraphEnergyTransformer::SetInput(c)", c, dimension());
  input_ = std::move(c);
}

template <typename Scalar>
void GraphEnergyTransformer<Scalar>::Check(const char* function, ConstMatrixRef<Scalar> x,
                                           const ConstMatrixRef<Scalar>* v) const {
  const std::string name = std::string("GraphEnergyTransformer::") + function;
  internal::CheckBatch((name + "(x)").c_str(), x, dimension());
  if (v != nullptr) internal::CheckShape((name + "(direction)").c_str(), *v, x.rows(), x.cols());
  if (has_input() && input_.cols() != x.cols()) {
    throw std::invalid_argument(name + ": the input has " + std::to_string(input_.cols()) +
                                " columns (SetInput), the batch " + std::to_string(x.cols()) +
                                " samples");
  }
}

template <typename Scalar>
Scalar GraphEnergyTransformer<Scalar>::Residual(ConstMatrixRef<Scalar> x, Index b, Work* w,
                                                bool with_r, Matrix<Scalar>* terms) const {
  const Index N = num_nodes(), H = options_.num_heads, Y = options_.head_dim,
              M = options_.num_memories;
  const auto xb = Tokens(x.col(b).data());
  if (terms) terms->setZero(num_node_terms(), N);
  Normalize(x.col(b).data(), w);
  const Matrix<Scalar>& G = w->g;
  Scalar value = LayerNormEnergy(*w);
  if (terms) {  // E_LN of node i: -D gamma eps / s_i
    terms->row(kLayerNormTerm) = (-static_cast<Scalar>(node_dim()) * gamma() *
                                  static_cast<Scalar>(options_.eps)) * w->s.cwiseInverse().transpose();
  }
  w->r = xb;  // r = x - c + dF/dG
  if (H > 0) {
    const auto wk = params_.Block("W_K"), wq = params_.Block("W_Q");
    w->K.noalias() = wk * G;
    w->Q.noalias() = wq * G;
    w->QPt.setZero(H * Y, N);
    w->KP.setZero(H * Y, N);
    w->p.resize(num_edges(), H);
    for (Index i = 0; i < N; ++i) {  // node-major: node i's edges stay in cache
      const Index lo = row_offsets_[i], deg = row_offsets_[i + 1] - lo;
      if (deg == 0) continue;  // no neighbours: no term
      for (Index h = 0; h < H; ++h) {
        const Index o = h * Y;
        const auto q = w->Q.col(i).segment(o, Y);
        auto p = w->p.col(h).segment(lo, deg);
        for (Index e = 0; e < deg; ++e) {
          p(e) = beta_ * w->K.col(neighbors_[lo + e]).segment(o, Y).dot(q);
        }
        const Scalar term = -internal::SoftmaxColumn<Scalar>(p, p) / beta_;
        value += term;
        if (terms) (*terms)(kFirstHeadTerm + h, i) = term;
        auto kp = w->KP.col(i).segment(o, Y);
        for (Index e = 0; e < deg; ++e) {
          const Index j = neighbors_[lo + e];
          kp += p(e) * w->K.col(j).segment(o, Y);
          w->QPt.col(j).segment(o, Y) += p(e) * q;
        }
      }
    }
    if (with_r) {
      w->r.noalias() -= wk.transpose() * w->QPt;
      w->r.noalias() -= wq.transpose() * w->KP;
    }
  }
  if (M > 0) {
    const auto xi = params_.Block("Xi");
    w->S.noalias() = xi.transpose() * G;
    if (options_.memory == EnergyTransformerMemory::kRelu) {
      w->R = w->S.cwiseMax(Scalar(0));
      value -= Scalar(0.5) * w->R.squaredNorm();
      if (terms) terms->bottomRows(M) = Scalar(-0.5) * w->R.array().square();
    } else {
      const Scalar bm = static_cast<Scalar>(options_.memory_beta);
      w->R = bm * w->S;
      for (Index i = 0; i < N; ++i) {
        const Scalar term = -internal::SoftmaxColumn<Scalar>(w->R.col(i), w->R.col(i)) / bm;
        value += term;
        if (terms) (*terms)(kFirstHeadTerm + H, i) = term;
      }
    }
    if (with_r) w->r.noalias() -= xi * w->R;
  }
  if (has_input()) {
    const auto c = Tokens(input_.col(b).data());
    w->r -= c;
    value -= (c.array() * G.array()).sum();
    if (terms) terms->row(kInputTerm) = -(c.array() * G.array()).colwise().sum();
  }
  return value;
}

template <typename Scalar>
void GraphEnergyTransformer<Scalar>::AttentionDirection(Work* w, ConstMatrixRef<Scalar> dG) const {
  const Index N = num_nodes(), H = options_.num_heads, Y = options_.head_dim;
  w->dK.noalias() = params_.Block("W_K") * dG;
  w->dQ.noalias() = params_.Block("W_Q") * dG;
  w->ks.setZero(H * Y, N);
  w->qs.setZero(H * Y, N);
  w->dA.resize(num_edges());  // per edge, reused by every head
  for (Index i = 0; i < N; ++i) {
    const Index lo = row_offsets_[i], deg = row_offsets_[i + 1] - lo;
    if (deg == 0) continue;
    for (Index h = 0; h < H; ++h) {
      const Index o = h * Y;
      const auto q = w->Q.col(i).segment(o, Y), dq = w->dQ.col(i).segment(o, Y);
      const auto p = w->p.col(h).segment(lo, deg);
      auto dA = w->dA.segment(lo, deg);
      Scalar mean(0);
      for (Index e = 0; e < deg; ++e) {  // dA_e = beta (dk_j . q_i + k_j . dq_i)
        const Index j = neighbors_[lo + e];
        dA(e) = beta_ * (w->dK.col(j).segment(o, Y).dot(q) + w->K.col(j).segment(o, Y).dot(dq));
        mean += p(e) * dA(e);
      }
      auto qs = w->qs.col(i).segment(o, Y);
      for (Index e = 0; e < deg; ++e) {  // dp_e = p_e (dA_e - sum p dA)
        const Index j = neighbors_[lo + e];
        const Scalar dp = p(e) * (dA(e) - mean);
        qs += dp * w->K.col(j).segment(o, Y) + p(e) * w->dK.col(j).segment(o, Y);
        w->ks.col(j).segment(o, Y) += dp * q + p(e) * dq;
      }
    }
  }
}

template <typename Scalar>
void GraphEnergyTransformer<Scalar>::ForcesHvp(Work* w, ConstMatrixRef<Scalar> dG,
                                               Matrix<Scalar>* out) const {
  out->setZero(dG.rows(), dG.cols());
  if (options_.num_heads > 0) {
    AttentionDirection(w, dG);
    out->noalias() -= params_.Block("W_K").transpose() * w->ks;
    out->noalias() -= params_.Block("W_Q").transpose() * w->qs;
  }
  if (options_.num_memories > 0) {
    const auto xi = params_.Block("Xi");
    w->dS.noalias() = xi.transpose() * dG;
    MemoryDirection(*w, w->dS, &w->dR);
    out->noalias() -= xi * w->dR;
  }
}

template <typename Scalar>
void GraphEnergyTransformer<Scalar>::LayerNorm(ConstMatrixRef<Scalar> x,
                                               MatrixRef<Scalar> g) const {
  internal::CheckBatch("GraphEnergyTransformer::LayerNorm(x)", x, dimension());
  internal::CheckShape("GraphEnergyTransformer::LayerNorm(g)", g, x.rows(), x.cols());
  const auto workspace = pool_.Acquire();
  Work& w = *workspace;
  for (Index b = 0; b < x.cols(); ++b) {
    Normalize(x.col(b).data(), &w);
    Out(g, b) = w.g;
  }
}

template <typename Scalar>
void GraphEnergyTransformer<Scalar>::Value(ConstMatrixRef<Scalar> x,
                                           VectorRef<Scalar> values) const {
  Check("Value", x, nullptr);
  internal::CheckShape("GraphEnergyTransformer::Value(values)", values, x.cols(), 1);
  const auto workspace = pool_.Acquire();
  Work& w = *workspace;
  for (Index b = 0; b < x.cols(); ++b) values(b) = Residual(x, b, &w, /*with_r=*/false);
}

template <typename Scalar>
void GraphEnergyTransformer<Scalar>::Descent(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                                             VectorRef<Scalar>* values) const {
  Check("DescentDirection", x, nullptr);
  internal::CheckShape("GraphEnergyTransformer::DescentDirection(out)", out, x.rows(), x.cols());
  if (values) {
    internal::CheckShape("GraphEnergyTransformer::DescentDirection(values)", *values, x.cols(), 1);
  }
  const auto workspace = pool_.Acquire();
  Work& w = *workspace;
  for (Index b = 0; b < x.cols(); ++b) {
    const Scalar e = Residual(x, b, &w);
    if (values) (*values)(b) = e;
    Out(out, b) = w.r;
  }
}

template <typename Scalar>
void GraphEnergyTransformer<Scalar>::Run(const char* function, ConstMatrixRef<Scalar> x,
                                         const ConstMatrixRef<Scalar>* v, MatrixRef<Scalar> out,
                                         VectorRef<Scalar>* values) const {
  Check(function, x, v);
  internal::CheckShape("GraphEnergyTransformer: out", out, x.rows(), x.cols());
  if (values) internal::CheckShape("GraphEnergyTransformer: values", *values, x.cols(), 1);
  const auto workspace = pool_.Acquire();
  Work& w = *workspace;
  for (Index b = 0; b < x.cols(); ++b) {
    const Scalar e = Residual(x, b, &w);
    if (values) (*values)(b) = e;
    if (v == nullptr) {  // dE/dx = M r
      ApplyM(w, w.r, gamma(), &w.a);
      Out(out, b) = w.a;
      continue;
    }
    // hess E v = dM[v] r + M (v + H_F M v)
    const auto vb = Tokens(v->col(b).data());
    ApplyM(w, vb, gamma(), &w.a);
    ForcesHvp(&w, w.a, &w.b);
    w.b += vb;
    ApplyM(w, w.b, gamma(), &w.a);
    DerivativeOfM(w, vb, w.r, &w.b);
    Out(out, b) = w.a + w.b;
  }
}

template <typename Scalar>
void GraphEnergyTransformer<Scalar>::ParameterProduct(ConstMatrixRef<Scalar> x,
                                                      ConstMatrixRef<Scalar> u,
                                                      VectorRef<Scalar> out,
                                                      bool descent) const {
  Check("ParameterVectorJacobianProduct", x, &u);
  internal::CheckShape("GraphEnergyTransformer: parameter product", out, num_parameters(), 1);
  out.setZero();
  const auto workspace = pool_.Acquire();
  Work& w = *workspace;
  for (Index b = 0; b < x.cols(); ++b) {
    Residual(x, b, &w);
    const auto ub = Tokens(u.col(b).data());
    // <dE/dx, u> = <r, M u>: r's parameters see z = M u (z = u for r itself).
    if (descent) {
      w.a = ub;
    } else {
      ApplyM(w, ub, gamma(), &w.a);
    }
    const Matrix<Scalar>& z = w.a;
    const Matrix<Scalar>& G = w.g;
    // d/dtheta <dF/dG, z> = D_z (dF/dtheta): dF/dW_K = -QPt G^T, dF/dW_Q = -KP G^T,
    // dF/dXi = -G R^T, differentiated along G -> z.
    if (options_.num_heads > 0) {
      AttentionDirection(&w, z);
      auto gk = params_.BlockOf(out, "W_K");
      auto gq = params_.BlockOf(out, "W_Q");
      gk.noalias() -= w.ks * G.transpose();
      gk.noalias() -= w.QPt * z.transpose();
      gq.noalias() -= w.qs * G.transpose();
      gq.noalias() -= w.KP * z.transpose();
    }
    if (options_.num_memories > 0) {
      const auto xi = params_.Block("Xi");
      w.dS.noalias() = xi.transpose() * z;
      MemoryDirection(w, w.dS, &w.dR);
      auto gxi = params_.BlockOf(out, "Xi");
      gxi.noalias() -= z * w.R.transpose();
      gxi.noalias() -= G * w.dR.transpose();
    }
    if (options_.learnable_layer_norm) {
      // dG/dgamma = xhat, dG/ddelta = 1, H_F symmetric: <H_F dG/dtheta, z> =
      // <dG/dtheta, H_F z>; for dE/dx also M = gamma M|_{gamma=1}.
      ForcesHvp(&w, z, &w.b);
      Scalar dgamma = (w.b.array() * w.xhat.array()).sum();
      if (!descent) {
        ApplyM(w, ub, Scalar(1), &w.b2);
        dgamma += (w.r.array() * w.b2.array()).sum();
      }
      params_.BlockOf(out, "gamma")(0, 0) += dgamma;
      params_.BlockOf(out, "delta")(0, 0) += w.b.sum();
    }
  }
}

template <typename Scalar>
Index GraphEnergyTransformer<Scalar>::num_node_terms() const {
  const Index M = options_.num_memories;
  const Index memory_rows = M == 0 ? 0 : options_.memory == EnergyTransformerMemory::kRelu ? M : 1;
  return kFirstHeadTerm + options_.num_heads + memory_rows;
}

template <typename Scalar>
void GraphEnergyTransformer<Scalar>::NodeEnergies(ConstMatrixRef<Scalar> x,
                                                  MatrixRef<Scalar> terms) const {
  Check("NodeEnergies", x, nullptr);
  const Index T = num_node_terms();
  internal::CheckShape("GraphEnergyTransformer::NodeEnergies(terms)", terms, T * num_nodes(),
                       x.cols());
  const auto workspace = pool_.Acquire();
  Work& w = *workspace;
  for (Index b = 0; b < x.cols(); ++b) {
    Residual(x, b, &w, /*with_r=*/false, &w.terms);
    Eigen::Map<Matrix<Scalar>>(terms.col(b).data(), T, num_nodes()) = w.terms;
  }
}

template <typename Scalar>
void GraphEnergyTransformer<Scalar>::NodeEnergiesVectorJacobianProduct(
    ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> weights, MatrixRef<Scalar> dx,
    VectorRef<Scalar> dtheta, Matrix<Scalar>* dc) const {
  Check("NodeEnergiesVectorJacobianProduct", x, nullptr);
  const Index N = num_nodes(), H = options_.num_heads, Y = options_.head_dim,
              M = options_.num_memories, T = num_node_terms();
  const std::string name = "GraphEnergyTransformer::NodeEnergiesVectorJacobianProduct";
  internal::CheckShape((name + "(weights)").c_str(), weights, T * N, x.cols());
  internal::CheckShape((name + "(dx)").c_str(), dx, x.rows(), x.cols());
  internal::CheckShape((name + "(dtheta)").c_str(), dtheta, num_parameters(), 1);
  if (dc != nullptr && !has_input()) {
    throw std::logic_error(name + ": dc asked for, but there is no input (SetInput)");
  }
  if (dc != nullptr) dc->resize(x.rows(), x.cols());
  dtheta.setZero();
  const Scalar D = static_cast<Scalar>(node_dim()), eps = static_cast<Scalar>(options_.eps);
  const auto workspace = pool_.Acquire();
  Work& w = *workspace;
  for (Index b = 0; b < x.cols(); ++b) {
    Residual(x, b, &w, /*with_r=*/false);  // the caches only
    const Eigen::Map<const Matrix<Scalar>> v(weights.col(b).data(), T, N);
    const Matrix<Scalar>& G = w.g;
    w.b.setZero(G.rows(), N);  // d/dG sum <v, terms>
    if (has_input()) {  // -c_i . g_i
      const auto c = Tokens(input_.col(b).data());
      w.b -= (c.array().rowwise() * v.row(kInputTerm).array()).matrix();
      if (dc != nullptr) Out(*dc, b) = -(G.array().rowwise() * v.row(kInputTerm).array()).matrix();
    }
    if (H > 0) {
      // d term_hi / dq_hi = -KP col i, d term_hi / dk_hj = -p_e q_hi (e = (i, j)).
      w.dQ.setZero(H * Y, N);
      w.dK.setZero(H * Y, N);
      for (Index i = 0; i < N; ++i) {
        const Index lo = row_offsets_[i], deg = row_offsets_[i + 1] - lo;
        for (Index h = 0; h < H && deg > 0; ++h) {
          const Index o = h * Y;
          const Scalar vh = v(kFirstHeadTerm + h, i);
          w.dQ.col(i).segment(o, Y) = -vh * w.KP.col(i).segment(o, Y);
          for (Index e = 0; e < deg; ++e) {
            w.dK.col(neighbors_[lo + e]).segment(o, Y) -= (vh * w.p(lo + e, h)) * w.Q.col(i).segment(o, Y);
          }
        }
      }
      const auto wk = params_.Block("W_K"), wq = params_.Block("W_Q");
      w.b.noalias() += wk.transpose() * w.dK;
      w.b.noalias() += wq.transpose() * w.dQ;
      params_.BlockOf(dtheta, "W_K").noalias() += w.dK * G.transpose();
      params_.BlockOf(dtheta, "W_Q").noalias() += w.dQ * G.transpose();
    }
    if (M > 0) {
      // ReLU: d(-0.5 ReLU(s)^2)/ds = -ReLU(s); softmax: d(-lse/beta_m)/ds = -softmax.
      if (options_.memory == EnergyTransformerMemory::kRelu) {
        w.dS = -(v.bottomRows(M).array() * w.R.array()).matrix();
      } else {
        w.dS = -(w.R.array().rowwise() * v.row(kFirstHeadTerm + H).array()).matrix();
      }
      const auto xi = params_.Block("Xi");
      w.b.noalias() += xi * w.dS;
      params_.BlockOf(dtheta, "Xi").noalias() += G * w.dS.transpose();
    }
    // E_LN of node i, -D gamma eps / s_i: d/dx_i = gamma eps xhat_i / s_i^2, d/dgamma = -D eps / s_i.
    const auto v_ln = v.row(kLayerNormTerm).transpose().array();
    if (options_.learnable_layer_norm) {  // G = gamma xhat + delta
      params_.BlockOf(dtheta, "gamma")(0, 0) +=
          (w.b.array() * w.xhat.array()).sum() - D * eps * (v_ln / w.s.array()).sum();
      params_.BlockOf(dtheta, "delta")(0, 0) += w.b.sum();
    }
    ApplyM(w, w.b, gamma(), &w.a);
    w.a += (w.xhat.array().rowwise() * (gamma() * eps * v_ln / w.s.array().square()).transpose()).matrix();
    Out(dx, b) = w.a;
  }
}

template <typename Scalar>
void GraphEnergyTransformer<Scalar>::InputVectorJacobianProduct(ConstMatrixRef<Scalar> x,
                                                                ConstMatrixRef<Scalar> u,
                                                                MatrixRef<Scalar> out) const {
  if (!has_input()) Energy<Scalar>::InputVectorJacobianProduct(x, u, out);  // throws
  Check("InputVectorJacobianProduct", x, &u);
  internal::CheckShape("GraphEnergyTransformer::InputVectorJacobianProduct(out)", out, x.rows(),
                       x.cols());
  const auto workspace = pool_.Acquire();
  Work& w = *workspace;
  for (Index b = 0; b < x.cols(); ++b) {
    Normalize(x.col(b).data(), &w);
    ApplyM(w, Tokens(u.col(b).data()), gamma(), &w.a);
    Out(out, b) = -w.a;
  }
}

template <typename Scalar>
void GraphEnergyTransformer<Scalar>::DescentJacobianProduct(ConstMatrixRef<Scalar> x,
                                                            ConstMatrixRef<Scalar> v,
                                                            MatrixRef<Scalar> out,
                                                            bool transpose) const {
  Check("DescentJacobianProduct", x, &v);
  internal::CheckShape("GraphEnergyTransformer::DescentJacobianProduct(out)", out, x.rows(),
                       x.cols());
  const auto workspace = pool_.Acquire();
  Work& w = *workspace;
  for (Index b = 0; b < x.cols(); ++b) {
    Residual(x, b, &w, /*with_r=*/false);  // the caches only
    const auto vb = Tokens(v.col(b).data());
    if (!transpose) {  // v + H_F M v
      ApplyM(w, vb, gamma(), &w.a);
      ForcesHvp(&w, w.a, &w.b);
      Out(out, b) = w.b + vb;
    } else {  // u + M H_F u
      ForcesHvp(&w, vb, &w.b);
      ApplyM(w, w.b, gamma(), &w.a);
      Out(out, b) = w.a + vb;
    }
  }
}

template <typename Scalar>
GraphEnergyTransformerMap<Scalar>::GraphEnergyTransformerMap(GraphEnergyTransformer<Scalar>& et,
                                                             Scalar step)
    : et_(et), step_(step) {
  if (!(step > Scalar(0)) || !std::isfinite(static_cast<double>(step))) {
    throw std::invalid_argument("GraphEnergyTransformerMap: step must be finite and > 0, got " +
                                std::to_string(static_cast<double>(step)));
  }
}

template <typename Scalar>
void GraphEnergyTransformerMap<Scalar>::InputVectorJacobianProduct(ConstMatrixRef<Scalar> x,
                                                                   ConstMatrixRef<Scalar> u,
                                                                   MatrixRef<Scalar> out) const {
  if (!et_.has_input()) {
    throw std::logic_error(
        "GraphEnergyTransformerMap: no input (GraphEnergyTransformer::SetInput)");
  }
  internal::CheckShape("GraphEnergyTransformerMap::InputVectorJacobianProduct(u)", u, x.rows(),
                       x.cols());
  internal::CheckShape("GraphEnergyTransformerMap::InputVectorJacobianProduct(out)", out,
                       x.rows(), x.cols());
  out = step_ * u;  // f = x - a (x - c + dF/dG): df/dc = a I
}

IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(GraphEnergyTransformer);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(GraphEnergyTransformerMap);

}  // namespace implicit
