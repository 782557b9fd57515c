// The built-in equilibrium problems of implicit-compare (and the retrieval
// problems of implicit-hopfield): each owns its energy or map and a batch of
// initial states.
//
//   hopfield-digits  modern Hopfield retrieval of the first N digits (x/8 - 1)
//                    from queries with pixels 32..63 zeroed; CCCP map
//                    xi <- X softmax(beta X^T xi)
//   sparse-hopfield  the same with the entmax update xi <- X entmax_alpha(beta X^T xi)
//   deq-tanh         z = tanh(W z + U x + b), |W|_2 = spectral_norm, x = digits
//   rbm              an RBM-effective energy on the digits
//   et-digits        an Energy Transformer block on digit patches
#pragma once


#include "common/app_util.h"

#include <implicit/core/digits.h>
#include <implicit/core/energy.h>
#include <implicit/core/energy_maps.h>
#include <implicit/core/map.h>
#include <implicit/layers/energy_transformer.h>
#include <implicit/layers/hopfield.h>
#include <implicit/layers/rbm.h>
#include <implicit/layers/regularized_attention.h>

#include <Eigen/Dense>

#include <memory>
#include <random>
#include <string>
#include <vector>

namespace implicit_apps {

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;

// Settings the problems read (from the command line).
struct ProblemSettings {
  int patterns = 100;           // stored patterns / samples taken from the digits
  double beta = 1.0;            // inverse temperature of the Hopfield-type problems
  double alpha = 1.5;           // entmax order of sparse-hopfield
  double spectral_norm = 0.9;   // |W|_2 of deq-tanh
  unsigned seed = 1;            // random weights
  double et_step = 0.5;
  double rbm_p = 0.1;           // Bernoulli prior of rbm's hidden units, in (0, 1)
  double rbm_scale = 0.03;      // rbm couplings W = rbm_scale * digits         // gradient step a of et-digits' map z - a grad E
};

class Problem {
 public:
  virtual ~Problem() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  virtual const implicit::FixedPointMap<double>& map() const = 0;
  // The starting batch (n x B); solvers get a copy.
  const Matrix<double>& initial() const { return initial_; }

 protected:
  Matrix<double> initial_;
};

// The stored patterns (first N digits, x/8 - 1) and queries (pixels 32..63 = 0).
struct DigitPatterns {
  Matrix<double> patterns;
  Matrix<double> queries;
};
inline DigitPatterns MakeDigitPatterns(const implicit::DigitsDataset& digits, int n) {
  DigitPatterns d;
  d.patterns = digits.Scaled().leftCols(n);
  d.queries = d.patterns;
  d.queries.bottomRows(32).setZero();
  return d;
}

inline Matrix<double> RandomGaussian(Index rows, Index cols, double scale, std::mt19937& gen) {
  std::normal_distribution<double> dist(0.0, scale);
  Matrix<double> m(rows, cols);
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) m(i, j) = dist(gen);
  return m;
}

// ---- hopfield-digits ----------------------------------------------------------
class HopfieldDigitsProblem : public Problem {
 public:
  HopfieldDigitsProblem(const implicit::DigitsDataset& digits, const ProblemSettings& s)
      : data_(MakeDigitPatterns(digits, s.patterns)), energy_(data_.patterns, Options(s.beta)),
        map_(energy_) {
    initial_ = data_.queries;
    beta_ = s.beta;
  }
  std::string name() const override { return "hopfield-digits"; }
  std::string description() const override {
    return "modern Hopfield retrieval, " + std::to_string(data_.patterns.cols()) +
           " digits stored, bottom half of each query zeroed, beta " + Fmt(beta_);
  }
  const implicit::FixedPointMap<double>& map() const override { return map_; }
  const implicit::ModernHopfieldEnergy<double>& energy() const { return energy_; }
  const Matrix<double>& patterns() const { return data_.patterns; }

 private:
  static implicit::ModernHopfieldEnergy<double>::Options Options(double beta) {
    implicit::ModernHopfieldEnergy<double>::Options o;
    o.beta = beta;
    o.learn_beta = false;
    return o;
  }
  DigitPatterns data_;
  implicit::ModernHopfieldEnergy<double> energy_;
  implicit::CccpMap<double> map_;
  double beta_ = 1;
};

// ---- sparse-hopfield ----------------------------------------------------------
class SparseHopfieldProblem : public Problem {
 public:
  SparseHopfieldProblem(const implicit::DigitsDataset& digits, const ProblemSettings& s)
      : data_(MakeDigitPatterns(digits, s.patterns)), energy_(data_.patterns, Options(s)),
        map_(energy_) {
    initial_ = data_.queries;
    beta_ = s.beta;
    alpha_ = s.alpha;
  }
  std::string name() const override { return "sparse-hopfield"; }
  std::string description() const override {
    return "Hopfield-Fenchel-Young retrieval xi <- X entmax_" + Fmt(alpha_) + "(beta X^T xi), " +
           std::to_string(data_.patterns.cols()) + " digits, beta " + Fmt(beta_);
  }
  const implicit::FixedPointMap<double>& map() const override { return map_; }

 private:
  static implicit::SparseHopfieldEnergy<double>::Options Options(const ProblemSettings& s) {
    implicit::SparseHopfieldEnergy<double>::Options o;
    o.alpha = s.alpha;
    o.beta = s.beta;
    return o;
  }
  DigitPatterns data_;
  implicit::SparseHopfieldEnergy<double> energy_;
  implicit::CccpMap<double> map_;
  double beta_ = 1, alpha_ = 1.5;
};

// ---- rbm ------------------------------------------------------------------------
// An RBM with Gaussian visible units and Bernoulli(p) hidden units, one hidden
// unit per stored digit with couplings w_mu = c x_mu, integrated out:
//   E(v) = 0.5 |v|^2 - sum_mu log(1 - p + p exp(w_mu . v)),
// CCCP map v <- W sigmoid(W^T v + logit p); queries: bottom half zeroed.
class RbmProblem : public Problem {
 public:
  RbmProblem(const implicit::DigitsDataset& digits, const ProblemSettings& s)
      : data_(MakeDigitPatterns(digits, s.patterns)),
        energy_(Weights(data_.patterns, s), std::make_shared<implicit::BernoulliPrior<double>>(s.rbm_p),
                Options()),
        map_(energy_) {
    initial_ = data_.queries;
    p_ = s.rbm_p;
    scale_ = s.rbm_scale;
  }
  std::string name() const override { return "rbm"; }
  std::string description() const override {
    return "RBM-effective energy, Gaussian visible, " + std::to_string(data_.patterns.cols()) +
           " Bernoulli(" + Fmt(p_) + ") hidden units with couplings " + Fmt(scale_) +
           " x digit; CCCP map v <- W sigmoid(W^T v + logit p)";
  }
  const implicit::FixedPointMap<double>& map() const override { return map_; }

 private:
  static Matrix<double> Weights(const Matrix<double>& X, const ProblemSettings& s) {
    return X * s.rbm_scale;
  }
  static implicit::RbmEnergy<double>::Options Options() {
    implicit::RbmEnergy<double>::Options o;
    o.learn_weights = false;
    return o;
  }
  DigitPatterns data_;
  implicit::RbmEnergy<double> energy_;
  implicit::CccpMap<double> map_;
  double p_ = 0.5, scale_ = 1;
};

// ---- deq-tanh -----------------------------------------------------------------
// z = tanh(W z + U x + b): an explicit map (no energy), contraction when
// |W|_2 < 1 since |tanh'| <= 1.
class TanhDeqMap : public implicit::FixedPointMap<double> {
 public:
  TanhDeqMap(Matrix<double> W, Matrix<double> U, Vector<double> b, Matrix<double> x)
      : W_(std::move(W)), b_(std::move(b)) {
    injection_ = U * x;
    injection_.colwise() += b_;
  }
  Index dimension() const override { return W_.rows(); }
  void Evaluate(implicit::ConstMatrixRef<double> z, implicit::MatrixRef<double> out) const override {
    out.noalias() = W_ * z;
    out += injection_;
    out = out.array().tanh().matrix();
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(implicit::ConstMatrixRef<double> z, implicit::ConstMatrixRef<double> v,
                             implicit::MatrixRef<double> out) const override {
    Matrix<double> f(z.rows(), z.cols());
    Evaluate(z, f);
    out.noalias() = W_ * v;
    out.array() *= 1.0 - f.array().square();
  }
  void VectorJacobianProduct(implicit::ConstMatrixRef<double> z, implicit::ConstMatrixRef<double> u,
                             implicit::MatrixRef<double> out) const override {
    Matrix<double> f(z.rows(), z.cols());
    Evaluate(z, f);
    Matrix<double> du = ((1.0 - f.array().square()) * u.array()).matrix();
    out.noalias() = W_.transpose() * du;
  }

 private:
  Matrix<double> W_;
  Vector<double> b_;
  Matrix<double> injection_;
};

class DeqTanhProblem : public Problem {
 public:
  DeqTanhProblem(const implicit::DigitsDataset& digits, const ProblemSettings& s)
      : map_(Build(digits, s)) {
    initial_ = Matrix<double>::Zero(kHidden, s.patterns);
    norm_ = s.spectral_norm;
  }
  std::string name() const override { return "deq-tanh"; }
  std::string description() const override {
    return "z = tanh(W z + U x + b), " + std::to_string(kHidden) + " units, |W|_2 = " + Fmt(norm_) +
           ", x = " + std::to_string(initial_.cols()) + " digits";
  }
  const implicit::FixedPointMap<double>& map() const override { return *map_; }

 private:
  static constexpr Index kHidden = 128;
  static std::unique_ptr<TanhDeqMap> Build(const implicit::DigitsDataset& digits,
                                           const ProblemSettings& s) {
    std::mt19937 gen(s.seed);
    Matrix<double> W = RandomGaussian(kHidden, kHidden, 1.0, gen);
    Eigen::JacobiSVD<Matrix<double>> svd(W);
    W *= s.spectral_norm / svd.singularValues()(0);
    Matrix<double> U = RandomGaussian(kHidden, 64, 1.0 / 8.0, gen);
    Vector<double> b = RandomGaussian(kHidden, 1, 0.1, gen);
    Matrix<double> x = digits.Scaled().leftCols(s.patterns);
    return std::make_unique<TanhDeqMap>(std::move(W), std::move(U), std::move(b), std::move(x));
  }
  std::unique_ptr<TanhDeqMap> map_;
  double norm_ = 0.9;
};

// ---- et-digits ------------------------------------------------------------------
// 8x8 digits cut into 2x2 patches: 16 tokens of 4 pixels (x/8 - 1), token A =
// patch A, row-major over the 4x4 grid of patches; patch A covers pixels
// (2 (A / 4) + {0,1}, 2 (A % 4) + {0,1}).
inline Matrix<double> DigitPatches(const Matrix<double>& scaled) {
  Matrix<double> p(64, scaled.cols());
  for (Index b = 0; b < scaled.cols(); ++b)
    for (int A = 0; A < 16; ++A)
      for (int k = 0; k < 4; ++k) {
        const int r = 2 * (A / 4) + k / 2, c = 2 * (A % 4) + k % 2;
        p(4 * A + k, b) = scaled(8 * r + c, b);
      }
  return p;
}
// The inverse of DigitPatches.
inline Matrix<double> PatchesToDigits(const Matrix<double>& patches) {
  Matrix<double> x(64, patches.cols());
  for (Index b = 0; b < patches.cols(); ++b)
    for (int A = 0; A < 16; ++A)
      for (int k = 0; k < 4; ++k) {
        const int r = 2 * (A / 4) + k / 2, c = 2 * (A % 4) + k % 2;
        x(8 * r + c, b) = patches(4 * A + k, b);
      }
  return x;
}

// The Energy Transformer's own dynamics as a fixed-point map:
//   f(z) = z - a D(z),  D = Energy::DescentDirection (dE/dg for the ET),
// whose fixed points are the stationary points of E. D has no exposed
// Jacobian, so the map offers no Jacobian products; energy() returns the
// energy for the minimisers.
class DescentStepMap : public implicit::FixedPointMap<double> {
 public:
  DescentStepMap(const implicit::Energy<double>& energy, double step) : energy_(energy), step_(step) {
    if (!(step > 0.0) || !std::isfinite(step))
      throw std::invalid_argument("DescentStepMap: step must be finite and > 0, got " + Fmt(step));
  }
  Index dimension() const override { return energy_.dimension(); }
  void Evaluate(implicit::ConstMatrixRef<double> z, implicit::MatrixRef<double> out) const override {
    energy_.DescentDirection(z, out);
    out = z - step_ * out;
  }
  const implicit::Energy<double>* energy() const override { return &energy_; }

 private:
  const implicit::Energy<double>& energy_;
  double step_;
};

// An Energy Transformer block with random fixed weights completing digits:
// tokens = W_e patch + position embedding (D = 16), the bottom 8 patches are
// free (initialised to their position embedding), the top 8 clamped; the map
// is the ET dynamics z - a dE/dg of the clamped energy (DescentStepMap).
class EtDigitsProblem : public Problem {
 public:
  static constexpr Index kTokens = 16, kDim = 16;
  EtDigitsProblem(const implicit::DigitsDataset& digits, const ProblemSettings& s)
      : et_(EtOptions()), clamped_(et_) {
    et_.Initialize(s.seed, 0.5 / std::sqrt(static_cast<double>(kDim)));
    std::mt19937 gen(s.seed + 101);
    const Matrix<double> embed = RandomGaussian(kDim, 4, 0.5, gen);
    const Matrix<double> position = RandomGaussian(kDim, kTokens, 1.0, gen);
    const Matrix<double> patches = DigitPatches(digits.Scaled().leftCols(s.patterns));
    Matrix<double> tokens(kTokens * kDim, s.patterns), free_tokens(kTokens, s.patterns);
    for (Index b = 0; b < s.patterns; ++b)
      for (Index A = 0; A < kTokens; ++A) {
        const bool hidden = A >= kTokens / 2;
        free_tokens(A, b) = hidden ? 1.0 : 0.0;
        tokens.col(b).segment(A * kDim, kDim) =
            position.col(A) + (hidden ? Vector<double>::Zero(kDim) : Vector<double>(embed * patches.col(b).segment(4 * A, 4)));
      }
    clamped_.SetClamp(implicit::TokenMask<double>(free_tokens, kDim), tokens);
    map_ = std::make_unique<DescentStepMap>(clamped_, s.et_step);
    initial_ = tokens;
    step_ = s.et_step;
  }
  std::string name() const override { return "et-digits"; }
  std::string description() const override {
    return "Energy Transformer (16 tokens x 16 dims, 2 heads, 32 softmax memories, random weights) completing "
           "the bottom half of " + std::to_string(initial_.cols()) + " digits; map z - " + Fmt(step_) +
           " dE/dg";
  }
  const implicit::FixedPointMap<double>& map() const override { return *map_; }

 private:
  static implicit::EnergyTransformer<double>::Options EtOptions() {
    implicit::EnergyTransformer<double>::Options o;
    o.num_tokens = kTokens;
    o.token_dim = kDim;
    o.num_heads = 2;
    o.head_dim = 8;
    o.num_memories = 32;
    o.memory = implicit::EnergyTransformerMemory::kSoftmax;  // smooth (ReLU^2 makes limit cycles likelier)
    return o;
  }
  implicit::EnergyTransformer<double> et_;
  implicit::ClampedEnergy<double> clamped_;
  std::unique_ptr<DescentStepMap> map_;
  double step_ = 0.5;
};

}  // namespace implicit_apps
