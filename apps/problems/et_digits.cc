// et-digits: an Energy Transformer block with random fixed weights completing
// digits cut into 2x2 patches.
#include "problems/registry.h"

#include "common/digit_patches.h"
#include "common/format.h"

#include <implicit/core/energy.h>
#include <implicit/core/gemm.h>
#include <implicit/layers/energy_transformer.h>

#include <Eigen/Dense>

#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

// The Energy Transformer's own dynamics as a fixed-point map:
//   f(z) = z - a D(z),  D = Energy::DescentDirection (dE/dg for the ET),
// whose fixed points are the stationary points of E. D has no exposed
// Jacobian, so the map offers no Jacobian products; energy() returns the
// energy for the minimisers. The clamps are per sample: blocks of samples are
// evaluated with theirs (EvaluateColumns, the solvers' active set).
template <typename S>
class DescentStepMapT : public implicit::FixedPointMap<S> {
 public:
  DescentStepMapT(const implicit::ClampedEnergy<S>& energy, double step) : energy_(energy), step_(static_cast<S>(step)) {
    if (!(step > 0.0) || !std::isfinite(step))
      throw std::invalid_argument("DescentStepMap: step must be finite and > 0, got " + Fmt(step));
  }
  Index dimension() const override { return energy_.dimension(); }
  void Evaluate(implicit::ConstMatrixRef<S> z, implicit::MatrixRef<S> out) const override {
    energy_.DescentDirection(z, out);
    out = z - step_ * out;
  }
  const implicit::Energy<S>* energy() const override { return &energy_; }
  bool SupportsColumnSubsets() const override { return true; }
  void EvaluateColumns(implicit::ConstMatrixRef<S> z, const std::vector<Index>& columns,
                       implicit::MatrixRef<S> out) const override {
    energy_.DescentDirectionColumns(z, columns, out);
    out = z - step_ * out;
  }
  // The step and the energy from one pass (DescentDirectionAndValue).
  void EvaluateWithEnergy(implicit::ConstMatrixRef<S> z, implicit::MatrixRef<S> out,
                          implicit::VectorRef<S> energies) const override {
    energy_.DescentDirectionAndValue(z, out, energies);
    out = z - step_ * out;
  }
  void EvaluateColumnsWithEnergy(implicit::ConstMatrixRef<S> z, const std::vector<Index>& columns,
                                 implicit::MatrixRef<S> out, implicit::VectorRef<S> energies) const override {
    energy_.DescentDirectionColumnsAndValue(z, columns, out, energies);
    out = z - step_ * out;
  }

 private:
  const implicit::ClampedEnergy<S>& energy_;
  S step_;
};

// An Energy Transformer block with random fixed weights completing digits:
// tokens = W_e patch + position embedding (D = 16), the bottom 8 patches are
// free (initialised to their position embedding), the top 8 clamped; the map
// is the ET dynamics z - a dE/dg of the clamped energy (DescentStepMap).
template <typename S>
class EtDigitsProblemT : public ProblemT<S> {
 public:
  static constexpr Index kTokens = 16, kDim = 16;
  EtDigitsProblemT(const implicit::DigitsDataset& digits, const ProblemSettings& s)
      : et_(EtOptions()), clamped_(et_), step_(s.Parameter("et-step")) {
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
    map_ = std::make_unique<DescentStepMapT<S>>(clamped_, step_);
    this->initial_ = tokens_s;
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
          // The dispatched products the layer runs (GemmOpInto), as in every build.
          using implicit::internal::GemmOpInto;
          GemmOpInto<S>(KQ, wkq, false, G, false);
          GemmOpInto<S>(grad, wkq, true, back, false);
          GemmOpInto<S>(mem, xi, true, G, false);
          GemmOpInto<S>(grad, xi, false, mem, false, S(1), S(1));
          double acc = 0;
          for (Index b = 0; b < B; ++b) {
            for (Index h = 0; h < H; ++h) {
              const auto K = KQ.block(h * Y, b * T, Y, T);
              const auto Q = KQ.block((H + h) * Y, b * T, Y, T);
              GemmOpInto<S>(scores, K, true, Q, false);
              GemmOpInto<S>(side, Q, false, P, true);
              GemmOpInto<S>(side, K, false, P, false, S(1), S(1));
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

const bool kEtDigitsRegistered = RegisterProblem<EtDigitsProblemT>([] {
  ProblemInfo p;
  p.name = "et-digits";
  p.order = 50;
  p.summary = "Energy Transformer block on 2x2 digit patches";
  p.floor = "an estimate of its GEMMs (see the notes implicit-bench prints)";
  p.bench_patterns = 500;
  p.parameters = {{"et-step", 0.5, "gradient step A of et-digits' map z - A grad E", "in (0, 1]",
                   [](double a) { return a > 0 && a <= 1; }}};
  return p;
}());

}  // namespace
}  // namespace implicit_apps
