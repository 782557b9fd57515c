// The built-in equilibrium problems of implicit-compare and implicit-bench (and
// the retrieval problems of implicit-hopfield): each owns its energy or map, a
// batch of initial states and a description of its floor, the dense products
// one full-batch evaluation of its map must do (timed by MeasureFloor).
//
//   hopfield-digits  modern Hopfield retrieval of the first N digits (x/8 - 1)
//                    from queries with pixels 32..63 zeroed; CCCP map
//                    xi <- X softmax(beta X^T xi)
//   sparse-hopfield  the same with the entmax update xi <- X entmax_alpha(beta X^T xi)
//   deq-tanh         z = tanh(W z + U x + b), |W|_2 = spectral_norm, x = digits
//   rbm              an RBM-effective energy on the digits
//   et-digits        an Energy Transformer block on digit patches
//
// Every problem is a template on the scalar (ProblemT<double>, ProblemT<float>);
// the float build casts the same data and weights (drawn in double) to float.
// Problem, HopfieldDigitsProblem, ... name the double builds.
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

#include <algorithm>
#include <chrono>
#include <limits>
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
  double et_step = 0.5;         // gradient step a of et-digits' map z - a grad E
  double rbm_p = 0.1;           // Bernoulli prior of rbm's hidden units, in (0, 1)
  double rbm_scale = 0.03;      // rbm couplings W = rbm_scale * digits
};

// ---- floors ---------------------------------------------------------------------
// The floor of a problem: the dense products (GEMMs) one evaluation of its map
// on the whole batch must do, timed on their own. A solver iteration on B
// samples cannot be cheaper than this (on the same BLAS), so
// (solve seconds / sample evaluations) / (floor seconds / B) is the solver's
// and the map's overhead per sample-iteration over the bare products.
struct FloorTiming {
  std::string products;   // the products timed, with their shapes
  std::string note;       // what the floor leaves out / how it was estimated
  double flops = 0;       // 2 m k n summed over the products
  double seconds = std::numeric_limits<double>::quiet_NaN();  // median of the repetitions
  std::vector<double> samples;                                // each repetition, seconds
};

// Runs `body` once to warm up, then `repeats` times; the median wall time.
// `sink` is read after every run so that the products cannot be optimised away.
template <typename Body>
inline FloorTiming TimeFloor(std::string products, std::string note, double flops, int repeats,
                             Body&& body) {
  FloorTiming t;
  t.products = std::move(products);
  t.note = std::move(note);
  t.flops = flops;
  volatile double sink = 0;
  sink = sink + body();
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const auto start = std::chrono::steady_clock::now();
    const double v = body();
    t.samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    sink = sink + v;
  }
  std::vector<double> sorted = t.samples;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t m = sorted.size();
  t.seconds = m % 2 == 1 ? sorted[m / 2] : 0.5 * (sorted[m / 2 - 1] + sorted[m / 2]);
  return t;
}

inline std::string Shape(Index rows, Index cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// The two products of a Hopfield-type CCCP step on B queries with N stored
// patterns (n x N): scores S = X^T Z (N x n times n x B) and update X P
// (n x N times N x B), P a column-stochastic N x B matrix.
template <typename S>
FloorTiming HopfieldTypeFloor(const Matrix<S>& X, const Matrix<S>& Z, const std::string& x_name,
                              const std::string& note, int repeats) {
  const Index n = X.rows(), N = X.cols(), B = Z.cols();
  Matrix<S> scores(N, B), out(n, B);
  const Matrix<S> P = Matrix<S>::Constant(N, B, S(1) / static_cast<S>(N));
  const std::string t = x_name + "^T Z (" + Shape(N, n) + " * " + Shape(n, B) + ") + " + x_name + " P (" +
                        Shape(n, N) + " * " + Shape(N, B) + ")";
  return TimeFloor(t, note, 4.0 * double(n) * double(N) * double(B), repeats, [&] {
    scores.noalias() = X.transpose() * Z;
    out.noalias() = X * P;
    return static_cast<double>(scores(0, 0) + out(0, 0));
  });
}

template <typename S>
class ProblemT {
 public:
  virtual ~ProblemT() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  virtual const implicit::FixedPointMap<S>& map() const = 0;
  // The starting batch (n x B); solvers get a copy.
  const Matrix<S>& initial() const { return initial_; }
  // Times this problem's floor (see FloorTiming): the median of `repeats`
  // runs of the products one full-batch map evaluation must do, in S.
  virtual FloorTiming MeasureFloor(int repeats) const = 0;

 protected:
  Matrix<S> initial_;
};
using Problem = ProblemT<double>;

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
template <typename S>
class HopfieldDigitsProblemT : public ProblemT<S> {
 public:
  HopfieldDigitsProblemT(const implicit::DigitsDataset& digits, const ProblemSettings& s)
      : data_(MakeDigitPatterns(digits, s.patterns)), X_(data_.patterns.template cast<S>()),
        energy_(X_, Options(s.beta)), map_(energy_) {
    this->initial_ = data_.queries.template cast<S>();
    beta_ = s.beta;
  }
  std::string name() const override { return "hopfield-digits"; }
  std::string description() const override {
    return "modern Hopfield retrieval, " + std::to_string(data_.patterns.cols()) +
           " digits stored, bottom half of each query zeroed, beta " + Fmt(beta_);
  }
  const implicit::FixedPointMap<S>& map() const override { return map_; }
  const implicit::ModernHopfieldEnergy<S>& energy() const { return energy_; }
  const Matrix<double>& patterns() const { return data_.patterns; }
  FloorTiming MeasureFloor(int repeats) const override {
    return HopfieldTypeFloor<S>(X_, this->initial_, "X",
                                "the two GEMMs of one CCCP step xi <- X softmax(beta X^T xi) on all B "
                                "queries; the softmax (N x B exps) and the solver's vector work are extra",
                                repeats);
  }

 private:
  static typename implicit::ModernHopfieldEnergy<S>::Options Options(double beta) {
    typename implicit::ModernHopfieldEnergy<S>::Options o;
    o.beta = beta;
    o.learn_beta = false;
    return o;
  }
  DigitPatterns data_;
  Matrix<S> X_;
  implicit::ModernHopfieldEnergy<S> energy_;
  implicit::CccpMap<S> map_;
  double beta_ = 1;
};
using HopfieldDigitsProblem = HopfieldDigitsProblemT<double>;

// ---- sparse-hopfield ----------------------------------------------------------
template <typename S>
class SparseHopfieldProblemT : public ProblemT<S> {
 public:
  SparseHopfieldProblemT(const implicit::DigitsDataset& digits, const ProblemSettings& s)
      : data_(MakeDigitPatterns(digits, s.patterns)), X_(data_.patterns.template cast<S>()),
        energy_(X_, Options(s)), map_(energy_) {
    this->initial_ = data_.queries.template cast<S>();
    beta_ = s.beta;
    alpha_ = s.alpha;
  }
  std::string name() const override { return "sparse-hopfield"; }
  std::string description() const override {
    return "Hopfield-Fenchel-Young retrieval xi <- X entmax_" + Fmt(alpha_) + "(beta X^T xi), " +
           std::to_string(data_.patterns.cols()) + " digits, beta " + Fmt(beta_);
  }
  const implicit::FixedPointMap<S>& map() const override { return map_; }
  FloorTiming MeasureFloor(int repeats) const override {
    return HopfieldTypeFloor<S>(X_, this->initial_, "X",
                                "the two dense GEMMs of one step xi <- X entmax(beta X^T xi) on all B "
                                "queries; the entmax threshold search over N scores per query is extra "
                                "(and usually dominates)",
                                repeats);
  }

 private:
  static implicit::SparseHopfieldOptions Options(const ProblemSettings& s) {
    implicit::SparseHopfieldOptions o;
    o.alpha = s.alpha;
    o.beta = s.beta;
    return o;
  }
  DigitPatterns data_;
  Matrix<S> X_;
  implicit::SparseHopfieldEnergy<S> energy_;
  implicit::CccpMap<S> map_;
  double beta_ = 1, alpha_ = 1.5;
};
using SparseHopfieldProblem = SparseHopfieldProblemT<double>;

// ---- rbm ------------------------------------------------------------------------
// An RBM with Gaussian visible units and Bernoulli(p) hidden units, one hidden
// unit per stored digit with couplings w_mu = c x_mu, integrated out:
//   E(v) = 0.5 |v|^2 - sum_mu log(1 - p + p exp(w_mu . v)),
// CCCP map v <- W sigmoid(W^T v + logit p); queries: bottom half zeroed.
template <typename S>
class RbmProblemT : public ProblemT<S> {
 public:
  RbmProblemT(const implicit::DigitsDataset& digits, const ProblemSettings& s)
      : data_(MakeDigitPatterns(digits, s.patterns)), W_((data_.patterns * s.rbm_scale).template cast<S>()),
        energy_(W_, std::make_shared<implicit::BernoulliPrior<S>>(static_cast<S>(s.rbm_p)), Options()),
        map_(energy_) {
    this->initial_ = data_.queries.template cast<S>();
    p_ = s.rbm_p;
    scale_ = s.rbm_scale;
  }
  std::string name() const override { return "rbm"; }
  std::string description() const override {
    return "RBM-effective energy, Gaussian visible, " + std::to_string(data_.patterns.cols()) +
           " Bernoulli(" + Fmt(p_) + ") hidden units with couplings " + Fmt(scale_) +
           " x digit; CCCP map v <- W sigmoid(W^T v + logit p)";
  }
  const implicit::FixedPointMap<S>& map() const override { return map_; }
  FloorTiming MeasureFloor(int repeats) const override {
    return HopfieldTypeFloor<S>(W_, this->initial_, "W",
                                "the two GEMMs of one CCCP step v <- W sigmoid(W^T v + logit p) on all B "
                                "queries; the sigmoids and the solver's vector work are extra",
                                repeats);
  }

 private:
  static typename implicit::RbmEnergy<S>::Options Options() {
    typename implicit::RbmEnergy<S>::Options o;
    o.learn_weights = false;
    return o;
  }
  DigitPatterns data_;
  Matrix<S> W_;
  implicit::RbmEnergy<S> energy_;
  implicit::CccpMap<S> map_;
  double p_ = 0.5, scale_ = 1;
};
using RbmProblem = RbmProblemT<double>;

// ---- deq-tanh -----------------------------------------------------------------
// z = tanh(W z + U x + b): an explicit map (no energy), contraction when
// |W|_2 < 1 since |tanh'| <= 1.
template <typename S>
class TanhDeqMapT : public implicit::FixedPointMap<S> {
 public:
  TanhDeqMapT(Matrix<S> W, Matrix<S> U, Vector<S> b, Matrix<S> x) : W_(std::move(W)), b_(std::move(b)) {
    injection_ = U * x;
    injection_.colwise() += b_;
  }
  Index dimension() const override { return W_.rows(); }
  void Evaluate(implicit::ConstMatrixRef<S> z, implicit::MatrixRef<S> out) const override {
    out.noalias() = W_ * z;
    out += injection_;
    out = out.array().tanh().matrix();
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(implicit::ConstMatrixRef<S> z, implicit::ConstMatrixRef<S> v,
                             implicit::MatrixRef<S> out) const override {
    Matrix<S> f(z.rows(), z.cols());
    Evaluate(z, f);
    out.noalias() = W_ * v;
    out.array() *= S(1) - f.array().square();
  }
  void VectorJacobianProduct(implicit::ConstMatrixRef<S> z, implicit::ConstMatrixRef<S> u,
                             implicit::MatrixRef<S> out) const override {
    Matrix<S> f(z.rows(), z.cols());
    Evaluate(z, f);
    Matrix<S> du = ((S(1) - f.array().square()) * u.array()).matrix();
    out.noalias() = W_.transpose() * du;
  }
  const Matrix<S>& weights() const { return W_; }

 private:
  Matrix<S> W_;
  Vector<S> b_;
  Matrix<S> injection_;
};
using TanhDeqMap = TanhDeqMapT<double>;

template <typename S>
class DeqTanhProblemT : public ProblemT<S> {
 public:
  DeqTanhProblemT(const implicit::DigitsDataset& digits, const ProblemSettings& s) : map_(Build(digits, s)) {
    this->initial_ = Matrix<S>::Zero(kHidden, s.patterns);
    norm_ = s.spectral_norm;
  }
  std::string name() const override { return "deq-tanh"; }
  std::string description() const override {
    return "z = tanh(W z + U x + b), " + std::to_string(kHidden) + " units, |W|_2 = " + Fmt(norm_) +
           ", x = " + std::to_string(this->initial_.cols()) + " digits";
  }
  const implicit::FixedPointMap<S>& map() const override { return *map_; }
  FloorTiming MeasureFloor(int repeats) const override {
    const Matrix<S>& W = map_->weights();
    const Index B = this->initial_.cols();
    const Matrix<S> z = Matrix<S>::Constant(kHidden, B, S(0.5));
    Matrix<S> out(kHidden, B);
    return TimeFloor("W Z (" + Shape(kHidden, kHidden) + " * " + Shape(kHidden, B) + ")",
                     "the one GEMM of z <- tanh(W z + U x + b) on all B samples (U x + b is computed "
                     "once, at construction); the tanh and the solver's vector work are extra",
                     2.0 * double(kHidden) * double(kHidden) * double(B), repeats, [&] {
                       out.noalias() = W * z;
                       return static_cast<double>(out(0, 0));
                     });
  }

 private:
  static constexpr Index kHidden = 128;
  static std::unique_ptr<TanhDeqMapT<S>> Build(const implicit::DigitsDataset& digits,
                                               const ProblemSettings& s) {
    std::mt19937 gen(s.seed);
    Matrix<double> W = RandomGaussian(kHidden, kHidden, 1.0, gen);
    Eigen::JacobiSVD<Matrix<double>> svd(W);
    W *= s.spectral_norm / svd.singularValues()(0);
    Matrix<double> U = RandomGaussian(kHidden, 64, 1.0 / 8.0, gen);
    Vector<double> b = RandomGaussian(kHidden, 1, 0.1, gen);
    Matrix<double> x = digits.Scaled().leftCols(s.patterns);
    return std::make_unique<TanhDeqMapT<S>>(W.template cast<S>(), U.template cast<S>(),
                                            b.template cast<S>(), x.template cast<S>());
  }
  std::unique_ptr<TanhDeqMapT<S>> map_;
  double norm_ = 0.9;
};
using DeqTanhProblem = DeqTanhProblemT<double>;

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
template <typename S>
class DescentStepMapT : public implicit::FixedPointMap<S> {
 public:
  DescentStepMapT(const implicit::Energy<S>& energy, double step) : energy_(energy), step_(static_cast<S>(step)) {
    if (!(step > 0.0) || !std::isfinite(step))
      throw std::invalid_argument("DescentStepMap: step must be finite and > 0, got " + Fmt(step));
  }
  Index dimension() const override { return energy_.dimension(); }
  void Evaluate(implicit::ConstMatrixRef<S> z, implicit::MatrixRef<S> out) const override {
    energy_.DescentDirection(z, out);
    out = z - step_ * out;
  }
  const implicit::Energy<S>* energy() const override { return &energy_; }

 private:
  const implicit::Energy<S>& energy_;
  S step_;
};
using DescentStepMap = DescentStepMapT<double>;

// An Energy Transformer block with random fixed weights completing digits:
// tokens = W_e patch + position embedding (D = 16), the bottom 8 patches are
// free (initialised to their position embedding), the top 8 clamped; the map
// is the ET dynamics z - a dE/dg of the clamped energy (DescentStepMap).
template <typename S>
class EtDigitsProblemT : public ProblemT<S> {
 public:
  static constexpr Index kTokens = 16, kDim = 16;
  EtDigitsProblemT(const implicit::DigitsDataset& digits, const ProblemSettings& s)
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
    const Matrix<S> tokens_s = tokens.template cast<S>();
    clamped_.SetClamp(implicit::TokenMask<S>(free_tokens.template cast<S>(), kDim), tokens_s);
    map_ = std::make_unique<DescentStepMapT<S>>(clamped_, s.et_step);
    this->initial_ = tokens_s;
    step_ = s.et_step;
  }
  std::string name() const override { return "et-digits"; }
  std::string description() const override {
    return "Energy Transformer (16 tokens x 16 dims, 2 heads, 32 softmax memories, random weights) completing "
           "the bottom half of " + std::to_string(this->initial_.cols()) + " digits; map z - " + Fmt(step_) +
           " dE/dg";
  }
  const implicit::FixedPointMap<S>& map() const override { return *map_; }

  // An estimate: the products of one dE/dg evaluation, with T tokens of
  // dimension D per sample, H heads of dimension Y and M memories, over the
  // B*T token columns of the batch: the shared-weight projections as four
  // batched GEMMs ([W_K; W_Q] G, its transpose back, Xi^T G, Xi R) plus, per
  // sample and head, the three T x Y x T attention products (scores K^T Q,
  // Q P^T, K P), timed as a loop of small products.
  FloorTiming MeasureFloor(int repeats) const override {
    const auto& o = et_.options();
    const Index T = o.num_tokens, D = o.token_dim, H = o.num_heads, Y = o.head_dim, M = o.num_memories;
    const Index B = this->initial_.cols(), cols = B * T;
    const Eigen::Map<const Matrix<S>> G(this->initial_.data(), D, cols);  // the tokens, one per column
    std::mt19937 gen(7);
    const Matrix<S> wkq = RandomGaussian(2 * H * Y, D, 0.25, gen).template cast<S>();
    const Matrix<S> xi = RandomGaussian(D, M, 0.25, gen).template cast<S>();
    Matrix<S> KQ(2 * H * Y, cols), back(2 * H * Y, cols), grad(D, cols), mem(M, cols), scores(T, T),
        side(Y, T);
    back.setConstant(S(0.01));
    const Matrix<S> P = Matrix<S>::Constant(T, T, S(1) / static_cast<S>(T));
    const double flops = 2.0 * double(cols) * (2.0 * 2 * H * Y * D + 2.0 * M * D) +
                         2.0 * double(B) * double(H) * 3.0 * double(T) * double(Y) * double(T);
    const std::string products =
        "[W_K;W_Q] G (" + Shape(2 * H * Y, D) + " * " + Shape(D, cols) + "), its transpose back, Xi^T G (" +
        Shape(M, D) + " * " + Shape(D, cols) + "), Xi R (" + Shape(D, M) + " * " + Shape(M, cols) + ") + " +
        std::to_string(3 * H) + " x B attention products " + Shape(T, Y) + " * " + Shape(Y, T);
    return TimeFloor(
        products,
        "an estimate: the GEMMs of one full-batch dE/dg of the Energy Transformer (projections batched over "
        "all B*T tokens, attention products per sample); LayerNorm, softmaxes, the clamp and the step are "
        "extra. Compare with the map column (one full-batch map evaluation)",
        flops, repeats, [&] {
          KQ.noalias() = wkq * G;
          grad.noalias() = wkq.transpose() * back;
          mem.noalias() = xi.transpose() * G;
          grad.noalias() += xi * mem;
          double acc = 0;
          for (Index b = 0; b < B; ++b) {
            for (Index h = 0; h < H; ++h) {
              const auto K = KQ.block(h * Y, b * T, Y, T);
              const auto Q = KQ.block((H + h) * Y, b * T, Y, T);
              scores.noalias() = K.transpose() * Q;
              side.noalias() = Q * P.transpose();
              side.noalias() += K * P;
              acc += static_cast<double>(scores(0, 0) + side(0, 0));
            }
          }
          return acc + static_cast<double>(grad(0, 0));
        });
  }

 private:
  static typename implicit::EnergyTransformer<S>::Options EtOptions() {
    typename implicit::EnergyTransformer<S>::Options o;
    o.num_tokens = kTokens;
    o.token_dim = kDim;
    o.num_heads = 2;
    o.head_dim = 8;
    o.num_memories = 32;
    o.memory = implicit::EnergyTransformerMemory::kSoftmax;  // smooth (ReLU^2 makes limit cycles likelier)
    return o;
  }
  implicit::EnergyTransformer<S> et_;
  implicit::ClampedEnergy<S> clamped_;
  std::unique_ptr<DescentStepMapT<S>> map_;
  double step_ = 0.5;
};
using EtDigitsProblem = EtDigitsProblemT<double>;

// The problem `name` built in S (nullptr for an unknown name).
template <typename S>
std::unique_ptr<ProblemT<S>> MakeProblemOf(const std::string& name, const implicit::DigitsDataset& digits,
                                           const ProblemSettings& s) {
  if (name == "hopfield-digits") return std::make_unique<HopfieldDigitsProblemT<S>>(digits, s);
  if (name == "sparse-hopfield") return std::make_unique<SparseHopfieldProblemT<S>>(digits, s);
  if (name == "deq-tanh") return std::make_unique<DeqTanhProblemT<S>>(digits, s);
  if (name == "et-digits") return std::make_unique<EtDigitsProblemT<S>>(digits, s);
  if (name == "rbm") return std::make_unique<RbmProblemT<S>>(digits, s);
  return nullptr;
}

}  // namespace implicit_apps
