// The Energy Transformer block (Hoover et al., 2023) as an Energy: one
// recurrent block whose forward pass descends a single scalar energy of the
// tokens.
//
// State layout. One sample is N tokens of dimension D, x_A in R^D. The sample's
// column (length N*D) stores the tokens one after another: entries
// [A*D, (A+1)*D) are token A. Equivalently the column is the D x N matrix
// [x_1 ... x_N] (one token per column) stored column-major, or the N x D token
// matrix stored row-major. EnergyTransformer::Tokens(col) gives that D x N view.
//
// Energy (per sample), with g_A = LayerNorm(x_A) = gamma (x_A - mean) / s_A +
// delta, s_A = sqrt(var(x_A) + eps) (scalar gamma > 0, delta):
//
//   E    = E_LN + E_ATT + E_HN
//   E_LN = sum_A (g_A . x_A - L(x_A)),  L(x_A) = D gamma s_A + delta sum_i x_Ai
//        = -sum_A D gamma eps / s_A     (the same number, computed this way)
//   E_ATT = -(1/beta) sum_h sum_C log sum_{B != C} exp(beta K_hB . Q_hC),
//           K_h = W_K[h] G, Q_h = W_Q[h] G  (W_K[h], W_Q[h]: Y x D),
//           beta = Options::beta, by default 1/sqrt(Y)
//           (Options::exclude_self = false keeps B = C in the sum)
//   E_HN = -0.5 sum_{B,mu} ReLU(xi_mu . g_B)^2      (EnergyTransformerMemory::kRelu)
//        or -(1/beta_m) sum_B log sum_mu exp(beta_m xi_mu . g_B)  (kSoftmax)
//
// With F = E_ATT + E_HN a function of G, g = grad L (L is convex for gamma > 0)
// and M_A = dg_A/dx_A = hess L (symmetric, PSD):
//   DescentDirection  dE/dg = x + dF/dG            (the ET dynamics direction)
//   Gradient          dE/dx = M (x + dF/dG)        per token
//   dE/dt along x' = -dE/dg is -(dE/dg)^T M (dE/dg) <= 0: the energy never
//   increases along x <- x - a dE/dg for small enough a. (dE/dg vanishes where
//   dE/dx does, up to the null direction 1 of M per token: LayerNorm ignores
//   shifts of a token.)
//   HessianVectorProduct  exact closed form: dM[v] (x + dF/dG) + M (v + H_F (M v)),
//   H_F the Hessian of F in G; no finite differences, no dual numbers.
//
// Parameters (ParameterSet, in this order): "W_K" and "W_Q" ((H*Y) x D: rows
// h*Y .. h*Y+Y-1 are head h; absent when num_heads = 0), "Xi" (D x M, one
// memory per column; absent when num_memories = 0), and "gamma", "delta"
// (1 x 1 each) when Options::learnable_layer_norm. ParameterVectorJacobianProduct
// gives d/dtheta sum_b <dE/dx(x_b), u_b> in closed form.
//
// Forward pass and training: EnergyTransformerMap (below) is the fixed-point
// map x <- x - a dE/dg of the ET dynamics, with exact Jacobian, parameter and
// input products, for any forward solver (Picard, Anderson, GradientFlowSolver
// via its energy()) and for implicit differentiation (ImplicitLayer). Its fixed
// points are the zeros of dE/dg, which are stationary points of E. (Solving
// grad E = 0 through EnergyRootMap / GradientStepMap also works forward, but E
// is invariant to shifting a token, so grad E = 0 does not pin a token's mean
// and the IFT system of those maps is singular.) The ET output is usually read
// out as LayerNorm(x*) (see LayerNorm()).
//
// Masked tokens (image completion): EnergyTransformerMap::SetClamp(mask, image)
// lets only the free (masked) tokens move while the others stay clamped at
// their values, which become the map's input; ClampedEnergy does the same for
// the energy (any energy). TokenMask() expands a per-token mask (N x B) to the
// coordinate mask.
//
// GradientAndValue gives E with dE/dx in one pass per sample. The plain energy
// has no per-sample data (SupportsSubsets() is true: a solver may evaluate any
// subset of the batch's columns); ClampedEnergy's clamps are per sample (false).
//
//   implicit::EnergyTransformer<double>::Options o;
//   o.num_tokens = 16; o.token_dim = 32; o.num_heads = 4; o.head_dim = 8;
//   o.num_memories = 64;                       // ReLU^2 Hopfield memory
//   implicit::EnergyTransformer<double> et(o); // random init, see Initialize()
//   implicit::Matrix<double> x = ...;          // (16*32) x B, token-major
//   implicit::Matrix<double> d(x.rows(), x.cols());
//   for (int t = 0; t < 20; ++t) { et.DescentDirection(x, d); x -= 0.1 * d; }
//
//   // Image completion: masked patches free, the rest clamped at their values;
//   // trained by implicit differentiation through the equilibrium.
//   implicit::EnergyTransformerMap<double> map(et, 0.5);  // x <- x - 0.5 dE/dg
//   map.SetClamp(implicit::TokenMask<double>(token_is_masked, 32), image);
//   implicit::ImplicitLayer<double> layer(map, anderson_solver);
//   layer.Forward(z);                                     // z <- completion
//   auto grads = layer.Backward(dLdz);                    // d loss / d theta
#pragma once

#include <implicit/core/clamped_energy.h>
#include <implicit/core/energy.h>
#include <implicit/core/map.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>
#include <implicit/layers/layer_norm.h>
#include <implicit/layers/log_sum_exp.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {

// The Hopfield-memory term of the Energy Transformer.
enum class EnergyTransformerMemory {
  kRelu,     // E_HN = -0.5 sum ReLU(xi_mu . g_B)^2
  kSoftmax,  // E_HN = -(1/beta_m) sum_B lse_mu(beta_m xi_mu . g_B)
};

struct EnergyTransformerOptions {
  // N: tokens per sample (>= 1; >= 2 when attention excludes self-pairs).
  Index num_tokens = 0;
  // D: dimension of one token (>= 2, LayerNorm needs a variance).
  Index token_dim = 0;
  // H: attention heads (0 disables E_ATT).
  Index num_heads = 1;
  // Y: key/query dimension per head (>= 1 when num_heads > 0).
  Index head_dim = 0;
  // M: Hopfield memories (0 disables E_HN).
  Index num_memories = 0;
  // Which Hopfield-memory energy E_HN uses.
  EnergyTransformerMemory memory = EnergyTransformerMemory::kRelu;
  // Attention inverse temperature beta; 0 means the default 1/sqrt(head_dim).
  double beta = 0.0;
  // Inverse temperature beta_m of the softmax memory (> 0; unused for ReLU).
  double memory_beta = 1.0;
  // LayerNorm scale gamma (> 0: makes the Lagrangian convex) and bias delta.
  double gamma = 1.0;
  double delta = 0.0;
  // LayerNorm variance floor eps (> 0).
  double eps = 1e-5;
  // Exclude B = C (a token attending to itself) from the attention sum.
  bool exclude_self = true;
  // Register "gamma" and "delta" as trainable parameters (initialised from
  // the two fields above); otherwise they are the constants above.
  bool learnable_layer_norm = false;

  bool IsValid(std::string* error) const {
    auto fail = [&](const std::string& message) {
      if (error) *error = message;
      return false;
    };
    if (num_tokens < 1) return fail("num_tokens must be >= 1, got " + std::to_string(num_tokens));
    if (token_dim < 2) return fail("token_dim must be >= 2, got " + std::to_string(token_dim));
    if (num_heads < 0) return fail("num_heads must be >= 0, got " + std::to_string(num_heads));
    if (num_heads > 0 && head_dim < 1) {
      return fail("head_dim must be >= 1 when num_heads > 0, got " + std::to_string(head_dim));
    }
    if (num_heads > 0 && exclude_self && num_tokens < 2) {
      return fail("num_tokens must be >= 2 when exclude_self is set, got " +
                  std::to_string(num_tokens));
    }
    if (num_memories < 0) {
      return fail("num_memories must be >= 0, got " + std::to_string(num_memories));
    }
    if (!(beta >= 0.0) || !std::isfinite(beta)) {
      return fail("beta must be finite and >= 0 (0: 1/sqrt(head_dim)), got " + std::to_string(beta));
    }
    if (!(memory_beta > 0.0) || !std::isfinite(memory_beta)) {
      return fail("memory_beta must be finite and > 0, got " + std::to_string(memory_beta));
    }
    if (!(gamma > 0.0) || !std::isfinite(gamma)) {
      return fail("gamma must be finite and > 0, got " + std::to_string(gamma));
    }
    if (!std::isfinite(delta)) return fail("delta must be finite, got " + std::to_string(delta));
    if (!(eps > 0.0) || !std::isfinite(eps)) {
      return fail("eps must be finite and > 0, got " + std::to_string(eps));
    }
    return true;
  }
};

template <typename Scalar>
class EnergyTransformer : public Energy<Scalar> {
 public:
  using Options = EnergyTransformerOptions;

  // Parameters start as N(0, 1/D) entries (seed 0); see Initialize().
  explicit EnergyTransformer(const Options& options) : options_(options) {
    std::string error;
    if (!options.IsValid(&error)) {
      throw std::invalid_argument("EnergyTransformer::Options: " + error);
    }
    const Index D = options.token_dim;
    if (options.num_heads > 0) {
      params_.Add("W_K", options.num_heads * options.head_dim, D);
      params_.Add("W_Q", options.num_heads * options.head_dim, D);
    }
    if (options.num_memories > 0) params_.Add("Xi", D, options.num_memories);
    if (options.learnable_layer_norm) {
      params_.Add("gamma", 1, 1);
      params_.Add("delta", 1, 1);
      params_.Block("gamma")(0, 0) = static_cast<Scalar>(options.gamma);
      params_.Block("delta")(0, 0) = static_cast<Scalar>(options.delta);
    }
    beta_ = options.beta > 0.0 ? static_cast<Scalar>(options.beta)
            : options.num_heads > 0 ? Scalar(1) / std::sqrt(static_cast<Scalar>(options.head_dim))
                                    : Scalar(1);
    Initialize(0, 1.0 / std::sqrt(static_cast<double>(D)));
  }

  // Redraws W_K, W_Q and Xi with i.i.d. N(0, stddev^2) entries (gamma and
  // delta are left alone).
  void Initialize(unsigned seed, double stddev) {
    std::mt19937 gen(seed);
    std::normal_distribution<double> dist(0.0, stddev);
    for (const char* name : {"W_K", "W_Q", "Xi"}) {
      if (!params_.Contains(name)) continue;
      auto block = params_.Block(name);
      for (Index j = 0; j < block.cols(); ++j)
        for (Index i = 0; i < block.rows(); ++i) block(i, j) = static_cast<Scalar>(dist(gen));
    }
  }

  const Options& options() const { return options_; }
  Index num_tokens() const { return options_.num_tokens; }
  Index token_dim() const { return options_.token_dim; }
  Index dimension() const override { return options_.num_tokens * options_.token_dim; }
  Scalar beta() const { return beta_; }
  Scalar gamma() const {
    return options_.learnable_layer_norm ? params_.Block("gamma")(0, 0)
                                         : static_cast<Scalar>(options_.gamma);
  }
  Scalar delta() const {
    return options_.learnable_layer_norm ? params_.Block("delta")(0, 0)
                                         : static_cast<Scalar>(options_.delta);
  }

  // The D x N token view of one sample's column (token A = column A).
  Eigen::Map<const Matrix<Scalar>> Tokens(const Scalar* column) const {
    return Eigen::Map<const Matrix<Scalar>>(column, options_.token_dim, options_.num_tokens);
  }

  // g = LayerNorm(x) token by token (same layout as x).
  void LayerNorm(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> g) const {
    internal::CheckBatch("EnergyTransformer::LayerNorm(x)", x, dimension());
    internal::CheckShape("EnergyTransformer::LayerNorm(g)", g, x.rows(), x.cols());
    Sample s;
    for (Index b = 0; b < x.cols(); ++b) {
      Normalize(x.col(b).data(), &s);
      Out(g, b) = s.g;
    }
  }

  void Value(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const override {
    internal::CheckBatch("EnergyTransformer::Value(x)", x, dimension());
    internal::CheckShape("EnergyTransformer::Value(values)", values, x.cols(), 1);
    Sample s;
    const Scalar D = static_cast<Scalar>(options_.token_dim);
    const Scalar eps = static_cast<Scalar>(options_.eps);
    for (Index b = 0; b < x.cols(); ++b) {
      Normalize(x.col(b).data(), &s);
      const Scalar e_ln = -D * gamma() * eps * s.s.cwiseInverse().sum();
      values(b) = e_ln + Forces(&s, nullptr, /*with_value=*/true);
    }
  }

  // dE/dg = x + dF/dG: the direction of the Energy Transformer dynamics.
  void DescentDirection(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out) const override {
    internal::CheckBatch("EnergyTransformer::DescentDirection(x)", x, dimension());
    internal::CheckShape("EnergyTransformer::DescentDirection(out)", out, x.rows(), x.cols());
    Sample s;
    Matrix<Scalar> r;
    for (Index b = 0; b < x.cols(); ++b) {
      Residual(x.col(b).data(), &s, &r);
      Out(out, b) = r;
    }
  }

  void Gradient(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const override {
    internal::CheckBatch("EnergyTransformer::Gradient(x)", x, dimension());
    internal::CheckShape("EnergyTransformer::Gradient(grad)", grad, x.rows(), x.cols());
    Sample s;
    Matrix<Scalar> r, mr;
    for (Index b = 0; b < x.cols(); ++b) {
      Residual(x.col(b).data(), &s, &r);
      ApplyM(s, r, gamma(), &mr);
      Out(grad, b) = mr;
    }
  }

  // dE/dx and E from one pass over each sample (the softmaxes' log-sum-exps
  // come with them).
  void GradientAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override {
    internal::CheckBatch("EnergyTransformer::GradientAndValue(x)", x, dimension());
    internal::CheckShape("EnergyTransformer::GradientAndValue(grad)", grad, x.rows(), x.cols());
    internal::CheckShape("EnergyTransformer::GradientAndValue(values)", values, x.cols(), 1);
    Sample s;
    Matrix<Scalar> r, mr;
    const Scalar D = static_cast<Scalar>(options_.token_dim);
    const Scalar eps = static_cast<Scalar>(options_.eps);
    for (Index b = 0; b < x.cols(); ++b) {
      Normalize(x.col(b).data(), &s);
      const Scalar e_ln = -D * gamma() * eps * s.s.cwiseInverse().sum();
      const Scalar f = Forces(&s, &r, /*with_value=*/true);
      r += Tokens(x.col(b).data());
      ApplyM(s, r, gamma(), &mr);
      values(b) = e_ln + f;
      Out(grad, b) = mr;
    }
  }
  // x - dE/dx (Energy's default CCCP update) and E in one pass.
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override {
    GradientAndValue(x, out, values);
    out = x - out;
  }
  // Each sample's energy depends on its own tokens only (no per-sample
  // inputs): any subset of a batch's columns may be evaluated. (ClampedEnergy,
  // which clamps per sample, may not.)
  bool SupportsSubsets() const override { return true; }

  void HessianVectorProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override {
    internal::CheckBatch("EnergyTransformer::HessianVectorProduct(x)", x, dimension());
    internal::CheckShape("EnergyTransformer::HessianVectorProduct(v)", v, x.rows(), x.cols());
    internal::CheckShape("EnergyTransformer::HessianVectorProduct(out)", out, x.rows(), x.cols());
    Sample s;
    Matrix<Scalar> r, mv, hf, term, result;
    for (Index b = 0; b < x.cols(); ++b) {
      Residual(x.col(b).data(), &s, &r);
      const auto vb = Tokens(v.col(b).data());
      ApplyM(s, vb, gamma(), &mv);          // dG = M v
      ForcesHvp(s, mv, &hf);                // H_F M v
      hf += vb;                             // dr = v + H_F M v
      ApplyM(s, hf, gamma(), &result);      // M dr
      DerivativeOfM(s, vb, r, &term);       // dM[v] r
      result += term;
      Out(out, b) = result;
    }
  }

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return &params_; }
  const ParameterSet<Scalar>& parameter_set() const { return params_; }

  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    internal::CheckBatch("EnergyTransformer::ParameterVectorJacobianProduct(x)", x, dimension());
    internal::CheckShape("EnergyTransformer::ParameterVectorJacobianProduct(u)", u, x.rows(),
                         x.cols());
    internal::CheckShape("EnergyTransformer::ParameterVectorJacobianProduct(out)", out,
                         num_parameters(), 1);
    Vector<Scalar> flat = Vector<Scalar>::Zero(num_parameters());
    Sample s;
    Matrix<Scalar> r, z, z1, hf;
    for (Index b = 0; b < x.cols(); ++b) {
      Residual(x.col(b).data(), &s, &r);
      const auto ub = Tokens(u.col(b).data());
      ApplyM(s, ub, gamma(), &z);  // <M r, u> = <r, M u>: r's parameters see z = M u
      ForcesParameterVjp(s, z, &flat);
      if (options_.learnable_layer_norm) {
        // d/dgamma <M r, u> = <M|_{gamma=1} r, u> + <H_F dG/dgamma, M u>, dG/dgamma = xhat.
        ApplyM(s, ub, Scalar(1), &z1);
        ForcesHvp(s, s.xhat, &hf);
        params_.BlockOf(flat, "gamma")(0, 0) += (r.array() * z1.array()).sum() +
                                                 (hf.array() * z.array()).sum();
        // d/ddelta: dG/ddelta = 1 (every entry).
        ForcesHvp(s, Matrix<Scalar>::Ones(s.g.rows(), s.g.cols()), &hf);
        params_.BlockOf(flat, "delta")(0, 0) += (hf.array() * z.array()).sum();
      }
    }
    out = flat;
  }

  // ---- The dynamics' residual r(x) = dE/dg = x + dF/dG(LayerNorm(x)) ------
  // Its zeros are the fixed points of the ET dynamics x <- x - a r(x), and,
  // unlike grad E = 0 (which leaves each token's mean free: E is invariant to
  // shifting a token), they are isolated, so implicit differentiation uses r
  // (EnergyTransformerMap below). dr/dx = I + H_F M is not symmetric.

  // out = (dr/dx) v = v + H_F (M v).
  void DescentJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                              MatrixRef<Scalar> out) const {
    CheckProduct("DescentJacobianProduct", x, v, out);
    Sample s;
    Matrix<Scalar> mv, hf;
    for (Index b = 0; b < x.cols(); ++b) {
      Normalize(x.col(b).data(), &s);
      Forces(&s, nullptr);
      const auto vb = Tokens(v.col(b).data());
      ApplyM(s, vb, gamma(), &mv);
      ForcesHvp(s, mv, &hf);
      Out(out, b) = hf + vb;
    }
  }
  // out = (dr/dx)^T u = u + M (H_F u).
  void DescentJacobianTransposeProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                       MatrixRef<Scalar> out) const {
    CheckProduct("DescentJacobianTransposeProduct", x, u, out);
    Sample s;
    Matrix<Scalar> hf, mh;
    for (Index b = 0; b < x.cols(); ++b) {
      Normalize(x.col(b).data(), &s);
      Forces(&s, nullptr);
      const auto ub = Tokens(u.col(b).data());
      ForcesHvp(s, ub, &hf);
      ApplyM(s, hf, gamma(), &mh);
      Out(out, b) = mh + ub;
    }
  }
  // out = d/dtheta sum_b <r(x_b; theta), u_b>   (num_parameters() x 1).
  void DescentParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                             VectorRef<Scalar> out) const {
    internal::CheckBatch("EnergyTransformer::DescentParameterVectorJacobianProduct(x)", x,
                         dimension());
    internal::CheckShape("EnergyTransformer::DescentParameterVectorJacobianProduct(u)", u,
                         x.rows(), x.cols());
    internal::CheckShape("EnergyTransformer::DescentParameterVectorJacobianProduct(out)", out,
                         num_parameters(), 1);
    Vector<Scalar> flat = Vector<Scalar>::Zero(num_parameters());
    Sample s;
    Matrix<Scalar> ub, hf;
    for (Index b = 0; b < x.cols(); ++b) {
      Normalize(x.col(b).data(), &s);
      Forces(&s, nullptr);
      ub = Tokens(u.col(b).data());
      ForcesParameterVjp(s, ub, &flat);
      if (options_.learnable_layer_norm) {
        // dG/dgamma = xhat, dG/ddelta = 1; H_F symmetric.
        ForcesHvp(s, ub, &hf);
        params_.BlockOf(flat, "gamma")(0, 0) += (hf.array() * s.xhat.array()).sum();
        params_.BlockOf(flat, "delta")(0, 0) += hf.sum();
      }
    }
    out = flat;
  }

 private:
  void CheckProduct(const char* function, ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                    MatrixRef<Scalar> out) const {
    const std::string name = std::string("EnergyTransformer::") + function;
    internal::CheckBatch((name + "(x)").c_str(), x, dimension());
    internal::CheckShape((name + "(v)").c_str(), v, x.rows(), x.cols());
    internal::CheckShape((name + "(out)").c_str(), out, x.rows(), x.cols());
  }

  // Everything one sample's products need.
  struct Sample {
    Matrix<Scalar> xhat;  // D x N, (x - mean) / s
    Vector<Scalar> s;     // N, sqrt(var + eps)
    Matrix<Scalar> g;     // D x N, gamma xhat + delta
    // All heads stacked, rows h*Y .. h*Y+Y-1 for head h ((H*Y) x N each):
    // K = W_K G, Q = W_Q G, and per head QPt = Q_h P_h^T, KP = K_h P_h.
    Matrix<Scalar> K, Q, QPt, KP;
    std::vector<Matrix<Scalar>> P;        // per head N x N (P(:,C): softmax over B)
    Matrix<Scalar> S;                     // memory scores Xi^T G (M x N)
    Matrix<Scalar> R;                     // ReLU(S), or softmax(beta_m S) per column
  };

  Eigen::Map<Matrix<Scalar>> Out(MatrixRef<Scalar> m, Index b) const {
    return Eigen::Map<Matrix<Scalar>>(m.col(b).data(), options_.token_dim, options_.num_tokens);
  }

  // The token LayerNorm with the current gamma and delta.
  ColumnLayerNorm<Scalar> TokenNorm() const {
    return ColumnLayerNorm<Scalar>{gamma(), delta(), static_cast<Scalar>(options_.eps)};
  }

  void Normalize(const Scalar* column, Sample* s) const {
    s->xhat.resize(options_.token_dim, options_.num_tokens);
    s->s.resize(options_.num_tokens);
    const ColumnLayerNorm<Scalar> ln = TokenNorm();
    ln.Normalize(Tokens(column), s->xhat, s->s);
    s->g = (ln.gamma * s->xhat).array() + ln.delta;
  }

  // out = M r per token, M = (gamma/s)(I - 1 1^T / D - xhat xhat^T / D): the
  // LayerNorm Jacobian (with gain gamma_value).
  template <typename Derived>
  void ApplyM(const Sample& s, const Eigen::MatrixBase<Derived>& r, Scalar gamma_value,
              Matrix<Scalar>* out) const {
    out->resize(r.rows(), r.cols());
    ColumnLayerNorm<Scalar>::JacobianProductAt(s.xhat, s.s, gamma_value, r, *out);
  }

  // out = (d/dt M(x + t v))|_{t=0} r per token: the third derivative of L.
  template <typename Derived>
  void DerivativeOfM(const Sample& s, const Eigen::MatrixBase<Derived>& v, const Matrix<Scalar>& r,
                     Matrix<Scalar>* out) const {
    out->resize(r.rows(), r.cols());
    ColumnLayerNorm<Scalar>::JacobianDerivativeProductAt(s.xhat, s.s, gamma(), v, r, *out);
  }

  // r = x + dF/dG (and the caches for the second-order products).
  void Residual(const Scalar* column, Sample* s, Matrix<Scalar>* r) const {
    Normalize(column, s);
    Forces(s, r);
    *r += Tokens(column);
  }

  // Fills the caches, and dF/dG when grad != nullptr; returns F(G) = E_ATT +
  // E_HN when with_value (otherwise 0: the log-sum-exps cost as much as the
  // softmaxes and only Value() needs them).
  Scalar Forces(Sample* s, Matrix<Scalar>* grad, bool with_value = false) const {
    const Index N = options_.num_tokens, H = options_.num_heads, M = options_.num_memories,
                Y = options_.head_dim;
    const Matrix<Scalar>& G = s->g;
    Scalar value(0);
    if (grad) grad->setZero(G.rows(), G.cols());
    if (H > 0) {
      // One product per projection for all heads; the N x N attention per head.
      const auto wk = params_.Block("W_K"), wq = params_.Block("W_Q");
      s->K.noalias() = wk * G;
      s->Q.noalias() = wq * G;
      s->QPt.resize(H * Y, N);
      s->KP.resize(H * Y, N);
      s->P.resize(H);
      Vector<Scalar> lse(N);
      Matrix<Scalar> scores(N, N);
      for (Index h = 0; h < H; ++h) {
        const auto K = s->K.middleRows(h * Y, Y), Q = s->Q.middleRows(h * Y, Y);
        scores.noalias() = beta_ * (K.transpose() * Q);  // (B, C)
        if (options_.exclude_self) {
          scores.diagonal().setConstant(-std::numeric_limits<Scalar>::infinity());
        }
        s->P[h].resize(N, N);
        ColumnSoftmax<Scalar>(scores, s->P[h], &lse);
        if (with_value) value -= lse.sum() / beta_;
        s->QPt.middleRows(h * Y, Y).noalias() = Q * s->P[h].transpose();
        s->KP.middleRows(h * Y, Y).noalias() = K * s->P[h];
      }
      // dF/dG = -sum_h (W_K[h]^T Q_h P_h^T + W_Q[h]^T K_h P_h).
      if (grad) {
        grad->noalias() -= wk.transpose() * s->QPt;
        grad->noalias() -= wq.transpose() * s->KP;
      }
    }
    if (M > 0) {
      const auto xi = params_.Block("Xi");
      s->S.noalias() = xi.transpose() * G;
      if (options_.memory == EnergyTransformerMemory::kRelu) {
        s->R = s->S.cwiseMax(Scalar(0));
        if (with_value) value -= Scalar(0.5) * s->R.squaredNorm();
      } else {
        const Scalar bm = static_cast<Scalar>(options_.memory_beta);
        Matrix<Scalar> scaled = bm * s->S;
        s->R.resize(M, N);
        Vector<Scalar> memory_lse(N);
        ColumnSoftmax<Scalar>(scaled, s->R, &memory_lse);
        if (with_value) value -= memory_lse.sum() / bm;
      }
      if (grad) grad->noalias() -= xi * s->R;
    }
    return value;
  }

  // out = H_F dG (the G-Hessian of F along dG), from the caches of Forces().
  template <typename Derived>
  void ForcesHvp(const Sample& s, const Eigen::MatrixBase<Derived>& dG, Matrix<Scalar>* out) const {
    const Index M = options_.num_memories;
    out->setZero(dG.rows(), dG.cols());
    if (options_.num_heads > 0) {
      Matrix<Scalar> k_side, q_side;
      AttentionDirection(s, dG, &k_side, &q_side);
      out->noalias() -= params_.Block("W_K").transpose() * k_side;
      out->noalias() -= params_.Block("W_Q").transpose() * q_side;
    }
    if (M > 0) {
      const auto xi = params_.Block("Xi");
      Matrix<Scalar> dR;
      MemoryDirection(s, xi.transpose() * dG, &dR);
      out->noalias() -= xi * dR;
    }
  }

  // The derivatives of QPt and KP (see Sample) along dG, all heads stacked:
  //   k_side = d(Q_h P_h^T) = dQ_h P_h^T + Q_h dP_h^T,  q_side = d(K_h P_h) = dK_h P_h + K_h dP_h
  // with dK = W_K dG, dQ = W_Q dG, dP_h = beta J_softmax(P_h) (dK_h^T Q_h + K_h^T dQ_h).
  template <typename Derived>
  void AttentionDirection(const Sample& s, const Eigen::MatrixBase<Derived>& dG,
                          Matrix<Scalar>* k_side, Matrix<Scalar>* q_side) const {
    const Index H = options_.num_heads, Y = options_.head_dim, N = dG.cols();
    const Matrix<Scalar> dK = params_.Block("W_K") * dG, dQ = params_.Block("W_Q") * dG;
    k_side->resize(H * Y, N);
    q_side->resize(H * Y, N);
    Matrix<Scalar> dA(N, N), dP(N, N);
    for (Index h = 0; h < H; ++h) {
      const auto K = s.K.middleRows(h * Y, Y), Q = s.Q.middleRows(h * Y, Y);
      const auto dKh = dK.middleRows(h * Y, Y), dQh = dQ.middleRows(h * Y, Y);
      dA.noalias() = dKh.transpose() * Q;
      dA.noalias() += K.transpose() * dQh;
      internal::SoftmaxJacobianProduct<Scalar>(s.P[h], dA, dP);
      dP *= beta_;
      auto ks = k_side->middleRows(h * Y, Y);
      auto qs = q_side->middleRows(h * Y, Y);
      ks.noalias() = dQh * s.P[h].transpose();
      ks.noalias() += Q * dP.transpose();
      qs.noalias() = dKh * s.P[h];
      qs.noalias() += K * dP;
    }
  }

  // dR = d(ReLU or softmax of the memory scores) along dS.
  void MemoryDirection(const Sample& s, const Matrix<Scalar>& dS, Matrix<Scalar>* dR) const {
    if (options_.memory == EnergyTransformerMemory::kRelu) {
      *dR = (s.S.array() > Scalar(0)).select(dS.array(), Scalar(0)).matrix();
    } else {
      dR->resize(dS.rows(), dS.cols());
      internal::SoftmaxJacobianProduct<Scalar>(s.R, dS, *dR);
      *dR *= static_cast<Scalar>(options_.memory_beta);
    }
  }

  // flat += d/dtheta <dF/dG(G; theta), z> for W_K, W_Q, Xi.
  void ForcesParameterVjp(const Sample& s, const Matrix<Scalar>& z, Vector<Scalar>* flat) const {
    const Index M = options_.num_memories;
    const Matrix<Scalar>& G = s.g;
    if (options_.num_heads > 0) {
      // dF/dW_K[h] = -Q_h P_h^T G^T, dF/dW_Q[h] = -K_h P_h G^T; differentiate along G -> z.
      Matrix<Scalar> k_side, q_side;
      AttentionDirection(s, z, &k_side, &q_side);
      auto gk = params_.BlockOf(*flat, "W_K");
      auto gq = params_.BlockOf(*flat, "W_Q");
      gk.noalias() -= k_side * G.transpose();
      gk.noalias() -= s.QPt * z.transpose();
      gq.noalias() -= q_side * G.transpose();
      gq.noalias() -= s.KP * z.transpose();
    }
    if (M > 0) {
      // dF/dXi = -G R^T; differentiate along G -> z.
      const auto xi = params_.Block("Xi");
      Matrix<Scalar> dR;
      MemoryDirection(s, xi.transpose() * z, &dR);
      auto gxi = params_.BlockOf(*flat, "Xi");
      gxi.noalias() -= z * s.R.transpose();
      gxi.noalias() -= G * dR.transpose();
    }
  }

  Options options_;
  ParameterSet<Scalar> params_;
  Scalar beta_;
};

// Expands a per-token mask (N x B, 1 = free, 0 = clamped) to the coordinate
// mask (N*D x B) of the token-major layout above.
template <typename Scalar>
Matrix<Scalar> TokenMask(const Matrix<Scalar>& token_mask, Index token_dim) {
  if (token_dim < 1) {
    throw std::invalid_argument("TokenMask: token_dim must be >= 1, got " + std::to_string(token_dim));
  }
  Matrix<Scalar> mask(token_mask.rows() * token_dim, token_mask.cols());
  for (Index b = 0; b < token_mask.cols(); ++b)
    for (Index A = 0; A < token_mask.rows(); ++A)
      mask.col(b).segment(A * token_dim, token_dim).setConstant(token_mask(A, b));
  return mask;
}

// The Energy Transformer dynamics as a fixed-point map, for solvers and for
// implicit differentiation:
//
//   f(x) = x - a r(x),   r = dE/dg = x + dF/dG   (a = step > 0; a = 1 gives
//                                                 f(x) = -dF/dG(LayerNorm(x)))
//
// Its fixed points are the zeros of r, where the dynamics stop. These are
// isolated, whereas grad E = 0 is not (E is invariant to shifting a token), so
// the IFT backward pass (I - J)^T u = g is well posed here but singular for
// GradientStepMap / EnergyRootMap of the ET energy. J = I - a (I + H_F M) is
// not symmetric (HasSymmetricJacobian() is false: GMRES, not MINRES).
//
// Masked tokens: SetClamp(free_mask, values) (n x B, 1 = free) keeps the
// clamped coordinates at `values` (the map's input, input_dimension() = n):
//   f(x) = m (.) (y - a r(y)) + (1 - m) (.) c,   y = m (.) x + (1 - m) (.) c,
// and InputVectorJacobianProduct gives the gradient with respect to c.
// energy() is the ET energy (or, with a clamp, the matching ClampedEnergy), so
// GradientFlowSolver follows exactly these dynamics.
//
//   implicit::EnergyTransformerMap<double> map(et, 0.5);
//   map.SetClamp(implicit::TokenMask<double>(masked, D), image);   // optional
//   implicit::ImplicitLayer<double> layer(map, anderson);
//   layer.Forward(z);  auto grads = layer.Backward(dLdz);
//
// Holds a reference: the EnergyTransformer must outlive it.
template <typename Scalar>
class EnergyTransformerMap : public FixedPointMap<Scalar> {
 public:
  explicit EnergyTransformerMap(EnergyTransformer<Scalar>& et, Scalar step = Scalar(1))
      : et_(et), clamped_(et), step_(step) {
    if (!(step > Scalar(0)) || !std::isfinite(static_cast<double>(step))) {
      throw std::invalid_argument("EnergyTransformerMap: step must be finite and > 0, got " +
                                  std::to_string(static_cast<double>(step)));
    }
  }

  // Clamp the coordinates where free_mask is 0 at `values` (both n x B).
  void SetClamp(Matrix<Scalar> free_mask, Matrix<Scalar> values) {
    clamped_.SetClamp(std::move(free_mask), std::move(values));
    has_clamp_ = true;
  }
  // Replaces the clamped values (same shape as in SetClamp).
  void SetInput(Matrix<Scalar> values) {
    if (!has_clamp_) {
      throw std::invalid_argument("EnergyTransformerMap::SetInput: call SetClamp first");
    }
    clamped_.SetInput(std::move(values));
  }
  void ClearClamp() { has_clamp_ = false; }
  bool has_clamp() const { return has_clamp_; }
  Scalar step() const { return step_; }

  Index dimension() const override { return et_.dimension(); }
  void Evaluate(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out) const override {
    internal::CheckShape("EnergyTransformerMap::Evaluate(out)", out, x.rows(), x.cols());
    if (!has_clamp_) {
      et_.DescentDirection(x, out);
      out = x - step_ * out;
      return;
    }
    const Matrix<Scalar> y = clamped_.Merge(x);
    et_.DescentDirection(y, out);
    out = y - step_ * out;
    Mask(out);
    out += ((Scalar(1) - clamped_.free_mask().array()) * clamped_.input().array()).matrix();
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    Product(x, v, out, false);
  }
  void VectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                             MatrixRef<Scalar> out) const override {
    Product(x, u, out, true);
  }
  Index num_parameters() const override { return et_.num_parameters(); }
  ParameterSet<Scalar>* parameters() override { return et_.parameters(); }
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    if (!has_clamp_) {
      et_.DescentParameterVectorJacobianProduct(x, u, out);
    } else {
      Matrix<Scalar> mu = u;
      Mask(mu);
      et_.DescentParameterVectorJacobianProduct(clamped_.Merge(x), mu, out);
    }
    out *= -step_;
  }
  Index input_dimension() const override { return has_clamp_ ? et_.dimension() : 0; }
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override {
    if (!has_clamp_) {
      throw std::logic_error("EnergyTransformerMap: no input without a clamp (SetClamp)");
    }
    internal::CheckShape("EnergyTransformerMap::InputVectorJacobianProduct(out)", out, x.rows(),
                         x.cols());
    // d f / d c = m (I - a dr/dy) (1 - m) + (1 - m): transpose applied to u.
    Matrix<Scalar> mu = u;
    Mask(mu);
    const Matrix<Scalar> y = clamped_.Merge(x);
    et_.DescentJacobianTransposeProduct(y, mu, out);
    out = mu - step_ * out;
    out = ((Scalar(1) - clamped_.free_mask().array()) * (out + u).array()).matrix();
  }
  const Energy<Scalar>* energy() const override {
    return has_clamp_ ? static_cast<const Energy<Scalar>*>(&clamped_)
                      : static_cast<const Energy<Scalar>*>(&et_);
  }

 private:
  void Mask(MatrixRef<Scalar> m) const { m.array() *= clamped_.free_mask().array(); }
  // J v = m (.) (w - a dr/dy w), w = m (.) v   (transpose: dr/dy^T); no clamp: m = 1.
  void Product(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out,
               bool transpose) const {
    internal::CheckShape("EnergyTransformerMap: direction", v, x.rows(), x.cols());
    internal::CheckShape("EnergyTransformerMap: output", out, x.rows(), x.cols());
    Matrix<Scalar> w = v;
    Matrix<Scalar> y;
    if (has_clamp_) {
      Mask(w);
      y = clamped_.Merge(x);
    } else {
      y = x;
    }
    if (transpose) {
      et_.DescentJacobianTransposeProduct(y, w, out);
    } else {
      et_.DescentJacobianProduct(y, w, out);
    }
    out = w - step_ * out;
    if (has_clamp_) Mask(out);
  }

  EnergyTransformer<Scalar>& et_;
  ClampedEnergy<Scalar> clamped_;
  Scalar step_;
  bool has_clamp_ = false;
};

IMPLICIT_EXTERN_TEMPLATE_CLASS(EnergyTransformer);
IMPLICIT_EXTERN_TEMPLATE_CLASS(EnergyTransformerMap);

}  // namespace implicit
